//! The placement pipeline: for each task, filter nodes (typed reasons), score the options,
//! select the best with a seeded tie-break; for a job, place every task on the live state
//! inside a transaction and commit all or roll everything back (gang, all-or-nothing).
//!
//! Rolling back is exact because the ledger's `apply` and `revert` are inverses; the
//! "hypothetical view" of a gang is the state with the gang's tasks applied, never seen outside
//! this module unless the gang commits.

use crate::fit::{self, GpuScope, TaskOption};
use crate::frag::{FragModel, Outlook, Shape};
use crate::index;
use crate::ledger::{self, Grant, TaskGrant};
use crate::limits::SearchLimits;
use crate::memo::{Verdict, VerdictMemo};
use crate::policy::{self, Policy, Score, ScoreContext};
use crate::request::{CompiledGroup, CompiledJob, GpuNeed};
use crate::rng::{SeededRng, mix};
use crate::state::{ClusterState, NodeIdx};
use gantry_types::{Reason, ReasonCount, TopologyLevel, add_reason, add_reason_ref, add_reasons};

/// Work counters, summed over decisions (for benchmarks and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    pub decisions: u64,
    pub nodes_visited: u64,
    pub options_scored: u64,
}

/// Which nodes a task may go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeScope {
    All,
    Rack(u32),
    Node(NodeIdx),
}

/// Scratch state of one decision.
pub(crate) struct Placer<'a> {
    pub state: &'a mut ClusterState,
    pub policy: Policy,
    pub limits: SearchLimits,
    pub shapes: &'a [(Shape, u64)],
    pub outlook: &'a Outlook,
    pub rack_nodes: &'a [Vec<NodeIdx>],
    /// Per node: (version + 1, fragmentation) of the last computation, when the type
    /// distribution is fixed; `None` when it is being learned (values would go stale).
    pub frag_cache: Option<&'a mut Vec<(u32, u64)>>,
    /// Per-node verdicts for single tasks (see `memo`); `None` where they may not be reused.
    pub verdicts: Option<&'a mut VerdictMemo>,
    pub rng: SeededRng,
    pub decision_seed: u64,
    /// Say why a task found no node (the reasons a pending job shows). A planning copy only
    /// asks whether something fits: counting every roomless node by kind for a reason nobody
    /// reads was a quarter of a cycle's time on 10,000 nodes (preemption plans' checks).
    pub explain: bool,
    /// Tasks applied so far in this decision (the gang's transaction).
    pub applied: Vec<TaskGrant>,
    /// Most tasks any attempt of this decision had placed (for `GangIncomplete`).
    most_placed: usize,
    pub stats: SearchStats,
    options: Vec<TaskOption>,
    best_option: TaskOption,
}

