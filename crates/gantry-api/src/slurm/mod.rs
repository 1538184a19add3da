//! Slurm's commands as Slurm users type them and read them — `squeue`, `scancel`, `sacct`,
//! `sinfo`, `scontrol` — over the API's jobs and nodes: their command lines (the subset gantry
//! answers; anything else is refused by name, never ignored) and their output in Slurm's
//! formats. [`run`] answers one command line. (`sbatch`'s command line is gantry-spec's
//! `sbatch_cli`: it makes a job; `srun` is a batch job's, in gantry-agent's `steps`.)

pub mod attached;
mod format;
pub mod ids;
pub mod partitions;
mod run;
pub mod sacct;
pub mod scancel;
pub mod scontrol;
pub mod sinfo;
pub mod squeue;

pub use run::{NAMES, Reply, invoking_user, run};
pub use scancel::{Scancel, parse_scancel};
pub use squeue::{Squeue, parse_squeue, squeue_table};

use crate::JobView;

/// `sbatch --test-only`'s answer, in Slurm's words: when and where the job would start, or
/// why it would wait with no start planned yet.
pub fn test_only_line(e: &crate::replies::Estimate) -> String {
    let nodes = if e.nodes.is_empty() { "not chosen yet".to_string() } else { gantry_types::text::hostlist(&e.nodes) };
    match e.start_s {
        Some(at) => format!(
            "sbatch: Job {} to start at {} using {} processors on nodes {nodes} in partition {}\n",
            e.id,
            iso_time(at),
            e.cpus.max(1),
            crate::text::shown(&e.partition)
        ),
        None => format!(
            "sbatch: Job {} would wait in partition {}: {}; no start is planned for it yet\n",
            e.id,
            crate::text::shown(&e.partition),
            crate::text::shown(e.reason.as_deref().unwrap_or("queued"))
        ),
    }
}

/// A Slurm command's argument it does not take, or takes otherwise.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {message}{}", if hint.is_empty() { String::new() } else { format!("\n  hint: {hint}") })]
pub struct SlurmArgError {
    pub option: String,
    pub message: String,
    pub hint: String,
}

impl SlurmArgError {
    fn new(option: impl Into<String>, message: impl Into<String>) -> SlurmArgError {
        SlurmArgError { option: option.into(), message: message.into(), hint: String::new() }
    }

    fn hint(mut self, hint: impl Into<String>) -> SlurmArgError {
        self.hint = hint.into();
        self
    }
}

pub(crate) fn refused(command: &str, option: &str, supported: &str) -> SlurmArgError {
    SlurmArgError::new(option, format!("not supported by gantry's {command}")).hint(format!("supported: {supported}"))
}

pub(crate) fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect()
}

/// Each option with its value (`--opt=value`, `--opt value`, `-X value`, `-Xvalue`), the
/// ones in `flags` without; plain words as `("", word)`.
pub(crate) fn options(args: &[String], flags: &[&str]) -> Result<Vec<(String, String)>, SlurmArgError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if !arg.starts_with('-') || arg == "-" {
            out.push((String::new(), arg.clone()));
        } else if flags.contains(&arg.as_str()) {
            out.push((arg.clone(), String::new()));
        } else if let Some((name, value)) = arg.split_once('=').filter(|_| arg.starts_with("--")) {
            out.push((name.to_string(), value.to_string()));
        } else if !arg.starts_with("--") && arg.len() > 2 {
            out.push((arg[..2].to_string(), arg[2..].to_string()));
        } else {
            i += 1;
            let value = args.get(i).ok_or_else(|| SlurmArgError::new(arg.clone(), "needs a value"))?;
            out.push((arg.clone(), value.clone()));
        }
        i += 1;
    }
    Ok(out)
}

/// A job's state as Slurm's two-letter code (`squeue`'s `ST`) and long name (`-t`).
pub fn state(job: &JobView) -> (&'static str, &'static str) {
    use gantry_types::{Ending, JobState};
    match (job.row.state, job.row.outcome.ending) {
        (JobState::Pending, _) => ("PD", "pending"),
        (JobState::Running, _) => ("R", "running"),
        (JobState::Completed, _) => ("CD", "completed"),
        (_, Some(Ending::TimedOut)) => ("TO", "timeout"),
        (_, Some(Ending::OutOfMemory)) => ("OOM", "out_of_memory"),
        (JobState::Cancelled, _) => ("CA", "cancelled"),
        (JobState::Lost, _) => ("NF", "node_fail"),
        (JobState::Failed, _) => ("F", "failed"),
    }
}

/// Slurm's elapsed time (`%M`): `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
pub(crate) fn elapsed(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h) {
        (0, 0) => format!("{m}:{s:02}"),
        (0, _) => format!("{h}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// Why a job waits, as Slurm names it (`squeue`'s `(REASON)`).
pub(crate) fn reason(job: &JobView) -> &'static str {
    use gantry_types::PendingReason as R;
    match job.pending.as_ref().map(|p| &p.reason) {
        Some(R::Held) => "JobHeldUser",
        Some(R::Dependency { .. }) => "Dependency",
        Some(R::DependencyNeverSatisfied { .. }) => "DependencyNeverSatisfied",
        Some(R::Quota { .. }) => "QOSGrpGRES",
        Some(R::UserLimit { .. }) => "QOSMaxJobsPerUserLimit",
        Some(R::ArrayThrottle { .. }) => "JobArrayTaskLimit",
        Some(R::QueueOrder | R::Reservation { .. }) => "Priority",
        Some(R::Resources { .. } | R::Preempting { .. }) | None => "Resources",
    }
}

/// The job's nodes, each once, in the order its tasks name them.
pub(crate) fn job_nodes(job: &JobView) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    for t in &job.row.tasks {
        if !nodes.contains(&t.node) {
            nodes.push(t.node.clone());
        }
    }
    nodes
}

/// The CPUs (whole, rounded up per task) and GPUs the job's placement holds.
pub(crate) fn held_cpus(job: &JobView) -> u64 {
    job.row.tasks.iter().filter_map(|t| t.placement.as_ref()).map(|p| u64::from(p.cpu.0).div_ceil(1000)).sum()
}

pub(crate) fn held_gpus(job: &JobView) -> usize {
    job.row.tasks.iter().filter_map(|t| t.placement.as_ref()).map(|p| p.gpus.len()).sum()
}

/// `[D-]HH:MM:SS`, as sacct and scontrol write a duration.
pub(crate) fn duration(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    if d > 0 { format!("{d}-{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}:{s:02}") }
}

/// A right-aligned column cut to `width`, as Slurm's `%.Nx` writes it.
pub(crate) fn column(text: &str, width: usize) -> String {
    let cut: String = text.chars().take(width).collect();
    format!("{cut:>width$}")
}

/// Unix seconds as Slurm writes a time (`2026-11-26T13:05:00`, UTC here).
pub(crate) fn iso_time(t: u64) -> String {
    let (days, secs) = ((t / 86_400) as i64, t % 86_400);
    let (y, m, d) = gantry_types::time::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}
