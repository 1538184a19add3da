//! A job no reclaim may stop — it spent its preemption budget, or it is not preemptible —
//! must not start on capacity a reclaim may need: where its queue has a guarantee in a flavor
//! it would use, it starts only within it (as Run:ai runs non-preemptible work only within a
//! project's quota). Then every queue's borrowed capacity is held by jobs that may still be
//! stopped, and borrowing stays reclaimable. (Its queue waits behind it, as behind a quota:
//! otherwise the queue's later jobs could keep it above its guarantee for ever.) A queue with
//! no guarantee in the flavor borrows everything it runs; its unstoppable jobs borrow only
//! where no guarantee holder ran within their planned length (`lending.rs`): counted in GPUs
//! instead, a few of them scattered one per node held off a whole-node guarantee for their
//! whole run. A reclaim that still finds one in its way waits for it to end (its time limit
//! bounds it).

use super::{Ask, Go, Refusal, Reservations};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn check(s: &mut Scheduler, ask: &Ask, go: &mut Go, _: &mut Reservations) -> Result<(), Refusal> {
    let Some(book) = &s.quotas else { return Ok(()) };
    if !s.unstoppable(ask.job) || s.awaiting.contains_key(&ask.job) {
        return Ok(());
    }
    let q = s.jobs[&ask.job].queue;
    let over = go.demand.iter().find(|(f, d)| book.guaranteed(q, f) > 0 && book.over_guarantee(q, f, *d));
    let Some((flavor, asked)) = over else { return Ok(()) };
    let reason = PendingReason::Quota {
        queue: book.tree().queues[q].name.clone(),
        flavor: flavor.clone(),
        rule: if s.jobs[&ask.job].job.lifecycle.preemptible {
            "guarantee (preempted as often as its budget allows, it starts only within it)".into()
        } else {
            "guarantee (not preemptible, it starts only within it)".into()
        },
        used_milli: book.used(q, flavor),
        asked_milli: *asked,
        bound_milli: book.guaranteed(q, flavor),
    };
    Err(Refusal { reason, blocks_queue: true, work: 0, delays_one: false })
}
