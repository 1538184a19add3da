//! Kueue in: ClusterQueues, Cohorts, LocalQueues and ResourceFlavors (YAML as `kubectl get
//! … -o yaml` prints them, or the manifests an admin applies) as gantry's queue file, with what
//! does not map listed rather than dropped.
//!
//! A Cohort becomes a queue (`parentName`, or v1alpha1's `parent`, its parent), weighted by
//! `fairSharing.weight`, guaranteed its GPU pool (`resourceGroups`) plus what its subtree is
//! guaranteed (gantry's parent guarantee holds its children's; Kueue's pool is on top of
//! them); a ClusterQueue a queue under its cohort, weighted likewise; each LocalQueue a leaf
//! named after its namespace under its ClusterQueue (pods imported with `gantry import
//! kubernetes --pods` are queued by namespace). Kueue's decimal weights are scaled to whole
//! numbers together, keeping their ratios. GPU quotas map through the ResourceFlavor's
//! `nvidia.com/gpu.product` node label to a catalog model: `nominalQuota` → `guaranteed`,
//! `borrowingLimit` → `borrow` (and `limit = nominal + borrowing`), `lendingLimit: 0` → `lend =
//! false`. Everything else — CPU and memory quotas, MIG resources, partial lending limits,
//! every `spec` key gantry does not read, objects of other kinds — is named in the notes.

use crate::error::SpecError;
use crate::import_k8s::quote;
use gantry_catalog::Catalog;
use serde_json::Value;
use std::collections::BTreeMap;
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

/// The kinds read; any other object is named in the notes.
const KINDS: [&str; 4] = ["Cohort", "ClusterQueue", "LocalQueue", "ResourceFlavor"];

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
    let mut out = Gathered::default();
    for o in &objects {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("(no kind)");
        if !KINDS.contains(&kind) {
            let name = name_of(o).unwrap_or("?");
            out.unmapped.push(format!("{kind} {name}: not imported (gantry reads {})", KINDS.join(", ")));
        }
    }
    let flavors = gpu_flavors(of_kind("ResourceFlavor"), catalog, map, &mut out.unmapped);
    for c in of_kind("Cohort") {
        out.cohort(c, &flavors);
    }
    // Cohorts named by ClusterQueues but not declared: roots.
    for cq in of_kind("ClusterQueue") {
        if let Some(cohort) = cohort_of(cq)
            && !out.index.contains_key(cohort)
        {
            out.add(Entry { name: cohort.to_string(), ..Entry::default() });
        }
    }
    for cq in of_kind("ClusterQueue") {
        out.cluster_queue(cq, &flavors);
    }
    for lq in of_kind("LocalQueue") {
        out.local_queue(lq);
    }
    if out.entries.is_empty() {
        return Err(SpecError::new("", "no Cohort, ClusterQueue or LocalQueue in the input")
            .hint("give Kueue objects: kubectl get clusterqueues,localqueues,resourceflavors,cohorts -A -o yaml"));
    }
    out.fill_pools();
    let toml = out.write();
    crate::parse_queues(&toml, catalog).map_err(|e| {
        SpecError::new("", format!("the queue file made from the Kueue objects does not read back: {e}"))
    })?;
    Ok(ImportedQueues { toml, queues: out.entries.len(), unmapped: out.unmapped })
}

/// One queue as gathered, before it is written: a Cohort's pool quota needs its members'
/// guarantees, which may come later in the input.
#[derive(Clone, Debug, Default)]
struct Entry {
    name: String,
    parent: Option<String>,
    /// Kueue's `fairSharing.weight` (1 when not given).
    weight: Option<f64>,
    quotas: Vec<QuotaOut>,
    /// A Cohort's quotas are a pool shared by its members, on top of their own guarantees.
    pool: bool,
}

/// One GPU quota: nominal, how much more it may borrow, whether it lends its idle part.
#[derive(Clone, Debug, PartialEq)]
struct QuotaOut {
    model: String,
    nominal: f64,
    borrow: Option<f64>,
    lend: bool,
}

/// The queues gathered so far, by name, and what did not map.
#[derive(Default)]
struct Gathered {
    entries: Vec<Entry>,
    index: BTreeMap<String, usize>,
    unmapped: Vec<String>,
}

