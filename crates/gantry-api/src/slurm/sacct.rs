//! `sacct`: ended and running jobs as Slurm's accounting lists them — its default columns or
//! `--format`, `--parsable2`, states by Slurm's names (TIMEOUT, OUT_OF_MEMORY, CANCELLED,
//! NODE_FAIL), the batch script's own row (`ID.batch`) for a job `sbatch` made, and the window
//! `-S`/`-E` over each job's life.

use super::ids::{JobRef, job_refs, slurm_id, slurm_name as name};
use super::{SlurmArgError, iso_time, list, options, refused};
use crate::JobView;
use crate::text::shown;
use gantry_types::{Ending, JobState};

const SUPPORTED: &str = "-j/--jobs, -u/--user, -a/--allusers, -s/--state, -S/--starttime, -E/--endtime, \
    -X/--allocations, -n/--noheader, -P/--parsable2, -p/--parsable, -o/--format, -b/--brief, --name, -r/--partition";

/// Fields `--format` takes, each with Slurm's default width.
const FIELDS: [(&str, usize); 23] = [
    ("JobID", 12),
    ("JobIDRaw", 12),
    ("JobName", 10),
    ("Partition", 10),
    ("Account", 10),
    ("QOS", 10),
    ("User", 9),
    ("AllocCPUS", 10),
    ("AllocNodes", 10),
    ("NNodes", 8),
    ("NodeList", 15),
    ("AllocTRES", 10),
    ("State", 10),
    ("ExitCode", 8),
    ("Submit", 19),
    ("Start", 19),
    ("End", 19),
    ("Elapsed", 10),
    ("ElapsedRaw", 10),
    ("Timelimit", 10),
    ("MaxRSS", 10),
    ("TotalCPU", 10),
    ("Reason", 20),
];

const DEFAULT: [&str; 7] = ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"];

/// What `sacct` was asked to list.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sacct {
    pub jobs: Vec<JobRef>,
    pub users: Vec<String>,
    pub all_users: bool,
    pub states: Vec<String>,
    pub names: Vec<String>,
    pub partitions: Vec<String>,
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub allocations: bool,
    pub no_header: bool,
    /// `|` between fields: `Some(false)` for `--parsable2`, `Some(true)` with a trailing one.
    pub parsable: Option<bool>,
    /// Fields and widths, in order.
    pub fields: Vec<(&'static str, usize)>,
}

fn field(spec: &str) -> Result<(&'static str, usize), SlurmArgError> {
    let (name, width) = spec.split_once('%').unwrap_or((spec, ""));
    let &(known, default) = FIELDS.iter().find(|(f, _)| f.eq_ignore_ascii_case(name)).ok_or_else(|| {
        SlurmArgError::new("--format", format!("Invalid field requested: \"{name}\""))
            .hint(format!("gantry's sacct knows: {}", FIELDS.map(|(f, _)| f).join(", ")))
    })?;
    let width = if width.is_empty() {
        default
    } else {
        width.parse().map_err(|_| SlurmArgError::new("--format", format!("{spec}: a width after %")))?
    };
    Ok((known, width))
}

/// A time as sacct takes it: `YYYY-MM-DD[THH:MM[:SS]]`, `now`, `now-N[minutes|hours|days]`,
/// `today`/`midnight`, Unix seconds.
fn time(option: &str, text: &str, now: u64) -> Result<u64, SlurmArgError> {
    let bad = |e: String| SlurmArgError::new(option, e);
    match text {
        "today" | "midnight" => return Ok(now - now % 86_400),
        _ => {}
    }
    if let Some(ago) = text.strip_prefix("now-") {
        let digits = ago.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = match &ago[digits.len()..] {
            "" | "s" | "seconds" => 1,
            "m" | "minutes" => 60,
            "h" | "hours" => 3600,
            "d" | "days" => 86_400,
            u => return Err(bad(format!("{text}: unknown unit {u:?} (seconds, minutes, hours, days)"))),
        };
        let n: u64 = digits.parse().map_err(|_| bad(format!("{text}: now-N[unit]")))?;
        return Ok(now.saturating_sub(n.saturating_mul(unit)));
    }
    // Slurm's HH:MM:SS: seconds dropped (gantry's times read to the minute).
    let trimmed = match text.split_once('T') {
        Some((d, clock)) if clock.matches(':').count() == 2 => {
            format!("{d}T{}", &clock[..clock.rfind(':').unwrap_or(clock.len())])
        }
        _ => text.to_string(),
    };
    gantry_types::time::parse_time(&trimmed, now).map_err(|e| bad(e.to_string()))
}

