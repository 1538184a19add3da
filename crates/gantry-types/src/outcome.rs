//! What the engine decided for a job: where each task went, or typed reasons why it could not
//! go anywhere. Reasons are data (DESIGN §3 rule 4); they are formatted only for display.

use crate::job::{Isolation, TopologyLevel};
use crate::quantity::{Bytes, MilliCpu, MilliGpu};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A placement or a refusal for one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum JobOutcome {
    Placed { tasks: Vec<TaskPlacement> },
    Unplaced { reasons: Vec<ReasonCount> },
}

/// Where one task of a job went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskPlacement {
    pub group: String,
    pub replica: u32,
    pub node: String,
    #[serde(rename = "cpu_milli")]
    pub cpu: MilliCpu,
    #[serde(rename = "memory_bytes")]
    pub memory: Bytes,
    pub gpus: Vec<GpuGrant>,
}

/// One GPU (or part of one) granted to a task. `gpu` is the GPU's index on its node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GpuGrant {
    Whole {
        gpu: u32,
    },
    Mig {
        gpu: u32,
        profile: String,
        start: u8,
    },
    Mps {
        gpu: u32,
        milli: MilliGpu,
        /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for this client: `ceil(milli / 10)`.
        active_thread_percentage: u32,
        /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for this client.
        #[serde(rename = "memory_bytes")]
        memory: Bytes,
    },
    TimeSlice {
        gpu: u32,
        replicas: u32,
        milli: MilliGpu,
        #[serde(rename = "memory_bytes")]
        memory: Bytes,
    },
}

impl GpuGrant {
    pub fn gpu(&self) -> u32 {
        match self {
            GpuGrant::Whole { gpu }
            | GpuGrant::Mig { gpu, .. }
            | GpuGrant::Mps { gpu, .. }
            | GpuGrant::TimeSlice { gpu, .. } => *gpu,
        }
    }
}

impl fmt::Display for GpuGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuGrant::Whole { gpu } => write!(f, "gpu{gpu}"),
            GpuGrant::Mig { gpu, profile, start } => write!(f, "gpu{gpu}/mig {profile}@{start}"),
            GpuGrant::Mps { gpu, milli, memory, .. } => write!(f, "gpu{gpu}/mps {milli} {memory}"),
            GpuGrant::TimeSlice { gpu, replicas, memory, .. } => {
                write!(f, "gpu{gpu}/time-slice x{replicas} {memory}")
            }
        }
    }
}

/// A reason and on how many candidates (nodes, or gang attempts) it was the one that applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReasonCount {
    pub reason: Reason,
    pub count: u32,
}

/// Why a task could not be placed somewhere. Each variant carries what was needed and the
/// closest thing that was available, so `why` can say how far off the job is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Reason {
    /// No GPU in the candidate set has an acceptable model.
    GpuModelMismatch {
        wanted: Vec<String>,
    },
    /// The device selector evaluated to false for every GPU class on the node.
    SelectorRejected {
        selector: String,
    },
    /// A node taint the task does not tolerate.
    TaintNotTolerated {
        taint: String,
    },
    /// The task takes whole nodes (Slurm's `--exclusive`) and this node holds other work.
    NodeInUse,
    InsufficientCpu {
        need: MilliCpu,
        free: MilliCpu,
    },
    InsufficientMemory {
        need: Bytes,
        free: Bytes,
    },
    /// Not enough wholly free GPUs of an acceptable model on one node.
    InsufficientWholeGpus {
        need: u32,
        free: u32,
    },
    /// The MIG profile exists nowhere on the candidate GPUs (e.g. a T4: no MIG support).
    MigNotSupported {
        profile: String,
    },
    /// MIG GPUs exist but none has a free instance of this profile in its layout.
    MigProfileUnavailable {
        profile: String,
    },
    /// No shareable GPU has this much compute left.
    InsufficientShare {
        need: MilliGpu,
        free: MilliGpu,
    },
    /// No GPU or unit has this much memory left.
    InsufficientGpuMemory {
        need: Bytes,
        free: Bytes,
    },
    /// A share request on GPUs none of which is shared (MPS or time-sliced): `modes` names
    /// what it accepts ("MPS or time-slice", "MPS", "time-slice").
    NoSharedGpu {
        modes: String,
    },
    /// A time-sliced GPU has room, but the replicas the share's compute buys
    /// (`replicas` of `per_replica` memory each) hold less memory than asked: the share must
    /// be at least `share_for_memory` (milli-GPU) on that GPU, or ask for less memory.
    ShareMemoryOverBudget {
        need: Bytes,
        share: MilliGpu,
        replicas: u32,
        per_replica: Bytes,
        share_for_memory: MilliGpu,
    },
    /// Every MPS GPU with room already serves its maximum number of clients.
    MpsClientsExhausted {
        max_clients: u32,
    },
    /// The only GPUs with room are in a mode the task's isolation class forbids.
    IsolationForbidsMode {
        isolation: Isolation,
        mode: String,
    },
    /// The GPUs exist, but not within the required topology level.
    TopologyUnsatisfiable {
        within: TopologyLevel,
        need: u32,
    },
    /// Part of the gang fit, but not all of it; nothing was kept.
    GangIncomplete {
        placed: u32,
        total: u32,
    },
    /// The bounded search stopped before visiting every node.
    SearchLimitReached {
        nodes_visited: u32,
    },
}

