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
    /// Print what was found as JSON.
    #[arg(long)]
    json: bool,
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
    let fleet = args.fleet.as_deref().map(|p| load_fleet(Some(p), catalog)).transpose()?;
    let workload = args.workload.as_deref().map(|p| load_workload(Some(p), catalog)).transpose()?;
    let fleet = fleet.as_ref().map(|(name, f)| (name.as_str(), f));
    let workload = workload.as_ref().map(|(name, jobs)| (name.as_str(), jobs.as_slice()));
    let v = gantry_sim::validate::check(fleet, workload, catalog).map_err(|e| anyhow::anyhow!("{e}"))?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&v)?),
        false => print!("{}", v.text()),
    }
    Ok(if v.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
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
