//! Slurm in: `slurm.conf` (and `gres.conf`) as a fleet file and a queue file, so a Slurm site
//! can replay its own cluster (its history: `import_sacct.rs`).
//!
//! `slurm.conf`: `NodeName` lines (hostlists like `gpu[01-16]`, `NodeName=DEFAULT`), `CPUs`,
//! `RealMemory` (MiB), `Gres=gpu[:type]:count` (a type that is a MIG profile, `1g.10gb`, is
//! a MIG instance, laid onto the node's MIG GPUs by the catalog's rules), `Features` and
//! `Weight` (kept as labels); the GPU model of a gres type from the catalog, or `--map
//! TYPE=MODEL` (a type the catalog does not know, or an ambiguous one like `a100`, is an error
//! naming the flag). `PartitionName` lines become partitions and queues
//! (`import_slurm_partitions.rs`). `gres.conf` types what slurm.conf
//! leaves untyped (`Gres=gpu:4` with `Name=gpu Type=a100 File=/dev/nvidia[0-3]`).
//!
//! A line that is not valid Slurm (a word that is not `Key=Value`, a count that is not a
//! number, a broken hostlist, an over-long line) is an error naming `file:line`; with
//! `lenient` the line is skipped and counted instead. Nothing is written unless all was read.

use crate::error::SpecError;
use crate::hostlist::split_outside;
pub use crate::hostlist::{HOSTLIST_MAX, expand_hostlist};
use crate::import_k8s::quote;
use gantry_catalog::Catalog;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A fleet and a queue file made from `slurm.conf`, and what did not map.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedSlurm {
    pub fleet: String,
    pub queues: String,
    pub nodes: usize,
    pub notes: Vec<String>,
    /// Lines skipped under `lenient`, each with its `file:line` and why.
    pub skipped: Vec<String>,
}

/// Where Slurm input comes from and how it is read: the file's name (for `file:line` in
/// errors), the catalog, `--map` (gres type → catalog model), and whether a line that is not
/// valid is skipped and counted (`--lenient`) rather than refused.
#[derive(Debug)]
pub struct SlurmSource<'a> {
    pub name: String,
    pub catalog: &'a Catalog,
    pub map: &'a BTreeMap<String, String>,
    pub lenient: bool,
}

/// Longest logical slurm.conf or gres.conf line read (continuations joined). A NodeName line
/// with a long hostlist and many features stays within a few KiB; a longer one is not a
/// config line, and refusing it bounds what one line can hold.
pub const SLURM_CONF_LINE_BYTES_MAX: usize = 64 << 10;

/// A config line's `key=value` pairs, as written.
type Pairs = Vec<(String, String)>;

/// GPUs of one gres type: (the type, if any; count).
type GpuCount = (Option<String>, u32);
type GpuCounts = Vec<GpuCount>;

/// The logical lines of a Slurm config: comments dropped, `\` continuations joined, each as
/// (line number, `key=value` pairs as written; keys are matched case-insensitively), or why
/// the line is not one (over-long; a word that is not `key=value`, other than a directive
/// like `Include path`, which is passed on as a pair with an empty value).
fn config_lines(text: &str) -> Vec<(usize, Result<Pairs, String>)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim_end();
        if pending.is_empty() {
            start = i + 1;
        }
        if pending.len() + line.len() > SLURM_CONF_LINE_BYTES_MAX {
            out.push((start, Err(format!("a line over {SLURM_CONF_LINE_BYTES_MAX} bytes"))));
            pending.clear();
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let words: Vec<&str> = pending.split_whitespace().collect();
        if let Some(first) = words.first() {
            out.push((start, line_pairs(first, &words)));
        }
        pending.clear();
    }
    out
}

fn line_pairs(first: &str, words: &[&str]) -> Result<Pairs, String> {
    if !first.contains('=') {
        // `Include /etc/slurm/nodes.conf` and the like: a directive, not a setting.
        return Ok(vec![(first.to_string(), String::new())]);
    }
    words
        .iter()
        .map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{w:?} is not Key=Value"))
        })
        .collect()
}

/// A GPU count of one gres entry: a whole number no node could exceed
/// ([`crate::NODE_GPUS_MAX`]), so sums over a node's entries stay small.
fn gpu_count(n: &str) -> Result<u32, String> {
    match n.parse::<u32>() {
        Ok(count) if i64::from(count) <= crate::NODE_GPUS_MAX => Ok(count),
        Ok(_) => Err(format!("{n} GPUs, more than a node holds ({})", crate::NODE_GPUS_MAX)),
        Err(_) => Err(format!("{n:?} is not a GPU count")),
    }
}

