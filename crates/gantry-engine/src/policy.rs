//! Scoring policies, selectable by name. A score is a tuple of integers compared
//! lexicographically, higher is better; ties between nodes are broken by a seeded hash, ties
//! between options of one node by the order the filter produced them (lowest GPU index first).
//!
//! The baselines follow the definitions of the FGD authors' simulator, so the simulator can
//! reproduce their published results; where those definitions depend on the fleet (the
//! largest CPU and GPU spec used for normalization) gantry takes them from the fleet. Exact
//! formulas: docs/policies.md.

use crate::fit::TaskOption;
use crate::frag::{self, NodeView, Outlook, Shape};
use crate::ledger::Grant;
use crate::request::{CompiledGroup, GpuNeed};
use crate::state::{ClusterState, HOT_NO_FRAG, NodeIdx};
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

    /// Does this policy use the workload's type distribution?
    pub fn needs_shapes(self) -> bool {
        matches!(self, Policy::Fgd | Policy::Default)
    }

    /// Does this policy want candidates drawn from all over the fleet (random walk start)?
    pub fn spreads(self) -> bool {
        matches!(self, Policy::Random | Policy::Spread)
    }

    /// Does this policy choose among a node's GPUs at random (rather than lowest index first)?
    pub fn random_gpu(self) -> bool {
        matches!(self, Policy::Random)
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

/// A candidate's score. Candidates compare by `node` keys, then by the node tie-break (node
/// order for packing policies, a seeded hash for spreading ones), then by `option` keys (which
/// GPUs within the node), higher wins at each step; the first option wins a complete tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Score {
    pub node: [i64; 5],
    pub option: [i64; 2],
}

/// What scoring needs beyond the node and the option.
#[derive(Debug)]
pub struct ScoreContext<'a> {
    pub policy: Policy,
    pub shapes: &'a [(Shape, u64)],
    /// Sum of the shapes' weights (to turn weighted fragments into expectations).
    pub shape_weight: u64,
    /// What `default` derives from the shapes beyond FGD's next task (`frag::Outlook`).
    pub outlook: &'a Outlook,
    /// Racks already holding tasks of this job (gang affinity).
    pub gang_racks: &'a [u32],
}

/// Milli-GPU an option takes.
pub fn option_milli(state: &ClusterState, option: &TaskOption) -> u32 {
    option.grants.iter().map(|g| crate::ledger::grant_milli(state, g)).sum()
}

/// The node's fragmentation before placement (weighted, see `frag`), for policies that use
/// it: computed once per node, not once per option.
pub fn fragmentation_before(state: &ClusterState, node: NodeIdx, ctx: &ScoreContext<'_>) -> u64 {
    if !ctx.policy.needs_shapes() || ctx.shapes.is_empty() {
        return 0;
    }
    policy_fragmentation(state, node, None, 0, ctx)
}

/// The measure the policy descends: FGD's fragmentation for `fgd`; for `default`, that plus
/// two things FGD's one-task-ahead view misses, each weighted like a fragment of every type
/// (so that, divided by the total weight, all are milli-GPU): the node's GPU compute its free
/// CPU cannot serve at the workload's CPU per GPU (on the Alibaba trace GPU tasks ask 14 cores
/// per GPU and most nodes have 12), and a quarter of its GPUs' eventual waste (what stays free
/// after tasks keep filling them; more weight costs packing). docs/policies.md measures both.
fn policy_fragmentation(
    state: &ClusterState,
    node: NodeIdx,
    option: Option<&TaskOption>,
    cpu: u32,
    ctx: &ScoreContext<'_>,
) -> u64 {
    let outlook = (ctx.policy == Policy::Default).then_some((ctx.outlook, ctx.shape_weight));
    node_fragmentation(state, node, option, cpu, ctx.shapes, outlook)
}

/// Weighted fragmentation of `node` as it stands.
pub fn node_fragmentation_of(state: &ClusterState, node: NodeIdx, shapes: &[(Shape, u64)]) -> u64 {
    node_fragmentation(state, node, None, 0, shapes, None)
}

/// `default` counts 1/this of a GPU's eventual waste (¼: docs/policies.md).
const EVENTUAL_WASTE_SHARE: u64 = 4;

