//! gantry's scheduler: a pure, synchronous, deterministic placement engine.
//!
//! The key decision: the engine *decides* and never *does*. It owns a model of the fleet (flat
//! vectors, exact integer counters) and answers "where does this job go" with a placement or
//! typed reasons; it never reads a clock, touches a file, spawns a thread or iterates a hash
//! map. Time and a seed are arguments, so the live controller, the simulator and a bug report
//! (a seed and a log) all get the same answers bit for bit. The cost: everything the engine
//! needs must be passed in, and the controller must carry decisions out and re-check them.
//!
//! A decision runs filter → score → select ([`fit`], [`policy`]), per task, on the live state
//! inside a transaction; a job's tasks commit together or are rolled back (gang). Work per
//! decision is bounded by [`SearchLimits`].

pub mod advise;
pub mod backfill;
pub mod consolidate;
pub mod ever;
pub mod fairshare;
pub mod fit;
pub mod frag;
pub mod ids;
pub mod index;
pub mod ledger;
pub mod limits;
mod memo;
pub mod online;
mod place;
pub mod plan;
pub use place::SearchStats;
pub mod policy;
pub mod preempt;
pub mod quota;
pub mod request;
pub mod rng;
pub mod sched;
pub mod state;
#[cfg(test)]
mod test_fleet;

use gantry_catalog::Catalog;
use gantry_types::{Bytes, Fleet, GpuGrant, GpuMode, Job, JobOutcome, MilliCpu, MilliGpu, ReasonCount, TaskPlacement};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use frag::{FragModel, Outlook, Shape};
pub use ledger::{Grant, TaskGrant};
pub use limits::SearchLimits;
pub use policy::Policy;
pub use request::CompiledJob;
pub use state::ClusterState;

/// The taint a drained node carries.
pub const DRAIN_TAINT: &str = "gantry.io/drained";

/// The taint a node carries while its agent is not connected (never registered since the
/// controller started, or silent past the heartbeat timeout).
pub const NOT_READY_TAINT: &str = "gantry.io/not-ready";

/// Errors in what the engine was given (not "does not fit", which is a [`JobOutcome`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("fleet: {0}")]
    Fleet(String),
    #[error("job: {0}")]
    Job(String),
    #[error("no allocation {0}")]
    UnknownAllocation(u64),
    /// A broken ledger invariant (`check_invariants`): a bug, caught by tests and debug checks.
    #[error("ledger invariant broken: {0}")]
    Invariant(String),
}

/// How an engine decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    pub policy: Policy,
    pub seed: u64,
    pub limits: SearchLimits,
    /// FGD's shape distribution; `None` = learn it from the jobs placed.
    pub shapes: Option<Vec<(Shape, u64)>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { policy: Policy::Default, seed: 0, limits: SearchLimits::default(), shapes: None }
    }
}

/// Handle to a committed allocation (all tasks of one job).
pub type AllocId = u64;

/// A committed allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub job: String,
    pub tasks: Vec<TaskGrant>,
}

/// The engine: fleet state, ledger of allocations, policy.
#[derive(Clone, Debug)]
pub struct Engine {
    catalog: &'static Catalog,
    state: ClusterState,
    config: EngineConfig,
    frag: FragModel,
    rack_nodes: Arc<Vec<Vec<state::NodeIdx>>>,
    /// Per-node fragmentation cache (see `Placer::frag_cache`).
    frag_cache: Vec<(u32, u64)>,
    /// Per-node verdicts (see `memo`); `None` where verdicts would depend on a learned
    /// distribution.
    verdicts: Option<memo::VerdictMemo>,
    allocations: BTreeMap<AllocId, Allocation>,
    next_alloc: AllocId,
    decisions: u64,
    stats: SearchStats,
    /// Spare states for planning copies, shared with them.
    spares: backfill::SparePool,
    /// A planning copy (`backfill::planning_copy`): its state goes back to the spare pool
    /// when it is dropped, and its placements neither explain refusals nor teach the
    /// fragmentation model.
    planning: bool,
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.planning {
            self.spares.give_back(&mut self.state, &mut self.frag_cache);
        }
    }
}

