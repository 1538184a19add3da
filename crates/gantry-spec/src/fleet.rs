//! The fleet file (`fleet.toml`): nodes, their GPUs and each GPU's sharing mode. See
//! docs/formats.md. Node templates with `count` expand to `name-0 .. name-N`.

use crate::error::{SpecError, from_toml};
use crate::quantity::{self, Quantity};
use gantry_catalog::{Catalog, NvlinkFabric};
use gantry_types::{Bytes, Fleet, Gpu, GpuMode, MigInstanceSpec, Node, Taint};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Most nodes a fleet file may expand to (the engine targets 10,000; 100,000 leaves headroom).
pub const FLEET_NODES_MAX: u64 = 100_000;
/// MPS client limit on Volta and later (MPS docs: 48 client contexts per device).
pub const MPS_CLIENTS_MAX: i64 = 48;
/// Most time-slice replicas per GPU; beyond this each replica's share is meaningless.
pub const TIME_SLICE_REPLICAS_MAX: i64 = 64;
/// Most GPUs on one node: the largest real boards carry 8–16; 64 leaves headroom (and is the
/// engine's `GPUS_PER_NODE_MAX`).
pub const NODE_GPUS_MAX: i64 = 64;
/// Largest spec file read (a 10,000-node fleet written out node by node is ~3 MiB).
pub const SPEC_BYTES_MAX: usize = 16 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    #[serde(default)]
    node: Vec<NodeEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    count: Option<i64>,
    cpu: Quantity,
    memory: Quantity,
    rack: Option<String>,
    block: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<String>,
    gpus: Option<GpusEntry>,
    #[serde(default)]
    gpu: Vec<GpuOverride>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpusEntry {
    model: String,
    count: i64,
    /// `auto` (from the catalog), `all` (one NVSwitch domain), `pairs` (bridged pairs), `none`.
    nvlink: Option<String>,
    /// NUMA node per GPU, or `numa_nodes` to split the GPUs evenly.
    numa: Option<Vec<i64>>,
    numa_nodes: Option<i64>,
    mode: Option<String>,
    /// MIG layout: a list of `"3g.40gb@0"`, `{ profile = "3g.40gb", start = 0 }` or a bare
    /// profile, or counts `{ "1g.10gb" = 7 }`.
    mig: Option<MigLayout>,
    max_clients: Option<i64>,
    replicas: Option<i64>,
    memory_per_replica: Option<Quantity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuOverride {
    index: i64,
    mode: Option<String>,
    /// MIG layout: a list of `"3g.40gb@0"`, `{ profile = "3g.40gb", start = 0 }` or a bare
    /// profile, or counts `{ "1g.10gb" = 7 }`.
    mig: Option<MigLayout>,
    max_clients: Option<i64>,
    replicas: Option<i64>,
    memory_per_replica: Option<Quantity>,
}

/// The sharing-mode keys, shared by `[node.gpus]` and `[[node.gpu]]`.
struct ModeEntry<'a> {
    mode: Option<&'a str>,
    mig: Option<&'a MigLayout>,
    max_clients: Option<i64>,
    replicas: Option<i64>,
    memory_per_replica: Option<&'a Quantity>,
}

macro_rules! mode_entry {
    ($e:expr) => {
        ModeEntry {
            mode: $e.mode.as_deref(),
            mig: $e.mig.as_ref(),
            max_clients: $e.max_clients,
            replicas: $e.replicas,
            memory_per_replica: $e.memory_per_replica.as_ref(),
        }
    };
}

#[derive(Deserialize)]
#[serde(untagged)]
enum MigEntry {
    Short(String),
    Long { profile: String, start: i64 },
}

/// A MIG layout as written: a list of instances (with or without starts), or counts per
/// profile.
#[derive(Deserialize)]
#[serde(untagged)]
enum MigLayout {
    List(Vec<MigEntry>),
    Counts(std::collections::BTreeMap<String, i64>),
}

/// Parse and validate a fleet file.
pub fn parse_fleet(text: &str, catalog: &Catalog) -> Result<Fleet, SpecError> {
    if text.len() > SPEC_BYTES_MAX {
        return Err(SpecError::new("", format!("fleet file is {} bytes, the limit is {SPEC_BYTES_MAX}", text.len())));
    }
    let file: FleetFile = toml::from_str(text).map_err(|e| from_toml("fleet", text, e))?;
    if file.node.is_empty() {
        return Err(SpecError::new("node", "the fleet has no nodes").hint("add a [[node]] table; see docs/formats.md"));
    }
    let mut nodes = Vec::new();
    let mut names = BTreeSet::new();
    for entry in &file.node {
        for node in expand(entry, catalog)? {
            if !names.insert(node.name.clone()) {
                return Err(SpecError::new(
                    format!("node {:?}", node.name),
                    format!("node name used twice{}", crate::error::name_lines(text, &node.name)),
                )
                .hint("node names must be unique; templates with count add -0, -1, ..."));
            }
            nodes.push(node);
            if nodes.len() as u64 > FLEET_NODES_MAX {
                return Err(SpecError::new("node", format!("more than {FLEET_NODES_MAX} nodes")));
            }
        }
    }
    Ok(Fleet { nodes })
}

