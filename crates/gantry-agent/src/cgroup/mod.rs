//! Confinement: every run of a job on this node is a cgroup, and every task of it a cgroup
//! inside that one, holding every process the task ever starts (`setsid`, double forks and
//! `nohup` included: a process cannot leave its cgroup). So a task has ended only when its
//! cgroup is empty; stopping it kills the cgroup, with no survivor; and the run's cgroup holds
//! it to what it was granted on this node — its memory (swap off), its CPU (a quota), a
//! bounded number of processes, and only its own GPU devices ([`devices`]).
//!
//! The tree, under each hierarchy's mount: `<parent>/job-<id>-<attempt>/task-<rank>`, where
//! `<parent>` is the agent's own (`gantry/<node>-<instance>` by default, so two agents on one
//! machine — the in-process agents of `serve --local`, two test controllers — never share
//! one). Limits are on the run's cgroup (a job's tasks on a node share what the job asked for
//! there), device rules on each task's.
//!
//! Two hierarchies, one interface ([`Hierarchy`]): cgroup v2 ([`v2`]: one tree, a BPF device
//! program, `cgroup.kill`) and cgroup v1 ([`v1`]: a mount per controller, `devices.deny`,
//! kills through the freezer). The agent picks one at start ([`detect`]) and says which, and
//! which controllers it has, in its banner and to the controller (`gantry nodes`); where it
//! cannot confine (not root, no writable hierarchy, `--confinement off`) it says `unconfined`
//! and why, and runs tasks as before — never silently.

pub mod bpf;
pub mod devices;
pub mod hierarchy;
pub mod v1;
pub mod v2;

use crate::error::DeviceError;
use hierarchy::signal;
pub use hierarchy::{CPU_PERIOD_US, Hierarchy, Limits, Mount, Usage, Version, cpu_quota_us, parse_mountinfo};

use devices::DeviceRules;
use gantry_wire::{Confinement as Report, ConfinementKind};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

/// Which confinement the operator asked for (`--confinement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// cgroup v2 where `/sys/fs/cgroup` is one, else cgroup v1 where its controllers are
    /// mounted, else a cgroup2 mount found elsewhere.
    #[default]
    Auto,
    V1,
    V2,
    /// None: tasks run unconfined (and every place that shows the node says so).
    Off,
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Choice, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "cgroup-v1" | "v1" => Ok(Choice::V1),
            "cgroup-v2" | "v2" => Ok(Choice::V2),
            "off" => Ok(Choice::Off),
            other => Err(format!("{other:?}: use auto, cgroup-v1, cgroup-v2 or off")),
        }
    }
}

/// How this agent confines its tasks.
#[derive(Clone, Debug)]
pub enum Confinement {
    Cgroups(Arc<Cgroups>),
    /// Tasks run unconfined; the reason, for every place that shows it.
    Unconfined(String),
}

impl Confinement {
    /// As the agent reports it to the controller.
    pub fn report(&self) -> Report {
        match self {
            Confinement::Cgroups(c) => Report {
                kind: match c.hierarchy.version() {
                    Version::V1 => ConfinementKind::CgroupV1,
                    Version::V2 => ConfinementKind::CgroupV2,
                },
                controllers: c.hierarchy.controllers().iter().map(|s| s.to_string()).collect(),
                missing: c.hierarchy.missing().iter().map(|s| s.to_string()).collect(),
                note: format!("{}", c.hierarchy.root().join(&c.parent).display()),
            },
            Confinement::Unconfined(why) => Report {
                kind: ConfinementKind::Unconfined,
                controllers: Vec::new(),
                missing: Vec::new(),
                note: why.clone(),
            },
        }
    }

    pub fn cgroups(&self) -> Option<&Arc<Cgroups>> {
        match self {
            Confinement::Cgroups(c) => Some(c),
            Confinement::Unconfined(_) => None,
        }
    }
}

/// The agent's cgroups: its hierarchy, its parent cgroup, the node's device rules.
#[derive(Debug)]
pub struct Cgroups {
    hierarchy: Box<dyn Hierarchy>,
    /// The agent's own cgroup, relative to the mount (`gantry/<node>-<instance>`).
    parent: String,
    pub rules: DeviceRules,
}

