//! The online planner: the offline planner's target (`plan.rs`), turned into the few safe
//! reconfigurations a running fleet can make now.
//!
//! Each step plans the fleet for the demand (what runs, what waits and what arrived lately),
//! completes every target MIG layout with the profiles in demand (uncarved slices strand
//! compute), then decides per GPU:
//! - nodes of the same hardware are interchangeable, so each node takes the target node
//!   configuration that costs it least to reach (a node already in a target configuration
//!   keeps it: the plan's arbitrary node order causes no churn);
//! - within a node, a GPU keeps its mode when the target has it (busy GPUs first);
//! - a GPU that must change is reconfigured now only if it is idle and out of its cooldown
//!   (hysteresis: a GPU changes at most once per cooldown, so layouts cannot flap);
//! - a busy GPU whose work ends within the drain horizon is drained — cordoned, nothing new
//!   placed on it — so that it becomes idle and can change; the capacity a drain leaves
//!   unused is the caller's to measure (the simulator does). Work ending later is left alone,
//!   unless it can move: with [`OnlineConfig::move_work`], a busy MIG GPU the target wants
//!   whole whose tasks are all restartable elsewhere (inference replicas behind a service)
//!   is offered in [`Step::empty`]; for the GPUs [`choose_empty`] picks for the whole-GPU
//!   work that waits, the caller moves their tasks into free instances on GPUs that keep
//!   their layout — each move a restart, a cost the simulator counts — and plans again.
//!   Lingering inference then no longer holds a node an 8-GPU gang needs for hours.
//!
//! Pure: the fleet as it is now, what runs where and until when, and the demand in; the
//! reconfigurations, the GPUs to drain and the GPUs that could be emptied out. The caller applies them
//! (`Engine::set_gpu_mode`, `Engine::set_gpu_cordoned`) and the node agent carries them out.

pub use crate::consolidate::choose_empty;
use crate::limits::PLAN_GPUS_PER_STEP_MAX;
use crate::plan::{PlanError, add_instance, plan};
use gantry_catalog::Catalog;
use gantry_types::{Fleet, GpuMode, GpuRequest, Job};
use std::collections::BTreeMap;

/// How eagerly the online planner changes the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnlineConfig {
    /// A GPU is not reconfigured again within this many seconds of its last change.
    pub cooldown_s: u64,
    /// Drain a GPU for a change when the work in the way ends within this many seconds;
    /// 0 = never drain (only GPUs that happen to be idle change).
    pub drain_horizon_s: u64,
    /// Offer busy MIG GPUs whose tasks can all restart elsewhere ([`GpuNow::movable`]) for
    /// emptying ([`Step::empty`]) when the target wants them whole. Off by default: only a
    /// caller that can move tasks (the simulator) turns it on.
    pub move_work: bool,
    /// Seconds between steps. A fleet of more than [`PLAN_GPUS_PER_STEP_MAX`] GPUs is planned
    /// a slice per step, the slice chosen by `now_s / period_s`: steps a period apart take the
    /// slices in turn.
    pub period_s: u64,
    /// GPUs one step plans at most ([`PLAN_GPUS_PER_STEP_MAX`]; tests tighten it).
    pub gpus_per_step_max: usize,
}

impl Default for OnlineConfig {
    fn default() -> Self {
        OnlineConfig {
            cooldown_s: 3600,
            drain_horizon_s: 7200,
            move_work: false,
            period_s: 300,
            gpus_per_step_max: PLAN_GPUS_PER_STEP_MAX,
        }
    }
}

/// A GPU's situation now, as the caller knows it (same order as the fleet's nodes and GPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuNow {
    /// `None` when nothing runs on it; else when its last task is expected to end
    /// (`u64::MAX` when unknown).
    pub busy_until_s: Option<u64>,
    /// When it was last reconfigured.
    pub last_change_s: Option<u64>,
    /// Tasks running on it.
    pub tasks: u32,
    /// Every task on it may be stopped and restarted on another GPU (a replica of a service,
    /// not a training run).
    pub movable: bool,
}