impl Reason {
    /// The reason's kind, as serialized (`insufficient-whole-gpus`).
    pub fn kind(&self) -> &'static str {
        use Reason::*;
        match self {
            GpuModelMismatch { .. } => "gpu-model-mismatch",
            SelectorRejected { .. } => "selector-rejected",
            TaintNotTolerated { .. } => "taint-not-tolerated",
            NodeInUse => "node-in-use",
            InsufficientCpu { .. } => "insufficient-cpu",
            InsufficientMemory { .. } => "insufficient-memory",
            InsufficientWholeGpus { .. } => "insufficient-whole-gpus",
            MigNotSupported { .. } => "mig-not-supported",
            MigProfileUnavailable { .. } => "mig-profile-unavailable",
            InsufficientShare { .. } => "insufficient-share",
            InsufficientGpuMemory { .. } => "insufficient-gpu-memory",
            NoSharedGpu { .. } => "no-shared-gpu",
            ShareMemoryOverBudget { .. } => "share-memory-over-budget",
            MpsClientsExhausted { .. } => "mps-clients-exhausted",
            IsolationForbidsMode { .. } => "isolation-forbids-mode",
            TopologyUnsatisfiable { .. } => "topology-unsatisfiable",
            GangIncomplete { .. } => "gang-incomplete",
            SearchLimitReached { .. } => "search-limit-reached",
        }
    }

    /// Reasons of the same kind and request collapse into one line in summaries; this is the
    /// part that must match (the "available" side is merged by keeping the closest value).
    fn same_kind(&self, other: &Reason) -> bool {
        use Reason::*;
        match (self, other) {
            (GpuModelMismatch { wanted: a }, GpuModelMismatch { wanted: b }) => a == b,
            (SelectorRejected { .. }, SelectorRejected { .. }) => true,
            (TaintNotTolerated { taint: a }, TaintNotTolerated { taint: b }) => a == b,
            (NodeInUse, NodeInUse) => true,
            (InsufficientCpu { need: a, .. }, InsufficientCpu { need: b, .. }) => a == b,
            (InsufficientMemory { need: a, .. }, InsufficientMemory { need: b, .. }) => a == b,
            (InsufficientWholeGpus { need: a, .. }, InsufficientWholeGpus { need: b, .. }) => a == b,
            (MigNotSupported { profile: a }, MigNotSupported { profile: b }) => a == b,
            (MigProfileUnavailable { profile: a }, MigProfileUnavailable { profile: b }) => a == b,
            (InsufficientShare { need: a, .. }, InsufficientShare { need: b, .. }) => a == b,
            (InsufficientGpuMemory { need: a, .. }, InsufficientGpuMemory { need: b, .. }) => a == b,
            (NoSharedGpu { modes: a }, NoSharedGpu { modes: b }) => a == b,
            (ShareMemoryOverBudget { need: a, share: x, .. }, ShareMemoryOverBudget { need: b, share: y, .. }) => {
                a == b && x == y
            }
            (MpsClientsExhausted { .. }, MpsClientsExhausted { .. }) => true,
            (IsolationForbidsMode { isolation: a, mode: m }, IsolationForbidsMode { isolation: b, mode: n }) => {
                a == b && m == n
            }
            (TopologyUnsatisfiable { within: a, .. }, TopologyUnsatisfiable { within: b, .. }) => a == b,
            (GangIncomplete { .. }, GangIncomplete { .. }) => true,
            (SearchLimitReached { .. }, SearchLimitReached { .. }) => true,
            _ => false,
        }
    }

    /// Keep the value closest to satisfying the request.
    fn absorb(&mut self, other: &Reason) {
        use Reason::*;
        match (self, other) {
            (InsufficientCpu { free, .. }, InsufficientCpu { free: o, .. }) => *free = (*free).max(*o),
            (InsufficientMemory { free, .. }, InsufficientMemory { free: o, .. }) => *free = (*free).max(*o),
            (InsufficientWholeGpus { free, .. }, InsufficientWholeGpus { free: o, .. }) => *free = (*free).max(*o),
            (InsufficientShare { free, .. }, InsufficientShare { free: o, .. }) => *free = (*free).max(*o),
            (InsufficientGpuMemory { free, .. }, InsufficientGpuMemory { free: o, .. }) => *free = (*free).max(*o),
            (GangIncomplete { placed, .. }, GangIncomplete { placed: o, .. }) => *placed = (*placed).max(*o),
            (
                ShareMemoryOverBudget { share_for_memory, replicas, per_replica, .. },
                ShareMemoryOverBudget { share_for_memory: o, replicas: r, per_replica: m, .. },
            ) if *o < *share_for_memory => {
                // Keep the GPU that needs the smallest share for the memory.
                (*share_for_memory, *replicas, *per_replica) = (*o, *r, *m);
            }
            (SearchLimitReached { nodes_visited }, SearchLimitReached { nodes_visited: o }) => {
                *nodes_visited = (*nodes_visited).max(*o)
            }
            _ => {}
        }
    }
}

