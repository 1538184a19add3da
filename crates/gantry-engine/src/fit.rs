//! Filter and options: can this node host one task of this group, and with which GPUs?
//!
//! A filter looks only at the state passed in (gangs pass a state that already holds the
//! gang's earlier tasks). It answers with the GPU options worth scoring — one per GPU for a
//! share, the tightest topology set for a multi-GPU task, the smallest unit for a memory-only
//! request — or with the first typed reason the node fails on.

use crate::ledger::Grant;
use crate::limits::OPTIONS_PER_NODE_MAX;
use crate::request::{CompiledGroup, GpuNeed};
use crate::state::{ClusterState, GpuHot, GpuIdx, GpuState, ModeKind, NodeIdx, Units};
use gantry_types::{Bytes, Isolation, MilliCpu, MilliGpu, Reason, TopologyLevel};

/// Grants of one option: inline for the common one-GPU case, so building options allocates
/// nothing.
pub type Grants = smallvec::SmallVec<[Grant; 2]>;

/// A way to place one task on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOption {
    pub grants: Grants,
    /// Tightest level that holds all of this task's GPUs.
    pub level: TopologyLevel,
    /// Memory of the unit granted, for memory-only requests (smallest unit wins).
    pub unit_memory: u64,
}

/// Restricts the GPUs a task may use (a gang anchored in one NVLink domain or NUMA node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuScope {
    Any,
    NvlinkDomain(u32),
    Numa(u32),
}

impl GpuScope {
    fn admits(self, gpu: &GpuState) -> bool {
        if gpu.cordoned {
            return false;
        }
        match self {
            GpuScope::Any => true,
            GpuScope::NvlinkDomain(d) => gpu.nvlink_domain == Some(d),
            GpuScope::Numa(n) => gpu.numa == n,
        }
    }

    fn admits_hot(self, gpu: GpuHot) -> bool {
        match self {
            GpuScope::Any => true,
            GpuScope::NvlinkDomain(d) => gpu.nvlink_domain() == Some(d),
            GpuScope::Numa(n) => gpu.numa as u32 == n,
        }
    }
}

/// Options for one task of `group` on `node`, or why there are none.
pub fn options(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    out.clear();
    let n = &state.nodes[node as usize];
    if n.has_taints
        && let Some(taint) = state.info[node as usize]
            .taints
            .iter()
            .find(|t| t.effect != "PreferNoSchedule" && !tolerates(&group.tolerations, t))
    {
        return Err(Reason::TaintNotTolerated { taint: taint.to_string() });
    }
    if n.cpu_free < group.cpu {
        return Err(Reason::InsufficientCpu { need: MilliCpu(group.cpu), free: MilliCpu(n.cpu_free) });
    }
    if n.memory_free < group.memory {
        return Err(Reason::InsufficientMemory { need: Bytes(group.memory), free: Bytes(n.memory_free) });
    }
    gpu_options(state, node, group, scope, out)
}

/// The GPU half of [`options`]: which GPUs of the node could hold one task, CPU, memory and
/// taints aside. Used alone to say why a node's hardware can never serve a group.
pub fn gpu_options(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    out.clear();
    let n = &state.nodes[node as usize];
    // Quick rejects from the node's summaries, before touching its GPUs.
    match &group.gpu {
        GpuNeed::Share { milli, .. } if n.max_share_free < *milli && n.max_share_free > 0 => {
            return Err(Reason::InsufficientShare { need: MilliGpu(*milli), free: MilliGpu(n.max_share_free) });
        }
        GpuNeed::Mig { profile }
            if n.mig_free_mask & group.mig_any_mask == 0 && group.mig_any_mask != 0 && has_mig_gpu(state, node) =>
        {
            return Err(Reason::MigProfileUnavailable { profile: profile.clone() });
        }
        _ => {}
    }
    let gpus = state.node_gpus(node);
    match &group.gpu {
        GpuNeed::None => {
            out.push(TaskOption { grants: Grants::new(), level: TopologyLevel::Nvlink, unit_memory: 0 });
            Ok(())
        }
        GpuNeed::Whole { count } => {
            whole(gpus, state.node_hot(node), n.gpu_first, n.whole_free, group, *count, scope, out)
        }
        GpuNeed::Mig { .. } => mig(gpus, n.gpu_first, group, scope, out),
        GpuNeed::Share { milli, memory, mps, time_slice } => {
            share(gpus, state.node_hot(node), n.gpu_first, group, *milli, *memory, *mps, *time_slice, scope, out)
        }
        GpuNeed::Memory { memory } => memory_only(gpus, n.gpu_first, group, *memory, scope, out),
    }
}

