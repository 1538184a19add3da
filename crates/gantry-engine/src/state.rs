//! The engine's view of the fleet: flat vectors indexed by dense ids, so a decision touches a
//! few cache lines per node and the whole state of 80,000 GPUs stays small.
//!
//! Capacity is kept per GPU as counters (milli-GPU used, memory used, clients) plus, for MIG
//! GPUs, one slot per instance of the validated layout. The ledger (`ledger.rs`) is the only
//! code that changes these counters, and it changes them by exact inverse operations.

use crate::EngineError;
use crate::limits::GPUS_PER_NODE_MAX;
use gantry_catalog::{Catalog, ModelId};
use gantry_selector::DeviceAttributes;
use gantry_types::{Bytes, Fleet, GpuMode, Taint};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::ids::{GpuIdx, NodeIdx};

/// How a GPU hands out capacity; the mode's static part (counters live on [`GpuState`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Units {
    Whole,
    Mig { slots: Vec<MigSlot> },
    Mps { max_clients: u32 },
    TimeSlice { replicas: u32, memory_per_replica: Bytes },
}

impl Units {
    /// The same mode and layout, whatever is allocated on it.
    pub fn same_shape(&self, other: &Units) -> bool {
        match (self, other) {
            (Units::Mig { slots: a }, Units::Mig { slots: b }) => {
                let shape = |slots: &[MigSlot]| {
                    let mut v: Vec<(u8, u8)> = slots.iter().map(|s| (s.start, s.profile)).collect();
                    v.sort_unstable();
                    v
                };
                shape(a) == shape(b)
            }
            _ => self == other,
        }
    }

    pub fn kind(&self) -> ModeKind {
        match self {
            Units::Whole => ModeKind::Whole,
            Units::Mig { .. } => ModeKind::Mig,
            Units::Mps { .. } => ModeKind::Mps,
            Units::TimeSlice { .. } => ModeKind::TimeSlice,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModeKind {
    Whole,
    Mig,
    Mps,
    TimeSlice,
}

impl ModeKind {
    pub fn name(self) -> &'static str {
        match self {
            ModeKind::Whole => "whole",
            ModeKind::Mig => "mig",
            ModeKind::Mps => "mps",
            ModeKind::TimeSlice => "time-slice",
        }
    }
}

/// One MIG GPU instance of a GPU's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigSlot {
    /// Index into the model's `MigGeometry::profiles`.
    pub profile: u8,
    pub start: u8,
    pub milli: u32,
    pub memory: u64,
    pub taken: bool,
}

/// A GPU and what is left of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuState {
    pub node: NodeIdx,
    /// Index on its node.
    pub index: u32,
    pub model: ModelId,
    /// Device class (model × mode × NVLink): selectors and model constraints are evaluated per
    /// class, once per job.
    pub class: u16,
    pub numa: u32,
    pub pcie_switch: u32,
    pub nvlink_domain: Option<u32>,
    pub memory_total: u64,
    pub units: Units,
    /// Compute handed out, 0..=1000.
    pub used_milli: u32,
    /// Memory handed out, 0..=memory_total.
    pub used_memory: u64,
    /// MPS clients, time-slice replicas or MIG instances handed out.
    pub clients: u32,
    /// Held whole by one task (a whole grant; on an MPS or time-slice GPU, only when idle).
    pub exclusive: bool,
    /// Draining: nothing new is placed on it, what runs keeps running (the online planner
    /// empties a GPU this way before reconfiguring it).
    pub cordoned: bool,
}

impl GpuState {
    /// Nothing at all is allocated on this GPU.
    pub fn idle(&self) -> bool {
        self.clients == 0 && !self.exclusive
    }

    /// Can this GPU be granted whole right now?
    pub fn wholly_free(&self) -> bool {
        self.idle() && !self.cordoned && !matches!(self.units, Units::Mig { .. })
    }

    pub fn free_milli(&self) -> u32 {
        1000 - self.used_milli
    }

    pub fn free_memory(&self) -> u64 {
        self.memory_total - self.used_memory
    }
}