fn expand(entry: &NodeEntry, catalog: &Catalog) -> Result<Vec<Node>, SpecError> {
    let at = format!("node {:?}", entry.name);
    if entry.name.trim().is_empty() {
        return Err(SpecError::new("node.name", "empty node name"));
    }
    let count = match entry.count {
        None => None,
        Some(c) => Some(quantity::count(
            &format!("{at} / count"),
            c,
            1,
            FLEET_NODES_MAX as i64,
            "count replicates the node; omit it for one node",
        )?),
    };
    let cpu = quantity::cpu(&format!("{at} / cpu"), &entry.cpu)?;
    let memory = quantity::memory(&format!("{at} / memory"), &entry.memory)?;
    let taints = entry.taints.iter().map(|t| parse_taint(&at, t)).collect::<Result<Vec<_>, _>>()?;
    let template = gpus(&at, entry, catalog)?;
    let names: Vec<String> = match count {
        None => vec![entry.name.clone()],
        Some(n) => (0..n).map(|i| format!("{}-{i}", entry.name)).collect(),
    };
    Ok(names
        .into_iter()
        .map(|name| {
            let gpus = template.iter().map(|g| Gpu { uuid: uuid_for(&name, g.index), ..g.clone() }).collect();
            Node {
                name,
                cpu,
                memory,
                labels: entry.labels.clone(),
                taints: taints.clone(),
                rack: entry.rack.clone(),
                block: entry.block.clone(),
                gpus,
            }
        })
        .collect())
}

fn parse_taint(at: &str, text: &str) -> Result<Taint, SpecError> {
    let bad = || {
        SpecError::new(format!("{at} / taints"), format!("{text:?} is not a taint"))
            .hint("write key=value:Effect or key:Effect, e.g. \"dedicated=training:NoSchedule\"")
    };
    let (kv, effect) = text.rsplit_once(':').ok_or_else(bad)?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() || !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(bad());
    }
    Ok(Taint { key: key.into(), value: value.into(), effect: effect.into() })
}

