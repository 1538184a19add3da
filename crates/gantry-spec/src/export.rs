//! A planned fleet in Kubernetes terms, so teams on Kubernetes can use gantry as a planner:
//! NVIDIA mig-parted configuration (one config per node), the k8s-device-plugin's sharing
//! configuration (time-slicing or MPS replicas, as a ConfigMap with one entry per node) and
//! the node labels that select both.

use gantry_types::{Fleet, GpuMode, Node};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The config name gantry gives a node.
pub fn config_name(node: &str) -> String {
    format!("gantry-{node}")
}

fn has_mig(node: &Node) -> bool {
    node.gpus.iter().any(|g| matches!(g.mode, GpuMode::Mig { .. }))
}

/// mig-parted's `config.yaml`: per node, which GPUs have MIG on and how many instances of each
/// profile. mig-parted lets the driver choose placements; gantry's starts are in the planned
/// fleet file, and creating the largest instances first reproduces them.
pub fn mig_parted_yaml(fleet: &Fleet) -> String {
    let mut out = String::from(
        "# NVIDIA mig-parted configuration written by gantry plan.\n# Apply on each node: nvidia-mig-parted apply -f mig-parted.yaml -c gantry-<node>\nversion: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n",
    );
    for node in &fleet.nodes {
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
        // GPUs with the same layout share an entry.
        let mut layouts: BTreeMap<Vec<(String, u32)>, Vec<usize>> = BTreeMap::new();
        for (i, g) in node.gpus.iter().enumerate() {
            if let GpuMode::Mig { instances } = &g.mode {
                let mut counts: BTreeMap<String, u32> = BTreeMap::new();
                for inst in instances {
                    *counts.entry(inst.profile.clone()).or_default() += 1;
                }
                layouts.entry(counts.into_iter().collect()).or_default().push(i);
            }
        }
        for (counts, devices) in layouts {
            let devices: Vec<String> = devices.iter().map(usize::to_string).collect();
            let _ =
                writeln!(out, "    - devices: [{}]\n      mig-enabled: true\n      mig-devices:", devices.join(", "));
            for (profile, n) in counts {
                let _ = writeln!(out, "        \"{profile}\": {n}");
            }
        }
    }
    out
}

/// The k8s-device-plugin's configuration as a ConfigMap (one entry per node that shares GPUs
/// or has MIG GPUs: those get `migStrategy: mixed`, one resource per MIG profile beside
/// `nvidia.com/gpu`, which is what a node mixing MIG and other modes needs), and warnings where
/// the plugin cannot say what gantry planned: it shares every full GPU of a node alike, so a
/// node mixing whole and shared GPUs, or MPS and time-slicing, is written with its most common
/// sharing.
pub fn device_plugin_yaml(fleet: &Fleet) -> (String, Vec<String>) {
    let mut out = String::from(
        "# k8s-device-plugin sharing configuration written by gantry plan; select a node's entry\n# with the label nvidia.com/device-plugin.config=gantry-<node>.\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gantry-device-plugin-configs\n  namespace: nvidia-device-plugin\ndata:\n",
    );
    let mut warnings = Vec::new();
    for node in &fleet.nodes {
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
        let mig = has_mig(node);
        if time_sliced.is_empty() && mps.is_empty() {
            if mig {
                let _ = write!(
                    out,
                    "  {}: |-\n    version: v1\n    flags:\n      migStrategy: mixed\n",
                    config_name(&node.name)
                );
            }
            continue;
        }
        let (kind, replicas) = if time_sliced.len() >= mps.len() {
            ("timeSlicing", time_sliced.iter().copied().min().unwrap_or(2))
        } else {
            ("mps", mps.iter().copied().min().unwrap_or(2).max(2))
        };
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
        let strategy = if mig { "mixed" } else { "none" };
        let _ = write!(
            out,
            "  {}: |-\n    version: v1\n    flags:\n      migStrategy: {strategy}\n    sharing:\n      {kind}:\n        resources:\n        - name: nvidia.com/gpu\n          replicas: {replicas}\n",
            config_name(&node.name)
        );
    }
    (out, warnings)
}