/// GPUs of a gres entry list: (type, count) for `gpu`; other names are returned to report.
fn gres_gpus(gres: &str) -> Result<(GpuCounts, Vec<String>), String> {
    let (mut gpus, mut other) = (Vec::new(), Vec::new());
    for entry in split_outside(gres, '(', ')') {
        let entry = entry.split('(').next().unwrap_or_default();
        let parts: Vec<&str> = entry.split(':').collect();
        let number = |n: &str| gpu_count(n).map_err(|why| format!("Gres {entry:?}: {why}"));
        match parts.as_slice() {
            ["gpu"] => gpus.push((None, 1)),
            ["gpu", n] if n.parse::<u32>().is_ok() => gpus.push((None, number(n)?)),
            ["gpu", t] => gpus.push((Some(t.to_string()), 1)),
            ["gpu", t, n] => gpus.push((Some(t.to_string()), number(n)?)),
            ["gpu", ..] => return Err(format!("Gres {entry:?} is not gpu[:type]:count")),
            _ => other.push(entry.to_string()),
        }
    }
    Ok((gpus, other))
}

/// gres.conf's GPUs by node name (`*`: lines without `NodeName`, for every node): (type,
/// count), the count from `Count=` or the number of `File=` devices. Notes what it cannot use.
type GresConf = BTreeMap<String, GpuCounts>;

fn read_gres_conf(
    name: &str,
    text: &str,
    lenient: bool,
    skipped: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<GresConf, SpecError> {
    let mut by_node = GresConf::new();
    for (line, pairs) in config_lines(text) {
        let at = format!("{name}:{line}");
        let parsed = pairs.and_then(|pairs| gres_conf_line(&pairs));
        match parsed {
            Ok(Some((nodes, gpu))) => {
                for node in nodes {
                    by_node.entry(node).or_default().push(gpu.clone());
                }
            }
            Ok(None) => {}
            Err(why) if lenient => skipped.push(format!("{at}: {why}")),
            Err(why) => {
                return Err(SpecError::new(at, why).hint("fix the line, or --lenient to skip and count lines like it"));
            }
        }
    }
    if by_node.is_empty() && text.to_ascii_lowercase().contains("autodetect=nvml") {
        notes.push(format!(
            "{name}: AutoDetect=nvml: the GPUs' types come from the hardware, so slurm.conf's Gres= types are used"
        ));
    }
    Ok(by_node)
}

/// One gres.conf line: the nodes it names and its GPU (type, count), or none for a line about
/// something else (`AutoDetect=`, `Name=shard`) or a GPU whose count the hardware gives.
fn gres_conf_line(pairs: &[(String, String)]) -> Result<Option<(Vec<String>, GpuCount)>, String> {
    let get = |key: &str| pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str());
    if get("Name") != Some("gpu") {
        return Ok(None);
    }
    let nodes = match get("NodeName") {
        Some(list) => expand_hostlist(list)?,
        None => vec!["*".to_string()],
    };
    let count = match (get("Count"), get("File").or(get("MultipleFiles"))) {
        (Some(n), _) => gpu_count(n).map_err(|why| format!("Count={n:?}: {why}"))?,
        (None, Some(files)) => gpu_count(&expand_hostlist(files)?.len().to_string())?,
        (None, None) => return Ok(None),
    };
    Ok(Some((nodes, (get("Type").map(str::to_string), count))))
}

/// A gres type as a catalog model: `--map` first, then the catalog's names, else an error
/// naming the flag (an ambiguous family name like `a100` included: which memory size?).
fn model_for(ty: &str, catalog: &Catalog, map: &BTreeMap<String, String>, at: &str) -> Result<String, SpecError> {
    if let Some(model) = map.get(ty) {
        return Ok(model.clone());
    }
    if let Some(id) = catalog.lookup(ty) {
        return Ok(catalog.model(id).id.clone());
    }
    let lower = ty.to_ascii_lowercase();
    let candidates: Vec<&str> = catalog
        .models()
        .iter()
        .filter(|m| m.id.to_ascii_lowercase().starts_with(&lower))
        .map(|m| m.id.as_str())
        .collect();
    let hint = match candidates.as_slice() {
        [] => format!("map it to a catalog model: --map {ty}=MODEL (`gantry catalog` lists them)"),
        some => format!("which one? --map {ty}={} (or {})", some[0], some[1..].join(", ")),
    };
    Err(SpecError::new(at, format!("GPU type {ty:?} is not a catalog model")).hint(hint))
}