/// A stable, UUID-shaped id for a simulated GPU: `GPU-` and 32 hex digits from a hash of the
/// node name and index (FNV-1a, so it never changes between releases).
pub fn uuid_for(node: &str, index: u32) -> String {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in node.bytes().chain(index.to_le_bytes()) {
        h ^= b as u128;
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    let hex = format!("{h:032x}");
    format!("GPU-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn gpus(at: &str, entry: &NodeEntry, catalog: &Catalog) -> Result<Vec<Gpu>, SpecError> {
    let Some(g) = &entry.gpus else {
        if !entry.gpu.is_empty() {
            return Err(SpecError::new(format!("{at} / gpu"), "per-GPU overrides on a node without [node.gpus]"));
        }
        return Ok(Vec::new());
    };
    let field = format!("{at} / gpus");
    let model_id =
        catalog.lookup(&g.model).ok_or_else(|| unknown_model(&format!("{field}.model"), &g.model, catalog))?;
    let model = catalog.model(model_id);
    let count = quantity::count(
        &format!("{field}.count"),
        g.count,
        1,
        NODE_GPUS_MAX,
        "a node holds 1 to 64 GPUs; omit [node.gpus] for a CPU-only node",
    )?;
    let numa = numa_layout(&field, g, count)?;
    let nvlink = nvlink_layout(&field, g.nvlink.as_deref(), model.nvlink, count)?;
    let default_mode = mode(&field, &mode_entry!(g), model_id, catalog).map_err(|e| {
        // Time-slice at node level with replicas only on [[node.gpu]] entries: say where they go.
        if e.field.ends_with(".replicas") && g.replicas.is_none() && entry.gpu.iter().any(|o| o.replicas.is_some()) {
            e.hint(
                "replicas belongs beside the mode it configures: put replicas (and memory_per_replica) in [node.gpus] \
                 next to mode = \"time-slice\" for every GPU, or move mode = \"time-slice\" into each [[node.gpu]] \
                 entry that sets replicas",
            )
        } else {
            e
        }
    })?;
    let mut gpus: Vec<Gpu> = (0..count)
        .map(|i| Gpu {
            index: i,
            model: model.id.clone(),
            uuid: String::new(),
            numa: numa[i as usize],
            pcie_switch: i / 2,
            nvlink_domain: nvlink[i as usize],
            mode: default_mode.clone(),
        })
        .collect();
    let mut seen = BTreeSet::new();
    for over in &entry.gpu {
        let f = format!("{at} / gpu[index={}]", over.index);
        let index = quantity::count(
            &format!("{f}.index"),
            over.index,
            0,
            count as i64 - 1,
            "index counts from 0 within the node's GPUs",
        )?;
        if !seen.insert(index) {
            return Err(SpecError::new(f, "GPU overridden twice"));
        }
        gpus[index as usize].mode = mode(&f, &mode_entry!(over), model_id, catalog)?;
    }
    Ok(gpus)
}

fn numa_layout(field: &str, g: &GpusEntry, count: u32) -> Result<Vec<u32>, SpecError> {
    match (&g.numa, g.numa_nodes) {
        (Some(_), Some(_)) => Err(SpecError::new(format!("{field}.numa"), "give numa or numa_nodes, not both")),
        (Some(list), None) => {
            if list.len() != count as usize {
                return Err(SpecError::new(
                    format!("{field}.numa"),
                    format!("{} entries for {count} GPUs", list.len()),
                )
                .hint("one NUMA node per GPU, in index order"));
            }
            list.iter()
                .map(|&n| quantity::count(&format!("{field}.numa"), n, 0, 255, "NUMA node ids are small integers"))
                .collect()
        }
        (None, nodes) => {
            let nodes = quantity::count(
                &format!("{field}.numa_nodes"),
                nodes.unwrap_or(1),
                1,
                count as i64,
                "split the GPUs evenly over this many NUMA nodes",
            )?;
            Ok((0..count).map(|i| i * nodes / count).collect())
        }
    }
}

fn nvlink_layout(
    field: &str,
    nvlink: Option<&str>,
    fabric: NvlinkFabric,
    count: u32,
) -> Result<Vec<Option<u32>>, SpecError> {
    let kind = match nvlink.unwrap_or("auto") {
        "auto" => match fabric {
            NvlinkFabric::Switch => "all",
            NvlinkFabric::Bridge => "pairs",
            NvlinkFabric::None => "none",
        },
        k @ ("all" | "pairs" | "none") => k,
        other => {
            return Err(SpecError::new(format!("{field}.nvlink"), format!("unknown NVLink layout {other:?}"))
                .hint("use auto, all (NVSwitch), pairs (bridged cards) or none"));
        }
    };
    Ok((0..count)
        .map(|i| match kind {
            "all" => Some(0),
            "pairs" => Some(i / 2),
            _ => None,
        })
        .collect())
}

fn mode(
    field: &str,
    entry: &ModeEntry<'_>,
    model: gantry_catalog::ModelId,
    catalog: &Catalog,
) -> Result<GpuMode, SpecError> {
    let m = catalog.model(model);
    let name = entry.mode.unwrap_or(if entry.mig.is_some() { "mig" } else { "whole" });
    let stray = |key: &str| SpecError::new(format!("{field}.{key}"), format!("{key} does not apply to mode {name}"));
    if name != "mig" && entry.mig.is_some() {
        return Err(stray("mig"));
    }
    if name != "mps" && entry.max_clients.is_some() {
        return Err(stray("max_clients"));
    }
    if name != "time-slice" && (entry.replicas.is_some() || entry.memory_per_replica.is_some()) {
        return Err(stray(if entry.replicas.is_some() { "replicas" } else { "memory_per_replica" }));
    }
    match name {
        "whole" => Ok(GpuMode::Whole),
        "mig" => mig_mode(field, entry, m, catalog),
        "mps" => {
            let clients = quantity::count(
                &format!("{field}.max_clients"),
                entry.max_clients.unwrap_or(MPS_CLIENTS_MAX),
                1,
                MPS_CLIENTS_MAX,
                "MPS serves at most 48 clients per GPU on Volta and later",
            )?;
            Ok(GpuMode::Mps { max_clients: clients })
        }
        "time-slice" => time_slice_mode(field, entry, m),
        other => Err(SpecError::new(format!("{field}.mode"), format!("unknown mode {other:?}"))
            .hint("use whole, mig, mps or time-slice")),
    }
}

/// Mode `mig`: the entry's layout placed on the model's MIG geometry.
fn mig_mode(
    field: &str,
    entry: &ModeEntry<'_>,
    m: &gantry_catalog::GpuModel,
    catalog: &Catalog,
) -> Result<GpuMode, SpecError> {
    let Some(geometry) = &m.mig else {
        let capable: Vec<&str> = catalog.models().iter().filter(|x| x.mig.is_some()).map(|x| x.id.as_str()).collect();
        return Err(SpecError::new(format!("{field}.mode"), format!("{} does not support MIG", m.id))
            .hint(format!("MIG-capable models: {}", capable.join(", "))));
    };
    let layout = entry.mig.ok_or_else(|| {
        SpecError::new(format!("{field}.mig"), "mode mig needs a layout")
            .hint("e.g. mig = [\"3g.40gb@0\", \"2g.20gb@4\", \"1g.10gb@6\"] or mig = { \"1g.10gb\" = 7 }")
    })?;
    let (fixed, counted) = mig_layout(field, layout)?;
    let placed = geometry
        .place_counts(&m.id, &fixed, &counted)
        .map_err(|e| SpecError::new(format!("{field}.mig"), e.to_string()))?;
    let instances = placed
        .iter()
        .map(|p| MigInstanceSpec { profile: geometry.profiles[p.profile as usize].name.clone(), start: p.start })
        .collect();
    Ok(GpuMode::Mig { instances })
}

/// Mode `time-slice`: the replicas and each one's memory budget, which together fit the GPU.
fn time_slice_mode(field: &str, entry: &ModeEntry<'_>, m: &gantry_catalog::GpuModel) -> Result<GpuMode, SpecError> {
    let replicas = entry.replicas.ok_or_else(|| {
        SpecError::new(format!("{field}.replicas"), "mode time-slice needs replicas").hint("e.g. replicas = 4")
    })?;
    let replicas = quantity::count(
        &format!("{field}.replicas"),
        replicas,
        2,
        TIME_SLICE_REPLICAS_MAX,
        "time-slicing needs at least 2 replicas (1 is a whole GPU)",
    )?;
    let per = match entry.memory_per_replica {
        Some(q) => quantity::memory(&format!("{field}.memory_per_replica"), q)?,
        None => Bytes(m.memory.0 / replicas as u64),
    };
    if per.0 == 0 || per.0 * replicas as u64 > m.memory.0 {
        return Err(SpecError::new(
            format!("{field}.memory_per_replica"),
            format!("{replicas} × {per} does not fit in {}'s {}", m.id, m.memory),
        )
        .hint("time-sliced replicas share one GPU's memory; lower the budget or the replicas"));
    }
    Ok(GpuMode::TimeSlice { replicas, memory_per_replica: per })
}

/// Instances with starts, and profiles to place (with their counts).
type SplitLayout = (Vec<MigInstanceSpec>, Vec<(String, u32)>);

fn mig_layout(field: &str, layout: &MigLayout) -> Result<SplitLayout, SpecError> {
    let mut fixed = Vec::new();
    let mut counted: Vec<(String, u32)> = Vec::new();
    match layout {
        MigLayout::List(entries) => {
            for entry in entries {
                match entry {
                    MigEntry::Short(text) if !text.contains('@') => counted.push((text.clone(), 1)),
                    other => fixed.push(mig_entry(field, other)?),
                }
            }
        }
        MigLayout::Counts(counts) => {
            for (profile, &count) in counts {
                let count =
                    quantity::count(&format!("{field}.mig.{profile}"), count, 1, 7, "at most 7 instances per GPU")?;
                counted.push((profile.clone(), count as u32));
            }
        }
    }
    Ok((fixed, counted))
}

fn mig_entry(field: &str, entry: &MigEntry) -> Result<MigInstanceSpec, SpecError> {
    let (profile, start) = match entry {
        MigEntry::Long { profile, start } => (profile.clone(), *start),
        MigEntry::Short(text) => {
            let (p, s) = text.split_once('@').ok_or_else(|| {
                SpecError::new(format!("{field}.mig"), format!("{text:?} has no start"))
                    .hint("write profile@start, e.g. \"1g.10gb@6\"")
            })?;
            let start = s
                .parse::<i64>()
                .map_err(|_| SpecError::new(format!("{field}.mig"), format!("{s:?} is not a start position")))?;
            (p.to_string(), start)
        }
    };
    let start = quantity::count(&format!("{field}.mig"), start, 0, 7, "starts are memory-slice indices 0..7")?;
    Ok(MigInstanceSpec { profile, start: start as u8 })
}

pub(crate) fn unknown_model(field: &str, name: &str, catalog: &Catalog) -> SpecError {
    let ids: Vec<&str> = catalog.models().iter().map(|m| m.id.as_str()).collect();
    SpecError::new(field, format!("unknown GPU model {name:?}"))
        .hint(format!("known models: {} (run `gantry catalog`)", ids.join(", ")))
}
