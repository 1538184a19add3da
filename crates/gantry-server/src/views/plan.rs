//! `GET /v1/plan`: what the online MIG planner would change now, for the waiting and the
//! running jobs (advice; nothing is applied).

use crate::control::Controller;
use crate::error::ControlError;

/// What the online planner would change now (`GET /v1/plan`): advice, nothing is applied.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlanView {
    /// Idle GPUs it would reconfigure now.
    pub reconfigure: Vec<PlannedChange>,
    /// Busy GPUs it would drain first (their work ends within the drain horizon).
    pub drain: Vec<PlannedChange>,
    /// Changes it wants that wait: work on the GPU ends later, or it changed recently.
    pub deferred: u32,
    /// Tasks planned for: those of the waiting and the running jobs.
    pub demand_tasks: u32,
}

/// One GPU's mode now and the one the planner wants.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedChange {
    pub node: String,
    pub gpu: u32,
    pub from: String,
    pub to: String,
}

/// The online planner's advice for the fleet as it is now: demand = the waiting and the
/// running jobs; a running job's GPUs are busy until its start plus its time limit (or
/// for as long as anyone knows, without one). Nothing is applied: the service cannot
/// reconfigure GPUs yet.
pub fn plan_advice(c: &Controller, now: u64) -> Result<PlanView, ControlError> {
    let engine = c.scheduler.engine();
    let state = engine.state();
    let fleet = engine.fleet_now();
    let mut busy: Vec<Vec<gantry_engine::online::GpuNow>> =
        fleet.nodes.iter().map(|n| vec![gantry_engine::online::GpuNow::default(); n.gpus.len()]).collect();
    let mut demand = Vec::new();
    for (alloc, allocation) in engine.allocations() {
        let Some((job, started_at)) = c.scheduler.running(*alloc) else { continue };
        let spec = c.scheduler.job(job);
        let end = spec.and_then(|j| j.planned_length_s).map_or(u64::MAX, |len| started_at.saturating_add(len));
        for grant in allocation.tasks.iter().flat_map(|t| t.grants.iter()) {
            let g = &state.gpus[grant.gpu() as usize];
            let position = (grant.gpu() - state.nodes[g.node as usize].gpu_first) as usize;
            let slot = &mut busy[g.node as usize][position].busy_until_s;
            *slot = Some(slot.map_or(end, |e| e.max(end)));
        }
        if let Some(spec) = spec {
            demand.push(gantry_engine::online::job_of(&spec.compiled));
        }
    }
    for (id, _) in c.scheduler.pending_by_id() {
        if let Some(spec) = c.scheduler.job(id) {
            demand.push(gantry_engine::online::job_of(&spec.compiled));
        }
    }
    let step = gantry_engine::online::step(
        &fleet,
        &busy,
        &demand,
        now,
        &gantry_engine::online::OnlineConfig::default(),
        c.catalog,
    )
    .map_err(|e| ControlError::Internal(e.to_string()))?;
    let mode_of = |node: &str, index: u32| {
        fleet
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.gpus.iter().find(|g| g.index == index))
            .map(|g| g.mode.clone())
    };
    let reconfigure = step
        .reconfigure
        .iter()
        .map(|(node, gpu, to)| PlannedChange {
            node: node.clone(),
            gpu: *gpu,
            from: mode_of(node, *gpu).map(|m| m.text()).unwrap_or_default(),
            to: to.text(),
        })
        .collect();
    let drain = step
        .drain
        .iter()
        .map(|((node, gpu), to)| PlannedChange {
            node: node.clone(),
            gpu: *gpu,
            from: mode_of(node, *gpu).map(|m| m.text()).unwrap_or_default(),
            to: to.text(),
        })
        .collect();
    Ok(PlanView {
        reconfigure,
        drain,
        deferred: step.deferred,
        demand_tasks: demand.iter().map(|j| j.task_count()).sum(),
    })
}
