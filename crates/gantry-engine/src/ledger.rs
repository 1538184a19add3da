//! The allocation ledger: the only code that changes capacity counters.
//!
//! `apply` and `revert` are exact inverses over integers, so releasing an allocation restores
//! the state bit for bit (a property test checks this on random workloads). Capacity is never
//! allowed to go negative or past its total: such a change is a broken invariant and stops the
//! engine (`assert!`), because limping on with a corrupt ledger would over-allocate real GPUs.

use crate::state::{ClusterState, GpuIdx, NodeIdx, Units};

/// One GPU (or part of one) held by a task, in engine indices.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    Whole { gpu: GpuIdx },
    Mig { gpu: GpuIdx, slot: u8 },
    Mps { gpu: GpuIdx, milli: u32, memory: u64 },
    TimeSlice { gpu: GpuIdx, replicas: u32, milli: u32, memory: u64 },
}

impl Grant {
    pub fn gpu(&self) -> GpuIdx {
        match self {
            Grant::Whole { gpu } | Grant::Mig { gpu, .. } | Grant::Mps { gpu, .. } | Grant::TimeSlice { gpu, .. } => {
                *gpu
            }
        }
    }
}

/// Everything one task holds on its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskGrant {
    pub group: u32,
    pub replica: u32,
    /// Kind of task for clustering (`request::task_tag`), if it uses a GPU.
    pub tag: Option<u8>,
    pub node: NodeIdx,
    pub cpu: u32,
    pub memory: u64,
    pub grants: Vec<Grant>,
}

impl TaskGrant {
    /// Compute this task holds, in milli-GPU.
    pub fn milli(&self, state: &ClusterState) -> u32 {
        self.grants.iter().map(|g| grant_milli(state, g)).sum()
    }
}

/// Compute one grant takes, in milli-GPU.
pub(crate) fn grant_milli(state: &ClusterState, grant: &Grant) -> u32 {
    match grant {
        Grant::Whole { .. } => 1000,
        Grant::Mig { gpu, slot } => match &state.gpus[*gpu as usize].units {
            Units::Mig { slots } => slots[*slot as usize].milli,
            _ => unreachable!("MIG grant on a non-MIG GPU is rejected by apply"),
        },
        Grant::Mps { milli, .. } | Grant::TimeSlice { milli, .. } => *milli,
    }
}

/// Take the task's resources. Panics if that would over-allocate anything: callers (the fit
/// code) only build grants that fit, so a failure here is a bug, not an operating error.
pub fn apply(state: &mut ClusterState, task: &TaskGrant) {
    let node = &mut state.nodes[task.node as usize];
    assert!(
        node.cpu_free >= task.cpu && node.memory_free >= task.memory,
        "over-allocated node {}",
        state.info[task.node as usize].name
    );
    node.cpu_free -= task.cpu;
    node.memory_free -= task.memory;
    for grant in &task.grants {
        take(state, task.node, grant);
    }
    if let Some(tag) = task.tag {
        state.node_tags[task.node as usize][tag as usize] += 1;
    }
    state.refresh_summary(task.node);
}

/// Give back exactly what `apply` took.
pub fn revert(state: &mut ClusterState, task: &TaskGrant) {
    for grant in task.grants.iter().rev() {
        give(state, task.node, grant);
    }
    if let Some(tag) = task.tag {
        let count = &mut state.node_tags[task.node as usize][tag as usize];
        assert!(*count > 0, "released a task kind the node does not hold");
        *count -= 1;
    }
    state.refresh_summary(task.node);
    let node = &mut state.nodes[task.node as usize];
    node.cpu_free += task.cpu;
    node.memory_free += task.memory;
    assert!(
        node.cpu_free <= node.cpu_total && node.memory_free <= node.memory_total,
        "released more than node {} has",
        state.info[task.node as usize].name
    );
}

/// Could `grant` be taken on `node` now (what `take` would assert)?
fn can_take(state: &ClusterState, node: NodeIdx, grant: &Grant) -> bool {
    let Some(gpu) = state.gpus.get(grant.gpu() as usize) else { return false };
    let (milli, memory) = match (grant, &gpu.units) {
        (Grant::Whole { .. }, Units::Mig { .. }) => return false,
        (Grant::Whole { .. }, _) => return gpu.node == node && gpu.idle(),
        (Grant::Mig { slot, .. }, Units::Mig { slots }) => match slots.get(*slot as usize) {
            Some(s) if !s.taken => (s.milli, s.memory),
            _ => return false,
        },
        (Grant::Mps { milli, memory, .. }, Units::Mps { max_clients }) => {
            if gpu.exclusive || gpu.clients >= *max_clients {
                return false;
            }
            (*milli, *memory)
        }
        (Grant::TimeSlice { replicas, milli, memory, .. }, Units::TimeSlice { replicas: total, .. }) => {
            if gpu.exclusive || gpu.clients + replicas > *total {
                return false;
            }
            (*milli, *memory)
        }
        _ => return false,
    };
    gpu.node == node && gpu.used_milli + milli <= 1000 && gpu.used_memory + memory <= gpu.memory_total
}