impl<'a> Placer<'a> {
    #[allow(clippy::too_many_arguments)] // the decision's inputs, each borrowed from the engine
    pub fn new(
        state: &'a mut ClusterState,
        policy: Policy,
        limits: SearchLimits,
        shapes: &'a [(Shape, u64)],
        outlook: &'a Outlook,
        rack_nodes: &'a [Vec<NodeIdx>],
        frag_cache: Option<&'a mut Vec<(u32, u64)>>,
        verdicts: Option<&'a mut VerdictMemo>,
        decision_seed: u64,
    ) -> Placer<'a> {
        Placer {
            state,
            policy,
            limits,
            shapes,
            outlook,
            rack_nodes,
            frag_cache,
            verdicts,
            rng: SeededRng::new(decision_seed),
            decision_seed,
            explain: true,
            applied: Vec::new(),
            most_placed: 0,
            stats: SearchStats::default(),
            options: Vec::new(),
            best_option: TaskOption { grants: fit::Grants::new(), level: TopologyLevel::Nvlink, unit_memory: 0 },
        }
    }

    /// Place every task of `job`; on failure nothing stays applied.
    pub fn place_job(&mut self, job: &CompiledJob) -> Result<Vec<TaskGrant>, Vec<ReasonCount>> {
        let total = job.task_count();
        for (index, group) in job.groups.iter().enumerate() {
            if let Err(mut reasons) = self.place_group(index as u32, group) {
                let placed = self.most_placed.max(self.applied.len()) as u32;
                self.rollback_to(0);
                if total > 1 {
                    add_reason(&mut reasons, Reason::GangIncomplete { placed, total });
                }
                return Err(reasons);
            }
        }
        Ok(std::mem::take(&mut self.applied))
    }

    fn rollback_to(&mut self, keep: usize) {
        while self.applied.len() > keep {
            let task = self.applied.pop().expect("len > keep");
            ledger::revert(self.state, &task);
        }
    }

    /// Place all replicas of a group, honoring its topology across tasks.
    fn place_group(&mut self, index: u32, group: &CompiledGroup) -> Result<(), Vec<ReasonCount>> {
        let multi_task = group.replicas > 1 && group.gpu.gpu_count() > 0;
        if !multi_task {
            return self.place_replicas(index, group, NodeScope::All, GpuScope::Any);
        }
        let within = group.topology.within;
        let levels: &[TopologyLevel] = if group.topology.required {
            match within {
                TopologyLevel::Nvlink => &[TopologyLevel::Nvlink],
                TopologyLevel::Numa => &[TopologyLevel::Nvlink, TopologyLevel::Numa],
                TopologyLevel::Node => &[TopologyLevel::Node],
                TopologyLevel::Rack | TopologyLevel::Fleet => &[TopologyLevel::Rack],
            }
        } else {
            match within {
                TopologyLevel::Nvlink | TopologyLevel::Numa => &[
                    TopologyLevel::Nvlink,
                    TopologyLevel::Numa,
                    TopologyLevel::Node,
                    TopologyLevel::Rack,
                    TopologyLevel::Fleet,
                ],
                TopologyLevel::Node => &[TopologyLevel::Node, TopologyLevel::Rack, TopologyLevel::Fleet],
                TopologyLevel::Rack | TopologyLevel::Fleet => &[TopologyLevel::Rack, TopologyLevel::Fleet],
            }
        };
        let mut last_reasons = Vec::new();
        for &level in levels {
            for (node_scope, gpu_scope) in self.scopes(group, level) {
                let keep = self.applied.len();
                match self.place_replicas(index, group, node_scope, gpu_scope) {
                    Ok(()) => return Ok(()),
                    Err(reasons) => {
                        self.rollback_to(keep);
                        last_reasons = reasons;
                    }
                }
            }
        }
        if group.topology.required {
            let need = group.replicas * group.gpu.gpu_count();
            last_reasons.insert(0, ReasonCount { reason: Reason::TopologyUnsatisfiable { within, need }, count: 1 });
        }
        Err(last_reasons)
    }

    /// Candidate scopes at `level` that could hold the whole group, best fit first, bounded.
    fn scopes(&self, group: &CompiledGroup, level: TopologyLevel) -> Vec<(NodeScope, GpuScope)> {
        let need = group.replicas * group.gpu.gpu_count();
        let max = self.limits.gang_scopes_max as usize;
        let mut found: Vec<(u32, NodeScope, GpuScope)> = Vec::new();
        match level {
            TopologyLevel::Nvlink | TopologyLevel::Numa => {
                for node in self.walk(group, need) {
                    self.domain_scopes(group, level, node, need, &mut found);
                }
            }
            TopologyLevel::Node => {
                for node in self.walk(group, need) {
                    let free = self.free_in(group, need, node, GpuScope::Any);
                    if free >= need {
                        found.push((free, NodeScope::Node(node), GpuScope::Any));
                    }
                }
            }
            TopologyLevel::Rack => {
                let mut rack_free = vec![0u32; self.rack_nodes.len()];
                for node in self.walk(group, 1) {
                    rack_free[self.state.nodes[node as usize].rack as usize] +=
                        self.free_in(group, need, node, GpuScope::Any);
                }
                for (rack, &free) in rack_free.iter().enumerate() {
                    if free >= need {
                        found.push((free, NodeScope::Rack(rack as u32), GpuScope::Any));
                    }
                }
            }
            TopologyLevel::Fleet => return vec![(NodeScope::All, GpuScope::Any)],
        }
        // Best fit: the smallest scope that can hold the group, ties by a seeded hash.
        found.sort_by_key(|&(free, scope, _)| (free, mix(self.decision_seed ^ scope_key(scope))));
        found.into_iter().take(max).map(|(_, n, g)| (n, g)).collect()
    }

    /// GPUs of `node` within `scope` the group could use now.
    fn free_in(&self, group: &CompiledGroup, need: u32, node: NodeIdx, scope: GpuScope) -> u32 {
        let n = &self.state.nodes[node as usize];
        if matches!(group.gpu, GpuNeed::Whole { .. }) && n.whole_free < need.min(n.gpu_count) && scope == GpuScope::Any
        {
            return n.whole_free;
        }
        self.state
            .node_hot(node)
            .iter()
            .filter(|g| group.class_ok[g.class as usize] && hot_scope_admits(scope, **g) && hot_usable(**g, &group.gpu))
            .count() as u32
    }

    /// Which nodes can count: for whole GPUs only those with `at_least` wholly free ones
    /// (a node without counts 0 in `free_in`), walked through the room index — a gang's
    /// search on a full 100,000-node fleet otherwise visited every node at every level it tried.
    fn walk(&self, group: &CompiledGroup, at_least: u32) -> Box<dyn Iterator<Item = NodeIdx> + '_> {
        let node_count = self.state.nodes.len();
        if matches!(group.gpu, GpuNeed::Whole { .. }) {
            Box::new(index::rotated(self.state.index.whole(at_least), node_count, 0))
        } else {
            Box::new(0..node_count as NodeIdx)
        }
    }

    /// The NVLink domains or NUMA nodes of `node` that could hold the whole group.
    fn domain_scopes(
        &self,
        group: &CompiledGroup,
        level: TopologyLevel,
        node: NodeIdx,
        need: u32,
        found: &mut Vec<(u32, NodeScope, GpuScope)>,
    ) {
        if self.state.nodes[node as usize].whole_free < need && matches!(group.gpu, GpuNeed::Whole { .. }) {
            return;
        }
        let nvlink = level == TopologyLevel::Nvlink;
        let mut domains: Vec<u32> = self
            .state
            .node_hot(node)
            .iter()
            .filter_map(|g| if nvlink { g.nvlink_domain() } else { Some(g.numa as u32) })
            .collect();
        domains.sort_unstable();
        domains.dedup();
        for d in domains {
            let scope = if nvlink { GpuScope::NvlinkDomain(d) } else { GpuScope::Numa(d) };
            let free = self.free_in(group, need, node, scope);
            if free >= need {
                found.push((free, NodeScope::Node(node), scope));
            }
        }
    }

    fn place_replicas(
        &mut self,
        index: u32,
        group: &CompiledGroup,
        nodes: NodeScope,
        gpus: GpuScope,
    ) -> Result<(), Vec<ReasonCount>> {
        for replica in 0..group.replicas {
            let task = self.place_task(index, replica, group, nodes, gpus)?;
            ledger::apply(self.state, &task);
            self.applied.push(task);
            self.most_placed = self.most_placed.max(self.applied.len());
        }
        Ok(())
    }

    /// Filter → score → select for one task. The hot loop of placement: every node a task
    /// may use passes through it, so the per-node work lives in small functions that borrow
    /// only what they read (no per-node allocation beyond the verdict memo's).
    fn place_task(
        &mut self,
        group_index: u32,
        replica: u32,
        group: &CompiledGroup,
        scope: NodeScope,
        gpus: GpuScope,
    ) -> Result<TaskGrant, Vec<ReasonCount>> {
        let mut gang_racks: Vec<u32> = self.applied.iter().map(|t| self.state.nodes[t.node as usize].rack).collect();
        gang_racks.dedup();
        let shape_weight = self.shapes.iter().map(|(_, w)| *w).sum();
        let ctx = ScoreContext {
            policy: self.policy,
            shapes: self.shapes,
            shape_weight,
            outlook: self.outlook,
            gang_racks: &gang_racks,
        };
        let state: &ClusterState = &*self.state;
        let node_count = state.nodes.len();
        // Spreading policies start the walk at a seeded random node; packing policies walk from
        // node 0, so they keep filling the same region of the fleet (better packing under a
        // bounded search, and the nodes they revisit stay in cache).
        let start =
            if node_count > 0 && self.policy.spreads() { self.rng.below(node_count as u64) as usize } else { 0 };
        let mut search = Search::default();
        // A node's verdict depends on nothing but the node and the task here (see `memo`).
        let memo_usable = matches!(scope, NodeScope::All) && gpus == GpuScope::Any && gang_racks.is_empty();
        let (random_gpu, fingerprint, seed) = (self.policy.random_gpu(), group.fingerprint, self.decision_seed);
        for node in candidates(state, self.rack_nodes, group, scope, start) {
            if search.visited >= self.limits.nodes_visited_max || search.feasible >= self.limits.feasible_nodes_max {
                search.stopped_early = true;
                break;
            }
            if group.distinct_nodes && self.applied.iter().any(|t| t.group == group_index && t.node == node) {
                continue;
            }
            if !group.node_selector.is_empty() && !selects(&state.info[node as usize].labels, &group.node_selector) {
                continue;
            }
            if group.exclusive_node && !state.node_idle(node) {
                add_reason(&mut search.reasons, Reason::NodeInUse);
                continue;
            }
            let signature = state.nodes[node as usize].signature;
            if !group.signature_ok[signature as usize] {
                if !matches!(scope, NodeScope::All) {
                    count_signature(&mut search.skipped, signature);
                }
                continue;
            }
            search.visited += 1;
            // Spreading policies break node ties by a seeded hash of the node alone, so every
            // node has one chance whatever its number of GPUs; packing policies by node order
            // (first visited wins: they walk from node 0).
            let hash = if self.policy.spreads() { mix(seed ^ ((node as u64) << 8)) } else { 0 };
            let version = state.nodes[node as usize].version.0;
            let memo = if memo_usable { self.verdicts.as_deref_mut() } else { None };
            if let Some(verdict) = memo.as_deref().and_then(|m| m.get(node, version, fingerprint)) {
                search.weigh(verdict, node, hash, seed, &mut self.best_option);
                continue;
            }
            let verdict = match fit::options(state, node, group, gpus, &mut self.options) {
                Err(reason) => Verdict::Unfit(reason),
                Ok(()) => {
                    self.stats.options_scored += self.options.len() as u64;
                    let frag_cache = self.frag_cache.as_deref_mut();
                    judge_options(state, node, group, &ctx, &self.options, frag_cache, random_gpu)
                }
            };
            search.weigh(&verdict, node, hash, seed, &mut self.best_option);
            if let Some(memo) = memo {
                memo.put(node, version, fingerprint, verdict);
            }
        }
        self.stats.nodes_visited += search.visited as u64;
        self.grant_or_reasons(search, group_index, replica, group, scope, gpus)
    }

    /// The search's end: the best node's grant, or (when asked to explain) every reason the
    /// task found no node.
    fn grant_or_reasons(
        &mut self,
        mut search: Search,
        group_index: u32,
        replica: u32,
        group: &CompiledGroup,
        scope: NodeScope,
        gpus: GpuScope,
    ) -> Result<TaskGrant, Vec<ReasonCount>> {
        let reasons = &mut search.reasons;
        match search.best {
            Some((_, node)) if group.exclusive_node => Ok(self.whole_node(group_index, replica, group, node)),
            Some((_, node)) => Ok(TaskGrant {
                group: group_index,
                replica,
                tag: crate::request::task_tag(&group.gpu).map(|t| t as u8),
                node,
                cpu: group.cpu,
                memory: group.memory,
                grants: self.best_option.grants.to_vec(),
            }),
            None if !self.explain => Err(search.reasons),
            None => {
                if matches!(scope, NodeScope::All) {
                    self.explain_roomless(group, reasons, &mut search.skipped);
                }
                self.static_reasons(group, gpus, &search.skipped, reasons);
                if search.stopped_early {
                    add_reason(reasons, Reason::SearchLimitReached { nodes_visited: search.visited });
                }
                Err(search.reasons)
            }
        }
    }

    /// A task of a group that takes whole nodes, on idle `node`: every CPU, all memory and
    /// every GPU of it (each MIG instance of a MIG GPU), as Slurm's `--exclusive` allocates.
    fn whole_node(&self, group_index: u32, replica: u32, group: &CompiledGroup, node: NodeIdx) -> TaskGrant {
        let state: &ClusterState = &*self.state;
        let n = &state.nodes[node as usize];
        let mut grants = Vec::new();
        for gpu in n.gpu_first..n.gpu_first + n.gpu_count {
            match &state.gpus[gpu as usize].units {
                crate::state::Units::Mig { slots } => {
                    grants.extend((0..slots.len()).map(|slot| Grant::Mig { gpu, slot: slot as u8 }))
                }
                _ => grants.push(Grant::Whole { gpu }),
            }
        }
        TaskGrant {
            group: group_index,
            replica,
            tag: crate::request::task_tag(&group.gpu).map(|t| t as u8),
            node,
            cpu: n.cpu_total,
            memory: n.memory_total,
            grants,
        }
    }

    /// Reasons for the nodes a fleet-wide search never visited because the room index had no
    /// bit for them: derived from the bitsets alone (no node or GPU is read), counted per
    /// kind. Hardware that can never serve the group is counted per signature.
    fn explain_roomless(&self, group: &CompiledGroup, reasons: &mut Vec<ReasonCount>, skipped: &mut Vec<(u16, u32)>) {
        let index = &self.state.index;
        let Some(room) = room_bits(self.state, group) else { return };
        let (mut roomless, mut best_whole) = (0u32, 0u32);
        for (signature, nodes) in self.state.signature_nodes.iter().enumerate() {
            if !group.signature_ok[signature] {
                skipped.push((signature as u16, nodes.len() as u32));
                continue;
            }
            for &node in nodes {
                if index::has(room, node) {
                    continue;
                }
                roomless += 1;
                if let GpuNeed::Whole { count } = group.gpu {
                    let free = (1..count.min(index::WHOLE_BUCKETS as u32 + 1))
                        .rev()
                        .find(|&k| index::has(index.whole(k), node))
                        .unwrap_or(0);
                    best_whole = best_whole.max(free);
                }
            }
        }
        if roomless == 0 {
            return;
        }
        let reason = match &group.gpu {
            GpuNeed::None => return,
            GpuNeed::Whole { count } => Reason::InsufficientWholeGpus { need: *count, free: best_whole },
            GpuNeed::Mig { profile } => Reason::MigProfileUnavailable { profile: profile.clone() },
            GpuNeed::Share { milli, .. } => {
                Reason::InsufficientShare { need: gantry_types::MilliGpu(*milli), free: gantry_types::MilliGpu(0) }
            }
            GpuNeed::Memory { memory } => {
                Reason::InsufficientGpuMemory { need: gantry_types::Bytes(*memory), free: gantry_types::Bytes(0) }
            }
        };
        add_reasons(reasons, reason, roomless);
    }

    /// Why nodes of each skipped signature can never host the group: ask the filter once, on
    /// the signature's first node, and count the reason for all of its nodes.
    fn static_reasons(
        &mut self,
        group: &CompiledGroup,
        gpus: GpuScope,
        skipped: &[(u16, u32)],
        reasons: &mut Vec<ReasonCount>,
    ) {
        for &(signature, nodes) in skipped {
            if nodes == 0 {
                continue;
            }
            let representative = self.state.signature_nodes[signature as usize][0];
            // The hardware's reason, not the node's current load: CPU, memory and taints of one
            // node say nothing about all nodes of its kind.
            let reason = match fit::gpu_options(self.state, representative, group, gpus, &mut self.options) {
                Err(reason) => reason,
                // Free now, yet statically infeasible: only possible through the GPU scope.
                Ok(()) => continue,
            };
            add_reasons(reasons, reason, nodes);
        }
    }
}

