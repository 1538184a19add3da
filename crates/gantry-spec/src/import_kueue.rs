//! Kueue in: ClusterQueues, Cohorts, LocalQueues and ResourceFlavors (YAML as `kubectl get
//! … -o yaml` prints them, or the manifests an admin applies) as gantry's queue file, with what
//! does not map listed rather than dropped.
//!
//! A Cohort becomes a queue (its `parentName` its parent); a ClusterQueue a queue under its
//! cohort, weighted by `fairSharing.weight`; each LocalQueue a leaf named after its namespace
//! under its ClusterQueue (pods imported with `gantry import kubernetes --pods` are queued by
//! namespace). GPU quotas map through the ResourceFlavor's `nvidia.com/gpu.product` node label
//! to a catalog model: `nominalQuota` → `guaranteed`, `borrowingLimit` → `borrow` (and
//! `limit = nominal + borrowing`), `lendingLimit: 0` → `lend = false`. CPU and memory quotas,
//! MIG resources, partial lending limits and preemption policies have no gantry equivalent
//! and are listed.

use crate::error::SpecError;
use crate::import_k8s::quote;
use gantry_catalog::Catalog;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// A queue file made from Kueue objects, and what did not map.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedQueues {
    pub toml: String,
    pub queues: usize,
    pub unmapped: Vec<String>,
}

/// Every object of the files (`(name, text)`: several documents each, and `List`s,
/// flattened); a syntax error names its file and line.
fn objects(files: &[(&str, &str)]) -> Result<Vec<Value>, SpecError> {
    let mut docs: Vec<Value> = Vec::new();
    for (name, yaml) in files {
        let parsed: Vec<Value> = serde_saphyr::from_multiple(yaml).map_err(|e| {
            SpecError::new(*name, format!("not YAML: {}", e.to_string().lines().next().unwrap_or_default()))
        })?;
        docs.extend(parsed);
    }
    let mut out = Vec::new();
    for doc in docs {
        match doc.get("items").and_then(Value::as_array) {
            Some(items) => out.extend(items.iter().cloned()),
            None if doc.is_object() => out.push(doc),
            None => {}
        }
    }
    Ok(out)
}

fn name_of(o: &Value) -> Option<&str> {
    o.pointer("/metadata/name").and_then(Value::as_str)
}

