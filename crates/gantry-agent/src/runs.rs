//! A node's confined runs, the runner's cgroup side: what each run's tasks were granted, the
//! limits its cgroup holds it to (raised as each task arrives, the agent's defaults standing
//! in for what a task did not ask), the end of a task's cgroup (killed until empty, the OOM
//! killer's part read, removed, and with its run's last task the run's too), and what each
//! run has used, reported until the controller has its exits.

use crate::cgroup::{Cgroups, Confinement, Limits};
use gantry_wire::{Launch, RunUsage};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one task was granted on this node (kept in its claim, so a restarted agent knows
/// its run's limits): 0 is "asked for none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
}

impl Grant {
    pub fn of(l: &Launch) -> Grant {
        Grant { cpu_milli: l.cpu_milli.unwrap_or(0), memory_bytes: l.memory_bytes.unwrap_or(0) }
    }
}

/// A task that asked for no memory is held to this much: enough for a script, a notebook
/// kernel or a data loader; a job that needs more says so, and the scheduler then counts it
/// against the node.
pub const MEMORY_UNASKED_BYTES_DEFAULT: u64 = 4 << 30;
/// A task that asked for no CPU gets one core: enough for a process feeding its GPU.
pub const CPU_UNASKED_MILLI_DEFAULT: u64 = 1000;
/// Processes and threads per task: a training process with data-loader workers runs a few
/// hundred threads; a fork bomb stops here, inside its own cgroup.
pub const PIDS_PER_TASK_DEFAULT: u64 = 4096;

/// What a confined task gets where its launch asked for nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// `None`: not limited.
    pub memory_unasked_bytes: Option<u64>,
    /// `None`: not limited.
    pub cpu_unasked_milli: Option<u64>,
    pub pids_per_task: u64,
}

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            memory_unasked_bytes: Some(MEMORY_UNASKED_BYTES_DEFAULT),
            cpu_unasked_milli: Some(CPU_UNASKED_MILLI_DEFAULT),
            pids_per_task: PIDS_PER_TASK_DEFAULT,
        }
    }
}

impl Defaults {
    /// A run's limits: the sum of its tasks' grants (a task that asked for none counts the
    /// default; an unlimited default leaves the run unlimited).
    pub fn limits(&self, grants: &BTreeMap<u32, Grant>) -> Limits {
        let sum = |asked: fn(&Grant) -> u64, unasked: Option<u64>| -> Option<u64> {
            grants.values().try_fold(0u64, |total, g| match asked(g) {
                0 => unasked.map(|d| total.saturating_add(d)),
                n => Some(total.saturating_add(n)),
            })
        };
        Limits {
            memory_bytes: sum(|g| g.memory_bytes, self.memory_unasked_bytes),
            cpu_milli: sum(|g| g.cpu_milli, self.cpu_unasked_milli),
            pids: self.pids_per_task.saturating_mul(grants.len().max(1) as u64),
        }
    }
}

/// A confined run on this node: its tasks' grants and which of them still run.
#[derive(Debug, Default)]
struct Run {
    grants: BTreeMap<u32, Grant>,
    live: BTreeSet<u32>,
    limits: Limits,
}

/// How often a leftover process of an ended task is killed again while its cgroup empties.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// After this long a cgroup that will not empty (a process in uninterruptible sleep) is
/// reported in the log; the task is still not over, and its GPU stays held.
const DRAIN_WARN_AFTER: Duration = Duration::from_secs(60);

/// The runs with a cgroup on this node, and the last measure of those whose cgroup is gone.
#[derive(Clone, Debug)]
pub struct Runs {
    confinement: Confinement,
    defaults: Defaults,
    live: Arc<Mutex<BTreeMap<(u64, u32), Run>>>,
    /// Runs whose cgroup is gone: their last measure, reported until their tasks are forgotten.
    finished: Arc<Mutex<BTreeMap<(u64, u32), RunUsage>>>,
}

impl Runs {
    pub fn new(confinement: Confinement, defaults: Defaults) -> Runs {
        Runs { confinement, defaults, live: Arc::default(), finished: Arc::default() }
    }

    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    pub fn cgroups(&self) -> Option<&Arc<Cgroups>> {
        self.confinement.cgroups()
    }

    /// Make the task's cgroup in its run's, the run's limits raised to include this task:
    /// the descriptors the monitor joins it through (none where the node does not confine).
    pub fn confine(&self, l: &Launch) -> Result<Vec<std::os::fd::OwnedFd>, crate::error::TaskRefused> {
        let Some(cg) = self.cgroups() else { return Ok(Vec::new()) };
        {
            let mut runs = self.live.lock().expect("not poisoned");
            let run = runs.entry((l.job, l.attempt)).or_default();
            run.grants.insert(l.rank, Grant::of(l));
            run.live.insert(l.rank);
            run.limits = self.defaults.limits(&run.grants);
            cg.set_run(l.job, l.attempt, &run.limits).map_err(|e| crate::error::TaskRefused::Confine {
                node: l.node.clone(),
                cgroup: format!("run {}/{}", l.job, l.attempt),
                message: format!("cannot hold run {}/{} to its limits: {e}", l.job, l.attempt),
            })?;
        }
        cg.add_task(l.job, l.attempt, l.rank, &l.devices)
            .map(|t| t.join)
            .map_err(|e| crate::error::TaskRefused::Confine { node: l.node.clone(), cgroup: e.at, message: e.message })
    }

