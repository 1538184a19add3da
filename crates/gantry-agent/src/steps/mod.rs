//! Job steps inside a batch allocation, as Slurm runs them: a batch job holds its nodes'
//! GPUs, CPUs and memory as one allocation; its script runs once, on the first node, and
//! `srun` in it starts tasks across the allocation and waits for them.
//!
//! Three roles, all of them the `gantry` binary inside the job's own tasks (so inside the
//! job's cgroups, as the job's account — nothing here runs as root):
//! - the **batch host** ([`batch`]) runs the script on the first node, with `srun` on its
//!   `PATH`, and is the hub the other nodes report to;
//! - a **step host** ([`host`]) on each other node reports to the hub, then runs the tasks
//!   `srun` sends it, streaming their output back, until the batch host goes away;
//! - **`srun`** ([`srun`]) lays the step's tasks out over the allocation, runs the first
//!   node's itself and the others' through their step hosts, prints their output and exits
//!   with the highest exit code.
//!
//! Every connection proves it belongs to the run: the controller gives each run a step key
//! (`GANTRY_STEP_KEY`, in the environment of the run's tasks only), and each side answers the
//! other's fresh challenge with an HMAC under it ([`auth`]); the key itself never crosses the
//! network. Node names must resolve as host names (as for `MASTER_ADDR`).

pub mod auth;
pub mod batch;
pub mod exec;
pub mod host;
pub mod records;
pub mod srun;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variables the batch host hands its script (and so `srun`): where the allocation's
/// step files are, and its shape.
pub const STEP_DIR_VAR: &str = "GANTRY_STEP_DIR";
/// The run's step key, set by the agent.
pub const STEP_KEY_VAR: &str = "GANTRY_STEP_KEY";

/// How long a step host keeps trying to reach its hub, and `srun` waits for the step hosts
/// of the nodes it needs (a run's tasks start within a heartbeat of each other).
pub const REPORT_WITHIN_S: u64 = 60;

/// Connections not yet proven to hold the run's step key, at once, per hub or step host. Past
/// it a connection is closed unread: the ports listen on every interface, and a flood from
/// anywhere must not spend the job's threads (its cgroup's pids limit) while each waits out
/// its 10 s. A proven connection stops counting, so an allocation of any size fits.
pub const UNPROVEN_CONNECTIONS_MAX: usize = 32;

/// A connection counted among the unproven until it proves itself (drop it then) or ends.
#[derive(Debug)]
pub struct Unproven(Arc<AtomicUsize>);

impl Unproven {
    /// Count one more unproven connection, unless [`UNPROVEN_CONNECTIONS_MAX`] are already.
    pub fn admit(count: &Arc<AtomicUsize>) -> Option<Unproven> {
        let before = count.fetch_add(1, Ordering::SeqCst);
        if before >= UNPROVEN_CONNECTIONS_MAX {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Unproven(Arc::clone(count)))
    }
}

impl Drop for Unproven {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The hub's port candidates for `job`: above `MASTER_PORT`'s range (29,500 + job mod 10,000),
/// four tries so two jobs whose numbers collide on one node still both find a port (a step
/// host that reaches the wrong job's hub fails its challenge and tries the next).
pub fn hub_ports(job: u64) -> [u16; 4] {
    let base = 39_500 + job % 10_000;
    std::array::from_fn(|k| (39_500 + (base - 39_500 + k as u64) % 10_000) as u16)
}

/// The allocation's shape, as `sbatch` asked for it (the batch host's arguments).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    pub nodes: u32,
    pub tasks: u32,
    pub tasks_per_node: u32,
    pub cpus_per_task: Option<u32>,
    pub gpus_per_task: Option<u32>,
    /// `--ntasks` or `--ntasks-per-node` was given (Slurm sets `SLURM_NTASKS` only then).
    pub tasks_asked: bool,
    /// `SLURM_*` variables decided at submission (`SLURM_SUBMIT_DIR`, `SLURM_MEM_PER_NODE`, ...).
    pub submitted: Vec<(String, String)>,
    /// The task's own log is open as descriptor 3 (the batch wrapper kept it there): the
    /// steps' records go to it when the script ends.
    pub records_fd3: bool,
}

impl Allocation {
    /// Its shape as the batch host's variables (`srun` reads them back).
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("GANTRY_ALLOC_NODES".to_string(), self.nodes.to_string()),
            ("GANTRY_ALLOC_TASKS".to_string(), self.tasks.to_string()),
            ("GANTRY_ALLOC_TASKS_PER_NODE".to_string(), self.tasks_per_node.to_string()),
        ];
        env.extend(self.gpus_per_task.map(|g| ("GANTRY_ALLOC_GPUS_PER_TASK".to_string(), g.to_string())));
        env.extend(self.cpus_per_task.map(|c| ("GANTRY_ALLOC_CPUS_PER_TASK".to_string(), c.to_string())));
        env
    }

    /// Read back from `var` (the environment, or a test's table).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Allocation> {
        let num = |k: &str| var(k).and_then(|v| v.parse::<u32>().ok());
        Some(Allocation {
            nodes: num("GANTRY_ALLOC_NODES")?,
            tasks: num("GANTRY_ALLOC_TASKS")?,
            tasks_per_node: num("GANTRY_ALLOC_TASKS_PER_NODE")?,
            cpus_per_task: num("GANTRY_ALLOC_CPUS_PER_TASK"),
            gpus_per_task: num("GANTRY_ALLOC_GPUS_PER_TASK"),
            tasks_asked: false,
            submitted: Vec::new(),
            records_fd3: false,
        })
    }
}

/// What went wrong with a step, for the person who ran `srun` (or the job's error log).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{0}")]
    Refused(String),
}

impl StepError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StepError {
        let what = what.into();
        move |source| StepError::Io { what, source }
    }
}

/// The node-side roles of a batch job, for a process started as `name` with `args`: `srun`,
/// or `gantry slurm-batch ...`; `None` for anything else. Their exit code.
pub fn run_as(name: &str, args: &[String]) -> Option<i32> {
    match (name, args.first().map(String::as_str)) {
        ("srun", _) => Some(srun::main(args)),
        (_, Some("slurm-batch")) => Some(batch::main(&args[1..])),
        (_, Some("slurm-task")) => Some(exec::become_task(&args[1..])),
        _ => None,
    }
}

/// The node-local file of node `index`'s step host address, under the step directory.
fn host_file(dir: &std::path::Path, index: u32) -> PathBuf {
    dir.join("hosts").join(index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ports_stay_in_their_range_and_differ() {
        assert_eq!(hub_ports(7), [39_507, 39_508, 39_509, 39_510]);
        assert_eq!(hub_ports(9_999), [49_499, 39_500, 39_501, 39_502]);
    }

    #[test]
    fn an_allocation_reads_back_from_its_variables() {
        let a = Allocation {
            nodes: 2,
            tasks: 8,
            tasks_per_node: 4,
            cpus_per_task: Some(3),
            gpus_per_task: None,
            ..Default::default()
        };
        let env: std::collections::BTreeMap<String, String> = a.to_env().into_iter().collect();
        assert_eq!(Allocation::from_env(|k| env.get(k).cloned()), Some(a));
        assert_eq!(Allocation::from_env(|_| None), None);
    }
}
