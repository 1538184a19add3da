//! A job compiled once against the fleet's device classes, so the per-node hot path only looks
//! up booleans: which classes the model constraints and the selector accept, which MIG profile
//! index a profile name has on each class.

use crate::EngineError;
use crate::limits::TASKS_PER_JOB_MAX;
use crate::state::{ClusterState, ModeKind};
use gantry_catalog::Catalog;
use gantry_selector::Selector;
use gantry_types::{GpuRequest, Isolation, Job, ShareMode, Topology};

/// The GPU part of a task, with units resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuNeed {
    None,
    Whole { count: u32 },
    Mig { profile: String },
    Share { milli: u32, memory: u64, mps: bool, time_slice: bool },
    Memory { memory: u64 },
}

impl GpuNeed {
    /// GPUs (or GPU parts) one task holds.
    pub fn gpu_count(&self) -> u32 {
        match self {
            GpuNeed::None => 0,
            GpuNeed::Whole { count } => *count,
            _ => 1,
        }
    }

    /// Compute one task asks for, in milli-GPU (memory-only requests: unknown until placed).
    pub fn milli(&self) -> u32 {
        match self {
            GpuNeed::None | GpuNeed::Memory { .. } | GpuNeed::Mig { .. } => 0,
            GpuNeed::Whole { count } => count * 1000,
            GpuNeed::Share { milli, .. } => *milli,
        }
    }
}

/// One task group, compiled.
#[derive(Clone, Debug)]
pub struct CompiledGroup {
    pub name: String,
    pub replicas: u32,
    /// Each task on a node of its own (`TaskGroup::distinct_nodes`).
    pub distinct_nodes: bool,
    /// Each task takes a whole idle node (`TaskGroup::exclusive_node`).
    pub exclusive_node: bool,
    /// Labels a node must carry (`TaskGroup::node_selector`).
    pub node_selector: Vec<(String, String)>,
    pub cpu: u32,
    pub memory: u64,
    pub gpu: GpuNeed,
    pub isolation: Isolation,
    pub topology: Topology,
    pub tolerations: Vec<String>,
    /// Per device class: do the model constraints and the selector accept it?
    pub class_ok: Vec<bool>,
    /// Per device class: the model constraints alone accept it (to tell the two reasons apart).
    pub class_model_ok: Vec<bool>,
    /// Per device class, for MIG requests: index of the profile in that model's geometry.
    pub mig_profile: Vec<Option<u8>>,
    pub models_wanted: Vec<String>,
    pub selector: Option<String>,
    /// Per node signature: could a node of that signature ever host one task of this group?
    pub signature_ok: Vec<bool>,
    /// Bits of every MIG profile index this group's profile has on some class (quick reject).
    pub mig_any_mask: u32,
    /// For a memory-only request with a hint: per device class, the unit kind the advisor
    /// recommends on that class's model (empty without a hint).
    pub memory_unit: Vec<Option<ModeKind>>,
    /// A bursty memory-only request: never a MIG instance (a hard slice caps each burst).
    pub memory_no_mig: bool,
    /// Everything a node's verdict for one task depends on, hashed (see `memo`): groups with
    /// the same requirements share it, whatever their job.
    pub fingerprint: u64,
}

/// A job ready to place (a clone is the same request: jobs of one shape compile once).
#[derive(Clone, Debug)]
pub struct CompiledJob {
    pub name: String,
    pub groups: Vec<CompiledGroup>,
    /// How many device classes and node signatures the fleet had when the job was compiled
    /// (a reconfiguration can add both; the job is then compiled again).
    pub tables: (usize, usize),
}

impl CompiledJob {
    pub fn task_count(&self) -> u32 {
        self.groups.iter().map(|g| g.replicas).sum()
    }

    /// Milli-GPU the job will hold, before placement: exact for whole GPUs and shares; a MIG
    /// instance or a memory-only request counts as a whole GPU (its unit is chosen at
    /// placement), so the figure errs high.
    pub fn milli_at_most(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| {
                let per_task = match g.gpu {
                    GpuNeed::Mig { .. } | GpuNeed::Memory { .. } => 1000,
                    _ => g.gpu.milli(),
                };
                g.replicas as u64 * per_task as u64
            })
            .sum()
    }
}