impl Gathered {
    fn add(&mut self, entry: Entry) {
        self.index.insert(entry.name.clone(), self.entries.len());
        self.entries.push(entry);
    }

    /// A Cohort: its parent (`parentName`, or the older `parent`), weight and pool quota.
    fn cohort(&mut self, c: &Value, flavors: &BTreeMap<String, String>) {
        let Some(name) = name_of(c) else { return };
        let what = format!("Cohort {name}");
        let known = ["parentName", "parent", "fairSharing", "resourceGroups"];
        unmapped_keys(&what, c.get("spec"), &known, &mut self.unmapped);
        let parent = c.pointer("/spec/parentName").or_else(|| c.pointer("/spec/parent")).and_then(Value::as_str);
        let weight = self.weight_of(&what, c);
        let quotas = quotas(&what, c, flavors, &mut self.unmapped);
        self.add(Entry { name: name.into(), parent: parent.map(str::to_string), weight, pool: true, quotas });
    }

    /// A ClusterQueue: its cohort as parent, its fair-sharing weight, its GPU quotas; what
    /// gantry has no equivalent for is listed.
    fn cluster_queue(&mut self, cq: &Value, flavors: &BTreeMap<String, String>) {
        let Some(name) = name_of(cq) else { return };
        let what = format!("ClusterQueue {name}");
        if self.index.contains_key(name) {
            self.unmapped.push(format!("{what}: a Cohort has its name; left out"));
            return;
        }
        let known = ["cohort", "cohortName", "fairSharing", "resourceGroups", "preemption"];
        unmapped_keys(&what, cq.get("spec"), &known, &mut self.unmapped);
        if cq.pointer("/spec/preemption").is_some() {
            self.unmapped.push(format!(
                "{what}: spec.preemption has no gantry equivalent; gantry's preemption is `--preempt` with the queue tree's guarantees"
            ));
        }
        let weight = self.weight_of(&what, cq);
        let quotas = quotas(&what, cq, flavors, &mut self.unmapped);
        let parent = cohort_of(cq).map(str::to_string);
        self.add(Entry { name: name.into(), parent, weight, quotas, pool: false });
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
        let what = format!("LocalQueue {namespace}/{}", name_of(lq).unwrap_or_default());
        unmapped_keys(&what, lq.get("spec"), &["clusterQueue"], &mut self.unmapped);
        if self.index.contains_key(namespace) {
            self.unmapped.push(format!(
                "{what}: its namespace {namespace:?} is already a queue name; jobs of that namespace go to that queue"
            ));
            return;
        }
        self.add(Entry { name: namespace.into(), parent: Some(cq.into()), ..Entry::default() });
    }

    /// `spec.fairSharing.weight`, its other keys listed.
    fn weight_of(&mut self, what: &str, o: &Value) -> Option<f64> {
        let fair = o.pointer("/spec/fairSharing");
        unmapped_keys(&format!("{what}: fairSharing"), fair, &["weight"], &mut self.unmapped);
        let weight = o.pointer("/spec/fairSharing/weight")?;
        let parsed = amount(weight).filter(|w| w.is_finite() && *w >= 0.0);
        if parsed.is_none() {
            self.unmapped.push(format!("{what}: fairSharing.weight {weight} is not a weight; left at 1"));
        }
        parsed
    }

