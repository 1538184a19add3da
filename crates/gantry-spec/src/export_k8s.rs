//! A planned fleet in Kubernetes terms, written as NVIDIA's tools read them, so teams on
//! Kubernetes can use gantry as a planner: mig-parted's configuration (raw, and as the
//! ConfigMap the GPU Operator's mig-manager reads), the k8s-device-plugin's configuration (a
//! ConfigMap with a `default` entry and one entry per node that needs its own), and the node
//! labels that select both — every node gets one of each.
//!
//! The rules followed are the tools' own, read in their sources (NVIDIA/mig-parted
//! `api/spec/v1`, NVIDIA/k8s-device-plugin `api/config/v1` and `validateFlags`): mig-parted
//! refuses an empty config and unknown fields and has no field for start positions; the
//! device plugin refuses replicas below 2, MPS together with MIG on one node, and MPS without
//! an `mpsRoot`; its config-manager needs a `default` entry for nodes without a label.

use gantry_types::{Fleet, GpuMode, Node};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The config name gantry gives a node.
pub fn config_name(node: &str) -> String {
    format!("gantry-{node}")
}

/// The device-plugin config entry for nodes that need nothing of their own.
pub const DEVICE_PLUGIN_DEFAULT: &str = "default";

/// Where the device plugin's Helm chart keeps MPS's pipes and logs (`mps.root`).
const MPS_ROOT: &str = "/run/nvidia/mps";

fn has_mig(node: &Node) -> bool {
    node.gpus.iter().any(|g| matches!(g.mode, GpuMode::Mig { .. }))
}

/// mig-parted's `config.yaml`: `all-disabled`, and per node with MIG GPUs which GPUs have MIG
/// on and how many instances of each profile. mig-parted's format has no start positions (it
/// lets the driver place instances); the starts gantry planned are written as a comment on
/// each entry, and what the driver made is what the node's agent reports back.
pub fn mig_parted_yaml(fleet: &Fleet) -> String {
    let mut out = String::from(
        "# NVIDIA mig-parted configuration written by gantry plan.\n# Apply on each node: nvidia-mig-parted apply -f mig-parted.yaml -c gantry-<node>\nversion: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n",
    );
    for node in fleet.nodes.iter().filter(|n| has_mig(n)) {
        let _ = writeln!(out, "  {}:", config_name(&node.name));
        let whole: Vec<String> = node
            .gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| !matches!(g.mode, GpuMode::Mig { .. }))
            .map(|(i, _)| i.to_string())
            .collect();
        if !whole.is_empty() {
            let _ = writeln!(out, "    - devices: [{}]\n      mig-enabled: false", whole.join(", "));
        }
        // GPUs with the same layout (the same instances at the same starts) share an entry.
        let mut layouts: BTreeMap<Vec<(String, u8)>, Vec<usize>> = BTreeMap::new();
        for (i, g) in node.gpus.iter().enumerate() {
            if let GpuMode::Mig { instances } = &g.mode {
                let mut placed: Vec<(String, u8)> = instances.iter().map(|x| (x.profile.clone(), x.start)).collect();
                placed.sort_by_key(|(_, start)| *start);
                layouts.entry(placed).or_default().push(i);
            }
        }
        for (placed, devices) in layouts {
            let devices: Vec<String> = devices.iter().map(usize::to_string).collect();
            let starts: Vec<String> = placed.iter().map(|(p, s)| format!("{p}@{s}")).collect();
            let _ = writeln!(
                out,
                "    # planned starts: {}",
                if starts.is_empty() { "none".into() } else { starts.join(" ") }
            );
            let _ = writeln!(out, "    - devices: [{}]\n      mig-enabled: true", devices.join(", "));
            let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
            for (profile, _) in &placed {
                *counts.entry(profile.as_str()).or_default() += 1;
            }
            if counts.is_empty() {
                out.push_str("      mig-devices: {}\n");
                continue;
            }
            out.push_str("      mig-devices:\n");
            for (profile, n) in counts {
                let _ = writeln!(out, "        \"{profile}\": {n}");
            }
        }
    }
    out
}