/// Apply `tasks` if every one of them still fits as granted, else change nothing. For
/// carrying out a plan made on a copy of this state (a reservation's exact GPUs).
pub fn try_apply_all(state: &mut ClusterState, tasks: &[TaskGrant]) -> bool {
    for (i, task) in tasks.iter().enumerate() {
        let node = &state.nodes[task.node as usize];
        let fits = node.cpu_free >= task.cpu
            && node.memory_free >= task.memory
            && task.grants.iter().all(|g| can_take(state, task.node, g));
        if !fits {
            for done in tasks[..i].iter().rev() {
                revert(state, done);
            }
            return false;
        }
        apply(state, task);
    }
    true
}

fn take(state: &mut ClusterState, node: NodeIdx, grant: &Grant) {
    let gpu = &mut state.gpus[grant.gpu() as usize];
    assert_eq!(gpu.node, node, "grant names a GPU of another node");
    let was_wholly_free = gpu.wholly_free();
    let milli = match (grant, &mut gpu.units) {
        (Grant::Whole { .. }, Units::Mig { .. }) => panic!("whole grant on a MIG GPU"),
        (Grant::Whole { .. }, _) => {
            assert!(gpu.idle(), "whole grant on a busy GPU");
            gpu.exclusive = true;
            gpu.used_memory = gpu.memory_total;
            1000
        }
        (Grant::Mig { slot, .. }, Units::Mig { slots }) => {
            let s = &mut slots[*slot as usize];
            assert!(!s.taken, "MIG instance taken twice");
            s.taken = true;
            gpu.clients += 1;
            gpu.used_memory += s.memory;
            s.milli
        }
        (Grant::Mps { milli, memory, .. }, Units::Mps { max_clients }) => {
            assert!(!gpu.exclusive && gpu.clients < *max_clients, "MPS client limit");
            assert!(gpu.used_memory + memory <= gpu.memory_total, "MPS memory over-allocated");
            gpu.clients += 1;
            gpu.used_memory += memory;
            *milli
        }
        (Grant::TimeSlice { replicas, milli, memory, .. }, Units::TimeSlice { replicas: total, .. }) => {
            assert!(!gpu.exclusive && gpu.clients + replicas <= *total, "time-slice replicas over-allocated");
            gpu.clients += replicas;
            gpu.used_memory += memory;
            *milli
        }
        (grant, units) => panic!("grant {grant:?} does not match GPU mode {:?}", units.kind()),
    };
    assert!(gpu.used_milli + milli <= 1000, "GPU compute over-allocated");
    assert!(gpu.used_memory <= gpu.memory_total, "GPU memory over-allocated");
    gpu.used_milli += milli;
    let now_wholly_free = gpu.wholly_free();
    state.refresh_hot(grant.gpu());
    state.used_milli_total += milli as u64;
    let n = &mut state.nodes[node as usize];
    n.used_milli += milli;
    if was_wholly_free && !now_wholly_free {
        n.whole_free -= 1;
    }
}

fn give(state: &mut ClusterState, node: NodeIdx, grant: &Grant) {
    let gpu = &mut state.gpus[grant.gpu() as usize];
    let was_wholly_free = gpu.wholly_free();
    let milli = match (grant, &mut gpu.units) {
        (Grant::Whole { .. }, _) => {
            assert!(gpu.exclusive, "released a whole GPU that was not held");
            gpu.exclusive = false;
            gpu.used_memory = 0;
            1000
        }
        (Grant::Mig { slot, .. }, Units::Mig { slots }) => {
            let s = &mut slots[*slot as usize];
            assert!(s.taken, "released a free MIG instance");
            s.taken = false;
            gpu.clients -= 1;
            gpu.used_memory -= s.memory;
            s.milli
        }
        (Grant::Mig { .. }, _) => panic!("released a MIG grant from a non-MIG GPU"),
        (Grant::Mps { milli, memory, .. }, _) => {
            gpu.clients -= 1;
            gpu.used_memory -= memory;
            *milli
        }
        (Grant::TimeSlice { replicas, milli, memory, .. }, _) => {
            gpu.clients -= replicas;
            gpu.used_memory -= memory;
            *milli
        }
    };
    gpu.used_milli -= milli;
    let now_wholly_free = gpu.wholly_free();
    state.refresh_hot(grant.gpu());
    state.used_milli_total -= milli as u64;
    let n = &mut state.nodes[node as usize];
    n.used_milli -= milli;
    if !was_wholly_free && now_wholly_free {
        n.whole_free += 1;
    }
}

