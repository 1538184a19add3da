//! `gantry place` and `gantry validate`: read a fleet and a workload, run the engine, print.

use anyhow::{Context, bail};
use clap::Args;
use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy, SearchLimits};
use gantry_sim::place::{Placing, place, text};
use gantry_types::{Fleet, Job};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry place                                  # the bundled demo fleet and workload
  gantry place --fleet fleet.toml --workload jobs.toml
  gantry place --policy fgd --seed 7 --json     # machine-readable (schema: docs/formats.md)

Policies: random, best-fit, dot-product, gpu-packing, gpu-clustering, fgd, spread, topology, default";

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

pub(crate) fn load_fleet(path: Option<&Path>, catalog: &Catalog) -> anyhow::Result<(String, Fleet)> {
    Ok(gantry_spec::load_fleet(path, catalog)?)
}

pub(crate) fn load_workload(path: Option<&Path>, catalog: &Catalog) -> anyhow::Result<(String, Vec<Job>)> {
    Ok(gantry_spec::load_workload(path, catalog)?)
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
            let mut empty = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
            let verdict = gantry_engine::ever::workload_verdict(&mut empty, &jobs, catalog);
            for job in &verdict.once_laid_out {
                println!("  job {job:?} fits once GPUs are laid out for its MIG profile (see gantry plan)");
            }
            let never = verdict.never;
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
    let placing = Placing {
        fleet: &fleet_name,
        workload: &workload_name,
        nodes: fleet.nodes.len(),
        policy: args.policy,
        seed: args.seed,
    };
    let report = place(&mut engine, &jobs, &placing).map_err(|e| anyhow::anyhow!("{workload_name}: {e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
    } else {
        print!("{}", text(&report));
    }
    Ok(ExitCode::SUCCESS)
}
