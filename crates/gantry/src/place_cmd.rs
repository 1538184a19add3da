//! `gantry place` and `gantry validate`: read a fleet and a workload, run the engine, print.

use anyhow::{Context, bail};
use clap::Args;
use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy, SearchLimits};
use gantry_types::{Fleet, GpuGrant, Job, JobOutcome, Reason, TaskPlacement};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry place                                  # the bundled demo fleet and workload
  gantry place --fleet fleet.toml --workload jobs.toml
  gantry place --policy fgd --seed 7 --json     # machine-readable (schema: docs/formats.md)

Policies: random, best-fit, dot-product, gpu-packing, gpu-clustering, fgd, spread, topology, default";

const DEMO_FLEET: &str = include_str!("../../../examples/demo-fleet.toml");
pub(crate) const DEMO_WORKLOAD: &str = include_str!("../../../examples/demo-workload.toml");

#[derive(Args)]
pub struct PlaceArgs {
    /// Fleet file (TOML). Default: the bundled demo fleet.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// Workload file (TOML), placed job by job in file order. Default: the bundled demo workload.
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Scoring policy.
    #[arg(long, default_value = "default", value_parser = parse_policy)]
    policy: Policy,
    /// Seed for tie-breaks and the random policy: same inputs and seed, same placements.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Score every node instead of the first 16 with room (slower on large fleets, exact).
    #[arg(long)]
    exhaustive: bool,
    /// Print JSON (schema gantry.place/v1, see docs/formats.md) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ValidateArgs {
    /// Fleet file to check.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// Workload file to check.
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
}

fn read(path: &Path, what: &str) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {what} file {}", path.display()))?;
    if meta.len() > gantry_spec::SPEC_BYTES_MAX as u64 {
        bail!("{what} file {} is {} bytes, the limit is {}", path.display(), meta.len(), gantry_spec::SPEC_BYTES_MAX);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} file {} as UTF-8 text", path.display()))
}

pub(crate) fn load_fleet(path: Option<&Path>, catalog: &Catalog) -> anyhow::Result<(String, Fleet)> {
    let (name, text) = match path {
        Some(p) => (p.display().to_string(), read(p, "fleet")?),
        None => ("demo fleet".to_string(), DEMO_FLEET.to_string()),
    };
    let fleet = gantry_spec::parse_fleet(&text, catalog).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok((name, fleet))
}

pub(crate) fn load_workload(path: Option<&Path>, catalog: &Catalog) -> anyhow::Result<(String, Vec<Job>)> {
    let (name, text) = match path {
        Some(p) => (p.display().to_string(), read(p, "workload")?),
        None => ("demo workload".to_string(), DEMO_WORKLOAD.to_string()),
    };
    let jobs = gantry_spec::parse_workload(&text, catalog).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok((name, jobs))
}