/// The few facts about a GPU that the hot paths read (whole-GPU filtering, topology choice,
/// fragmentation), packed in 8 bytes so one node's GPUs share a cache line. Derived from
/// [`GpuState`] by [`GpuHot::of`] after every change; `check_invariants` verifies it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuHot {
    pub class: u16,
    /// Free compute as fragmentation counts it; `HOT_NO_FRAG` for MIG GPUs.
    pub frag_free: u16,
    pub numa: u8,
    /// NVLink domain, `HOT_NO_NVLINK` when the GPU has none.
    pub nvlink: u8,
    pub flags: u8,
}

pub const HOT_NO_FRAG: u16 = u16::MAX;
pub const HOT_NO_NVLINK: u8 = u8::MAX;
/// The GPU can be granted whole now.
pub const HOT_WHOLLY_FREE: u8 = 1;
/// The GPU is in whole mode (not MIG, MPS or time-slice).
pub const HOT_WHOLE_MODE: u8 = 2;
/// The GPU is in MPS mode.
pub const HOT_MPS: u8 = 4;
/// The GPU is time-sliced.
pub const HOT_TIME_SLICE: u8 = 8;

/// Free compute of a GPU as fragmentation counts it, or `None` for GPUs outside the measure
/// (MIG: they hand out fixed instances).
pub fn gpu_free(g: &GpuState) -> Option<u32> {
    match g.units {
        Units::Mig { .. } => None,
        _ if g.exclusive => Some(0),
        Units::Whole => Some(1000),
        _ => Some(1000 - g.used_milli),
    }
}

impl GpuHot {
    pub fn of(g: &GpuState) -> GpuHot {
        let mut flags = 0;
        if g.wholly_free() {
            flags |= HOT_WHOLLY_FREE;
        }
        flags |= match g.units {
            Units::Whole => HOT_WHOLE_MODE,
            Units::Mps { .. } => HOT_MPS,
            Units::TimeSlice { .. } => HOT_TIME_SLICE,
            Units::Mig { .. } => 0,
        };
        GpuHot {
            class: g.class,
            frag_free: gpu_free(g).map_or(HOT_NO_FRAG, |f| f as u16),
            numa: g.numa as u8,
            nvlink: g.nvlink_domain.map_or(HOT_NO_NVLINK, |d| d as u8),
            flags,
        }
    }

    pub fn wholly_free(self) -> bool {
        self.flags & HOT_WHOLLY_FREE != 0
    }

    pub fn whole_mode(self) -> bool {
        self.flags & HOT_WHOLE_MODE != 0
    }

    pub fn nvlink_domain(self) -> Option<u32> {
        (self.nvlink != HOT_NO_NVLINK).then_some(self.nvlink as u32)
    }
}

/// What the search never changes and rarely reads about a node, kept apart from
/// [`NodeState`] so the counters the hot path reads fit one cache line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// A node's capacity and what is left of it: 64 bytes, one cache line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(align(64))]
pub struct NodeState {
    pub cpu_total: u32,
    pub cpu_free: u32,
    pub memory_total: u64,
    pub memory_free: u64,
    /// The node has taints (look them up in `NodeInfo` only then).
    pub has_taints: bool,
    pub rack: u32,
    /// GPUs of this node are `gpu_first .. gpu_first + gpu_count` in `ClusterState::gpus`.
    pub gpu_first: GpuIdx,
    pub gpu_count: u32,
    /// Non-MIG GPUs that are idle (grantable whole), kept in step by the ledger.
    pub whole_free: u32,
    /// Compute handed out on this node's GPUs, in milli-GPU (for fast scoring).
    pub used_milli: u32,
    /// Index into `ClusterState::signatures`.
    pub signature: u16,
    /// Largest compute one more MPS client or time-slice task could get on one GPU here.
    pub max_share_free: u32,
    /// Bit per MIG profile index with at least one free instance on this node.
    pub mig_free_mask: u32,
    /// Bumped by the ledger on every change to the node (for caches of per-node values).
    pub version: CacheVersion,
}

