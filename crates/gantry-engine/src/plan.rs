//! The fleet planner (offline): from a fleet and a workload mix, choose each GPU's mode —
//! whole, a MIG layout (legal per the catalog), MPS or time-slice — so that as much of the
//! demand as possible can be placed, with as little stranded capacity as possible, then check
//! the plan by placing the workload on it with the engine itself.
//!
//! The packing, in order: whole-GPU tasks take whole GPUs (best-fit node, so gangs stay on one
//! node); MIG tasks are packed first-fit-decreasing into MIG layouts, an instance going at the
//! first legal start that keeps the layout valid; MPS and time-slice shares are packed
//! first-fit-decreasing by compute and memory; a memory-only task with the job's shape (a
//! hint) takes the unit the advisor recommends (as the engine will prefer it), one without
//! takes the smallest MIG profile that holds it where a MIG-capable GPU is free, else an MPS
//! share. GPUs nothing asks
//! for stay whole and idle. What could not be packed is reported with why.
//!
//! The online planner (`online.rs`) turns this target into the changes a running fleet can
//! make. A task is packed only on GPUs of a model its job accepts (`model = …`); selectors
//! are not read here (the engine's placement of the planned fleet is the check).

use crate::{Engine, EngineConfig};
use gantry_catalog::{Catalog, GpuModel};
use gantry_types::{Bytes, Fleet, GpuMode, GpuRequest, Job, MigInstanceSpec, ModelPattern, ShareMode};
use std::collections::{BTreeMap, BTreeSet};

/// One task's demand, as the planner packs it.
#[derive(Clone, Debug, PartialEq)]
enum Demand {
    Whole { count: u32 },
    Mig { profile: String },
    Share { milli: u32, memory: u64, mode: ShareMode },
    Memory { memory: u64 },
}

/// Why a workload cannot be planned at all (bad input, not "does not fit").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("job {job:?} asks for MIG profile {profile:?}, which no GPU model in the fleet supports ({models})")]
    ProfileUnsupported { job: String, profile: String, models: String },
    #[error("the planned fleet is not valid: {0}")]
    Fleet(String),
}

/// A GPU's planned mode, next to the one it has now.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuPlan {
    pub node: String,
    pub index: u32,
    pub model: String,
    pub mode: GpuMode,
    /// Its mode differs from the fleet's now (a reconfiguration: the GPU must be idle).
    pub changed: bool,
    /// Nothing of the workload was packed on it (left whole and idle).
    pub unused: bool,
}

/// The plan and how the workload fares on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The fleet with the planned modes.
    pub fleet: Fleet,
    pub gpus: Vec<GpuPlan>,
    /// Jobs the engine placed on the planned fleet, in order.
    pub placed: Vec<String>,
    /// Jobs it could not place, with the engine's first reason.
    pub unplaced: Vec<(String, String)>,
    /// Compute handed out after placing the workload, % of the fleet.
    pub allocation_pct: f64,
    /// Compute on shared or partitioned GPUs that nothing holds, in GPUs (capacity the plan
    /// carved but did not fill).
    pub stranded_gpus: f64,
    /// GPUs left whole and idle.
    pub idle_gpus: u32,
    pub reconfigured: u32,
}

struct Slot<'c> {
    node: usize,
    gpu: usize,
    model: &'c GpuModel,
    state: Use,
}

#[derive(Clone, Debug, PartialEq)]
enum Use {
    Free,
    Whole,
    Mig(Vec<MigInstanceSpec>),
    Mps { milli: u32, memory: u64, clients: u32 },
    TimeSlice { replicas: u32, used: u32 },
}

/// Where MIG instances can still go, so that packing one does not scan every GPU: first fit
/// over the open MIG GPUs, then over the free ones, exactly as a scan in slot order would —
/// only GPUs that can never take the profile again are skipped (layouts only grow, and a
/// slot's model never changes).
#[derive(Default)]
struct MigIndex {
    /// Slots carved into MIG, in slot order.
    open: BTreeSet<usize>,
    /// Per profile: the open slots not yet found full for it.
    room: BTreeMap<String, BTreeSet<usize>>,
    /// Per profile: no slot before this one is free and able to carve it.
    free_from: BTreeMap<String, usize>,
}