/// Compile `job` for `state`. Fails on requests no fleet could ever serve as written (a bad
/// selector, an absurd task count); whether *this* fleet can serve it is the placer's question.
pub fn compile(job: &Job, state: &ClusterState, catalog: &Catalog) -> Result<CompiledJob, EngineError> {
    if job.task_count() > TASKS_PER_JOB_MAX {
        return Err(EngineError::Job(format!(
            "job {} has {} tasks, the limit is {TASKS_PER_JOB_MAX}",
            job.name,
            job.task_count()
        )));
    }
    let mut groups =
        job.groups.iter().map(|group| compile_group(job, group, state, catalog)).collect::<Result<Vec<_>, _>>()?;
    // Collected through `Result`, the vector starts with room for four groups (272 bytes
    // each), and most jobs have one: 816 bytes a job, held while it waits and while it runs —
    // 40 % of a waiting job's memory (the scale bench, a million waiting).
    groups.shrink_to_fit();
    Ok(CompiledJob { name: job.name.clone(), groups, tables: (state.classes.len(), state.signatures.len()) })
}

/// One task group against the fleet's device classes and node signatures: which classes its
/// models and selector allow, its GPU need, the MIG profile each class would carve, the unit
/// the advisor would pick for a memory-only request, and its fingerprint.
fn compile_group(
    job: &Job,
    group: &gantry_types::TaskGroup,
    state: &ClusterState,
    catalog: &Catalog,
) -> Result<CompiledGroup, EngineError> {
    let r = &group.resources;
    let selector = r
        .selector
        .as_deref()
        .map(Selector::compile)
        .transpose()
        .map_err(|e| EngineError::Job(format!("job {} group {}: {e}", job.name, group.name)))?;
    let (class_model_ok, class_ok) = classes_allowed(r, selector.as_ref(), state, catalog);
    let gpu = gpu_need(r);
    let mig_profile = state
        .classes
        .iter()
        .map(|c| match (&gpu, c.mode) {
            (GpuNeed::Mig { profile }, ModeKind::Mig) => {
                catalog.model(c.model).mig.as_ref().and_then(|g| g.profile_index(profile))
            }
            _ => None,
        })
        .collect();
    let mut group = CompiledGroup {
        name: group.name.clone(),
        replicas: group.replicas,
        distinct_nodes: group.distinct_nodes,
        exclusive_node: group.exclusive_node,
        node_selector: group.node_selector.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cpu: r.cpu.0,
        memory: r.memory.0,
        gpu,
        isolation: r.isolation,
        topology: r.topology,
        tolerations: r.tolerations.clone(),
        class_ok,
        class_model_ok,
        mig_profile,
        models_wanted: r.models.iter().map(|m| m.0.clone()).collect(),
        selector: r.selector.clone(),
        signature_ok: Vec::new(),
        mig_any_mask: 0,
        memory_unit: Vec::new(),
        memory_no_mig: false,
        fingerprint: 0,
    };
    group.mig_any_mask = group.mig_profile.iter().flatten().fold(0, |m, &p| m | 1 << p);
    if let Some(GpuRequest::Memory { memory, hint: Some(hint) }) = &r.gpu {
        group.memory_no_mig = hint.bursty;
        group.memory_unit = advised_units(memory.0, hint, r.isolation, state, catalog);
    }
    group.signature_ok = state.signatures.iter().map(|sig| statically_feasible(state, &group, sig)).collect();
    group.fingerprint = fingerprint_of(&group);
    Ok(group)
}

/// Per device class: whether the group's models allow it, and whether its models and
/// selector together do.
fn classes_allowed(
    r: &gantry_types::TaskResources,
    selector: Option<&Selector>,
    state: &ClusterState,
    catalog: &Catalog,
) -> (Vec<bool>, Vec<bool>) {
    let class_model_ok: Vec<bool> = state
        .classes
        .iter()
        .map(|c| r.models.is_empty() || r.models.iter().any(|p| catalog.model(c.model).names().any(|n| p.matches(n))))
        .collect();
    let class_ok = state
        .classes
        .iter()
        .zip(&class_model_ok)
        .map(|(c, &model_ok)| model_ok && selector.is_none_or(|s| s.matches(&c.attributes).unwrap_or(false)))
        .collect();
    (class_model_ok, class_ok)
}

