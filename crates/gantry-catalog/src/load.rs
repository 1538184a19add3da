//! Parsing the reference JSON into the catalog, and the self-consistency rules every model must
//! pass. Kept apart from the lookups so the rules read in one place.

use crate::mig::{MigGeometry, MigProfile};
use crate::{Catalog, GpuModel, ModelId, NvlinkFabric, normalize};
use gantry_types::Bytes;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) const EMBEDDED_CATALOG: &str = include_str!("../data/gpu-catalog.json");
pub(crate) const EMBEDDED_NVML_NAMES: &str = include_str!("../data/nvml-names.json");

/// A catalog file that cannot be used, with the model and the broken rule.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog is not valid JSON for its schema: {0}")]
    Json(#[from] serde_json::Error),
    #[error("model {model}: {problem}")]
    Inconsistent { model: String, problem: String },
    #[error("name {name:?} is claimed by both {first} and {second}")]
    AmbiguousName { name: String, first: String, second: String },
}

#[derive(Deserialize)]
struct RawCatalog {
    gpus: Vec<RawGpu>,
}

#[derive(Deserialize)]
struct RawGpu {
    id: String,
    nvml_name: Option<String>,
    #[serde(default)]
    aliases: Vec<String>,
    architecture: String,
    compute_capability: String,
    memory_gib: u64,
    sm_count: Option<u32>,
    mig_capable: bool,
    mig: Option<RawMig>,
    interconnect: Option<serde_json::Value>,
    #[serde(default)]
    source: Vec<String>,
    #[serde(default)]
    unverified: bool,
    #[serde(default)]
    unverified_fields: Vec<String>,
}

#[derive(Deserialize)]
struct RawMig {
    compute_slices: Option<u8>,
    memory_slices: Option<u8>,
    max_gpu_instances: Option<u8>,
    #[serde(default)]
    profiles: Vec<RawProfile>,
    same_as: Option<String>,
}

#[derive(Deserialize)]
struct RawProfile {
    name: String,
    profile_id: u32,
    compute_slices: u8,
    memory_slices: u8,
    memory_gb_nominal: u32,
    /// GiB, as `nvidia-smi mig -lgip` reports it (null: not read).
    memory_gib_reported: Option<f64>,
    max_instances: u8,
    placements: RawPlacements,
    #[serde(default)]
    media_extensions: bool,
    #[serde(default)]
    unverified: bool,
}

#[derive(Deserialize)]
struct RawPlacements {
    starts: Vec<u8>,
    size: u8,
}

#[derive(Deserialize)]
struct RawNvmlNames {
    names: BTreeMap<String, RawNvmlEntry>,
}

#[derive(Deserialize)]
struct RawNvmlEntry {
    nvml_names: Vec<String>,
    unverified: bool,
}

pub(crate) fn parse(catalog_json: &str, nvml_json: &str) -> Result<Catalog, CatalogError> {
    let raw: RawCatalog = serde_json::from_str(catalog_json)?;
    let nvml: RawNvmlNames = serde_json::from_str(nvml_json)?;
    let mut models = Vec::with_capacity(raw.gpus.len());
    let mut same_as = Vec::new();
    for gpu in raw.gpus {
        let (model, copy_from) = convert(gpu, &nvml)?;
        if let Some(other) = copy_from {
            same_as.push((models.len(), other));
        }
        models.push(model);
    }
    for (index, other) in same_as {
        let source = models.iter().find(|m| m.id == other).and_then(|m| m.mig.clone());
        let Some(geometry) = source else {
            return Err(inconsistent(&models[index].id, format!("mig.same_as {other:?} names no MIG model")));
        };
        models[index].mig = Some(geometry);
    }
    estimate_unreported_memory(&mut models);
    for model in &models {
        check_model(model)?;
    }
    let by_name = index_names(&models)?;
    Ok(Catalog { models, by_name })
}

