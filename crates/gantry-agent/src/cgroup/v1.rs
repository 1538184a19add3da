//! cgroup v1: one mount per controller (`memory`, `cpu`, `cpuacct`, `pids`, `devices`,
//! `freezer`; some may share a mount), the same relative path made in each. Limits go on the
//! job's cgroup, device rules on each task's (`devices.deny`, one line per denied minor), and
//! a task is killed by freezing its cgroup (so nothing forks meanwhile), SIGKILLing every
//! process listed, and thawing it.

use super::devices::{Allowed, DeviceRules};
use super::hierarchy::{
    CPU_PERIOD_US, Hierarchy, Limits, Mount, Usage, Version, cpu_quota_us, keyed, read_pids, read_u64, signal, subdirs,
    write,
};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The controllers the agent uses, in the order it names them.
pub const WANTED: [&str; 6] = ["memory", "cpu", "cpuacct", "pids", "devices", "freezer"];

/// How long a freeze may take before the kill goes ahead without it (a process in
/// uninterruptible sleep holds `FREEZING`).
const FREEZE_WAIT_MS_MAX: u64 = 500;

#[derive(Debug)]
pub struct V1 {
    /// Controller → its mount point.
    mounts: BTreeMap<&'static str, PathBuf>,
}

impl V1 {
    /// The controllers of [`WANTED`] that `mountinfo` shows mounted (`None` if none is).
    pub fn from_mounts(mounts: &[Mount]) -> Option<V1> {
        let mut found = BTreeMap::new();
        for mount in mounts.iter().filter(|m| m.fstype == "cgroup") {
            for controller in WANTED {
                if mount.options.iter().any(|o| o == controller) {
                    found.entry(controller).or_insert_with(|| mount.point.clone());
                }
            }
        }
        (!found.is_empty()).then_some(V1 { mounts: found })
    }

    /// A hierarchy over explicit mounts (tests).
    pub fn with_mounts(mounts: BTreeMap<&'static str, PathBuf>) -> V1 {
        V1 { mounts }
    }

    fn at(&self, controller: &str, rel: &str) -> Option<PathBuf> {
        self.mounts.get(controller).map(|m| m.join(rel))
    }

    /// Each distinct mount once (co-mounted controllers share a directory).
    fn distinct(&self) -> Vec<&Path> {
        let mut all: Vec<&Path> = self.mounts.values().map(PathBuf::as_path).collect();
        all.sort();
        all.dedup();
        all
    }

    /// The directory whose `cgroup.procs` tells who is in `rel` (any mount holds every
    /// process of the cgroup; the freezer's first, since kills go through it).
    fn tracking(&self, rel: &str) -> Option<PathBuf> {
        ["freezer", "pids", "memory", "cpu", "devices", "cpuacct"].iter().find_map(|c| self.at(c, rel))
    }

    fn freeze(&self, rel: &str, state: &str) -> bool {
        let Some(dir) = self.at("freezer", rel) else { return false };
        if write(&dir.join("freezer.state"), state).is_err() {
            return false;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(FREEZE_WAIT_MS_MAX);
        while std::time::Instant::now() < deadline {
            if std::fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == state) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }
}

impl Hierarchy for V1 {
    fn version(&self) -> Version {
        Version::V1
    }

    fn controllers(&self) -> Vec<&'static str> {
        WANTED.iter().copied().filter(|c| self.mounts.contains_key(c)).collect()
    }