/// Whether a node's labels carry every one a group's selector names.
fn selects(labels: &std::collections::BTreeMap<String, String>, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn count_signature(skipped: &mut Vec<(u16, u32)>, signature: u16) {
    match skipped.iter_mut().find(|(s, _)| *s == signature) {
        Some(entry) => entry.1 += 1,
        None => skipped.push((signature, 1)),
    }
}

/// The room bitset to walk for a need; `None` = every node (CPU-only tasks).
fn room_bits<'s>(state: &'s ClusterState, group: &CompiledGroup) -> Option<&'s [u64]> {
    let index = &state.index;
    match &group.gpu {
        GpuNeed::None => None,
        GpuNeed::Whole { count } => Some(index.whole(*count)),
        // One profile index on every class that has the profile (the common case): walk only
        // nodes with a free instance of it.
        GpuNeed::Mig { .. }
            if group.mig_any_mask.count_ones() == 1
                && (group.mig_any_mask.trailing_zeros() as usize) < index::MIG_PROFILES_MAX =>
        {
            Some(&index.mig_profile_room[group.mig_any_mask.trailing_zeros() as usize])
        }
        GpuNeed::Mig { .. } => Some(&index.mig_room),
        GpuNeed::Share { mps: true, time_slice: false, .. } => Some(&index.mps_room),
        GpuNeed::Share { mps: false, time_slice: true, .. } => Some(&index.time_slice_room),
        GpuNeed::Share { .. } => Some(&index.share_room),
        GpuNeed::Memory { .. } => Some(&index.any_room),
    }
}