/// A change counter for caches. Not part of a node's logical state: two nodes with the same
/// capacity and allocations are equal whatever their counters say, so a rolled-back gang
/// still leaves an *equal* state behind.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheVersion(pub u32);

impl PartialEq for CacheVersion {
    fn eq(&self, _: &CacheVersion) -> bool {
        true
    }
}

impl Eq for CacheVersion {}

/// What a node's hardware can ever offer: its GPUs' device classes and, for MIG GPUs, which
/// profiles their layouts hold. Nodes with equal signatures are interchangeable for static
/// feasibility, so a job decides once per signature which nodes are worth visiting.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signature {
    /// Per GPU: (device class, bit mask of MIG profile indices in its layout), sorted.
    pub gpus: Vec<(u16, u32)>,
}

/// A device class: GPUs that look the same to a job's model constraints and selector.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceClass {
    pub model: ModelId,
    pub mode: ModeKind,
    pub nvlink: bool,
    pub attributes: DeviceAttributes,
}

/// The whole fleet as the engine sees it.
#[derive(Debug, PartialEq)]
pub struct ClusterState {
    pub nodes: Vec<NodeState>,
    /// Names, labels and taints; same indices as `nodes`. The tables that allocations never
    /// change are shared (`Arc`), so a planning copy of the state copies counters, not names:
    /// the scheduling cycle makes such copies for reservations and preemption plans.
    pub info: Arc<Vec<NodeInfo>>,
    /// Node index by name: an agent's every heartbeat names its node, and a scan of `info`
    /// per heartbeat grows with the fleet.
    pub names: Arc<BTreeMap<String, NodeIdx>>,
    pub gpus: Vec<GpuState>,
    /// Each GPU's UUID, same indices as `gpus`.
    pub uuids: Arc<Vec<String>>,
    pub classes: Arc<Vec<DeviceClass>>,
    pub racks: Arc<Vec<String>>,
    pub signatures: Arc<Vec<Signature>>,
    /// Nodes of each signature, ascending.
    pub signature_nodes: Arc<Vec<Vec<NodeIdx>>>,
    /// Sum of every GPU's capacity, in milli-GPU.
    pub total_milli: u64,
    /// Compute handed out across the fleet, kept in step by the ledger.
    pub used_milli_total: u64,
    /// Which nodes have room, kept in step by the ledger.
    pub index: crate::index::FreeIndex,
    /// `GpuHot` of every GPU, same indices as `gpus`.
    pub hot: Vec<GpuHot>,
    /// Largest node CPU and GPU capacity in the fleet (policies normalize by them).
    pub max_node_cpu: u32,
    pub max_node_gpu_milli: u32,
    /// Per node, tasks running by kind (see [`crate::request::task_tag`]), for GPU clustering.
    pub node_tags: Vec<[u16; TASK_TAGS]>,
}

impl Clone for ClusterState {
    fn clone(&self) -> Self {
        let mut copy = ClusterState::empty();
        copy.clone_from(self);
        copy
    }

    /// Field by field, so `self`'s vectors keep their allocations: a planning copy made from a
    /// spare state allocates nothing on a fleet of whole GPUs (`backfill`). The source is taken
    /// apart whole, so a field added to the state and not copied here does not compile.
    fn clone_from(&mut self, source: &Self) {
        let ClusterState {
            nodes,
            info,
            names,
            gpus,
            uuids,
            classes,
            racks,
            signatures,
            signature_nodes,
            total_milli,
            used_milli_total,
            index,
            hot,
            max_node_cpu,
            max_node_gpu_milli,
            node_tags,
        } = source;
        self.nodes.clone_from(nodes);
        self.info.clone_from(info);
        self.names.clone_from(names);
        self.gpus.clone_from(gpus);
        self.uuids.clone_from(uuids);
        self.classes.clone_from(classes);
        self.racks.clone_from(racks);
        self.signatures.clone_from(signatures);
        self.signature_nodes.clone_from(signature_nodes);
        self.total_milli = *total_milli;
        self.used_milli_total = *used_milli_total;
        self.index.clone_from(index);
        self.hot.clone_from(hot);
        self.max_node_cpu = *max_node_cpu;
        self.max_node_gpu_milli = *max_node_gpu_milli;
        self.node_tags.clone_from(node_tags);
    }
}

