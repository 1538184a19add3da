//! cgroup v2: one tree (the `cgroup2` mount). The controllers the agent uses (`memory`,
//! `cpu`, `pids`) are enabled down the path to each job's cgroup (`cgroup.subtree_control`),
//! limits go on the job's cgroup, a device program (see [`super::bpf`]) on each task's, and a
//! task is killed with `cgroup.kill` (the kernel kills every process in it, new forks
//! included). A controller the mount does not offer (a hybrid host whose memory controller is
//! on v1) is named as missing: its limit is not applied, and the agent says so.

use super::devices::{Allowed, DeviceRules};
use super::hierarchy::{
    CPU_PERIOD_US, Hierarchy, Limits, Usage, Version, cpu_quota_us, keyed, read_pids, read_u64, signal, subdirs, write,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The controllers the agent enables, in the order it names them.
pub const WANTED: [&str; 3] = ["memory", "cpu", "pids"];

#[derive(Debug)]
pub struct V2 {
    /// The mount point.
    root: PathBuf,
    /// Which of [`WANTED`] the mount offers (`cgroup.controllers` at its root).
    available: Vec<&'static str>,
}

impl V2 {
    pub fn at(root: &Path) -> V2 {
        let offered = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        let available = WANTED.iter().copied().filter(|c| offered.split_whitespace().any(|o| o == *c)).collect();
        V2 { root: root.to_path_buf(), available }
    }

    /// Enable the available controllers for the children of `dir`.
    fn enable(&self, dir: &Path) -> std::io::Result<()> {
        if self.available.is_empty() {
            return Ok(());
        }
        let on = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        let want: Vec<String> = self
            .available
            .iter()
            .filter(|c| !on.split_whitespace().any(|o| o == **c))
            .map(|c| format!("+{c}"))
            .collect();
        if want.is_empty() {
            return Ok(());
        }
        write(&dir.join("cgroup.subtree_control"), &want.join(" "))
    }

    fn has(&self, controller: &str) -> bool {
        self.available.contains(&controller)
    }
}

impl Hierarchy for V2 {
    fn version(&self) -> Version {
        Version::V2
    }

    fn controllers(&self) -> Vec<&'static str> {
        let mut all = self.available.clone();
        all.extend(["devices", "kill"]);
        all
    }

    fn missing(&self) -> Vec<&'static str> {
        WANTED.iter().copied().filter(|c| !self.has(c)).collect()
    }

    fn make(&self, rel: &str) -> std::io::Result<()> {
        let mut dir = self.root.clone();
        for part in Path::new(rel).components() {
            self.enable(&dir)?;
            dir.push(part);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn limit(&self, rel: &str, limits: &Limits) -> std::io::Result<()> {
        let dir = self.root.join(rel);
        // The job's tasks are its children: they need its controllers for their own counters.
        self.enable(&dir)?;
        if let (true, Some(bytes)) = (self.has("memory"), limits.memory_bytes) {
            write(&dir.join("memory.max"), &bytes.to_string())?;
            if dir.join("memory.swap.max").exists() {
                write(&dir.join("memory.swap.max"), "0")?;
            }
        }
        if let (true, Some(milli)) = (self.has("cpu"), limits.cpu_milli) {
            write(&dir.join("cpu.max"), &format!("{} {}", cpu_quota_us(milli), CPU_PERIOD_US))?;
        }
        if self.has("pids") {
            write(&dir.join("pids.max"), &limits.pids.to_string())?;
        }
        Ok(())
    }

    fn devices(&self, rel: &str, rules: &DeviceRules, allowed: &Allowed) -> Result<(), crate::error::DeviceError> {
        super::bpf::confine(&self.root.join(rel), allowed, rules.caps_major())
    }

    fn join_fds(&self, rel: &str) -> std::io::Result<Vec<OwnedFd>> {
        let file = std::fs::OpenOptions::new().write(true).open(self.root.join(rel).join("cgroup.procs"))?;
        Ok(vec![file.into()])
    }

    fn procs(&self, rel: &str) -> Vec<i32> {
        read_pids(&self.root.join(rel).join("cgroup.procs"))
    }

    fn populated(&self, rel: &str) -> bool {
        match std::fs::read_to_string(self.root.join(rel).join("cgroup.events")) {
            Ok(events) => keyed(&events, "populated").is_some_and(|p| p > 0),
            Err(_) => !self.procs(rel).is_empty(),
        }
    }

    fn kill(&self, rel: &str) -> std::io::Result<()> {
        let dir = self.root.join(rel);
        if !dir.exists() {
            // Already emptied and removed: nothing to kill.
            return Ok(());
        }
        if dir.join("cgroup.kill").exists() {
            return write(&dir.join("cgroup.kill"), "1");
        }
        // Before Linux 5.14: freeze, kill what is listed, thaw.
        let _ = write(&dir.join("cgroup.freeze"), "1");
        for pid in self.procs(rel) {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
        write(&dir.join("cgroup.freeze"), "0")
    }

    fn oom_kills(&self, rel: &str) -> u64 {
        std::fs::read_to_string(self.root.join(rel).join("memory.events"))
            .ok()
            .and_then(|t| keyed(&t, "oom_kill"))
            .unwrap_or(0)
    }

    fn usage(&self, rel: &str) -> Usage {
        let dir = self.root.join(rel);
        Usage {
            memory_peak_bytes: read_u64(&dir.join("memory.peak")),
            cpu_ns: std::fs::read_to_string(dir.join("cpu.stat"))
                .ok()
                .and_then(|t| keyed(&t, "usage_usec"))
                .map(|us| us.saturating_mul(1000)),
        }
    }

    fn remove(&self, rel: &str) -> std::io::Result<()> {
        match std::fs::remove_dir(self.root.join(rel)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn children(&self, rel: &str) -> Vec<String> {
        subdirs(&self.root.join(rel))
    }

    fn root(&self) -> PathBuf {
        self.root.clone()
    }
}