/// Weighted fragmentation of `node`, optionally as if `option` (and `cpu`) were taken; with
/// `outlook` = (outlook, weight), plus `weight` × (the compute CPU cannot serve + a quarter of
/// the GPUs' eventual waste).
fn node_fragmentation(
    state: &ClusterState,
    node: NodeIdx,
    option: Option<&TaskOption>,
    cpu: u32,
    shapes: &[(Shape, u64)],
    outlook: Option<(&Outlook, u64)>,
) -> u64 {
    let n = &state.nodes[node as usize];
    let first = n.gpu_first;
    let mut free = [0u32; crate::limits::GPUS_PER_NODE_MAX];
    let mut len = 0;
    let mut classes = 0u64;
    for (offset, g) in state.node_hot(node).iter().enumerate() {
        classes |= 1u64.checked_shl(g.class as u32).unwrap_or(u64::MAX);
        if g.frag_free == HOT_NO_FRAG {
            continue;
        }
        let mut f = g.frag_free as u32;
        if let Some(option) = option {
            let gpu = first + offset as u32;
            for grant in option.grants.iter().filter(|grant| grant.gpu() == gpu) {
                f -= match grant {
                    Grant::Whole { .. } => f,
                    Grant::Mps { milli, .. } | Grant::TimeSlice { milli, .. } => (*milli).min(f),
                    Grant::Mig { .. } => 0,
                };
            }
        }
        free[len] = f;
        len += 1;
    }
    let view = NodeView { free: &free[..len], cpu_free: n.cpu_free - cpu, classes };
    let beyond = outlook.map_or(0, |(outlook, weight)| {
        let waste: u64 = view.free.iter().map(|&f| outlook.eventual_waste(f) as u64).sum();
        weight * frag::cpu_stranded(view, outlook.cpu_per_gpu) + weight * waste / EVENTUAL_WASTE_SHARE
    });
    frag::node_fragmentation(view, shapes) + beyond
}

/// Score placing one task of `group` on `node` with `option`; `frag_before` comes from
/// [`fragmentation_before`] and `gathered` from [`gathered`] for the same node.
pub fn score(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    option: &TaskOption,
    ctx: &ScoreContext<'_>,
    frag_before: u64,
    gathered: i64,
) -> Score {
    let n = &state.nodes[node as usize];
    let milli = option_milli(state, option) as i64;
    // Keys shared by every policy: do not take shared GPUs whole when whole-mode ones exist,
    // the smallest unit for memory-only requests, the tightest topology for multi-GPU tasks.
    let borrowed = -(borrowed_shared_gpus(state, option));
    let unit = -((option.unit_memory >> 20) as i64);
    let level = -(option.level as i64);
    let gpu_fit = -chosen_gpu_free_after(state, option);
    let same_rack = ctx.gang_racks.contains(&n.rack) as i64;
    let gpu_free_after = (n.gpu_count as i64 * 1000 - n.used_milli as i64 - milli).max(0);
    let cpu_free_after = n.cpu_free as i64 - group.cpu as i64;
    let keys = |a: i64, b: i64| [borrowed, unit, level, a, b];
    let (node_keys, option_keys) = match ctx.policy {
        Policy::Random => (keys(0, 0), [0, 0]),
        Policy::BestFit => (keys(best_fit(state, cpu_free_after, gpu_free_after), 0), [gpu_fit, 0]),
        Policy::Spread => (keys(-best_fit(state, cpu_free_after, gpu_free_after), 0), [-gpu_fit, 0]),
        Policy::DotProduct => {
            (keys(dot_product(state, n.cpu_free, n.gpu_count * 1000 - n.used_milli, group.cpu, milli), 0), [gpu_fit, 0])
        }
        Policy::GpuPacking => (keys(gpu_packing(state, node, group), 0), [gpu_fit, 0]),
        Policy::GpuClustering => (keys(gpu_clustering(state, node, group), 0), [gpu_fit, 0]),
        Policy::Fgd => {
            let after = policy_fragmentation(state, node, Some(option), group.cpu, ctx);
            (keys(fgd_score(frag_before, after, ctx.shape_weight), 0), [0, 0])
        }
        Policy::Topology => (keys(same_rack, best_fit(state, cpu_free_after, gpu_free_after)), [gpu_fit, 0]),
        Policy::Default => {
            let after = policy_fragmentation(state, node, Some(option), group.cpu, ctx);
            // FGD does not see MIG GPUs (they hand out fixed instances), so among nodes equal
            // for it a MIG instance goes where shared GPUs already run (`gathered`, per node):
            // shared work gathers on few nodes and the others can empty for whole-GPU gangs
            // when layouts change.
            (keys(same_rack, fgd_score(frag_before, after, ctx.shape_weight) * 1000 + gathered), [gpu_fit, 0])
        }
    };
    Score { node: node_keys, option: option_keys }
}

/// For `default` placing a MIG instance: the GPUs of `node` not in whole mode with something
/// running on them (< 1000: a node has at most `GPUS_PER_NODE_MAX` GPUs, so the count fits
/// under the FGD score it is added to); 0 otherwise. Once per node, not per option.
pub fn gathered(state: &ClusterState, node: NodeIdx, group: &CompiledGroup, ctx: &ScoreContext<'_>) -> i64 {
    if ctx.policy != Policy::Default || !matches!(group.gpu, crate::request::GpuNeed::Mig { .. }) {
        return 0;
    }
    state.node_gpus(node).iter().zip(state.node_hot(node)).filter(|(g, h)| !h.whole_mode() && g.used_milli > 0).count()
        as i64
}

