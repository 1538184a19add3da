//! Dynamic MIG planning against the best static layout, on a workload whose mix shifts over
//! the day: inference deployments on MIG slices by day, whole-GPU training by night.
//!
//! The question a platform team asks before letting a planner touch its layouts: how much
//! more of the demand does re-planning serve than the best layout we could fix once, and
//! what does it cost in reconfigurations and drains? Both sides replay the same seeded
//! arrivals on the same fleet through the time replay's loop (`protocol_b`, the engine's
//! `Scheduler` in FIFO order with greedy backfill — the cycle the live controller runs):
//! - **static**: one layout for the whole run; every candidate of a family (the first k GPUs
//!   in one of several standard A100/H100 layouts, k in steps of half a node, plus the
//!   offline planner's layout for the mean mix) is replayed and the best one is kept;
//! - **dynamic**: starts whole; the online planner (`planner.rs`, an operator of the replay)
//!   plans every period for what runs, waits and arrived lately, and applies its changes
//!   with `Scheduler::set_gpu_mode` — idle GPUs only, each reconfigured GPU out (cordoned)
//!   for `reconfigure_s`, and busy GPUs drained (cordoned) when the planner asks; the
//!   GPU-hours a drained or reconfiguring GPU leaves unused are measured. When whole-GPU
//!   work waits and the planner offers busy MIG GPUs to empty (`Step::empty`), inference
//!   instances on them move to free instances elsewhere (`Scheduler::relocate`) — each move a
//!   restart that serves nothing for `restart_s`, counted against demand served — and the
//!   planner is asked again.
//!
//! A job that has not started within its patience (a deployment that goes elsewhere, a
//! training run given up) gives up: demand served is the GPU time of the jobs that started,
//! over the GPU time of all jobs (a MIG instance counts its share of the card's compute).
//! Same config and seed ⇒ same result.

mod planner;
pub mod report;
mod scenario;

pub use scenario::{DayJob, Scenario, scenario, static_candidates};

use crate::protocol_b::{Operator, ReplayOptions, ReplayResult, SimJob, replay_with};
use gantry_catalog::Catalog;
use gantry_engine::online::OnlineConfig;
use gantry_engine::{CompiledJob, Engine, EngineConfig};
use gantry_types::{Fleet, Job};
use planner::Planner;
use scenario::INFERENCE_MIX;

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
            online: OnlineConfig {
                cooldown_s: 1800,
                drain_horizon_s: 3600,
                move_work: true,
                ..OnlineConfig::default()
            },
        }
    }
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

/// Arrival `i` as submitted: its shape, named `j<i>`, in the queue of its kind
/// (`inference` or `training`: the replay's tenants).
pub fn job_spec(s: &Scenario, i: usize) -> Job {
    let mut job = s.shapes[s.jobs[i].shape].clone();
    job.name = format!("j{i}");
    job.queue = if is_training(&s.jobs[i]) { "training" } else { "inference" }.into();
    job
}

/// A whole-GPU training job (else a MIG inference deployment).
pub fn is_training(j: &DayJob) -> bool {
    j.shape >= INFERENCE_MIX.len()
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
    let engine = Engine::new(fleet, catalog, EngineConfig::default())?;
    // Each shape compiles once; its arrivals share the result under their own names.
    let shapes: Vec<CompiledJob> = s.shapes.iter().map(|j| engine.compile(j)).collect::<Result<_, _>>()?;
    let jobs: Vec<SimJob> = s
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let spec = job_spec(s, i);
            let mut job = shapes[j.shape].clone();
            job.name = spec.name.clone();
            SimJob {
                spec,
                arrival_s: j.arrival_s,
                duration_s: Some(j.duration_s),
                utilization: Some(1.0),
                job,
                patience_s: Some(j.patience_s),
            }
        })
        .collect();
    let options = ReplayOptions::default();
    let mut planner = dynamic.map(|config| Planner::new(s, fleet, config, catalog));
    let operator = planner.as_mut().map(|p| p as &mut dyn Operator);
    let replayed = replay_with(engine, jobs, 0, &options, operator)?;
    Ok(day_result(s, label, &replayed, planner.as_ref()))
}

/// What the replay measured, as the comparison reports it.
fn day_result(s: &Scenario, label: &str, r: &ReplayResult, planner: Option<&Planner<'_>>) -> DayResult {
    // Per kind (0 = inference, 1 = training): served and demanded milli-GPU-seconds.
    let mut by_kind = [[0f64; 2]; 2];
    for j in &s.jobs {
        by_kind[usize::from(is_training(j))][1] += j.milli as f64 * j.duration_s as f64;
    }
    let mut waits = Vec::new();
    for e in r.events.iter().filter(|e| e.event == "start") {
        let j = &s.jobs[e.index];
        by_kind[usize::from(is_training(j))][0] += j.milli as f64 * j.duration_s as f64;
        waits.push(e.time_s - j.arrival_s);
    }
    // Restarts of moved instances serve nothing (only inference moves).
    let restart_milli_s = planner.map_or(0.0, |p| p.restart_milli_s);
    by_kind[0][0] -= restart_milli_s;
    let served = by_kind[0][0] + by_kind[1][0];
    let demanded = by_kind[0][1] + by_kind[1][1];
    waits.sort_unstable();
    let gpus = r.fleet_gpus.max(1) as f64;
    let days = s.end_s as f64 / 86_400.0;
    let (reconfigurations, moves) = planner.map_or((0, 0), |p| (p.reconfigurations, p.moves));
    DayResult {
        label: label.to_string(),
        jobs: s.jobs.len() as u64,
        started: waits.len() as u64,
        abandoned: r.gave_up + r.never_started,
        demanded_gpu_h: demanded / 1000.0 / 3600.0,
        served_gpu_h: served / 1000.0 / 3600.0,
        served_pct: if demanded > 0.0 { served / demanded * 100.0 } else { 100.0 },
        inference_served_pct: by_kind[0][0] / by_kind[0][1].max(1.0) * 100.0,
        training_served_pct: by_kind[1][0] / by_kind[1][1].max(1.0) * 100.0,
        mean_wait_s: if waits.is_empty() { 0.0 } else { waits.iter().sum::<u64>() as f64 / waits.len() as f64 },
        p95_wait_s: if waits.is_empty() { 0 } else { waits[(waits.len() - 1) * 95 / 100] },
        allocated_pct: r.mean_alloc_pct,
        reconfigurations,
        reconfigurations_per_gpu_day: reconfigurations as f64 / gpus / days,
        drain_idle_gpu_h: planner.map_or(0.0, |p| p.drain_idle_milli_s) / 1000.0 / 3600.0,
        moves,
        moves_per_gpu_day: moves as f64 / gpus / days,
        restart_gpu_h: restart_milli_s / 1000.0 / 3600.0,
    }
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
