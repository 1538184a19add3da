//! Capacity being freed for a preemptor is its own: a candidate that would take any of it
//! (the preemptors protected before the placement no longer all fit once their victims are
//! gone) waits, and loses its promised start to the first preemptor's right.

use super::{Ask, Go, Refusal, Reservations};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check(s: &mut Scheduler, ask: &Ask, _: &mut Go, _: &mut Reservations) -> Result<(), Refusal> {
    if ask.protected.is_empty() || s.preemptors_keep(&ask.protected, ask.now) {
        return Ok(());
    }
    let k = ask.protected[0];
    s.preemptor_takes_promise(ask.job, k, ask.now);
    let reason = PendingReason::Reservation { job: s.jobs[&k].job.name.clone(), start_s: s.awaiting[&k].until };
    Err(Refusal::alone(reason))
}
