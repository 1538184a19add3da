//! `gantry plan`: propose each GPU's mode and MIG layout for a workload mix (the engine's
//! planner, `gantry_engine::plan`), show how the mix fares on it, and export it for
//! Kubernetes: mig-parted configuration, device-plugin sharing configuration, node labels.
//! `--evaluate` replays a day/night-shifting MIG workload in the simulator and compares the
//! online planner with the best static layout (`gantry_sim::mig_day`).

use anyhow::Context;
use clap::Args;
use gantry_sim::mig_day::{DayConfig, report};
use gantry_sim::native::DemandOf;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry plan --fleet examples/plan-fleet.toml --workload examples/plan-mix.toml
  gantry plan --fleet examples/plan-fleet.toml --workload examples/plan-mix.toml --out plan/
  gantry plan --workload jobs.toml --json        # on the bundled demo fleet
  gantry plan --fleet fleet.toml --trace week.jsonl --demand peak   # plan for a trace's concurrency
  gantry plan --evaluate                         # a simulated week: online vs best static
  gantry plan --evaluate --days 2 --seed 3 --load 1.0 --json
  gantry plan --evaluate --seed 1 --seeds 8        # eight weeks: mean, spread and range of the gain
  gantry plan --evaluate --no-moves              # the planner without moving inference instances
  gantry plan --evaluate --live --seeds 4        # the same weeks through the live controller too";

