//! `GET /v1/plan`: what the online MIG planner would change now, for the waiting and the
//! running jobs (advice: with `reconfigure = "auto"` the controller's own steps, within their
//! guards, are in `GET /v1/reconfigurations`).

use crate::control::Controller;
use crate::error::ControlError;
pub use gantry_api::reconfig::{PlanView, PlannedChange};

/// The online planner's view of the fleet as it is now: demand = the waiting and the running
/// jobs (and, with a forecast window, what the last window's arrivals will keep busy); a
/// running job's GPUs are busy until its start plus its time limit (or for as long as anyone
/// knows, without one). With `reconfigure = "auto"` the controller carries these changes out
/// within its guards (`GET /v1/reconfigurations`); otherwise they are advice.
pub fn plan_advice(c: &Controller, now: u64) -> Result<PlanView, ControlError> {
    let planned = c.plan_now(now, &c.online_config())?;
    let mode_of = |node: &str, index: u32| {
        planned
            .fleet
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.gpus.iter().find(|g| g.index == index))
            .map(|g| g.mode.text())
            .unwrap_or_default()
    };
    let change = |node: &String, gpu: u32, to: &gantry_types::GpuMode| PlannedChange {
        node: node.clone(),
        gpu,
        from: mode_of(node, gpu),
        to: to.text(),
    };
    Ok(PlanView {
        reconfigure: planned.step.reconfigure.iter().map(|(node, gpu, to)| change(node, *gpu, to)).collect(),
        drain: planned.step.drain.iter().map(|((node, gpu), to)| change(node, *gpu, to)).collect(),
        deferred: planned.step.deferred,
        demand_tasks: planned.demand_tasks,
        mode: c.reconfigs().policy.mode,
    })
}