/// One step's decisions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// Idle GPUs to reconfigure now: (node, GPU index, mode).
    pub reconfigure: Vec<(String, u32, GpuMode)>,
    /// GPUs to drain (node, GPU index → the mode wanted once idle) so that the change can be
    /// made when their work ends; every other GPU the planner drained before should be resumed.
    pub drain: BTreeMap<(String, u32), GpuMode>,
    /// Changes the target wants that wait (busy beyond the horizon, or in cooldown).
    pub deferred: u32,
    /// With [`OnlineConfig::move_work`]: busy MIG GPUs the target wants whole, out of their
    /// cooldown, whose tasks can all move — the cheapest to empty first (nodes with the fewest
    /// such tasks, so that whole nodes free up for gangs). Their changes are counted in
    /// `deferred` (or `drain`); the caller empties the first few when whole-GPU work waits.
    pub empty: Vec<(String, u32)>,
    /// On a fleet planned a slice at a time ([`PLAN_GPUS_PER_STEP_MAX`]): (this slice, how
    /// many). `None`: the whole fleet was planned.
    pub slice: Option<(usize, usize)>,
}

impl Step {
    /// Did this step plan node `node` (its place in the fleet)? A drain the step does not
    /// name is stale only on a node it planned: the others keep theirs until their turn.
    pub fn planned(&self, node: usize) -> bool {
        self.slice.is_none_or(|(k, slices)| node % slices == k)
    }
}

/// A GPU's mode in a form two equal layouts share (instances by start).
fn normal(mode: &GpuMode) -> GpuMode {
    match mode {
        GpuMode::Mig { instances } => {
            let mut instances = instances.clone();
            instances.sort_by(|a, b| (a.start, &a.profile).cmp(&(b.start, &b.profile)));
            GpuMode::Mig { instances }
        }
        other => other.clone(),
    }
}

/// MIG profiles in `demand`, most requested first (ties: smaller name first).
fn profiles_in_demand(demand: &[Job]) -> Vec<String> {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for job in demand {
        for g in &job.groups {
            if let Some(GpuRequest::Mig { profile }) = &g.resources.gpu {
                *counts.entry(profile).or_default() += u64::from(g.replicas);
            }
        }
    }
    let mut list: Vec<(&str, u64)> = counts.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    list.into_iter().map(|(p, _)| p.to_string()).collect()
}

/// Fill the free slices of every MIG layout in `fleet` with profiles from `profiles`.
fn complete_layouts(fleet: &mut Fleet, profiles: &[String], catalog: &Catalog) {
    for node in &mut fleet.nodes {
        for gpu in &mut node.gpus {
            let GpuMode::Mig { instances } = &gpu.mode else { continue };
            let Some(model) = catalog.lookup(&gpu.model).map(|id| catalog.model(id)) else { continue };
            let mut layout = instances.clone();
            while let Some(next) = profiles.iter().find_map(|p| add_instance(model, &layout, p)) {
                layout = next;
            }
            layout.sort_by_key(|i| i.start);
            gpu.mode = GpuMode::Mig { instances: layout };
        }
    }
}

/// What changing one GPU costs the planner: a change it can make now is cheap, one that needs
/// a drain dearer, one it cannot make soon prohibitive.
fn change_cost(gpu: &GpuNow, now_s: u64, config: &OnlineConfig) -> u64 {
    let cooling = gpu.last_change_s.is_some_and(|t| now_s < t.saturating_add(config.cooldown_s));
    match gpu.busy_until_s {
        _ if cooling => 1000,
        None => 1,
        Some(end) if config.drain_horizon_s > 0 && end <= now_s.saturating_add(config.drain_horizon_s) => 10,
        Some(_) if config.move_work && gpu.movable => 10,
        Some(_) => 1000,
    }
}

/// A GPU's planned mode, and for a MIG layout the instances the demand actually needs (the
/// layout is completed beyond them).
#[derive(Clone, Debug, PartialEq)]
struct Want {
    mode: GpuMode,
    /// Profiles of the instances packed for the demand, sorted (MIG targets only).
    needs: Vec<String>,
}