#[derive(Args)]
pub struct PlanArgs {
    /// Fleet file (default: the bundled demo fleet). Its current modes count as today's layout.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// The demand: a workload file (every job counts once).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["evaluate", "trace"], conflicts_with = "trace")]
    workload: Option<PathBuf>,
    /// The demand: a native trace (JSON lines, as `gantry sim --trace` reads), each job shape
    /// counted as often as it runs at once (see --demand).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// With --trace: each shape's mean concurrency over the trace, or its peak.
    #[arg(long, value_parser = ["mean", "peak"], requires = "trace")]
    demand: Option<String>,
    /// Write the plan here: fleet.toml (the planned fleet); for Kubernetes mig-parted.yaml
    /// (also as mig-parted-configmap.yaml for the GPU Operator), device-plugin.yaml (a
    /// ConfigMap) and node-labels.sh; for Slurm slurm-nodes.conf
    /// (GresTypes and NodeName lines) and gres.conf.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Instead of planning a workload: simulate days of a MIG workload whose mix shifts
    /// (inference on MIG slices by day, whole-GPU training by night) and compare the online
    /// planner with the best static layout: demand served, queueing delay, reconfigurations,
    /// inference instances moved to free GPUs for training.
    #[arg(long, conflicts_with_all = ["workload", "trace", "fleet", "out"])]
    evaluate: bool,
    /// With --evaluate: simulated days [default: 7].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=60))]
    days: Option<u32>,
    /// With --evaluate: seed of the arrivals [default: 42].
    #[arg(long)]
    seed: Option<u64>,
    /// With --evaluate: simulate this many weeks with seeds --seed, --seed + 1, … and report
    /// each week's gain and their mean, spread and range (single weeks vary by several
    /// points) [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    seeds: Option<u32>,
    /// With --evaluate: nodes of 8 A100-SXM4-80GB [default: 4].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    nodes: Option<u32>,
    /// With --evaluate: each phase's main demand as a fraction of the fleet, 0.05 to 2
    /// [default: 0.8].
    #[arg(long)]
    load: Option<f64>,
    /// With --evaluate: never move inference instances to empty a GPU for waiting training
    /// (the planner then only drains and waits).
    #[arg(long)]
    no_moves: bool,
    /// With --evaluate: seconds a moved inference instance serves nothing while it restarts
    /// elsewhere, taken off demand served [default: 120].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    restart_s: Option<u64>,
    /// With --evaluate: also run the week through the live controller's state machine in
    /// simulated time (`reconfigure = "auto"`, its layout orders applied by a simulated agent
    /// after the simulator's reconfiguration time, 120 s), against the same controller on the
    /// best static layout, and compare its gain with the simulator's.
    #[arg(long, requires = "evaluate")]
    live: bool,
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    // clap skips `requires` when a conflicting flag is present, so these are checked here.
    if args.demand.is_some() && args.trace.is_none() {
        anyhow::bail!("--demand applies to --trace (how a trace's jobs count); a --workload counts every job once");
    }
    if args.evaluate {
        return evaluate(&args);
    }
    let evaluate_only = [
        ("--days", args.days.is_some()),
        ("--seed", args.seed.is_some()),
        ("--seeds", args.seeds.is_some()),
        ("--nodes", args.nodes.is_some()),
        ("--load", args.load.is_some()),
        ("--no-moves", args.no_moves),
        ("--restart-s", args.restart_s.is_some()),
    ];
    if let Some((flag, _)) = evaluate_only.iter().find(|(_, given)| *given) {
        anyhow::bail!("{flag} applies to --evaluate (the simulated day/night scenario)");
    }
    let catalog = gantry_catalog::Catalog::embedded();
    let (fleet_name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
    let (workload_name, jobs) = demand(&args)?;
    let plan =
        gantry_engine::plan::plan(&fleet, &jobs, catalog).map_err(|e| anyhow::anyhow!("{workload_name}: {e}"))?;
    let (plugin, warnings) = gantry_spec::device_plugin_yaml(&plan.fleet);
    if let Some(dir) = &args.out {
        write_plan(dir, &plan.fleet, &plugin)?;
    }
    if args.json {
        print_plan_json(&plan, &fleet_name, &workload_name, &warnings)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&plan, &format!("{workload_name} on {fleet_name}"), jobs.len(), &warnings);
    if let Some(dir) = &args.out {
        println!(
            "wrote {0}/fleet.toml, {0}/mig-parted.yaml, {0}/mig-parted-configmap.yaml, {0}/device-plugin.yaml, {0}/node-labels.sh, {0}/slurm-nodes.conf, {0}/gres.conf",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The demand to plan for, named: a trace's shapes at their mean (or peak) concurrency, or
/// a workload's jobs.
fn demand(args: &PlanArgs) -> anyhow::Result<(String, Vec<gantry_types::Job>)> {
    let catalog = gantry_catalog::Catalog::embedded();
    let Some(path) = &args.trace else { return crate::place_cmd::load_workload(args.workload.as_deref(), catalog) };
    let file = std::fs::File::open(path).with_context(|| format!("cannot read trace {}", path.display()))?;
    let trace = gantry_spec::read_trace(std::io::BufReader::new(file), catalog, false)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let demand = args.demand.as_deref().unwrap_or("mean");
    let how = if demand == "peak" { DemandOf::Peak } else { DemandOf::Mean };
    let jobs = gantry_sim::native::concurrent_demand(&trace.jobs, how);
    if jobs.is_empty() {
        anyhow::bail!("{}: no job runs long enough to count at its {demand} concurrency", path.display());
    }
    Ok((format!("{} ({demand} concurrency of {} jobs)", path.display(), trace.jobs.len()), jobs))
}

/// `--out DIR`: the planned fleet as each tool reads it.
fn write_plan(dir: &std::path::Path, fleet: &gantry_types::Fleet, plugin: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in gantry_spec::plan_files(fleet, plugin) {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn print_plan_json(
    plan: &gantry_engine::plan::Plan,
    fleet_name: &str,
    workload_name: &str,
    warnings: &[String],
) -> anyhow::Result<()> {
    let gpus: Vec<serde_json::Value> = plan
        .gpus
        .iter()
        .map(|g| {
            serde_json::json!({"node": g.node, "gpu": g.index, "model": g.model, "mode": g.mode.text(), "changed": g.changed})
        })
        .collect();
    let unplaced: Vec<serde_json::Value> =
        plan.unplaced.iter().map(|(job, why)| serde_json::json!({"job": job, "why": why})).collect();
    let out = serde_json::json!({
        "fleet": fleet_name,
        "workload": workload_name,
        "gpus": gpus,
        "placed": plan.placed.len(),
        "unplaced": unplaced,
        "allocation_pct": plan.allocation_pct,
        "stranded_gpus": plan.stranded_gpus,
        "idle_gpus": plan.idle_gpus,
        "reconfigured": plan.reconfigured,
        "warnings": warnings,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_plan(plan: &gantry_engine::plan::Plan, what: &str, jobs: usize, warnings: &[String]) {
    println!("plan for {what}: {} GPUs", plan.gpus.len());
    println!("  {:<16} {:>3}  {:<16} MODE", "NODE", "GPU", "MODEL");
    for g in &plan.gpus {
        let changed = if g.changed { "  (changes)" } else { "" };
        println!("  {:<16} {:>3}  {:<16} {}{changed}", g.node, g.index, g.model, g.mode.text());
    }
    println!(
        "\nplaced {} of {jobs} jobs on the planned fleet (checked by placing them with the engine)",
        plan.placed.len()
    );
    for (job, why) in &plan.unplaced {
        println!("  not placed: {job}: {why}");
    }
    println!(
        "allocation {:.1}% of the fleet; stranded {:.2} GPUs (carved or shared, not held); {} GPU(s) left whole and idle; {} GPU(s) change mode",
        plan.allocation_pct, plan.stranded_gpus, plan.idle_gpus, plan.reconfigured
    );
    for w in warnings {
        println!("note: {w}");
    }
}

/// `--evaluate --seeds N`: N weeks (seeds `config.seed`, `config.seed + 1`, …) on as many
/// threads as there are cores; each week's gain, then their mean, standard deviation and range.
fn evaluate_seeds(
    config: &DayConfig,
    seeds: u32,
    json: bool,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<ExitCode> {
    let progress = |done: usize, total: usize| {
        if bar.length() == Some(0) {
            bar.set_length(total as u64);
        }
        bar.inc(done as u64);
    };
    let weeks = report::evaluate_weeks(config, seeds, &progress);
    bar.finish_and_clear();
    let (configs, weeks) = weeks.map_err(|e| anyhow::anyhow!(e))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report::weeks_json(config, &configs, &weeks))?);
    } else {
        print!("{}", report::weeks_text(config, &configs, &weeks));
    }
    Ok(ExitCode::SUCCESS)
}

/// `gantry plan --evaluate`: the online planner against every static candidate.
fn evaluate(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    use gantry_sim::mig_day::{DayConfig, evaluate};
    let defaults = DayConfig::default();
    let load = args.load.unwrap_or(defaults.load);
    if !(0.05..=2.0).contains(&load) {
        anyhow::bail!("--load {load} is outside 0.05..=2 (each phase's demand as a fraction of the fleet)");
    }
    let config = DayConfig {
        days: args.days.unwrap_or(defaults.days),
        seed: args.seed.unwrap_or(defaults.seed),
        nodes: args.nodes.unwrap_or(defaults.nodes),
        load,
        restart_s: args.restart_s.unwrap_or(defaults.restart_s),
        online: gantry_engine::online::OnlineConfig { move_work: !args.no_moves, ..defaults.online.clone() },
        ..defaults
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} replays  {elapsed} (eta {eta})")
            .expect("valid template"),
    );
    let seeds = args.seeds.unwrap_or(1);
    if args.live {
        return print_live_weeks(&config, seeds, args.json);
    }
    if seeds > 1 {
        return evaluate_seeds(&config, seeds, args.json, &bar);
    }
    let result = evaluate(&config, gantry_catalog::Catalog::embedded(), |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    bar.finish_and_clear();
    print_evaluation(&config, &result, args.json)
}

/// One evaluated week: JSON, or the best static layout beside the online planner.
fn print_evaluation(
    config: &DayConfig,
    result: &gantry_sim::mig_day::Evaluation,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(&report::evaluation_json(config, result))?);
    } else {
        print!("{}", report::evaluation_text(config, result));
    }
    Ok(ExitCode::SUCCESS)
}

/// `gantry plan --evaluate --live [--seeds N]`: each week compared, then the gains' means.
fn print_live_weeks(config: &DayConfig, seeds: u32, json: bool) -> anyhow::Result<ExitCode> {
    let all = gantry_server::live_sim::mig_week::compare_weeks(config, seeds)?;
    if json {
        // Through a JSON value, whose keys are sorted: the order this output has always had.
        println!("{}", serde_json::to_string_pretty(&serde_json::to_value(&all)?)?);
    } else {
        print!("{}", gantry_server::live_sim::mig_week_report::weeks_text(config, &all));
    }
    Ok(ExitCode::SUCCESS)
}
