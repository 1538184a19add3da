//! A user's limits under fair share (the queue file's `[users]`): running jobs, checked
//! before placement, and GPUs (milli-GPU, whatever the sharing), checked on the candidate
//! allocation. A job over its user's limit waits without blocking its queue.

use super::{Ask, Go, Refusal, Reservations};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check_jobs(s: &mut Scheduler, ask: &Ask) -> Result<(), Refusal> {
    let Some((user, limit, (jobs, _))) = &ask.user else { return Ok(()) };
    let Some(max) = limit.max_running_jobs.filter(|&max| *jobs >= max) else { return Ok(()) };
    s.stats.user_limit_waited.insert(ask.job);
    let reason = PendingReason::UserLimit {
        user: user.clone(),
        limit: "running-jobs".into(),
        used: u64::from(*jobs),
        bound: u64::from(max),
    };
    Err(Refusal::alone(reason))
}

pub(super) fn check_gpus(s: &mut Scheduler, ask: &Ask, go: &mut Go, _: &mut Reservations) -> Result<(), Refusal> {
    let Some((user, limit, (_, milli))) = &ask.user else { return Ok(()) };
    let Some(max) = limit.max_gpus_milli.filter(|&max| milli + go.milli > max) else { return Ok(()) };
    s.stats.user_limit_waited.insert(ask.job);
    let reason = PendingReason::UserLimit { user: user.clone(), limit: "gpus".into(), used: *milli, bound: max };
    Err(Refusal::alone(reason))
}
