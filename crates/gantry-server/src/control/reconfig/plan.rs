//! What the online planner is given on the live fleet, the same for advice (`GET /v1/plan`)
//! and for the controller's own reconfigurations: the fleet's modes now, each GPU's
//! situation (when its work ends by the jobs' time limits, its last change, whether all its
//! tasks are restartable), and the demand — what waits, what runs without a time limit, and
//! what the last window's arrivals will keep busy (Little's law per job shape, lengths by time
//! limit, as the simulator's planner counts it); without a forecast window, what waits and
//! what runs.

use crate::control::Controller;
use crate::error::ControlError;
use gantry_engine::online::{GpuNow, OnlineConfig, Step, job_of};
use gantry_types::{Fleet, GpuRequest, Job};
use std::collections::BTreeMap;

/// What one task of the demand asks of a GPU's mode.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A MIG instance of this profile.
    Profile(String),
    /// Whole GPUs.
    Whole,
    /// A share of an MPS or time-sliced GPU.
    Share,
    /// Only memory: the smallest unit that fits, whatever the mode.
    Any,
}

/// One task of the demand: what it asks of a GPU's mode, on which models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Need {
    pub kind: Kind,
    /// Models whose GPUs its model constraints and selector accept (on some device class).
    pub models: std::collections::BTreeSet<gantry_catalog::ModelId>,
}

impl Need {
    /// Could this task use a GPU of `model` in a mode that offers `kind`?
    pub fn fits(&self, kind: &Kind, model: gantry_catalog::ModelId) -> bool {
        (self.kind == *kind || self.kind == Kind::Any) && self.models.contains(&model)
    }
}

/// The planner's input and the step it took.
pub(crate) struct Planned {
    pub fleet: Fleet,
    pub now: Vec<Vec<GpuNow>>,
    pub step: Step,
    /// Tasks of the demand, waiting jobs' first (with their id), then the forecast's.
    pub pool: Vec<(Need, Option<u64>)>,
    pub demand_tasks: u32,
    /// Sizes (whole GPUs) of the waiting jobs that need whole GPUs.
    pub whole_waiting: Vec<u32>,
}

/// Whole GPUs `job` asks for, all its groups' replicas together.
fn whole_gpus(job: &Job) -> u32 {
    job.groups
        .iter()
        .map(|g| match g.resources.gpu {
            Some(GpuRequest::Whole { count }) => count * g.replicas,
            _ => 0,
        })
        .sum()
}

/// What one job's tasks ask of a GPU, one entry per task.
fn needs(job: &gantry_engine::CompiledJob, state: &gantry_engine::ClusterState) -> Vec<Need> {
    use gantry_engine::request::GpuNeed;
    job.groups
        .iter()
        .flat_map(|g| {
            let kind = match &g.gpu {
                GpuNeed::Mig { profile } => Some(Kind::Profile(profile.clone())),
                GpuNeed::Whole { .. } => Some(Kind::Whole),
                GpuNeed::Share { .. } => Some(Kind::Share),
                GpuNeed::Memory { .. } => Some(Kind::Any),
                GpuNeed::None => None,
            };
            let models =
                state.classes.iter().zip(&g.class_ok).filter(|(_, ok)| **ok).map(|(class, _)| class.model).collect();
            let need = kind.map(|kind| Need { kind, models });
            std::iter::repeat_n(need, g.replicas as usize)
        })
        .flatten()
        .collect()
}

impl Controller {
    /// Plan the fleet as it is at `now` with `config`.
    pub(crate) fn plan_now(&self, now: u64, config: &OnlineConfig) -> Result<Planned, ControlError> {
        let engine = self.scheduler.engine();
        let state = engine.state();
        let fleet = engine.fleet_now();
        let mut busy = self.gpus_now(&fleet);
        let mut demand = Vec::new();
        self.add_running(&mut busy, &mut demand);
        let mut pool = Vec::new();
        let mut whole_waiting = Vec::new();
        self.add_pending(&mut pool, &mut whole_waiting, &mut demand);
        for (compiled, job) in self.forecast(now) {
            pool.extend(needs(&compiled, state).into_iter().map(|n| (n, None)));
            demand.push(job);
        }
        let step = gantry_engine::online::step(&fleet, &busy, &demand, now, config, self.catalog)
            .map_err(|e| ControlError::Internal(e.to_string()))?;
        let demand_tasks = demand.iter().map(|j| j.task_count()).sum();
        Ok(Planned { fleet, now: busy, step, pool, demand_tasks, whole_waiting })
    }