/// Does the node's hardware have a MIG GPU the group could use (its signature says so)?
fn has_mig_gpu(state: &ClusterState, node: NodeIdx) -> bool {
    state.signatures[state.nodes[node as usize].signature as usize].gpus.iter().any(|&(_, mask)| mask != 0)
}

fn tolerates(tolerations: &[String], taint: &gantry_types::Taint) -> bool {
    tolerations.iter().any(|t| match t.split_once('=') {
        Some((k, v)) => k == taint.key && v == taint.value,
        None => t == &taint.key,
    })
}

/// The reason when no GPU of the node is of an acceptable class at all.
fn class_reason(gpus: &[GpuState], group: &CompiledGroup) -> Reason {
    if gpus.iter().any(|g| group.class_model_ok[g.class as usize]) {
        Reason::SelectorRejected { selector: group.selector.clone().unwrap_or_default() }
    } else {
        Reason::GpuModelMismatch { wanted: group.models_wanted.clone() }
    }
}

#[allow(clippy::too_many_arguments)]
fn whole(
    gpus: &[GpuState],
    hot: &[GpuHot],
    first: GpuIdx,
    node_whole_free: u32,
    group: &CompiledGroup,
    count: u32,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    // Fast reject before touching GPUs: the node-level counter is an upper bound.
    if node_whole_free < count {
        if !hot.iter().any(|g| group.class_ok[g.class as usize]) {
            return Err(class_reason(gpus, group));
        }
        return Err(Reason::InsufficientWholeGpus { need: count, free: node_whole_free });
    }
    let eligible = |g: GpuHot| group.class_ok[g.class as usize] && g.wholly_free() && scope.admits_hot(g);
    // Whole-mode GPUs first; an idle MPS or time-sliced GPU is taken whole only when the
    // whole-mode ones do not suffice (the admin meant those for sharing).
    let mut free = GpuSet::new();
    hot.iter().enumerate().filter(|(_, g)| eligible(**g) && g.whole_mode()).for_each(|(o, _)| free.push(o));
    if (free.len as u32) < count {
        free = GpuSet::new();
        hot.iter().enumerate().filter(|(_, g)| eligible(**g)).for_each(|(o, _)| free.push(o));
    }
    if (free.len as u32) < count {
        if !hot.iter().any(|g| group.class_ok[g.class as usize]) {
            return Err(class_reason(gpus, group));
        }
        return Err(Reason::InsufficientWholeGpus { need: count, free: free.len as u32 });
    }
    // Tightest domain first; within a level, the domain with the fewest free GPUs that still
    // fits (best fit keeps large domains whole for large jobs).
    let (level, chosen) = if let Some(set) = best_domain(hot, &free, count, |g| g.nvlink_domain()) {
        (TopologyLevel::Nvlink, set)
    } else if let Some(set) = best_domain(hot, &free, count, |g| Some(g.numa as u32)) {
        (TopologyLevel::Numa, set)
    } else {
        // Spread over NUMA nodes: take from the NUMA node with the most free GPUs first.
        let per_numa = |numa: u8| free.iter().filter(|&o| hot[o].numa == numa).count();
        let mut ordered: smallvec::SmallVec<[(usize, u8, usize); 16]> =
            free.iter().map(|o| (per_numa(hot[o].numa), hot[o].numa, o)).collect();
        ordered.sort_by_key(|&(n, numa, o)| (std::cmp::Reverse(n), numa, o));
        let mut set = GpuSet::new();
        ordered[..count as usize].iter().for_each(|&(_, _, o)| set.push(o));
        (TopologyLevel::Node, set)
    };
    let level = if count <= 1 { TopologyLevel::Nvlink } else { level };
    if group.topology.required && level > group.topology.within && group.topology.within < TopologyLevel::Node {
        return Err(Reason::TopologyUnsatisfiable { within: group.topology.within, need: count });
    }
    let grants = chosen.iter().map(|o| Grant::Whole { gpu: first + o as GpuIdx }).collect();
    out.push(TaskOption { grants, level, unit_memory: 0 });
    Ok(())
}