/// Read `sacct`'s arguments; `now` for times relative to it.
pub fn parse_sacct(args: &[String], now: u64) -> Result<Sacct, SlurmArgError> {
    let flags = [
        "-a",
        "--allusers",
        "-X",
        "--allocations",
        "-n",
        "--noheader",
        "-P",
        "--parsable2",
        "-p",
        "--parsable",
        "-b",
        "--brief",
    ];
    let mut s = Sacct::default();
    let mut format: Vec<(&'static str, usize)> = Vec::new();
    for (option, value) in options(args, &flags)? {
        match option.as_str() {
            "-j" | "--jobs" => s.jobs.extend(job_refs(&option, &value)?),
            "-u" | "--user" => s.users.extend(list(&value)),
            "-a" | "--allusers" => s.all_users = true,
            "-s" | "--state" => s.states.extend(list(&value).iter().map(|v| v.to_uppercase())),
            "--name" => s.names.extend(list(&value)),
            "-r" | "--partition" => s.partitions.extend(list(&value)),
            "-S" | "--starttime" => s.start = Some(time(&option, &value, now)?),
            "-E" | "--endtime" => s.end = Some(time(&option, &value, now)?),
            "-X" | "--allocations" => s.allocations = true,
            "-n" | "--noheader" => s.no_header = true,
            "-P" | "--parsable2" => s.parsable = Some(false),
            "-p" | "--parsable" => s.parsable = Some(true),
            "-o" | "--format" => format.extend(list(&value).iter().map(|f| field(f)).collect::<Result<Vec<_>, _>>()?),
            "-b" | "--brief" => format.extend(["JobID", "State", "ExitCode"].map(|f| field(f).expect("known"))),
            "" => return Err(SlurmArgError::new(value, "sacct takes options only").hint(SUPPORTED)),
            other => return Err(refused("sacct", other, SUPPORTED)),
        }
    }
    s.fields = if format.is_empty() { DEFAULT.map(|f| field(f).expect("known")).to_vec() } else { format };
    Ok(s)
}

/// A job's state as sacct names it.
pub fn state_name(job: &JobView) -> &'static str {
    match (job.row.state, job.row.outcome.ending) {
        (JobState::Pending, _) => "PENDING",
        (JobState::Running, _) => "RUNNING",
        (JobState::Completed, _) => "COMPLETED",
        (_, Some(Ending::TimedOut)) => "TIMEOUT",
        (_, Some(Ending::OutOfMemory)) => "OUT_OF_MEMORY",
        (JobState::Cancelled, _) => "CANCELLED",
        (JobState::Lost, _) => "NODE_FAIL",
        (JobState::Failed, _) => "FAILED",
    }
}

/// Who cancelled a job as Slurm says it: the Unix uid of the token's name where this machine
/// knows the account (`CANCELLED by 1001`), else the name (`gantry`: the controller itself).
fn uid_of(name: &str) -> String {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => user.uid.to_string(),
        _ => name.to_string(),
    }
}

/// Slurm's short state codes, for `-s`.
fn short(state: &str) -> &'static str {
    match state {
        "PENDING" => "PD",
        "RUNNING" => "R",
        "COMPLETED" => "CD",
        "TIMEOUT" => "TO",
        "OUT_OF_MEMORY" => "OOM",
        "CANCELLED" => "CA",
        "NODE_FAIL" => "NF",
        _ => "F",
    }
}

