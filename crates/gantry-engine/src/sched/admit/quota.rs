//! Quotas (the queue tree's guarantees and limits, per flavor): the candidate's demand must
//! fit its queue's; and a job that would borrow in a flavor another queue is reclaiming right
//! now waits (what the reclaim frees must not be borrowed back at once), losing its promised
//! start, if it had one, to the reclaiming job's right; so does one that would borrow what
//! guarantee holders are owed or expected to claim during its run (`lending.rs`).

use super::{Ask, Go, Refusal, Reservations};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check(s: &mut Scheduler, ask: &Ask, go: &mut Go, _: &mut Reservations) -> Result<(), Refusal> {
    let Some(book) = &s.quotas else { return Ok(()) };
    go.demand = s.engine.quota_demand(go.alloc).expect("just placed");
    if let Err(e) = book.check(s.jobs[&ask.job].queue, &go.demand) {
        s.stats.quota_waited.insert(ask.job);
        let reason = PendingReason::Quota {
            queue: e.queue,
            flavor: e.flavor,
            rule: e.rule.to_string(),
            used_milli: e.used,
            asked_milli: e.asked,
            bound_milli: e.bound,
        };
        return Err(Refusal { reason, blocks_queue: true, work: 0, delays_one: false });
    }
    if let Some((k, reason)) = s.owed_to_other(ask.job, &go.demand) {
        s.preemptor_takes_promise(ask.job, k, ask.now);
        return Err(Refusal::alone(reason));
    }
    if s.config.preempt
        && let Some(reason) = s.owed_to_lenders(ask.job, &go.demand, ask.now)
    {
        return Err(Refusal::alone(reason));
    }
    Ok(())
}
