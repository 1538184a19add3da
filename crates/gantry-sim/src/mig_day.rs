//! Dynamic MIG planning against the best static layout, on a workload whose mix shifts over
//! the day: inference deployments on MIG slices by day, whole-GPU training by night.
//!
//! The question a platform team asks before letting a planner touch its layouts: how much
//! more of the demand does re-planning serve than the best layout we could fix once, and
//! what does it cost in reconfigurations and drains? Both sides replay the same seeded
//! arrivals on the same fleet through the unchanged engine (`Engine::place`/`release`):
//! - **static**: one layout for the whole run; every candidate of a family (the first k GPUs
//!   in one of several standard A100/H100 layouts, k in steps of half a node, plus the
//!   offline planner's layout for the mean mix) is replayed and the best one is kept;
//! - **dynamic**: starts whole; every period the online planner (`gantry_engine::online`)
//!   plans for what runs, waits and arrived lately, and the replay applies its changes with
//!   `Engine::set_gpu_mode` — idle GPUs only, each reconfigured GPU out for `reconfigure_s`,
//!   and busy GPUs drained (cordoned) when the planner asks; the GPU-hours a drained or
//!   reconfiguring GPU leaves unused are measured. When whole-GPU work waits and the planner
//!   offers busy MIG GPUs to empty (`Step::empty`), inference instances on them move to free
//!   instances elsewhere — each move a restart that serves nothing for `restart_s`, counted
//!   against demand served — and the planner is asked again.
//!
//! A job that has not started within its patience (a deployment that goes elsewhere, a
//! training run given up) is abandoned: demand served is the GPU time of the jobs that
//! started, over the GPU time of all jobs (a MIG instance counts its share of the card's
//! compute). Same config and seed ⇒ same result.

use gantry_catalog::Catalog;
use gantry_engine::online::{GpuNow, OnlineConfig, choose_empty, step};
use gantry_engine::rng::SeededRng;
use gantry_engine::{AllocId, CompiledJob, Engine, EngineConfig};
use gantry_types::{Fleet, GpuMode, Job, MigInstanceSpec};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

/// The scenario and the planner's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct DayConfig {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// A MIG-capable catalog model.
    pub model: String,
    pub days: u32,
    pub seed: u64,
    /// Demand of each phase's main kind, as a fraction of the fleet (mean concurrent GPUs).
    pub load: f64,
    /// Seconds between online planning steps.
    pub period_s: u64,
    /// Seconds a GPU is out while it is reconfigured.
    pub reconfigure_s: u64,
    /// What the planner plans for besides running and waiting jobs: arrivals this recent.
    pub window_s: u64,
    /// Seconds a moved inference instance serves nothing while it restarts elsewhere
    /// (moves happen only with `online.move_work`).
    pub restart_s: u64,
    pub online: OnlineConfig,
}

impl Default for DayConfig {
    fn default() -> Self {
        DayConfig {
            nodes: 4,
            gpus_per_node: 8,
            model: "A100-SXM4-80GB".into(),
            days: 7,
            seed: 42,
            load: 0.8,
            period_s: 300,
            reconfigure_s: 120,
            window_s: 3600,
            restart_s: 120,
            online: OnlineConfig { cooldown_s: 1800, drain_horizon_s: 3600, move_work: true },
        }
    }
}

/// Inference deployments: (MIG profile, share of arrivals).
const INFERENCE_MIX: [(&str, u64); 3] = [("1g.10gb", 50), ("2g.20gb", 30), ("3g.40gb", 20)];
/// Training jobs: (whole GPUs, share of arrivals).
const TRAINING_MIX: [(u32, u64); 4] = [(1, 30), (2, 30), (4, 25), (8, 15)];
const INFERENCE_MEAN_S: f64 = 5400.0;
const TRAINING_MEAN_S: f64 = 10800.0;
const INFERENCE_PATIENCE_S: u64 = 600;
const TRAINING_PATIENCE_S: u64 = 7200;
/// The other kind's rate, as a fraction of its peak, outside its phase.
const OFF_PHASE: f64 = 0.15;