/// MPS clients per GPU (the Volta+ limit).
const MPS_CLIENTS_MAX: u32 = 48;
/// Time-slice replicas a planned GPU gets at most.
const REPLICAS_MAX: u32 = 16;

/// A memory-only request with the job's shape, as the unit the advisor recommends on `model`
/// (the fleet's first MIG-capable model, else its first): what the engine will prefer for it.
fn advised(
    memory: u64,
    hint: &gantry_types::UnitHint,
    isolation: gantry_types::Isolation,
    model: &GpuModel,
) -> Option<Demand> {
    use crate::advise::{Shape, Unit, advise};
    let shape = Shape::of_memory_request(memory, hint, isolation, model);
    Some(match advise(&shape, model).ok()?.unit {
        Unit::Whole { count, .. } => Demand::Whole { count },
        Unit::Mig { profile } => Demand::Mig { profile },
        Unit::Mps { share_milli, memory } => Demand::Share { milli: share_milli, memory, mode: ShareMode::Mps },
        Unit::TimeSlice { share_milli, memory } => {
            Demand::Share { milli: share_milli, memory, mode: ShareMode::TimeSlice }
        }
    })
}

/// Each task's demand, with the job's name and the GPU models its group accepts (empty = any).
fn demands(jobs: &[Job], model: Option<&GpuModel>) -> Vec<(String, Demand, Vec<ModelPattern>)> {
    let mut out = Vec::new();
    for job in jobs {
        for group in &job.groups {
            for _ in 0..group.replicas {
                let demand = match &group.resources.gpu {
                    None => continue,
                    Some(GpuRequest::Whole { count }) => Demand::Whole { count: *count },
                    Some(GpuRequest::Mig { profile }) => Demand::Mig { profile: profile.clone() },
                    Some(GpuRequest::Share { milli, memory, mode }) => {
                        Demand::Share { milli: milli.0, memory: memory.0, mode: *mode }
                    }
                    Some(GpuRequest::Memory { memory, hint: Some(hint) }) => model
                        .and_then(|m| advised(memory.0, hint, group.resources.isolation, m))
                        .unwrap_or(Demand::Memory { memory: memory.0 }),
                    Some(GpuRequest::Memory { memory, hint: None }) => Demand::Memory { memory: memory.0 },
                };
                out.push((job.name.clone(), demand, group.resources.models.clone()));
            }
        }
    }
    out
}

/// Can `profile` go onto `layout` of `model`? The layout with it added, if so.
pub(crate) fn add_instance(
    model: &GpuModel,
    layout: &[MigInstanceSpec],
    profile: &str,
) -> Option<Vec<MigInstanceSpec>> {
    let geometry = model.mig.as_ref()?;
    let p = geometry.profile(profile)?;
    // Cheap reject first (planning a large fleet asks this of every open GPU): not enough
    // compute or memory slices left, whatever the start.
    let (compute, memory) = layout
        .iter()
        .filter_map(|i| geometry.profile(&i.profile))
        .fold((0u32, 0u32), |(c, m), q| (c + u32::from(q.compute_slices), m + u32::from(q.memory_slices)));
    if compute + u32::from(p.compute_slices) > u32::from(geometry.compute_slices)
        || memory + u32::from(p.memory_slices) > u32::from(geometry.memory_slices)
    {
        return None;
    }
    p.starts.iter().find_map(|&start| {
        let mut next = layout.to_vec();
        next.push(MigInstanceSpec { profile: p.name.clone(), start });
        geometry.validate_layout(&model.id, &next).ok().map(|_| next)
    })
}

/// The smallest MIG profile of `model` holding `memory` bytes.
fn profile_for_memory(model: &GpuModel, memory: u64) -> Option<String> {
    let geometry = model.mig.as_ref()?;
    geometry
        .profiles
        .iter()
        .filter(|p| !p.media_extensions && !p.name.contains('c') && model.mig_memory(p).0 >= memory)
        .min_by_key(|p| (p.memory_slices, p.compute_slices))
        .map(|p| p.name.clone())
}