/// Pick and check the hierarchy (`parent` is made, or the node is unconfined and says why).
pub fn detect(choice: Choice, parent: &str, rules: DeviceRules) -> Confinement {
    if choice == Choice::Off {
        return Confinement::Unconfined("confinement is turned off (--confinement off)".into());
    }
    if !nix::unistd::geteuid().is_root() {
        return Confinement::Unconfined("the agent is not root, so it cannot make cgroups".into());
    }
    let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let unified = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .min_by_key(|m| m.point != Path::new("/sys/fs/cgroup"))
        .map(|m| m.point.clone());
    let pure_v2 = unified.as_deref() == Some(Path::new("/sys/fs/cgroup"));
    let hierarchy: Box<dyn Hierarchy> = match (choice, v1::V1::from_mounts(&mounts), unified) {
        (Choice::Auto, _, Some(root)) if pure_v2 => Box::new(v2::V2::at(&root)),
        (Choice::Auto | Choice::V1, Some(v1), _) => Box::new(v1),
        (Choice::Auto | Choice::V2, _, Some(root)) => Box::new(v2::V2::at(&root)),
        (Choice::V1, None, _) => return Confinement::Unconfined("no cgroup v1 controller is mounted".into()),
        _ => return Confinement::Unconfined("no cgroup hierarchy is mounted".into()),
    };
    Confinement::from_hierarchy(hierarchy, parent, rules)
}

impl Confinement {
    /// Confinement through `hierarchy` if the agent can make its parent cgroup there.
    pub fn from_hierarchy(hierarchy: Box<dyn Hierarchy>, parent: &str, rules: DeviceRules) -> Confinement {
        if let Err(e) = hierarchy.make(parent) {
            return Confinement::Unconfined(format!(
                "cannot make the cgroup {}: {e}",
                hierarchy.root().join(parent).display()
            ));
        }
        Confinement::Cgroups(Arc::new(Cgroups { hierarchy, parent: parent.to_string(), rules }))
    }
}

/// A task's cgroup, made and confined, and the files a process writes to join it.
#[derive(Debug)]
pub struct TaskCgroup {
    pub join: Vec<OwnedFd>,
}

impl Cgroups {
    fn run(&self, job: u64, attempt: u32) -> String {
        format!("{}/job-{job}-{attempt}", self.parent)
    }

    fn task(&self, job: u64, attempt: u32, rank: u32) -> String {
        format!("{}/task-{rank}", self.run(job, attempt))
    }

    pub fn version(&self) -> Version {
        self.hierarchy.version()
    }

    /// `limits` as this host applies them: a limit whose controller it lacks is not applied
    /// (and must not be reported as if it were).
    pub fn applied(&self, limits: &Limits) -> Limits {
        let missing = self.hierarchy.missing();
        Limits {
            memory_bytes: limits.memory_bytes.filter(|_| !missing.contains(&"memory")),
            cpu_milli: limits.cpu_milli.filter(|_| !missing.contains(&"cpu")),
            pids: limits.pids,
        }
    }

    /// Make (or find) a run's cgroup and hold it to `limits`.
    pub fn set_run(&self, job: u64, attempt: u32, limits: &Limits) -> std::io::Result<()> {
        let rel = self.run(job, attempt);
        self.hierarchy.make(&rel)?;
        self.hierarchy.limit(&rel, limits)
    }

    /// Make a task's cgroup in its run's, confined to the GPU devices `devices` (the
    /// launch's names) allow.
    pub fn add_task(&self, job: u64, attempt: u32, rank: u32, devices: &[String]) -> Result<TaskCgroup, DeviceError> {
        let rel = self.task(job, attempt, rank);
        let at = self.hierarchy.root().join(&rel).display().to_string();
        let failed = |message: String| DeviceError::new(at.clone(), message);
        self.hierarchy.make(&rel).map_err(|e| failed(format!("cannot make the cgroup {at}: {e}")))?;
        let allowed = self.rules.allowed(devices, crate::mig_nvml::instance_ids);
        self.hierarchy
            .devices(&rel, &self.rules, &allowed)
            .map_err(|e| failed(format!("device rules for {at}: {e}")))?;
        let join = self.hierarchy.join_fds(&rel).map_err(|e| failed(format!("{at}: {e}")))?;
        Ok(TaskCgroup { join })
    }