/// One arrival of the scenario.
#[derive(Clone, Debug)]
pub struct DayJob {
    pub arrival_s: u64,
    pub duration_s: u64,
    pub patience_s: u64,
    /// Compute it holds, milli-GPU (a MIG instance: its slices' share of the card).
    pub milli: u64,
    /// Index into the shapes ([`Scenario::shapes`]).
    pub shape: usize,
}

/// The fleet, the job shapes and the arrivals.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub fleet: Fleet,
    pub shapes: Vec<Job>,
    pub jobs: Vec<DayJob>,
    pub end_s: u64,
}

/// How one replay went.
#[derive(Clone, Debug, PartialEq)]
pub struct DayResult {
    pub label: String,
    pub jobs: u64,
    pub started: u64,
    pub abandoned: u64,
    pub demanded_gpu_h: f64,
    pub served_gpu_h: f64,
    pub served_pct: f64,
    /// Demand served of the MIG inference deployments and of the whole-GPU training jobs, %.
    pub inference_served_pct: f64,
    pub training_served_pct: f64,
    pub mean_wait_s: f64,
    pub p95_wait_s: u64,
    /// Mean share of the fleet's compute allocated, over the arrival window.
    pub allocated_pct: f64,
    pub reconfigurations: u64,
    pub reconfigurations_per_gpu_day: f64,
    /// GPU-hours left unused on GPUs drained or out for reconfiguration.
    pub drain_idle_gpu_h: f64,
    /// Inference instances moved to empty a GPU for whole-GPU work.
    pub moves: u64,
    pub moves_per_gpu_day: f64,
    /// GPU-hours the moved instances did not serve while they restarted (already taken out
    /// of `served_gpu_h`).
    pub restart_gpu_h: f64,
}

/// The comparison.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub statics: Vec<DayResult>,
    /// Index of the best static layout in `statics` (most demand served).
    pub best_static: usize,
    pub dynamic: DayResult,
    /// Demand served by the dynamic planner over the best static layout's, in % (+ = more).
    pub gain_pct: f64,
}

fn exp_draw(rng: &mut SeededRng, mean: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    -(1.0 - u).ln() * mean
}

fn pick<T: Copy>(rng: &mut SeededRng, mix: &[(T, u64)]) -> T {
    let total: u64 = mix.iter().map(|m| m.1).sum();
    let mut r = rng.below(total);
    for &(v, w) in mix {
        if r < w {
            return v;
        }
        r -= w;
    }
    mix[mix.len() - 1].0
}