/// A set of GPU offsets on one node (at most `GPUS_PER_NODE_MAX`), without allocating.
struct GpuSet {
    items: [u8; crate::limits::GPUS_PER_NODE_MAX],
    len: usize,
}

impl GpuSet {
    fn new() -> GpuSet {
        GpuSet { items: [0; crate::limits::GPUS_PER_NODE_MAX], len: 0 }
    }
    fn push(&mut self, offset: usize) {
        self.items[self.len] = offset as u8;
        self.len += 1;
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.items[..self.len].iter().map(|&o| o as usize)
    }
}

/// The first `count` GPUs of the smallest domain (by `key`) that has at least `count` free.
fn best_domain(hot: &[GpuHot], free: &GpuSet, count: u32, key: impl Fn(GpuHot) -> Option<u32>) -> Option<GpuSet> {
    let mut domains: smallvec::SmallVec<[(u32, u32); 8]> = smallvec::SmallVec::new(); // (domain, free count)
    for o in free.iter() {
        if let Some(d) = key(hot[o]) {
            match domains.iter_mut().find(|(id, _)| *id == d) {
                Some(entry) => entry.1 += 1,
                None => domains.push((d, 1)),
            }
        }
    }
    let &(domain, _) = domains.iter().filter(|(_, n)| *n >= count).min_by_key(|(d, n)| (*n, *d))?;
    let mut set = GpuSet::new();
    free.iter().filter(|&o| key(hot[o]) == Some(domain)).take(count as usize).for_each(|o| set.push(o));
    Some(set)
}

fn mig(
    gpus: &[GpuState],
    first: GpuIdx,
    group: &CompiledGroup,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    let mut any_class = false;
    let mut any_mig = false;
    for (offset, g) in gpus.iter().enumerate() {
        if !group.class_ok[g.class as usize] || !scope.admits(g) {
            continue;
        }
        any_class = true;
        let (Units::Mig { slots }, Some(profile)) = (&g.units, group.mig_profile[g.class as usize]) else { continue };
        any_mig = true;
        if let Some(slot) = slots.iter().position(|s| s.profile == profile && !s.taken) {
            out.push(TaskOption {
                grants: smallvec::smallvec![Grant::Mig { gpu: first + offset as GpuIdx, slot: slot as u8 }],
                level: TopologyLevel::Nvlink,
                unit_memory: slots[slot].memory,
            });
            if out.len() >= OPTIONS_PER_NODE_MAX {
                break;
            }
        }
    }
    let profile = match &group.gpu {
        GpuNeed::Mig { profile } => profile.clone(),
        _ => unreachable!("mig() is only called for MIG requests"),
    };
    match (out.is_empty(), any_class, any_mig) {
        (false, _, _) => Ok(()),
        (true, false, _) => Err(class_reason(gpus, group)),
        (true, true, false) => Err(Reason::MigNotSupported { profile }),
        (true, true, true) => Err(Reason::MigProfileUnavailable { profile }),
    }
}