fn convert(gpu: RawGpu, nvml: &RawNvmlNames) -> Result<(GpuModel, Option<String>), CatalogError> {
    let compute_capability = parse_capability(&gpu.compute_capability)
        .ok_or_else(|| inconsistent(&gpu.id, format!("compute_capability {:?}", gpu.compute_capability)))?;
    let mut nvml_names: Vec<String> = gpu.nvml_name.into_iter().collect();
    let mut unverified_fields = gpu.unverified_fields;
    if let Some(entry) = nvml.names.get(&gpu.id) {
        for name in &entry.nvml_names {
            if !nvml_names.contains(name) {
                nvml_names.push(name.clone());
            }
        }
        if entry.unverified {
            unverified_fields.push("nvml_names (project overlay data/nvml-names.json)".into());
        }
    }
    let (mig, same_as) = match (gpu.mig_capable, gpu.mig) {
        (false, _) | (true, None) => (None, None),
        (true, Some(raw)) if raw.same_as.is_some() => (None, raw.same_as),
        (true, Some(raw)) => (Some(convert_mig(&gpu.id, raw)?), None),
    };
    let model = GpuModel {
        aliases: gpu.aliases.iter().map(|a| clean_alias(a)).filter(|a| !a.is_empty()).collect(),
        architecture: gpu.architecture,
        compute_capability,
        memory: Bytes::gib(gpu.memory_gib),
        sm_count: gpu.sm_count,
        mig,
        nvlink: fabric(gpu.interconnect.as_ref()),
        unverified: gpu.unverified,
        unverified_fields,
        sources: gpu.source,
        nvml_names,
        id: gpu.id,
    };
    Ok((model, same_as))
}

fn convert_mig(model: &str, raw: RawMig) -> Result<MigGeometry, CatalogError> {
    let missing = |field: &str| inconsistent(model, format!("mig.{field} missing"));
    let profiles = raw
        .profiles
        .into_iter()
        .map(|p| MigProfile {
            name: p.name,
            profile_id: p.profile_id,
            compute_slices: p.compute_slices,
            memory_slices: p.memory_slices,
            memory_gb_nominal: p.memory_gb_nominal,
            // Whole MiB, rounded down (never more than the driver gives).
            memory_reported: p.memory_gib_reported.map(|gib| Bytes(((gib * 1024.0).floor() as u64) << 20)),
            memory_estimated: false,
            max_instances: p.max_instances,
            starts: p.placements.starts,
            placement_size: p.placements.size,
            media_extensions: p.media_extensions,
            unverified: p.unverified,
        })
        .collect();
    Ok(MigGeometry {
        compute_slices: raw.compute_slices.ok_or_else(|| missing("compute_slices"))?,
        memory_slices: raw.memory_slices.ok_or_else(|| missing("memory_slices"))?,
        max_gpu_instances: raw.max_gpu_instances.ok_or_else(|| missing("max_gpu_instances"))?,
        profiles,
    })
}

/// Fill in the usable memory of profiles whose capture did not read it: a profile of the same
/// model with as many memory slices that was read (a `+me` twin), else the model's nominal
/// share scaled by the lowest reported/nominal ratio any model shows for that many slices
/// (conservative: a request is never placed on an instance that may be too small). Marked
/// `memory_estimated`.
fn estimate_unreported_memory(models: &mut [GpuModel]) {
    let share = |model: &GpuModel, slices: u8| {
        let geometry = model.mig.as_ref().expect("MIG models only");
        model.memory.0 as f64 / f64::from(geometry.memory_slices) * f64::from(slices)
    };
    let mut lowest: BTreeMap<u8, f64> = BTreeMap::new();
    for model in models.iter().filter(|m| m.mig.is_some()) {
        for p in &model.mig.as_ref().expect("MIG").profiles {
            if let Some(reported) = p.memory_reported {
                let ratio = reported.0 as f64 / share(model, p.memory_slices);
                let entry = lowest.entry(p.memory_slices).or_insert(ratio);
                *entry = entry.min(ratio);
            }
        }
    }
    for model in models.iter_mut().filter(|m| m.mig.is_some()) {
        let read: Vec<(u8, Bytes)> = model
            .mig
            .as_ref()
            .expect("MIG")
            .profiles
            .iter()
            .filter_map(|p| p.memory_reported.map(|r| (p.memory_slices, r)))
            .collect();
        let shares: Vec<f64> =
            model.mig.as_ref().expect("MIG").profiles.iter().map(|p| share(model, p.memory_slices)).collect();
        let geometry = model.mig.as_mut().expect("MIG");
        for (p, nominal) in geometry.profiles.iter_mut().zip(shares) {
            if p.memory_reported.is_some() {
                continue;
            }
            let twin = read.iter().find(|(slices, _)| *slices == p.memory_slices).map(|(_, r)| *r);
            let scaled = lowest.get(&p.memory_slices).map(|ratio| Bytes(((nominal * ratio) as u64 >> 20) << 20));
            p.memory_reported = twin.or(scaled).or(Some(Bytes(((nominal * 0.9) as u64 >> 20) << 20)));
            p.memory_estimated = true;
        }
    }
}

