//! `gantry plan`: propose each GPU's mode and MIG layout for a workload mix (the engine's
//! planner, `gantry_engine::plan`), show how the mix fares on it, and export it for
//! Kubernetes: mig-parted configuration, device-plugin sharing configuration, node labels.

use anyhow::Context;
use clap::Args;
use gantry_types::GpuMode;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry plan --fleet examples/plan-fleet.toml --workload examples/plan-mix.toml
  gantry plan --fleet examples/plan-fleet.toml --workload examples/plan-mix.toml --out plan/
  gantry plan --workload jobs.toml --json        # on the bundled demo fleet";

#[derive(Args)]
pub struct PlanArgs {
    /// Fleet file (default: the bundled demo fleet). Its current modes count as today's layout.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// The demand: a workload file (every job counts once).
    #[arg(long, value_name = "FILE")]
    workload: PathBuf,
    /// Write the plan here: fleet.toml (the planned fleet), mig-parted.yaml,
    /// device-plugin.yaml (a ConfigMap) and node-labels.sh.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

fn mode_text(mode: &GpuMode) -> String {
    match mode {
        GpuMode::Whole => "whole".into(),
        GpuMode::Mig { instances } => {
            let layout: Vec<String> = instances.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect();
            format!("mig {}", layout.join(" "))
        }
        GpuMode::Mps { max_clients } => format!("mps ({max_clients} clients)"),
        GpuMode::TimeSlice { replicas, .. } => format!("time-slice ×{replicas}"),
    }
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    let (fleet_name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
    let (workload_name, jobs) = crate::place_cmd::load_workload(Some(&args.workload), catalog)?;
    let plan =
        gantry_engine::plan::plan(&fleet, &jobs, catalog).map_err(|e| anyhow::anyhow!("{workload_name}: {e}"))?;
    let (plugin, warnings) = gantry_spec::device_plugin_yaml(&plan.fleet);
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let files = [
            ("fleet.toml", gantry_spec::fleet_to_toml(&plan.fleet)),
            ("mig-parted.yaml", gantry_spec::mig_parted_yaml(&plan.fleet)),
            ("device-plugin.yaml", plugin.clone()),
            (
                "node-labels.sh",
                format!("#!/bin/sh\n# written by gantry plan\n{}", gantry_spec::node_labels(&plan.fleet)),
            ),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    if args.json {
        let gpus: Vec<serde_json::Value> = plan
            .gpus
            .iter()
            .map(|g| {
                serde_json::json!({"node": g.node, "gpu": g.index, "model": g.model, "mode": mode_text(&g.mode), "changed": g.changed})
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
        return Ok(ExitCode::SUCCESS);
    }
    println!("plan for {workload_name} on {fleet_name}: {} GPUs", plan.gpus.len());
    println!("  {:<16} {:>3}  {:<16} MODE", "NODE", "GPU", "MODEL");
    for g in &plan.gpus {
        let changed = if g.changed { "  (changes)" } else { "" };
        println!("  {:<16} {:>3}  {:<16} {}{changed}", g.node, g.index, g.model, mode_text(&g.mode));
    }
    println!(
        "\nplaced {} of {} jobs on the planned fleet (checked by placing them with the engine)",
        plan.placed.len(),
        jobs.len()
    );
    for (job, why) in &plan.unplaced {
        println!("  not placed: {job}: {why}");
    }
    println!(
        "allocation {:.1}% of the fleet; stranded {:.2} GPUs (carved or shared, not held); {} GPU(s) left whole and idle; {} GPU(s) change mode",
        plan.allocation_pct, plan.stranded_gpus, plan.idle_gpus, plan.reconfigured
    );
    for w in &warnings {
        println!("note: {w}");
    }
    if let Some(dir) = &args.out {
        println!(
            "wrote {0}/fleet.toml, {0}/mig-parted.yaml, {0}/device-plugin.yaml, {0}/node-labels.sh",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