/// `slurm.conf` (and optionally `gres.conf`: its name and text) → a fleet file and a queue file.
pub fn import_slurm_conf(
    text: &str,
    gres: Option<(&str, &str)>,
    source: &SlurmSource,
) -> Result<ImportedSlurm, SpecError> {
    let mut fleet = String::from("# Written by `gantry import slurm` from slurm.conf.\n");
    let mut queues = String::from("# Written by `gantry import slurm` from slurm.conf's partitions.\n");
    let mut partition_tables = String::new();
    let (mut notes, mut skipped) = (Vec::new(), Vec::new());
    // `scontrol show node` or `sinfo` output instead of slurm.conf: read as its NodeName lines.
    let listing = crate::import_slurm_nodes::as_slurm_conf(text);
    let text = match &listing {
        Some((conf, said)) => {
            notes.extend(said.iter().cloned());
            conf.as_str()
        }
        None => text,
    };
    let gres_conf = match gres {
        Some((name, text)) => read_gres_conf(name, text, source.lenient, &mut skipped, &mut notes)?,
        None => GresConf::new(),
    };
    let mut defaults: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes = 0;
    let mut partitions = 0;
    let lines = config_lines(text);
    let member = crate::import_slurm_partitions::membership(lines.iter().filter_map(|(_, p)| p.as_deref().ok()));
    for (line, pairs) in lines {
        let at = format!("{}:{line}", source.name);
        let result = pairs.map_err(|why| SpecError::new(&at, why)).and_then(|pairs| {
            let (key, value) = &pairs[0];
            let lower = |pairs: &[(String, String)]| -> Vec<(String, String)> {
                pairs.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect()
            };
            match key.to_ascii_lowercase().as_str() {
                "nodename" if value.eq_ignore_ascii_case("DEFAULT") => defaults.extend(lower(&pairs[1..])),
                "nodename" => {
                    let mut fields = defaults.clone();
                    fields.extend(lower(&pairs[1..]));
                    let node = NodeLine { fields: &fields, gres_conf: &gres_conf, member: &member };
                    nodes += node_line(value, &node, &at, source, &mut fleet, &mut notes)?;
                }
                "partitionname" if !value.eq_ignore_ascii_case("DEFAULT") => {
                    crate::import_slurm_partitions::partition_line(
                        value,
                        &pairs[1..],
                        &at,
                        &mut queues,
                        &mut partition_tables,
                        &mut notes,
                    )?;
                    partitions += 1;
                }
                "include" => notes.push(format!(
                    "{at}: Include {value}: not followed (give the included file's NodeName lines in one file)"
                )),
                _ => {}
            }
            Ok(())
        });
        match result {
            Ok(()) => {}
            Err(e) if source.lenient => skipped.push(e.to_string()),
            Err(e) => return Err(with_lenient_hint(e)),
        }
    }
    if nodes == 0 {
        return Err(SpecError::new(&source.name, "no NodeName lines").hint("give the cluster's slurm.conf"));
    }
    crate::parse_fleet(&fleet, source.catalog)
        .map_err(|e| SpecError::new("", format!("the fleet made from slurm.conf does not read back: {e}")))?;
    queues.push_str(&partition_tables);
    if partitions > 0 {
        crate::parse_queues(&queues, source.catalog)
            .map_err(|e| SpecError::new("", format!("the queues made from slurm.conf do not read back: {e}")))?;
    }
    Ok(ImportedSlurm { fleet, queues: if partitions > 0 { queues } else { String::new() }, nodes, notes, skipped })
}

/// What a `NodeName=` line's nodes are made from: its fields (lower-cased, defaults
/// included), gres.conf, and the partitions each node is in.
struct NodeLine<'a> {
    fields: &'a BTreeMap<String, String>,
    gres_conf: &'a GresConf,
    member: &'a BTreeMap<String, Vec<String>>,
}

/// The field a node's partitions travel in to [`node_labels`] (not a slurm.conf key).
const PARTITIONS_FIELD: &str = "gantry:partitions";

/// A `NodeName=` line's nodes (its hostlist `value` expanded) into the fleet; all of the
/// line's nodes or none. Returns how many.
fn node_line(
    value: &str,
    line: &NodeLine,
    at: &str,
    source: &SlurmSource,
    fleet: &mut String,
    notes: &mut Vec<String>,
) -> Result<usize, SpecError> {
    let names = expand_hostlist(value).map_err(|e| SpecError::new(at, e))?;
    // All of a line's nodes or none: a bad node leaves the fleet as it was.
    let (mut text, mut line_notes) = (String::new(), Vec::new());
    for name in &names {
        let gres = line.gres_conf.get(name).or_else(|| line.gres_conf.get("*"));
        let mut fields = line.fields.clone();
        fields.remove(PARTITIONS_FIELD);
        if let Some(partitions) = line.member.get(name) {
            fields.insert(PARTITIONS_FIELD.into(), partitions.join(","));
        }
        node_toml(name, &fields, gres, at, source, &mut text, &mut line_notes)?;
    }
    fleet.push_str(&text);
    notes.extend(line_notes);
    Ok(names.len())
}

