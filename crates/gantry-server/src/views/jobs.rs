//! `gantry queue` and `gantry show`: jobs as the token may see them, with why each waiting
//! one waits.

use crate::auth::Principal;
use crate::control::Controller;
use crate::error::ControlError;
use gantry_store::JobRow;
use gantry_types::{JobState, PendingJob};

/// A job as `queue` and `show` list it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub row: JobRow,
    /// Why it waits and when it may start, while it is pending.
    pub pending: Option<PendingJob>,
}

/// One job, if the token may see it.
pub fn job(c: &Controller, who: &Principal, id: u64) -> Result<JobView, ControlError> {
    let row = c.jobs.get(&id).ok_or(ControlError::UnknownJob(id))?;
    if !who.sees(&row.queue) {
        return Err(ControlError::Forbidden(format!(
            "job {id} is in queue {:?}, not one of token {:?}'s",
            row.queue, who.name
        )));
    }
    Ok(JobView { row: row.clone(), pending: c.scheduler.why(id) })
}

/// The jobs in any of `states` (all if empty) the token may see, by id.
pub fn jobs(c: &Controller, who: &Principal, states: &[JobState]) -> Vec<JobView> {
    // Reasons only for the pending jobs listed (explaining one costs a pass over the GPUs).
    c.jobs
        .values()
        .filter(|row| (states.is_empty() || states.contains(&row.state)) && who.sees(&row.queue))
        .map(|row| {
            let pending = if row.state == JobState::Pending { c.scheduler.why(row.id) } else { None };
            JobView { row: row.clone(), pending }
        })
        .collect()
}
