//! `gantry catalog`: what the embedded GPU catalog knows, for people and scripts.

use anyhow::bail;
use clap::Args;
use gantry_catalog::{Catalog, GpuModel};
use serde::Serialize;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry catalog                     # every model, one line each
  gantry catalog H100-SXM5-80GB      # one model with its MIG profiles and legal placements
  gantry catalog \"NVIDIA H100 80GB HBM3\" --json";

#[derive(Args)]
pub struct CatalogArgs {
    /// A model id, NVML product name or alias; omit to list every model.
    model: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ModelReport {
    id: String,
    nvml_names: Vec<String>,
    aliases: Vec<String>,
    architecture: String,
    compute_capability: String,
    memory_gib: u64,
    mig: Option<Vec<ProfileReport>>,
    unverified: bool,
    unverified_fields: Vec<String>,
    sources: Vec<String>,
}

#[derive(Serialize)]
struct ProfileReport {
    name: String,
    profile_id: u32,
    compute_slices: u8,
    memory_slices: u8,
    /// Usable memory of one instance, as NVML reports it (MiB).
    memory_mib: u64,
    /// `memory_mib` is estimated (no capture read it).
    memory_estimated: bool,
    max_instances: u8,
    starts: Vec<u8>,
    unverified: bool,
}

fn report(model: &gantry_catalog::GpuModel) -> ModelReport {
    ModelReport {
        id: model.id.clone(),
        nvml_names: model.nvml_names.clone(),
        aliases: model.aliases.clone(),
        architecture: model.architecture.clone(),
        compute_capability: format!("{}.{}", model.compute_capability.0, model.compute_capability.1),
        memory_gib: model.memory.0 >> 30,
        mig: model.mig.as_ref().map(|g| {
            g.profiles
                .iter()
                .map(|p| ProfileReport {
                    name: p.name.clone(),
                    profile_id: p.profile_id,
                    compute_slices: p.compute_slices,
                    memory_slices: p.memory_slices,
                    memory_mib: model.mig_memory(p).0 >> 20,
                    memory_estimated: p.memory_estimated,
                    max_instances: p.max_instances,
                    starts: p.starts.clone(),
                    unverified: p.unverified,
                })
                .collect()
        }),
        unverified: model.unverified,
        unverified_fields: model.unverified_fields.clone(),
        sources: model.sources.clone(),
    }
}

pub fn run(args: CatalogArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded();
    let models: Vec<&GpuModel> = match &args.model {
        None => catalog.models().iter().collect(),
        Some(name) => match catalog.lookup(name) {
            Some(id) => vec![catalog.model(id)],
            None => bail!("unknown GPU model {name:?}\n  hint: run `gantry catalog` for the list"),
        },
    };
    if args.json {
        let reports: Vec<ModelReport> = models.iter().map(|m| report(m)).collect();
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else if args.model.is_none() {
        print_list(&models);
    } else {
        models.into_iter().for_each(print_model);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per model: architecture, memory, compute capability, MIG profiles.
fn print_list(models: &[&GpuModel]) {
    println!("{:<20} {:<26} {:>6}  {:<5} MIG profiles", "MODEL", "ARCHITECTURE", "MEMORY", "CC");
    for m in models {
        let mig = m.mig.as_ref().map(|g| {
            g.profiles.iter().filter(|p| !p.media_extensions).map(|p| p.name.as_str()).collect::<Vec<_>>().join(" ")
        });
        println!(
            "{:<20} {:<26} {:>4}GiB  {:<5} {}",
            m.id,
            m.architecture,
            m.memory.0 >> 30,
            format!("{}.{}", m.compute_capability.0, m.compute_capability.1),
            mig.unwrap_or_else(|| "-".into())
        );
    }
}

/// One model in full: names, aliases, its MIG geometry and profiles, what is unverified.
fn print_model(m: &GpuModel) {
    let (major, minor) = m.compute_capability;
    println!("{}  ({}, {} GiB, compute capability {major}.{minor})", m.id, m.architecture, m.memory.0 >> 30);
    if !m.nvml_names.is_empty() {
        println!("  NVML names: {}", m.nvml_names.join(", "));
    }
    if !m.aliases.is_empty() {
        println!("  aliases: {}", m.aliases.join(", "));
    }
    match &m.mig {
        None => println!("  MIG: not supported (share it with MPS or time-slicing)"),
        Some(g) => print_mig(m, g),
    }
    if m.unverified {
        println!("  unverified: {}", m.unverified_fields.join("; "));
    }
    println!("  sources: {}", m.sources.join(", "));
}

fn print_mig(m: &GpuModel, g: &gantry_catalog::MigGeometry) {
    println!(
        "  MIG: {} compute slices, {} memory slices, up to {} instances",
        g.compute_slices, g.memory_slices, g.max_gpu_instances
    );
    println!(
        "    {:<12} {:>3} {:>8} {:>8} {:>10} {:>4}  starts",
        "PROFILE", "ID", "COMPUTE", "MEMORY", "USABLE", "MAX"
    );
    for p in &g.profiles {
        let flag = if p.unverified { "  (unverified)" } else { "" };
        let approx = if p.memory_estimated { "~" } else { "" };
        let usable = format!("{approx}{:.2}GiB", m.mig_memory(p).0 as f64 / f64::from(1u32 << 30));
        println!(
            "    {:<12} {:>3} {:>8} {:>8} {:>10} {:>4}  {:?}{flag}",
            p.name, p.profile_id, p.compute_slices, p.memory_slices, usable, p.max_instances, p.starts
        );
    }
    if g.profiles.iter().any(|p| p.memory_estimated) {
        println!("    ~: estimated (no capture read it): the lowest usable share seen for as many slices");
    }
}
