//! Kubernetes in: a cluster's nodes (`kubectl get nodes -o json`) as a fleet file, and its
//! pods (`kubectl get pods -A -o json`) as a native trace, so a Kubernetes user can replay
//! their own cluster and history in gantry.
//!
//! Nodes: CPU and memory from `status.allocatable`; the GPU model, count and sharing from
//! NVIDIA GPU Feature Discovery's labels (`nvidia.com/gpu.product`, `gpu.count`,
//! `mig.strategy`, `gpu.replicas`, `gpu.sharing-strategy`) and the MIG resources the device
//! plugin advertises (`nvidia.com/mig-<profile>`); labels and taints kept. The fleet text is
//! checked with [`crate::parse_fleet`] before it is returned, so what comes out is a fleet
//! gantry reads. Pods: GPU requests (whole, MIG resources, shared replicas), CPU and memory
//! requests, namespace as queue, priority, and times from the pod's status; what cannot be
//! replayed is counted by reason, never silently dropped.

use crate::error::SpecError;
use crate::quantity::{self, Quantity};
use gantry_catalog::Catalog;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A fleet file made from a node list, and what the reader should know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedFleet {
    pub toml: String,
    pub nodes: usize,
    pub notes: Vec<String>,
}

/// A trace made from a pod list, with the pods left out by reason.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedTrace {
    pub jsonl: String,
    pub jobs: usize,
    pub skipped: BTreeMap<String, u64>,
}

/// How pods become jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct PodOptions {
    /// Keep pods that ask for no GPU (as CPU-only jobs).
    pub cpu_pods: bool,
    /// The compute share a pod asking for one shared replica (`nvidia.com/gpu.shared`, or
    /// `nvidia.com/gpu` on a time-sliced node) stands for, milli-GPU.
    pub shared_milli: u32,
    /// Skip and count pods whose record is not valid (a timestamp that does not parse, times
    /// out of order) instead of refusing the file.
    pub lenient: bool,
}

impl Default for PodOptions {
    fn default() -> PodOptions {
        PodOptions { cpu_pods: false, shared_milli: 250, lenient: false }
    }
}

fn items<'a>(json: &'a Value, kind: &str) -> Result<&'a Vec<Value>, SpecError> {
    match json.get("items").and_then(Value::as_array) {
        Some(items) => Ok(items),
        None => Err(SpecError::new("items", format!("not a {kind} list"))
            .hint(format!("give the output of `kubectl get {kind} -o json` (a List with items)"))),
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, key| v.get(key)).and_then(Value::as_str)
}

/// A Kubernetes quantity (`"96"`, `"95500m"`, `"1056964608Ki"`) as milli-CPU.
fn cpu_milli(at: &str, q: &str) -> Result<u64, SpecError> {
    Ok(u64::from(quantity::cpu(at, &Quantity::Text(q.into()))?.0))
}

fn bytes(at: &str, q: &str) -> Result<u64, SpecError> {
    Ok(quantity::memory(at, &Quantity::Text(q.into()))?.0)
}

fn count(at: &str, q: &str) -> Result<u32, SpecError> {
    q.trim().parse().map_err(|_| SpecError::new(at, format!("{q:?} is not a whole number")))
}

/// The catalog model of a GFD product label: `NVIDIA-A100-SXM4-80GB`,
/// `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb` (single strategy), `Tesla-T4-SHARED` (time-slicing with
/// renamed resources); `map` (from `--map PRODUCT=MODEL`) first.
pub(crate) fn model_of(product: &str, catalog: &Catalog, map: &BTreeMap<String, String>) -> Option<String> {
    if let Some(model) = map.get(product) {
        return catalog.lookup(model).map(|id| catalog.model(id).id.clone());
    }
    let base = product.split("-MIG-").next().unwrap_or(product);
    let base = base.strip_suffix("-SHARED").unwrap_or(base);
    let mut candidates = vec![base.to_string()];
    for prefix in ["NVIDIA-", "Tesla-", "NVIDIA-Tesla-"] {
        if let Some(rest) = base.strip_prefix(prefix) {
            candidates.push(rest.to_string());
        }
    }
    candidates.push(base.replace('-', " "));
    candidates.iter().find_map(|c| catalog.lookup(c)).map(|id| catalog.model(id).id.clone())
}

/// A string as a TOML (and JSON) basic string literal, escapes and all.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// `kubectl get nodes -o json` → a fleet file. `map`: GFD product → catalog model, for
/// products the catalog does not know by that name.
pub fn import_nodes(json: &str, catalog: &Catalog, map: &BTreeMap<String, String>) -> Result<ImportedFleet, SpecError> {
    let json: Value = serde_json::from_str(json).map_err(|e| SpecError::new("", format!("not JSON: {e}")))?;
    let mut toml = String::from("# Written by `gantry import kubernetes --nodes` from `kubectl get nodes -o json`.\n");
    let mut notes = Vec::new();
    let nodes = items(&json, "nodes")?;
    for (i, node) in nodes.iter().enumerate() {
        let name = text(node, &["metadata", "name"])
            .ok_or_else(|| SpecError::new(format!("items[{i}]"), "a node without metadata.name"))?;
        let at = format!("node {name:?}");
        node_toml(node, name, &at, catalog, map, &mut toml, &mut notes)?;
    }
    crate::parse_fleet(&toml, catalog).map_err(|e| {
        SpecError::new("", format!("the fleet made from the nodes does not read back: {e}"))
            .hint("a bug in the importer: report it with the node list")
    })?;
    Ok(ImportedFleet { toml, nodes: nodes.len(), notes })
}