/// Task kinds counted per node: 0 = a GPU share, k = k whole GPUs (1..=8), 9 = other.
pub const TASK_TAGS: usize = 10;

impl ClusterState {
    /// A state of no nodes (what a planning copy leaves behind when its state is kept).
    pub fn empty() -> ClusterState {
        ClusterState {
            nodes: Vec::new(),
            info: Arc::default(),
            names: Arc::default(),
            gpus: Vec::new(),
            uuids: Arc::default(),
            classes: Arc::default(),
            racks: Arc::default(),
            signatures: Arc::default(),
            signature_nodes: Arc::default(),
            total_milli: 0,
            used_milli_total: 0,
            index: crate::index::FreeIndex::new(0),
            hot: Vec::new(),
            max_node_cpu: 0,
            max_node_gpu_milli: 0,
            node_tags: Vec::new(),
        }
    }

    /// Build from a resolved fleet. Models must be catalog ids; MIG layouts are validated again
    /// here because the engine trusts nothing it did not check.
    pub fn new(fleet: &Fleet, catalog: &Catalog) -> Result<ClusterState, EngineError> {
        let mut state = ClusterState {
            index: crate::index::FreeIndex::new(fleet.nodes.len()),
            node_tags: vec![[0; TASK_TAGS]; fleet.nodes.len()],
            ..ClusterState::empty()
        };
        let mut ids = Ids::default();
        let mut names = std::collections::BTreeSet::new();
        for node in &fleet.nodes {
            if !names.insert(node.name.as_str()) {
                return Err(EngineError::Fleet(format!("node {} appears twice", node.name)));
            }
            if node.gpus.len() > GPUS_PER_NODE_MAX {
                return Err(EngineError::Fleet(format!(
                    "node {} has {} GPUs, at most {GPUS_PER_NODE_MAX} supported",
                    node.name,
                    node.gpus.len()
                )));
            }
            state.add_node(node, catalog, &mut ids)?;
        }
        Ok(state)
    }

    /// Add `node` (checked by the caller for its name and GPU count) and its GPUs.
    fn add_node(&mut self, node: &gantry_types::Node, catalog: &Catalog, ids: &mut Ids) -> Result<(), EngineError> {
        let rack = ids.rack(self, node.rack.clone().unwrap_or_default());
        let node_idx = self.nodes.len() as NodeIdx;
        let gpu_first = self.gpus.len() as GpuIdx;
        for gpu in &node.gpus {
            self.add_gpu(node, node_idx, gpu, catalog, ids)?;
        }
        let gpus = &self.gpus[gpu_first as usize..];
        let whole_free = gpus.iter().filter(|g| g.wholly_free()).count() as u32;
        let signature = ids.signature(self, gpu_first, node_idx);
        self.max_node_cpu = self.max_node_cpu.max(node.cpu.0);
        self.max_node_gpu_milli = self.max_node_gpu_milli.max(node.gpus.len() as u32 * 1000);
        Arc::make_mut(&mut self.names).insert(node.name.clone(), node_idx);
        Arc::make_mut(&mut self.info).push(NodeInfo {
            name: node.name.clone(),
            labels: node.labels.clone(),
            taints: node.taints.clone(),
        });
        self.nodes.push(NodeState {
            cpu_total: node.cpu.0,
            cpu_free: node.cpu.0,
            memory_total: node.memory.0,
            memory_free: node.memory.0,
            has_taints: !node.taints.is_empty(),
            rack,
            gpu_first,
            gpu_count: node.gpus.len() as u32,
            whole_free,
            used_milli: 0,
            signature,
            max_share_free: 0,
            mig_free_mask: 0,
            version: CacheVersion(0),
        });
        self.refresh_summary(node_idx);
        Ok(())
    }