/// Plan `fleet`'s GPU modes for `jobs`.
pub fn plan(fleet: &Fleet, jobs: &[Job], catalog: &'static Catalog) -> Result<Plan, PlanError> {
    let mut slots = slots_of(fleet, catalog)?;
    let advice_model = slots.iter().find(|s| s.model.mig.is_some()).or(slots.first()).map(|s| s.model);
    let mut all = demands(jobs, advice_model);
    check_profiles(&all, &slots)?;
    all.sort_by_key(|(_, d, _)| packing_order(d));
    pack(fleet, &mut slots, &all);
    let (planned, gpus) = planned_fleet(fleet, &slots);
    // The check: the engine places the workload on the planned fleet.
    let mut engine =
        Engine::new(&planned, catalog, EngineConfig::default()).map_err(|e| PlanError::Fleet(e.to_string()))?;
    let (placed, unplaced) = place_all(&mut engine, jobs);
    let state = engine.state();
    let total = state.gpus.len().max(1) as f64;
    let used: f64 = state.gpus.iter().map(|g| f64::from(g.used_milli)).sum::<f64>() / 1000.0;
    let stranded = stranded(&slots, state);
    Ok(Plan {
        fleet: planned,
        idle_gpus: slots.iter().filter(|s| s.state == Use::Free).count() as u32,
        reconfigured: gpus.iter().filter(|g| g.changed).count() as u32,
        gpus,
        placed,
        unplaced,
        allocation_pct: used / total * 100.0,
        // `+ 0.0` turns a float sum's -0.0 into 0.0 ("-0.00 GPUs stranded" reads as a bug).
        stranded_gpus: stranded.max(0.0) + 0.0,
    })
}

/// One slot per GPU of the fleet, free, in node order.
fn slots_of<'c>(fleet: &Fleet, catalog: &'c Catalog) -> Result<Vec<Slot<'c>>, PlanError> {
    let mut slots: Vec<Slot<'_>> = Vec::new();
    for (n, node) in fleet.nodes.iter().enumerate() {
        for (g, gpu) in node.gpus.iter().enumerate() {
            let model = catalog
                .lookup(&gpu.model)
                .map(|id| catalog.model(id))
                .ok_or_else(|| PlanError::Fleet(format!("unknown model {}", gpu.model)))?;
            slots.push(Slot { node: n, gpu: g, model, state: Use::Free });
        }
    }
    Ok(slots)
}

