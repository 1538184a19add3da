//! The resolved fleet: every node and every GPU spelled out, models already resolved to catalog
//! ids and MIG layouts already validated (by `gantry-spec`). The engine builds its state from this.

use crate::quantity::{Bytes, MilliCpu};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fleet {
    pub nodes: Vec<Node>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub cpu: MilliCpu,
    pub memory: Bytes,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Rack (or other failure/network domain) this node sits in; gangs can be kept within one.
    pub rack: Option<String>,
    /// Larger network block (several racks), informational for now.
    pub block: Option<String>,
    pub gpus: Vec<Gpu>,
}

/// A taint repels tasks that do not tolerate it (`key=value:effect`, as in Kubernetes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Index on its node (what `nvidia-smi` prints and `CUDA_VISIBLE_DEVICES` may use).
    pub index: u32,
    /// Catalog model id, e.g. `H100-SXM5-80GB`.
    pub model: String,
    pub uuid: String,
    pub numa: u32,
    pub pcie_switch: u32,
    /// GPUs of one node with the same domain id are NVLink peers (NVSwitch: all of them; bridged
    /// PCIe cards: pairs). `None` = no NVLink.
    pub nvlink_domain: Option<u32>,
    pub mode: GpuMode,
}

/// How one GPU is shared. See DESIGN §4 and docs/formats.md.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum GpuMode {
    /// Handed out whole.
    Whole,
    /// Partitioned into MIG GPU instances; each instance is handed out whole.
    Mig { instances: Vec<MigInstanceSpec> },
    /// MPS: up to `max_clients` tasks, each with a compute share (active-thread percentage) and a
    /// pinned memory limit.
    Mps { max_clients: u32 },
    /// Time-sliced into `replicas` equal time shares with a memory budget each.
    TimeSlice { replicas: u32, memory_per_replica: Bytes },
}

impl GpuMode {
    pub fn name(&self) -> &'static str {
        match self {
            GpuMode::Whole => "whole",
            GpuMode::Mig { .. } => "mig",
            GpuMode::Mps { .. } => "mps",
            GpuMode::TimeSlice { .. } => "time-slice",
        }
    }

    /// The mode in a few words: `whole`, `mig 3g.40gb@0 3g.40gb@4`, `mps (8 clients)`,
    /// `time-slice ×4`.
    pub fn text(&self) -> String {
        match self {
            GpuMode::Whole => "whole".into(),
            GpuMode::Mig { instances } => {
                let layout: Vec<String> = instances.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect();
                format!("mig {}", layout.join(" "))
            }
            GpuMode::Mps { max_clients } => format!("mps ({max_clients} clients)"),
            GpuMode::TimeSlice { replicas, .. } => format!("time-slice ×{replicas}"),
        }
    }
}

/// One MIG GPU instance of a layout: a profile at a start position on the memory-slice axis.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigInstanceSpec {
    pub profile: String,
    pub start: u8,
}