impl Engine {
    pub fn new(fleet: &Fleet, catalog: &'static Catalog, config: EngineConfig) -> Result<Engine, EngineError> {
        let state = ClusterState::new(fleet, catalog)?;
        let mut rack_nodes = vec![Vec::new(); state.racks.len()];
        for (i, n) in state.nodes.iter().enumerate() {
            rack_nodes[n.rack as usize].push(i as state::NodeIdx);
        }
        let frag = match &config.shapes {
            Some(shapes) => FragModel::given(shapes),
            None => FragModel::learning(),
        };
        let frag_cache = vec![(0, 0); state.nodes.len()];
        let verdicts = (config.shapes.is_some() || !config.policy.needs_shapes())
            .then(|| memo::VerdictMemo::new(state.nodes.len()));
        Ok(Engine {
            catalog,
            state,
            config,
            frag,
            rack_nodes: Arc::new(rack_nodes),
            frag_cache,
            verdicts,
            allocations: BTreeMap::new(),
            next_alloc: 1,
            decisions: 0,
            stats: SearchStats::default(),
            spares: Default::default(),
            planning: false,
        })
    }

    /// The same engine without the per-node verdict memo (see `memo`): for tests that prove
    /// the memo changes no decision, and for measuring what it saves.
    pub fn without_verdict_memo(mut self) -> Engine {
        self.verdicts = None;
        self
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Work done so far (nodes visited, options scored), for benchmarks and metrics.
    pub fn stats(&self) -> SearchStats {
        self.stats
    }

    pub fn allocations(&self) -> &BTreeMap<AllocId, Allocation> {
        &self.allocations
    }

    /// Billing weight (thousandths) of a GPU's model: listed ones from `billing_milli`
    /// (catalog id → weight), others 1000.
    fn billing_weight(&self, gpu: state::GpuIdx, billing_milli: &[(String, u32)]) -> u64 {
        let id = &self.catalog.model(self.state.gpus[gpu as usize].model).id;
        billing_milli.iter().find(|(m, _)| m == id).map_or(1000, |&(_, w)| w as u64)
    }

    /// What an allocation holds, in fair share's units: billing-weighted milli-GPU, milli-CPU,
    /// MiB of memory.
    pub fn held(&self, id: AllocId, billing_milli: &[(String, u32)]) -> Option<fairshare::Resources> {
        Some(self.held_by(&self.allocations.get(&id)?.tasks, billing_milli))
    }

    /// What a reservation will hold once it starts, in fair share's units (as `held`).
    pub fn planned_held(&self, r: &backfill::Reservation, billing_milli: &[(String, u32)]) -> fairshare::Resources {
        self.held_by(&r.tasks, billing_milli)
    }

    fn held_by(&self, tasks: &[ledger::TaskGrant], billing_milli: &[(String, u32)]) -> fairshare::Resources {
        let mut held = [0u64; fairshare::RESOURCES];
        for task in tasks {
            held[1] += task.cpu as u64;
            held[2] += task.memory >> 20;
            for grant in &task.grants {
                let milli = ledger::grant_milli(&self.state, grant) as u64;
                held[0] += milli * self.billing_weight(grant.gpu(), billing_milli) / 1000;
            }
        }
        held
    }

    /// The fleet's totals in fair share's units.
    pub fn capacity(&self, billing_milli: &[(String, u32)]) -> fairshare::Resources {
        let gpu = (0..self.state.gpus.len()).map(|g| self.billing_weight(g as state::GpuIdx, billing_milli)).sum();
        let cpu = self.state.nodes.iter().map(|n| n.cpu_total as u64).sum();
        let memory = self.state.nodes.iter().map(|n| n.memory_total >> 20).sum();
        [gpu, cpu, memory]
    }

    /// What each node class (the GPUs of one model) has free, and whether `job` accepts it:
    /// the "resources by node class" part of a pending job's explanation. Linear in GPUs.
    pub fn free_by_class(&self, job: &CompiledJob) -> Vec<gantry_types::ClassFree> {
        let mut by_model: BTreeMap<String, gantry_types::ClassFree> = BTreeMap::new();
        let mut per_node: BTreeMap<(String, state::NodeIdx), u32> = BTreeMap::new();
        for gpu in &self.state.gpus {
            let model = self.catalog.model(gpu.model).id.clone();
            let accepted = job.groups.iter().any(|g| g.class_ok.get(gpu.class as usize).copied().unwrap_or(false));
            let entry = by_model.entry(model.clone()).or_insert_with(|| gantry_types::ClassFree {
                model: model.clone(),
                accepted: false,
                nodes: 0,
                max_whole_free_on_node: 0,
                free_milli: 0,
            });
            entry.accepted |= accepted;
            entry.free_milli += gpu.free_milli() as u64;
            let whole = per_node.entry((model, gpu.node)).or_default();
            *whole += gpu.wholly_free() as u32;
        }
        for ((model, _), whole) in per_node {
            let entry = by_model.get_mut(&model).expect("counted above");
            entry.nodes += 1;
            entry.max_whole_free_on_node = entry.max_whole_free_on_node.max(whole);
        }
        by_model.into_values().collect()
    }

    /// Device classes (bit = class index) whose model matches any pattern; all when empty.
    /// Builds the `classes` of a FGD task type from a model constraint.
    pub fn class_mask(&self, patterns: &[gantry_types::ModelPattern]) -> u64 {
        if patterns.is_empty() {
            return u64::MAX;
        }
        self.state
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| patterns.iter().any(|p| self.catalog.model(c.model).names().any(|n| p.matches(n))))
            .fold(0, |m, (i, _)| m | 1u64.checked_shl(i as u32).unwrap_or(0))
    }

