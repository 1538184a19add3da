//! Scoring policies, selectable by name. Every score is a tuple of integers compared
//! lexicographically, higher is better; ties are broken by a seeded hash, never by iteration
//! order. Exact definitions, with the formulas, are in docs/policies.md.

use crate::fit::TaskOption;
use crate::frag::{self, Shape};
use crate::ledger::Grant;
use crate::request::CompiledGroup;
use crate::state::{ClusterState, HOT_NO_FRAG, NodeIdx, Units};
use std::fmt;
use std::str::FromStr;

/// A named scoring policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    Random,
    BestFit,
    DotProduct,
    GpuPacking,
    GpuClustering,
    Fgd,
    Spread,
    Topology,
    Default,
}

impl Policy {
    pub const ALL: [Policy; 9] = [
        Policy::Random,
        Policy::BestFit,
        Policy::DotProduct,
        Policy::GpuPacking,
        Policy::GpuClustering,
        Policy::Fgd,
        Policy::Spread,
        Policy::Topology,
        Policy::Default,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::BestFit => "best-fit",
            Policy::DotProduct => "dot-product",
            Policy::GpuPacking => "gpu-packing",
            Policy::GpuClustering => "gpu-clustering",
            Policy::Fgd => "fgd",
            Policy::Spread => "spread",
            Policy::Topology => "topology",
            Policy::Default => "default",
        }
    }

    fn uses_fragmentation(self) -> bool {
        matches!(self, Policy::Fgd | Policy::Default)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {s:?}; choose one of {}", names.join(", "))
        })
    }
}

/// A candidate's score: compared lexicographically, higher wins.
pub type Score = [i64; 7];

/// What scoring needs beyond the node and the option.
#[derive(Debug)]
pub struct ScoreContext<'a> {
    pub policy: Policy,
    pub shapes: &'a [(Shape, u64)],
    /// Racks already holding tasks of this job (gang affinity).
    pub gang_racks: &'a [u32],
}

/// Milli-GPU an option takes.
pub fn option_milli(state: &ClusterState, option: &TaskOption) -> u32 {
    option
        .grants
        .iter()
        .map(|g| match g {
            Grant::Whole { .. } => 1000,
            Grant::Mig { gpu, slot } => match &state.gpus[*gpu as usize].units {
                Units::Mig { slots } => slots[*slot as usize].milli,
                _ => 0,
            },
            Grant::Mps { milli, .. } | Grant::TimeSlice { milli, .. } => *milli,
        })
        .sum()
}

/// The node's fragmentation before placement, for policies that use it (computed once per
/// node, not once per option).
pub fn fragmentation_before(state: &ClusterState, node: NodeIdx, ctx: &ScoreContext<'_>) -> i64 {
    if !ctx.policy.uses_fragmentation() || ctx.shapes.is_empty() {
        return 0;
    }
    let mut free = [0u32; crate::limits::GPUS_PER_NODE_MAX];
    let mut len = 0;
    for g in state.node_hot(node) {
        if g.frag_free != HOT_NO_FRAG {
            free[len] = g.frag_free as u32;
            len += 1;
        }
    }
    frag::node_fragmentation(&free[..len], ctx.shapes) as i64
}

/// Score placing one task of `group` on `node` with `option`; `frag_before` comes from
/// [`fragmentation_before`] for the same node.
pub fn score(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    option: &TaskOption,
    ctx: &ScoreContext<'_>,
    frag_before: i64,
) -> Score {
    let n = &state.nodes[node as usize];
    let milli = option_milli(state, option) as i64;
    // Primary keys shared by every policy: do not take shared GPUs whole when whole-mode ones
    // exist, the smallest unit for memory-only requests, the tightest topology for multi-GPU
    // tasks.
    let borrowed = -(borrowed_shared_gpus(state, option));
    let unit = -((option.unit_memory >> 20) as i64);
    let level = -(option.level as i64);
    let gpu_cap = n.gpu_count as i64 * 1000;
    let fit = best_fit(
        n.cpu_total,
        n.cpu_free - group.cpu,
        n.memory_total,
        n.memory_free - group.memory,
        gpu_cap,
        gpu_cap - n.used_milli as i64 - milli,
    );
    let gpu_fit = -chosen_gpu_free_after(state, option);
    let same_rack = ctx.gang_racks.contains(&n.rack) as i64;
    match ctx.policy {
        Policy::Random => [borrowed, unit, level, 0, 0, 0, 0],
        Policy::BestFit => [borrowed, unit, level, fit, gpu_fit, 0, 0],
        Policy::Spread => [borrowed, unit, level, -fit, -gpu_fit, 0, 0],
        Policy::DotProduct => [borrowed, unit, level, dot_product(state, node, group, milli), gpu_fit, 0, 0],
        Policy::GpuPacking => [borrowed, unit, level, packing_tier(state, node, option), fit, gpu_fit, 0],
        Policy::GpuClustering => [borrowed, unit, level, same_shape_tasks(state, node, option), fit, gpu_fit, 0],
        Policy::Fgd => [
            borrowed,
            unit,
            level,
            -(fragmentation_after(state, node, option, ctx.shapes) - frag_before),
            gpu_fit,
            0,
            0,
        ],
        Policy::Topology => [borrowed, unit, level, same_rack, fit, gpu_fit, 0],
        Policy::Default => [
            borrowed,
            unit,
            level,
            same_rack,
            -(fragmentation_after(state, node, option, ctx.shapes) - frag_before),
            fit,
            gpu_fit,
        ],
    }
}