/// A line's error, its hint extended with `--lenient`.
fn with_lenient_hint(e: SpecError) -> SpecError {
    let lenient = "--lenient to skip and count lines like it";
    let hint = match &e.hint {
        Some(hint) => format!("{hint}; or {lenient}"),
        None => format!("fix the line, or {lenient}"),
    };
    e.hint(hint)
}

/// A numeric node field (`CPUs`, `RealMemory`, `Weight`), absent as `default`.
/// `keys` as Slurm spells them; `fields` holds them lower-cased.
fn node_number(
    fields: &BTreeMap<String, String>,
    keys: &[&str],
    default: u64,
    name: &str,
    at: &str,
) -> Result<u64, SpecError> {
    match keys.iter().find_map(|k| fields.get(&k.to_ascii_lowercase()).map(|v| (*k, v))) {
        None => Ok(default),
        Some((key, v)) => {
            v.parse().map_err(|_| SpecError::new(at, format!("node {name}: {key}={v:?} is not a whole number")))
        }
    }
}

/// The node's GPUs: slurm.conf's `Gres=`, typed from gres.conf where slurm.conf leaves them
/// untyped; a disagreement is noted and slurm.conf (what slurmctld schedules) wins.
fn node_gpus(
    name: &str,
    fields: &BTreeMap<String, String>,
    gres_conf: Option<&GpuCounts>,
    at: &str,
    notes: &mut Vec<String>,
) -> Result<GpuCounts, SpecError> {
    let (mut gpus, other) = match fields.get("gres") {
        Some(gres) => gres_gpus(gres).map_err(|e| SpecError::new(at, format!("node {name}: {e}")))?,
        None => (Vec::new(), Vec::new()),
    };
    for o in other {
        notes.push(format!(
            "{at}: node {name}: gres {o} (not a GPU count gantry maps; shards and MPS follow the GPUs' modes)"
        ));
    }
    let Some(conf) = gres_conf.filter(|c| !c.is_empty()) else { return within_node(name, at, gpus) };
    let total = |g: &[GpuCount]| g.iter().fold(0u32, |sum, (_, n)| sum.saturating_add(*n));
    if gpus.is_empty() {
        notes.push(format!("{at}: node {name}: gres.conf lists {} GPU(s) but its NodeName line has no Gres=gpu, so Slurm schedules none; left out", total(conf)));
    } else if gpus.iter().all(|(t, _)| t.is_none()) && conf.iter().all(|(t, _)| t.is_some()) {
        if total(conf) != total(&gpus) {
            notes.push(format!(
                "{at}: node {name}: Gres=gpu:{} but gres.conf lists {}; gres.conf's typed GPUs used",
                total(&gpus),
                total(conf)
            ));
        }
        gpus = conf.clone();
    } else {
        let (mut a, mut b) = (gpus.clone(), conf.clone());
        a.sort();
        b.sort();
        if a != b && conf.iter().any(|(t, _)| t.is_some()) {
            notes.push(format!("{at}: node {name}: slurm.conf's Gres= and gres.conf disagree; slurm.conf's used"));
        }
    }
    within_node(name, at, gpus)
}

/// `gpus`, unless together they are more than a node holds.
fn within_node(name: &str, at: &str, gpus: GpuCounts) -> Result<GpuCounts, SpecError> {
    let total = gpus.iter().fold(0u32, |sum, (_, n)| sum.saturating_add(*n));
    if i64::from(total) > crate::NODE_GPUS_MAX {
        return Err(SpecError::new(
            at,
            format!("node {name}: {total} GPUs, more than a node holds ({})", crate::NODE_GPUS_MAX),
        ));
    }
    Ok(gpus)
}