    /// The fleet's expected fragment under the engine's task-type distribution, in milli-GPU
    /// (FGD's cluster-level measure). O(fleet); for reports, not for decisions.
    pub fn fragmentation_milli(&mut self) -> f64 {
        let shapes = self.frag.shapes().to_vec();
        let weight: u64 = shapes.iter().map(|(_, w)| *w).sum();
        if weight == 0 {
            return 0.0;
        }
        let total: u64 = (0..self.state.nodes.len() as state::NodeIdx)
            .map(|n| policy::node_fragmentation_of(&self.state, n, &shapes))
            .sum();
        total as f64 / weight as f64
    }

    /// Compile a job against this fleet (selector, classes). Do it once per job.
    pub fn compile(&self, job: &Job) -> Result<CompiledJob, EngineError> {
        request::compile(job, &self.state, self.catalog)
    }

    /// Decide where `job` goes and commit it to the engine's ledger, or say why it cannot go
    /// anywhere (nothing is held then). Deterministic in (state, job, seed, decision count).
    pub fn place(&mut self, job: &CompiledJob) -> Result<AllocId, Vec<ReasonCount>> {
        assert!(self.is_current(job), "job {} was compiled before a reconfiguration: compile it again", job.name);
        self.decisions += 1;
        let decision_seed = rng::mix(self.config.seed ^ rng::mix(self.decisions));
        // A planning copy searches with the live engine's model and does not learn: what it
        // tries are hypotheses, and learning from them made a check's answer depend on how
        // many checks came before it on the same copy.
        if self.config.policy.needs_shapes() && !self.planning {
            place::observe(&mut self.frag, job);
        }
        let none = Outlook::default();
        let (shapes, outlook) =
            if self.config.policy.needs_shapes() { self.frag.shapes_and_outlook() } else { (&[][..], &none) };
        let mut placer = place::Placer::new(
            &mut self.state,
            self.config.policy,
            self.config.limits,
            shapes,
            outlook,
            &self.rack_nodes,
            if self.config.shapes.is_some() { Some(&mut self.frag_cache) } else { None },
            self.verdicts.as_mut(),
            decision_seed,
        );
        placer.explain = !self.planning;
        let result = placer.place_job(job);
        self.stats.decisions += 1;
        self.stats.nodes_visited += placer.stats.nodes_visited;
        self.stats.options_scored += placer.stats.options_scored;
        let tasks = result?;
        let id = self.next_alloc;
        self.next_alloc += 1;
        self.allocations.insert(id, Allocation { job: job.name.clone(), tasks });
        Ok(id)
    }

    /// Commit `job` on exactly these grants (a plan made on a copy of this engine), if they
    /// are all still free; `None` changes nothing. Counts as a decision.
    pub fn place_exact(&mut self, job: &CompiledJob, tasks: &[TaskGrant]) -> Option<AllocId> {
        self.decisions += 1;
        if !ledger::try_apply_all(&mut self.state, tasks) {
            return None;
        }
        let id = self.next_alloc;
        self.next_alloc += 1;
        self.allocations.insert(id, Allocation { job: job.name.clone(), tasks: tasks.to_vec() });
        Some(id)
    }