/// Does a GPU in mode `have` already give what `want` plans for? The same mode; a share mode
/// with room for at least as many clients (the plan sizes MPS and time-slicing to the
/// demand); a MIG layout that has every instance the demand needs (the completion is only
/// filler).
fn satisfies(have: &GpuMode, want: &Want) -> bool {
    match (have, &want.mode) {
        (GpuMode::Mps { max_clients: h }, GpuMode::Mps { max_clients: w }) => h >= w,
        (
            GpuMode::TimeSlice { replicas: h, memory_per_replica: hm },
            GpuMode::TimeSlice { replicas: w, memory_per_replica: wm },
        ) => h >= w && hm >= wm,
        (GpuMode::Mig { instances }, GpuMode::Mig { .. }) => {
            let mut have: Vec<&str> = instances.iter().map(|i| i.profile.as_str()).collect();
            want.needs.iter().all(|need| match have.iter().position(|p| p == need) {
                Some(at) => {
                    have.swap_remove(at);
                    true
                }
                None => false,
            })
        }
        (have, want) => have == want,
    }
}

/// Give each GPU of a node a mode from `targets` (a node configuration; `None` = any mode, a
/// GPU the plan leaves unused), keeping as many current modes as possible: exact matches first
/// (busy GPUs first), then the "any" slots to the GPUs dearest to change, then the remaining
/// modes to the GPUs cheapest to change. Returns the per-GPU target, the cost, and how many
/// GPUs took an "any" slot (fewer is a closer match when costs tie).
fn align(
    current: &[GpuMode],
    now: &[GpuNow],
    targets: &[Option<Want>],
    now_s: u64,
    config: &OnlineConfig,
) -> (Vec<GpuMode>, u64, usize) {
    let mut left: Vec<Option<&Want>> = targets.iter().flatten().map(Some).collect();
    let mut any = targets.iter().filter(|t| t.is_none()).count();
    let mut kept_by_any = 0;
    let mut out: Vec<Option<GpuMode>> = vec![None; current.len()];
    let mut order: Vec<usize> = (0..current.len()).collect();
    order.sort_by_key(|&i| (now[i].busy_until_s.is_none(), i));
    for &i in &order {
        if let Some(slot) = left.iter_mut().find(|t| t.is_some_and(|t| satisfies(&current[i], t))) {
            slot.take();
            out[i] = Some(current[i].clone());
        }
    }
    let mut rest: Vec<usize> = (0..current.len()).filter(|&i| out[i].is_none()).collect();
    rest.sort_by_key(|&i| (std::cmp::Reverse(change_cost(&now[i], now_s, config)), i));
    for &i in &rest {
        if any == 0 {
            break;
        }
        out[i] = Some(current[i].clone());
        any -= 1;
        kept_by_any += 1;
    }
    let mut cost = 0;
    let mut rest: Vec<usize> = (0..current.len()).filter(|&i| out[i].is_none()).collect();
    rest.sort_by_key(|&i| (change_cost(&now[i], now_s, config), now[i].busy_until_s, i));
    let mut remaining = left.into_iter().flatten();
    for i in rest {
        let mode = remaining.next().map_or(GpuMode::Whole, |w| w.mode.clone());
        if mode != current[i] {
            cost += change_cost(&now[i], now_s, config);
        }
        out[i] = Some(mode);
    }
    (out.into_iter().map(|m| m.expect("every GPU got a mode")).collect(), cost, kept_by_any)
}