fn scope_key(scope: NodeScope) -> u64 {
    match scope {
        NodeScope::All => 0,
        NodeScope::Rack(r) => (1 << 40) | r as u64,
        NodeScope::Node(n) => (2 << 40) | n as u64,
    }
}

fn hot_scope_admits(scope: GpuScope, g: crate::state::GpuHot) -> bool {
    match scope {
        GpuScope::Any => true,
        GpuScope::NvlinkDomain(d) => g.nvlink_domain() == Some(d),
        GpuScope::Numa(n) => g.numa as u32 == n,
    }
}

/// Could this GPU serve (part of) the need right now? A quick upper bound for scope choice.
fn hot_usable(g: crate::state::GpuHot, need: &GpuNeed) -> bool {
    match need {
        GpuNeed::Whole { .. } => g.wholly_free(),
        GpuNeed::None => false,
        // Any GPU not held whole might have room for a share, a MIG instance or memory.
        _ => g.wholly_free() || g.frag_free != 0,
    }
}

/// Shape of one task for the fragmentation model.
pub(crate) fn shape_of(group: &CompiledGroup) -> Option<Shape> {
    let (milli, count) = match group.gpu {
        GpuNeed::Whole { count } => (1000, count),
        GpuNeed::Share { milli, .. } => (milli.min(1000), 1),
        GpuNeed::None => (0, 0),
        GpuNeed::Mig { .. } | GpuNeed::Memory { .. } => return None,
    };
    Some(Shape { milli, count, cpu: group.cpu, classes: u64::MAX })
}