/// "A100-PCIE-40GB (same MIG table)" → "A100-PCIE-40GB"; "'H100 on GH200' 96GB HBM3" → "H100 on GH200".
fn clean_alias(alias: &str) -> String {
    let head = alias.split(" (").next().unwrap_or(alias);
    match head.strip_prefix('\'').and_then(|rest| rest.split('\'').next()) {
        Some(quoted) => quoted.trim().to_string(),
        None => head.trim().to_string(),
    }
}

fn parse_capability(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn fabric(interconnect: Option<&serde_json::Value>) -> NvlinkFabric {
    let Some(ic) = interconnect else { return NvlinkFabric::None };
    if ic.get("nvswitch_in_hgx8").and_then(|v| v.as_bool()) == Some(true) {
        return NvlinkFabric::Switch;
    }
    match ic.get("nvlink").and_then(|v| v.as_str()) {
        Some(text) if text.contains("bridge") => NvlinkFabric::Bridge,
        _ => NvlinkFabric::None,
    }
}

fn inconsistent(model: &str, problem: String) -> CatalogError {
    CatalogError::Inconsistent { model: model.to_string(), problem }
}

/// The rules every MIG table must satisfy; see `tests.rs` for the table-driven checks.
fn check_model(model: &GpuModel) -> Result<(), CatalogError> {
    let Some(geometry) = &model.mig else { return Ok(()) };
    let fail = |problem: String| Err(inconsistent(&model.id, problem));
    if geometry.memory_slices == 8 && geometry.compute_slices != 7 {
        return fail(format!("8 memory slices need 7 compute slices, found {}", geometry.compute_slices));
    }
    if geometry.max_gpu_instances > geometry.compute_slices {
        return fail("max_gpu_instances exceeds compute slices".into());
    }
    let mut names = BTreeSet::new();
    for p in &geometry.profiles {
        if !names.insert(p.name.as_str()) {
            return fail(format!("profile {} listed twice", p.name));
        }
        if p.placement_size != p.memory_slices {
            return fail(format!(
                "{}: placement size {} != memory slices {}",
                p.name, p.placement_size, p.memory_slices
            ));
        }
        if p.starts.is_empty() || p.max_instances == 0 {
            return fail(format!("{}: no legal placement", p.name));
        }
        if let Some(&start) = p.starts.iter().find(|&&s| s + p.placement_size > geometry.memory_slices) {
            return fail(format!(
                "{}: start {start} + size {} runs past {} memory slices",
                p.name, p.placement_size, geometry.memory_slices
            ));
        }
        if p.compute_slices == 0 || p.compute_slices > geometry.compute_slices {
            return fail(format!("{}: {} compute slices of {}", p.name, p.compute_slices, geometry.compute_slices));
        }
        if p.max_instances as u32 * p.compute_slices as u32 > geometry.compute_slices as u32
            || p.max_instances as u32 * p.memory_slices as u32 > geometry.memory_slices as u32
        {
            return fail(format!("{}: {} instances cannot fit the slices", p.name, p.max_instances));
        }
        // On 8-memory-slice GPUs, slot 7 has no compute slice of its own: a one-slice profile
        // may not start there.
        if geometry.memory_slices == 8 && p.memory_slices == 1 && p.starts.contains(&7) {
            return fail(format!("{}: one-slice profile may not start at slot 7", p.name));
        }
        if p.compute_slices_in_name() != Some(p.compute_slices) {
            return fail(format!("{}: name disagrees with {} compute slices", p.name, p.compute_slices));
        }
    }
    Ok(())
}

fn index_names(models: &[GpuModel]) -> Result<BTreeMap<String, ModelId>, CatalogError> {
    let mut by_name = BTreeMap::new();
    for (i, model) in models.iter().enumerate() {
        let id = ModelId(i as u16);
        for name in model.names() {
            let key = normalize(name);
            match by_name.get(&key) {
                Some(&other) if other != id => {
                    return Err(CatalogError::AmbiguousName {
                        name: name.to_string(),
                        first: models[other_index(other)].id.clone(),
                        second: model.id.clone(),
                    });
                }
                _ => {
                    by_name.insert(key, id);
                }
            }
        }
    }
    Ok(by_name)
}

fn other_index(id: ModelId) -> usize {
    id.0 as usize
}
