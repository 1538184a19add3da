//! `squeue` as Slurm users type it and read it: the options gantry answers (anything else is
//! refused by name) and its table in Slurm's default and `--start` formats.

use super::format::{Piece, pieces, render};
use super::ids::{JobRef, job_refs, slurm_id, slurm_name};
use super::{SlurmArgError, column, elapsed, iso_time, list, options, reason, refused, state};
use crate::JobView;
use crate::text::shown;
use std::fmt::Write;

/// What `squeue` was asked to show.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Squeue {
    /// `-u/--user` (comma-separated), or `--me` ($USER).
    pub users: Vec<String>,
    /// `-j/--jobs`.
    pub jobs: Vec<JobRef>,
    /// `-p/--partition`: partitions (queues where the queue file defines none).
    pub partitions: Vec<String>,
    /// `-t/--states`, as Slurm's short or long names (`PD`, `running`, `all`); default
    /// pending and running.
    pub states: Vec<String>,
    /// `-h/--noheader`.
    pub no_header: bool,
    /// `--start`: the pending jobs with their expected start.
    pub start: bool,
    /// `-o/--format`: Slurm's format letters (see [`FORMAT_LETTERS`]).
    pub format: Option<String>,
}

/// The `-o` letters gantry's squeue knows.
pub const FORMAT_LETTERS: &str = "aAbCDeEFijKlMNPqQrRStTuVZ";

/// Read `squeue`'s arguments; `me` is the user `--me` stands for.
pub fn parse_squeue(args: &[String], me: &str) -> Result<Squeue, SlurmArgError> {
    const SUPPORTED: &str = "-u/--user, --me, -j/--jobs, -p/--partition, -t/--states, -h/--noheader, --start, -o/--format (%a %A %b %C %D %e %E %F %i %j %K %l %M %N %P %q %Q %r %R %S %t %T %u %V %Z), -O/--Format (field[:[.]size], fields as -o's letters name them)";
    let mut q = Squeue::default();
    for (option, value) in options(args, &["--me", "-h", "--noheader", "--start"])? {
        match option.as_str() {
            "-u" | "--user" => q.users.extend(list(&value)),
            "--me" => q.users.push(me.to_string()),
            "-j" | "--jobs" => q.jobs.extend(job_refs(&option, &value)?),
            "-p" | "--partition" => q.partitions.extend(list(&value)),
            "-t" | "--states" => q.states.extend(list(&value).iter().map(|s| s.to_lowercase())),
            "-h" | "--noheader" => q.no_header = true,
            "--start" => q.start = true,
            "-o" | "--format" => {
                if let Some(key) = pieces(&value).iter().find_map(|p| match p {
                    Piece::Field { key, .. } if !FORMAT_LETTERS.contains(*key) => Some(*key),
                    _ => None,
                }) {
                    return Err(SlurmArgError::new(option, format!("%{key}: not a field gantry's squeue knows"))
                        .hint(SUPPORTED));
                }
                q.format = Some(value);
            }
            "-O" | "--Format" => {
                q.format = Some(long_format(&value).map_err(|e| SlurmArgError::new(option, e).hint(SUPPORTED))?)
            }
            "" => return Err(SlurmArgError::new(value, "squeue takes options only").hint(SUPPORTED)),
            other => return Err(refused("squeue", other, SUPPORTED)),
        }
    }
    Ok(q)
}

/// `-O/--Format`'s field names and the `-o` letters that print the same thing.
const FORMAT_NAMES: &[(&str, char)] = &[
    ("account", 'a'),
    ("arrayjobid", 'F'),
    ("arraytaskid", 'K'),
    ("dependency", 'E'),
    ("endtime", 'e'),
    ("jobarrayid", 'i'),
    ("jobid", 'A'),
    ("name", 'j'),
    ("nodelist", 'N'),
    ("numcpus", 'C'),
    ("numnodes", 'D'),
    ("partition", 'P'),
    ("priority", 'Q'),
    ("qos", 'q'),
    ("reason", 'r'),
    ("reasonlist", 'R'),
    ("starttime", 'S'),
    ("state", 'T'),
    ("statecompact", 't'),
    ("submittime", 'V'),
    ("timelimit", 'l'),
    ("timeused", 'M'),
    ("tres-per-node", 'b'),
    ("username", 'u'),
    ("workdir", 'Z'),
];