    /// A pool Cohort is guaranteed its pool plus what its subtree is guaranteed, model by
    /// model (gantry's parent quota covers its children's; Kueue's pool is on top of them).
    fn fill_pools(&mut self) {
        // A cycle or a tree deeper than a queue file takes is refused when the file is read
        // back; sums over it are not taken (they would not end).
        let depths: Vec<usize> = (0..self.entries.len()).map(|i| self.depth(i)).collect();
        if depths.iter().any(|&d| d > crate::queues::QUEUE_DEPTH_MAX) {
            return;
        }
        // Who is under whom, once (the input may hold many queues).
        let mut children: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(parent) = &e.parent {
                children.entry(parent.clone()).or_default().push(i);
            }
        }
        // Deepest first, so a pool below another is filled before the one above adds it up.
        let mut order: Vec<usize> = (0..self.entries.len()).filter(|&i| self.entries[i].pool).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(depths[i]));
        for i in order {
            let under = children.get(&self.entries[i].name).cloned().unwrap_or_default();
            for q in 0..self.entries[i].quotas.len() {
                let model = self.entries[i].quotas[q].model.clone();
                let below: f64 = under.iter().map(|&c| self.subtree(c, &model, &children)).sum();
                self.entries[i].quotas[q].nominal += below;
            }
        }
    }

    /// What queue `i` and its subtree are guaranteed of `model`: its own quota where it has
    /// one, else its children's.
    fn subtree(&self, i: usize, model: &str, children: &BTreeMap<String, Vec<usize>>) -> f64 {
        match self.entries[i].quotas.iter().find(|q| q.model == model) {
            Some(q) => q.nominal,
            None => children
                .get(&self.entries[i].name)
                .into_iter()
                .flatten()
                .map(|&c| self.subtree(c, model, children))
                .sum(),
        }
    }

    /// How deep queue `i` is, counted at most one past the deepest a queue file takes (a
    /// cycle, which the queue file refuses later, stops there).
    fn depth(&self, i: usize) -> usize {
        let mut depth = 0;
        let mut at = self.entries[i].parent.as_deref();
        while let Some(parent) = at.filter(|_| depth <= crate::queues::QUEUE_DEPTH_MAX) {
            depth += 1;
            at = self.index.get(parent).and_then(|&p| self.entries[p].parent.as_deref());
        }
        depth
    }

    /// The queue file. Kueue's weights are decimals (`"0.75"`), gantry's whole numbers: all
    /// are scaled by the least power of ten that makes them whole (at most 1,000), so their
    /// ratios hold, and every queue then states its weight.
    fn write(&mut self) -> String {
        let weights: Vec<f64> = self.entries.iter().filter_map(|e| e.weight).filter(|w| *w > 0.0).collect();
        let whole = |f: f64| weights.iter().all(|w| ((w * f) - (w * f).round()).abs() < 1e-6);
        let scale = [1.0, 10.0, 100.0, 1000.0].into_iter().find(|&f| whole(f)).unwrap_or(1000.0);
        if scale > 1.0 {
            self.unmapped.push(format!(
                "fairSharing weights scaled by {scale} to whole numbers (gantry's weights are whole; their ratios are kept)"
            ));
        }
        let mut toml = String::from("# Written by `gantry import kueue` from Kueue objects.\n");
        let mut notes = Vec::new();
        for e in &self.entries {
            let _ = write!(toml, "\n[[queue]]\nname = {}\n", quote(&e.name));
            if let Some(parent) = &e.parent {
                let _ = writeln!(toml, "parent = {}", quote(parent));
            }
            let weight = e.weight.unwrap_or(1.0);
            if weight <= 0.0 {
                notes.push(format!(
                    "queue {}: fairSharing.weight 0 (Kueue: it borrows last) written as the least weight",
                    e.name
                ));
            }
            if e.weight.is_some() || scale > 1.0 {
                let scaled = ((weight * scale).round() as i64).clamp(1, crate::queues::QUEUE_WEIGHT_MAX);
                if ((weight * scale) - scaled as f64).abs() > 1e-6 && weight > 0.0 {
                    notes
                        .push(format!("queue {}: fairSharing.weight {weight} rounded to {scaled} (÷ {scale})", e.name));
                }
                let _ = writeln!(toml, "weight = {scaled}");
            }
            if !e.quotas.is_empty() {
                let quotas: Vec<String> = e.quotas.iter().map(quota_text).collect();
                let _ = writeln!(toml, "quota = [{}]", quotas.join(", "));
            }
        }
        self.unmapped.extend(notes);
        toml
    }
}

fn quota_text(q: &QuotaOut) -> String {
    let mut entry = format!("{{ flavor = {}, guaranteed = {}", quote(&q.model), q.nominal);
    if let Some(borrow) = q.borrow {
        let _ = write!(entry, ", borrow = {borrow}, limit = {}", q.nominal + borrow);
    }
    if !q.lend {
        entry.push_str(", lend = false");
    }
    entry + " }"
}