/// `code:signal` as sacct writes it: a time limit or an OOM kill is Slurm's signal, a cancel
/// SIGTERM's.
pub(crate) fn exit_code(job: &JobView) -> String {
    match (job.row.outcome.ending, job.row.exit_code) {
        // Slurm ends a job at its time limit, or a running one cancelled, with SIGTERM.
        (Some(Ending::Cancelled | Ending::TimedOut), _) if job.row.started_at_s.is_some() => "0:15".into(),
        (Some(Ending::Cancelled | Ending::TimedOut), _) => "0:0".into(),
        (Some(Ending::OutOfMemory), _) => "0:125".into(),
        (_, Some(c)) if c >= 0 => format!("{c}:0"),
        (_, Some(c)) => format!("0:{}", c.unsigned_abs()),
        (_, None) => "0:0".into(),
    }
}

impl Sacct {
    /// Whether `job` is one this `sacct` lists (`me`: the invoking user, whose jobs are the
    /// default unless it is root or `-a`).
    pub fn wants(&self, job: &JobView, me: &str, now: u64) -> bool {
        let row = &job.row;
        let user = row.job.control.user.as_deref().unwrap_or_default();
        let state = state_name(job);
        let users_ok = if !self.users.is_empty() {
            self.users.iter().any(|u| u == user)
        } else {
            self.all_users || me == "root" || user == me || !self.jobs.is_empty()
        };
        // Without -j, the window defaults to today (Slurm's: since midnight).
        let start = self.start.unwrap_or(if self.jobs.is_empty() { now - now % 86_400 } else { 0 });
        let end = self.end.unwrap_or(u64::MAX);
        let began = row.started_at_s.unwrap_or(row.submitted_at_s);
        users_ok
            && (self.jobs.is_empty() || self.jobs.iter().any(|r| r.names(job)))
            && (self.states.is_empty() || self.states.iter().any(|s| s == state || s == short(state)))
            && (self.names.is_empty() || self.names.iter().any(|n| *n == name(job)))
            && (self.partitions.is_empty() || self.partitions.iter().any(|p| p == row.partition()))
            && began <= end
            && row.ended_at_s.is_none_or(|e| e >= start)
    }
}

/// One field of a job's row (`batch`: its batch script's own row).
fn value(job: &JobView, field: &str, batch: bool, now: u64) -> String {
    let row = &job.row;
    let nodes = super::job_nodes(job);
    let cpus: u64 = super::held_cpus(job);
    let gpus: usize = super::held_gpus(job);
    let ran = row.started_at_s.map(|s| row.ended_at_s.unwrap_or(now).saturating_sub(s)).unwrap_or(0);
    let time = |t: Option<u64>| t.map_or_else(|| "Unknown".to_string(), iso_time);
    let used = &row.outcome.used;
    match field {
        "JobID" if batch => format!("{}.batch", slurm_id(job)),
        "JobID" => slurm_id(job),
        "JobIDRaw" if batch => format!("{}.batch", row.id),
        "JobIDRaw" => row.id.to_string(),
        "JobName" if batch => "batch".into(),
        "JobName" => name(job),
        "Partition" | "User" if batch => String::new(),
        "Partition" => row.partition().to_string(),
        "Account" => row.queue.clone(),
        "QOS" if batch => String::new(),
        "QOS" => row.job.control.qos.clone().unwrap_or_else(|| "normal".into()),
        "User" => row.job.control.user.clone().unwrap_or_default(),
        "AllocCPUS" => cpus.to_string(),
        "AllocNodes" | "NNodes" => nodes.len().max(usize::from(batch)).to_string(),
        "NodeList" if nodes.is_empty() => "None assigned".into(),
        "NodeList" if batch => nodes[0].clone(),
        "NodeList" => gantry_types::text::hostlist(&nodes),
        "AllocTRES" if row.tasks.is_empty() => String::new(),
        "AllocTRES" => format!("cpu={cpus},gres/gpu={gpus},node={}", nodes.len()),
        "State" => match &row.outcome.cancelled_by {
            Some(by) if row.state == JobState::Cancelled && !batch => format!("CANCELLED by {}", uid_of(by)),
            _ => state_name(job).into(),
        },
        "ExitCode" => exit_code(job),
        "Submit" => iso_time(row.submitted_at_s),
        "Start" => time(row.started_at_s),
        "End" => time(row.ended_at_s),
        "Elapsed" => super::duration(ran),
        "ElapsedRaw" => ran.to_string(),
        "Timelimit" => row.job.control.time_limit_s.map_or_else(|| "UNLIMITED".into(), super::duration),
        "MaxRSS" => used
            .iter()
            .filter_map(|u| u.used.memory_peak_bytes)
            .max()
            .map_or_else(String::new, |b| format!("{}K", b / 1024)),
        "TotalCPU" => {
            let ms: u64 = used.iter().filter_map(|u| u.used.cpu_ms).sum();
            format!("{:02}:{:02}.{:03}", ms / 60_000, ms / 1000 % 60, ms % 1000)
        }
        "Reason" => {
            if row.state == JobState::Pending {
                super::reason(job).into()
            } else {
                "None".into()
            }
        }
        _ => String::new(),
    }
}