/// Observe every task of a job in the learning model.
pub(crate) fn observe(model: &mut FragModel, job: &CompiledJob) {
    for group in &job.groups {
        if let Some(shape) = shape_of(group) {
            for _ in 0..group.replicas {
                model.observe(shape);
            }
        }
    }
}

/// Does a node whose best is `score` (tie-break `hash`) beat the best so far? Node keys, then
/// the node tie-break, then option keys; a complete tie keeps the earlier node.
fn beats(best: &Option<((Score, u64), NodeIdx)>, score: &Score, hash: u64) -> bool {
    match best {
        None => true,
        Some(((s, t), _)) => (score.node, hash, score.option) > (s.node, *t, s.option),
    }
}

/// For policies that draw a node's GPU at random: the node's highest node keys and every
/// option reaching them, with its index (the draw is per decision, so it cannot be kept).
fn tied_of_node(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    ctx: &ScoreContext<'_>,
    options: &[TaskOption],
) -> ([i64; 5], Vec<(u32, TaskOption)>) {
    let mut top: Option<[i64; 5]> = None;
    let mut tied = Vec::new();
    for (i, option) in options.iter().enumerate() {
        let keys = policy::score(state, node, group, option, ctx, 0, 0).node;
        if top.is_none_or(|t| keys > t) {
            top = Some(keys);
            tied.clear();
        }
        if top == Some(keys) {
            tied.push((i as u32, option.clone()));
        }
    }
    (top.expect("a node that passed the filter has at least one option"), tied)
}

