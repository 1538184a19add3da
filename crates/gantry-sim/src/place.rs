//! `gantry place`: a workload placed job by job in file order on an empty fleet, and the
//! report of where each task went or why it could not — the `gantry.place/v1` JSON
//! (docs/formats.md; fields are only ever added) and the table a terminal shows.

use gantry_engine::{Engine, EngineError, Policy};
use gantry_types::{GpuGrant, Job, JobOutcome, Reason, TaskPlacement};
use serde::Serialize;
use std::fmt::Write;

/// `gantry.place/v1`.
#[derive(Debug, Serialize)]
pub struct PlaceReport {
    schema: &'static str,
    fleet: String,
    workload: String,
    policy: &'static str,
    seed: u64,
    jobs: Vec<JobReport>,
    summary: Summary,
}

#[derive(Debug, Serialize)]
struct JobReport {
    name: String,
    queue: String,
    #[serde(flatten)]
    outcome: OutcomeReport,
}

#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
enum OutcomeReport {
    Placed { tasks: Vec<TaskPlacement> },
    Unplaced { reasons: Vec<ReasonReport> },
}

#[derive(Debug, Serialize)]
struct ReasonReport {
    #[serde(flatten)]
    reason: Reason,
    /// On how many candidates (nodes or gang attempts) this was the reason.
    count: u32,
    message: String,
}

#[derive(Debug, Serialize)]
struct Summary {
    jobs: usize,
    placed: usize,
    unplaced: usize,
    nodes: usize,
    gpus: usize,
    /// Compute handed out, in milli-GPU (1000 = one GPU).
    allocated_milli: u64,
    capacity_milli: u64,
}

/// Where a placement ran: the fleet's and workload's names, the policy and seed of `engine`.
#[derive(Debug)]
pub struct Placing<'a> {
    pub fleet: &'a str,
    pub workload: &'a str,
    pub nodes: usize,
    pub policy: Policy,
    pub seed: u64,
}

/// Place `jobs` in order on `engine` (an empty fleet), each kept where it went. `Err`: a job
/// the engine cannot read.
pub fn place(engine: &mut Engine, jobs: &[Job], placing: &Placing<'_>) -> Result<PlaceReport, EngineError> {
    let mut reports = Vec::with_capacity(jobs.len());
    for job in jobs {
        let compiled = engine.compile(job)?;
        let outcome = match engine.place_outcome(&compiled).1 {
            JobOutcome::Placed { tasks } => OutcomeReport::Placed { tasks },
            JobOutcome::Unplaced { reasons } => OutcomeReport::Unplaced {
                reasons: reasons
                    .into_iter()
                    .map(|r| ReasonReport { message: r.reason.to_string(), reason: r.reason, count: r.count })
                    .collect(),
            },
        };
        reports.push(JobReport { name: job.name.clone(), queue: job.queue.clone(), outcome });
    }
    let placed = reports.iter().filter(|r| matches!(r.outcome, OutcomeReport::Placed { .. })).count();
    let summary = Summary {
        jobs: reports.len(),
        placed,
        unplaced: reports.len() - placed,
        nodes: placing.nodes,
        gpus: engine.state().gpus.len(),
        allocated_milli: engine.state().used_milli(),
        capacity_milli: engine.state().total_milli,
    };
    Ok(PlaceReport {
        schema: "gantry.place/v1",
        fleet: placing.fleet.to_string(),
        workload: placing.workload.to_string(),
        policy: placing.policy.name(),
        seed: placing.seed,
        jobs: reports,
        summary,
    })
}

/// The report as a table: a row per placed task, the reasons of the jobs not placed, the
/// allocation it left.
pub fn text(report: &PlaceReport) -> String {
    let s = &report.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "placing {} ({} jobs) on {} ({} nodes, {} GPUs), policy {}, seed {}\n",
        report.workload, s.jobs, report.fleet, s.nodes, s.gpus, report.policy, report.seed
    );
    tasks_table(report, &mut out);
    unplaced_lines(report, &mut out);
    let pct = if s.capacity_milli == 0 { 0.0 } else { s.allocated_milli as f64 * 100.0 / s.capacity_milli as f64 };
    let _ = writeln!(
        out,
        "\n{} of {} jobs placed; GPU allocation {:.2} of {} GPUs ({pct:.1}%)",
        s.placed,
        s.jobs,
        s.allocated_milli as f64 / 1000.0,
        s.capacity_milli / 1000
    );
    out
}

/// A row per placed task: job, group/replica, node, GPUs.
fn tasks_table(report: &PlaceReport, out: &mut String) {
    let mut rows = vec![["JOB".to_string(), "TASK".into(), "NODE".into(), "GPUS".into()]];
    for job in &report.jobs {
        if let OutcomeReport::Placed { tasks } = &job.outcome {
            for t in tasks {
                rows.push([
                    job.name.clone(),
                    format!("{}/{}", t.group, t.replica),
                    t.node.clone(),
                    describe_gpus(&t.gpus),
                ]);
            }
        }
    }
    let widths: Vec<usize> = (0..4).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    for row in &rows {
        let _ = writeln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
}

/// The jobs not placed, each with its reasons and on how many candidates each held.
fn unplaced_lines(report: &PlaceReport, out: &mut String) {
    let unplaced: Vec<&JobReport> =
        report.jobs.iter().filter(|j| matches!(j.outcome, OutcomeReport::Unplaced { .. })).collect();
    if unplaced.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nnot placed:");
    for job in unplaced {
        if let OutcomeReport::Unplaced { reasons } = &job.outcome {
            let _ = writeln!(out, "  {}", job.name);
            for r in reasons {
                let on = if r.count == 1 { String::new() } else { format!(" ({} candidates)", r.count) };
                let _ = writeln!(out, "    - {}{on}", r.message);
            }
        }
    }
}

fn describe_gpus(grants: &[GpuGrant]) -> String {
    if grants.is_empty() {
        return "-".into();
    }
    if grants.iter().all(|g| matches!(g, GpuGrant::Whole { .. })) {
        let ids: Vec<String> = grants.iter().map(|g| g.gpu().to_string()).collect();
        return format!("gpu {} (whole)", ids.join(","));
    }
    grants.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ")
}