    fn missing(&self) -> Vec<&'static str> {
        WANTED.iter().copied().filter(|c| !self.mounts.contains_key(c)).collect()
    }

    fn make(&self, rel: &str) -> std::io::Result<()> {
        for mount in self.distinct() {
            std::fs::create_dir_all(mount.join(rel))?;
        }
        Ok(())
    }

    fn limit(&self, rel: &str, limits: &Limits) -> std::io::Result<()> {
        if let (Some(dir), Some(bytes)) = (self.at("memory", rel), limits.memory_bytes) {
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            // mem+swap may never be below mem: raise it first, lower it last.
            let current = read_u64(&dir.join("memory.limit_in_bytes")).unwrap_or(u64::MAX);
            if memsw.exists() && bytes > current {
                write(&memsw, &bytes.to_string())?;
            }
            write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
            if memsw.exists() {
                // Swap off for the job: memory and swap together are held to the same limit.
                write(&memsw, &bytes.to_string())?;
            } else {
                let _ = write(&dir.join("memory.swappiness"), "0");
            }
        }
        if let (Some(dir), Some(milli)) = (self.at("cpu", rel), limits.cpu_milli) {
            write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
            write(&dir.join("cpu.cfs_quota_us"), &cpu_quota_us(milli).to_string())?;
        }
        if let Some(dir) = self.at("pids", rel) {
            write(&dir.join("pids.max"), &limits.pids.to_string())?;
        }
        Ok(())
    }

    fn devices(&self, rel: &str, rules: &DeviceRules, allowed: &Allowed) -> Result<(), crate::error::DeviceError> {
        let Some(dir) = self.at("devices", rel) else { return Ok(()) };
        let deny = dir.join("devices.deny");
        for line in rules.v1_denials(allowed) {
            let at = deny.display().to_string();
            write(&deny, &line).map_err(|e| crate::error::DeviceError::new(&at, format!("{at}: {line}: {e}")))?;
        }
        Ok(())
    }

    fn join_fds(&self, rel: &str) -> std::io::Result<Vec<OwnedFd>> {
        self.distinct()
            .into_iter()
            .map(|m| std::fs::OpenOptions::new().write(true).open(m.join(rel).join("cgroup.procs")).map(OwnedFd::from))
            .collect()
    }

    fn procs(&self, rel: &str) -> Vec<i32> {
        self.tracking(rel).map(|d| read_pids(&d.join("cgroup.procs"))).unwrap_or_default()
    }

    fn populated(&self, rel: &str) -> bool {
        !self.procs(rel).is_empty()
    }

    fn kill(&self, rel: &str) -> std::io::Result<()> {
        // Frozen, nothing in it can fork while its processes are listed and killed; a freeze
        // that does not complete in time (uninterruptible sleep) does not stop the kill.
        let _frozen = self.freeze(rel, "FROZEN");
        for pid in self.procs(rel) {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if let Some(dir) = self.at("freezer", rel) {
            // Killed while frozen, they die as they thaw.
            let _ = write(&dir.join("freezer.state"), "THAWED");
        }
        Ok(())
    }

    fn oom_kills(&self, rel: &str) -> u64 {
        let Some(dir) = self.at("memory", rel) else { return 0 };
        std::fs::read_to_string(dir.join("memory.oom_control")).ok().and_then(|t| keyed(&t, "oom_kill")).unwrap_or(0)
    }

    fn usage(&self, rel: &str) -> Usage {
        Usage {
            memory_peak_bytes: self.at("memory", rel).and_then(|d| read_u64(&d.join("memory.max_usage_in_bytes"))),
            cpu_ns: self.at("cpuacct", rel).and_then(|d| read_u64(&d.join("cpuacct.usage"))),
        }
    }

    fn remove(&self, rel: &str) -> std::io::Result<()> {
        let mut last = Ok(());
        for mount in self.distinct() {
            match std::fs::remove_dir(mount.join(rel)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => last = Err(e),
            }
        }
        last
    }

    fn children(&self, rel: &str) -> Vec<String> {
        self.tracking(rel).map(|d| subdirs(&d)).unwrap_or_default()
    }

    /// The mounts for messages: `/sys/fs/cgroup/{memory,cpu,…}` where they share a parent.
    fn root(&self) -> PathBuf {
        let mounts = self.distinct();
        let parents: Vec<Option<&Path>> = mounts.iter().map(|m| m.parent()).collect();
        match (parents.first().copied().flatten(), parents.windows(2).all(|w| w[0] == w[1])) {
            (Some(parent), true) if mounts.len() > 1 => {
                let names: Vec<String> =
                    mounts.iter().filter_map(|m| m.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
                parent.join(format!("{{{}}}", names.join(",")))
            }
            _ => self.tracking("").unwrap_or_default(),
        }
    }
}