/// Build the fleet, the shapes and the seeded arrivals.
pub fn scenario(config: &DayConfig, catalog: &'static Catalog) -> Result<Scenario, crate::SimError> {
    if config.nodes == 0 || config.gpus_per_node == 0 || config.days == 0 {
        return Err("nodes, GPUs per node and days must be at least 1".into());
    }
    if !(0.05..=2.0).contains(&config.load) {
        return Err(format!("load {} is outside 0.05..=2", config.load).into());
    }
    let id = catalog.lookup(&config.model).ok_or_else(|| format!("unknown GPU model {:?}", config.model))?;
    let model = catalog.model(id);
    let geometry = model.mig.as_ref().ok_or_else(|| format!("{} does not support MIG", model.id))?;
    let fleet_toml = format!(
        "[[node]]\nname = \"node\"\ncount = {}\ncpu = 256\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"{}\"\ncount = {}\n",
        config.nodes, model.id, config.gpus_per_node
    );
    let fleet = gantry_spec::parse_fleet(&fleet_toml, catalog).map_err(|e| e.to_string())?;
    let mut shapes_toml = String::new();
    let mut inference_milli = Vec::new();
    for (profile, _) in INFERENCE_MIX {
        let p = geometry.profile(profile).ok_or_else(|| format!("{} has no MIG profile {profile}", model.id))?;
        inference_milli.push(u64::from(model.mig_milli(p).0));
        shapes_toml.push_str(&format!(
            "[[job]]\nname = \"infer-{profile}\"\ncpu = 4\nmemory = \"16GiB\"\ngpu = {{ mig = \"{profile}\" }}\n\n"
        ));
    }
    for (count, _) in TRAINING_MIX {
        if count > config.gpus_per_node {
            continue;
        }
        shapes_toml.push_str(&format!(
            "[[job]]\nname = \"train-{count}\"\ncpu = {}\nmemory = \"{}GiB\"\ngpu = {{ count = {count} }}\n\n",
            16 * count,
            128 * count
        ));
    }
    let shapes = gantry_spec::parse_workload(&shapes_toml, catalog).map_err(|e| e.to_string())?;
    let training: Vec<(u32, u64)> = TRAINING_MIX.iter().copied().filter(|&(c, _)| c <= config.gpus_per_node).collect();

    let gpus = f64::from(config.nodes * config.gpus_per_node);
    let total_w = |mix: &[(usize, u64)]| mix.iter().map(|m| m.1).sum::<u64>() as f64;
    let inference_w: Vec<(usize, u64)> = INFERENCE_MIX.iter().enumerate().map(|(i, m)| (i, m.1)).collect();
    let mean_inference_gpu =
        inference_w.iter().map(|&(i, w)| inference_milli[i] as f64 / 1000.0 * w as f64).sum::<f64>()
            / total_w(&inference_w);
    let training_w: Vec<(usize, u64)> = training.iter().enumerate().map(|(i, m)| (i, m.1)).collect();
    let mean_training_gpu = training.iter().map(|&(c, w)| f64::from(c) * w as f64).sum::<f64>() / total_w(&training_w);
    // Peak arrival rates per second, so each phase's main kind asks for `load` of the fleet.
    let inference_peak = config.load * gpus / (mean_inference_gpu * INFERENCE_MEAN_S);
    let training_peak = config.load * gpus / (mean_training_gpu * TRAINING_MEAN_S);
    let end_s = u64::from(config.days) * 86_400;
    let is_day = |t: f64| (8.0 * 3600.0..20.0 * 3600.0).contains(&(t % 86_400.0));

    let mut rng = SeededRng::new(config.seed);
    let mut jobs = Vec::new();
    // Arrivals by thinning: candidates at the peak rate, kept with the rate of their hour.
    for (kind, peak) in [(0usize, inference_peak), (1, training_peak)] {
        let mut t = 0.0;
        loop {
            t += exp_draw(&mut rng, 1.0 / peak);
            if t >= end_s as f64 {
                break;
            }
            let in_phase = is_day(t) == (kind == 0);
            let keep = if in_phase { 1.0 } else { OFF_PHASE };
            if (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= keep {
                continue;
            }
            let job = if kind == 0 {
                let shape = pick(&mut rng, &inference_w);
                DayJob {
                    arrival_s: t as u64,
                    duration_s: exp_draw(&mut rng, INFERENCE_MEAN_S).clamp(600.0, 6.0 * 3600.0) as u64,
                    patience_s: INFERENCE_PATIENCE_S,
                    milli: inference_milli[shape],
                    shape,
                }
            } else {
                let i = pick(&mut rng, &training_w);
                DayJob {
                    arrival_s: t as u64,
                    duration_s: exp_draw(&mut rng, TRAINING_MEAN_S).clamp(1800.0, 8.0 * 3600.0) as u64,
                    patience_s: TRAINING_PATIENCE_S,
                    milli: u64::from(training[i].0) * 1000,
                    shape: INFERENCE_MIX.len() + i,
                }
            };
            jobs.push(job);
        }
    }
    jobs.sort_by_key(|j| (j.arrival_s, j.shape, j.duration_s));
    Ok(Scenario { fleet, shapes, jobs, end_s })
}

/// Standard layouts of a MIG model, by name, for the static candidates.
fn standard_layouts(model: &gantry_catalog::GpuModel) -> Vec<(String, Vec<MigInstanceSpec>)> {
    let wanted: [(&str, &[(&str, u8)]); 5] = [
        (
            "7x1g",
            &[
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("1g.10gb", 4),
                ("1g.10gb", 5),
                ("1g.10gb", 6),
            ],
        ),
        ("3x2g+1g", &[("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
        ("2x3g", &[("3g.40gb", 0), ("3g.40gb", 4)]),
        ("3g+2x2g", &[("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]),
        ("3g+2g+2x1g", &[("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]),
    ];
    let Some(geometry) = model.mig.as_ref() else { return Vec::new() };
    wanted
        .iter()
        .filter_map(|(name, list)| {
            let layout: Vec<MigInstanceSpec> =
                list.iter().map(|&(p, start)| MigInstanceSpec { profile: p.into(), start }).collect();
            geometry.validate_layout(&model.id, &layout).ok().map(|_| (name.to_string(), layout))
        })
        .collect()
}

/// The static layouts tried: the first k GPUs (k in steps of half a node) in each standard
/// layout, and the offline planner's layout for the scenario's mean concurrent demand.
pub fn static_candidates(s: &Scenario, catalog: &'static Catalog) -> Result<Vec<(String, Fleet)>, crate::SimError> {
    let model = catalog.model(catalog.lookup(&s.fleet.nodes[0].gpus[0].model).ok_or("unknown model")?);
    let per_node = s.fleet.nodes[0].gpus.len();
    let total = s.fleet.nodes.len() * per_node;
    let step = (per_node / 2).max(1);
    let mut out = vec![("all whole".to_string(), s.fleet.clone())];
    for (name, layout) in standard_layouts(model) {
        for k in (step..=total).step_by(step) {
            let mut fleet = s.fleet.clone();
            for gpu in fleet.nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()).take(k) {
                gpu.mode = GpuMode::Mig { instances: layout.clone() };
            }
            out.push((format!("{k} GPUs {name}"), fleet));
        }
    }
    // The offline plan for the mean demand: each shape × its mean concurrency.
    let span = s.end_s.max(1) as f64;
    let mut mean: BTreeMap<usize, f64> = BTreeMap::new();
    for j in &s.jobs {
        *mean.entry(j.shape).or_default() += j.duration_s as f64 / span;
    }
    let mut demand = Vec::new();
    for (shape, concurrency) in mean {
        for i in 0..concurrency.round() as usize {
            let mut job = s.shapes[shape].clone();
            job.name = format!("{}-{i}", job.name);
            demand.push(job);
        }
    }
    let planned = gantry_engine::plan::plan(&s.fleet, &demand, catalog).map_err(|e| e.to_string())?;
    out.push(("offline plan of the mean mix".to_string(), planned.fleet));
    Ok(out)
}

/// Position on node `n` of its GPU with NVML index `index`.
fn position(fleet: &Fleet, n: usize, index: u32) -> usize {
    fleet.nodes[n].gpus.iter().position(|x| x.index == index).expect("a GPU the fleet has")
}

/// (node, position) of the GPU the planner names by node name and NVML index.
fn locate(fleet: &Fleet, node_index: &BTreeMap<String, usize>, node: &str, index: u32) -> (usize, usize) {
    let n = node_index[node];
    (n, position(fleet, n, index))
}

/// A running job as the replay tracks it.
struct Run {
    end_s: u64,
    /// The arrival it serves.
    job: usize,
    /// (node index, GPU position on the node) it holds.
    gpus: Vec<(usize, usize)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Depart(AllocId),
    /// A GPU's reconfiguration window is over.
    Resume,
    Arrive(usize),
    Plan,
}

/// The GPUs (node, position) an allocation holds.
fn held(
    engine: &Engine,
    id: AllocId,
    job: &CompiledJob,
    fleet: &Fleet,
    node_index: &BTreeMap<String, usize>,
) -> Vec<(usize, usize)> {
    let tasks = engine.placement(id, job).expect("a placed allocation");
    tasks
        .iter()
        .flat_map(|task| {
            let n = node_index[&task.node];
            task.gpus.iter().map(move |g| (n, position(fleet, n, g.gpu())))
        })
        .collect()
}

/// Each GPU's situation for the online planner: when its work ends, its last change, its
/// tasks, and whether they can all move (inference instances can; training cannot).
fn gpus_now(
    fleet: &Fleet,
    runs: &BTreeMap<AllocId, Run>,
    last_change: &[Vec<Option<u64>>],
    s: &Scenario,
) -> Vec<Vec<GpuNow>> {
    let mut now: Vec<Vec<GpuNow>> = fleet
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            (0..node.gpus.len())
                .map(|g| GpuNow { last_change_s: last_change[n][g], movable: true, ..GpuNow::default() })
                .collect()
        })
        .collect();
    for r in runs.values() {
        let inference = s.jobs[r.job].shape < INFERENCE_MIX.len();
        for &(n, g) in &r.gpus {
            let gpu = &mut now[n][g];
            gpu.busy_until_s = Some(gpu.busy_until_s.map_or(r.end_s, |e| e.max(r.end_s)));
            gpu.tasks += 1;
            gpu.movable &= inference;
        }
    }
    now
}

/// Moves inference instances off GPUs so that they can change.
struct Mover<'a> {
    engine: &'a mut Engine,
    fleet: &'a Fleet,
    node_index: &'a BTreeMap<String, usize>,
    compiled: &'a mut Vec<CompiledJob>,
}

impl Mover<'_> {
    /// For each group of GPUs, move every instance on them that runs longer than its restart
    /// to free instances the engine finds elsewhere (every group's GPUs cordoned meanwhile, so
    /// nothing moves onto a GPU being emptied) — a group entirely or not at all: if one
    /// instance has nowhere to go, its group stays as it was. Returns the new allocations;
    /// `runs` is updated.
    fn empty(
        &mut self,
        groups: &[Vec<(usize, usize)>],
        s: &Scenario,
        runs: &mut BTreeMap<AllocId, Run>,
        t: u64,
        restart_s: u64,
    ) -> Result<Vec<AllocId>, String> {
        let all: Vec<(usize, usize)> = groups.iter().flatten().copied().collect();
        let cordon = |engine: &mut Engine, on: bool| -> Result<(), String> {
            for &(n, g) in &all {
                let node = &self.fleet.nodes[n];
                engine.set_gpu_cordoned(&node.name, node.gpus[g].index, on).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        cordon(self.engine, true)?;
        let mut moved = Vec::new();
        for gpus in groups {
            moved.extend(self.empty_group(gpus, s, runs, t, restart_s)?);
        }
        cordon(self.engine, false)?;
        Ok(moved)
    }

    fn empty_group(
        &mut self,
        gpus: &[(usize, usize)],
        s: &Scenario,
        runs: &mut BTreeMap<AllocId, Run>,
        t: u64,
        restart_s: u64,
    ) -> Result<Vec<AllocId>, String> {
        let mut engine = self.engine.clone();
        let mut after = BTreeMap::new();
        let mut moved = Vec::new();
        for (&id, run) in runs.iter() {
            if !run.gpus.iter().any(|gpu| gpus.contains(gpu)) || run.end_s <= t + restart_s {
                continue;
            }
            let shape = s.jobs[run.job].shape;
            if !engine.is_current(&self.compiled[shape]) {
                self.compiled[shape] = engine.compile(&s.shapes[shape]).map_err(|e| e.to_string())?;
            }
            engine.release(id).map_err(|e| e.to_string())?;
            let Ok(new) = engine.place(&self.compiled[shape]) else { return Ok(Vec::new()) };
            let held = held(&engine, new, &self.compiled[shape], self.fleet, self.node_index);
            after.insert(id, (new, Run { end_s: run.end_s, job: run.job, gpus: held }));
            moved.push(new);
        }
        *self.engine = engine;
        for (old, (new, run)) in after {
            runs.remove(&old);
            runs.insert(new, run);
        }
        Ok(moved)
    }
}

/// Replay `s` on `fleet` (its modes as the start); with `dynamic`, the online planner
/// reconfigures as it runs.
pub fn replay(
    s: &Scenario,
    fleet: &Fleet,
    label: &str,
    dynamic: Option<&DayConfig>,
    catalog: &'static Catalog,
) -> Result<DayResult, crate::SimError> {
    let mut fleet = fleet.clone();
    let mut engine = Engine::new(&fleet, catalog, EngineConfig::default()).map_err(|e| e.to_string())?;
    let mut compiled: Vec<CompiledJob> =
        s.shapes.iter().map(|j| engine.compile(j)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let node_index: BTreeMap<String, usize> =
        fleet.nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
    let gpu_count: usize = fleet.nodes.iter().map(|n| n.gpus.len()).sum();
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in s.jobs.iter().enumerate() {
        events.push(Reverse((j.arrival_s, Event::Arrive(i))));
    }
    if dynamic.is_some() {
        events.push(Reverse((0, Event::Plan)));
    }
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut runs: BTreeMap<AllocId, Run> = BTreeMap::new();
    let mut waits: Vec<u64> = Vec::new();
    let (mut served_milli_s, mut abandoned) = (0f64, 0u64);
    // Per kind (0 = inference, 1 = training): served and demanded milli-GPU-seconds.
    let mut by_kind = [[0f64; 2]; 2];
    let kind = |j: &DayJob| usize::from(j.shape >= INFERENCE_MIX.len());
    for j in &s.jobs {
        by_kind[kind(j)][1] += j.milli as f64 * j.duration_s as f64;
    }
    let mut last_change: Vec<Vec<Option<u64>>> = fleet.nodes.iter().map(|n| vec![None; n.gpus.len()]).collect();
    let mut out_until: Vec<Vec<u64>> = fleet.nodes.iter().map(|n| vec![0; n.gpus.len()]).collect();
    let mut planner_drain: BTreeSet<(usize, usize)> = BTreeSet::new();
    let (mut reconfigurations, mut drain_idle_milli_s, mut alloc_area) = (0u64, 0f64, 0f64);
    let (mut moves, mut restart_milli_s) = (0u64, 0f64);
    let mut last_t = 0u64;
    let window_end = s.jobs.iter().map(|j| j.arrival_s).max().unwrap_or(0).max(1);

    while let Some(Reverse((t, event))) = events.pop() {
        // Integrate allocation and drain idleness up to t.
        let dt = t.saturating_sub(last_t);
        if dt > 0 {
            let upto = t.min(window_end).saturating_sub(last_t.min(window_end));
            alloc_area += engine.state().used_milli() as f64 * upto as f64;
            // Unused on a cordoned GPU: what is not allocated on it.
            let unused: u64 =
                engine.state().gpus.iter().filter(|g| g.cordoned).map(|g| u64::from(1000 - g.used_milli)).sum();
            drain_idle_milli_s += unused as f64 * dt as f64;
            last_t = t;
        }
        match event {
            Event::Arrive(i) => pending.push_back(i),
            Event::Depart(id) => {
                // A moved instance's first allocation is gone already.
                if runs.remove(&id).is_some() {
                    engine.release(id).map_err(|e| e.to_string())?;
                }
            }
            Event::Resume => {}
            Event::Plan => {
                let config = dynamic.expect("plan events only in dynamic replays");
                // Demand: what waits, plus what the recent arrivals will keep busy — per shape,
                // arrivals in the window × their length ÷ the window (Little's law), so the
                // plan follows the mix as it shifts instead of what happens to run now.
                let since = t.saturating_sub(config.window_s);
                let from = s.jobs.partition_point(|j| j.arrival_s < since);
                let to = s.jobs.partition_point(|j| j.arrival_s <= t);
                let mut busy_s: BTreeMap<usize, u64> = BTreeMap::new();
                for j in &s.jobs[from..to] {
                    *busy_s.entry(j.shape).or_default() += j.duration_s;
                }
                let window = (t - since).max(1) as f64;
                let mut demand: Vec<Job> = Vec::new();
                for (shape, busy) in busy_s {
                    for k in 0..(busy as f64 / window).round() as usize {
                        let mut job = s.shapes[shape].clone();
                        job.name = format!("forecast-{shape}-{k}");
                        demand.push(job);
                    }
                }
                for &i in &pending {
                    let mut job = s.shapes[s.jobs[i].shape].clone();
                    job.name = format!("j{i}");
                    demand.push(job);
                }
                let now = gpus_now(&fleet, &runs, &last_change, s);
                let mut decided = step(&fleet, &now, &demand, t, &config.online, catalog).map_err(|e| e.to_string())?;
                // Training waits: empty the GPUs the planner picks for it, then plan again.
                let waiting: Vec<u32> = pending
                    .iter()
                    .filter(|&&i| kind(&s.jobs[i]) == 1)
                    .map(|&i| u32::try_from(s.jobs[i].milli / 1000).unwrap_or(u32::MAX))
                    .collect();
                if !waiting.is_empty() && !decided.empty.is_empty() {
                    let groups: Vec<Vec<(usize, usize)>> = choose_empty(&fleet, &now, &decided, &waiting)
                        .iter()
                        .map(|group| {
                            group.iter().map(|(name, index)| locate(&fleet, &node_index, name, *index)).collect()
                        })
                        .collect();
                    let mut mover =
                        Mover { engine: &mut engine, fleet: &fleet, node_index: &node_index, compiled: &mut compiled };
                    let moved = mover.empty(&groups, s, &mut runs, t, config.restart_s)?;
                    for &id in &moved {
                        let r = &runs[&id];
                        events.push(Reverse((r.end_s, Event::Depart(id))));
                        let lost = s.jobs[r.job].milli as f64 * config.restart_s as f64;
                        served_milli_s -= lost;
                        by_kind[0][0] -= lost;
                        restart_milli_s += lost;
                    }
                    if !moved.is_empty() {
                        moves += moved.len() as u64;
                        decided = step(
                            &fleet,
                            &gpus_now(&fleet, &runs, &last_change, s),
                            &demand,
                            t,
                            &config.online,
                            catalog,
                        )
                        .map_err(|e| e.to_string())?;
                    }
                }
                for (node, index, mode) in &decided.reconfigure {
                    let (n, g) = locate(&fleet, &node_index, node, *index);
                    if engine.set_gpu_mode(node, *index, mode).map_err(|e| e.to_string())? {
                        fleet.nodes[n].gpus[g].mode = mode.clone();
                        last_change[n][g] = Some(t);
                        reconfigurations += 1;
                        out_until[n][g] = t + config.reconfigure_s;
                        events.push(Reverse((out_until[n][g], Event::Resume)));
                    }
                }
                planner_drain =
                    decided.drain.keys().map(|(name, index)| locate(&fleet, &node_index, name, *index)).collect();
                if t + config.period_s < s.end_s {
                    events.push(Reverse((t + config.period_s, Event::Plan)));
                }
            }
        }
        // Cordons: out for reconfiguration, or drained by the planner.
        for (n, node) in fleet.nodes.iter().enumerate() {
            for (g, gpu) in node.gpus.iter().enumerate() {
                let want = out_until[n][g] > t || planner_drain.contains(&(n, g));
                engine.set_gpu_cordoned(&node.name, gpu.index, want).map_err(|e| e.to_string())?;
            }
        }
        // Start what can start, in arrival order; abandon who waited too long.
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        let mut still = VecDeque::with_capacity(pending.len());
        while let Some(i) = pending.pop_front() {
            let j = &s.jobs[i];
            if t > j.arrival_s + j.patience_s {
                abandoned += 1;
                continue;
            }
            if failed.contains(&j.shape) {
                still.push_back(i);
                continue;
            }
            if !engine.is_current(&compiled[j.shape]) {
                compiled[j.shape] = engine.compile(&s.shapes[j.shape]).map_err(|e| e.to_string())?;
            }
            match engine.place(&compiled[j.shape]) {
                Ok(id) => {
                    let gpus = held(&engine, id, &compiled[j.shape], &fleet, &node_index);
                    runs.insert(id, Run { end_s: t + j.duration_s, job: i, gpus });
                    events.push(Reverse((t + j.duration_s, Event::Depart(id))));
                    waits.push(t - j.arrival_s);
                    served_milli_s += j.milli as f64 * j.duration_s as f64;
                    by_kind[kind(j)][0] += j.milli as f64 * j.duration_s as f64;
                }
                Err(_) => {
                    failed.insert(j.shape);
                    still.push_back(i);
                }
            }
        }
        pending = still;
    }
    abandoned += pending.len() as u64;
    let demanded: f64 = s.jobs.iter().map(|j| j.milli as f64 * j.duration_s as f64).sum();
    waits.sort_unstable();
    let p95 = if waits.is_empty() { 0 } else { waits[(waits.len() - 1) * 95 / 100] };
    let days = s.end_s as f64 / 86_400.0;
    Ok(DayResult {
        label: label.to_string(),
        jobs: s.jobs.len() as u64,
        started: waits.len() as u64,
        abandoned,
        demanded_gpu_h: demanded / 1000.0 / 3600.0,
        served_gpu_h: served_milli_s / 1000.0 / 3600.0,
        served_pct: if demanded > 0.0 { served_milli_s / demanded * 100.0 } else { 100.0 },
        inference_served_pct: by_kind[0][0] / by_kind[0][1].max(1.0) * 100.0,
        training_served_pct: by_kind[1][0] / by_kind[1][1].max(1.0) * 100.0,
        mean_wait_s: if waits.is_empty() { 0.0 } else { waits.iter().sum::<u64>() as f64 / waits.len() as f64 },
        p95_wait_s: p95,
        allocated_pct: alloc_area / (window_end as f64 * gpu_count as f64 * 1000.0) * 100.0,
        reconfigurations,
        reconfigurations_per_gpu_day: reconfigurations as f64 / gpu_count.max(1) as f64 / days,
        drain_idle_gpu_h: drain_idle_milli_s / 1000.0 / 3600.0,
        moves,
        moves_per_gpu_day: moves as f64 / gpu_count.max(1) as f64 / days,
        restart_gpu_h: restart_milli_s / 1000.0 / 3600.0,
    })
}

/// Every static candidate and the dynamic planner on the same scenario. `progress` is called
/// after each replay with (done, total).
pub fn evaluate(
    config: &DayConfig,
    catalog: &'static Catalog,
    mut progress: impl FnMut(usize, usize),
) -> Result<Evaluation, crate::SimError> {
    let s = scenario(config, catalog)?;
    let candidates = static_candidates(&s, catalog)?;
    let total = candidates.len() + 1;
    let mut statics = Vec::with_capacity(candidates.len());
    for (i, (label, fleet)) in candidates.iter().enumerate() {
        statics.push(replay(&s, fleet, label, None, catalog)?);
        progress(i + 1, total);
    }
    let dynamic = replay(&s, &s.fleet, "dynamic (online planner)", Some(config), catalog)?;
    progress(total, total);
    let best_static = statics
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.served_pct.total_cmp(&b.1.served_pct).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i)
        .expect("at least the all-whole candidate");
    let gain_pct = (dynamic.served_pct / statics[best_static].served_pct.max(1e-9) - 1.0) * 100.0;
    Ok(Evaluation { statics, best_static, dynamic, gain_pct })
}
