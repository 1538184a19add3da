//! A job that would still run at a reserved start must leave room for it, unless it has a
//! higher right (a preemption's, priority, its own earlier promise in the same queue, or its
//! guarantee against another queue's reservation): then the promise it pushes back is
//! recorded in [`Go::displaced`]. One reservation is checked on its shadow; several planned
//! in order are checked by planning the fleet at each start, at most
//! [`RESERVATION_CHECKS_MAX`] candidates a cycle, after which a candidate on a reservation's
//! nodes waits for the next cycle. Last of the checks: a candidate they keep is recorded in
//! the shadow or the plans.

use super::{Ask, Go, Refusal, Reservations};
use crate::backfill::{Reservation, Running};
use crate::sched::{JobId, RESERVATION_CHECKS_MAX, RunningJob, Scheduler};
use crate::{AllocId, CompiledJob};
use gantry_types::PendingReason;
use std::collections::BTreeMap;

/// The running allocations as the backfill planner reads them: each with its planned end.
pub(in crate::sched) fn running_list(running: &BTreeMap<AllocId, RunningJob>) -> Vec<Running> {
    running.iter().map(|(&alloc, r)| Running { alloc, end_s: r.limit_end }).collect()
}

pub(super) fn check(s: &mut Scheduler, ask: &Ask, go: &mut Go, reservations: &mut Reservations) -> Result<(), Refusal> {
    let end = s.jobs[&ask.job].job.planned_length_s.map(|d| ask.now + d);
    the_one(s, ask, go, reservations, end)?;
    let others: Vec<usize> = (0..reservations.plans.len()).filter(|&i| reservations.plans[i].0 != ask.job).collect();
    if !others.iter().any(|&i| end.is_none_or(|e| e > reservations.plans[i].1.start_s)) {
        return Ok(());
    }
    // The plans held before this start (each start is checked here); one on no node of this
    // allocation still does. Only a shared node needs the planned fleet.
    let shared = others.iter().copied().find(|&i| s.engine.shares_nodes(go.alloc, &reservations.plans[i].1));
    let Some(shared) = shared else {
        debug_assert!(plans_still_hold(s, go, reservations, &others, end), "plans on other nodes stopped holding");
        reservations.plans.retain(|(k, _)| *k != ask.job);
        return Ok(());
    };
    if reservations.checks == RESERVATION_CHECKS_MAX {
        s.stats.reservation_checks_spent += 1;
        let (k, r) = &reservations.plans[shared];
        return Err(waits_for(s, *k, r.start_s));
    }
    reservations.checks += 1;
    plan_again(s, ask, go, reservations, &others, end)
}

/// The reservation on a shadow: does the candidate delay it, and may it?
fn the_one(
    s: &mut Scheduler,
    ask: &Ask,
    go: &mut Go,
    reservations: &mut Reservations,
    end: Option<u64>,
) -> Result<(), Refusal> {
    let Some(((reserved, start_s), shadow)) = reservations.one.as_mut() else { return Ok(()) };
    if *reserved == ask.job
        || end.is_some_and(|e| e <= *start_s)
        || !shadow.delays(&s.engine, go.alloc, &s.jobs[reserved].job.compiled)
    {
        return Ok(());
    }
    let (reserved, start_s) = (*reserved, *start_s);
    // The candidate delays the reserved start to its end at the latest.
    let new_start = end.map(|e| e.max(start_s));
    match s.overrides(ask.job, &go.demand, reserved, new_start) {
        Some(right) => go.displaced.push((reserved, right)),
        None => {
            // No right at all (not merely one past the slip bound, which a job ending sooner
            // might keep): the queue's later jobs of this request, no higher in priority and
            // on the same fleet, are refused alike unless they end by the start.
            let rightless = s.override_right(ask.job, &go.demand, reserved).is_none()
                && !s.promises.contains(&ask.job)
                && !s.awaiting.contains_key(&ask.job);
            return Err(Refusal { delays_one: rightless, ..waits_for(s, reserved, start_s) });
        }
    }
    Ok(())
}

/// A refusal: the candidate would delay `reserved`'s start at `start_s`.
fn waits_for(s: &Scheduler, reserved: JobId, start_s: u64) -> Refusal {
    let reason = PendingReason::Reservation { job: s.jobs[&reserved].job.name.clone(), start_s };
    Refusal { reason, blocks_queue: true, work: 0, delays_one: false }
}

/// The running allocations with the candidate among them, and the other plans.
fn with_candidate(
    s: &Scheduler,
    go: &Go,
    reservations: &Reservations,
    others: &[usize],
    end: Option<u64>,
) -> (Vec<Running>, Vec<(JobId, Reservation)>) {
    let mut running = running_list(&s.running);
    running.push(Running { alloc: go.alloc, end_s: end });
    let planned = others.iter().map(|&i| reservations.plans[i].clone()).collect();
    (running, planned)
}

fn plans_still_hold(s: &Scheduler, go: &Go, reservations: &Reservations, others: &[usize], end: Option<u64>) -> bool {
    let (running, planned) = with_candidate(s, go, reservations, others, end);
    s.plans_hold(&planned, &running)
}

/// Plan the other reservations again with the candidate running: every plan still holding as
/// it is (its GPUs free at its start, the ones before it applied) moves none later; only when
/// one does not is the order planned again, and each start it pushes back needs a right.
fn plan_again(
    s: &mut Scheduler,
    ask: &Ask,
    go: &mut Go,
    reservations: &mut Reservations,
    others: &[usize],
    end: Option<u64>,
) -> Result<(), Refusal> {
    let (running, planned) = with_candidate(s, go, reservations, others, end);
    if s.plans_hold(&planned, &running) {
        reservations.plans.retain(|(k, _)| *k != ask.job);
        return Ok(());
    }
    let jobs: Vec<(&CompiledJob, Option<u64>)> =
        planned.iter().map(|(k, _)| (&s.jobs[k].job.compiled, s.jobs[k].job.planned_length_s)).collect();
    let again = s.engine.replan(&jobs, &running, ask.now);
    for ((k, before), after) in planned.iter().zip(&again) {
        if after.as_ref().is_none_or(|a| a.start_s > before.start_s) {
            match s.overrides(ask.job, &go.demand, *k, after.as_ref().map(|a| a.start_s)) {
                Some(right) => go.displaced.push((*k, right)),
                None => return Err(waits_for(s, *k, before.start_s)),
            }
        }
    }
    let mut kept: Vec<(JobId, Reservation)> = Vec::new();
    for ((k, _), new) in planned.into_iter().zip(again) {
        match new {
            Some(r) => kept.push((k, r)),
            None => s.promises.retain(|&p| p != k),
        }
    }
    reservations.plans = kept;
    Ok(())
}