/// Each key of `spec` (an object) that is not in `known`, named in `unmapped`.
fn unmapped_keys(what: &str, spec: Option<&Value>, known: &[&str], unmapped: &mut Vec<String>) {
    let Some(keys) = spec.and_then(Value::as_object) else { return };
    for key in keys.keys().filter(|k| !known.contains(&k.as_str())) {
        unmapped.push(format!("{what}: spec.{key} has no gantry equivalent; left out"));
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
        let what = format!("ResourceFlavor {name}");
        unmapped_keys(&what, f.get("spec"), &["nodeLabels"], unmapped);
        let labels = f.pointer("/spec/nodeLabels").and_then(Value::as_object);
        for label in labels.into_iter().flat_map(|l| l.keys()).filter(|k| *k != "nvidia.com/gpu.product") {
            unmapped.push(format!("{what}: node label {label} (gantry places by GPU model, not by this label)"));
        }
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

/// A ClusterQueue's or Cohort's GPU quotas (`what` names it); what does not map goes to
/// `unmapped`.
fn quotas(what: &str, o: &Value, flavors: &BTreeMap<String, String>, unmapped: &mut Vec<String>) -> Vec<QuotaOut> {
    let mut out = Vec::new();
    for group in o.pointer("/spec/resourceGroups").and_then(Value::as_array).into_iter().flatten() {
        for flavor in group.get("flavors").and_then(Value::as_array).into_iter().flatten() {
            let flavor_name = flavor.get("name").and_then(Value::as_str).unwrap_or_default();
            for r in flavor.get("resources").and_then(Value::as_array).into_iter().flatten() {
                let resource = r.get("name").and_then(Value::as_str).unwrap_or_default();
                if resource != "nvidia.com/gpu" {
                    unmapped
                        .push(format!("{what}: {resource} quota in flavor {flavor_name} (gantry's quotas are GPUs)"));
                    continue;
                }
                let Some(model) = flavors.get(flavor_name) else {
                    unmapped.push(format!("{what}: GPU quota in flavor {flavor_name}, which has no GPU model"));
                    continue;
                };
                let known = ["name", "nominalQuota", "borrowingLimit", "lendingLimit"];
                unmapped_keys(&format!("{what}: flavor {flavor_name}: {resource}"), Some(r), &known, unmapped);
                let mut quota = QuotaOut {
                    model: model.clone(),
                    nominal: r.get("nominalQuota").and_then(amount).unwrap_or(0.0),
                    borrow: r.get("borrowingLimit").and_then(amount),
                    lend: true,
                };
                match r.get("lendingLimit").and_then(amount) {
                    Some(0.0) => quota.lend = false,
                    Some(l) => unmapped.push(format!(
                        "{what}: lendingLimit {l} on {model} (gantry lends all of an idle guarantee or none)"
                    )),
                    None => {}
                }
                out.push(quota);
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

    /// Every queue's `name = …` line and the lines after it, up to the next queue.
    fn queue_block<'a>(toml: &'a str, name: &str) -> &'a str {
        let start = toml.find(&format!("name = \"{name}\"\n")).unwrap_or_else(|| panic!("{name} in\n{toml}"));
        let rest = &toml[start..];
        rest[..rest.find("\n\n").unwrap_or(rest.len())].trim_end()
    }

    /// Kueue's own documentation examples: the older `spec.parent`, decimal weights (scaled
    /// with their ratio kept), a CPU pool and what has no gantry equivalent, each named.
    #[test]
    fn kueues_own_examples_import_with_every_left_out_field_named() {
        let catalog = Catalog::embedded();
        let upstream = |f: &str| {
            let path = format!("{}/fixtures/kubernetes/kueue-upstream/{f}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).expect("fixture")
        };
        let tree = upstream("v1alpha1-cohort-tree-fairsharing-weights.yaml");
        let imported = import_kueue(&[("tree.yaml", &tree)], catalog, &BTreeMap::new()).expect("imports");
        assert_eq!(
            queue_block(&imported.toml, "important-org"),
            "name = \"important-org\"\nparent = \"root-cohort\"\nweight = 75"
        );
        assert_eq!(
            queue_block(&imported.toml, "regular-org"),
            "name = \"regular-org\"\nparent = \"root-cohort\"\nweight = 25"
        );
        assert!(imported.unmapped.iter().any(|n| n.contains("scaled by 100")), "{:?}", imported.unmapped);
        let pool = [
            upstream("v1beta2-cohort-pool-quota.yaml"),
            upstream("v1beta2-clusterqueue-zero-nominal-borrows-pool.yaml"),
        ];
        let imported =
            import_kueue(&[("a.yaml", &pool[0]), ("b.yaml", &pool[1])], catalog, &BTreeMap::new()).expect("imports");
        let said = imported.unmapped.join("\n");
        assert!(said.contains("Cohort hello-cohort: cpu quota in flavor default-flavor"), "{said}");
        assert!(queue_block(&imported.toml, "my-cluster-queue").contains("parent = \"hello-cohort\""));
        let viz = [upstream("kueueviz-01.5-cohorts.yaml"), upstream("kueueviz-01-cluster-queues.yaml")];
        let imported =
            import_kueue(&[("c.yaml", &viz[0]), ("q.yaml", &viz[1])], catalog, &BTreeMap::new()).expect("imports");
        let said = imported.unmapped.join("\n");
        for expected in [
            "ClusterQueue agi-cluster-queue: spec.flavorFungibility has no gantry equivalent",
            "ClusterQueue agi-cluster-queue: spec.namespaceSelector has no gantry equivalent",
            "ClusterQueue emergency-cluster-queue: spec.preemption",
            "ClusterQueue emergency-cluster-queue: gpu quota in flavor gpu",
        ] {
            assert!(said.contains(expected), "{expected} not in:\n{said}");
        }
        assert!(queue_block(&imported.toml, "research").contains("parent = \"organization\""));
        assert!(imported.toml.contains("name = \"orphan-cohort-for-testing\""));
    }

    /// A Cohort's GPU pool is on top of its members' guarantees: gantry's parent guarantee
    /// holds both. Weights scale to whole numbers together; other kinds are named.
    #[test]
    fn a_cohorts_gpu_pool_and_weights_map_to_the_queue_tree() {
        let catalog = Catalog::embedded();
        let text = include_str!("../fixtures/kubernetes/kueue-gpu-pool.yaml");
        let imported = import_kueue(&[("pool.yaml", text)], catalog, &BTreeMap::new()).expect("imports");
        let tree = crate::parse_queues(&imported.toml, catalog).expect("reads back");
        assert_eq!(tree.queues.len(), 4, "{}", imported.toml);
        assert_eq!(
            queue_block(&imported.toml, "org"),
            "name = \"org\"\nweight = 10\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 12 }]",
            "the pool (4) and pretraining's 8 below it"
        );
        assert_eq!(queue_block(&imported.toml, "research"), "name = \"research\"\nparent = \"org\"\nweight = 15");
        assert!(
            queue_block(&imported.toml, "pretraining")
                .contains("weight = 5\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 8 }]")
        );
        assert!(
            queue_block(&imported.toml, "tuning").contains(
                "weight = 10\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 0, borrow = 4, limit = 4 }]"
            )
        );
        let said = imported.unmapped.join("\n");
        for expected in [
            "ClusterQueue pretraining: spec.queueingStrategy has no gantry equivalent",
            "WorkloadPriorityClass urgent: not imported",
            "ResourceFlavor h100: spec.topologyName has no gantry equivalent",
            "scaled by 10",
        ] {
            assert!(said.contains(expected), "{expected} not in:\n{said}");
        }
    }

    #[test]
    fn a_cohort_cycle_with_a_pool_is_refused_not_followed() {
        let pool = "  resourceGroups:\n  - coveredResources: [\"nvidia.com/gpu\"]\n    flavors:\n    - name: h100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 4\n";
        let flavor = "kind: ResourceFlavor\nmetadata:\n  name: h100\nspec:\n  nodeLabels:\n    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n";
        let text = format!(
            "{flavor}---\nkind: Cohort\nmetadata:\n  name: a\nspec:\n  parentName: b\n{pool}---\nkind: Cohort\nmetadata:\n  name: b\nspec:\n  parentName: a\n{pool}"
        );
        let err = import_kueue(&[("cycle.yaml", &text)], Catalog::embedded(), &BTreeMap::new()).expect_err("a cycle");
        assert!(err.to_string().contains("cycle"), "{err}");
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