/// Whole grants that take an MPS or time-sliced GPU out of its sharing pool.
fn borrowed_shared_gpus(state: &ClusterState, option: &TaskOption) -> i64 {
    option.grants.iter().filter(|g| matches!(g, Grant::Whole { gpu } if !state.hot[*gpu as usize].whole_mode())).count()
        as i64
}

/// Compute left on the GPUs the option uses, after placement (lower = better fit).
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

/// Best fit: ⌊100 · (1 − ½·cpu_free′/cpu_max − ½·gpu_free′/gpu_max)⌋, where primes are after
/// placement and the maxima are the fleet's largest node (floating point, as the reference).
fn best_fit(state: &ClusterState, cpu_free_after: i64, gpu_free_after: i64) -> i64 {
    let mut s = 0.0f64;
    s += cpu_free_after.max(0) as f64 / state.max_node_cpu.max(1) as f64 * 0.5;
    s += gpu_free_after as f64 / state.max_node_gpu_milli.max(1) as f64 * 0.5;
    ((1.0 - s) * 100.0) as i64
}

/// Dot product (Tetris), "merge" form: ⌊100 · (1 − ½·(cpu_req·cpu_free + gpu_req·gpu_free))⌋
/// with every term divided by the fleet maxima; the smaller the alignment, the higher.
fn dot_product(state: &ClusterState, cpu_free: u32, gpu_free: u32, cpu_req: u32, gpu_req: i64) -> i64 {
    if cpu_free < cpu_req {
        return 0;
    }
    let (cpu_max, gpu_max) = (state.max_node_cpu.max(1) as f64, state.max_node_gpu_milli.max(1) as f64);
    let dot = (cpu_free as f64 / cpu_max) * (cpu_req as f64 / cpu_max)
        + (gpu_free as f64 / gpu_max) * (gpu_req as f64 / gpu_max);
    (100.0 * (1.0 - dot / 2.0)) as i64
}

/// GPU packing tiers: (1) only partly used GPUs are needed: 100 − Σ(free% of those)/10, at
/// least 50; (2) idle GPUs on a node with some GPU in use: 50 − idle GPUs taken, at least 33;
/// (3) an idle node: max(33 − idle GPUs, idle GPUs). CPU-only tasks: 0.
fn gpu_packing(state: &ClusterState, node: NodeIdx, group: &CompiledGroup) -> i64 {
    let (milli, count) = match group.gpu {
        GpuNeed::Whole { count } => (1000, count),
        GpuNeed::Share { milli, .. } => (milli, 1),
        _ => return 0,
    };
    let mut free: smallvec::SmallVec<[u32; 16]> =
        state.node_hot(node).iter().filter(|g| g.frag_free != HOT_NO_FRAG).map(|g| g.frag_free as u32).collect();
    let idle = free.iter().filter(|&&f| f == 1000).count() as i64;
    if idle == free.len() as i64 {
        return (33 - idle).max(idle);
    }
    free.sort_unstable();
    let (mut need, mut idle_used, mut free_pct) = (count, 0i64, 0i64);
    for &f in free.iter() {
        if need == 0 {
            break;
        }
        if f >= milli {
            need -= 1;
            free_pct += f as i64 * 100 / 1000;
            idle_used += (f == 1000) as i64;
        }
    }
    if idle_used > 0 { (50 - idle_used).max(33) } else { (100 - free_pct / 10).max(50) }
}

/// GPU clustering: keep tasks of one kind ("share", "k whole GPUs") together. With g = 25 ·
/// (gpu_max − free) / gpu_max: node already running only this kind: 75 + g; this kind among
/// others: 50 + g; node running no GPU task: 25 + g; only other kinds: g. CPU-only tasks: 0.
fn gpu_clustering(state: &ClusterState, node: NodeIdx, group: &CompiledGroup) -> i64 {
    let Some(tag) = crate::request::task_tag(&group.gpu) else { return 0 };
    let n = &state.nodes[node as usize];
    let tags = &state.node_tags[node as usize];
    let gpu_max = state.max_node_gpu_milli.max(1) as i64;
    let free = n.gpu_count as i64 * 1000 - n.used_milli as i64;
    let g = 25 * (gpu_max - free) / gpu_max;
    let kinds = tags.iter().filter(|&&c| c > 0).count();
    match (tags[tag] > 0, kinds) {
        (true, 1) => 75 + g,
        (true, _) => 50 + g,
        (false, 0) => 25 + g,
        (false, _) => g,
    }
}

/// FGD: ⌊100 · sigmoid(Δ / 1000)⌋ with Δ the drop in expected fragmentation (milli-GPU). The
/// reference truncates to an integer, so nodes within about 40 milli-GPU of each other tie;
/// `fgd` breaks the ties as the reference does, `default` by node order (first fit, which
/// packs — an exact Δ loses about a point, docs/policies.md).
fn fgd_score(before: u64, after: u64, weight: u64) -> i64 {
    let delta = (before as f64 - after as f64) / weight.max(1) as f64;
    (100.0 / (1.0 + (-delta / 1000.0).exp())) as i64
}
