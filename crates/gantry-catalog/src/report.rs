//! What the catalog knows of a model, as `gantry catalog` shows it: a report per model (the
//! JSON) and the text — a line per model, or one model in full with its MIG profiles.

use crate::{GpuModel, MigGeometry};
use serde::Serialize;

/// `writeln!` into a `String`, which cannot fail.
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// A model as `gantry catalog --json` writes it.
#[derive(Debug, Serialize)]
pub struct ModelReport {
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

/// A MIG profile of a [`ModelReport`].
#[derive(Debug, Serialize)]
pub struct ProfileReport {
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

impl ModelReport {
    /// `model` as reported.
    pub fn of(model: &GpuModel) -> ModelReport {
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
}

/// One line per model: architecture, memory, compute capability, MIG profiles.
pub fn list_text(models: &[&GpuModel]) -> String {
    let mut out = String::new();
    put!(out, "{:<20} {:<26} {:>6}  {:<5} MIG profiles", "MODEL", "ARCHITECTURE", "MEMORY", "CC");
    for m in models {
        let mig = m.mig.as_ref().map(|g| {
            g.profiles.iter().filter(|p| !p.media_extensions).map(|p| p.name.as_str()).collect::<Vec<_>>().join(" ")
        });
        put!(
            out,
            "{:<20} {:<26} {:>4}GiB  {:<5} {}",
            m.id,
            m.architecture,
            m.memory.0 >> 30,
            format!("{}.{}", m.compute_capability.0, m.compute_capability.1),
            mig.unwrap_or_else(|| "-".into())
        );
    }
    out
}

/// One model in full: names, aliases, its MIG geometry and profiles, what is unverified.
pub fn model_text(m: &GpuModel) -> String {
    let mut out = String::new();
    let (major, minor) = m.compute_capability;
    put!(out, "{}  ({}, {} GiB, compute capability {major}.{minor})", m.id, m.architecture, m.memory.0 >> 30);
    if !m.nvml_names.is_empty() {
        put!(out, "  NVML names: {}", m.nvml_names.join(", "));
    }
    if !m.aliases.is_empty() {
        put!(out, "  aliases: {}", m.aliases.join(", "));
    }
    match &m.mig {
        None => put!(out, "  MIG: not supported (share it with MPS or time-slicing)"),
        Some(g) => mig_text(&mut out, m, g),
    }
    if m.unverified {
        put!(out, "  unverified: {}", m.unverified_fields.join("; "));
    }
    put!(out, "  sources: {}", m.sources.join(", "));
    out
}

fn mig_text(out: &mut String, m: &GpuModel, g: &MigGeometry) {
    put!(
        out,
        "  MIG: {} compute slices, {} memory slices, up to {} instances",
        g.compute_slices,
        g.memory_slices,
        g.max_gpu_instances
    );
    put!(
        out,
        "    {:<12} {:>3} {:>8} {:>8} {:>10} {:>4}  starts",
        "PROFILE",
        "ID",
        "COMPUTE",
        "MEMORY",
        "USABLE",
        "MAX"
    );
    for p in &g.profiles {
        let flag = if p.unverified { "  (unverified)" } else { "" };
        let approx = if p.memory_estimated { "~" } else { "" };
        let usable = format!("{approx}{:.2}GiB", m.mig_memory(p).0 as f64 / f64::from(1u32 << 30));
        put!(
            out,
            "    {:<12} {:>3} {:>8} {:>8} {:>10} {:>4}  {:?}{flag}",
            p.name,
            p.profile_id,
            p.compute_slices,
            p.memory_slices,
            usable,
            p.max_instances,
            p.starts
        );
    }
    if g.profiles.iter().any(|p| p.memory_estimated) {
        put!(out, "    ~: estimated (no capture read it): the lowest usable share seen for as many slices");
    }
}