/// A compiled job as the planner's demand (its GPU requests, CPU, memory and accepted models;
/// selectors are not the planner's concern, see `plan.rs`). For a live service, whose
/// scheduler keeps compiled jobs.
pub fn job_of(job: &crate::CompiledJob) -> Job {
    use crate::request::GpuNeed;
    use gantry_types::{Bytes, MilliCpu, MilliGpu, ShareMode, TaskGroup, TaskResources};
    let groups = job
        .groups
        .iter()
        .map(|g| TaskGroup {
            name: g.name.clone(),
            replicas: g.replicas,
            distinct_nodes: g.distinct_nodes,
            exclusive_node: g.exclusive_node,
            node_selector: g.node_selector.iter().cloned().collect(),
            resources: TaskResources {
                cpu: MilliCpu(g.cpu),
                memory: Bytes(g.memory),
                gpu: match &g.gpu {
                    GpuNeed::None => None,
                    GpuNeed::Whole { count } => Some(GpuRequest::Whole { count: *count }),
                    GpuNeed::Mig { profile } => Some(GpuRequest::Mig { profile: profile.clone() }),
                    GpuNeed::Share { milli, memory, mps, time_slice } => Some(GpuRequest::Share {
                        milli: MilliGpu(*milli),
                        memory: Bytes(*memory),
                        mode: match (mps, time_slice) {
                            (true, false) => ShareMode::Mps,
                            (false, true) => ShareMode::TimeSlice,
                            _ => ShareMode::Any,
                        },
                    }),
                    GpuNeed::Memory { memory } => Some(GpuRequest::Memory { memory: Bytes(*memory), hint: None }),
                },
                models: g.models_wanted.iter().map(|m| gantry_types::ModelPattern(m.clone())).collect(),
                selector: None,
                isolation: g.isolation,
                topology: g.topology,
                tolerations: g.tolerations.clone(),
            },
        })
        .collect();
    Job {
        name: job.name.clone(),
        queue: String::new(),
        priority: 0,
        groups,
        lifecycle: gantry_types::Lifecycle::default(),
        after: Vec::new(),
        control: gantry_types::JobControl::default(),
        run: gantry_types::Run::default(),
    }
}

/// One step of the online planner for `fleet` (its modes are the GPUs' modes now), with `now`
/// per GPU and the demand.
pub fn step(
    fleet: &Fleet,
    now: &[Vec<GpuNow>],
    demand: &[Job],
    now_s: u64,
    config: &OnlineConfig,
    catalog: &'static Catalog,
) -> Result<Step, PlanError> {
    if now.len() != fleet.nodes.len() || now.iter().zip(&fleet.nodes).any(|(g, n)| g.len() != n.gpus.len()) {
        return Err(PlanError::Fleet("the GPU situation does not match the fleet's GPUs".into()));
    }
    let slices = fleet.nodes.iter().map(|n| n.gpus.len()).sum::<usize>().div_ceil(config.gpus_per_step_max.max(1));
    if slices <= 1 {
        return step_whole(fleet, now, demand, now_s, config, catalog);
    }
    let k = ((now_s / config.period_s.max(1)) % slices as u64) as usize;
    // Every `slices`-th item from the `k`-th: nodes, their GPUs now, and the demand alike.
    fn slice_of<T: Clone>(items: &[T], slices: usize, k: usize) -> Vec<T> {
        items.iter().skip(k).step_by(slices).cloned().collect()
    }
    let part = Fleet { nodes: slice_of(&fleet.nodes, slices, k) };
    let mut step = step_whole(&part, &slice_of(now, slices, k), &slice_of(demand, slices, k), now_s, config, catalog)?;
    step.slice = Some((k, slices));
    Ok(step)
}

/// One step over all of `fleet` (a whole fleet, or the slice [`step`] chose).
fn step_whole(
    fleet: &Fleet,
    now: &[Vec<GpuNow>],
    demand: &[Job],
    now_s: u64,
    config: &OnlineConfig,
    catalog: &'static Catalog,
) -> Result<Step, PlanError> {
    let configs = target_configs(fleet, demand, catalog)?;
    let current: Vec<Vec<GpuMode>> =
        fleet.nodes.iter().map(|n| n.gpus.iter().map(|g| normal(&g.mode)).collect()).collect();
    let chosen = match_nodes(fleet, now, &current, &configs, now_s, config);
    Ok(changes(fleet, now, &current, &chosen, now_s, config))
}