    /// Each GPU of `fleet` before its work is counted: idle, movable, with its last change.
    fn gpus_now(&self, fleet: &Fleet) -> Vec<Vec<GpuNow>> {
        fleet
            .nodes
            .iter()
            .map(|n| {
                n.gpus
                    .iter()
                    .map(|g| GpuNow {
                        last_change_s: self
                            .reconfigs
                            .changed_at
                            .get(&(n.name.clone(), g.index))
                            .and_then(|t| t.back().copied()),
                        movable: true,
                        ..GpuNow::default()
                    })
                    .collect()
            })
            .collect()
    }

    /// Count the running jobs on the GPUs they hold (until when, whether all movable), and
    /// add to `demand` those the forecast does not stand for.
    fn add_running(&self, busy: &mut [Vec<GpuNow>], demand: &mut Vec<Job>) {
        let engine = self.scheduler.engine();
        let state = engine.state();
        for (alloc, allocation) in engine.allocations() {
            let Some((job, started_at)) = self.scheduler.running(*alloc) else { continue };
            let spec = self.scheduler.job(job);
            let end = spec.and_then(|j| j.planned_length_s).map_or(u64::MAX, |len| started_at.saturating_add(len));
            let movable = spec.is_some_and(|j| j.lifecycle.restartable);
            for grant in allocation.tasks.iter().flat_map(|t| t.grants.iter()) {
                let g = &state.gpus[grant.gpu() as usize];
                let position = (grant.gpu() - state.nodes[g.node as usize].gpu_first) as usize;
                let slot = &mut busy[g.node as usize][position];
                slot.busy_until_s = Some(slot.busy_until_s.map_or(end, |e| e.max(end)));
                slot.tasks += 1;
                slot.movable &= movable;
            }
            // With a forecast window, the forecast stands for what runs with a time limit (both
            // say how much is busy at once, as the simulator's planner counts it); what runs
            // without one, or without a window, is demand itself.
            let forecast = self.reconfigs.policy.window_s > 0;
            if let Some(spec) = spec.filter(|j| !forecast || j.planned_length_s.is_none()) {
                demand.push(job_of(&spec.compiled));
            }
        }
    }

    /// Add the waiting jobs to the pool (with their id), to `whole_waiting` (those that need
    /// whole GPUs) and to `demand`.
    fn add_pending(&self, pool: &mut Vec<(Need, Option<u64>)>, whole_waiting: &mut Vec<u32>, demand: &mut Vec<Job>) {
        let state = self.scheduler.engine().state();
        for (id, _) in self.scheduler.pending_by_id() {
            if let Some(spec) = self.scheduler.job(id) {
                let job = job_of(&spec.compiled);
                pool.extend(needs(&spec.compiled, state).into_iter().map(|n| (n, Some(id))));
                let whole = whole_gpus(&job);
                if whole > 0 {
                    whole_waiting.push(whole);
                }
                demand.push(job);
            }
        }
    }

    /// What the last window's arrivals will keep busy: per job shape, arrivals × their time
    /// limit ÷ the window, rounded (jobs without a time limit are not forecast).
    fn forecast(&self, now: u64) -> Vec<(gantry_engine::CompiledJob, Job)> {
        let window = self.reconfigs.policy.window_s;
        if window == 0 {
            return Vec::new();
        }
        let mut busy_s: BTreeMap<String, (gantry_engine::CompiledJob, Job, u64)> = BTreeMap::new();
        for &(at, id) in &self.reconfigs.arrivals {
            if at + window < now {
                continue;
            }
            let Some(spec) = self.scheduler.job(id) else { continue };
            let Some(length) = spec.planned_length_s else { continue };
            let job = job_of(&spec.compiled);
            let key = format!("{:?}", job.groups);
            busy_s.entry(key).or_insert_with(|| (spec.compiled.clone(), job, 0)).2 += length;
        }
        let mut out = Vec::new();
        for (shape, (compiled, job, busy)) in busy_s {
            let count = (busy as f64 / window as f64).round() as usize;
            for k in 0..count {
                let mut forecast = job.clone();
                forecast.name = format!("forecast-{k}-{}", shape.len());
                out.push((compiled.clone(), forecast));
            }
        }
        out
    }
}