#[allow(clippy::too_many_arguments)]
fn node_toml(
    node: &Value,
    name: &str,
    at: &str,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
    toml: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let allocatable = node.pointer("/status/allocatable").ok_or_else(|| SpecError::new(at, "no status.allocatable"))?;
    let get = |key: &str| allocatable.get(key).and_then(Value::as_str);
    let cpu = cpu_milli(&format!("{at} / allocatable.cpu"), get("cpu").unwrap_or("0"))?;
    let memory = bytes(&format!("{at} / allocatable.memory"), get("memory").unwrap_or("0"))?;
    let _ = write!(toml, "\n[[node]]\nname = {}\ncpu = \"{cpu}m\"\nmemory = \"{memory}B\"\n", quote(name));
    let labels: BTreeMap<String, String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    if !labels.is_empty() {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{} = {}", quote(k), quote(v))).collect();
        let _ = writeln!(toml, "labels = {{ {} }}", pairs.join(", "));
    }
    let taints: Vec<String> = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let key = t.get("key")?.as_str()?;
            let effect = t.get("effect")?.as_str()?;
            Some(match t.get("value").and_then(Value::as_str).filter(|v| !v.is_empty()) {
                Some(value) => format!("{key}={value}:{effect}"),
                None => format!("{key}:{effect}"),
            })
        })
        .collect();
    if !taints.is_empty() {
        let list: Vec<String> = taints.iter().map(|t| quote(t)).collect();
        let _ = writeln!(toml, "taints = [{}]", list.join(", "));
    }
    let Some(product) = labels.get("nvidia.com/gpu.product") else {
        if get("nvidia.com/gpu").is_some_and(|n| n != "0") {
            notes.push(format!(
                "{at}: advertises nvidia.com/gpu but has no GPU Feature Discovery labels: imported without GPUs"
            ));
        }
        return Ok(());
    };
    let model = model_of(product, catalog, map).ok_or_else(|| {
        SpecError::new(format!("{at} / nvidia.com/gpu.product"), format!("{product:?} is not a GPU model gantry knows"))
            .hint(format!("map it: --map {product}=MODEL (`gantry catalog` lists the models)"))
    })?;
    let advertised = match labels.get("nvidia.com/gpu.count") {
        Some(n) => count(&format!("{at} / nvidia.com/gpu.count"), n)?,
        None => count(&format!("{at} / allocatable.nvidia.com/gpu"), get("nvidia.com/gpu").unwrap_or("0"))?,
    };
    let strategy = labels.get("nvidia.com/mig.strategy").map(String::as_str).unwrap_or("none");
    let gpus = match product.split_once("-MIG-").filter(|_| strategy == "single") {
        Some((_, device)) => gpus_under_single(catalog, &model, device, advertised, at, notes)?,
        None => advertised,
    };
    if gpus == 0 {
        return Ok(());
    }
    let _ = write!(toml, "[node.gpus]\nmodel = {}\ncount = {gpus}\n", quote(&model));
    gpu_modes(catalog, &model, &labels, allocatable, product, gpus, at, toml, notes)
}

/// A MIG profile as mig-parted and gantry name it, from the device plugin's and GFD's MIG
/// device name (which writes `+` as `.`: `1g.5gb.me` is `1g.5gb+me`).
fn profile_of_device(device: &str) -> String {
    match device.strip_suffix(".me") {
        Some(base) => format!("{base}+me"),
        None => device.to_string(),
    }
}

/// Physical GPUs under GFD's `single` strategy, where `nvidia.com/gpu.count` counts MIG
/// devices (56 on eight A100s in `all-1g.5gb`): as many GPUs as hold that many instances of
/// the profile at its per-GPU maximum, which is what every mig-parted `all-<profile>` layout
/// creates — said in a note, since GFD does not label the physical count.
fn gpus_under_single(
    catalog: &Catalog,
    model: &str,
    device: &str,
    instances: u32,
    at: &str,
    notes: &mut Vec<String>,
) -> Result<u32, SpecError> {
    if instances == 0 || device == "INVALID" {
        return Ok(0);
    }
    let profile = profile_of_device(device);
    let geometry = catalog.lookup(model).and_then(|id| catalog.model(id).mig.as_ref());
    let per_gpu = geometry.and_then(|g| g.profile(&profile)).map(|p| u32::from(p.max_instances)).ok_or_else(|| {
        SpecError::new(
            format!("{at} / nvidia.com/gpu.product"),
            format!("MIG profile {profile:?} is not one of {model}'s"),
        )
        .hint("`gantry catalog MODEL` lists its profiles")
    })?;
    let gpus = instances.div_ceil(per_gpu);
    notes.push(format!(
        "{at}: mig.strategy=single counts MIG devices: {instances} × {profile} read as {gpus} {model} GPU(s) holding {per_gpu} each (GFD labels no physical count)"
    ));
    Ok(gpus)
}

