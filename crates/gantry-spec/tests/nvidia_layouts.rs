//! NVIDIA's own mig-parted configurations — the GPU Operator's default ConfigMap (every
//! `all-*` layout and `all-balanced` for each GPU it names), mig-parted's examples and its
//! systemd default — read as NVIDIA wrote them: every MIG layout in them, on every catalog
//! model its device filter names (or, without a filter, every model that has its profiles),
//! validates as a gantry fleet file, comes back with the same counts from `gantry plan`'s
//! mig-parted export, and comes back as that layout on every GPU from `gantry import
//! kubernetes` of a node of eight such GPUs (the device plugin's per-node totals). The files are in tests/nvidia/ (Apache-2.0; provenance in its README).

use std::collections::BTreeMap;

const FILES: [(&str, &str); 4] = [
    ("gpu-operator-default-mig-parted-config.yaml", include_str!("nvidia/gpu-operator-default-mig-parted-config.yaml")),
    ("mig-parted-example-config.yaml", include_str!("nvidia/mig-parted-example-config.yaml")),
    ("mig-parted-dgx-station-80gb-config.yaml", include_str!("nvidia/mig-parted-dgx-station-80gb-config.yaml")),
    ("mig-parted-config-default.yaml", include_str!("nvidia/mig-parted-config-default.yaml")),
];

/// Catalog models by the PCI ids (`0x20B210DE`) mig-parted's device filters name.
fn models_by_pci_id() -> BTreeMap<String, Vec<String>> {
    let catalog: serde_json::Value =
        serde_json::from_str(include_str!("../../gantry-catalog/data/gpu-catalog.json")).expect("catalog JSON");
    let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for gpu in catalog["gpus"].as_array().expect("gpus") {
        for id in gpu["pci_device_ids_mig_parted_group"].as_array().into_iter().flatten() {
            let id = id.as_str().expect("id");
            if id.starts_with("0x") {
                by_id.entry(id.to_ascii_uppercase()).or_default().push(gpu["id"].as_str().expect("id").to_string());
            }
        }
    }
    by_id
}

/// A mig-parted document's `mig-configs` (from a ConfigMap's `config.yaml` where wrapped).
fn mig_configs(text: &str) -> serde_json::Map<String, serde_json::Value> {
    let doc: serde_json::Value = serde_saphyr::from_str(text).expect("YAML");
    let doc = match doc["data"]["config.yaml"].as_str() {
        Some(inner) => serde_saphyr::from_str(inner).expect("config.yaml YAML"),
        None => doc,
    };
    assert_eq!(doc["version"], "v1");
    doc["mig-configs"].as_object().expect("mig-configs").clone()
}

/// The catalog models one entry applies to.
fn models_of(
    entry: &serde_json::Value,
    counts: &BTreeMap<String, u32>,
    by_id: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let filter: Vec<String> = match &entry["device-filter"] {
        serde_json::Value::String(one) => vec![one.clone()],
        serde_json::Value::Array(many) => many.iter().map(|v| v.as_str().expect("id").to_string()).collect(),
        _ => Vec::new(),
    };
    let catalog = gantry_catalog::Catalog::embedded();
    if filter.is_empty() {
        // No filter: "every GPU"; the profiles' names say which models those can be.
        return catalog
            .models()
            .iter()
            .filter(|m| m.mig.as_ref().is_some_and(|g| counts.keys().all(|p| g.profile(p).is_some())))
            .map(|m| m.id.clone())
            .collect();
    }
    let mut models: Vec<String> =
        filter.iter().flat_map(|id| by_id.get(&id.to_ascii_uppercase()).cloned().unwrap_or_default()).collect();
    models.sort();
    models.dedup();
    models
}

/// Eight GPUs of `model` in one layout, as the device plugin (mixed strategy) and GFD label
/// the node, imported back: each GPU's instances by profile.
fn imported_layouts(model: &str, counts: &BTreeMap<String, u32>) -> Vec<BTreeMap<String, u32>> {
    let mut allocatable = serde_json::json!({"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "0"});
    for (profile, n) in counts {
        allocatable[format!("nvidia.com/mig-{}", profile.replace('+', "."))] = serde_json::json!((n * 8).to_string());
    }
    let labels = serde_json::json!({"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": model, "nvidia.com/gpu.count": "8"});
    let nodes = serde_json::json!({"items": [{"metadata": {"name": "n", "labels": labels}, "status": {"allocatable": allocatable}}]});
    let catalog = gantry_catalog::Catalog::embedded();
    let imported =
        gantry_spec::import_kubernetes_nodes(&nodes.to_string(), catalog, &BTreeMap::new()).expect("imports");
    let fleet = gantry_spec::parse_fleet(&imported.toml, catalog).expect("reads back");
    fleet.nodes[0]
        .gpus
        .iter()
        .map(|g| {
            let mut by_profile = BTreeMap::new();
            if let gantry_types::GpuMode::Mig { instances } = &g.mode {
                for i in instances {
                    *by_profile.entry(i.profile.clone()).or_default() += 1;
                }
            }
            by_profile
        })
        .collect()
}

#[test]
fn every_layout_nvidia_ships_validates_and_exports_unchanged() {
    let by_id = models_by_pci_id();
    let mut checked = 0;
    let mut balanced = Vec::new();
    for (file, text) in FILES {
        for (name, entries) in mig_configs(text) {
            for entry in entries.as_array().expect("entries") {
                let counts: BTreeMap<String, u32> = entry["mig-devices"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(p, n)| (p.clone(), n.as_u64().expect("count") as u32))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                if entry["mig-enabled"] != true || counts.is_empty() {
                    continue;
                }
                for model in models_of(entry, &counts, &by_id) {
                    let mig: Vec<String> = counts.iter().map(|(p, n)| format!("\"{p}\" = {n}")).collect();
                    let fleet = format!(
                        "[[node]]\nname = \"n\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"{model}\"\ncount = 1\nmig = {{ {} }}\n",
                        mig.join(", ")
                    );
                    let parsed = gantry_spec::parse_fleet(&fleet, gantry_catalog::Catalog::embedded())
                        .unwrap_or_else(|e| panic!("{file}: {name} on {model}: {e}"));
                    let exported = mig_configs(&gantry_spec::mig_parted_yaml(&parsed));
                    let back: BTreeMap<String, u32> = exported["gantry-n"][0]["mig-devices"]
                        .as_object()
                        .expect("mig-devices")
                        .iter()
                        .map(|(p, n)| (p.clone(), n.as_u64().expect("count") as u32))
                        .collect();
                    assert_eq!(back, counts, "{file}: {name} on {model}");
                    assert_eq!(imported_layouts(&model, &counts), vec![counts.clone(); 8], "{file}: {name} on {model}");
                    if name == "all-balanced" {
                        balanced.push(model.clone());
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 60, "{checked} layouts checked");
    for model in ["A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "A30-24GB", "H200-SXM-141GB", "B200-180GB"] {
        assert!(balanced.iter().any(|m| m == model), "all-balanced checked on {model}: {balanced:?}");
    }
}