/// The plan's configuration for each node's GPUs: the mode wanted and the profiles packed
/// for the demand, or `None` for a GPU the plan leaves unused (it may keep whatever mode it
/// has: changing it buys nothing).
fn target_configs(
    fleet: &Fleet,
    demand: &[Job],
    catalog: &'static Catalog,
) -> Result<Vec<Vec<Option<Want>>>, PlanError> {
    let planned = plan(fleet, demand, catalog)?;
    let needs: Vec<Vec<Vec<String>>> = planned
        .fleet
        .nodes
        .iter()
        .map(|n| {
            n.gpus
                .iter()
                .map(|g| match &g.mode {
                    GpuMode::Mig { instances } => {
                        let mut profiles: Vec<String> = instances.iter().map(|i| i.profile.clone()).collect();
                        profiles.sort();
                        profiles
                    }
                    _ => Vec::new(),
                })
                .collect()
        })
        .collect();
    let mut target = planned.fleet;
    complete_layouts(&mut target, &profiles_in_demand(demand), catalog);
    let mut unused = planned.gpus.iter().map(|g| g.unused);
    Ok(target
        .nodes
        .iter()
        .zip(needs)
        .map(|(n, needs)| {
            n.gpus
                .iter()
                .zip(needs)
                .map(|(g, needs)| (!unused.next().unwrap_or(false)).then(|| Want { mode: normal(&g.mode), needs }))
                .collect()
        })
        .collect())
}

/// Match nodes to target configurations within each hardware kind, cheapest pair first: each
/// node's modes to be. Targets repeat (many nodes get the same configuration), so costs are
/// computed per node and *distinct* configuration: nodes × distinct configurations, not
/// nodes².
fn match_nodes(
    fleet: &Fleet,
    now: &[Vec<GpuNow>],
    current: &[Vec<GpuMode>],
    configs: &[Vec<Option<Want>>],
    now_s: u64,
    config: &OnlineConfig,
) -> Vec<Vec<GpuMode>> {
    let hardware = |n: &gantry_types::Node| n.gpus.iter().map(|g| g.model.clone()).collect::<Vec<_>>();
    let multiset = |modes: &[Option<Want>]| {
        let mut key: Vec<String> = modes.iter().map(|m| format!("{m:?}")).collect();
        key.sort_unstable();
        key
    };
    let mut chosen: Vec<Option<Vec<GpuMode>>> = vec![None; fleet.nodes.len()];
    let mut kinds: BTreeMap<Vec<String>, Vec<usize>> = BTreeMap::new();
    for (i, n) in fleet.nodes.iter().enumerate() {
        kinds.entry(hardware(n)).or_default().push(i);
    }
    for nodes in kinds.values() {
        // Distinct target configurations of this hardware: (a representative, how many).
        let mut distinct: BTreeMap<Vec<String>, (usize, usize)> = BTreeMap::new();
        for &j in nodes {
            distinct.entry(multiset(&configs[j])).or_insert((j, 0)).1 += 1;
        }
        let mut left: Vec<(usize, usize)> = distinct.into_values().collect();
        // (cost, GPUs kept by "any", node, configuration, modes): cheapest first, and among
        // equal costs the closest match, so that a node keeps the configuration its current
        // modes fill rather than one that merely tolerates them.
        let mut pairs: Vec<(u64, usize, usize, usize, Vec<GpuMode>)> = Vec::with_capacity(nodes.len() * left.len());
        for &i in nodes {
            for (d, &(j, _)) in left.iter().enumerate() {
                let (modes, cost, loose) = align(&current[i], &now[i], &configs[j], now_s, config);
                pairs.push((cost, loose, i, d, modes));
            }
        }
        pairs.sort_by_key(|p| (p.0, p.1, p.2, p.3));
        for (_, _, i, d, modes) in pairs {
            if chosen[i].is_none() && left[d].1 > 0 {
                left[d].1 -= 1;
                chosen[i] = Some(modes);
            }
        }
    }
    chosen.into_iter().map(|c| c.expect("every node was matched")).collect()
}