/// Bad input first: a MIG profile no model here has.
fn check_profiles(all: &[(String, Demand, Vec<ModelPattern>)], slots: &[Slot<'_>]) -> Result<(), PlanError> {
    for (job, d, _) in all {
        if let Demand::Mig { profile } = d
            && !slots.iter().any(|s| s.model.mig.as_ref().is_some_and(|g| g.profile(profile).is_some()))
        {
            let mut models: Vec<&str> = slots.iter().map(|s| s.model.id.as_str()).collect();
            models.sort_unstable();
            models.dedup();
            return Err(PlanError::ProfileUnsupported {
                job: job.clone(),
                profile: profile.clone(),
                models: models.join(", "),
            });
        }
    }
    Ok(())
}

/// Whole GPUs, then MIG, memory and shares; biggest first within each kind (small ones fill
/// the gaps the big ones leave).
fn packing_order(d: &Demand) -> (u8, u64) {
    match d {
        Demand::Whole { count } => (0, u64::MAX - u64::from(*count)),
        Demand::Mig { profile } => (1, u64::MAX - profile.split('g').next().and_then(|n| n.parse().ok()).unwrap_or(0)),
        Demand::Memory { memory } => (2, u64::MAX - memory),
        Demand::Share { milli, .. } => (3, u64::MAX - u64::from(*milli)),
    }
}

/// Pack every demand, in order, onto the slots.
fn pack(fleet: &Fleet, slots: &mut [Slot<'_>], all: &[(String, Demand, Vec<ModelPattern>)]) {
    // Free GPUs per node, kept in step while whole-GPU demands (sorted first) are packed.
    let mut free_on: Vec<usize> = vec![0; fleet.nodes.len()];
    for s in slots.iter() {
        free_on[s.node] += 1;
    }
    let first_slot: Vec<usize> = (0..fleet.nodes.len()).map(|n| slots.partition_point(|s| s.node < n)).collect();
    let mut mig = MigIndex::default();
    for (_, demand, models) in all {
        // The job's model constraints: only GPUs of a model it accepts are packed for it.
        let accepts = |m: &GpuModel| models.is_empty() || models.iter().any(|p| m.names().any(|n| p.matches(n)));
        match demand {
            Demand::Whole { count } => {
                place_whole(slots, &mut free_on, &first_slot, *count as usize, models.is_empty(), &accepts);
            }
            Demand::Mig { profile } => {
                place_mig(slots, &mut mig, profile, &accepts);
            }
            Demand::Memory { memory } => {
                let profile = slots
                    .iter()
                    .filter(|s| matches!(s.state, Use::Free | Use::Mig(_)) && accepts(s.model))
                    .find_map(|s| profile_for_memory(s.model, *memory));
                match profile {
                    Some(p) if place_mig(slots, &mut mig, &p, &accepts) => {}
                    _ => {
                        let milli = slots.iter().find(|s| accepts(s.model)).map_or(1000, |s| {
                            ((*memory as f64 / s.model.memory.0 as f64 * 1000.0).ceil() as u32).clamp(10, 1000)
                        });
                        place_share(slots, milli, *memory, ShareMode::Mps, &accepts);
                    }
                }
            }
            Demand::Share { milli, memory, mode } => {
                place_share(slots, *milli, *memory, *mode, &accepts);
            }
        }
    }
}

/// `count` whole GPUs, best fit: the node with the fewest free GPUs (of an accepted model)
/// that still has enough.
fn place_whole(
    slots: &mut [Slot<'_>],
    free_on: &mut [usize],
    first_slot: &[usize],
    count: usize,
    any_model: bool,
    accepts: &dyn Fn(&GpuModel) -> bool,
) {
    let free = |n: usize| {
        if any_model {
            free_on[n]
        } else {
            slots[first_slot[n]..]
                .iter()
                .take_while(|s| s.node == n)
                .filter(|s| s.state == Use::Free && accepts(s.model))
                .count()
        }
    };
    let best = (0..free_on.len()).map(|n| (free(n), n)).filter(|&(k, _)| k >= count).min();
    if let Some((_, n)) = best {
        for s in slots[first_slot[n]..]
            .iter_mut()
            .take_while(|s| s.node == n)
            .filter(|s| s.state == Use::Free && accepts(s.model))
            .take(count)
        {
            s.state = Use::Whole;
        }
        free_on[n] -= count;
    }
}

/// The fleet with the planned modes, and each GPU's plan.
fn planned_fleet(fleet: &Fleet, slots: &[Slot<'_>]) -> (Fleet, Vec<GpuPlan>) {
    let mut planned = fleet.clone();
    let mut gpus = Vec::new();
    for s in slots {
        let gpu = &mut planned.nodes[s.node].gpus[s.gpu];
        let mode = match &s.state {
            Use::Free | Use::Whole => GpuMode::Whole,
            Use::Mig(layout) => {
                let mut layout = layout.clone();
                layout.sort_by_key(|i| i.start);
                GpuMode::Mig { instances: layout }
            }
            Use::Mps { clients, .. } => GpuMode::Mps { max_clients: (*clients).max(1) },
            Use::TimeSlice { replicas, .. } => GpuMode::TimeSlice {
                replicas: *replicas,
                memory_per_replica: Bytes(s.model.memory.0 / u64::from(*replicas)),
            },
        };
        let changed = gpu.mode != mode;
        gpu.mode = mode.clone();
        gpus.push(GpuPlan {
            node: fleet.nodes[s.node].name.clone(),
            index: gpu.index,
            model: s.model.id.clone(),
            mode,
            changed,
            unused: s.state == Use::Free,
        });
    }
    (planned, gpus)
}

/// Every job placed with the engine, in order: the names placed, and the others with why.
fn place_all(engine: &mut Engine, jobs: &[Job]) -> (Vec<String>, Vec<(String, String)>) {
    let mut placed = Vec::new();
    let mut unplaced = Vec::new();
    for job in jobs {
        let compiled = match engine.compile(job) {
            Ok(c) => c,
            Err(e) => {
                unplaced.push((job.name.clone(), e.to_string()));
                continue;
            }
        };
        match engine.place(&compiled) {
            Ok(_) => placed.push(job.name.clone()),
            Err(reasons) => {
                unplaced.push((job.name.clone(), reasons.first().map_or(String::new(), |r| r.reason.to_string())))
            }
        }
    }
    (placed, unplaced)
}

/// GPUs carved or shared but not held: what a MIG layout leaves uncarved, and what its
/// instances or a shared GPU leave unused.
fn stranded(slots: &[Slot<'_>], state: &crate::state::ClusterState) -> f64 {
    slots
        .iter()
        .zip(&state.gpus)
        .filter(|(s, _)| matches!(s.state, Use::Mig(_) | Use::Mps { .. } | Use::TimeSlice { .. }))
        .map(|(s, g)| {
            let carved = match &s.state {
                Use::Mig(layout) => layout
                    .iter()
                    .filter_map(|i| s.model.mig.as_ref()?.profile(&i.profile).map(|p| s.model.mig_milli(p).0))
                    .sum::<u32>(),
                _ => 1000,
            };
            f64::from(1000 - carved.min(1000)) / 1000.0 + f64::from(carved.saturating_sub(g.used_milli)) / 1000.0
        })
        .sum()
}

/// Put a MIG instance of `profile` on an open MIG GPU, else carve a free one (first fit in
/// slot order for both). Whether it went.
fn place_mig(slots: &mut [Slot<'_>], index: &mut MigIndex, profile: &str, accepts: &dyn Fn(&GpuModel) -> bool) -> bool {
    let MigIndex { open, room: rooms, free_from } = index;
    let room = rooms.entry(profile.to_string()).or_insert_with(|| open.clone());
    let mut full = Vec::new();
    let mut found = None;
    for &i in room.iter() {
        let s = &slots[i];
        if !accepts(s.model) {
            continue;
        }
        let Use::Mig(layout) = &s.state else { unreachable!("open slots stay MIG") };
        match add_instance(s.model, layout, profile) {
            Some(next) => {
                found = Some((i, next));
                break;
            }
            None => full.push(i),
        }
    }
    for i in full {
        room.remove(&i);
    }
    if let Some((i, next)) = found {
        slots[i].state = Use::Mig(next);
        return true;
    }
    // Carve the first free slot that can hold the profile. No slot before `from` can: each is
    // taken or of a model without it. One of a model this job does not accept stops `from`
    // (it may serve another job).
    let from = free_from.entry(profile.to_string()).or_insert(0);
    let mut passed_only_dead = true;
    for (i, s) in slots.iter_mut().enumerate().skip(*from) {
        let carved = if s.state == Use::Free { add_instance(s.model, &[], profile) } else { None };
        match carved {
            Some(next) if accepts(s.model) => {
                s.state = Use::Mig(next);
                open.insert(i);
                for room in rooms.values_mut() {
                    room.insert(i);
                }
                return true;
            }
            Some(_) => passed_only_dead = false,
            None if passed_only_dead => *from = i + 1,
            None => {}
        }
    }
    false
}

/// Put a share on an open GPU of its mode, else open a free one. Whether it went.
fn place_share(
    slots: &mut [Slot<'_>],
    milli: u32,
    memory: u64,
    mode: ShareMode,
    accepts: &dyn Fn(&GpuModel) -> bool,
) -> bool {
    let want_mps = mode != ShareMode::TimeSlice;
    for s in slots.iter_mut().filter(|s| accepts(s.model)) {
        let card = s.model.memory.0;
        match &mut s.state {
            Use::Mps { milli: m, memory: mem, clients }
                if want_mps && *m + milli <= 1000 && *mem + memory <= card && *clients < MPS_CLIENTS_MAX =>
            {
                *m += milli;
                *mem += memory;
                *clients += 1;
                return true;
            }
            Use::TimeSlice { replicas, used }
                if !want_mps
                    && *used < *replicas
                    && milli <= 1000 / *replicas
                    && memory <= card / u64::from(*replicas) =>
            {
                *used += 1;
                return true;
            }
            _ => {}
        }
    }
    for s in slots.iter_mut().filter(|s| s.state == Use::Free && accepts(s.model)) {
        let card = s.model.memory.0;
        if memory > card {
            continue;
        }
        s.state = if want_mps {
            Use::Mps { milli, memory, clients: 1 }
        } else {
            // As many replicas as this share allows, within its memory.
            let by_compute = 1000 / milli.max(1);
            let by_memory = (card / memory.max(1)) as u32;
            Use::TimeSlice { replicas: by_compute.min(by_memory).clamp(2, REPLICAS_MAX), used: 1 }
        };
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes of four GPUs of `model`.
    fn fleet(model: &str) -> Fleet {
        let text = format!(
            "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"{model}\"\ncount = 4\n"
        );
        gantry_spec::parse_fleet(&text, Catalog::embedded()).expect("fleet")
    }

    /// The packing `MigIndex` replaces: first fit by scanning every slot.
    fn place_mig_by_scan(slots: &mut [Slot<'_>], profile: &str, accepts: &dyn Fn(&GpuModel) -> bool) -> bool {
        for s in slots.iter_mut().filter(|s| accepts(s.model)) {
            if let Use::Mig(layout) = &s.state
                && let Some(next) = add_instance(s.model, layout, profile)
            {
                s.state = Use::Mig(next);
                return true;
            }
        }
        for s in slots.iter_mut().filter(|s| s.state == Use::Free && accepts(s.model)) {
            if let Some(next) = add_instance(s.model, &[], profile) {
                s.state = Use::Mig(next);
                return true;
            }
        }
        false
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// The index packs every instance on the GPU a scan would, whatever the models, the
        /// jobs' model constraints and the GPUs other demand takes in between.
        #[test]
        fn the_mig_index_packs_exactly_as_a_scan(
            models in proptest::collection::vec(0usize..3, 1..24),
            steps in proptest::collection::vec((0usize..6, 0usize..3, 0usize..24, proptest::bool::weighted(0.15)), 1..120),
        ) {
            let catalog = Catalog::embedded();
            let names = ["A100-SXM4-80GB", "H100-SXM5-80GB", "L4-24GB"];
            let profiles = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"];
            let model = |i: usize| catalog.model(catalog.lookup(names[i]).expect("model"));
            let mut indexed: Vec<Slot<'_>> = models
                .iter()
                .enumerate()
                .map(|(g, &m)| Slot { node: 0, gpu: g, model: model(m), state: Use::Free })
                .collect();
            let mut scanned: Vec<Slot<'_>> =
                indexed.iter().map(|s| Slot { node: s.node, gpu: s.gpu, model: s.model, state: s.state.clone() }).collect();
            let mut index = MigIndex::default();
            for (profile, constraint, slot, take) in steps {
                if take {
                    // Other demand takes a free GPU whole.
                    let slot = slot % indexed.len();
                    if indexed[slot].state == Use::Free {
                        indexed[slot].state = Use::Whole;
                        scanned[slot].state = Use::Whole;
                    }
                    continue;
                }
                // Constraint 0: any model; 1: only A100; 2: only H100.
                let accepts = |m: &GpuModel| match constraint {
                    1 => m.id == names[0],
                    2 => m.id == names[1],
                    _ => true,
                };
                let a = place_mig(&mut indexed, &mut index, profiles[profile], &accepts);
                let b = place_mig_by_scan(&mut scanned, profiles[profile], &accepts);
                proptest::prop_assert_eq!(a, b);
                let states = |v: &[Slot<'_>]| v.iter().map(|s| s.state.clone()).collect::<Vec<_>>();
                proptest::prop_assert_eq!(states(&indexed), states(&scanned));
            }
        }
    }

    fn jobs(text: &str) -> Vec<Job> {
        gantry_spec::parse_workload(text, Catalog::embedded()).expect("workload")
    }

    #[test]
    fn a_mix_is_packed_onto_fitting_modes_and_the_engine_places_it_all() {
        let catalog = Catalog::embedded();
        let fleet = fleet("A100-SXM4-80GB");
        let jobs = jobs(
            "[[job]]\nname = \"train\"\ngpu = { count = 4 }\n\n\
             [[job]]\nname = \"infer\"\ncount = 9\ngpu = { mig = \"1g.10gb\" }\n\n\
             [[job]]\nname = \"notebook\"\ncount = 6\ngpu = { share = 125, memory = \"8GiB\", mode = \"time-slice\" }\n\n\
             [[job]]\nname = \"svc\"\ncount = 3\ngpu = { share = 250, memory = \"5GiB\", mode = \"mps\" }\n",
        );
        let plan = plan(&fleet, &jobs, catalog).expect("plans");
        assert!(plan.unplaced.is_empty(), "{:?}", plan.unplaced);
        let modes: Vec<&str> = plan.gpus.iter().map(|g| g.mode.name()).collect();
        assert_eq!(modes.iter().filter(|m| **m == "mig").count(), 2, "9 × 1g.10gb need two A100s: {modes:?}");
        assert_eq!(modes.iter().filter(|m| **m == "time-slice").count(), 1, "{modes:?}");
        assert_eq!(modes.iter().filter(|m| **m == "mps").count(), 1, "{modes:?}");
        assert_eq!(plan.idle_gpus, 0);
        assert!(plan.allocation_pct > 60.0, "{}", plan.allocation_pct);
        assert_eq!(plan.reconfigured, 4, "the four shared GPUs change mode");
    }

    #[test]
    fn memory_only_requests_with_a_shape_are_planned_as_the_advisor_says() {
        let catalog = Catalog::embedded();
        let jobs = jobs(
            "[[job]]\nname = \"train\"\ncount = 2\ngpu = { memory = \"10GiB\", purpose = \"training\" }\n\n\
             [[job]]\nname = \"nb\"\ncount = 2\ngpu = { memory = \"10GiB\", purpose = \"development\" }\n\n\
             [[job]]\nname = \"svc\"\ngpu = { memory = \"10GiB\", purpose = \"inference\", latency-sensitive = true }\n",
        );
        let plan = plan(&fleet("A100-SXM4-80GB"), &jobs, catalog).expect("plans");
        assert!(plan.unplaced.is_empty(), "{:?}", plan.unplaced);
        let count = |name: &str| plan.gpus.iter().filter(|g| g.mode.name() == name && !g.unused).count();
        assert_eq!(count("whole"), 2, "training gets whole GPUs: {:?}", plan.gpus);
        assert_eq!(count("time-slice"), 1, "notebooks share a time-sliced GPU: {:?}", plan.gpus);
        assert_eq!(count("mig"), 1, "production inference gets a MIG slice: {:?}", plan.gpus);
    }

    #[test]
    fn tasks_are_packed_only_on_models_their_job_accepts() {
        let catalog = Catalog::embedded();
        let text = "[[node]]\nname = \"a\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n\n\
                    [[node]]\nname = \"h\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n";
        let fleet = gantry_spec::parse_fleet(text, catalog).expect("fleet");
        // Best fit alone would put the 4-GPU job on the 4-GPU A100 node; it asks for H100s.
        let plan = plan(&fleet, &jobs("[[job]]\nname = \"t\"\ngpu = { count = 4 }\nmodel = \"H100*\"\n"), catalog)
            .expect("plans");
        let used: Vec<&str> = plan.gpus.iter().filter(|g| !g.unused).map(|g| g.node.as_str()).collect();
        assert_eq!(used, ["h"; 4], "{:?}", plan.gpus);
    }

    #[test]
    fn a_profile_no_gpu_has_is_refused() {
        let catalog = Catalog::embedded();
        let err = plan(&fleet("L4-24GB"), &jobs("[[job]]\nname = \"x\"\ngpu = { mig = \"1g.10gb\" }\n"), catalog)
            .expect_err("L4s have no MIG");
        assert!(err.to_string().contains("no GPU model in the fleet supports"), "{err}");
    }
}