/// A Kubernetes quantity as a number of GPUs (`8`, `"8"`, `"2500m"`).
fn amount(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.strip_suffix('m') {
            Some(milli) => milli.parse::<f64>().ok().map(|m| m / 1000.0),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// Kueue objects → a queue file. `map`: ResourceFlavor name → catalog model, for flavors
/// without a GPU product node label.
pub fn import_kueue(
    files: &[(&str, &str)],
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
) -> Result<ImportedQueues, SpecError> {
    let objects = objects(files)?;
    let of_kind =
        |kind: &'static str| objects.iter().filter(move |o| o.get("kind").and_then(Value::as_str) == Some(kind));
    let mut out = QueueFileOut::default();
    let flavors = gpu_flavors(of_kind("ResourceFlavor"), catalog, map, &mut out.unmapped);
    for c in of_kind("Cohort") {
        let Some(name) = name_of(c) else { continue };
        out.queue(name, c.pointer("/spec/parentName").and_then(Value::as_str));
    }
    // Cohorts named by ClusterQueues but not declared: roots.
    for cq in of_kind("ClusterQueue") {
        if let Some(cohort) = cohort_of(cq)
            && !out.names.contains(cohort)
        {
            out.queue(cohort, None);
        }
    }
    for cq in of_kind("ClusterQueue") {
        out.cluster_queue(cq, &flavors);
    }
    for lq in of_kind("LocalQueue") {
        out.local_queue(lq);
    }
    if out.queues == 0 {
        return Err(SpecError::new("", "no Cohort, ClusterQueue or LocalQueue in the input")
            .hint("give Kueue objects: kubectl get clusterqueues,localqueues,resourceflavors,cohorts -A -o yaml"));
    }
    crate::parse_queues(&out.toml, catalog).map_err(|e| {
        SpecError::new("", format!("the queue file made from the Kueue objects does not read back: {e}"))
    })?;
    Ok(ImportedQueues { toml: out.toml, queues: out.queues, unmapped: out.unmapped })
}

/// The queue file as it is written, the queue names in it, and what did not map.
struct QueueFileOut {
    toml: String,
    queues: usize,
    names: BTreeSet<String>,
    unmapped: Vec<String>,
}

impl Default for QueueFileOut {
    fn default() -> Self {
        QueueFileOut {
            toml: String::from("# Written by `gantry import kueue` from Kueue objects.\n"),
            queues: 0,
            names: BTreeSet::new(),
            unmapped: Vec::new(),
        }
    }
}

impl QueueFileOut {
    /// A `[[queue]]` named `name` under `parent`.
    fn queue(&mut self, name: &str, parent: Option<&str>) {
        let _ = write!(self.toml, "\n[[queue]]\nname = {}\n", quote(name));
        if let Some(parent) = parent {
            let _ = writeln!(self.toml, "parent = {}", quote(parent));
        }
        self.names.insert(name.to_string());
        self.queues += 1;
    }

    /// A ClusterQueue: its cohort as parent, its fair-sharing weight, its GPU quotas; what
    /// gantry has no equivalent for is listed.
    fn cluster_queue(&mut self, cq: &Value, flavors: &BTreeMap<String, String>) {
        let Some(name) = name_of(cq) else { return };
        self.queue(name, cohort_of(cq));
        if let Some(weight) = cq.pointer("/spec/fairSharing/weight").and_then(amount) {
            let rounded = weight.round().max(1.0) as u64;
            if (weight - rounded as f64).abs() > 1e-9 {
                self.unmapped.push(format!("ClusterQueue {name}: fairSharing.weight {weight} rounded to {rounded} (gantry weights are whole numbers)"));
            }
            let _ = writeln!(self.toml, "weight = {rounded}");
        }
        let quotas = quotas(name, cq, flavors, &mut self.unmapped);
        if !quotas.is_empty() {
            let _ = writeln!(self.toml, "quota = [{}]", quotas.join(", "));
        }
        for key in ["preemption", "admissionChecks", "admissionChecksStrategy", "flavorFungibility", "stopPolicy"] {
            if cq.pointer(&format!("/spec/{key}")).is_some() {
                self.unmapped.push(format!("ClusterQueue {name}: spec.{key} (no gantry equivalent; gantry's preemption is `--preempt` with the queue tree's guarantees)"));
            }
        }
    }

    /// A LocalQueue: its namespace as a leaf under its ClusterQueue (unless that name is
    /// taken already).
    fn local_queue(&mut self, lq: &Value) {
        let (Some(namespace), Some(cq)) = (
            lq.pointer("/metadata/namespace").and_then(Value::as_str),
            lq.pointer("/spec/clusterQueue").and_then(Value::as_str),
        ) else {
            return;
        };
        if self.names.contains(namespace) {
            self.unmapped.push(format!(
                "LocalQueue {}/{}: its namespace {namespace:?} is already a queue name; jobs of that namespace go to that queue",
                namespace,
                name_of(lq).unwrap_or_default()
            ));
            return;
        }
        self.queue(namespace, Some(cq));
    }
}

/// A ClusterQueue's cohort (`cohortName`, or the older `cohort`).
fn cohort_of(cq: &Value) -> Option<&str> {
    cq.pointer("/spec/cohortName").or_else(|| cq.pointer("/spec/cohort")).and_then(Value::as_str)
}

/// ResourceFlavor name → catalog model, from `map` or the flavor's GPU product node label;
/// flavors with neither are listed in `unmapped`.
fn gpu_flavors<'a>(
    flavors: impl Iterator<Item = &'a Value>,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
    unmapped: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in flavors {
        let Some(name) = name_of(f) else { continue };
        let product = f.pointer("/spec/nodeLabels/nvidia.com~1gpu.product").and_then(Value::as_str);
        let model = map
            .get(name)
            .cloned()
            .or_else(|| product.and_then(|p| crate::import_k8s::model_of(p, catalog, &BTreeMap::new())));
        match model {
            Some(model) => {
                out.insert(name.to_string(), model);
            }
            None => unmapped.push(format!(
                "ResourceFlavor {name}: its node labels name no GPU product gantry knows, so its GPU quotas are left out \
                 (--map {name}=MODEL if it is a GPU flavor)"
            )),
        }
    }
    out
}

/// A ClusterQueue's GPU quotas as queue-file entries; what does not map goes to `unmapped`.
fn quotas(name: &str, cq: &Value, flavors: &BTreeMap<String, String>, unmapped: &mut Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    for group in cq.pointer("/spec/resourceGroups").and_then(Value::as_array).into_iter().flatten() {
        for flavor in group.get("flavors").and_then(Value::as_array).into_iter().flatten() {
            let flavor_name = flavor.get("name").and_then(Value::as_str).unwrap_or_default();
            for r in flavor.get("resources").and_then(Value::as_array).into_iter().flatten() {
                let resource = r.get("name").and_then(Value::as_str).unwrap_or_default();
                if resource != "nvidia.com/gpu" {
                    unmapped.push(format!(
                        "ClusterQueue {name}: {resource} quota in flavor {flavor_name} (gantry's quotas are GPUs)"
                    ));
                    continue;
                }
                let Some(model) = flavors.get(flavor_name) else {
                    unmapped.push(format!(
                        "ClusterQueue {name}: GPU quota in flavor {flavor_name}, which has no GPU model"
                    ));
                    continue;
                };
                let nominal = r.get("nominalQuota").and_then(amount).unwrap_or(0.0);
                let mut entry = format!("{{ flavor = {}, guaranteed = {nominal}", quote(model));
                if let Some(borrow) = r.get("borrowingLimit").and_then(amount) {
                    let _ = write!(entry, ", borrow = {borrow}, limit = {}", nominal + borrow);
                }
                match r.get("lendingLimit").and_then(amount) {
                    Some(0.0) => entry.push_str(", lend = false"),
                    Some(l) => unmapped.push(format!(
                        "ClusterQueue {name}: lendingLimit {l} on {model} (gantry lends all of an idle guarantee or none)"
                    )),
                    None => {}
                }
                entry.push_str(" }");
                out.push(entry);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUEUE: &str = include_str!("../fixtures/kubernetes/kueue.yaml");

    #[test]
    fn kueue_objects_become_a_queue_tree_with_gpu_quotas() {
        let catalog = Catalog::embedded();
        let imported = import_kueue(&[("kueue.yaml", KUEUE)], catalog, &BTreeMap::new()).expect("imports");
        let tree = crate::parse_queues(&imported.toml, catalog).expect("reads back");
        let names: Vec<&str> = tree.queues.iter().map(|q| q.name.as_str()).collect();
        for name in ["org", "research", "prod", "team-vision", "inference"] {
            assert!(names.contains(&name), "{name} in {names:?}\n{}", imported.toml);
        }
        assert!(imported.toml.contains("name = \"research\"\nparent = \"org\"\nweight = 2\nquota = [{ flavor = \"A100-SXM4-80GB\", guaranteed = 8, borrow = 4, limit = 12 }]"), "{}", imported.toml);
        assert!(
            imported.toml.contains("flavor = \"H100-SXM5-80GB\", guaranteed = 16, lend = false"),
            "{}",
            imported.toml
        );
        assert!(imported.toml.contains("name = \"team-vision\"\nparent = \"research\""), "{}", imported.toml);
        let said = imported.unmapped.join("\n");
        for expected in ["cpu quota", "memory quota", "spec.preemption", "lendingLimit 2", "flavor spot-cpu"] {
            assert!(said.contains(expected), "{expected} not in:\n{said}");
        }
    }

    #[test]
    fn bad_input_is_named() {
        let catalog = Catalog::embedded();
        for (bad, expected) in [("a: [", "not YAML"), ("kind: Pod\n", "no Cohort, ClusterQueue or LocalQueue")] {
            let err = import_kueue(&[("bad.yaml", bad)], catalog, &BTreeMap::new()).expect_err(bad).to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
        // A syntax error in the second of several files names that file and its own line.
        let err = import_kueue(
            &[("good.yaml", KUEUE), ("second.yaml", "kind: Cohort\nmetadata:\n name: [\n")],
            catalog,
            &BTreeMap::new(),
        )
        .expect_err("second file")
        .to_string();
        assert!(err.starts_with("second.yaml: not YAML") && err.contains("line 3"), "{err}");
    }
}