/// sacct's listing of `jobs`, one row per job and (unless `-X`) one more for a batch job's
/// script.
pub fn sacct_table(jobs: &[JobView], s: &Sacct, me: &str, now: u64) -> String {
    let mut lines: Vec<Vec<String>> = Vec::new();
    for job in jobs.iter().filter(|j| s.wants(j, me, now)) {
        let batch_row =
            !s.allocations && job.row.started_at_s.is_some() && job.row.job.groups.iter().any(|g| g.name == "batch");
        for batch in [false, true].into_iter().filter(|b| !b || batch_row) {
            lines.push(s.fields.iter().map(|(f, _)| value(job, f, batch, now)).collect());
        }
        if batch_row {
            for step in &job.row.outcome.steps {
                lines.push(s.fields.iter().map(|(f, _)| step_value(job, step, f, now)).collect());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = s.fields.iter().map(|(f, _)| f.to_string()).collect();
    match s.parsable {
        Some(trailing) => {
            let end = if trailing { "|" } else { "" };
            for line in (!s.no_header).then_some(&header).into_iter().chain(&lines) {
                out += &format!("{}{end}\n", line.join("|"));
            }
        }
        None => {
            if !s.no_header {
                out += &fixed(&header, &s.fields, true);
                out += &fixed(&s.fields.iter().map(|(_, w)| "-".repeat(*w)).collect::<Vec<_>>(), &s.fields, true);
            }
            for line in &lines {
                out += &fixed(line, &s.fields, false);
            }
        }
    }
    out
}

/// One field of a job step's row (`ID.N`), as its batch host recorded the step; what a step
/// has no value for is empty, as in Slurm's step rows.
fn step_value(job: &JobView, step: &gantry_types::StepRecord, field: &str, now: u64) -> String {
    let ran = step.end_s.unwrap_or(now).saturating_sub(step.start_s);
    let nodes = gantry_spec::expand_hostlist(&step.nodes).map_or(1, |n| n.len().max(1));
    match field {
        "JobID" => format!("{}.{}", slurm_id(job), step.step),
        "JobIDRaw" => format!("{}.{}", job.row.id, step.step),
        "JobName" => step.name.clone(),
        "AllocCPUS" => step.tasks.to_string(),
        "AllocNodes" | "NNodes" => nodes.to_string(),
        "NodeList" => step.nodes.clone(),
        "State" => match (step.end_s, step.exit_code) {
            (Some(_), Some(0)) => "COMPLETED".into(),
            (Some(_), Some(_)) => "FAILED".into(),
            _ if job.row.state.is_final() => "CANCELLED".into(),
            _ => "RUNNING".into(),
        },
        "ExitCode" => match step.exit_code {
            Some(c) if c > 128 => format!("0:{}", c - 128),
            Some(c) => format!("{c}:0"),
            None => "0:0".into(),
        },
        "Submit" | "Start" => iso_time(step.start_s),
        "End" => step.end_s.map_or_else(|| "Unknown".into(), iso_time),
        "Elapsed" => super::duration(ran),
        "ElapsedRaw" => ran.to_string(),
        _ => String::new(),
    }
}

/// One line in fixed columns, JobID left-aligned, the rest right-aligned, a space after each,
/// as sacct writes them: a text value too wide is cut and ends in `+` (Slurm's
/// `print_fields_str`), a date is cut plainly, a number or a duration is never cut.
fn fixed(cells: &[String], fields: &[(&str, usize)], header: bool) -> String {
    let mut line = String::new();
    for (cell, (name, width)) in cells.iter().zip(fields) {
        let cut = fit(&shown(cell), name, *width, header);
        let left = name.starts_with("JobID") && (header || !cut.is_empty());
        line += &if left { format!("{cut:<width$} ") } else { format!("{cut:>width$} ") };
    }
    line.push('\n');
    line
}

/// A cell cut to its column the way sacct cuts that kind of field.
fn fit(cell: &str, name: &str, width: usize, header: bool) -> String {
    let never_cut = ["AllocCPUS", "ElapsedRaw", "Elapsed", "Timelimit", "TotalCPU"];
    let plain_cut = header || matches!(name, "Submit" | "Start" | "End");
    if cell.chars().count() <= width || (!header && never_cut.contains(&name)) {
        return cell.to_string();
    }
    if plain_cut || width == 0 {
        return cell.chars().take(width).collect();
    }
    cell.chars().take(width - 1).chain(['+']).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_text_cell_ends_in_a_plus_as_sacct_cuts_it() {
        let fields = [("JobID", 12), ("AllocTRES", 10), ("AllocCPUS", 3), ("Start", 10)];
        let cells = ["1".to_string(), "cpu=2,gres/gpu=1,node=1".into(), "1024".into(), "2026-11-26T21:46:01".into()];
        assert_eq!(fixed(&cells, &fields, false), "1            cpu=2,gre+ 1024 2026-11-26 \n");
        let names: Vec<String> = fields.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(fixed(&names, &fields, true), "JobID         AllocTRES All      Start \n");
        assert_eq!(fit("steps", "JobName", 10, false), "steps");
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sacct_reads_formats_times_and_refuses_what_it_does_not_do() {
        let now = 1_795_290_086;
        let s = parse_sacct(
            &args(&["-P", "--format=jobid,State,jobname%30", "-j", "45_[1-2]", "-S", "now-2hours", "-X"]),
            now,
        )
        .expect("valid");
        assert_eq!(s.fields, [("JobID", 12), ("State", 10), ("JobName", 30)]);
        assert_eq!((s.parsable, s.allocations, s.start), (Some(false), true, Some(now - 7200)));
        assert_eq!(s.jobs.len(), 2);
        let s = parse_sacct(&args(&["-S", "2026-11-21T19:41:26", "-E", "2026-11-22"]), now).expect("valid");
        assert_eq!((s.start, s.end), (Some(1_795_290_060), Some(1_795_305_600)));
        let e = parse_sacct(&args(&["--format=JobID,Bogus"]), now).expect_err("unknown field");
        assert!(e.to_string().contains("Invalid field requested: \"Bogus\""), "{e}");
        assert!(parse_sacct(&args(&["--cluster=x"]), now).expect_err("refused").to_string().contains("not supported"));
        assert!(parse_sacct(&args(&["-S", "yesterday-ish"]), now).is_err());
        assert_eq!(
            (crate::slurm::duration(59), crate::slurm::duration(3_725), crate::slurm::duration(90_061)),
            ("00:00:59".into(), "01:02:05".into(), "1-01:01:01".into())
        );
    }
}