/// The step from the current modes to the chosen ones: idle GPUs reconfigured now, busy ones
/// drained when their work ends within the horizon, the rest deferred; and the GPUs whose
/// restartable work could be moved to empty them, fewest tasks first.
fn changes(
    fleet: &Fleet,
    now: &[Vec<GpuNow>],
    current: &[Vec<GpuMode>],
    chosen: &[Vec<GpuMode>],
    now_s: u64,
    config: &OnlineConfig,
) -> Step {
    let mut out = Step::default();
    // Candidates for emptying: (tasks on the node's candidates, node, GPU index).
    let mut empty: Vec<(u32, usize, u32)> = Vec::new();
    for (i, node) in fleet.nodes.iter().enumerate() {
        let want = &chosen[i];
        let mut node_tasks = 0;
        let first = empty.len();
        for (g, gpu) in node.gpus.iter().enumerate() {
            if want[g] == current[i][g] {
                continue;
            }
            let situation = &now[i][g];
            let cooling = situation.last_change_s.is_some_and(|t| now_s < t.saturating_add(config.cooldown_s));
            if config.move_work
                && !cooling
                && situation.movable
                && situation.busy_until_s.is_some()
                && want[g] == GpuMode::Whole
                && matches!(current[i][g], GpuMode::Mig { .. })
            {
                node_tasks += situation.tasks;
                empty.push((0, i, gpu.index));
            }
            match situation.busy_until_s {
                None if !cooling => out.reconfigure.push((node.name.clone(), gpu.index, want[g].clone())),
                Some(end)
                    if !cooling
                        && config.drain_horizon_s > 0
                        && end <= now_s.saturating_add(config.drain_horizon_s) =>
                {
                    out.drain.insert((node.name.clone(), gpu.index), want[g].clone());
                    out.deferred += 1;
                }
                _ => out.deferred += 1,
            }
        }
        for candidate in &mut empty[first..] {
            candidate.0 = node_tasks;
        }
    }
    empty.sort_by_key(|&(tasks, node, index)| (tasks, node, index));
    out.empty = empty.into_iter().map(|(_, node, index)| (fleet.nodes[node].name.clone(), index)).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_types::MigInstanceSpec;
    use std::collections::BTreeSet;

    fn fleet() -> Fleet {
        let text = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n\
                    [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
        gantry_spec::parse_fleet(text, Catalog::embedded()).expect("fleet")
    }

    fn jobs(text: &str) -> Vec<Job> {
        gantry_spec::parse_workload(text, Catalog::embedded()).expect("workload")
    }

    /// An A100 carved into seven 1g.10gb instances.
    fn seven_1g() -> GpuMode {
        GpuMode::Mig { instances: (0..7).map(|start| MigInstanceSpec { profile: "1g.10gb".into(), start }).collect() }
    }

    fn idle() -> Vec<Vec<GpuNow>> {
        vec![vec![GpuNow::default(); 4]; 2]
    }

    fn apply(fleet: &mut Fleet, step: &Step) {
        for (node, index, mode) in &step.reconfigure {
            let n = fleet.nodes.iter_mut().find(|n| n.name == *node).expect("node");
            n.gpus[*index as usize].mode = mode.clone();
        }
    }

    #[test]
    fn a_fleet_over_the_step_limit_is_planned_a_slice_per_period_in_turn() {
        let catalog = Catalog::embedded();
        let text = "[[node]]\nname = \"n\"\ncount = 8\ncpu = 64\nmemory = \"512GiB\"\n\
                    [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
        let fleet = gantry_spec::parse_fleet(text, catalog).expect("fleet");
        let now = vec![vec![GpuNow::default(); 4]; 8];
        let demand = jobs("[[job]]\nname = \"infer\"\ncount = 200\ngpu = { mig = \"1g.10gb\" }\n");
        let whole = step(&fleet, &now, &demand, 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(whole.slice, None, "32 GPUs are under the limit: all planned at once");
        assert!((0..8).all(|n| whole.planned(n)));
        // 8 GPUs per step: four slices of two nodes (every fourth node), one per period.
        let config = OnlineConfig { gpus_per_step_max: 8, period_s: 60, ..OnlineConfig::default() };
        let mut changed = BTreeSet::new();
        for turn in 0..4u64 {
            let at = 7_200 + turn * 60;
            let s = step(&fleet, &now, &demand, at, &config, catalog).expect("plans");
            let k = ((at / 60) % 4) as usize;
            assert_eq!(s.slice, Some((k, 4)));
            assert_eq!(s, step(&fleet, &now, &demand, at, &config, catalog).expect("plans"), "deterministic");
            let planned: Vec<usize> = (0..8).filter(|&n| s.planned(n)).collect();
            assert_eq!(planned, vec![k, k + 4]);
            for (node, _, _) in &s.reconfigure {
                let n = fleet.nodes.iter().position(|x| x.name == *node).expect("a node");
                assert!(s.planned(n), "{node} is not in slice {k}");
                changed.insert(n);
            }
        }
        assert_eq!(changed.len(), 8, "four periods in turn plan every node: {changed:?}");
    }

    #[test]
    fn idle_gpus_take_full_layouts_for_mig_demand_and_a_second_step_changes_nothing() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        let demand = jobs("[[job]]\nname = \"infer\"\ncount = 9\ngpu = { mig = \"1g.10gb\" }\n");
        let first = step(&fleet, &idle(), &demand, 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(first.reconfigure.len(), 2, "{first:?}");
        for (_, _, mode) in &first.reconfigure {
            let GpuMode::Mig { instances } = mode else { panic!("MIG wanted: {mode:?}") };
            assert_eq!(instances.len(), 7, "the layout is completed, not left with stranded slices");
        }
        apply(&mut fleet, &first);
        let again = step(&fleet, &idle(), &demand, 10, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(again, Step::default(), "a fleet already in the target stays");
    }

    #[test]
    fn busy_gpus_are_drained_only_when_their_work_ends_within_the_horizon() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        let seven = seven_1g();
        for node in &mut fleet.nodes {
            for gpu in &mut node.gpus {
                gpu.mode = seven.clone();
            }
        }
        // Now the demand is two 4-GPU training jobs: every GPU should go whole.
        let demand = jobs("[[job]]\nname = \"train\"\ncount = 2\ngpu = { count = 4 }\n");
        let mut now = idle();
        now[0] = vec![GpuNow { busy_until_s: Some(1000), ..GpuNow::default() }; 4];
        now[1] = vec![GpuNow { busy_until_s: Some(100_000), ..GpuNow::default() }; 4];
        let config = OnlineConfig { cooldown_s: 3600, drain_horizon_s: 1800, ..OnlineConfig::default() };
        let s = step(&fleet, &now, &demand, 0, &config, catalog).expect("plans");
        assert!(s.reconfigure.is_empty(), "nothing idle: {s:?}");
        let n0: BTreeSet<(String, u32)> = (0..4).map(|i| ("n-0".to_string(), i)).collect();
        assert_eq!(s.drain.keys().cloned().collect::<BTreeSet<_>>(), n0, "only the GPUs whose work ends soon");
        assert!(s.drain.values().all(|m| *m == GpuMode::Whole), "{s:?}");
        assert_eq!(s.deferred, 8);
        // Without draining, nothing is drained.
        let s = step(&fleet, &now, &demand, 0, &OnlineConfig { drain_horizon_s: 0, ..config }, catalog).expect("plans");
        assert!(s.drain.is_empty());
    }

    #[test]
    fn a_gpu_in_cooldown_waits_even_when_idle() {
        let catalog = Catalog::embedded();
        let fleet = fleet();
        let demand = jobs("[[job]]\nname = \"infer\"\ncount = 3\ngpu = { mig = \"3g.40gb\" }\n");
        let mut now = idle();
        for gpu in now.iter_mut().flatten() {
            gpu.last_change_s = Some(500);
        }
        let s = step(&fleet, &now, &demand, 1000, &OnlineConfig::default(), catalog).expect("plans");
        assert!(s.reconfigure.is_empty() && s.deferred == 2, "{s:?}");
        let s = step(&fleet, &now, &demand, 500 + 3600, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(s.reconfigure.len(), 2, "after the cooldown: {s:?}");
    }

    #[test]
    fn gpus_the_demand_does_not_need_keep_their_mode() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        let seven = seven_1g();
        fleet.nodes[1].gpus[0].mode = seven;
        fleet.nodes[1].gpus[1].mode = GpuMode::Mps { max_clients: 8 };
        // One 2-GPU job: two whole GPUs are enough, nothing asks for the MIG and MPS GPUs to go.
        let demand = jobs("[[job]]\nname = \"t\"\ngpu = { count = 2 }\n");
        let s = step(&fleet, &idle(), &demand, 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(s, Step::default(), "no churn for nothing");
        // Nothing at all asked: still nothing to change.
        let s = step(&fleet, &idle(), &[], 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(s, Step::default());
    }

    #[test]
    fn a_share_gpu_with_more_room_than_planned_stays_as_it_is() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        fleet.nodes[0].gpus[0].mode = GpuMode::Mps { max_clients: 16 };
        let demand =
            jobs("[[job]]\nname = \"svc\"\ncount = 2\ngpu = { share = 250, memory = \"5GiB\", mode = \"mps\" }\n");
        let mut now = idle();
        now[0][0].busy_until_s = Some(u64::MAX);
        let s = step(&fleet, &now, &demand, 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(s, Step::default(), "the 16-client MPS GPU already serves a 2-client plan");
    }

    #[test]
    fn a_mig_gpu_that_already_has_the_needed_instances_stays_as_it_is() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        fleet.nodes[0].gpus[1].mode = GpuMode::Mig {
            instances: vec![
                MigInstanceSpec { profile: "3g.40gb".into(), start: 0 },
                MigInstanceSpec { profile: "2g.20gb".into(), start: 4 },
                MigInstanceSpec { profile: "1g.10gb".into(), start: 6 },
            ],
        };
        // One 3g.40gb instance runs there; the plan would carve 3g + 3g on some GPU.
        let demand = jobs("[[job]]\nname = \"llm\"\ngpu = { mig = \"3g.40gb\" }\n");
        let mut now = idle();
        now[0][1].busy_until_s = Some(u64::MAX);
        let s = step(&fleet, &now, &demand, 0, &OnlineConfig::default(), catalog).expect("plans");
        assert_eq!(s, Step::default(), "its layout already has the 3g.40gb the demand needs");
    }

    #[test]
    fn busy_mig_gpus_are_offered_for_emptying_only_when_their_work_can_move() {
        let catalog = Catalog::embedded();
        let mut fleet = fleet();
        let seven = seven_1g();
        for gpu in fleet.nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
            gpu.mode = seven.clone();
        }
        // Every GPU runs one instance for a long time; a 4-GPU job wants a node whole.
        let busy = GpuNow { busy_until_s: Some(100_000), tasks: 1, movable: true, ..GpuNow::default() };
        let now = vec![vec![busy; 4]; 2];
        let demand =
            jobs("[[job]]\nname = \"t\"\ngpu = { count = 4 }\n\n[[job]]\nname = \"i\"\ngpu = { mig = \"1g.10gb\" }\n");
        let moving = OnlineConfig { move_work: true, ..OnlineConfig::default() };
        let s = step(&fleet, &now, &demand, 0, &moving, catalog).expect("plans");
        assert_eq!(s.empty.len(), 4, "one node's GPUs, to turn whole: {s:?}");
        assert!(s.empty.iter().all(|(node, _)| *node == s.empty[0].0), "{s:?}");
        assert!(s.reconfigure.is_empty() && s.drain.is_empty(), "busy beyond the horizon: {s:?}");
        // Off by default, and never for work that cannot move (a training run).
        assert!(step(&fleet, &now, &demand, 0, &OnlineConfig::default(), catalog).expect("plans").empty.is_empty());
        let pinned = vec![vec![GpuNow { movable: false, ..busy }; 4]; 2];
        assert!(step(&fleet, &pinned, &demand, 0, &moving, catalog).expect("plans").empty.is_empty());
    }

    #[test]
    fn a_situation_that_does_not_match_the_fleet_is_refused() {
        let err = step(&fleet(), &[], &[], 0, &OnlineConfig::default(), Catalog::embedded()).expect_err("mismatch");
        assert!(err.to_string().contains("does not match"), "{err}");
    }
}