/// Recompute every counter from the allocations and compare: the ledger's global invariant.
/// O(fleet); for tests and debug checks, not the hot path.
pub fn check_invariants<'a>(
    state: &ClusterState,
    tasks: impl Iterator<Item = &'a TaskGrant>,
) -> Result<(), crate::EngineError> {
    let mut fresh = emptied(state);
    for task in tasks {
        let node = &fresh.nodes[task.node as usize];
        if node.cpu_free < task.cpu || node.memory_free < task.memory {
            return Err(crate::EngineError::Invariant(format!(
                "node {} over-allocated",
                state.info[task.node as usize].name
            )));
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply(&mut fresh, task)));
        if outcome.is_err() {
            return Err(crate::EngineError::Invariant(format!(
                "allocations over-allocate on node {}",
                state.info[task.node as usize].name
            )));
        }
    }
    agree(&fresh, state)
}

/// `state` with nothing allocated: every counter at its total, every index rebuilt.
fn emptied(state: &ClusterState) -> ClusterState {
    let mut fresh = state.clone();
    fresh.used_milli_total = 0;
    fresh.index = crate::index::FreeIndex::new(fresh.nodes.len());
    fresh.node_tags.iter_mut().for_each(|t| *t = [0; crate::state::TASK_TAGS]);
    for n in &mut fresh.nodes {
        n.cpu_free = n.cpu_total;
        n.memory_free = n.memory_total;
        n.used_milli = 0;
        n.whole_free = 0;
    }
    for g in &mut fresh.gpus {
        g.used_milli = 0;
        g.used_memory = 0;
        g.clients = 0;
        g.exclusive = false;
        if let Units::Mig { slots } = &mut g.units {
            slots.iter_mut().for_each(|s| s.taken = false);
        }
    }
    for i in 0..fresh.nodes.len() {
        let first = fresh.nodes[i].gpu_first as usize;
        let count = fresh.nodes[i].gpu_count as usize;
        fresh.nodes[i].whole_free = fresh.gpus[first..first + count].iter().filter(|g| g.wholly_free()).count() as u32;
        fresh.refresh_summary(i as NodeIdx);
    }
    fresh
}

/// Whether the recomputed `fresh` state and the kept `state` agree on every counter.
fn agree(fresh: &ClusterState, state: &ClusterState) -> Result<(), crate::EngineError> {
    let hot: Vec<crate::state::GpuHot> = state.gpus.iter().map(crate::state::GpuHot::of).collect();
    if hot != state.hot {
        return Err(crate::EngineError::Invariant("hot GPU records disagree with the GPUs".into()));
    }
    if fresh.node_tags != state.node_tags {
        return Err(crate::EngineError::Invariant("per-node task kinds disagree with the allocations".into()));
    }
    if fresh.index != state.index {
        return Err(crate::EngineError::Invariant("free-capacity index disagrees with the allocations".into()));
    }
    if fresh.used_milli_total != state.used_milli_total {
        return Err(crate::EngineError::Invariant("fleet-wide compute counter disagrees with the allocations".into()));
    }
    for ((a, b), info) in fresh.nodes.iter().zip(&state.nodes).zip(state.info.iter()) {
        if (a.cpu_free, a.memory_free, a.used_milli, a.whole_free, a.max_share_free, a.mig_free_mask)
            != (b.cpu_free, b.memory_free, b.used_milli, b.whole_free, b.max_share_free, b.mig_free_mask)
        {
            return Err(crate::EngineError::Invariant(format!(
                "node {} counters disagree with its allocations",
                info.name
            )));
        }
    }
    for ((a, b), uuid) in fresh.gpus.iter().zip(&state.gpus).zip(state.uuids.iter()) {
        if (a.used_milli, a.used_memory, a.clients, a.exclusive, &a.units)
            != (b.used_milli, b.used_memory, b.clients, b.exclusive, &b.units)
        {
            return Err(crate::EngineError::Invariant(format!("GPU {uuid} counters disagree with its allocations")));
        }
        if a.used_milli > 1000 || a.used_memory > a.memory_total {
            return Err(crate::EngineError::Invariant(format!("GPU {uuid} over-allocated")));
        }
    }
    Ok(())
}