    /// Take again exactly what a recorded placement (this engine's public form, e.g. from the
    /// store after a restart) held, if all of it is free; `None` changes nothing. How a
    /// restarted controller re-adopts jobs that kept running.
    pub fn place_recorded(&mut self, job: &CompiledJob, placement: &[TaskPlacement]) -> Option<AllocId> {
        let mut tasks = Vec::with_capacity(placement.len());
        for t in placement {
            let node = self.state.node_by_name(&t.node)?;
            let group = job.groups.iter().position(|g| g.name == t.group)?;
            // The node's own GPUs, not the fleet's: re-adopting every running job after a
            // restart scanned all GPUs per grant, O(jobs × GPUs) on a large fleet.
            let first = self.state.nodes[node as usize].gpu_first;
            let gpu_on_node = |index: u32| {
                self.state.node_gpus(node).iter().position(|g| g.index == index).map(|g| first + g as state::GpuIdx)
            };
            let mut grants = Vec::with_capacity(t.gpus.len());
            for g in &t.gpus {
                let idx = gpu_on_node(g.gpu())?;
                grants.push(match g {
                    GpuGrant::Whole { .. } => Grant::Whole { gpu: idx },
                    GpuGrant::Mig { profile, start, .. } => {
                        let gpu = &self.state.gpus[idx as usize];
                        let state::Units::Mig { slots } = &gpu.units else { return None };
                        let geometry = self.catalog.model(gpu.model).mig.as_ref()?;
                        let slot = slots.iter().position(|s| {
                            s.start == *start && geometry.profiles[s.profile as usize].name == *profile
                        })?;
                        Grant::Mig { gpu: idx, slot: slot as u8 }
                    }
                    GpuGrant::Mps { milli, memory, .. } => Grant::Mps { gpu: idx, milli: milli.0, memory: memory.0 },
                    GpuGrant::TimeSlice { replicas, milli, memory, .. } => {
                        Grant::TimeSlice { gpu: idx, replicas: *replicas, milli: milli.0, memory: memory.0 }
                    }
                });
            }
            tasks.push(TaskGrant {
                group: group as u32,
                replica: t.replica,
                tag: crate::request::task_tag(&job.groups[group].gpu).map(|k| k as u8),
                node,
                cpu: t.cpu.0,
                memory: t.memory.0,
                grants,
            });
        }
        self.place_exact(job, &tasks)
    }

    /// Reconfigure one GPU (a MIG layout, MPS, time-slicing or whole): legal per the catalog
    /// and only while nothing is allocated on it — a busy GPU is an error and nothing
    /// changes. Returns whether the mode changed. After a change, jobs compiled before it may
    /// be stale: check [`Engine::is_current`] and compile them again.
    pub fn set_gpu_mode(&mut self, node: &str, index: u32, mode: &GpuMode) -> Result<bool, EngineError> {
        let gpu = self.gpu_by_name(node, index)?;
        let g = &self.state.gpus[gpu as usize];
        let units = state::units_for(self.catalog, g.model, mode)
            .map_err(|e| EngineError::Fleet(format!("node {node} gpu {index}: {e}")))?;
        if units.same_shape(&g.units) {
            return Ok(false);
        }
        if !g.idle() {
            return Err(EngineError::Fleet(format!(
                "node {node} gpu {index} is busy ({} task{} on it): only an idle GPU is reconfigured",
                g.clients.max(1),
                if g.clients.max(1) == 1 { "" } else { "s" }
            )));
        }
        self.state.set_units(gpu, units, self.catalog);
        Ok(true)
    }

    /// [`Engine::place`] on none of the GPUs `avoid` (held for another job that has not
    /// started yet: a preemptor's planned GPUs), cordoned for this placement only.
    pub fn place_avoiding(&mut self, job: &CompiledJob, avoid: &[state::GpuIdx]) -> Result<AllocId, Vec<ReasonCount>> {
        let mut cordoned: Vec<state::GpuIdx> =
            avoid.iter().copied().filter(|&g| !self.state.gpus[g as usize].cordoned).collect();
        cordoned.sort_unstable();
        cordoned.dedup();
        for &g in &cordoned {
            self.state.set_cordoned(g, true);
        }
        let placed = self.place(job);
        for &g in &cordoned {
            self.state.set_cordoned(g, false);
        }
        placed
    }

    /// Cordon (or uncordon) one GPU: while cordoned nothing new is placed on it and what runs
    /// keeps running — how the online planner empties a GPU it wants to reconfigure. Returns
    /// whether anything changed.
    pub fn set_gpu_cordoned(&mut self, node: &str, index: u32, on: bool) -> Result<bool, EngineError> {
        let gpu = self.gpu_by_name(node, index)?;
        if self.state.gpus[gpu as usize].cordoned == on {
            return Ok(false);
        }
        self.state.set_cordoned(gpu, on);
        Ok(true)
    }