    /// A task started before a restart, found in its cgroup: its run counts it again.
    pub fn adopt(&self, job: u64, attempt: u32, rank: u32, grant: Grant) {
        let mut live = self.live.lock().expect("not poisoned");
        let run = live.entry((job, attempt)).or_default();
        run.grants.insert(rank, grant);
        run.live.insert(rank);
        run.limits = self.defaults.limits(&run.grants);
    }

    /// An ended task's cgroup: kill what is left in it until it is empty (the task is over
    /// only then), read whether the OOM killer ended a process of it, remove it, and when it
    /// was its run's last here, the run's too. Returns whether the OOM killer acted.
    pub async fn drain(&self, job: u64, attempt: u32, rank: u32) -> bool {
        let Some(cg) = self.cgroups().cloned() else { return false };
        let started = std::time::Instant::now();
        let mut warned = false;
        loop {
            let cg = cg.clone();
            let populated = tokio::task::spawn_blocking(move || {
                let populated = cg.task_populated(job, attempt, rank);
                if populated {
                    cg.kill_task(job, attempt, rank);
                }
                populated
            })
            .await
            .unwrap_or(false);
            if !populated {
                break;
            }
            if !warned && started.elapsed() > DRAIN_WARN_AFTER {
                tracing::warn!(
                    job,
                    attempt,
                    rank,
                    "a process of an ended task does not die (uninterruptible sleep?): the task is not over"
                );
                warned = true;
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let oom = cg.task_oom_kills(job, attempt, rank) > 0;
        cg.remove_task(job, attempt, rank);
        self.task_done(job, attempt, rank);
        oom
    }

    /// A task that never started (refused after its cgroup was made): its cgroup goes.
    pub fn abandon(&self, job: u64, attempt: u32, rank: u32) {
        if let Some(cg) = self.cgroups() {
            cg.remove_task(job, attempt, rank);
            self.task_done(job, attempt, rank);
        }
    }

    /// A confined task is gone: when it was its run's last here, keep the run's final measure
    /// and remove the run's cgroup.
    fn task_done(&self, job: u64, attempt: u32, rank: u32) {
        let Some(cg) = self.cgroups() else { return };
        let last = {
            let mut runs = self.live.lock().expect("not poisoned");
            let Some(run) = runs.get_mut(&(job, attempt)) else { return };
            run.live.remove(&rank);
            if !run.live.is_empty() {
                return;
            }
            runs.remove(&(job, attempt))
        };
        if let Some(run) = last {
            let usage = run_usage(cg, job, attempt, &run.limits);
            self.finished.lock().expect("not poisoned").insert((job, attempt), usage);
            if !cg.remove_run(job, attempt) {
                tracing::warn!(job, attempt, "the run's cgroup could not be removed");
            }
        }
    }

    /// What each run here has used: the live ones measured now, the ended ones as they ended.
    pub fn usage(&self) -> Vec<RunUsage> {
        let mut all: Vec<RunUsage> = match self.cgroups() {
            Some(cg) => self
                .live
                .lock()
                .expect("not poisoned")
                .iter()
                .map(|(&(job, attempt), run)| run_usage(cg, job, attempt, &run.limits))
                .collect(),
            None => Vec::new(),
        };
        all.extend(self.finished.lock().expect("not poisoned").values().cloned());
        all.sort_by_key(|u| (u.job, u.attempt));
        all
    }

    /// The controller has every exit of run `job`/`attempt` here: its measure is no longer
    /// reported.
    pub fn forget_usage(&self, job: u64, attempt: u32) {
        self.finished.lock().expect("not poisoned").remove(&(job, attempt));
    }

    /// Kill and remove the cgroups of runs this agent no longer has (`keep`: the runs its
    /// claims still hold): what a crash or an older agent left behind.
    pub fn sweep(&self, keep: &BTreeSet<(u64, u32)>) {
        let Some(cg) = self.cgroups() else { return };
        for (job, attempt) in cg.runs() {
            if keep.contains(&(job, attempt)) {
                continue;
            }
            for rank in cg.run_tasks(job, attempt) {
                cg.kill_task(job, attempt, rank);
            }
            tracing::info!(
                job,
                attempt,
                "a run's cgroup from before the restart, with no claim here: killed and removed"
            );
            for _ in 0..50 {
                if cg.remove_run(job, attempt) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A run's measure now, with the limits it is held to.
fn run_usage(cg: &Cgroups, job: u64, attempt: u32, limits: &Limits) -> RunUsage {
    let used = cg.run_usage(job, attempt);
    let limits = cg.applied(limits);
    let used = gantry_types::Use {
        memory_peak_bytes: used.memory_peak_bytes,
        cpu_ms: used.cpu_ns.map(|ns| ns / 1_000_000),
        memory_limit_bytes: limits.memory_bytes,
        cpu_limit_milli: limits.cpu_milli,
    };
    RunUsage { job, attempt, used }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_limits_are_its_tasks_grants_with_defaults_for_what_was_not_asked() {
        let d = Defaults { memory_unasked_bytes: Some(100), cpu_unasked_milli: None, pids_per_task: 10 };
        let grants: BTreeMap<u32, Grant> =
            [(0, Grant { cpu_milli: 500, memory_bytes: 1000 }), (1, Grant { cpu_milli: 0, memory_bytes: 0 })].into();
        let limits = d.limits(&grants);
        assert_eq!(limits.memory_bytes, Some(1100), "the unasked task counts the default");
        assert_eq!(limits.cpu_milli, None, "an unlimited default leaves the run unlimited");
        assert_eq!(limits.pids, 20);
        let asked: BTreeMap<u32, Grant> = [(0, Grant { cpu_milli: 2000, memory_bytes: 1 << 30 })].into();
        assert_eq!(d.limits(&asked).cpu_milli, Some(2000));
    }
}