/// The decision's draw among a node's tied options: a seeded hash of (node, option index),
/// highest wins, the first on a tie.
fn pick_at_random<'t>(
    node_keys: &[i64; 5],
    tied: &'t [(u32, TaskOption)],
    node: NodeIdx,
    decision_seed: u64,
) -> (Score, &'t TaskOption) {
    let mut pick: Option<(i64, &TaskOption)> = None;
    for (i, option) in tied {
        let draw = (mix(decision_seed ^ ((node as u64) << 8) ^ (*i as u64 + 1)) >> 1) as i64;
        if pick.is_none_or(|(d, _)| draw > d) {
            pick = Some((draw, option));
        }
    }
    let (draw, option) = pick.expect("at least one tied option");
    (Score { node: *node_keys, option: [draw, 0] }, option)
}

/// The best of `options` on `node` (the first of the highest (node keys, option keys)) and
/// its score. Within one node the seeded node hash is the same for every option, so comparing
/// without it picks the same option the fleet-wide comparison would.
fn best_of_node(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    ctx: &ScoreContext<'_>,
    options: &[TaskOption],
    frag_cache: Option<&mut Vec<(u32, u64)>>,
) -> (Score, usize) {
    let frag_before = match frag_cache {
        Some(cache) if ctx.policy.needs_shapes() => {
            let version = state.nodes[node as usize].version.0.wrapping_add(1);
            let entry = &mut cache[node as usize];
            if entry.0 != version {
                *entry = (version, policy::fragmentation_before(state, node, ctx));
            }
            entry.1
        }
        _ => policy::fragmentation_before(state, node, ctx),
    };
    let gathered = policy::gathered(state, node, group, ctx);
    // Options on GPUs with the same free compute lead to the same state: score the first
    // of each (lowest GPU index, which wins ties anyway). (Policies drawing GPUs at random
    // go through `tied_of_node` instead.)
    let mut seen_free: smallvec::SmallVec<[u32; 8]> = smallvec::SmallVec::new();
    let mut node_best: Option<(Score, usize)> = None;
    for (i, option) in options.iter().enumerate() {
        if let [Grant::Mps { gpu, .. } | Grant::TimeSlice { gpu, .. }] = option.grants.as_slice() {
            let free = state.hot[*gpu as usize].frag_free as u32;
            if seen_free.contains(&free) {
                continue;
            }
            seen_free.push(free);
        }
        let score = policy::score(state, node, group, option, ctx, frag_before, gathered);
        if node_best.as_ref().is_none_or(|(b, _)| (score.node, score.option) > (b.node, b.option)) {
            node_best = Some((score, i));
        }
    }
    node_best.expect("a node that passed the filter has at least one option")
}