pub fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded();
    if args.fleet.is_none() && args.workload.is_none() {
        bail!("nothing to validate\n  hint: pass --fleet FILE and/or --workload FILE");
    }
    let mut fleet = None;
    if let Some(path) = &args.fleet {
        let (name, f) = load_fleet(Some(path), catalog)?;
        let gpus: usize = f.nodes.iter().map(|n| n.gpus.len()).sum();
        println!("{name}: ok, {} nodes, {gpus} GPUs", f.nodes.len());
        fleet = Some(f);
    }
    if let Some(path) = &args.workload {
        let (name, jobs) = load_workload(Some(path), catalog)?;
        let tasks: u32 = jobs.iter().map(Job::task_count).sum();
        println!("{name}: ok, {} jobs, {tasks} tasks", jobs.len());
        if let Some(fleet) = &fleet {
            let never = never_fit(fleet, &jobs, catalog)?;
            for (job, why) in &never {
                println!("  job {job:?} can never run on this fleet: {why}");
            }
            if !never.is_empty() {
                println!("{} of {} jobs can never run on this fleet", never.len(), jobs.len());
                return Ok(ExitCode::from(1));
            }
            println!("every job fits the empty fleet");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The jobs no GPU of `fleet` could ever hold, with why — checked as the live controller
/// checks a submission (`gantry_engine::ever`).
fn never_fit(fleet: &Fleet, jobs: &[Job], catalog: &'static Catalog) -> anyhow::Result<Vec<(String, String)>> {
    use gantry_engine::ever::{Fits, could_run};
    let mut engine = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut checks = Default::default();
    let mut never = Vec::new();
    for job in jobs {
        let compiled = match engine.compile(job) {
            Ok(c) => c,
            Err(e) => {
                never.push((job.name.clone(), e.to_string()));
                continue;
            }
        };
        match could_run(&mut engine, job, &compiled, catalog, &mut checks) {
            Ok(Fits::Now) => {}
            Ok(Fits::OnceLaidOut) => {
                println!("  job {:?} fits once GPUs are laid out for its MIG profile (see gantry plan)", job.name)
            }
            Err(reasons) => {
                let why: Vec<String> = reasons.iter().take(3).map(|r| r.reason.to_string()).collect();
                never.push((job.name.clone(), why.join("; ")));
            }
        }
    }
    Ok(never)
}

/// `gantry.place/v1`: documented in docs/formats.md; fields are only ever added.
#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    fleet: &'a str,
    workload: &'a str,
    policy: &'static str,
    seed: u64,
    jobs: Vec<JobReport>,
    summary: Summary,
}

#[derive(Serialize)]
struct JobReport {
    name: String,
    queue: String,
    #[serde(flatten)]
    outcome: OutcomeReport,
}

#[derive(Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
enum OutcomeReport {
    Placed { tasks: Vec<TaskPlacement> },
    Unplaced { reasons: Vec<ReasonReport> },
}

#[derive(Serialize)]
struct ReasonReport {
    #[serde(flatten)]
    reason: Reason,
    /// On how many candidates (nodes or gang attempts) this was the reason.
    count: u32,
    message: String,
}

#[derive(Serialize)]
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

pub fn run(args: PlaceArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded();
    if args.fleet.is_some() != args.workload.is_some() {
        bail!("give both --fleet and --workload, or neither for the bundled demo");
    }
    let (fleet_name, fleet) = load_fleet(args.fleet.as_deref(), catalog)?;
    let (workload_name, jobs) = load_workload(args.workload.as_deref(), catalog)?;
    let limits = if args.exhaustive { SearchLimits::exhaustive() } else { SearchLimits::default() };
    let config = EngineConfig { policy: args.policy, seed: args.seed, limits, shapes: None };
    let mut engine = Engine::new(&fleet, catalog, config).map_err(|e| anyhow::anyhow!("{fleet_name}: {e}"))?;
    let mut reports = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let compiled = engine.compile(job).map_err(|e| anyhow::anyhow!("{workload_name}: {e}"))?;
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
        nodes: fleet.nodes.len(),
        gpus: engine.state().gpus.len(),
        allocated_milli: engine.state().used_milli(),
        capacity_milli: engine.state().total_milli,
    };
    let report = Report {
        schema: "gantry.place/v1",
        fleet: &fleet_name,
        workload: &workload_name,
        policy: args.policy.name(),
        seed: args.seed,
        jobs: reports,
        summary,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(report: &Report<'_>) {
    let s = &report.summary;
    println!(
        "placing {} ({} jobs) on {} ({} nodes, {} GPUs), policy {}, seed {}\n",
        report.workload, s.jobs, report.fleet, s.nodes, s.gpus, report.policy, report.seed
    );
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
        println!(
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
    let unplaced: Vec<&JobReport> =
        report.jobs.iter().filter(|j| matches!(j.outcome, OutcomeReport::Unplaced { .. })).collect();
    if !unplaced.is_empty() {
        println!("\nnot placed:");
        for job in unplaced {
            if let OutcomeReport::Unplaced { reasons } = &job.outcome {
                println!("  {}", job.name);
                for r in reasons {
                    let on = if r.count == 1 { String::new() } else { format!(" ({} candidates)", r.count) };
                    println!("    - {}{on}", r.message);
                }
            }
        }
    }
    let pct = if s.capacity_milli == 0 { 0.0 } else { s.allocated_milli as f64 * 100.0 / s.capacity_milli as f64 };
    println!(
        "\n{} of {} jobs placed; GPU allocation {:.2} of {} GPUs ({pct:.1}%)",
        s.placed,
        s.jobs,
        s.allocated_milli as f64 / 1000.0,
        s.capacity_milli / 1000
    );
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
