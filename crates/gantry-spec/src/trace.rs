//! The native trace format (`trace.jsonl`): one JSON object per line, a job spec (the workload
//! file's `[[job]]` table, written as JSON) with its arrival time, duration and, optionally,
//! how busy it keeps its GPUs. The simulator replays it; `gantry synth` writes it. See
//! docs/formats.md.
//!
//! Lines are parsed one at a time (a trace may be far larger than a spec file), each with the
//! same checks as a workload file. In strict mode the first bad line stops the read with its
//! line number; in lenient mode bad lines are skipped and counted by reason. An empty trace is
//! an error in both.

use crate::error::SpecError;
use crate::workload::{JOBS_MAX, JobEntry, parse_job};
use gantry_catalog::Catalog;
use gantry_types::Job;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

/// Longest line accepted: a job spec is a few hundred bytes; 64 KiB is a broken file.
pub const TRACE_LINE_BYTES_MAX: usize = 64 << 10;
/// Latest arrival or longest duration accepted (100 years in seconds): beyond it, a typo or
/// milliseconds written as seconds.
pub const TRACE_SECONDS_MAX: i64 = 100 * 365 * 86_400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceLine {
    arrival_s: i64,
    duration_s: Option<i64>,
    utilization: Option<f64>,
    started_s: Option<i64>,
    job: JobEntry,
}

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// Line in its file, from 1.
    pub line: u64,
    /// Seconds from the trace's origin.
    pub arrival_s: u64,
    /// Run time once started; `None` = runs until the replay ends.
    pub duration_s: Option<u64>,
    /// Share of its allocated GPU compute the job keeps busy, 0..=1; `None` = the simulator
    /// draws one.
    pub utilization: Option<f64>,
    /// When the job really started in the system the trace was recorded from (seconds from the
    /// origin, not before its arrival): what `gantry whatif` shows as history. A replay ignores
    /// it.
    pub started_s: Option<u64>,
    pub job: Job,
}

/// A read trace: its jobs in arrival order (file order among equal arrivals) and, in lenient
/// mode, the lines skipped by reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    pub skipped: BTreeMap<String, u64>,
}

/// Parse one line (already known not to be blank) into its job(s): `count` makes copies that
/// arrive together.
pub fn parse_trace_line(line_no: u64, text: &str, catalog: &Catalog) -> Result<Vec<TraceJob>, SpecError> {
    let at = format!("line {line_no}");
    if text.len() > TRACE_LINE_BYTES_MAX {
        return Err(SpecError::new(at, format!("line is {} bytes, the limit is {TRACE_LINE_BYTES_MAX}", text.len())));
    }
    let line: TraceLine = serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_string();
        SpecError::new(&at, format!("not a valid trace line: {message}"))
            .hint("{\"arrival_s\": 0, \"duration_s\": 3600, \"job\": {\"name\": \"train\", \"gpu\": {\"count\": 1}}}")
    })?;
    let seconds = |field: &str, value: i64| -> Result<u64, SpecError> {
        if value < 0 {
            return Err(SpecError::new(format!("{at} / {field}"), format!("{value} is negative")));
        }
        if value > TRACE_SECONDS_MAX {
            return Err(SpecError::new(format!("{at} / {field}"), format!("{value} s is more than 100 years"))
                .hint("times are in seconds"));
        }
        Ok(value as u64)
    };
    let arrival_s = seconds("arrival_s", line.arrival_s)?;
    let duration_s = line.duration_s.map(|d| seconds("duration_s", d)).transpose()?;
    let started_s = line.started_s.map(|d| seconds("started_s", d)).transpose()?;
    if let Some(started) = started_s.filter(|s| *s < arrival_s) {
        return Err(SpecError::new(format!("{at} / started_s"), format!("{started} is before arrival_s {arrival_s}"))
            .hint("a job starts after it arrives"));
    }
    if let Some(u) = line.utilization
        && !(0.0..=1.0).contains(&u)
    {
        return Err(SpecError::new(format!("{at} / utilization"), format!("{u} is outside 0..=1"))
            .hint("utilization is the share of the allocated GPU compute kept busy, e.g. 0.6"));
    }
    if line.job.name.trim().is_empty() {
        return Err(SpecError::new(format!("{at} / job.name"), "empty job name"));
    }
    let job_at = format!("{at} / job {:?}", line.job.name);
    let jobs = parse_job(&job_at, line.job, catalog, crate::JOBS_MAX as usize)?;
    Ok(jobs
        .into_iter()
        .map(|job| TraceJob { line: line_no, arrival_s, duration_s, utilization: line.utilization, started_s, job })
        .collect())
}

/// The reason a line was refused, for lenient counts: the message without line-specific
/// values where there is a field path.
fn reason(err: &SpecError) -> String {
    match err.field.split_once(" / ") {
        Some((_, field)) => {
            let field = field.split(" / ").last().unwrap_or(field);
            format!("{field}: {}", err.message.split(':').next().unwrap_or(&err.message))
        }
        None => err.message.split(':').next().unwrap_or(&err.message).to_string(),
    }
}

/// Read a whole trace. `lenient` skips bad lines (counted in `Trace::skipped`) instead of
/// stopping at the first. Jobs come back sorted by arrival, stable in file order.
pub fn read_trace(reader: impl BufRead, catalog: &Catalog, lenient: bool) -> Result<Trace, SpecError> {
    let mut trace = Trace::default();
    let mut names = BTreeSet::new();
    let mut line_no = 0u64;
    for line in reader.split(b'\n') {
        line_no += 1;
        let bytes = line.map_err(|e| SpecError::new(format!("line {line_no}"), format!("cannot read: {e}")))?;
        let outcome = match std::str::from_utf8(&bytes) {
            Err(_) => Err(SpecError::new(format!("line {line_no}"), "not UTF-8 text")),
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => parse_trace_line(line_no, text.trim_end_matches('\r'), catalog),
        };
        let outcome = outcome.and_then(|jobs| match jobs.iter().find(|j| names.contains(&j.job.name)) {
            Some(dup) => Err(SpecError::new(format!("line {line_no} / job {:?}", dup.job.name), "job name used twice")
                .hint("job names must be unique within a trace")),
            None => Ok(jobs),
        });
        match outcome {
            Ok(jobs) => {
                for j in jobs {
                    names.insert(j.job.name.clone());
                    trace.jobs.push(j);
                }
                if trace.jobs.len() as i64 > JOBS_MAX {
                    return Err(SpecError::new(format!("line {line_no}"), format!("more than {JOBS_MAX} jobs")));
                }
            }
            Err(err) if lenient => *trace.skipped.entry(reason(&err)).or_default() += 1,
            Err(err) => return Err(err),
        }
    }
    if trace.jobs.is_empty() {
        let skipped: u64 = trace.skipped.values().sum();
        return Err(SpecError::new(
            "",
            if skipped > 0 {
                format!("no usable job in the trace ({skipped} lines skipped)")
            } else {
                "the trace has no jobs".into()
            },
        ));
    }
    // Dependencies name jobs of the trace and form no cycle (in lenient mode too: a cycle is
    // not a bad line but a bad trace).
    crate::workload::check_dependencies(
        trace.jobs.iter().map(|j| (&j.job, format!("line {} / job {:?}", j.line, j.job.name))),
    )?;
    trace.jobs.sort_by_key(|j| j.arrival_s);
    Ok(trace)
}