fn node_toml(
    name: &str,
    fields: &BTreeMap<String, String>,
    gres_conf: Option<&GpuCounts>,
    at: &str,
    source: &SlurmSource,
    out: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let catalog = source.catalog;
    let cpus = node_number(fields, &["CPUs", "Procs"], 1, name, at)?;
    let memory_mib = node_number(fields, &["RealMemory"], 1, name, at)?;
    if cpus == 0 {
        return Err(SpecError::new(at, format!("node {name}: CPUs=0")));
    }
    let _ = write!(out, "\n[[node]]\nname = {}\ncpu = {cpus}\nmemory = \"{}MiB\"\n", quote(name), memory_mib.max(1));
    let gpus = node_gpus(name, fields, gres_conf, at, notes)?;
    let mut labels = node_labels(fields, name, at)?;
    // The cluster's own name for its whole GPUs (`a100`), so an export keeps it and the
    // cluster's `--gres=gpu:a100:1` scripts go on working.
    let whole_types: std::collections::BTreeSet<&String> =
        gpus.iter().filter_map(|(t, _)| t.as_ref()).filter(|t| catalog.profile_for_slurm_type(t).is_none()).collect();
    if let [ty] = whole_types.into_iter().collect::<Vec<_>>()[..] {
        labels.push(format!("\"slurm.gres-type\" = {}", quote(ty)));
    }
    if !labels.is_empty() {
        let _ = writeln!(out, "labels = {{ {} }}", labels.join(", "));
    }
    let (whole, mig) = whole_and_mig(gpus, source, name, at)?;
    let Some(model) = gpu_model(&whole, mig.is_empty(), fields, source, name, at)? else { return Ok(()) };
    let whole_count: u32 = whole.iter().map(|(_, n)| n).sum();
    let mig = profiles_on(catalog, &model, mig, name, at)?;
    let (layouts, left) = distribute_minimal(catalog, &model, &mig);
    if !left.is_empty() {
        notes.push(format!("{at}: node {name}: MIG instances that fit no GPU of {model}: {left:?}"));
    }
    let total = whole_count + layouts.len() as u32;
    let _ = write!(out, "[node.gpus]\nmodel = {}\ncount = {total}\n", quote(&model));
    for (offset, layout) in layouts.iter().enumerate() {
        let counts: Vec<String> = layout.iter().map(|(p, n)| format!("{} = {n}", quote(p))).collect();
        let _ =
            write!(out, "[[node.gpu]]\nindex = {}\nmig = {{ {} }}\n", whole_count + offset as u32, counts.join(", "));
    }
    Ok(())
}

/// The node's labels: a `slurm.feature/<f>` per feature, and its `Weight`.
fn node_labels(fields: &BTreeMap<String, String>, name: &str, at: &str) -> Result<Vec<String>, SpecError> {
    let mut labels: Vec<String> = Vec::new();
    for feature in fields.get("features").or_else(|| fields.get("feature")).into_iter().flat_map(|f| f.split(',')) {
        labels.push(format!("{} = \"true\"", quote(&format!("slurm.feature/{feature}"))));
    }
    for partition in fields.get(PARTITIONS_FIELD).into_iter().flat_map(|p| p.split(',')) {
        let label = crate::import_slurm_partitions::partition_label(partition);
        labels.push(format!("{} = \"true\"", quote(&label)));
    }
    if fields.contains_key("weight") {
        let w = node_number(fields, &["Weight"], 1, name, at)?;
        labels.push(format!("\"slurm.weight\" = \"{w}\""));
    }
    Ok(labels)
}

/// Whole GPUs (catalog model, count) and MIG instances (Slurm type → count).
type WholeAndMig = (Vec<(String, u32)>, BTreeMap<String, u32>);

/// The node's GPUs split into whole GPUs (by catalog model) and MIG instances (by Slurm type).
fn whole_and_mig(gpus: GpuCounts, source: &SlurmSource, name: &str, at: &str) -> Result<WholeAndMig, SpecError> {
    let (catalog, map) = (source.catalog, source.map);
    let (mut whole, mut mig): WholeAndMig = (Vec::new(), BTreeMap::new());
    for (ty, n) in gpus {
        match ty {
            Some(t) if catalog.profile_for_slurm_type(&t).is_some() => {
                *mig.entry(t).or_default() += n;
            }
            Some(t) => whole.push((model_for(&t, catalog, map, at)?, n)),
            None => match map.get("gpu").or_else(|| map.get("")) {
                Some(model) => whole.push((model.clone(), n)),
                None => {
                    return Err(SpecError::new(at, format!("node {name}: Gres=gpu:{n} has no type, so no GPU model"))
                        .hint("say which: --map gpu=MODEL"));
                }
            },
        }
    }
    Ok((whole, mig))
}