/// Whole grants that take an MPS or time-sliced GPU out of its sharing pool.
fn borrowed_shared_gpus(state: &ClusterState, option: &TaskOption) -> i64 {
    option.grants.iter().filter(|g| matches!(g, Grant::Whole { gpu } if !state.hot[*gpu as usize].whole_mode())).count()
        as i64
}

/// Negative sum of free fractions (per mille) after placement, over the dimensions the node has.
fn best_fit(cpu_total: u32, cpu_after: u32, mem_total: u64, mem_after: u64, gpu_total: i64, gpu_after: i64) -> i64 {
    let mut sum = 0;
    if cpu_total > 0 {
        sum += cpu_after as i64 * 1000 / cpu_total as i64;
    }
    if mem_total > 0 {
        // In MiB, so the product stays in 64 bits (a 1 PiB node is 2^30 MiB).
        sum += ((mem_after >> 20) * 1000 / (mem_total >> 20).max(1)) as i64;
    }
    if gpu_total > 0 {
        sum += gpu_after * 1000 / gpu_total;
    }
    -sum
}

/// Free compute left on the GPUs the option uses (for choosing a GPU within a node).
fn chosen_gpu_free_after(state: &ClusterState, option: &TaskOption) -> i64 {
    option
        .grants
        .iter()
        .map(|g| match g {
            Grant::Mps { gpu, milli, .. } | Grant::TimeSlice { gpu, milli, .. } => {
                state.gpus[*gpu as usize].free_milli() as i64 - *milli as i64
            }
            Grant::Mig { gpu, .. } => state.gpus[*gpu as usize].free_milli() as i64,
            Grant::Whole { .. } => 0,
        })
        .sum()
}

/// Tetris: alignment of the request with the node's free resources, both normalized.
fn dot_product(state: &ClusterState, node: NodeIdx, group: &CompiledGroup, milli: i64) -> i64 {
    let n = &state.nodes[node as usize];
    let mut dot = 0i64;
    if n.cpu_total > 0 {
        dot += group.cpu as i64 * 1000 / n.cpu_total as i64 * (n.cpu_free as i64 * 1000 / n.cpu_total as i64);
    }
    if n.memory_total > 0 {
        let total = (n.memory_total >> 20).max(1);
        let req = ((group.memory >> 20) * 1000 / total) as i64;
        let free = ((n.memory_free >> 20) * 1000 / total) as i64;
        dot += req * free;
    }
    let cap = n.gpu_count as i64 * 1000;
    if cap > 0 {
        dot += milli * 1000 / cap * ((cap - n.used_milli as i64) * 1000 / cap);
    }
    dot
}

/// GPU packing: occupied GPUs first (2), then idle GPUs on active nodes (1), then idle nodes (0).
fn packing_tier(state: &ClusterState, node: NodeIdx, option: &TaskOption) -> i64 {
    let uses_busy_gpu = option.grants.iter().any(|g| !state.gpus[g.gpu() as usize].idle());
    if uses_busy_gpu {
        2
    } else if state.nodes[node as usize].used_milli > 0 {
        1
    } else {
        0
    }
}

/// GPU clustering: GPUs on the node already running tasks of the same per-GPU compute share.
fn same_shape_tasks(state: &ClusterState, node: NodeIdx, option: &TaskOption) -> i64 {
    let per_gpu = match option.grants.first() {
        Some(Grant::Mps { milli, .. } | Grant::TimeSlice { milli, .. }) => *milli,
        Some(Grant::Whole { .. }) => 1000,
        _ => return 0,
    };
    state.node_gpus(node).iter().filter(|g| !g.idle() && (g.used_milli % per_gpu.max(1) == 0)).count() as i64
}

/// The node's expected fragment if the option is taken.
fn fragmentation_after(state: &ClusterState, node: NodeIdx, option: &TaskOption, shapes: &[(Shape, u64)]) -> i64 {
    if shapes.is_empty() {
        return 0;
    }
    let first = state.nodes[node as usize].gpu_first;
    let mut after = [0u32; crate::limits::GPUS_PER_NODE_MAX];
    let mut len = 0;
    for (offset, g) in state.node_hot(node).iter().enumerate() {
        if g.frag_free == HOT_NO_FRAG {
            continue;
        }
        let free = g.frag_free as u32;
        let gpu = first + offset as u32;
        let taken: u32 = option
            .grants
            .iter()
            .filter(|grant| grant.gpu() == gpu)
            .map(|grant| match grant {
                Grant::Whole { .. } => free,
                Grant::Mps { milli, .. } | Grant::TimeSlice { milli, .. } => *milli,
                Grant::Mig { .. } => 0,
            })
            .sum();
        after[len] = free - taken.min(free);
        len += 1;
    }
    frag::node_fragmentation(&after[..len], shapes) as i64
}

impl Policy {
    /// Does this policy want candidates drawn from all over the fleet (random walk start)?
    pub fn spreads(self) -> bool {
        matches!(self, Policy::Random | Policy::Spread)
    }

    /// Whether the engine must maintain the shape distribution for this policy.
    pub fn needs_shapes(self) -> bool {
        self.uses_fragmentation()
    }
}