    /// Add one GPU of `node`: its model and mode checked against the catalog, its device class.
    fn add_gpu(
        &mut self,
        node: &gantry_types::Node,
        node_idx: NodeIdx,
        gpu: &gantry_types::Gpu,
        catalog: &Catalog,
        ids: &mut Ids,
    ) -> Result<(), EngineError> {
        if gpu.numa >= 255 || gpu.nvlink_domain.is_some_and(|d| d >= HOT_NO_NVLINK as u32) {
            return Err(EngineError::Fleet(format!(
                "node {} gpu {}: NUMA node and NVLink domain ids must be below 255",
                node.name, gpu.index
            )));
        }
        let model = catalog.lookup(&gpu.model).ok_or_else(|| {
            EngineError::Fleet(format!("node {} gpu {}: unknown model {}", node.name, gpu.index, gpu.model))
        })?;
        let units = units_for(catalog, model, &gpu.mode)
            .map_err(|e| EngineError::Fleet(format!("node {} gpu {}: {e}", node.name, gpu.index)))?;
        let class = ids.class(self, catalog, model, units.kind(), gpu.nvlink_domain.is_some());
        self.gpus.push(GpuState {
            node: node_idx,
            index: gpu.index,
            model,
            class,
            numa: gpu.numa,
            pcie_switch: gpu.pcie_switch,
            nvlink_domain: gpu.nvlink_domain,
            memory_total: catalog.model(model).memory.0,
            units,
            used_milli: 0,
            used_memory: 0,
            clients: 0,
            exclusive: false,
            cordoned: false,
        });
        Arc::make_mut(&mut self.uuids).push(gpu.uuid.clone());
        self.total_milli += 1000;
        let last = self.gpus.last().expect("just pushed");
        self.hot.push(GpuHot::of(last));
        Ok(())
    }

    /// Recompute a node's free-capacity summaries from its GPUs (the ledger calls this after
    /// every change on the node; it touches only that node's GPUs).
    pub fn refresh_summary(&mut self, node: NodeIdx) {
        let (mut share, mut mig) = (0u32, 0u32);
        let (mut mps, mut time_slice) = (false, false);
        for g in self.node_gpus(node).iter().filter(|g| !g.cordoned) {
            match &g.units {
                Units::Mps { max_clients } if !g.exclusive && g.clients < *max_clients && g.free_milli() > 0 => {
                    share = share.max(g.free_milli());
                    mps = true;
                }
                Units::TimeSlice { replicas, .. } if !g.exclusive && g.clients < *replicas => {
                    share = share.max(g.free_milli());
                    time_slice = true;
                }
                Units::Mig { slots } => mig |= slots.iter().filter(|s| !s.taken).fold(0, |m, s| m | 1 << s.profile),
                _ => {}
            }
        }
        let n = &mut self.nodes[node as usize];
        n.max_share_free = share;
        n.mig_free_mask = mig;
        n.version = CacheVersion(n.version.0.wrapping_add(1));
        let room = crate::index::Room { whole_free: n.whole_free, mps, time_slice, mig_free_mask: mig };
        self.index.update(node, room);
    }

    /// Give an idle GPU new units (a reconfiguration: a MIG layout applied, MPS or
    /// time-slicing switched on or off). Its device class and its node's signature follow.
    /// Returns whether the class or signature tables grew: jobs compiled before then must be
    /// compiled again (see `Engine::is_current`). The caller checks that the GPU is idle.
    pub fn set_units(&mut self, gpu: GpuIdx, units: Units, catalog: &Catalog) -> bool {
        let mut grew = false;
        let g = &self.gpus[gpu as usize];
        let (model, kind, nvlink) = (g.model, units.kind(), g.nvlink_domain.is_some());
        let class = match self.classes.iter().position(|c| c.model == model && c.mode == kind && c.nvlink == nvlink) {
            Some(c) => c as u16,
            None => {
                Arc::make_mut(&mut self.classes).push(device_class(catalog, model, kind, nvlink));
                grew = true;
                self.classes.len() as u16 - 1
            }
        };
        let node = g.node;
        let g = &mut self.gpus[gpu as usize];
        g.units = units;
        g.class = class;
        self.refresh_hot(gpu);
        let mut signature = Signature { gpus: self.node_gpus(node).iter().map(|g| (g.class, mig_mask(g))).collect() };
        signature.gpus.sort_unstable();
        let old = self.nodes[node as usize].signature as usize;
        let new = match self.signatures.iter().position(|s| *s == signature) {
            Some(s) => s,
            None => {
                Arc::make_mut(&mut self.signatures).push(signature);
                Arc::make_mut(&mut self.signature_nodes).push(Vec::new());
                grew = true;
                self.signatures.len() - 1
            }
        };
        if new != old {
            let signature_nodes = Arc::make_mut(&mut self.signature_nodes);
            signature_nodes[old].retain(|&n| n != node);
            let list = &mut signature_nodes[new];
            let at = list.partition_point(|&n| n < node);
            list.insert(at, node);
            self.nodes[node as usize].signature = new as u16;
        }
        self.recount_node(node);
        grew
    }