/// The node's advertised MIG instances (profile → count) laid onto `gpus` GPUs (the device
/// plugin counts instances per node, not per GPU). Where every count divides evenly and one
/// GPU's share places, every GPU gets that share: a node in one mig-parted layout — every
/// `all-*` config, `all-balanced` — comes back as it is. Otherwise first fit, largest
/// profiles first, each GPU's set checked with the catalog's placement rules (a node
/// configured per GPU, like mig-parted's `custom-config` example). Also what fit nowhere.
pub(crate) fn distribute(
    catalog: &Catalog,
    model: &str,
    wanted: &BTreeMap<String, u32>,
    gpus: usize,
) -> (Vec<BTreeMap<String, u32>>, BTreeMap<String, u32>) {
    let mut layouts = vec![BTreeMap::<String, u32>::new(); gpus];
    let mut left = BTreeMap::new();
    let geometry = catalog.lookup(model).and_then(|id| catalog.model(id).mig.as_ref());
    let places = |layout: &BTreeMap<String, u32>| {
        let counted: Vec<(String, u32)> = layout.iter().map(|(p, n)| (p.clone(), *n)).collect();
        geometry.is_some_and(|g| g.place_counts(model, &[], &counted).is_ok())
    };
    let share: BTreeMap<String, u32> = wanted.iter().map(|(p, n)| (p.clone(), n / gpus.max(1) as u32)).collect();
    if gpus > 0 && wanted.values().all(|n| n % gpus as u32 == 0) && places(&share) {
        return (vec![share; gpus], left);
    }
    let size = |p: &str| geometry.and_then(|g| g.profile(p)).map_or(0, |p| p.memory_slices);
    let mut order: Vec<(&String, u32)> = wanted.iter().map(|(p, n)| (p, *n)).collect();
    order.sort_by_key(|(p, _)| std::cmp::Reverse(size(p)));
    for (profile, n) in order {
        for _ in 0..n {
            let placed = layouts.iter_mut().any(|layout| {
                *layout.entry(profile.clone()).or_default() += 1;
                let counted: Vec<(String, u32)> = layout.iter().map(|(p, n)| (p.clone(), *n)).collect();
                let fits = geometry.is_some_and(|g| g.place_counts(model, &[], &counted).is_ok());
                if !fits {
                    *layout.get_mut(profile).expect("just added") -= 1;
                    layout.retain(|_, n| *n > 0);
                }
                fits
            });
            if !placed {
                *left.entry(profile.clone()).or_default() += 1;
            }
        }
    }
    (layouts, left)
}

/// The GPUs' sharing from GFD's labels and the device plugin's resources.
#[allow(clippy::too_many_arguments)]
fn gpu_modes(
    catalog: &Catalog,
    model: &str,
    labels: &BTreeMap<String, String>,
    allocatable: &Value,
    product: &str,
    gpus: u32,
    at: &str,
    toml: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let strategy = labels.get("nvidia.com/mig.strategy").map(String::as_str).unwrap_or("none");
    let replicas = labels
        .get("nvidia.com/gpu.replicas")
        .map(|r| count(&format!("{at} / nvidia.com/gpu.replicas"), r))
        .transpose()?;
    let sharing = labels.get("nvidia.com/gpu.sharing-strategy").map(String::as_str);
    let mig = mig_instances(allocatable, strategy, product, at)?;
    if !mig.is_empty() {
        return write_mig_gpus(catalog, model, &mig, allocatable, strategy, gpus, at, toml, notes);
    }
    shared_mode(sharing, replicas, product, at, toml, notes);
    Ok(())
}

/// The MIG instances a node advertises, by profile (under the single strategy, its whole
/// `nvidia.com/gpu` count of the product's profile).
fn mig_instances(
    allocatable: &Value,
    strategy: &str,
    product: &str,
    at: &str,
) -> Result<BTreeMap<String, u32>, SpecError> {
    let mut mig: BTreeMap<String, u32> = BTreeMap::new();
    for (key, value) in allocatable.as_object().into_iter().flatten() {
        if let (Some(device), Some(n)) = (key.strip_prefix("nvidia.com/mig-"), value.as_str()) {
            let n = count(&format!("{at} / allocatable.{key}"), n)?;
            if n > 0 {
                mig.insert(profile_of_device(device), n);
            }
        }
    }
    if strategy == "single"
        && let Some((_, device)) = product.split_once("-MIG-")
    {
        let total = allocatable.get("nvidia.com/gpu").and_then(Value::as_str).unwrap_or("0");
        mig.insert(profile_of_device(device), count(&format!("{at} / allocatable.nvidia.com/gpu"), total)?);
    }
    Ok(mig)
}

