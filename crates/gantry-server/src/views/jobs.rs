//! `gantry queue` and `gantry show`: jobs as the token may see them, with why each waiting
//! one waits.

use crate::auth::Principal;
use crate::control::Controller;
use crate::error::ControlError;
use gantry_store::JobRow;
use gantry_types::{JobState, PendingJob, PendingReason, Reason};
use serde::Serialize;

/// A job as `queue` and `show` list it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub row: JobRow,
    /// Why it waits and when it may start, while it is pending.
    pub pending: Option<PendingJob>,
    /// A MIG job no GPU is carved for yet: the GPU the planner would change for it (one job's
    /// view only: it costs a planning step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutWait>,
}

/// Which GPU a waiting MIG job waits to have reconfigured, and who does it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LayoutWait {
    pub node: String,
    pub gpu: u32,
    pub from: String,
    pub to: String,
    /// The GPU still runs work (it changes once that ends).
    pub busy: bool,
    /// In words, with what applies the change (the controller only advises today).
    pub message: String,
}

/// For a job waiting on a MIG profile no GPU offers now: the change of the planner's current
/// advice that carves one (`GET /v1/plan`), if it has one.
fn layout_wait(c: &Controller, pending: &PendingJob, now: u64) -> Option<LayoutWait> {
    let PendingReason::Resources { reasons, .. } = &pending.reason else { return None };
    let profile = reasons.iter().find_map(|r| match &r.reason {
        Reason::MigNotSupported { profile } | Reason::MigProfileUnavailable { profile } => Some(profile.clone()),
        _ => None,
    })?;
    let advice = super::plan::plan_advice(c, now).ok()?;
    let carves = |to: &str| to.split_whitespace().any(|i| i.split('@').next() == Some(profile.as_str()));
    let (change, busy) = advice
        .reconfigure
        .iter()
        .map(|c| (c, false))
        .chain(advice.drain.iter().map(|c| (c, true)))
        .find(|(c, _)| carves(&c.to))?;
    let when = if busy { " once the work on it ends" } else { "" };
    // A GPU not in MIG mode needs it turned on first, which resets the GPU: gantry never does.
    let how = if change.from.starts_with("mig") {
        "an admin applies it on that node with `gantry mig apply`".to_string()
    } else {
        format!(
            "an admin turns MIG mode on there (`nvidia-smi -i {} -mig 1`, a GPU reset) and applies it with `gantry mig apply`",
            change.gpu
        )
    };
    let message = format!(
        "waiting for GPU {} on node {} to be reconfigured{when} ({} → {}): the controller only advises layouts \
         today; {how} (`gantry nodes --plan` lists the changes)",
        change.gpu, change.node, change.from, change.to
    );
    Some(LayoutWait {
        node: change.node.clone(),
        gpu: change.gpu,
        from: change.from.clone(),
        to: change.to.clone(),
        busy,
        message,
    })
}

/// One job, if the token may see it; `now` for the planner a MIG job's wait is explained with.
pub fn job(c: &Controller, who: &Principal, id: u64, now: u64) -> Result<JobView, ControlError> {
    let row = c.jobs.get(&id).ok_or(ControlError::UnknownJob(id))?;
    if !who.sees(&row.queue) {
        return Err(ControlError::Forbidden(format!(
            "job {id} is in queue {:?}, not one of token {:?}'s",
            row.queue, who.name
        )));
    }
    let pending = c.scheduler.why(id);
    let layout = pending.as_ref().and_then(|p| layout_wait(c, p, now));
    Ok(JobView { row: row.clone(), pending, layout })
}

/// The jobs in any of `states` (all if empty) the token may see, by id.
pub fn jobs(c: &Controller, who: &Principal, states: &[JobState]) -> Vec<JobView> {
    // Reasons only for the pending jobs listed (explaining one costs a pass over the GPUs).
    c.jobs
        .values()
        .filter(|row| (states.is_empty() || states.contains(&row.state)) && who.sees(&row.queue))
        .map(|row| {
            let pending = if row.state == JobState::Pending { c.scheduler.why(row.id) } else { None };
            JobView { row: row.clone(), pending, layout: None }
        })
        .collect()
}