    /// Cordon (or uncordon) a GPU: nothing new goes there while it is cordoned.
    pub fn set_cordoned(&mut self, gpu: GpuIdx, on: bool) {
        self.gpus[gpu as usize].cordoned = on;
        self.refresh_hot(gpu);
        self.recount_node(self.gpus[gpu as usize].node);
    }

    /// Recount a node's whole-free GPUs and summaries after a GPU changed outside the ledger.
    fn recount_node(&mut self, node: NodeIdx) {
        let whole_free = self.node_gpus(node).iter().filter(|g| g.wholly_free()).count() as u32;
        self.nodes[node as usize].whole_free = whole_free;
        self.refresh_summary(node);
    }

    /// Re-derive one GPU's hot record (the ledger calls this after changing the GPU).
    pub fn refresh_hot(&mut self, gpu: GpuIdx) {
        self.hot[gpu as usize] = GpuHot::of(&self.gpus[gpu as usize]);
    }

    pub fn node_hot(&self, node: NodeIdx) -> &[GpuHot] {
        let n = &self.nodes[node as usize];
        &self.hot[n.gpu_first as usize..(n.gpu_first + n.gpu_count) as usize]
    }

    /// Nothing is allocated on the node and none of its GPUs is being drained: a task that
    /// takes whole nodes (`CompiledGroup::exclusive_node`) may have it.
    pub fn node_idle(&self, node: NodeIdx) -> bool {
        let n = &self.nodes[node as usize];
        n.cpu_free == n.cpu_total
            && n.memory_free == n.memory_total
            && self.node_gpus(node).iter().all(|g| g.idle() && !g.cordoned)
    }

