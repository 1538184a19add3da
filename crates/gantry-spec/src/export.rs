//! A planned fleet in Slurm terms: `slurm.conf` node lines and `gres.conf`, so teams on Slurm
//! can use gantry as a planner (the Kubernetes side is `export_k8s.rs`).

use gantry_types::{Fleet, GpuMode, Node};
use std::collections::BTreeMap;
use std::fmt::Write;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Fleet {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo-fleet.toml"))
            .expect("demo fleet");
        crate::parse_fleet(&text, gantry_catalog::Catalog::embedded()).expect("parses")
    }

    #[test]
    fn the_demo_fleet_exports_slurm_nodes_and_gres() {
        let fleet = demo();
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
    }
}
