//! `gantry queue` and `gantry show`: jobs as the token may see them, with why each waiting
//! one waits.

use crate::auth::Principal;
use crate::control::Controller;
use crate::error::ControlError;
use gantry_store::JobRow;
use gantry_types::{JobState, PendingJob, PendingReason, Reason};

pub use gantry_api::jobs::{JobView, LayoutWait};

/// In words, when `row`'s job was granted less priority than it asked for.
fn priority_capped(row: &JobRow) -> Option<String> {
    let asked = row.job.control.priority_asked?;
    (asked > row.job.priority).then(|| {
        format!(
            "priority capped at {}: the job asked for {asked}, and queue {:?} grants a member's job at most {} (an admin may set any)",
            row.job.priority, row.queue, row.job.priority
        )
    })
}

/// What a job's `env` values read as to a token that is not its user's or an admin's: the
/// names show, the values (where users put secrets) do not.
pub const ENV_VALUE_HIDDEN: &str = "(hidden: the job's user and admins only)";

/// `row` as `who` may see it: a job's environment values are its user's and the admins'.
fn as_seen_by(row: &JobRow, who: &Principal) -> JobRow {
    let mut row = row.clone();
    if who.reads_logs_of(row.job.control.user.as_deref().unwrap_or_default()).is_err() {
        for (_, value) in &mut row.job.run.env {
            *value = ENV_VALUE_HIDDEN.to_string();
        }
    }
    row
}

/// What job `id`'s run in progress has used so far, per node.
fn running_used(c: &Controller, id: u64) -> Vec<gantry_types::NodeUse> {
    c.running().get(&id).map(|r| r.used.values().cloned().collect()).unwrap_or_default()
}

/// The reconfiguration under way that serves job `id` (or carves the profile it waits for).
fn under_way_for(c: &Controller, id: u64, profile: Option<&str>, now: u64) -> Option<LayoutWait> {
    let carves = |r: &crate::control::reconfig::Reconfiguration| match (&r.to, profile) {
        (gantry_types::GpuMode::Mig { instances }, Some(p)) => instances.iter().any(|i| i.profile == p),
        _ => false,
    };
    let r = c
        .reconfigs()
        .active
        .values()
        .find(|r| r.serves.contains(&id))
        .or_else(|| c.reconfigs().active.values().find(|r| carves(r)))?;
    let expected = r.expected_done_s(now);
    let busy = r.phase == crate::control::reconfig::Phase::Draining;
    let step = match (r.phase, r.moved.is_empty()) {
        (crate::control::reconfig::Phase::Draining, true) => "its work is ending (cordoned: nothing new lands there)",
        (crate::control::reconfig::Phase::Draining, false) => "its restartable replicas are moving elsewhere",
        _ => "its agent is applying the new layout",
    };
    let message = format!(
        "waiting for GPU {} on node {} to be reconfigured ({} → {}): {step}; expected in about {} s (reconfiguration {})",
        r.gpu,
        r.node,
        r.from.text(),
        r.to.text(),
        expected.saturating_sub(now),
        r.id
    );
    Some(LayoutWait {
        node: r.node.clone(),
        gpu: r.gpu,
        from: r.from.text(),
        to: r.to.text(),
        busy,
        reconfiguration: Some(r.id),
        expected_s: Some(expected),
        message,
    })
}

/// For a job waiting on a MIG profile no GPU offers now: the change of the planner's current
/// advice that carves one (`GET /v1/plan`), if it has one.
fn layout_wait(c: &Controller, id: u64, pending: &PendingJob, now: u64) -> Option<LayoutWait> {
    let PendingReason::Resources { reasons, .. } = &pending.reason else {
        return under_way_for(c, id, None, now);
    };
    let profile = reasons.iter().find_map(|r| match &r.reason {
        Reason::MigNotSupported { profile } | Reason::MigProfileUnavailable { profile } => Some(profile.clone()),
        _ => None,
    });
    if let Some(wait) = under_way_for(c, id, profile.as_deref(), now) {
        return Some(wait);
    }
    let profile = profile?;
    if c.reconfigs().policy.mode == crate::control::reconfig::ReconfigureMode::Off {
        return None;
    }
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
    let auto = c.reconfigs().policy.mode == crate::control::reconfig::ReconfigureMode::Auto;
    let message = if auto {
        format!(
            "waiting for GPU {} on node {} to be reconfigured{when} ({} → {}): the controller will carry it out \
             at its next planning step if its guards allow (`gantry nodes --reconfigurations`)",
            change.gpu, change.node, change.from, change.to
        )
    } else {
        format!(
            "waiting for GPU {} on node {} to be reconfigured{when} ({} → {}): this controller only advises layouts \
             (reconfigure = \"advise\"); {how} (`gantry nodes --plan` lists the changes)",
            change.gpu, change.node, change.from, change.to
        )
    };
    Some(LayoutWait {
        node: change.node.clone(),
        gpu: change.gpu,
        from: change.from.clone(),
        to: change.to.clone(),
        busy,
        reconfiguration: None,
        expected_s: None,
        message,
    })
}

/// One job, if the token may see it; `now` for the planner a MIG job's wait is explained with.
pub fn job(c: &Controller, who: &Principal, id: u64, now: u64) -> Result<JobView, ControlError> {
    let row = c.jobs().get(&id).ok_or(ControlError::UnknownJob(id))?;
    if !who.sees(&row.queue) {
        return Err(ControlError::Forbidden(format!(
            "job {id} is in queue {:?}, not one of token {:?}'s",
            row.queue, who.name
        )));
    }
    let pending = c.scheduler().why(id);
    let layout = pending.as_ref().and_then(|p| layout_wait(c, id, p, now));
    let priority_capped = priority_capped(row);
    Ok(JobView { row: as_seen_by(row, who), pending, layout, running_used: running_used(c, id), priority_capped })
}

/// The jobs in any of `states` (all if empty) the token may see, by id.
pub fn jobs(c: &Controller, who: &Principal, states: &[JobState], now: u64) -> Vec<JobView> {
    // Reasons only for the pending jobs listed (explaining one costs a pass over the GPUs).
    c.jobs()
        .values()
        .filter(|row| (states.is_empty() || states.contains(&row.state)) && who.sees(&row.queue))
        .map(|row| {
            let pending = if row.state == JobState::Pending { c.scheduler().why(row.id) } else { None };
            // A change under way is cheap to name (no planning step), so the list has it too.
            let layout = pending.as_ref().and_then(|_| under_way_for(c, row.id, None, now));
            JobView {
                row: as_seen_by(row, who),
                pending,
                layout,
                running_used: running_used(c, row.id),
                priority_capped: priority_capped(row),
            }
        })
        .collect()
}