    pub fn node_gpus(&self, node: NodeIdx) -> &[GpuState] {
        let n = &self.nodes[node as usize];
        &self.gpus[n.gpu_first as usize..(n.gpu_first + n.gpu_count) as usize]
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeIdx> {
        self.names.get(name).copied()
    }

    /// Compute handed out across the fleet, in milli-GPU.
    pub fn used_milli(&self) -> u64 {
        self.used_milli_total
    }

    /// Approximate heap and inline bytes held by the state (for the memory benchmark).
    pub fn approx_bytes(&self) -> usize {
        let node_bytes: usize = self.nodes.len() * std::mem::size_of::<NodeState>()
            + self
                .info
                .iter()
                .map(|n| {
                    std::mem::size_of::<NodeInfo>()
                        + n.name.capacity()
                        + n.labels.iter().map(|(k, v)| k.capacity() + v.capacity() + 64).sum::<usize>()
                        + n.taints.len() * std::mem::size_of::<Taint>()
                })
                .sum::<usize>();
        let hot_bytes = self.hot.capacity() * std::mem::size_of::<GpuHot>();
        let index_bytes = self.index.approx_bytes();
        let gpu_bytes: usize = self
            .gpus
            .iter()
            .map(|g| {
                std::mem::size_of::<GpuState>()
                    + match &g.units {
                        Units::Mig { slots } => slots.capacity() * std::mem::size_of::<MigSlot>(),
                        _ => 0,
                    }
            })
            .sum();
        let uuid_bytes: usize = self.uuids.iter().map(|u| std::mem::size_of::<String>() + u.capacity()).sum();
        node_bytes + gpu_bytes + uuid_bytes + hot_bytes + index_bytes
    }
}

fn mig_mask(g: &GpuState) -> u32 {
    match &g.units {
        Units::Mig { slots } => slots.iter().fold(0, |m, s| m | 1 << s.profile),
        _ => 0,
    }
}

pub(crate) fn units_for(catalog: &Catalog, model: ModelId, mode: &GpuMode) -> Result<Units, String> {
    let m = catalog.model(model);
    Ok(match mode {
        GpuMode::Whole => Units::Whole,
        GpuMode::Mig { instances } => {
            let geometry = m.mig.as_ref().ok_or_else(|| format!("{} does not support MIG", m.id))?;
            let placed = geometry.validate_layout(&m.id, instances).map_err(|e| e.to_string())?;
            let slots = placed
                .iter()
                .map(|p| {
                    let profile = &geometry.profiles[p.profile as usize];
                    MigSlot {
                        profile: p.profile,
                        start: p.start,
                        milli: m.mig_milli(profile).0,
                        memory: m.mig_memory(profile).0,
                        taken: false,
                    }
                })
                .collect();
            Units::Mig { slots }
        }
        GpuMode::Mps { max_clients } => Units::Mps { max_clients: *max_clients },
        GpuMode::TimeSlice { replicas, memory_per_replica } => {
            Units::TimeSlice { replicas: *replicas, memory_per_replica: *memory_per_replica }
        }
    })
}

fn device_class(catalog: &Catalog, model: ModelId, mode: ModeKind, nvlink: bool) -> DeviceClass {
    let m = catalog.model(model);
    let (major, minor) = m.compute_capability;
    DeviceClass {
        model,
        mode,
        nvlink,
        attributes: DeviceAttributes {
            model: m.id.clone(),
            architecture: m.architecture_family(),
            memory_gib: (m.memory.0 / Bytes::GIB) as i64,
            compute_capability: major as f64 + minor as f64 / 10.0,
            sm_count: m.sm_count.unwrap_or(0) as i64,
            mig_capable: m.mig_capable(),
            nvlink,
            mode: mode.name().to_string(),
        },
    }
}

/// The dense ids handed out while a state is built: each rack, device class and node
/// signature once, numbered in the order first seen.
#[derive(Default)]
struct Ids {
    rack: BTreeMap<String, u32>,
    class: BTreeMap<(u16, ModeKind, bool), u16>,
    signature: BTreeMap<Signature, u16>,
}

impl Ids {
    fn rack(&mut self, state: &mut ClusterState, name: String) -> u32 {
        let next = self.rack.len() as u32;
        *self.rack.entry(name.clone()).or_insert_with(|| {
            Arc::make_mut(&mut state.racks).push(name);
            next
        })
    }

    fn class(
        &mut self,
        state: &mut ClusterState,
        catalog: &Catalog,
        model: ModelId,
        kind: ModeKind,
        nvlink: bool,
    ) -> u16 {
        let next = self.class.len() as u16;
        *self.class.entry((model.0, kind, nvlink)).or_insert_with(|| {
            Arc::make_mut(&mut state.classes).push(device_class(catalog, model, kind, nvlink));
            next
        })
    }

    /// The signature of the node whose GPUs start at `gpu_first` (its GPUs' classes and MIG
    /// layouts, sorted), and the node counted among that signature's nodes.
    fn signature(&mut self, state: &mut ClusterState, gpu_first: GpuIdx, node: NodeIdx) -> u16 {
        let gpus = &state.gpus[gpu_first as usize..];
        let mut signature = Signature { gpus: gpus.iter().map(|g| (g.class, mig_mask(g))).collect() };
        signature.gpus.sort_unstable();
        let next = self.signature.len() as u16;
        let id = *self.signature.entry(signature.clone()).or_insert_with(|| {
            Arc::make_mut(&mut state.signatures).push(signature);
            Arc::make_mut(&mut state.signature_nodes).push(Vec::new());
            next
        });
        Arc::make_mut(&mut state.signature_nodes)[id as usize].push(node);
        id
    }
}