    pub fn task_procs(&self, job: u64, attempt: u32, rank: u32) -> Vec<i32> {
        self.hierarchy.procs(&self.task(job, attempt, rank))
    }

    pub fn task_populated(&self, job: u64, attempt: u32, rank: u32) -> bool {
        self.hierarchy.populated(&self.task(job, attempt, rank))
    }

    /// Does the task's cgroup exist?
    pub fn task_exists(&self, job: u64, attempt: u32, rank: u32) -> bool {
        self.hierarchy.children(&self.run(job, attempt)).contains(&format!("task-{rank}"))
    }

    /// Send `signal` to every process of the task (a stop's first, polite step).
    pub fn signal_task(&self, job: u64, attempt: u32, rank: u32, sig: nix::sys::signal::Signal) {
        for pid in self.task_procs(job, attempt, rank) {
            signal(pid, sig);
        }
    }

    pub fn kill_task(&self, job: u64, attempt: u32, rank: u32) {
        let rel = self.task(job, attempt, rank);
        if let Err(e) = self.hierarchy.kill(&rel) {
            tracing::warn!(job, attempt, rank, error = %e, "cannot kill the task's cgroup");
        }
    }

    pub fn task_oom_kills(&self, job: u64, attempt: u32, rank: u32) -> u64 {
        self.hierarchy.oom_kills(&self.task(job, attempt, rank))
    }

    pub fn run_usage(&self, job: u64, attempt: u32) -> Usage {
        self.hierarchy.usage(&self.run(job, attempt))
    }

    pub fn remove_task(&self, job: u64, attempt: u32, rank: u32) {
        let _ = self.hierarchy.remove(&self.task(job, attempt, rank));
    }

    /// Remove a run's cgroup (its tasks' first): `false` if one still holds a process.
    pub fn remove_run(&self, job: u64, attempt: u32) -> bool {
        let rel = self.run(job, attempt);
        for child in self.hierarchy.children(&rel) {
            let _ = self.hierarchy.remove(&format!("{rel}/{child}"));
        }
        self.hierarchy.remove(&rel).is_ok()
    }

    /// The runs with a cgroup under the agent's parent: (job, attempt).
    pub fn runs(&self) -> Vec<(u64, u32)> {
        let mut runs: Vec<(u64, u32)> = self
            .hierarchy
            .children(&self.parent)
            .iter()
            .filter_map(|name| {
                let (job, attempt) = name.strip_prefix("job-")?.split_once('-')?;
                Some((job.parse().ok()?, attempt.parse().ok()?))
            })
            .collect();
        runs.sort_unstable();
        runs
    }

    /// The ranks of a run's task cgroups.
    pub fn run_tasks(&self, job: u64, attempt: u32) -> Vec<u32> {
        let mut ranks: Vec<u32> = self
            .hierarchy
            .children(&self.run(job, attempt))
            .iter()
            .filter_map(|n| n.strip_prefix("task-")?.parse().ok())
            .collect();
        ranks.sort_unstable();
        ranks
    }

    /// Remove the agent's parent cgroup if nothing is left in it (the agent stops).
    pub fn remove_parent_if_empty(&self) {
        if self.hierarchy.children(&self.parent).is_empty() {
            let _ = self.hierarchy.remove(&self.parent);
        }
    }

    /// Which job's run a process belongs to, from `/proc/<pid>/cgroup` (GPU samples are
    /// attributed to jobs by it).
    pub fn job_of(&self, pid: u32) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let marker = format!("{}/job-", self.parent);
        text.lines().find_map(|line| {
            let path = line.splitn(3, ':').nth(2)?;
            let rest = &path[path.find(&marker)? + marker.len()..];
            rest.split('-').next()?.parse().ok()
        })
    }
}

#[cfg(test)]
mod tests;