/// The node's one GPU model: its whole GPUs', else (only MIG instances) a feature naming a
/// catalog model or `--map NODE=MODEL`; none for a node without GPUs.
fn gpu_model(
    whole: &[(String, u32)],
    no_mig: bool,
    fields: &BTreeMap<String, String>,
    source: &SlurmSource,
    name: &str,
    at: &str,
) -> Result<Option<String>, SpecError> {
    let (catalog, map) = (source.catalog, source.map);
    let models: std::collections::BTreeSet<&String> = whole.iter().map(|(m, _)| m).collect();
    if models.len() > 1 {
        return Err(SpecError::new(
            at,
            format!(
                "node {name}: GPUs of several models ({}); gantry's nodes have one",
                models.into_iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(Some(match (models.into_iter().next(), no_mig) {
        (Some(m), _) => m.clone(),
        (None, true) => return Ok(None),
        (None, false) => match fields
            .get("features")
            .and_then(|f| f.split(',').find_map(|f| catalog.lookup(f).map(|id| catalog.model(id).id.clone())))
            .or_else(|| map.get(name).cloned())
        {
            Some(m) => m,
            None => {
                return Err(SpecError::new(
                    at,
                    format!("node {name}: only MIG instances in its Gres, so no GPU model"),
                )
                .hint(format!("give one: a Features= entry naming the model, or --map {name}=MODEL")));
            }
        },
    }))
}

/// Slurm's MIG gres types (the catalog's names or `AutoDetect=nvml`'s, like `7g.79gb`) as the
/// catalog profiles of `model`.
fn profiles_on(
    catalog: &Catalog,
    model: &str,
    types: BTreeMap<String, u32>,
    node: &str,
    at: &str,
) -> Result<BTreeMap<String, u32>, SpecError> {
    let entry = catalog.lookup(model).map(|id| catalog.model(id));
    let mut out = BTreeMap::new();
    for (ty, n) in types {
        let profile = entry.and_then(|m| m.profile_for_slurm_type(&ty)).ok_or_else(|| {
            SpecError::new(at, format!("node {node}: MIG type {ty} is not a profile of {model}"))
                .hint("check the node's GPU model (Features= or --map) against `gantry catalog`")
        })?;
        *out.entry(profile.name.clone()).or_default() += n;
    }
    Ok(out)
}

/// MIG instances onto as few GPUs as the placement rules allow (first fit, largest first).
fn distribute_minimal(
    catalog: &Catalog,
    model: &str,
    wanted: &BTreeMap<String, u32>,
) -> (Vec<BTreeMap<String, u32>>, BTreeMap<String, u32>) {
    let total: u32 = wanted.values().sum();
    if total == 0 {
        return (Vec::new(), BTreeMap::new());
    }
    // At most one GPU per instance: distribute onto that many, then drop the empty ones.
    let (layouts, left) = crate::import_k8s::distribute(catalog, model, wanted, total as usize);
    (layouts.into_iter().filter(|l| !l.is_empty()).collect(), left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        assert_eq!(expand_hostlist("gpu[01-03]").expect("ok"), ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(expand_hostlist("n[1-2,5]-ib,login").expect("ok"), ["n1-ib", "n2-ib", "n5-ib", "login"]);
        assert_eq!(expand_hostlist("r[1-2]n[1-2]").expect("ok"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert!(expand_hostlist("gpu[01-03").expect_err("open").contains("without ']'"));
        assert!(expand_hostlist("gpu[9-1]").expect_err("backwards").contains("backwards"));
        assert!(expand_hostlist("n[1-99999999]").is_err());
        // Back from what `hostlist` writes, and the lists Slurm's commands take.
        let names = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let list = names(&["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login", "n9", "n10"]);
        assert_eq!(expand_hostlist(&gantry_types::text::hostlist(&list)).expect("ok"), list);
        assert_eq!(expand_hostlist("gpu-[01-03,07],login,n[9-10]").expect("ok"), list);
        assert_eq!(expand_hostlist("rack[1-2]-a").expect("ok"), ["rack1-a", "rack2-a"]);
        for bad in ["n[3-1]", "n[1-x]", "n[1-2", "n]", "n[1-99999999]"] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
        assert_eq!(expand_hostlist("").expect("empty"), Vec::<String>::new());
        let many: Vec<String> = (0..3).map(|i| format!("r{i}n[1-40000]")).collect();
        assert!(expand_hostlist(&many.join(",")).is_err(), "bounded over the whole list");
    }

    const CONF: &str = include_str!("../fixtures/slurm/slurm.conf");

    #[test]
    fn slurm_conf_becomes_a_fleet_and_queues() {
        let catalog = Catalog::embedded();
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let imported = import_slurm_conf(CONF, None, &source(&map, false)).expect("imports");
        let fleet = crate::parse_fleet(&imported.fleet, catalog).expect("reads back");
        assert_eq!(imported.nodes, 6);
        let node = |n: &str| fleet.nodes.iter().find(|x| x.name == n).expect(n);
        assert_eq!((node("gpu01").gpus.len(), node("gpu01").gpus[0].model.as_str()), (8, "A100-SXM4-80GB"));
        assert_eq!(node("gpu01").cpu.0, 128_000);
        assert_eq!(node("gpu01").memory.0, 1_024_000 << 20);
        assert!(node("gpu01").labels.contains_key("slurm.feature/ib"));
        assert_eq!(node("gpu01").labels.get("slurm.gres-type").map(String::as_str), Some("a100"));
        // Exported back, the cluster's type name and features stay: its scripts keep working.
        let (conf, gres) = crate::export::slurm_conf(&fleet);
        let line = conf.lines().find(|l| l.starts_with("NodeName=gpu01 ")).expect("gpu01's line");
        assert!(line.contains("Gres=gpu:a100:8") && line.contains("Features=") && line.contains("ib"), "{line}");
        assert!(gres.contains("NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia[0,1,2,3,4,5,6,7]"), "{gres}");
        assert!(!conf.lines().any(|l| l.starts_with("AccountingStorageTRES")), "advice only: {conf}");
        assert_eq!(node("h100-1").gpus[0].model, "H100-SXM5-80GB");
        // 4 whole + the 7 × 1g.10gb and 2 × 3g.40gb on as few GPUs as hold them.
        let mig = node("mig01");
        assert_eq!(mig.gpus.len(), 6, "{}", imported.fleet);
        assert!(matches!(mig.gpus[4].mode, gantry_types::GpuMode::Mig { .. }));
        assert!(node("cpu01").gpus.is_empty());
        let tree = crate::parse_queues(&imported.queues, catalog).expect("queues read back");
        assert_eq!(tree.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["gpu", "debug"]);
        // Partitions are node sets with their limits, each node labelled with its partitions;
        // the partition's queue is charged for jobs that name no account.
        let gpu = tree.partition("gpu").expect("gpu");
        assert_eq!((gpu.default, gpu.max_time_s, gpu.queue.as_deref()), (true, Some(2 * 86_400), Some("gpu")));
        assert_eq!(tree.partition("debug").expect("debug").max_time_s, Some(3600));
        assert_eq!(node("gpu01").labels.get("slurm.partition/gpu").map(String::as_str), Some("true"));
        assert!(!node("gpu01").labels.contains_key("slurm.partition/debug"));
        assert!(node("cpu01").labels.contains_key("slurm.partition/debug"));
        assert!(imported.notes.iter().any(|n| n.contains("PriorityJobFactor=10")), "{:?}", imported.notes);
        assert!(!imported.notes.iter().any(|n| n.contains("MaxTime")), "{:?}", imported.notes);
        // Without the map, the ambiguous type is named with the flag that settles it.
        let err = import_slurm_conf(CONF, None, &source(&BTreeMap::new(), false)).expect_err("ambiguous").to_string();
        assert!(err.contains("GPU type \"a100\" is not a catalog model") && err.contains("--map a100=A100-"), "{err}");
    }

    fn source(map: &BTreeMap<String, String>, lenient: bool) -> SlurmSource<'_> {
        SlurmSource { name: "slurm.conf".into(), catalog: Catalog::embedded(), map, lenient }
    }

    const RECORDED_CONF: &str = include_str!("../fixtures/slurm/recorded/slurm.conf");
    const RECORDED_GRES: &str = include_str!("../fixtures/slurm/recorded/gres.conf");

    fn recorded_map() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("a100".to_string(), "A100-SXM4-80GB".to_string()),
            ("h100".to_string(), "H100-SXM5-80GB".to_string()),
        ])
    }

    #[test]
    fn the_recorded_cluster_imports_with_its_gres_conf() {
        let map = recorded_map();
        let imported = import_slurm_conf(RECORDED_CONF, Some(("gres.conf", RECORDED_GRES)), &source(&map, false))
            .expect("imports");
        let fleet = crate::parse_fleet(&imported.fleet, Catalog::embedded()).expect("reads back");
        let gpus: Vec<(&str, usize)> = fleet.nodes.iter().map(|n| (n.name.as_str(), n.gpus.len())).collect();
        assert_eq!(gpus, [("gpu01", 4), ("gpu02", 4), ("h100-1", 8), ("mig01", 2), ("cpu01", 0)]);
        assert!(imported.skipped.is_empty() && !imported.notes.iter().any(|n| n.contains("disagree")), "{imported:?}");
    }

    #[test]
    fn gres_conf_types_what_slurm_conf_leaves_untyped() {
        let conf =
            "NodeName=n[1-2] CPUs=8 RealMemory=64000 Gres=gpu:4\nNodeName=n3 CPUs=8 RealMemory=64000 Gres=gpu:2\n";
        let gres = "AutoDetect=off\nNodeName=n[1-2] Name=gpu Type=H100-SXM5-80GB File=/dev/nvidia[0-3]\nName=gpu Type=L4 Count=2\n";
        let map = BTreeMap::new();
        let imported = import_slurm_conf(conf, Some(("gres.conf", gres)), &source(&map, false)).expect("imports");
        let fleet = crate::parse_fleet(&imported.fleet, Catalog::embedded()).expect("reads back");
        assert_eq!(fleet.nodes[0].gpus.len(), 4);
        assert_eq!(fleet.nodes[0].gpus[0].model, "H100-SXM5-80GB");
        assert_eq!(fleet.nodes[2].gpus[0].model, "L4-24GB", "a line without NodeName is every node's");
        // Without gres.conf the untyped count has no model.
        assert!(import_slurm_conf(conf, None, &source(&map, false)).is_err());
        // A count gres.conf gets wrong is noted; gres.conf's typed GPUs are used.
        let short = "NodeName=n[1-2] Name=gpu Type=H100-SXM5-80GB Count=2\nName=gpu Type=L4 Count=2\n";
        let imported = import_slurm_conf(conf, Some(("gres.conf", short)), &source(&map, false)).expect("imports");
        assert!(imported.notes.iter().any(|n| n.contains("Gres=gpu:4 but gres.conf lists 2")), "{:?}", imported.notes);
        let err = import_slurm_conf(conf, Some(("gres.conf", "Name=gpu Type=L4 Count=many\n")), &source(&map, false))
            .expect_err("count");
        assert!(err.to_string().starts_with("gres.conf:1: Count=\"many\""), "{err}");
        let huge = "NodeName=n1 Name=gpu Type=L4 Count=3000000000\nNodeName=n1 Name=gpu Type=L4 Count=3000000000\n";
        let err = import_slurm_conf(conf, Some(("gres.conf", huge)), &source(&map, false)).expect_err("huge");
        assert!(
            err.to_string().starts_with("gres.conf:1: Count=\"3000000000\": 3000000000 GPUs, more than a node holds"),
            "{err}"
        );
    }

    #[test]
    fn malformed_lines_are_refused_with_file_and_line_or_skipped_when_lenient() {
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let good = "NodeName=ok CPUs=8 RealMemory=64000 Gres=gpu:a100:2\n";
        let long = format!("NodeName=x Features={}\n", "f".repeat(10 << 20));
        for (bad, expect) in [
            ("NodeName=b CPUs=eight RealMemory=64000\n", "slurm.conf:2: node b: CPUs=\"eight\" is not a whole number"),
            (
                "NodeName=b CPUs=8 Gres=gpu:a100:x\n",
                "slurm.conf:2: node b: Gres \"gpu:a100:x\": \"x\" is not a GPU count",
            ),
            ("NodeName=b CPUs 8\n", "slurm.conf:2: \"CPUs\" is not Key=Value"),
            ("NodeName=b[1-3 CPUs=8\n", "slurm.conf:2: \"b[1-3\": a '[' without ']'"),
            ("NodeName=b CPUs=8 RealMemory=-1\n", "slurm.conf:2: node b: RealMemory=\"-1\" is not a whole number"),
            ("NodeName=b CPUs=8 Gres=gpu:v9000:2\n", "slurm.conf:2: GPU type \"v9000\" is not a catalog model"),
            (long.as_str(), "slurm.conf:2: a line over 65536 bytes"),
            // Counts that once overflowed a sum (a panic): refused per entry and per node.
            (
                "NodeName=b CPUs=8 Gres=gpu:a100:4294967295,gpu:a100:5\n",
                "slurm.conf:2: node b: Gres \"gpu:a100:4294967295\": 4294967295 GPUs, more than a node holds (64)",
            ),
            (
                "NodeName=b CPUs=8 Gres=gpu:a100:40,gpu:a100:40\n",
                "slurm.conf:2: node b: 80 GPUs, more than a node holds (64)",
            ),
            // Found by tests/hostile_slurm.rs against the old code (an overflow in MIG packing).
            (
                "NodeName=b Gres=gpu:7g.79gb:1,gpu:7g.79gb:4294967295\n",
                "slurm.conf:2: node b: Gres \"gpu:7g.79gb:4294967295\": 4294967295 GPUs, more than a node holds (64)",
            ),
        ] {
            let text = format!("{good}{bad}NodeName=after CPUs=4 RealMemory=1000\n");
            let err = import_slurm_conf(&text, None, &source(&map, false)).expect_err(bad).to_string();
            assert!(err.starts_with(expect) && err.contains("--lenient"), "{err}");
            let lenient = import_slurm_conf(&text, None, &source(&map, true)).expect("lenient");
            assert_eq!(lenient.nodes, 2, "the bad line's nodes only are left out: {}", lenient.fleet);
            assert_eq!(lenient.skipped.len(), 1);
            assert!(
                lenient.skipped[0].starts_with(expect.split(": ").next().unwrap_or_default()),
                "{:?}",
                lenient.skipped
            );
            crate::parse_fleet(&lenient.fleet, Catalog::embedded()).expect("what was kept reads back");
        }
    }
}