/// Per device class: the unit the advisor picks for a memory-only request with a hint.
fn advised_units(
    memory: u64,
    hint: &gantry_types::job::UnitHint,
    isolation: gantry_types::Isolation,
    state: &ClusterState,
    catalog: &Catalog,
) -> Vec<Option<ModeKind>> {
    state
        .classes
        .iter()
        .map(|c| {
            let model = catalog.model(c.model);
            let shape = crate::advise::Shape::of_memory_request(memory, hint, isolation, model);
            crate::advise::advise(&shape, model).ok().map(|a| a.unit.mode())
        })
        .collect()
}

/// A group's GPU request with its units resolved: a share's MPS and time-slicing allowed by
/// its isolation.
fn gpu_need(r: &gantry_types::TaskResources) -> GpuNeed {
    match &r.gpu {
        None => GpuNeed::None,
        Some(GpuRequest::Whole { count }) => GpuNeed::Whole { count: *count },
        Some(GpuRequest::Mig { profile }) => GpuNeed::Mig { profile: profile.clone() },
        Some(GpuRequest::Share { milli, memory, mode }) => GpuNeed::Share {
            milli: milli.0,
            memory: memory.0,
            mps: matches!(mode, ShareMode::Mps | ShareMode::Any) && r.isolation != Isolation::Hard,
            time_slice: matches!(mode, ShareMode::TimeSlice | ShareMode::Any) && r.isolation == Isolation::None,
        },
        Some(GpuRequest::Memory { memory, .. }) => GpuNeed::Memory { memory: memory.0 },
    }
}

/// Everything a group's placement depends on, hashed: groups with the same fingerprint get
/// the same answer on the same node.
fn fingerprint_of(group: &CompiledGroup) -> u64 {
    let requirements = format!(
        "{:?}",
        (
            group.cpu,
            group.memory,
            &group.gpu,
            group.isolation,
            group.topology,
            &group.tolerations,
            &group.class_ok,
            &group.class_model_ok,
            &group.mig_profile,
            &group.models_wanted,
            &group.selector,
            (&group.signature_ok, &group.memory_unit, group.memory_no_mig),
        )
    );
    crate::rng::fingerprint(requirements.as_bytes())
}

/// Could a node with this hardware ever host one task of `group`, all of it being free?
/// Only hardware is judged here (classes, modes, MIG layouts, GPU counts and sizes); free
/// capacity, CPU, memory and taints are the filter's business.
fn statically_feasible(state: &ClusterState, group: &CompiledGroup, signature: &crate::state::Signature) -> bool {
    let ok = |class: u16| group.class_ok[class as usize];
    let mode = |class: u16| state.classes[class as usize].mode;
    match &group.gpu {
        GpuNeed::None => true,
        GpuNeed::Whole { count } => {
            signature.gpus.iter().filter(|&&(c, _)| ok(c) && mode(c) != ModeKind::Mig).count() as u32 >= *count
        }
        GpuNeed::Mig { .. } => signature
            .gpus
            .iter()
            .any(|&(c, mask)| ok(c) && group.mig_profile[c as usize].is_some_and(|p| mask & (1 << p) != 0)),
        GpuNeed::Share { mps, time_slice, .. } => signature.gpus.iter().any(|&(c, _)| {
            ok(c) && ((*mps && mode(c) == ModeKind::Mps) || (*time_slice && mode(c) == ModeKind::TimeSlice))
        }),
        GpuNeed::Memory { memory } => signature
            .gpus
            .iter()
            .any(|&(c, _)| ok(c) && state.classes[c as usize].attributes.memory_gib as u64 * (1 << 30) >= *memory),
    }
}

/// The kind of a GPU task, for clustering; `None` for CPU-only tasks.
pub fn task_tag(need: &GpuNeed) -> Option<usize> {
    match need {
        GpuNeed::None => None,
        GpuNeed::Share { milli, .. } if *milli < 1000 => Some(0),
        GpuNeed::Share { .. } => Some(1),
        GpuNeed::Whole { count } if *count <= 8 => Some(*count as usize),
        _ => Some(crate::state::TASK_TAGS - 1),
    }
}