/// Time-slice replicas needed for `milli` on a GPU cut into `replicas` (at least one).
fn replicas_for(milli: u32, replicas: u32) -> u32 {
    (milli * replicas).div_ceil(1000).max(1)
}

/// What a shared (MPS or time-slice) request asks of one GPU.
#[derive(Clone, Copy)]
struct ShareAsk {
    milli: u32,
    memory: u64,
    mps: bool,
    time_slice: bool,
}

/// What a node's scan for a shared unit saw, for the reason when nothing fits.
#[derive(Default)]
struct ShareScan {
    best_free_milli: u32,
    best_free_memory: u64,
    blocked: Option<Reason>,
    any_class: bool,
    any_shared: bool,
    forbidden_mode: Option<ModeKind>,
    /// A time-sliced GPU with the replicas but not their memory: the smallest share that buys
    /// enough replicas there (and what it would buy now).
    over_budget: Option<Reason>,
}

/// Options for an MPS share or time-slice replicas. One of placement's hot loops (every GPU of
/// every node a shared task may use): the hot record skips most GPUs without reading them.
#[allow(clippy::too_many_arguments)]
fn share(
    gpus: &[GpuState],
    hot: &[GpuHot],
    first: GpuIdx,
    group: &CompiledGroup,
    milli: u32,
    memory: u64,
    mps: bool,
    time_slice: bool,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    let ask = ShareAsk { milli, memory, mps, time_slice };
    let mut scan = ShareScan::default();
    let wanted_modes =
        if mps { crate::state::HOT_MPS } else { 0 } | if time_slice { crate::state::HOT_TIME_SLICE } else { 0 };
    for (offset, g) in gpus.iter().enumerate() {
        let h = hot[offset];
        if !group.class_ok[h.class as usize] {
            continue;
        }
        scan.any_class = true;
        // Cheap skips from the hot record: a GPU in a mode the task cannot use, or with less
        // compute left than asked, is not worth reading in full (reasons come from the slow
        // path below only when nothing fits).
        if h.flags & wanted_modes != 0 && h.frag_free < milli as u16 && h.frag_free != crate::state::HOT_NO_FRAG {
            scan.any_shared = true;
            scan.best_free_milli = scan.best_free_milli.max(h.frag_free as u32);
            continue;
        }
        if !scope.admits(g) {
            continue;
        }
        let gpu = first + offset as GpuIdx;
        scan.any_shared |= matches!(g.units, Units::Mps { .. } | Units::TimeSlice { .. });
        match &g.units {
            Units::Mps { max_clients } if mps => mps_option(g, gpu, *max_clients, ask, &mut scan, out),
            Units::TimeSlice { replicas, memory_per_replica } if time_slice => {
                time_slice_option(g, gpu, *replicas, *memory_per_replica, ask, &mut scan, out)
            }
            Units::Mps { .. } | Units::TimeSlice { .. } => scan.forbidden_mode = Some(g.units.kind()),
            Units::Whole | Units::Mig { .. } => {}
        }
        if out.len() >= OPTIONS_PER_NODE_MAX {
            break;
        }
    }
    if out.is_empty() { Err(scan.reason(gpus, group, ask)) } else { Ok(()) }
}

/// An MPS share on `g` when it has the compute, the memory and a client slot.
fn mps_option(
    g: &GpuState,
    gpu: GpuIdx,
    max_clients: u32,
    ask: ShareAsk,
    scan: &mut ShareScan,
    out: &mut Vec<TaskOption>,
) {
    if g.exclusive {
        return;
    }
    if g.clients >= max_clients {
        scan.blocked = Some(Reason::MpsClientsExhausted { max_clients });
        return;
    }
    scan.best_free_milli = scan.best_free_milli.max(g.free_milli());
    scan.best_free_memory = scan.best_free_memory.max(g.free_memory());
    if g.free_milli() >= ask.milli && g.free_memory() >= ask.memory {
        out.push(TaskOption {
            grants: smallvec::smallvec![Grant::Mps { gpu, milli: ask.milli, memory: ask.memory }],
            level: TopologyLevel::Nvlink,
            unit_memory: ask.memory,
        });
    }
}