/// MIG GPUs: all of them under single, else those not advertised whole; writes their
/// layouts and notes the instances that fit nowhere.
#[allow(clippy::too_many_arguments)]
fn write_mig_gpus(
    catalog: &Catalog,
    model: &str,
    mig: &BTreeMap<String, u32>,
    allocatable: &Value,
    strategy: &str,
    gpus: u32,
    at: &str,
    toml: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let whole = match strategy {
        "single" => 0,
        _ => count(
            &format!("{at} / allocatable.nvidia.com/gpu"),
            allocatable.get("nvidia.com/gpu").and_then(Value::as_str).unwrap_or("0"),
        )?,
    };
    let mig_gpus = gpus.saturating_sub(whole).max(1);
    let first = gpus - mig_gpus;
    let (layouts, left) = distribute(catalog, model, mig, mig_gpus as usize);
    if !left.is_empty() {
        notes.push(format!(
            "{at}: {} MIG instance(s) fit on none of its {mig_gpus} MIG GPU(s) alongside the others and were left out ({})",
            left.values().sum::<u32>(),
            left.iter().map(|(p, n)| format!("{n} × {p}")).collect::<Vec<_>>().join(", ")
        ));
    }
    for (offset, layout) in layouts.iter().enumerate() {
        if layout.is_empty() {
            continue;
        }
        let counts: Vec<String> = layout.iter().map(|(p, n)| format!("{} = {n}", quote(p))).collect();
        let _ = write!(toml, "[[node.gpu]]\nindex = {}\nmig = {{ {} }}\n", first + offset as u32, counts.join(", "));
    }
    Ok(())
}

/// Whole GPUs' sharing (MPS or time-slicing) from the replica count and sharing strategy.
fn shared_mode(
    sharing: Option<&str>,
    replicas: Option<u32>,
    product: &str,
    at: &str,
    toml: &mut String,
    notes: &mut Vec<String>,
) {
    match (sharing, replicas) {
        (Some("mps"), Some(r)) if r > 1 => {
            let _ = writeln!(toml, "mode = \"mps\"\nmax_clients = {}", r.min(crate::MPS_CLIENTS_MAX as u32));
        }
        (_, Some(r)) if r > 1 => {
            let _ =
                writeln!(toml, "mode = \"time-slice\"\nreplicas = {}", r.min(crate::TIME_SLICE_REPLICAS_MAX as u32));
        }
        _ if product.ends_with("-SHARED") => {
            notes.push(format!("{at}: a shared product without nvidia.com/gpu.replicas: imported as whole GPUs"));
        }
        _ => {}
    }
}

/// `kubectl get pods -A -o json` → a native trace (JSON lines), arrivals from the earliest
/// creation.
pub fn import_pods(json: &str, catalog: &Catalog, options: &PodOptions) -> Result<ImportedTrace, SpecError> {
    let json: Value = serde_json::from_str(json).map_err(|e| SpecError::new("", format!("not JSON: {e}")))?;
    let pods = items(&json, "pods")?;
    let created = |p: &Value| text(p, &["metadata", "creationTimestamp"]).and_then(rfc3339_s);
    let origin = pods.iter().filter_map(created).min().unwrap_or(0);
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    let mut jsonl = String::new();
    let mut jobs = 0;
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    for (i, pod) in pods.iter().enumerate() {
        if let Err((reason, detail)) = pod_times_valid(pod) {
            if options.lenient {
                *skipped.entry(format!("not a valid pod record: {reason}")).or_default() += 1;
                continue;
            }
            let name = format!(
                "{}/{}",
                text(pod, &["metadata", "namespace"]).unwrap_or("default"),
                text(pod, &["metadata", "name"]).unwrap_or("?")
            );
            return Err(SpecError::new(format!("items[{i}] ({name})"), detail)
                .hint("fix the record, or --lenient to skip and count pods like it"));
        }
        match pod_line(pod, origin, catalog, options, &mut names) {
            Ok(line) => {
                jsonl.push_str(&line);
                jsonl.push('\n');
                jobs += 1;
            }
            Err(why) => *skipped.entry(why).or_default() += 1,
        }
    }
    Ok(ImportedTrace { jsonl, jobs, skipped })
}

/// A pod's timestamps, where present, parse and come in order (created ≤ started ≤ each
/// container's finish); else (reason to count, detail to show).
fn pod_times_valid(pod: &Value) -> Result<(), (&'static str, String)> {
    let time = |path: &[&str]| -> Result<Option<i64>, (&'static str, String)> {
        match text(pod, path) {
            None => Ok(None),
            Some(t) => rfc3339_s(t).map(Some).ok_or_else(|| {
                ("a timestamp that does not parse", format!("{}: {t:?} is not an RFC 3339 UTC time", path.join(".")))
            }),
        }
    };
    let created = time(&["metadata", "creationTimestamp"])?;
    let started = time(&["status", "startTime"])?;
    if let (Some(c), Some(s)) = (created, started)
        && s < c
    {
        return Err((
            "started before it was created",
            format!("status.startTime is {} s before metadata.creationTimestamp", c - s),
        ));
    }
    for status in pod.pointer("/status/containerStatuses").and_then(Value::as_array).into_iter().flatten() {
        let Some(finished) = status.pointer("/state/terminated/finishedAt").and_then(Value::as_str) else { continue };
        let end = rfc3339_s(finished).ok_or_else(|| {
            ("a timestamp that does not parse", format!("finishedAt {finished:?} is not an RFC 3339 UTC time"))
        })?;
        if let Some(s) = started
            && end < s
        {
            return Err((
                "finished before it started",
                format!("a container finished at {finished}, {} s before status.startTime", s - end),
            ));
        }
    }
    Ok(())
}