/// Add `reason` to a summary, merging it with a reason of the same kind if one is there.
/// Summaries are short (one entry per kind), so a linear scan is the fast path.
pub fn add_reason(summary: &mut Vec<ReasonCount>, reason: Reason) {
    add_reasons(summary, reason, 1);
}

/// Like [`add_reason`], for a reason that applied to `count` candidates at once.
pub fn add_reasons(summary: &mut Vec<ReasonCount>, reason: Reason, count: u32) {
    if let Some(entry) = summary.iter_mut().find(|e| e.reason.same_kind(&reason)) {
        entry.reason.absorb(&reason);
        entry.count += count;
    } else {
        summary.push(ReasonCount { reason, count });
    }
}

/// Like [`add_reason`], for a borrowed reason: cloned only when its kind is new to the
/// summary (the engine's memo answers most nodes with a remembered reason).
pub fn add_reason_ref(summary: &mut Vec<ReasonCount>, reason: &Reason) {
    if let Some(entry) = summary.iter_mut().find(|e| e.reason.same_kind(reason)) {
        entry.reason.absorb(reason);
        entry.count += 1;
    } else {
        summary.push(ReasonCount { reason: reason.clone(), count: 1 });
    }
}

impl fmt::Display for Reason {
    /// Short, lowercase, no trailing period (STYLE: user-facing messages).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Reason::*;
        match self {
            GpuModelMismatch { wanted } => write!(f, "no GPU of model {}", wanted.join(" | ")),
            SelectorRejected { selector } => write!(f, "device selector `{selector}` matched no GPU"),
            TaintNotTolerated { taint } => write!(f, "taint {taint} not tolerated"),
            NodeInUse => write!(f, "takes whole nodes, and the node holds other work"),
            InsufficientCpu { need, free } => write!(f, "needs {need} CPU, at most {free} free"),
            InsufficientMemory { need, free } => {
                write!(f, "needs {need} memory, at most {free} free")
            }
            InsufficientWholeGpus { need, free } => {
                write!(f, "needs {need} free whole GPUs on one node, at most {free}")
            }
            MigNotSupported { profile } => {
                write!(f, "MIG profile {profile} needs a MIG-capable GPU in MIG mode; none offers it")
            }
            MigProfileUnavailable { profile } => {
                write!(f, "no free MIG instance of profile {profile}")
            }
            InsufficientShare { need, free } => {
                write!(f, "needs a {need} GPU share, at most {free} free on one GPU")
            }
            InsufficientGpuMemory { need, free } => {
                write!(f, "needs {need} GPU memory, at most {free} free on one GPU")
            }
            NoSharedGpu { modes } => {
                write!(f, "a GPU share needs a GPU in {modes} mode; none here is shared (whole or MIG only)")
            }
            ShareMemoryOverBudget { need, share, replicas, per_replica, share_for_memory } => {
                let s = if *replicas == 1 { "" } else { "s" };
                write!(
                    f,
                    "needs {need} GPU memory, but a {share} share of a time-sliced GPU is {replicas} replica{s} of {per_replica}: ask for share = {} (or less memory)",
                    share_for_memory.0
                )
            }
            MpsClientsExhausted { max_clients } => {
                write!(f, "MPS GPUs already serve their {max_clients} clients")
            }
            IsolationForbidsMode { isolation, mode } => {
                write!(f, "isolation {} forbids {mode} GPUs", isolation.name())
            }
            TopologyUnsatisfiable { within, need } => {
                write!(f, "{need} GPUs do not fit within one {} domain", within.name())
            }
            GangIncomplete { placed, total } => {
                write!(f, "only {placed} of {total} gang tasks fit; all-or-nothing, none placed")
            }
            SearchLimitReached { nodes_visited } => {
                write!(f, "search stopped after {nodes_visited} nodes (bounded work)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_of_one_kind_merge_keeping_the_closest_value() {
        let mut summary = Vec::new();
        add_reason(&mut summary, Reason::InsufficientWholeGpus { need: 4, free: 1 });
        add_reason(&mut summary, Reason::InsufficientWholeGpus { need: 4, free: 3 });
        add_reason(&mut summary, Reason::InsufficientCpu { need: MilliCpu(8000), free: MilliCpu(0) });
        assert_eq!(summary.len(), 2);
        assert_eq!(summary[0].count, 2);
        assert_eq!(summary[0].reason, Reason::InsufficientWholeGpus { need: 4, free: 3 });
    }

    #[test]
    fn kind_is_the_serialized_tag() {
        let reasons = [
            Reason::InsufficientWholeGpus { need: 8, free: 2 },
            Reason::MigProfileUnavailable { profile: "1g.10gb".into() },
            Reason::SearchLimitReached { nodes_visited: 3 },
            Reason::TopologyUnsatisfiable { within: TopologyLevel::Nvlink, need: 4 },
        ];
        for r in reasons {
            let v = serde_json::to_value(&r).expect("serializes");
            assert_eq!(v["reason"].as_str(), Some(r.kind()));
        }
    }
}