/// Where one task's search through the nodes stands.
#[derive(Default)]
struct Search {
    best: Option<((Score, u64), NodeIdx)>,
    visited: u32,
    feasible: u32,
    stopped_early: bool,
    reasons: Vec<ReasonCount>,
    /// Nodes skipped for their hardware, counted per signature.
    skipped: Vec<(u16, u32)>,
}

impl Search {
    /// Counts one node's verdict (remembered or fresh) and keeps its best option when it beats
    /// the best so far.
    fn weigh(&mut self, verdict: &Verdict, node: NodeIdx, hash: u64, seed: u64, best_option: &mut TaskOption) {
        let (score, option) = match verdict {
            Verdict::Unfit(reason) => {
                add_reason_ref(&mut self.reasons, reason);
                return;
            }
            Verdict::Best(score, option) => (*score, option),
            Verdict::Tied(node_keys, tied) => pick_at_random(node_keys, tied, node, seed),
        };
        self.feasible += 1;
        if beats(&self.best, &score, hash) {
            self.best = Some(((score, hash), node));
            best_option.clone_from(option);
        }
    }
}

/// The nodes one task's search walks, in order: through the room index where it can say which
/// nodes have room, else every node from `start` round.
fn candidates<'a>(
    state: &'a ClusterState,
    rack_nodes: &'a [Vec<NodeIdx>],
    group: &CompiledGroup,
    scope: NodeScope,
    start: usize,
) -> Box<dyn Iterator<Item = NodeIdx> + 'a> {
    let node_count = state.nodes.len();
    match scope {
        NodeScope::All => match room_bits(state, group) {
            Some(bits) => Box::new(index::rotated(bits, node_count, start)),
            None => Box::new((start..node_count).chain(0..start).map(|n| n as NodeIdx)),
        },
        NodeScope::Rack(r) => Box::new(rack_nodes[r as usize].iter().copied()),
        NodeScope::Node(n) => Box::new(std::iter::once(n)),
    }
}

/// A feasible node's verdict from its options: the best one, or (for policies that pick a
/// GPU at random) every option tied for best.
fn judge_options(
    state: &ClusterState,
    node: NodeIdx,
    group: &CompiledGroup,
    ctx: &ScoreContext<'_>,
    options: &[TaskOption],
    frag_cache: Option<&mut Vec<(u32, u64)>>,
    random_gpu: bool,
) -> Verdict {
    if random_gpu {
        let (node_keys, tied) = tied_of_node(state, node, group, ctx, options);
        Verdict::Tied(node_keys, tied)
    } else {
        let (score, index) = best_of_node(state, node, group, ctx, options, frag_cache);
        Verdict::Best(score, options[index].clone())
    }
}