/// One pod as a trace line, or why it is left out.
fn pod_line(
    pod: &Value,
    origin: i64,
    catalog: &Catalog,
    options: &PodOptions,
    names: &mut BTreeMap<String, u32>,
) -> Result<String, String> {
    let name = text(pod, &["metadata", "name"]).ok_or("no metadata.name")?;
    let namespace = text(pod, &["metadata", "namespace"]).unwrap_or("default");
    let created = text(pod, &["metadata", "creationTimestamp"]).and_then(rfc3339_s).ok_or("no creationTimestamp")?;
    if text(pod, &["status", "phase"]) == Some("Pending") && pod.pointer("/status/startTime").is_none() {
        return Err("never started (pending)".into());
    }
    let (cpu, memory, gpu) = pod_requests(pod)?;
    let gpu_field = job_gpu(&gpu, catalog, options)?;
    let (start, end) = run_times(pod);
    let duration = match (start, end) {
        (Some(s), Some(e)) if e >= s => Some(e - s),
        _ => None,
    };
    let queue = queue_name(namespace);
    let job_name = unique_name(names, name);
    let mut job = serde_json::json!({ "name": job_name, "queue": queue, "cpu": format!("{}m", cpu.max(1)) });
    if memory > 0 {
        job["memory"] = serde_json::json!(format!("{memory}B"));
    }
    if let Some(g) = gpu_field {
        job["gpu"] = g;
    }
    let tolerations = tolerations(pod);
    if !tolerations.is_empty() {
        job["tolerations"] = serde_json::json!(tolerations);
    }
    if let Some(priority) = pod.pointer("/spec/priority").and_then(Value::as_i64) {
        let (lo, hi) = crate::PRIORITY_RANGE;
        job["priority"] = serde_json::json!(priority.clamp(lo, hi));
    }
    let mut line = serde_json::json!({ "arrival_s": created - origin, "job": job });
    // In order: `pod_times_valid` refused (or skipped) a pod started before it was created.
    if let Some(start) = start {
        line["started_s"] = serde_json::json!(start - origin);
    }
    if let Some(d) = duration {
        line["duration_s"] = serde_json::json!(d);
    }
    let text = line.to_string();
    crate::parse_trace_line(1, &text, catalog).map_err(|e| format!("does not make a valid job ({})", e.message))?;
    Ok(text)
}

/// The pod's containers' requests summed: CPU (millicores), memory (bytes) and each
/// `nvidia.com/` resource.
fn pod_requests(pod: &Value) -> Result<(u64, u64, BTreeMap<String, u64>), String> {
    let mut cpu = 0u64;
    let mut memory = 0u64;
    let mut gpu: BTreeMap<String, u64> = BTreeMap::new();
    for container in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
        let resources = container.get("resources");
        let requests = resources.and_then(|r| r.get("requests"));
        let limits = resources.and_then(|r| r.get("limits"));
        let pick = |key: &str| {
            requests.and_then(|r| r.get(key)).or_else(|| limits.and_then(|l| l.get(key))).and_then(Value::as_str)
        };
        if let Some(q) = pick("cpu") {
            cpu += cpu_milli("cpu", q).map_err(|_| "a malformed cpu quantity")?;
        }
        if let Some(q) = pick("memory") {
            memory += bytes("memory", q).map_err(|_| "a malformed memory quantity")?;
        }
        // Extended resources are limits (requests, when given, must equal them).
        for (key, value) in limits.and_then(Value::as_object).into_iter().flatten() {
            if key.starts_with("nvidia.com/") {
                let n: u64 = value.as_str().and_then(|v| v.parse().ok()).ok_or("a malformed GPU quantity")?;
                *gpu.entry(key.clone()).or_default() += n;
            }
        }
    }
    Ok((cpu, memory, gpu))
}

/// The job's `gpu` field for the pod's GPU resources (none for a kept CPU-only pod), or why
/// the pod cannot be replayed.
fn job_gpu(gpu: &BTreeMap<String, u64>, catalog: &Catalog, options: &PodOptions) -> Result<Option<Value>, String> {
    Ok(match gpu.iter().filter(|(_, n)| **n > 0).collect::<Vec<_>>().as_slice() {
        [] if options.cpu_pods => None,
        [] => return Err("asks for no GPU (--cpu-pods keeps these)".into()),
        [(key, n)] if key.as_str() == "nvidia.com/gpu" => Some(serde_json::json!({ "count": n })),
        [(key, 1)] if key.starts_with("nvidia.com/mig-") => {
            let profile = key.trim_start_matches("nvidia.com/mig-");
            if !catalog.any_model_has_profile(profile) {
                return Err("asks for a MIG profile no catalog GPU offers".into());
            }
            Some(serde_json::json!({ "mig": profile }))
        }
        [(key, 1)] if key.as_str() == "nvidia.com/gpu.shared" => {
            Some(serde_json::json!({ "share": options.shared_milli, "mode": "time-slice" }))
        }
        [(key, _)] if key.starts_with("nvidia.com/mig-") => return Err("asks for several MIG instances".into()),
        [_] => return Err("asks for a GPU resource gantry does not map".into()),
        _ => return Err("asks for several kinds of GPU resource".into()),
    })
}

/// The pod's name as a job name, suffixed `-2`, `-3`, … when seen before.
fn unique_name(names: &mut BTreeMap<String, u32>, name: &str) -> String {
    let n = names.entry(name.to_string()).or_default();
    *n += 1;
    if *n == 1 { name.to_string() } else { format!("{name}-{n}") }
}