/// `-O name[:[.]size][suffix],...` as the `-o` format that prints the same: Slurm's fields are
/// 20 wide and left-aligned unless sized (`:.N` right-aligned, `:` alone unpadded), and abut.
fn long_format(value: &str) -> Result<String, String> {
    let mut format = String::new();
    for spec in value.split(',').filter(|s| !s.is_empty()) {
        let (name, size) = spec.split_once(':').unwrap_or((spec, "20"));
        let letter = FORMAT_NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, l)| *l)
            .ok_or_else(|| format!("{name}: not a field gantry's squeue knows"))?;
        let right = size.starts_with('.');
        let size = size.trim_start_matches('.');
        let digits: String = size.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &size[digits.len()..];
        if suffix.contains('%') {
            return Err(format!("{spec}: a field's suffix cannot hold '%'"));
        }
        let dot = if right { "." } else { "" };
        format += &format!("%{dot}{digits}{letter}{suffix}");
    }
    if format.is_empty() {
        return Err("no fields given".into());
    }
    Ok(format)
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
            && (self.jobs.is_empty() || self.jobs.iter().any(|r| r.names(job)))
            && (self.partitions.is_empty() || self.partitions.iter().any(|p| p == job.row.partition()))
    }
}

/// `squeue`'s table in Slurm's default format (`%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`);
/// `now` in Unix seconds, for the running jobs' elapsed time.
pub fn squeue_table(jobs: &[JobView], q: &Squeue, now: u64) -> String {
    if q.start {
        return start_table(jobs, q);
    }
    if let Some(format) = &q.format {
        return formatted(jobs, q, format, now);
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
        let nodes = super::job_nodes(job);
        let place = if row.state == gantry_types::JobState::Pending {
            format!("({})", reason(job))
        } else {
            shown(&gantry_types::text::hostlist(&nodes))
        };
        let user = row.job.control.user.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {place}",
            column(&slurm_id(job), 18),
            column(&shown(row.partition()), 9),
            column(&shown(&slurm_name(job)), 8),
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
            column(&slurm_id(job), 18),
            column(&shown(row.partition()), 9),
            column(&shown(&slurm_name(job)), 8),
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

/// `squeue -o FORMAT`: a header line of Slurm's column names, then one line per job.
fn formatted(jobs: &[JobView], q: &Squeue, format: &str, now: u64) -> String {
    let pieces = pieces(format);
    let mut out = String::new();
    if !q.no_header {
        out += &render(&pieces, |k| header(k).to_string());
    }
    for job in jobs.iter().filter(|j| q.wants(j)) {
        out += &render(&pieces, |k| field(job, k, now));
    }
    out
}

fn header(key: char) -> &'static str {
    match key {
        'a' => "ACCOUNT",
        'A' | 'i' => "JOBID",
        'b' => "TRES_PER_NODE",
        'C' => "CPUS",
        'D' => "NODES",
        'e' => "END_TIME",
        'E' => "DEPENDENCY",
        'F' => "ARRAY_JOB_ID",
        'j' => "NAME",
        'K' => "ARRAY_TASK_ID",
        'l' => "TIME_LIMIT",
        'M' => "TIME",
        'N' => "NODELIST",
        'P' => "PARTITION",
        'q' => "QOS",
        'Q' => "PRIORITY",
        'r' => "REASON",
        'R' => "NODELIST(REASON)",
        'S' => "START_TIME",
        't' => "ST",
        'T' => "STATE",
        'u' => "USER",
        'V' => "SUBMIT_TIME",
        _ => "WORK_DIR",
    }
}

/// One `-o` field of a job.
fn field(job: &JobView, key: char, now: u64) -> String {
    let row = &job.row;
    let nodes = super::job_nodes(job);
    let pending = row.state == gantry_types::JobState::Pending;
    let ran = row.started_at_s.map_or(0, |s| row.ended_at_s.unwrap_or(now).saturating_sub(s));
    let time = |t: Option<u64>| t.map_or_else(|| "N/A".to_string(), iso_time);
    let array = row.job.control.array.as_ref();
    let cpus: u64 = super::held_cpus(job);
    match key {
        'a' => row.queue.clone(),
        'P' => row.partition().to_string(),
        'A' => row.id.to_string(),
        'i' => slurm_id(job),
        'b' => match row.job.groups.first().and_then(|g| g.resources.gpu.as_ref()) {
            Some(gantry_types::GpuRequest::Whole { count }) => format!("gres/gpu:{count}"),
            Some(_) => "gres/gpu:1".into(),
            None => "N/A".into(),
        },
        'C' => cpus.max(1).to_string(),
        'D' => nodes.len().max(1).to_string(),
        'e' => time(row.ended_at_s),
        'E' => {
            if row.job.after.is_empty() {
                "(null)".into()
            } else {
                row.job
                    .after
                    .iter()
                    .map(|d| {
                        format!("{:?}:{}", d.kind, d.id.map_or_else(|| d.job.clone(), |i| i.to_string())).to_lowercase()
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
        }
        'F' => array.and_then(|a| a.job).unwrap_or(row.id).to_string(),
        'j' => slurm_name(job),
        'K' => array.map_or_else(|| "N/A".into(), |a| a.index.to_string()),
        'l' => row.job.control.time_limit_s.map_or_else(|| "UNLIMITED".into(), elapsed),
        'M' => elapsed(ran),
        'N' => gantry_types::text::hostlist(&nodes),
        'q' => row.job.control.qos.clone().unwrap_or_else(|| "normal".into()),
        'Q' => row.job.priority.to_string(),
        'r' if pending => reason(job).into(),
        'r' => "None".into(),
        'R' if pending => format!("({})", reason(job)),
        'R' => gantry_types::text::hostlist(&nodes),
        'S' => time(row.started_at_s.or_else(|| job.pending.as_ref().and_then(|p| p.estimate_s))),
        't' => state(job).0.into(),
        'T' => super::sacct::state_name(job).into(),
        'u' => row.job.control.user.clone().unwrap_or_default(),
        'V' => iso_time(row.submitted_at_s),
        _ => row.job.run.workdir.clone().unwrap_or_default(),
    }
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
            (vec![JobRef::Job(12)], vec!["pd".to_string(), "r".into()], true)
        );
        assert_eq!(q.partitions, ["research"]);
        let err = parse_squeue(&args(&["-o", "%i %Y"]), "x").expect_err("an unknown letter");
        assert!(err.to_string().contains("%Y: not a field gantry's squeue knows"), "{err}");
        assert!(
            parse_squeue(&args(&["-O", "bogus"]), "x").expect_err("refused").to_string().contains("bogus: not a field")
        );
        assert!(
            parse_squeue(&args(&["--array", "1"]), "x").expect_err("refused").to_string().contains("not supported")
        );
        assert!(parse_squeue(&args(&["-j", "x"]), "x").is_err());
    }

    #[test]
    fn long_format_fields_are_the_letters_slurm_prints_them_with() {
        // What a real squeue 22.05 printed for these: 20 wide and abutting by default,
        // `:.5` right-aligned and cut, `:` unpadded, text after the size kept.
        let format = |v: &str| parse_squeue(&args(&["-O", v]), "x").expect("valid").format.expect("set");
        assert_eq!(format("JobID,name,state"), "%20A%20j%20T");
        assert_eq!(format("jobid:.5,name:.10|"), "%.5A%.10j|");
        assert_eq!(format("jobid:,statecompact:3"), "%A%3t");
        assert!(parse_squeue(&args(&["-O", "jobid:3%x"]), "x").is_err());
        assert!(parse_squeue(&args(&["-O", ","]), "x").is_err());
    }

    #[test]
    fn times_read_as_slurm_writes_them() {
        use super::super::*;
        assert_eq!(
            (elapsed(0), elapsed(75), elapsed(3_725), elapsed(90_061)),
            ("0:00".into(), "1:15".into(), "1:02:05".into(), "1-01:01:01".into())
        );
        assert_eq!(column("research-long", 9), "research-");
        assert_eq!(column("R", 2), " R");
        assert_eq!(iso_time(1_795_290_086), "2026-11-21T19:41:26");
    }
}