/// Time-slice replicas on `g`: enough for the compute asked, and holding its memory.
fn time_slice_option(
    g: &GpuState,
    gpu: GpuIdx,
    replicas: u32,
    memory_per_replica: Bytes,
    ask: ShareAsk,
    scan: &mut ShareScan,
    out: &mut Vec<TaskOption>,
) {
    if g.exclusive {
        return;
    }
    let k = replicas_for(ask.milli, replicas);
    let free = replicas - g.clients;
    scan.best_free_milli = scan.best_free_milli.max(free * 1000 / replicas);
    scan.best_free_memory = scan.best_free_memory.max(free as u64 * memory_per_replica.0);
    if k <= free && k as u64 * memory_per_replica.0 >= ask.memory {
        let memory = k as u64 * memory_per_replica.0;
        out.push(TaskOption {
            grants: smallvec::smallvec![Grant::TimeSlice { gpu, replicas: k, milli: k * 1000 / replicas, memory }],
            level: TopologyLevel::Nvlink,
            unit_memory: memory,
        });
    } else if k <= free && memory_per_replica.0 > 0 {
        let for_memory = ask.memory.div_ceil(memory_per_replica.0);
        if for_memory <= u64::from(free) {
            let share_for_memory = MilliGpu((for_memory as u32 * 1000).div_ceil(replicas));
            let candidate = Reason::ShareMemoryOverBudget {
                need: Bytes(ask.memory),
                share: MilliGpu(ask.milli),
                replicas: k,
                per_replica: memory_per_replica,
                share_for_memory,
            };
            if scan.over_budget.as_ref().is_none_or(|o| o > &candidate) {
                scan.over_budget = Some(candidate);
            }
        }
    }
}

impl ShareScan {
    /// Why no GPU of the node could hold the share, most specific first.
    fn reason(self, gpus: &[GpuState], group: &CompiledGroup, ask: ShareAsk) -> Reason {
        if !self.any_class {
            return class_reason(gpus, group);
        }
        if !self.any_shared {
            let modes = match (ask.mps, ask.time_slice) {
                (true, true) => "MPS or time-slice",
                (true, false) => "MPS",
                _ => "time-slice",
            };
            return Reason::NoSharedGpu { modes: modes.into() };
        }
        if self.best_free_milli >= ask.milli && self.best_free_memory < ask.memory {
            return Reason::InsufficientGpuMemory { need: Bytes(ask.memory), free: Bytes(self.best_free_memory) };
        }
        if let Some(reason) = self.over_budget {
            return reason;
        }
        if self.best_free_milli == 0 {
            if let Some(reason) = self.blocked {
                return reason;
            }
            if let Some(mode) = self.forbidden_mode {
                return Reason::IsolationForbidsMode { isolation: group.isolation, mode: mode.name().into() };
            }
        }
        Reason::InsufficientShare { need: MilliGpu(ask.milli), free: MilliGpu(self.best_free_milli) }
    }
}

