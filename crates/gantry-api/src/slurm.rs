//! `squeue` and `scancel` as Slurm users type them and read them: their command lines (the
//! subset gantry answers; anything else is refused by name, never ignored) and `squeue`'s
//! table in Slurm's default format, over the API's jobs. (`sbatch`'s command line is
//! gantry-spec's `sbatch_cli`: it makes a job.)

use crate::JobView;
use crate::text::shown;
use std::fmt::Write;

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

/// What `squeue` was asked to show.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Squeue {
    /// `-u/--user` (comma-separated), or `--me` ($USER).
    pub users: Vec<String>,
    /// `-j/--jobs`.
    pub jobs: Vec<u64>,
    /// `-p/--partition`: queues.
    pub partitions: Vec<String>,
    /// `-t/--states`, as Slurm's short or long names (`PD`, `running`, `all`); default
    /// pending and running.
    pub states: Vec<String>,
    /// `-h/--noheader`.
    pub no_header: bool,
    /// `--start`: the pending jobs with their expected start.
    pub start: bool,
}

/// What `scancel` was asked to cancel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scancel {
    pub jobs: Vec<u64>,
}

fn refused(command: &str, option: &str, supported: &str) -> SlurmArgError {
    SlurmArgError::new(option, format!("not supported by gantry's {command}")).hint(format!("supported: {supported}"))
}

fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect()
}

fn ids(option: &str, value: &str) -> Result<Vec<u64>, SlurmArgError> {
    list(value)
        .iter()
        .map(|id| id.parse::<u64>().map_err(|_| SlurmArgError::new(option, format!("{id:?} is not a job id"))))
        .collect()
}

/// Each option with its value (`--opt=value`, `--opt value`, `-X value`, `-Xvalue`), the
/// ones in `flags` without; plain words as `("", word)`.
fn options(args: &[String], flags: &[&str]) -> Result<Vec<(String, String)>, SlurmArgError> {
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

/// Read `squeue`'s arguments; `me` is the user `--me` stands for.
pub fn parse_squeue(args: &[String], me: &str) -> Result<Squeue, SlurmArgError> {
    const SUPPORTED: &str = "-u/--user, --me, -j/--jobs, -p/--partition, -t/--states, -h/--noheader, --start";
    let mut q = Squeue::default();
    for (option, value) in options(args, &["--me", "-h", "--noheader", "--start"])? {
        match option.as_str() {
            "-u" | "--user" => q.users.extend(list(&value)),
            "--me" => q.users.push(me.to_string()),
            "-j" | "--jobs" => q.jobs.extend(ids(&option, &value)?),
            "-p" | "--partition" => q.partitions.extend(list(&value)),
            "-t" | "--states" => q.states.extend(list(&value).iter().map(|s| s.to_lowercase())),
            "-h" | "--noheader" => q.no_header = true,
            "--start" => q.start = true,
            "" => return Err(SlurmArgError::new(value, "squeue takes options only").hint(SUPPORTED)),
            other => return Err(refused("squeue", other, SUPPORTED)),
        }
    }
    Ok(q)
}

/// Read `scancel`'s arguments: job ids.
pub fn parse_scancel(args: &[String]) -> Result<Scancel, SlurmArgError> {
    let mut c = Scancel::default();
    for (option, value) in options(args, &[])? {
        match option.as_str() {
            "" => c.jobs.extend(ids("job id", &value)?),
            other => return Err(refused("scancel", other, "job ids")),
        }
    }
    if c.jobs.is_empty() {
        return Err(SlurmArgError::new("", "no job id given").hint("scancel ID [ID...]"));
    }
    Ok(c)
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

impl Squeue {
    /// Whether `job` is one this `squeue` lists.
    pub fn wants(&self, job: &JobView) -> bool {
        let (code, name) = state(job);
        let states_ok = if self.start {
            code == "PD"
        } else if self.states.is_empty() {
            matches!(code, "PD" | "R")
        } else {
            self.states.iter().any(|s| s == "all" || s == name || s.eq_ignore_ascii_case(code))
        };
        let user = job.row.job.control.user.as_deref().unwrap_or_default();
        states_ok
            && (self.users.is_empty() || self.users.iter().any(|u| u == user))
            && (self.jobs.is_empty() || self.jobs.contains(&job.row.id))
            && (self.partitions.is_empty() || self.partitions.contains(&job.row.queue))
    }
}

/// Slurm's elapsed time (`%M`): `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
fn elapsed(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h) {
        (0, 0) => format!("{m}:{s:02}"),
        (0, _) => format!("{h}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// Why a job waits, as Slurm names it (`squeue`'s `(REASON)`).
fn reason(job: &JobView) -> &'static str {
    use gantry_types::PendingReason as R;
    match job.pending.as_ref().map(|p| &p.reason) {
        Some(R::Held) => "JobHeldUser",
        Some(R::Dependency { .. }) => "Dependency",
        Some(R::Quota { .. }) => "QOSGrpGRES",
        Some(R::UserLimit { .. }) => "QOSMaxJobsPerUserLimit",
        Some(R::ArrayThrottle { .. }) => "JobArrayTaskLimit",
        Some(R::QueueOrder | R::Reservation { .. }) => "Priority",
        Some(R::Resources { .. } | R::Preempting { .. }) | None => "Resources",
    }
}

/// A right-aligned column cut to `width`, as Slurm's `%.Nx` writes it.
fn column(text: &str, width: usize) -> String {
    let cut: String = text.chars().take(width).collect();
    format!("{cut:>width$}")
}

/// `squeue`'s table in Slurm's default format (`%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`);
/// `now` in Unix seconds, for the running jobs' elapsed time.
pub fn squeue_table(jobs: &[JobView], q: &Squeue, now: u64) -> String {
    if q.start {
        return start_table(jobs, q);
    }
    let mut out = String::new();
    if !q.no_header {
        let _ = writeln!(out, "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)");
    }
    for job in jobs.iter().filter(|j| q.wants(j)) {
        let row = &job.row;
        let ran = match (row.started_at_s, row.ended_at_s) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            (Some(start), None) => now.saturating_sub(start),
            _ => 0,
        };
        let mut nodes: Vec<String> = Vec::new();
        for t in &row.tasks {
            if !nodes.contains(&t.node) {
                nodes.push(t.node.clone());
            }
        }
        let place = if row.state == gantry_types::JobState::Pending {
            format!("({})", reason(job))
        } else {
            shown(&gantry_types::text::hostlist(&nodes))
        };
        let user = row.job.control.user.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {place}",
            column(&row.id.to_string(), 18),
            column(&shown(&row.queue), 9),
            column(&shown(&row.name), 8),
            column(&shown(user), 8),
            column(state(job).0, 2),
            column(&elapsed(ran), 10),
            column(&nodes.len().max(1).to_string(), 6),
        );
    }
    out
}

/// `squeue --start`: each pending job with its expected start (`N/A` without a reservation),
/// in Slurm's `--start` columns (`%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R`).
fn start_table(jobs: &[JobView], q: &Squeue) -> String {
    let mut out = String::new();
    if !q.no_header {
        let _ = writeln!(
            out,
            "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)"
        );
    }
    for job in jobs.iter().filter(|j| q.wants(j)) {
        let row = &job.row;
        let start = job.pending.as_ref().and_then(|p| p.estimate_s).map_or_else(|| "N/A".to_string(), iso_time);
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {:<20} ({})",
            column(&row.id.to_string(), 18),
            column(&shown(&row.queue), 9),
            column(&shown(&row.name), 8),
            column(&shown(row.job.control.user.as_deref().unwrap_or("-")), 8),
            column("PD", 2),
            column(&start, 19),
            column("1", 6),
            "(null)",
            reason(job)
        );
    }
    out
}

