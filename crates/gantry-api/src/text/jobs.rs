//! Jobs as `gantry queue`, `show` and `why` print them.

use super::{put, shown, utc};
use crate::JobView;

fn reason_text(pending: &gantry_types::PendingJob) -> String {
    shown(&pending.reason.to_string())
}

/// `gantry queue`: a row per job (`filter` names the states asked for, for the empty case).
pub fn queue_table(jobs: &[JobView], filter: &str) -> String {
    let mut out = String::new();
    if jobs.is_empty() {
        // Ended jobs are not listed by default: say how to see them.
        let hint =
            if filter.is_empty() { String::new() } else { format!(" ({filter}); ended ones: gantry queue --all") };
        put!(out, "no jobs{hint}");
        return out;
    }
    put!(out, "{:>6}  {:<24} {:<12} {:<10} {:<20}  REASON", "ID", "NAME", "QUEUE", "STATE", "NODES");
    for job in jobs {
        let row = &job.row;
        let nodes: std::collections::BTreeSet<String> = row.tasks.iter().map(|t| shown(&t.node)).collect();
        let nodes: Vec<String> = nodes.into_iter().collect();
        put!(
            out,
            "{:>6}  {:<24} {:<12} {:<10} {:<20}  {}",
            row.id,
            shown(&row.name),
            shown(&row.queue),
            // How it ended where that says more than its state (`timed-out`, `oom`).
            row.outcome.ending.map_or(row.state.name(), |e| e.name()),
            if nodes.is_empty() { "-".into() } else { nodes.join(",") },
            job.pending.as_ref().map(reason_text).unwrap_or_default()
        );
    }
    out
}

/// `gantry show ID`: the job's state and times, its tasks, what it used, why it waits.
pub fn job_text(id: u64, job: &JobView) -> String {
    let mut out = String::new();
    let row = &job.row;
    let ending = match row.outcome.ending {
        Some(ending) if ending.name() != row.state.name() => format!(" ({})", ending.name()),
        _ => String::new(),
    };
    put!(out, "job {id} {} (queue {}): {}{ending}", shown(&row.name), shown(&row.queue), row.state.name());
    put!(out, "  submitted {}", utc(Some(row.submitted_at_s)));
    put!(out, "  started   {}", utc(row.started_at_s));
    let exit = row.exit_code.map_or_else(|| "-".to_string(), |c| c.to_string());
    put!(out, "  ended     {}  exit code {exit}", utc(row.ended_at_s));
    if let Some(by) = &row.outcome.cancelled_by {
        put!(out, "  cancelled by: {}", shown(by));
    }
    if let Some(oom) = &row.outcome.oom {
        put!(out, "  why: {}", shown(&oom.reason()));
    }
    if let Some(capped) = &job.priority_capped {
        put!(out, "  {}", shown(capped));
    }
    for task in &row.tasks {
        let devices: Vec<String> = task.devices.iter().map(|d| shown(d)).collect();
        let confined = task.confinement.as_ref().map(|c| format!("  [{}]", shown(c))).unwrap_or_default();
        put!(
            out,
            "  task {}/{} on {}: {}{confined}",
            shown(&task.group),
            task.replica,
            shown(&task.node),
            devices.join(",")
        );
    }
    for line in used_lines(job) {
        put!(out, "  {line}");
    }
    if let Some(pending) = &job.pending {
        put!(out, "  waiting: {}", reason_text(pending));
        if let Some(layout) = &job.layout {
            put!(out, "  {}", layout.message);
        }
        if pending.estimate_s.is_some() {
            put!(out, "  expected start: {}", utc(pending.estimate_s));
        }
    }
    out
}

/// What a job used on each node, as its cgroups measured it: its ended runs' (`used`) and the
/// run in progress (`running_used`), each with the limits it was held to.
pub fn used_lines(job: &JobView) -> Vec<String> {
    let mut lines = Vec::new();
    for (what, list) in [("used", &job.row.outcome.used), ("using", &job.running_used)] {
        for gantry_types::NodeUse { node, used: u } in list {
            let cpu = u
                .cpu_ms
                .map_or_else(|| "CPU not measured".to_string(), |ms| format!("CPU {:.1} s", ms as f64 / 1000.0));
            let cpu_limit = u.cpu_limit_milli.map_or_else(
                || " (not limited)".to_string(),
                |m| format!(" (limit {} core{})", m as f64 / 1000.0, if m == 1000 { "" } else { "s" }),
            );
            let peak = u.memory_peak_bytes.map_or_else(
                || "peak memory not measured".to_string(),
                |b| format!("peak memory {}", gantry_types::Bytes(b)),
            );
            let limit = u
                .memory_limit_bytes
                .map_or_else(|| " (not limited)".to_string(), |b| format!(" of {}", gantry_types::Bytes(b)));
            lines.push(format!("{what} on {}: {cpu}{cpu_limit}, {peak}{limit}", shown(node)));
        }
    }
    lines
}

/// `gantry why ID`: why the job waits and when it is expected to start, or that it does not.
pub fn why_text(id: u64, job: &JobView) -> String {
    let mut out = String::new();
    let state = job.row.state.name();
    let Some(pending) = &job.pending else {
        match &job.row.outcome.oom {
            Some(oom) => put!(out, "job {id} is {state} (oom): {}", shown(&oom.reason())),
            None => put!(out, "job {id} is {state}: not waiting"),
        }
        return out;
    };
    let estimate = pending.estimate_s.map(|t| format!(" (expected start {})", utc(Some(t)))).unwrap_or_default();
    put!(out, "job {id} waits: {}{estimate}", reason_text(pending));
    if let Some(layout) = &job.layout {
        put!(out, "  {}", layout.message);
    }
    if let Some(capped) = &job.priority_capped {
        put!(out, "  {}", shown(capped));
    }
    out
}