    /// The slot (`state().gpus` index) of GPU `index` on `node`.
    pub fn gpu_by_name(&self, node: &str, index: u32) -> Result<state::GpuIdx, EngineError> {
        let n = self.state.node_by_name(node).ok_or_else(|| EngineError::Fleet(format!("no node {node:?}")))?;
        let n = &self.state.nodes[n as usize];
        (n.gpu_first..n.gpu_first + n.gpu_count)
            .find(|&g| self.state.gpus[g as usize].index == index)
            .ok_or_else(|| EngineError::Fleet(format!("node {node} has no GPU {index}")))
    }

    /// The fleet as it is now: every node with its GPUs in their current modes (after any
    /// reconfiguration), as a fleet file would say it. What the online planner starts from.
    pub fn fleet_now(&self) -> Fleet {
        Fleet { nodes: (0..self.state.nodes.len()).map(|n| self.node_now(n as state::NodeIdx)).collect() }
    }

    /// One node as it is now (what [`Engine::fleet_now`] says of it): for a question about one
    /// node, without building the whole fleet (an agent registering on a fleet of thousands).
    pub fn node_now(&self, n: state::NodeIdx) -> gantry_types::Node {
        let (node, info) = (&self.state.nodes[n as usize], &self.state.info[n as usize]);
        gantry_types::Node {
            name: info.name.clone(),
            cpu: MilliCpu(node.cpu_total),
            memory: Bytes(node.memory_total),
            labels: info.labels.clone(),
            taints: info.taints.clone(),
            rack: Some(self.state.racks[node.rack as usize].clone()).filter(|r| !r.is_empty()),
            block: None,
            gpus: self
                .state
                .node_gpus(n)
                .iter()
                .zip(&self.state.uuids[node.gpu_first as usize..])
                .map(|(g, uuid)| {
                    let model = self.catalog.model(g.model);
                    let mode = self.mode_of(g);
                    gantry_types::Gpu {
                        index: g.index,
                        model: model.id.clone(),
                        uuid: uuid.clone(),
                        numa: g.numa,
                        pcie_switch: g.pcie_switch,
                        nvlink_domain: g.nvlink_domain,
                        mode,
                    }
                })
                .collect(),
        }
    }

    /// The mode of the GPU in slot `gpu` (`state().gpus` order).
    pub fn gpu_mode(&self, gpu: usize) -> GpuMode {
        self.mode_of(&self.state.gpus[gpu])
    }

    fn mode_of(&self, g: &state::GpuState) -> GpuMode {
        match &g.units {
            state::Units::Whole => GpuMode::Whole,
            state::Units::Mig { slots } => {
                let geometry = self.catalog.model(g.model).mig.as_ref().expect("a MIG GPU's model has MIG geometry");
                GpuMode::Mig {
                    instances: slots
                        .iter()
                        .map(|s| gantry_types::MigInstanceSpec {
                            profile: geometry.profiles[s.profile as usize].name.clone(),
                            start: s.start,
                        })
                        .collect(),
                }
            }
            state::Units::Mps { max_clients } => GpuMode::Mps { max_clients: *max_clients },
            state::Units::TimeSlice { replicas, memory_per_replica } => {
                GpuMode::TimeSlice { replicas: *replicas, memory_per_replica: *memory_per_replica }
            }
        }
    }

    /// Was `job` compiled against this fleet's current device classes and node signatures?
    /// (False only after a reconfiguration added a new one.)
    pub fn is_current(&self, job: &CompiledJob) -> bool {
        job.tables == (self.state.classes.len(), self.state.signatures.len())
    }

    /// Drain (or resume) a node: a drained node carries the taint `gantry.io/drained` (effect
    /// NoSchedule), so nothing new is placed there while what runs keeps running. Returns
    /// whether anything changed; an unknown node is an error.
    pub fn set_drained(&mut self, node: &str, drained: bool) -> Result<bool, EngineError> {
        self.set_mark(node, DRAIN_TAINT, drained)
    }

    /// Is this node drained?
    pub fn is_drained(&self, node: &str) -> bool {
        self.has_mark(node, DRAIN_TAINT)
    }

