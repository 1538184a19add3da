//! `gantry mig`: look at and change a GPU's MIG layout by hand, through the same applier the
//! online planner's changes go through (`gantry_agent::mig::apply_layout` over the NVML
//! backend): checked against the catalog, refused on a busy GPU or one not in MIG mode, all
//! or nothing. gantry never switches MIG mode itself (that needs a GPU reset).

use anyhow::Context;
use clap::{Args, Subcommand};
use gantry_agent::mig::{MigBackend, apply_layout, parse_layout};
use gantry_agent::mig_nvml::NvmlMig;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry mig show                                   # every GPU: MIG mode and instances
  gantry mig apply --gpu 0 --layout 2g.20gb@0,1g.10gb@2,1g.10gb@3,3g.40gb@4 --dry-run
  sudo gantry mig apply --gpu 0 --layout 3g.40gb@0,3g.40gb@4
  sudo gantry mig apply --gpu 0 --layout none       # destroy every instance";

#[derive(Args)]
pub struct MigArgs {
    #[command(subcommand)]
    action: MigAction,
}

#[derive(Subcommand)]
enum MigAction {
    /// Each GPU's MIG mode and instances, as NVML reports them.
    Show {
        /// Only this GPU (NVML index).
        #[arg(long)]
        gpu: Option<u32>,
        /// Print JSON: each GPU's index, product, MIG mode and instances.
        #[arg(long)]
        json: bool,
    },
    /// Apply a layout to one idle GPU in MIG mode: instances the layout drops are destroyed,
    /// missing ones created (each with one compute instance), the result read back; on any
    /// failure the old layout is put back.
    Apply {
        /// The GPU (NVML index).
        #[arg(long)]
        gpu: u32,
        /// PROFILE@START,… (e.g. 3g.40gb@0,3g.40gb@4), or `none`.
        #[arg(long)]
        layout: String,
        /// Check everything and print what would change; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn text(layout: &[gantry_types::MigInstanceSpec]) -> String {
    if layout.is_empty() {
        return "(no instances)".into();
    }
    layout.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect::<Vec<_>>().join(",")
}

pub fn run(args: MigArgs) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    match args.action {
        MigAction::Show { gpu, json } => {
            let nvml = NvmlMig::new()?;
            let gpus: Vec<u32> = match gpu {
                Some(g) => vec![g],
                None => (0..nvml.gpu_count()?).collect(),
            };
            let mut shown = Vec::new();
            for g in gpus {
                let (product, mig) = (nvml.product(g)?, nvml.mig_enabled(g)?);
                let instances = if mig { nvml.instances(g)? } else { Vec::new() };
                let mode = if mig { format!("MIG on: {}", text(&instances)) } else { "MIG off".to_string() };
                if !json {
                    println!("gpu{g} {product}: {mode}");
                }
                shown.push(serde_json::json!({"gpu": g, "product": product, "mig": mig, "instances": instances}));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&shown)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        MigAction::Apply { gpu, layout, dry_run } => {
            let target = parse_layout(&layout).map_err(|e| anyhow::anyhow!("--layout: {e}"))?;
            let mut nvml = NvmlMig::new()?;
            let product = nvml.product(gpu)?;
            let model = catalog.lookup(&product).map(|id| catalog.model(id)).with_context(|| {
                format!("GPU {gpu} {product:?} is not in the catalog (`gantry catalog` lists the models)")
            })?;
            let applied = if dry_run {
                gantry_agent::mig::dry_run(&nvml, gpu, model, &target)?
            } else {
                apply_layout(&mut nvml, gpu, model, &target)?
            };
            let verb = if dry_run { "would" } else { "did" };
            println!(
                "gpu{gpu} {product}: {verb} destroy {} and create {}; layout {}",
                text(&applied.destroyed),
                text(&applied.created),
                text(&target)
            );
            if !dry_run {
                println!("restart this node's `gantry agent`: on registering, the controller takes the new layout");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