/// The pod's tolerations as gantry writes them (`key` tolerates any value, `key=value` one);
/// a keyless `Exists` (tolerate everything) has no gantry spelling and is left out. As
/// `kubectl get` prints pods, these include what admission added (the ExtendedResourceToleration
/// plugin's `nvidia.com/gpu` for GPU pods).
fn tolerations(pod: &Value) -> Vec<String> {
    let mut out: Vec<String> = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let key = t.get("key").and_then(Value::as_str).filter(|k| !k.is_empty())?;
            match (t.get("operator").and_then(Value::as_str), t.get("value").and_then(Value::as_str)) {
                (Some("Exists"), _) | (_, None | Some("")) => Some(key.to_string()),
                (_, Some(value)) => Some(format!("{key}={value}")),
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A namespace as a queue name (the same, within the queue name rules).
fn queue_name(namespace: &str) -> String {
    namespace.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).take(64).collect()
}

/// When the pod's containers started and (all) finished, Unix seconds.
fn run_times(pod: &Value) -> (Option<i64>, Option<i64>) {
    let start = text(pod, &["status", "startTime"]).and_then(rfc3339_s);
    let statuses = pod.pointer("/status/containerStatuses").and_then(Value::as_array);
    let finished: Vec<Option<i64>> = statuses
        .into_iter()
        .flatten()
        .map(|s| s.pointer("/state/terminated/finishedAt").and_then(Value::as_str).and_then(rfc3339_s))
        .collect();
    let end = if !finished.is_empty() && finished.iter().all(Option::is_some) {
        finished.into_iter().flatten().max()
    } else {
        None
    };
    (start, end)
}

/// `2026-11-02T10:04:05Z` (Kubernetes' timestamps: UTC, seconds) → Unix seconds.
pub(crate) fn rfc3339_s(text: &str) -> Option<i64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, min) = (t.next()?.parse::<i64>().ok()?, t.next()?.parse::<i64>().ok()?);
    let s: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || s >= 61.0 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60 + s as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = include_str!("../fixtures/kubernetes/nodes.json");
    const PODS: &str = include_str!("../fixtures/kubernetes/pods.json");

    fn catalog() -> &'static Catalog {
        Catalog::embedded()
    }

    /// GFD labels of an A100 node in MIG mixed strategy, a whole H100, a time-sliced T4 and a
    /// CPU node become a fleet gantry reads: models, counts, MIG layouts from the advertised
    /// instances, time-slice replicas, CPU and memory from allocatable, labels and taints kept.
    #[test]
    fn nodes_become_a_fleet_with_models_mig_layouts_and_sharing() {
        let imported = import_nodes(NODES, catalog(), &BTreeMap::new()).expect("imports");
        assert_eq!(imported.nodes, 4);
        let fleet = crate::parse_fleet(&imported.toml, catalog()).expect("reads back");
        let node = |name: &str| fleet.nodes.iter().find(|n| n.name == name).expect(name);
        let a100 = node("a100-mig-0");
        assert_eq!((a100.gpus.len(), a100.gpus[0].model.as_str()), (8, "A100-SXM4-80GB"));
        assert_eq!(a100.cpu.0, 95_690);
        assert_eq!(a100.memory.0, 1_163_915_616 * 1024);
        assert_eq!(a100.taints[0].key, "nvidia.com/gpu");
        // 5 whole GPUs advertised; the 14 × 1g.10gb and 2 × 3g.40gb the node advertises are
        // laid onto the other 3 by the placement rules: 2 × 3g.40gb, 7 × 1g.10gb, 7 × 1g.10gb.
        let layout = |i: usize| match &a100.gpus[i].mode {
            gantry_types::GpuMode::Mig { instances } => {
                instances.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect::<Vec<_>>().join(" ")
            }
            other => other.text(),
        };
        assert_eq!((0..5).map(layout).collect::<Vec<_>>(), vec!["whole"; 5], "{}", imported.toml);
        assert_eq!(layout(5), "3g.40gb@0 3g.40gb@4");
        assert_eq!(layout(6), (0..7).map(|s| format!("1g.10gb@{s}")).collect::<Vec<_>>().join(" "));
        assert_eq!(layout(7), layout(6));
        assert!(imported.notes.is_empty(), "{:?}", imported.notes);
        // One instance more than fits: named, not silently dropped.
        let more = NODES.replacen("\"nvidia.com/mig-1g.10gb\": \"14\"", "\"nvidia.com/mig-1g.10gb\": \"15\"", 2);
        let imported = import_nodes(&more, catalog(), &BTreeMap::new()).expect("imports");
        assert!(
            imported.notes.iter().any(|n| n.contains("1 MIG instance(s) fit on none") && n.contains("1 × 1g.10gb")),
            "{:?}",
            imported.notes
        );
        let h100 = node("h100-0");
        assert_eq!((h100.gpus.len(), h100.gpus[0].model.as_str()), (8, "H100-SXM5-80GB"));
        let t4 = node("t4-shared");
        assert_eq!(t4.gpus[0].model, "T4-16GB");
        assert!(
            matches!(t4.gpus[0].mode, gantry_types::GpuMode::TimeSlice { replicas: 4, .. }),
            "{:?}",
            t4.gpus[0].mode
        );
        assert_eq!(t4.taints.len(), 2);
        assert!(node("cpu-0").gpus.is_empty());
        assert_eq!(node("cpu-0").labels.get("kubernetes.io/hostname").map(String::as_str), Some("cpu-0"));
    }

    /// One node as `kubectl get nodes -o json` lists it, with these GFD labels and this
    /// allocatable (the label and resource names as GFD's documentation and the device
    /// plugin write them).
    fn gfd_node(labels: &[(&str, &str)], allocatable: &[(&str, &str)]) -> String {
        let labels: serde_json::Map<String, Value> =
            labels.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect();
        let mut alloc: serde_json::Map<String, Value> = [("cpu", "64"), ("memory", "512Gi")]
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        alloc.extend(allocatable.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))));
        serde_json::json!({"items": [{"metadata": {"name": "n", "labels": labels}, "status": {"allocatable": alloc}}]})
            .to_string()
    }

    fn layouts(imported: &ImportedFleet) -> Vec<String> {
        let fleet = crate::parse_fleet(&imported.toml, catalog()).expect("reads back");
        fleet.nodes[0]
            .gpus
            .iter()
            .map(|g| match &g.mode {
                gantry_types::GpuMode::Mig { instances } => {
                    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
                    for i in instances {
                        *counts.entry(i.profile.as_str()).or_default() += 1;
                    }
                    counts.iter().map(|(p, n)| format!("{n}×{p}")).collect::<Vec<_>>().join(" ")
                }
                other => other.text(),
            })
            .collect()
    }

    /// GFD's documented `mig.strategy=single` example — eight A100-40GB in `all-1g.5gb`,
    /// labelled `gpu.count=56` — is eight GPUs of seven instances, not 56 GPUs; with or without
    /// the `NVIDIA-` prefix newer drivers add to the product.
    #[test]
    fn gfd_single_strategy_counts_mig_devices_not_gpus() {
        for product in ["A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"] {
            let node = gfd_node(
                &[
                    ("nvidia.com/mig.strategy", "single"),
                    ("nvidia.com/gpu.product", product),
                    ("nvidia.com/gpu.count", "56"),
                ],
                &[("nvidia.com/gpu", "56")],
            );
            let imported = import_nodes(&node, catalog(), &BTreeMap::new()).expect("imports");
            assert_eq!(layouts(&imported), vec!["7×1g.5gb"; 8], "{}", imported.toml);
            assert!(imported.notes.iter().any(|n| n.contains("56 × 1g.5gb read as 8")), "{:?}", imported.notes);
        }
        // GFD's label for a node whose layout the single strategy cannot describe.
        let invalid = gfd_node(
            &[
                ("nvidia.com/mig.strategy", "single"),
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-INVALID"),
                ("nvidia.com/gpu.count", "0"),
            ],
            &[("nvidia.com/gpu", "0")],
        );
        assert!(layouts(&import_nodes(&invalid, catalog(), &BTreeMap::new()).expect("imports")).is_empty());
        let unknown = gfd_node(
            &[
                ("nvidia.com/mig.strategy", "single"),
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-9g.99gb"),
                ("nvidia.com/gpu.count", "8"),
            ],
            &[("nvidia.com/gpu", "8")],
        );
        let err = import_nodes(&unknown, catalog(), &BTreeMap::new()).expect_err("unknown profile").to_string();
        assert!(err.contains("\"9g.99gb\" is not one of A100-SXM4-40GB's"), "{err}");
    }

    /// Under the mixed strategy the device plugin advertises node totals; eight A100-80GB in
    /// NVIDIA's `all-balanced` come back as that layout on each GPU, and a `.me` device name
    /// is the `+me` profile.
    #[test]
    fn gfd_mixed_totals_of_one_layout_come_back_as_that_layout_on_each_gpu() {
        let node = gfd_node(
            &[
                ("nvidia.com/mig.strategy", "mixed"),
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
                ("nvidia.com/gpu.count", "8"),
            ],
            &[
                ("nvidia.com/gpu", "0"),
                ("nvidia.com/mig-1g.10gb", "16"),
                ("nvidia.com/mig-2g.20gb", "8"),
                ("nvidia.com/mig-3g.40gb", "8"),
            ],
        );
        let imported = import_nodes(&node, catalog(), &BTreeMap::new()).expect("imports");
        assert_eq!(layouts(&imported), vec!["2×1g.10gb 1×2g.20gb 1×3g.40gb"; 8], "{}", imported.toml);
        let me = gfd_node(
            &[
                ("nvidia.com/mig.strategy", "mixed"),
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
                ("nvidia.com/gpu.count", "1"),
            ],
            &[("nvidia.com/gpu", "0"), ("nvidia.com/mig-1g.10gb.me", "1"), ("nvidia.com/mig-1g.10gb", "6")],
        );
        let imported = import_nodes(&me, catalog(), &BTreeMap::new()).expect("imports");
        assert_eq!(layouts(&imported), vec!["6×1g.10gb 1×1g.10gb+me"], "{}", imported.toml);
    }

    #[test]
    fn an_unknown_product_is_named_and_can_be_mapped() {
        let text = NODES.replace("NVIDIA-H100-80GB-HBM3", "NVIDIA-Mystery-9000");
        let err = import_nodes(&text, catalog(), &BTreeMap::new()).expect_err("unknown").to_string();
        assert!(
            err.contains("\"NVIDIA-Mystery-9000\" is not a GPU model gantry knows") && err.contains("--map"),
            "{err}"
        );
        let map = BTreeMap::from([("NVIDIA-Mystery-9000".to_string(), "H100-SXM5-80GB".to_string())]);
        assert!(import_nodes(&text, catalog(), &map).is_ok());
        for (bad, expected) in [("{}", "not a nodes list"), ("[", "not JSON"), (r#"{"items": [{}]}"#, "metadata.name")]
        {
            let err = import_nodes(bad, catalog(), &BTreeMap::new()).expect_err(bad).to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }

    /// Pods become jobs: whole GPUs, a MIG resource, a shared replica, CPU and memory summed
    /// over containers, namespace as queue, priority clamped, times from the status; what
    /// cannot be replayed is counted by reason.
    /// A record that is not valid (times out of order, a timestamp that does not parse) is
    /// refused naming the pod, or with `lenient` counted; the rest of the file still imports.
    #[test]
    fn pod_records_with_bad_times_are_refused_or_counted() {
        for (from, to, expect) in [
            (
                "\"finishedAt\": \"2026-11-02T12:00:30Z\"",
                "\"finishedAt\": \"2026-11-02T09:00:00Z\"",
                "finished before it started",
            ),
            (
                "\"creationTimestamp\": \"2026-11-02T10:00:00Z\"",
                "\"creationTimestamp\": \"2026-11-02T11:00:00Z\"",
                "started before it was created",
            ),
            ("\"finishedAt\": \"2026-11-02T12:00:30Z\"", "\"finishedAt\": \"noon\"", "a timestamp that does not parse"),
        ] {
            assert!(PODS.contains(from), "{from}");
            let bad = PODS.replacen(from, to, 1);
            let err = import_pods(&bad, catalog(), &PodOptions::default()).expect_err(expect).to_string();
            assert!(err.starts_with("items[0] (research/train-0): ") && err.contains("--lenient"), "{err}");
            let lenient =
                import_pods(&bad, catalog(), &PodOptions { lenient: true, ..Default::default() }).expect("lenient");
            assert_eq!(
                lenient.skipped.get(&format!("not a valid pod record: {expect}")),
                Some(&1),
                "{:?}",
                lenient.skipped
            );
            let all = import_pods(PODS, catalog(), &PodOptions::default()).expect("imports");
            assert_eq!(lenient.jobs + 1, all.jobs);
        }
    }

    #[test]
    fn pods_become_a_trace_and_what_cannot_be_replayed_is_counted() {
        let imported = import_pods(PODS, catalog(), &PodOptions::default()).expect("imports");
        let trace =
            crate::read_trace(std::io::Cursor::new(imported.jsonl.clone()), catalog(), false).expect("reads back");
        let names: Vec<&str> = trace.jobs.iter().map(|j| j.job.name.as_str()).collect();
        assert_eq!(names, ["train-0", "embed-7f9c", "notebook-ada", "train-0-2"], "{}", imported.jsonl);
        let train = &trace.jobs[0];
        assert_eq!((train.arrival_s, train.duration_s, train.job.queue.as_str()), (0, Some(7200), "research"));
        assert_eq!(train.job.priority, 1000);
        assert_eq!(trace.jobs[3].job.priority, crate::PRIORITY_RANGE.1 as i32, "a system priority is clamped");
        assert_eq!(trace.jobs[3].duration_s, None, "still running: runs to the end");
        let embed = &trace.jobs[1];
        assert_eq!(embed.job.groups[0].resources.cpu.0, 600, "summed over containers");
        assert!(
            matches!(&embed.job.groups[0].resources.gpu, Some(gantry_types::GpuRequest::Mig { profile }) if profile == "1g.10gb")
        );
        assert!(matches!(trace.jobs[2].job.groups[0].resources.gpu, Some(gantry_types::GpuRequest::Share { .. })));
        // Tolerations as kubectl prints them (admission's nvidia.com/gpu one included).
        assert_eq!(train.job.groups[0].resources.tolerations, ["nvidia.com/gpu"]);
        assert_eq!(
            trace.jobs[2].job.groups[0].resources.tolerations,
            ["dedicated=inference", "node.kubernetes.io/not-ready"]
        );
        assert_eq!(imported.skipped.get("never started (pending)"), Some(&1));
        assert_eq!(imported.skipped.get("asks for several MIG instances"), Some(&1));
        assert_eq!(imported.skipped.get("asks for no GPU (--cpu-pods keeps these)"), Some(&1));
        let with_cpu =
            import_pods(PODS, catalog(), &PodOptions { cpu_pods: true, ..Default::default() }).expect("imports");
        assert_eq!(with_cpu.jobs, 5);
    }

    #[test]
    fn timestamps_are_unix_seconds() {
        assert_eq!(rfc3339_s("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_s("2026-11-24T12:00:00Z"), Some(1_795_521_600));
        assert_eq!(rfc3339_s("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(rfc3339_s("2026-13-01T00:00:00Z"), None);
        assert_eq!(rfc3339_s("yesterday"), None);
    }
}