/// Smallest unit holding `memory`: a MIG instance, an MPS share, time-slice replicas or, last,
/// a whole GPU. Only the smallest unit size found on the node is offered. With an advisor hint
/// (`CompiledGroup::memory_unit`), units of the recommended kind go first (a whole GPU taken
/// whole where the advice is whole), and a bursty request never gets a MIG instance.
fn memory_only(
    gpus: &[GpuState],
    first: GpuIdx,
    group: &CompiledGroup,
    memory: u64,
    scope: GpuScope,
    out: &mut Vec<TaskOption>,
) -> Result<(), Reason> {
    let mut any_class = false;
    let mut best_free = 0u64;
    let advised = |class: u16| group.memory_unit.get(class as usize).copied().flatten();
    for (offset, g) in gpus.iter().enumerate() {
        if !group.class_ok[g.class as usize] || !scope.admits(g) {
            continue;
        }
        any_class = true;
        if group.memory_no_mig && matches!(g.units, Units::Mig { .. }) {
            continue;
        }
        let gpu = first + offset as GpuIdx;
        let whole_first = advised(g.class) == Some(ModeKind::Whole) && g.wholly_free() && g.memory_total >= memory;
        let option = if whole_first { None } else { smallest_unit(g, gpu, group, memory) };
        let option = option.or_else(|| {
            (g.wholly_free() && g.memory_total >= memory).then_some((Grant::Whole { gpu }, g.memory_total))
        });
        best_free = best_free.max(match &g.units {
            Units::Mig { slots } => slots.iter().filter(|s| !s.taken).map(|s| s.memory).max().unwrap_or(0),
            _ if g.exclusive => 0,
            _ => g.free_memory(),
        });
        if let Some((grant, unit)) = option {
            out.push(TaskOption {
                grants: smallvec::smallvec![grant],
                level: TopologyLevel::Nvlink,
                unit_memory: unit,
            });
        }
    }
    if out.is_empty() {
        return Err(if any_class {
            Reason::InsufficientGpuMemory { need: Bytes(memory), free: Bytes(best_free) }
        } else {
            class_reason(gpus, group)
        });
    }
    if !group.memory_unit.is_empty() {
        keep_advised_kind(gpus, first, group, out);
    }
    let smallest = out.iter().map(|o| o.unit_memory).min().expect("non-empty");
    out.retain(|o| o.unit_memory == smallest);
    out.truncate(OPTIONS_PER_NODE_MAX);
    Ok(())
}

/// The smallest shared unit of `g` holding `memory` (a MIG instance, an MPS share or
/// time-slice replicas) that the group's isolation allows, if any.
fn smallest_unit(g: &GpuState, gpu: GpuIdx, group: &CompiledGroup, memory: u64) -> Option<(Grant, u64)> {
    match &g.units {
        Units::Mig { slots } => slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.taken && s.memory >= memory)
            .min_by_key(|(i, s)| (s.memory, *i))
            .map(|(i, s)| (Grant::Mig { gpu, slot: i as u8 }, s.memory)),
        Units::Mps { max_clients }
            if group.isolation != Isolation::Hard && !g.exclusive && g.clients < *max_clients =>
        {
            let milli = (memory.saturating_mul(1000)).div_ceil(g.memory_total).max(1) as u32;
            (g.free_memory() >= memory && g.free_milli() >= milli)
                .then_some((Grant::Mps { gpu, milli, memory }, memory))
        }
        Units::TimeSlice { replicas, memory_per_replica } if group.isolation == Isolation::None && !g.exclusive => {
            let k = memory.div_ceil(memory_per_replica.0.max(1)).max(1) as u32;
            (g.clients + k <= *replicas).then(|| {
                let unit = k as u64 * memory_per_replica.0;
                (Grant::TimeSlice { gpu, replicas: k, milli: k * 1000 / replicas, memory: unit }, unit)
            })
        }
        _ => None,
    }
}

/// With an advisor hint, only options of the advised kind stay (when there is one).
fn keep_advised_kind(gpus: &[GpuState], first: GpuIdx, group: &CompiledGroup, out: &mut Vec<TaskOption>) {
    let advised = |class: u16| group.memory_unit.get(class as usize).copied().flatten();
    let kind = |o: &TaskOption| {
        let grant = &o.grants[0];
        let g = &gpus[(grant.gpu() - first) as usize];
        let kind = match grant {
            Grant::Whole { .. } => ModeKind::Whole,
            Grant::Mig { .. } => ModeKind::Mig,
            Grant::Mps { .. } => ModeKind::Mps,
            Grant::TimeSlice { .. } => ModeKind::TimeSlice,
        };
        advised(g.class) == Some(kind)
    };
    if out.iter().any(kind) {
        out.retain(kind);
    }
}