/// The Slurm side of a planned fleet: `slurm.conf` lines (`GresTypes`, `AccountingStorageTRES`,
/// one `NodeName` per node with its CPUs, memory and `Gres=`) and `gres.conf`. MIG instances
/// are typed as slurmd's `AutoDetect=nvml` names them (`gpu:1g.10gb:7`; `7g.79gb` for an
/// A100-80GB's 7g.80gb: `GpuModel::slurm_mig_type`; a `+me` instance counts with its twin),
/// and a node with MIG GPUs is autodetected (MIG devices cannot be listed by hand portably);
/// whole GPUs are typed by model (`gpu:a100-sxm4-80gb:4`); time-sliced GPUs become `shard`s
/// (replicas per GPU) and MPS GPUs `mps` (100 per GPU, Slurm's convention).
pub fn slurm_conf(fleet: &Fleet) -> (String, String) {
    let mut nodes = String::new();
    let mut gres = String::from(
        "# gres.conf written by gantry plan (one file for every node; Slurm reads the lines of its own node).\n",
    );
    let mut tres: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut types: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let catalog = gantry_catalog::Catalog::embedded();
    for node in &fleet.nodes {
        let node_gres = NodeGres::of(node, catalog);
        let parts = node_gres.parts(&mut tres, &mut types);
        let gres_field = if parts.is_empty() { String::new() } else { format!(" Gres={}", parts.join(",")) };
        let features: Vec<&str> = node.labels.keys().filter_map(|k| k.strip_prefix("slurm.feature/")).collect();
        let features = if features.is_empty() { String::new() } else { format!(" Features={}", features.join(",")) };
        let _ = writeln!(
            nodes,
            "NodeName={} CPUs={} RealMemory={}{gres_field}{features}",
            node.name,
            (node.cpu.0 / 1000).max(1),
            node.memory.0 >> 20
        );
        if node.gpus.is_empty() {
            continue;
        }
        node_gres.write_gres_conf(&node.name, &mut gres);
    }
    let mut conf = String::from("# slurm.conf lines written by gantry plan: merge them into your slurm.conf.\n");
    if !types.is_empty() {
        let _ = writeln!(conf, "GresTypes={}", types.into_iter().collect::<Vec<_>>().join(","));
    }
    if !tres.is_empty() {
        // Advice only: a slurmctld without slurmdbd refuses to start with this line.
        let _ = writeln!(
            conf,
            "# With slurmdbd, to account GPUs by type, add:\n# AccountingStorageTRES=gres/gpu,{}",
            tres.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    conf.push_str(&nodes);
    (conf, gres)
}

/// One node's GPUs as Slurm generic resources.
struct NodeGres {
    /// The node's GPU model, lowercased (the type of its whole GPUs).
    model: String,
    /// MIG instances by Slurm type.
    counts: BTreeMap<String, u32>,
    shards: u32,
    mps: u32,
    /// Indices of the GPUs not in MIG mode (whole, time-sliced or MPS).
    whole: Vec<u32>,
    /// Each time-sliced GPU's index and replicas, each MPS GPU's index: their `File=` lines.
    shard_gpus: Vec<(u32, u32)>,
    mps_gpus: Vec<u32>,
}

impl NodeGres {
    fn of(node: &Node, catalog: &gantry_catalog::Catalog) -> NodeGres {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        let (mut shards, mut mps) = (0u32, 0u32);
        let mut whole: Vec<u32> = Vec::new();
        // The cluster's own type name when it came from its slurm.conf, else the model's.
        let model = match node.labels.get("slurm.gres-type") {
            Some(ty) => ty.clone(),
            None => node.gpus.first().map(|g| g.model.to_ascii_lowercase()).unwrap_or_default(),
        };
        let (mut shard_gpus, mut mps_gpus) = (Vec::new(), Vec::new());
        let model_entry = node.gpus.first().and_then(|g| catalog.lookup(&g.model)).map(|id| catalog.model(id));
        let slurm_type = |profile: &str| {
            model_entry
                .and_then(|m| Some(m.slurm_mig_type(m.mig.as_ref()?.profile(profile)?)))
                .unwrap_or_else(|| profile.trim_end_matches("+me").to_string())
        };
        for g in &node.gpus {
            match &g.mode {
                GpuMode::Whole => whole.push(g.index),
                GpuMode::Mig { instances } => {
                    for i in instances {
                        *counts.entry(slurm_type(&i.profile)).or_default() += 1;
                    }
                }
                GpuMode::TimeSlice { replicas, .. } => {
                    whole.push(g.index);
                    shards += replicas;
                    shard_gpus.push((g.index, *replicas));
                }
                GpuMode::Mps { .. } => {
                    whole.push(g.index);
                    mps += 100;
                    mps_gpus.push(g.index);
                }
            }
        }
        NodeGres { model, counts, shards, mps, whole, shard_gpus, mps_gpus }
    }

    /// The node's `Gres=` parts, recording the TRES and GRES types they use.
    fn parts(
        &self,
        tres: &mut std::collections::BTreeSet<String>,
        types: &mut std::collections::BTreeSet<&str>,
    ) -> Vec<String> {
        let model = &self.model;
        let mut parts: Vec<String> = Vec::new();
        if !self.whole.is_empty() {
            parts.push(format!("gpu:{model}:{}", self.whole.len()));
            tres.insert(format!("gres/gpu:{model}"));
        }
        for (ty, n) in &self.counts {
            parts.push(format!("gpu:{ty}:{n}"));
            tres.insert(format!("gres/gpu:{ty}"));
        }
        if self.shards > 0 {
            parts.push(format!("shard:{}", self.shards));
            types.insert("shard");
        }
        if self.mps > 0 {
            parts.push(format!("mps:{}", self.mps));
            types.insert("mps");
        }
        if !parts.is_empty() {
            types.insert("gpu");
        }
        parts
    }

    /// The node's `gres.conf` lines (autodetected when it has MIG instances).
    fn write_gres_conf(&self, name: &str, gres: &mut String) {
        let model = &self.model;
        if !self.counts.is_empty() {
            let _ = writeln!(gres, "NodeName={name} AutoDetect=nvml");
        } else {
            let files = self.whole.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let _ = writeln!(gres, "NodeName={name} Name=gpu Type={model} File=/dev/nvidia[{files}]");
        }
        // Shares on exactly the planned GPUs: without File=, Slurm spreads them over every GPU.
        for (index, replicas) in &self.shard_gpus {
            let _ = writeln!(gres, "NodeName={name} Name=shard Count={replicas} File=/dev/nvidia{index}");
        }
        for index in &self.mps_gpus {
            let _ = writeln!(gres, "NodeName={name} Name=mps Count=100 File=/dev/nvidia{index}");
        }
    }
}

/// `kubectl label` commands selecting each node's configs.
pub fn node_labels(fleet: &Fleet) -> String {
    let mut out = String::new();
    for node in &fleet.nodes {
        let mig = if has_mig(node) { config_name(&node.name) } else { "all-disabled".into() };
        let shares = node.gpus.iter().any(|g| matches!(g.mode, GpuMode::Mps { .. } | GpuMode::TimeSlice { .. }));
        let plugin = if shares || has_mig(node) {
            format!(" nvidia.com/device-plugin.config={}", config_name(&node.name))
        } else {
            String::new()
        };
        let _ = writeln!(out, "kubectl label node {} nvidia.com/mig.config={mig}{plugin} --overwrite", node.name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Fleet {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo-fleet.toml"))
            .expect("demo fleet");
        crate::parse_fleet(&text, gantry_catalog::Catalog::embedded()).expect("parses")
    }

    #[test]
    fn the_demo_fleet_exports_mig_sharing_and_labels() {
        let fleet = demo();
        let mig = mig_parted_yaml(&fleet);
        assert!(
            mig.contains("  gantry-a100-mixed:\n    - devices: [0, 1, 2, 3, 6, 7]\n      mig-enabled: false"),
            "{mig}"
        );
        assert!(
            mig.contains("    - devices: [4]\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7"),
            "{mig}"
        );
        assert!(mig.contains("\"3g.40gb\": 1"), "{mig}");
        let (plugin, warnings) = device_plugin_yaml(&fleet);
        // A node mixing MIG with other modes needs the mixed strategy (a resource per profile
        // beside nvidia.com/gpu); one without MIG keeps none.
        assert!(
            plugin.contains("gantry-a100-mixed: |-\n    version: v1\n    flags:\n      migStrategy: mixed\n"),
            "{plugin}"
        );
        assert!(
            plugin.contains(
                "gantry-l4: |-\n    version: v1\n    flags:\n      migStrategy: none\n    sharing:\n      mps:"
            ),
            "{plugin}"
        );
        let mig_only = "[[node]]\nname = \"m\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\nmig = { \"1g.10gb\" = 7 }\n";
        let mig_only = crate::parse_fleet(mig_only, gantry_catalog::Catalog::embedded()).expect("parses");
        let (plugin, _) = device_plugin_yaml(&mig_only);
        assert!(plugin.contains("gantry-m: |-\n    version: v1\n    flags:\n      migStrategy: mixed\n"), "{plugin}");
        assert!(
            node_labels(&mig_only).contains("nvidia.com/device-plugin.config=gantry-m"),
            "{}",
            node_labels(&mig_only)
        );
        assert!(
            warnings.iter().any(|w| w.contains("a100-mixed") && w.contains("both time-sliced and MPS")),
            "{warnings:?}"
        );
        // Every YAML export reads back with a YAML parser, the ConfigMap's embedded configs too.
        let parsed: serde_json::Value = serde_saphyr::from_str(&mig).expect("mig-parted YAML parses");
        assert!(parsed["mig-configs"]["gantry-a100-mixed"].is_array(), "{parsed}");
        let config_map: serde_json::Value = serde_saphyr::from_str(&plugin).expect("ConfigMap YAML parses");
        for (node, config) in config_map["data"].as_object().expect("data") {
            let inner: serde_json::Value =
                serde_saphyr::from_str(config.as_str().expect("text")).unwrap_or_else(|e| panic!("{node}: {e}"));
            assert_eq!(inner["version"], "v1", "{node}: {inner}");
        }
        let (conf, gres) = slurm_conf(&fleet);
        assert!(conf.contains("GresTypes=gpu,mps,shard"), "{conf}");
        assert!(conf.contains("NodeName=a100-mixed CPUs="), "{conf}");
        assert!(
            conf.contains("gpu:a100-sxm4-80gb:6,gpu:1g.10gb:8,gpu:2g.20gb:1,gpu:3g.40gb:1,shard:8,mps:100"),
            "{conf}"
        );
        assert!(gres.contains("NodeName=a100-mixed AutoDetect=nvml"), "{gres}");
        assert!(
            gres.contains("NodeName=h100-0 Name=gpu Type=h100-sxm5-80gb File=/dev/nvidia[0,1,2,3,4,5,6,7]"),
            "{gres}"
        );
        // A 7g.80gb is written as AutoDetect names it, and Slurm in reads it back as the profile.
        let seven = crate::parse_fleet(
            "[[node]]\nname = \"m\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 1\n\
             [[node.gpu]]\nindex = 0\nmig = { \"7g.80gb\" = 1 }\n",
            gantry_catalog::Catalog::embedded(),
        )
        .expect("parses");
        let (conf, gres) = slurm_conf(&seven);
        assert!(conf.contains("Gres=gpu:7g.79gb:1") && conf.contains("gres/gpu:7g.79gb"), "{conf}");
        let twins = crate::parse_fleet(
            "[[node]]\nname = \"t\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 1\n\
             [[node.gpu]]\nindex = 0\nmig = { \"1g.10gb+me\" = 1, \"1g.10gb\" = 2 }\n",
            gantry_catalog::Catalog::embedded(),
        )
        .expect("parses");
        assert!(
            slurm_conf(&twins).0.contains("Gres=gpu:1g.10gb:3\n"),
            "one entry per Slurm type: {}",
            slurm_conf(&twins).0
        );
        // The node's model comes from a Features= entry, as on a MIG-only Slurm node.
        let back = conf.replace("NodeName=m ", "NodeName=m Features=A100-SXM4-80GB ");
        let map = BTreeMap::new();
        let source = crate::SlurmSource {
            name: "slurm.conf".into(),
            catalog: gantry_catalog::Catalog::embedded(),
            map: &map,
            lenient: false,
        };
        let imported = crate::import_slurm_conf(&back, Some(("gres.conf", &gres)), &source).expect("imports");
        assert!(imported.fleet.contains("mig = { \"7g.80gb\" = 1 }"), "{}", imported.fleet);
        let labels = node_labels(&fleet);
        assert!(labels.contains("kubectl label node a100-mixed nvidia.com/mig.config=gantry-a100-mixed nvidia.com/device-plugin.config=gantry-a100-mixed --overwrite"), "{labels}");
        assert!(
            labels.contains("kubectl label node h100-0 nvidia.com/mig.config=all-disabled --overwrite"),
            "{labels}"
        );
    }
}