    /// Put on (or take off) one of gantry's own NoSchedule taints ([`DRAIN_TAINT`],
    /// [`NOT_READY_TAINT`]): nothing new is placed on a marked node; what runs keeps running.
    /// Returns whether anything changed; an unknown node is an error.
    pub fn set_mark(&mut self, node: &str, key: &str, on: bool) -> Result<bool, EngineError> {
        let idx =
            self.state.node_by_name(node).ok_or_else(|| EngineError::Fleet(format!("no node {node:?}")))? as usize;
        let present = self.state.info[idx].taints.iter().any(|t| t.key == key);
        if present == on {
            return Ok(false);
        }
        let taints = &mut Arc::make_mut(&mut self.state.info)[idx].taints;
        if on {
            taints.push(gantry_types::Taint { key: key.into(), value: String::new(), effect: "NoSchedule".into() });
        } else {
            taints.retain(|t| t.key != key);
        }
        self.state.nodes[idx].has_taints = !self.state.info[idx].taints.is_empty();
        // A new node version: remembered verdicts for it no longer apply.
        self.state.refresh_summary(idx as state::NodeIdx);
        Ok(true)
    }

    /// Does this node carry the taint `key`?
    pub fn has_mark(&self, node: &str, key: &str) -> bool {
        self.state.node_by_name(node).is_some_and(|n| self.state.info[n as usize].taints.iter().any(|t| t.key == key))
    }

    /// Release a committed allocation; capacity returns exactly.
    pub fn release(&mut self, id: AllocId) -> Result<Allocation, EngineError> {
        let allocation = self.allocations.remove(&id).ok_or(EngineError::UnknownAllocation(id))?;
        for task in allocation.tasks.iter().rev() {
            ledger::revert(&mut self.state, task);
        }
        Ok(allocation)
    }

    /// Place and describe the result in the public, stable form.
    pub fn place_outcome(&mut self, job: &CompiledJob) -> (Option<AllocId>, JobOutcome) {
        match self.place(job) {
            Ok(id) => {
                let tasks = self.describe(id, job);
                (Some(id), JobOutcome::Placed { tasks })
            }
            Err(reasons) => (None, JobOutcome::Unplaced { reasons }),
        }
    }

    /// Where allocation `id` (of `job`) put each task, in the public form; `None` if unknown.
    pub fn placement(&self, id: AllocId, job: &CompiledJob) -> Option<Vec<TaskPlacement>> {
        self.allocations.contains_key(&id).then(|| self.describe(id, job))
    }

    fn describe(&self, id: AllocId, job: &CompiledJob) -> Vec<TaskPlacement> {
        let allocation = &self.allocations[&id];
        allocation
            .tasks
            .iter()
            .map(|t| TaskPlacement {
                group: job.groups[t.group as usize].name.clone(),
                replica: t.replica,
                node: self.state.info[t.node as usize].name.clone(),
                cpu: MilliCpu(t.cpu),
                memory: Bytes(t.memory),
                gpus: t.grants.iter().map(|g| self.public_grant(g)).collect(),
            })
            .collect()
    }

    fn public_grant(&self, grant: &Grant) -> GpuGrant {
        let gpu = &self.state.gpus[grant.gpu() as usize];
        match grant {
            Grant::Whole { .. } => GpuGrant::Whole { gpu: gpu.index },
            Grant::Mig { slot, .. } => {
                let state::Units::Mig { slots } = &gpu.units else { unreachable!("MIG grant on a MIG GPU") };
                let s = &slots[*slot as usize];
                let geometry = self.catalog.model(gpu.model).mig.as_ref().expect("MIG GPU has geometry");
                GpuGrant::Mig {
                    gpu: gpu.index,
                    profile: geometry.profiles[s.profile as usize].name.clone(),
                    start: s.start,
                }
            }
            Grant::Mps { milli, memory, .. } => GpuGrant::Mps {
                gpu: gpu.index,
                milli: MilliGpu(*milli),
                active_thread_percentage: milli.div_ceil(10),
                memory: Bytes(*memory),
            },
            Grant::TimeSlice { replicas, milli, memory, .. } => GpuGrant::TimeSlice {
                gpu: gpu.index,
                replicas: *replicas,
                milli: MilliGpu(*milli),
                memory: Bytes(*memory),
            },
        }
    }

    /// Recompute every counter from the ledger and compare (tests, debug).
    pub fn check_invariants(&self) -> Result<(), EngineError> {
        ledger::check_invariants(&self.state, self.allocations.values().flat_map(|a| a.tasks.iter()))
    }
}
