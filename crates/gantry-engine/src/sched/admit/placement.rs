//! Where the job would run. A preemptor goes on the GPUs its victims freed for it, and a
//! reserved job whose start has come on the GPUs its plan gave it, when they are free: other
//! plans were made around exactly those. Otherwise the engine places it, around the GPUs
//! planned for preemptors whose victims are gone (`preemptor_room.rs`); the nodes it visits
//! count as the work the backfill bound (`BACKFILL_WORK_MAX`) limits.

use super::{Ask, Go, Refusal, Reservations};
use crate::sched::Scheduler;
use gantry_types::PendingReason;

pub(super) fn place(s: &mut Scheduler, ask: &Ask, reservations: &Reservations) -> Result<Go, Refusal> {
    let (job, now) = (ask.job, ask.now);
    let before = s.engine.state().used_milli();
    let visited_before = s.engine.stats().nodes_visited;
    let planned = s
        .awaiting
        .get(&job)
        .map(|a| &a.tasks)
        .or_else(|| reservations.plans.iter().find(|(k, r)| *k == job && r.start_s <= now).map(|(_, r)| &r.tasks));
    let compiled = &s.jobs[&job].job.compiled;
    let placed = match planned.and_then(|tasks| s.engine.place_exact(compiled, tasks)) {
        Some(alloc) => Ok(alloc),
        None if ask.protected.is_empty() => s.engine.place(compiled),
        // Around the GPUs planned for preemptors whose victims are gone (else a packing
        // placement picks exactly those, the fullest nodes' free GPUs, and the candidate is
        // refused for taking a preemptor's room while other nodes stand empty). Where it fits
        // only there, it is placed there and refused by that preemptor's right.
        None => {
            let planned = ask.protected.iter().flat_map(|k| &s.awaiting[k].tasks);
            let avoid: Vec<_> = planned.flat_map(|t| t.grants.iter().map(|g| g.gpu())).collect();
            s.engine.place_avoiding(compiled, &avoid).or_else(|_| s.engine.place(compiled))
        }
    };
    let work = 1 + s.engine.stats().nodes_visited - visited_before;
    let alloc = placed.map_err(|reasons| Refusal {
        reason: PendingReason::Resources { reasons, by_class: Vec::new() },
        blocks_queue: true,
        work,
        delays_one: false,
    })?;
    let milli = s.engine.state().used_milli() - before;
    Ok(Go { alloc, milli, demand: Vec::new(), displaced: Vec::new(), work })
}