/// Unix seconds as Slurm writes a time (`2026-11-26T13:05:00`, UTC here).
fn iso_time(t: u64) -> String {
    let (days, secs) = ((t / 86_400) as i64, t % 86_400);
    let (y, m, d) = gantry_types::time::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn squeue_reads_the_options_people_script_with() {
        let q =
            parse_squeue(&args(&["-u", "alice,bob", "--me", "-j12", "--states=PD,r", "-h", "-p", "research"]), "carol")
                .expect("valid");
        assert_eq!(q.users, ["alice", "bob", "carol"]);
        assert_eq!(
            (q.jobs.clone(), q.states.clone(), q.no_header),
            (vec![12], vec!["pd".to_string(), "r".into()], true)
        );
        assert_eq!(q.partitions, ["research"]);
        let err = parse_squeue(&args(&["-o", "%i"]), "x").expect_err("no formats yet");
        assert!(err.to_string().contains("not supported by gantry's squeue"), "{err}");
        assert!(parse_squeue(&args(&["-j", "x"]), "x").is_err());
    }

    #[test]
    fn times_read_as_slurm_writes_them() {
        assert_eq!(
            (elapsed(0), elapsed(75), elapsed(3_725), elapsed(90_061)),
            ("0:00".into(), "1:15".into(), "1:02:05".into(), "1-01:01:01".into())
        );
        assert_eq!(column("research-long", 9), "research-");
        assert_eq!(column("R", 2), " R");
        assert_eq!(iso_time(1_795_290_086), "2026-11-21T19:41:26");
    }

    #[test]
    fn scancel_takes_ids_and_nothing_it_would_ignore() {
        assert_eq!(parse_scancel(&args(&["3", "5,7"])).expect("ids").jobs, [3, 5, 7]);
        assert!(parse_scancel(&args(&["--signal=USR1", "3"])).is_err());
        assert!(parse_scancel(&args(&[])).is_err());
        let err = parse_scancel(&args(&["x"])).expect_err("not an id");
        assert_eq!(err.to_string(), "job id: \"x\" is not a job id", "no empty hint line");
    }
}