/// The same configuration as the ConfigMap the GPU Operator's mig-manager reads (key
/// `config.yaml`; the operator is pointed at it with `migManager.config.name`).
pub fn mig_parted_configmap_yaml(fleet: &Fleet) -> String {
    let raw = mig_parted_yaml(fleet);
    let mut out = String::from(
        "# The mig-parted configuration as a ConfigMap for the NVIDIA GPU Operator's mig-manager, written by gantry plan:\n#   kubectl apply -f mig-parted-configmap.yaml\n#   helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator --reuse-values --set migManager.config.name=gantry-mig-parted-config\n# then select each node's layout with its nvidia.com/mig.config label (node-labels.sh).\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gantry-mig-parted-config\n  namespace: gpu-operator\ndata:\n  config.yaml: |\n",
    );
    for line in raw.lines() {
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// How one node's full GPUs are shared, as the device plugin can say it.
struct Sharing {
    /// `timeSlicing` or `mps`, and the replicas per GPU.
    kind: &'static str,
    replicas: u32,
}

/// The node's sharing, and what the device plugin cannot say of it (`warnings`).
fn node_sharing(node: &Node, warnings: &mut Vec<String>) -> Option<Sharing> {
    let mut time_sliced: Vec<u32> = Vec::new();
    let mut mps: Vec<u32> = Vec::new();
    let mut whole = 0;
    for g in &node.gpus {
        match g.mode {
            GpuMode::TimeSlice { replicas, .. } => time_sliced.push(replicas),
            GpuMode::Mps { max_clients } => mps.push(max_clients),
            GpuMode::Whole => whole += 1,
            GpuMode::Mig { .. } => {}
        }
    }
    if has_mig(node) && !mps.is_empty() {
        warnings.push(format!(
            "node {}: the device plugin refuses MPS on a node with MIG GPUs (\"using --mig-strategy=mixed is not supported with MPS\"); its {} MPS GPU(s) are shared by time-slicing in device-plugin.yaml — plan MPS on nodes without MIG to keep MPS",
            node.name,
            mps.len()
        ));
        time_sliced.append(&mut mps);
    }
    // The plugin refuses fewer than 2 replicas: a GPU "shared" by one is a whole GPU to it.
    time_sliced.retain(|&r| r >= 2);
    mps.retain(|&r| r >= 2);
    if time_sliced.is_empty() && mps.is_empty() {
        return None;
    }
    let (kind, chosen) = if time_sliced.len() >= mps.len() { ("timeSlicing", &time_sliced) } else { ("mps", &mps) };
    if !time_sliced.is_empty() && !mps.is_empty() {
        warnings.push(format!(
            "node {}: both time-sliced and MPS GPUs; the device plugin shares a node one way, written as {kind}",
            node.name
        ));
    }
    if whole > 0 {
        warnings.push(format!(
            "node {}: {whole} whole GPU(s) beside shared ones; the device plugin would share those too (use `renameByDefault` or separate nodes)",
            node.name
        ));
    }
    let replicas = chosen.iter().copied().min()?;
    if chosen.iter().any(|&r| r != replicas) {
        warnings.push(format!(
            "node {}: its shared GPUs have different replica counts ({}); the device plugin replicates every GPU of a node alike, written as {replicas}",
            node.name,
            chosen.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    Some(Sharing { kind, replicas })
}

/// The k8s-device-plugin's configuration as a ConfigMap: a `default` entry (whole GPUs, no
/// MIG) for every node that needs nothing else, and one entry per node with MIG GPUs
/// (`migStrategy: mixed`: a resource per MIG profile beside `nvidia.com/gpu`) or shared
/// GPUs (time-slicing or MPS replicas); with the warnings where the plugin cannot say what
/// gantry planned. Each node's label is in [`node_labels`].
pub fn device_plugin_yaml(fleet: &Fleet) -> (String, Vec<String>) {
    let mut out = String::from(
        "# k8s-device-plugin configuration written by gantry plan. Every node is labelled\n# nvidia.com/device-plugin.config=<entry> (node-labels.sh); `default` also serves unlabelled nodes.\n#   kubectl create namespace nvidia-device-plugin; kubectl apply -f device-plugin.yaml\n#   helm upgrade -i nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin --set config.name=gantry-device-plugin-configs\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gantry-device-plugin-configs\n  namespace: nvidia-device-plugin\ndata:\n",
    );
    let _ = write!(out, "  {DEVICE_PLUGIN_DEFAULT}: |-\n    version: v1\n    flags:\n      migStrategy: none\n");
    let mut warnings = Vec::new();
    for node in &fleet.nodes {
        let sharing = node_sharing(node, &mut warnings);
        let mig = has_mig(node);
        if sharing.is_none() && !mig {
            continue;
        }
        let strategy = if mig { "mixed" } else { "none" };
        let _ = write!(
            out,
            "  {}: |-\n    version: v1\n    flags:\n      migStrategy: {strategy}\n",
            config_name(&node.name)
        );
        let Some(Sharing { kind, replicas }) = sharing else { continue };
        if kind == "mps" {
            let _ = writeln!(out, "      mpsRoot: {MPS_ROOT}");
        }
        let _ = write!(
            out,
            "    sharing:\n      {kind}:\n        resources:\n        - name: nvidia.com/gpu\n          replicas: {replicas}\n"
        );
    }
    (out, warnings)
}

/// The device-plugin entry a node is labelled with: its own exactly when
/// [`device_plugin_yaml`] writes one (MIG GPUs, or sharing the plugin can say).
fn device_plugin_entry(node: &Node) -> String {
    let shares = node_sharing(node, &mut Vec::new()).is_some();
    if shares || has_mig(node) { config_name(&node.name) } else { DEVICE_PLUGIN_DEFAULT.into() }
}

/// `kubectl label` commands selecting each node's configs: its mig-parted layout
/// (`all-disabled` without MIG) and its device-plugin entry (`default` when it needs none).
pub fn node_labels(fleet: &Fleet) -> String {
    let mut out = String::new();
    for node in &fleet.nodes {
        let mig = if has_mig(node) { config_name(&node.name) } else { "all-disabled".into() };
        let plugin = device_plugin_entry(node);
        let _ = writeln!(
            out,
            "kubectl label node {} nvidia.com/mig.config={mig} nvidia.com/device-plugin.config={plugin} --overwrite",
            node.name
        );
    }
    out
}

/// The files `gantry plan --out DIR` writes for each tool, by name.
pub fn plan_files(fleet: &Fleet, device_plugin: &str) -> Vec<(&'static str, String)> {
    let (slurm_nodes, gres) = crate::slurm_conf(fleet);
    vec![
        ("fleet.toml", crate::fleet_to_toml(fleet)),
        ("slurm-nodes.conf", slurm_nodes),
        ("gres.conf", gres),
        ("mig-parted.yaml", mig_parted_yaml(fleet)),
        ("mig-parted-configmap.yaml", mig_parted_configmap_yaml(fleet)),
        ("device-plugin.yaml", device_plugin.to_string()),
        ("node-labels.sh", format!("#!/bin/sh\n# written by gantry plan\n{}", node_labels(fleet))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fleet(text: &str) -> Fleet {
        crate::parse_fleet(text, gantry_catalog::Catalog::embedded()).expect("parses")
    }

    fn demo() -> Fleet {
        fleet(include_str!("../../../examples/demo-fleet.toml"))
    }

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// mig-parted's own parse rules (NVIDIA/mig-parted `api/spec/v1/spec.go`,
    /// `pkg/types/mig_config.go`), with its messages.
    fn mig_parted_accepts(doc: &Value) -> Result<(), String> {
        if doc["version"] != "v1" {
            return Err("unknown version".into());
        }
        if let Some(key) =
            doc.as_object().into_iter().flatten().map(|(k, _)| k).find(|k| *k != "version" && *k != "mig-configs")
        {
            return Err(format!("unexpected field: {key}"));
        }
        let configs = doc["mig-configs"].as_object().filter(|c| !c.is_empty());
        let configs = configs.ok_or("at least one entry in 'mig-configs' is required")?;
        for (name, entries) in configs {
            let entries = entries.as_array().filter(|e| !e.is_empty());
            let entries = entries.ok_or(format!("at least one entry in '{name}' is required"))?;
            for entry in entries {
                let fields = entry.as_object().ok_or("an entry is not a map")?;
                if let Some(key) = fields
                    .keys()
                    .find(|k| !["device-filter", "devices", "mig-enabled", "mig-devices"].contains(&k.as_str()))
                {
                    return Err(format!("unexpected field: {key}"));
                }
                match &entry["devices"] {
                    Value::String(all) if all == "all" => {}
                    Value::Array(list) if list.iter().all(Value::is_u64) => {}
                    Value::Null => return Err("missing required field: devices".into()),
                    other => return Err(format!("invalid input for 'devices': {other}")),
                }
                let enabled = entry["mig-enabled"].as_bool().ok_or("missing required field: mig-enabled")?;
                let devices = entry["mig-devices"].as_object();
                if enabled && devices.is_none() {
                    return Err("missing required field 'mig-devices' when 'mig-enabled' is true".into());
                }
                if !enabled && devices.is_some_and(|d| !d.is_empty()) {
                    return Err("MIG devices included when 'mig-enabled' is false".into());
                }
                let counts: Vec<u64> = devices.into_iter().flatten().filter_map(|(_, n)| n.as_u64()).collect();
                if !counts.is_empty() && counts.iter().all(|&n| n == 0) {
                    return Err("all counts for all MigProfiles are 0".into());
                }
            }
        }
        Ok(())
    }

    /// The device plugin's own rules for one config (NVIDIA/k8s-device-plugin
    /// `api/config/v1` parsing, `validateFlags`, `internal/plugin/mps.go`), with its messages;
    /// `mig`: the node has MIG GPUs.
    fn device_plugin_accepts(config: &Value, mig: bool) -> Result<(), String> {
        if !matches!(config["version"].as_str(), None | Some("v1")) {
            return Err(format!("unknown version: {}", config["version"]));
        }
        let strategy = config["flags"]["migStrategy"].as_str().unwrap_or("none");
        if !["none", "single", "mixed"].contains(&strategy) {
            return Err(format!("unknown MIG strategy: {strategy}"));
        }
        for kind in ["timeSlicing", "mps"] {
            let Some(sharing) = config["sharing"].get(kind) else { continue };
            let resources =
                sharing["resources"].as_array().filter(|r| !r.is_empty()).ok_or("no resources specified")?;
            for resource in resources {
                resource["name"].as_str().ok_or("no resource name specified")?;
                let replicas = resource["replicas"].as_u64().ok_or("no replicas specified")?;
                if replicas < 2 {
                    return Err("number of replicas must be >= 2".into());
                }
            }
            if kind == "mps" && strategy == "mixed" {
                return Err("using --mig-strategy=mixed is not supported with MPS".into());
            }
            if kind == "mps" && mig {
                return Err("sharing using MPS is not supported for MIG devices".into());
            }
        }
        Ok(())
    }

    /// The checks above accept what NVIDIA documents and refuse what its tools refuse, so
    /// they can be trusted on gantry's output.
    #[test]
    fn the_rule_checks_accept_nvidias_examples_and_refuse_what_its_tools_refuse() {
        for text in [
            include_str!("../tests/nvidia/mig-parted-example-config.yaml"),
            include_str!("../tests/nvidia/mig-parted-dgx-station-80gb-config.yaml"),
            include_str!("../tests/nvidia/mig-parted-config-default.yaml"),
        ] {
            mig_parted_accepts(&yaml(text)).expect("NVIDIA's mig-parted file");
        }
        let operator = yaml(include_str!("../tests/nvidia/gpu-operator-default-mig-parted-config.yaml"));
        mig_parted_accepts(&yaml(operator["data"]["config.yaml"].as_str().expect("config.yaml"))).expect("operator's");
        for text in [
            include_str!("../tests/nvidia/device-plugin/config-file-example.yaml"),
            include_str!("../tests/nvidia/device-plugin/mps-replicas10.yaml"),
            include_str!("../tests/nvidia/device-plugin/timeslicing-replicas10.yaml"),
            include_str!("../tests/nvidia/device-plugin/dp-example-config0.yaml"),
            include_str!("../tests/nvidia/device-plugin/dp-example-config1.yaml"),
        ] {
            device_plugin_accepts(&yaml(text), false).unwrap_or_else(|e| panic!("{e}: {text}"));
        }
        let mps_mixed = yaml(
            "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
        );
        assert!(
            device_plugin_accepts(&mps_mixed, true)
                .expect_err("MPS with mixed")
                .contains("mixed is not supported with MPS")
        );
        let one = yaml(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n",
        );
        assert!(device_plugin_accepts(&one, false).is_err());
        let empty = yaml("version: v1\nmig-configs:\n  gantry-n: []\n");
        assert!(mig_parted_accepts(&empty).expect_err("empty config").contains("'gantry-n'"));
    }

    /// The demo fleet's exports pass the tools' rules: mig-parted's file and its ConfigMap say
    /// the same, the device plugin's ConfigMap has a `default` and an entry for every label,
    /// and the node that mixes MIG with MPS gets no MPS (the plugin would refuse to start).
    #[test]
    fn the_demo_fleets_exports_pass_nvidias_rules() {
        let fleet = demo();
        let raw = mig_parted_yaml(&fleet);
        let doc = yaml(&raw);
        mig_parted_accepts(&doc).expect("mig-parted accepts");
        assert!(doc["mig-configs"].get("gantry-h100-0").is_none(), "a node without MIG has no layout of its own");
        let a100 = &doc["mig-configs"]["gantry-a100-mixed"];
        assert_eq!(a100[0]["devices"], serde_json::json!([0, 1, 2, 3, 6, 7]));
        assert_eq!(a100[1]["mig-devices"], serde_json::json!({"1g.10gb": 7}), "{raw}");
        assert_eq!(a100[2]["mig-devices"], serde_json::json!({"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}), "{raw}");
        assert!(raw.contains("    # planned starts: 3g.40gb@0 2g.20gb@4 1g.10gb@6\n"), "{raw}");
        let map = yaml(&mig_parted_configmap_yaml(&fleet));
        assert_eq!(
            (map["kind"].as_str(), map["metadata"]["name"].as_str()),
            (Some("ConfigMap"), Some("gantry-mig-parted-config"))
        );
        assert_eq!(
            yaml(map["data"]["config.yaml"].as_str().expect("config.yaml")),
            doc,
            "the ConfigMap holds the same file"
        );

        let (plugin, warnings) = device_plugin_yaml(&fleet);
        let data = yaml(&plugin)["data"].as_object().expect("data").clone();
        assert!(data.contains_key(DEVICE_PLUGIN_DEFAULT), "{plugin}");
        let labels = node_labels(&fleet);
        for node in &fleet.nodes {
            let line = labels.lines().find(|l| l.contains(&format!("node {} ", node.name))).expect("a label line");
            let entry =
                line.split("nvidia.com/device-plugin.config=").nth(1).and_then(|r| r.split(' ').next()).expect("entry");
            let config = yaml(data.get(entry).and_then(Value::as_str).unwrap_or_else(|| panic!("{entry} in {plugin}")));
            device_plugin_accepts(&config, has_mig(node)).unwrap_or_else(|e| panic!("{}: {e}\n{config}", node.name));
        }
        let a100 = yaml(data["gantry-a100-mixed"].as_str().expect("entry"));
        assert_eq!(a100["flags"]["migStrategy"], "mixed");
        assert!(a100["sharing"].get("mps").is_none() && a100["sharing"]["timeSlicing"].is_object(), "{a100}");
        assert!(warnings.iter().any(|w| w.contains("a100-mixed") && w.contains("refuses MPS")), "{warnings:?}");
        let l4 = yaml(data["gantry-l4"].as_str().expect("entry"));
        assert_eq!(
            (l4["flags"]["mpsRoot"].as_str(), l4["sharing"]["mps"]["resources"][0]["replicas"].as_u64()),
            (Some(MPS_ROOT), Some(48))
        );
        assert!(labels.contains("kubectl label node h100-0 nvidia.com/mig.config=all-disabled nvidia.com/device-plugin.config=default --overwrite"), "{labels}");
    }

    /// Sharing by one client or replica is no sharing to the plugin: a node with one
    /// time-sliced GPU (4 replicas) and two single-client MPS GPUs is written as time-slicing,
    /// and its label names that entry.
    #[test]
    fn single_replica_sharing_does_not_decide_a_nodes_entry() {
        let fleet = fleet(
            "[[node]]\nname = \"e\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 3\n\
             [[node.gpu]]\nindex = 0\nmode = \"time-slice\"\nreplicas = 4\n\
             [[node.gpu]]\nindex = 1\nmode = \"mps\"\nmax_clients = 1\n\
             [[node.gpu]]\nindex = 2\nmode = \"mps\"\nmax_clients = 1\n",
        );
        let (plugin, _) = device_plugin_yaml(&fleet);
        let data = yaml(&plugin)["data"].as_object().expect("data").clone();
        let entry = yaml(data.get("gantry-e").and_then(Value::as_str).expect("an entry for e"));
        assert_eq!(entry["sharing"]["timeSlicing"]["resources"][0]["replicas"], 4, "{entry}");
        assert!(node_labels(&fleet).contains("nvidia.com/device-plugin.config=gantry-e"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Any mix of modes on any number of nodes exports files NVIDIA's rules accept, and
        /// every node's labels name configs that exist.
        #[test]
        fn random_fleets_export_what_nvidias_tools_accept(
            nodes in proptest::collection::vec(proptest::collection::vec(0u8..6, 1..5), 1..5),
        ) {
            let mut text = String::new();
            for (n, gpus) in nodes.iter().enumerate() {
                text += &format!("[[node]]\nname = \"n{n}\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = {}\n", gpus.len());
                for (i, mode) in gpus.iter().enumerate() {
                    let spec = match mode {
                        0 => "mode = \"whole\"".to_string(),
                        1 => "mig = { \"1g.10gb\" = 2, \"2g.20gb\" = 1, \"3g.40gb\" = 1 }".into(),
                        2 => "mig = { \"1g.10gb\" = 7 }".into(),
                        3 => format!("mode = \"mps\"\nmax_clients = {}", 1 + (n + i) % 8),
                        4 => format!("mode = \"time-slice\"\nreplicas = {}", 2 + (n * 3 + i) % 7),
                        _ => "mig = []".into(),
                    };
                    text += &format!("[[node.gpu]]\nindex = {i}\n{spec}\n");
                }
            }
            let fleet = crate::parse_fleet(&text, gantry_catalog::Catalog::embedded()).expect("a valid fleet");
            proptest::prop_assert!(mig_parted_accepts(&yaml(&mig_parted_yaml(&fleet))).is_ok());
            let configs = yaml(&mig_parted_yaml(&fleet))["mig-configs"].clone();
            let (plugin, _) = device_plugin_yaml(&fleet);
            let data = yaml(&plugin)["data"].as_object().expect("data").clone();
            let labels = node_labels(&fleet);
            for node in &fleet.nodes {
                let line = labels.lines().find(|l| l.contains(&format!("node {} ", node.name))).expect("a label line");
                let value = |key: &str| line.split(&format!("{key}=")).nth(1).and_then(|r| r.split(' ').next()).expect("label").to_string();
                let entry = data.get(&value("nvidia.com/device-plugin.config")).and_then(Value::as_str);
                let entry = entry.unwrap_or_else(|| panic!("{} names no device-plugin entry:\n{plugin}", node.name));
                proptest::prop_assert!(device_plugin_accepts(&yaml(entry), has_mig(node)).is_ok(), "{}: {entry}", node.name);
                proptest::prop_assert!(configs.get(value("nvidia.com/mig.config")).is_some(), "{}'s mig config", node.name);
            }
        }
    }

    /// A node of only MIG GPUs gets `mixed`; a GPU-less node still gets labels but no
    /// mig-parted config (mig-parted refuses an empty one).
    #[test]
    fn mig_only_and_gpu_less_nodes() {
        let fleet = fleet(
            "[[node]]\nname = \"m\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\nmig = { \"1g.10gb\" = 7 }\n\
             [[node]]\nname = \"cpu\"\ncpu = 8\nmemory = \"64GiB\"\n",
        );
        let doc = yaml(&mig_parted_yaml(&fleet));
        mig_parted_accepts(&doc).expect("accepts");
        assert!(doc["mig-configs"].get("gantry-cpu").is_none());
        let (plugin, _) = device_plugin_yaml(&fleet);
        assert!(plugin.contains("  gantry-m: |-\n    version: v1\n    flags:\n      migStrategy: mixed\n"), "{plugin}");
        let labels = node_labels(&fleet);
        assert!(
            labels.contains("node m nvidia.com/mig.config=gantry-m nvidia.com/device-plugin.config=gantry-m"),
            "{labels}"
        );
        assert!(
            labels.contains("node cpu nvidia.com/mig.config=all-disabled nvidia.com/device-plugin.config=default"),
            "{labels}"
        );
    }
}
