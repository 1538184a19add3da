//! One scheduling pass: pick jobs in queue order (fair share, or FIFO), start each one that
//! fits and passes its limits (array throttle, per-user limits, quota), and, past a blocked
//! job, backfill as the mode allows without delaying a reserved start.
//!
//! Reservations: depth 1 is EASY backfill on a shadow of the fleet at the reserved start
//! (cheap; the previous pass's reservation is reused while it holds). Depth N > 1 reserves
//! the first N blocked jobs in order with the engine's planner, and a candidate that would
//! still run at a reserved start is kept only if planning them again with it running moves
//! no reserved start later.

use super::options::{BACKFILL_SCAN_MAX, Backfill};
use super::replay::{Replay, RunningJob};
use gantry_engine::backfill::{Reservation, Running, Shadow};
use gantry_engine::fairshare::Candidate;
use gantry_engine::{AllocId, CompiledJob, Engine};
use gantry_types::PendingReason;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn running_list(running: &BTreeMap<AllocId, RunningJob>) -> Vec<Running> {
    running.iter().map(|(&alloc, r)| Running { alloc, end_s: r.limit_end }).collect()
}

/// The reserved start for `job` (blocked at `now`) and the fleet at that start: the previous
/// pass's start if it was for the same job and the job still fits then (cheap, and still exact:
/// backfill never delays it and nothing ends later than planned), else the engine's earliest
/// start. A start at `now` is kept too: capacity freed this second by departures not yet
/// processed is what it waits for. `None` if it would never fit.
fn reserve_one(
    engine: &Engine,
    compiled: &CompiledJob,
    job: usize,
    running_jobs: &BTreeMap<AllocId, RunningJob>,
    now: u64,
    last: &mut Option<(usize, u64)>,
) -> Option<((usize, u64), Shadow)> {
    let running = running_list(running_jobs);
    if let Some((previous, start_s)) = *last
        && previous == job
        && start_s >= now
    {
        let mut shadow = engine.shadow_at(&running, start_s);
        if shadow.fits(compiled) {
            return Some(((job, start_s), shadow));
        }
    }
    let start_s = engine.earliest_start(compiled, &running, now)?;
    *last = Some((job, start_s));
    Some(((job, start_s), engine.shadow_at(&running, start_s)))
}

/// The pass's reservations: none, one on a shadow, or several planned in order.
#[derive(Default)]
struct Reservations {
    one: Option<((usize, u64), Shadow)>,
    plans: Vec<(usize, Reservation)>,
}

impl Replay<'_> {
    /// How long planning may count on `job` holding its GPUs: its time limit, else its
    /// duration; `None` = for ever.
    fn planned_length(&self, job: usize) -> Option<u64> {
        self.jobs[job].control.time_limit_s.or(self.jobs[job].duration_s)
    }

    /// Will every job waiting for its victims fit once they are gone (as the fleet is now)?
    fn preemptors_fit(&self, t: u64) -> bool {
        let preemptors: Vec<&CompiledJob> = self.awaiting.keys().map(|&k| &self.jobs[k].job).collect();
        let stopping: Vec<Running> = self.terminating.iter().map(|&alloc| Running { alloc, end_s: Some(t) }).collect();
        self.engine.shadow_at(&stopping, t).fits_all(&preemptors)
    }

    /// One pass at `t`. Returns the jobs it could not start for lack of resources, in the
    /// order it tried them (the candidates for preemption).
    pub(super) fn pass(&mut self, t: u64) -> Vec<usize> {
        let backfill = self.options.backfill;
        let scan_max = match backfill {
            Backfill::Off => 0,
            Backfill::Greedy | Backfill::Reserve => BACKFILL_SCAN_MAX,
        };
        let depth = if backfill == Backfill::Reserve { self.options.reserve_depth.max(1) } else { 0 };
        let mut blocked = vec![false; self.queue_count];
        let mut scanned = vec![0usize; self.queue_count];
        let mut tried: BTreeSet<usize> = BTreeSet::new();
        let mut short_of_resources = Vec::new();
        let mut reservations = Reservations::default();
        loop {
            let mut candidates: Vec<(Candidate, usize)> = Vec::new();
            for (q, set) in self.pending.iter().enumerate() {
                if blocked[q] && scanned[q] >= scan_max {
                    continue;
                }
                if let Some(&(Reverse(p), since, job)) = set.iter().find(|(_, _, j)| !tried.contains(j)) {
                    candidates.push((Candidate { queue: q, priority: p, submitted_s: since }, job));
                }
            }
            let pick = match self.fair.as_mut() {
                None => (!candidates.is_empty()).then_some(0),
                Some(fs) => fs.pick(&candidates.iter().map(|(c, _)| *c).collect::<Vec<_>>(), t),
            };
            let Some(pick) = pick else { break };
            let (candidate, job) = candidates[pick];
            let q = candidate.queue;
            if blocked[q] {
                scanned[q] += 1;
            }
            tried.insert(job);
            match self.try_start(job, t, &mut reservations) {
                Ok((alloc, milli, demand)) => {
                    self.dequeue(job, candidate.priority, candidate.submitted_s);
                    self.start(job, alloc, milli, demand, t);
                }
                Err((reason, blocks_queue)) => {
                    let resources = matches!(reason, PendingReason::Resources { .. });
                    // Kept off capacity freed for a preemptor: it may preempt in turn.
                    let preemptor_kept = matches!(&reason, PendingReason::Reservation { job: k, .. }
                        if self.awaiting.keys().any(|&a| &self.jobs[a].name == k));
                    self.reason.insert(job, reason);
                    if blocks_queue {
                        blocked[q] = true;
                    }
                    if preemptor_kept {
                        short_of_resources.push(job);
                    }
                    if !resources {
                        continue;
                    }
                    short_of_resources.push(job);
                    if depth == 1 && reservations.one.is_none() && reservations.plans.is_empty() {
                        reservations.one = reserve_one(
                            self.engine,
                            &self.jobs[job].job,
                            job,
                            &self.running_jobs,
                            t,
                            &mut self.last_reservation,
                        );
                        if let Some(((_, start_s), _)) = &reservations.one {
                            self.promised.entry(job).or_insert(*start_s);
                        }
                    } else if depth > 1 && reservations.plans.len() < depth {
                        let earlier: Vec<Reservation> = reservations.plans.iter().map(|(_, r)| r.clone()).collect();
                        let running = running_list(&self.running_jobs);
                        let planned = self.engine.reserve_next(
                            &self.jobs[job].job,
                            self.planned_length(job),
                            &running,
                            &earlier,
                            t,
                        );
                        if let Some(r) = planned {
                            self.promised.entry(job).or_insert(r.start_s);
                            reservations.plans.push((job, r));
                        }
                    }
                }
            }
        }
        // The estimates `why` shows: the reserved starts.
        self.estimate.clear();
        if let Some(((job, start_s), _)) = &reservations.one {
            self.estimate.insert(*job, *start_s);
        }
        for (job, r) in &reservations.plans {
            self.estimate.insert(*job, r.start_s);
        }
        self.plans = reservations.plans;
        short_of_resources
    }

    /// Try to start `job` now. On success: its allocation, milli-GPU and quota demand (not
    /// yet recorded). On refusal: why, and whether that blocks its queue (resources, quota and
    /// reservations do; a user limit or an array throttle concerns this job alone).
    #[allow(clippy::type_complexity)]
    fn try_start(
        &mut self,
        job: usize,
        t: u64,
        reservations: &mut Reservations,
    ) -> Result<(AllocId, u64, Vec<(gantry_types::Flavor, u64)>), (PendingReason, bool)> {
        let j = &self.jobs[job];
        if let Some(a) = &j.control.array
            && let Some(max) = a.max_running
            && self.array_running.get(&a.array).copied().unwrap_or(0) >= max
        {
            return Err((PendingReason::ArrayThrottle { array: a.array.clone(), max_running: max }, false));
        }
        let user_limit = match (&j.control.user, &self.options.order) {
            (Some(user), super::Order::FairShare(tree)) => Some((user.clone(), tree.user_limit(user))),
            _ => None,
        };
        let (user_jobs, user_milli) =
            user_limit.as_ref().map(|(u, _)| self.user_running.get(u).copied().unwrap_or_default()).unwrap_or_default();
        if let Some((user, limit)) = &user_limit
            && let Some(max) = limit.max_running_jobs
            && user_jobs >= max
        {
            self.user_limit_waited.insert(job);
            let reason = PendingReason::UserLimit {
                user: user.clone(),
                limit: "running-jobs".into(),
                used: user_jobs as u64,
                bound: max as u64,
            };
            return Err((reason, false));
        }
        let protect_preemptors =
            !self.awaiting.is_empty() && !self.awaiting.contains_key(&job) && self.preemptors_fit(t);
        let before = self.engine.state().used_milli();
        let alloc = self.engine.place(&j.job).map_err(|reasons| (PendingReason::Resources { reasons }, true))?;
        let milli = self.engine.state().used_milli() - before;
        let refuse = |engine: &mut Engine, reason: PendingReason, blocks: bool| {
            engine.release(alloc).expect("just placed");
            Err((reason, blocks))
        };
        if let Some((user, limit)) = &user_limit
            && let Some(max) = limit.max_gpus_milli
            && user_milli + milli > max
        {
            self.user_limit_waited.insert(job);
            let reason =
                PendingReason::UserLimit { user: user.clone(), limit: "gpus".into(), used: user_milli, bound: max };
            return refuse(self.engine, reason, false);
        }
        let mut demand = Vec::new();
        if let Some(book) = &self.quotas {
            demand = self.engine.quota_demand(alloc).expect("just placed");
            if let Err(e) = book.check(self.queue_of[job], &demand) {
                self.quota_waited.insert(job);
                let reason = PendingReason::Quota {
                    queue: e.queue,
                    flavor: e.flavor,
                    rule: e.rule.to_string(),
                    used_milli: e.used,
                    asked_milli: e.asked,
                    bound_milli: e.bound,
                };
                return refuse(self.engine, reason, true);
            }
        }
        // Capacity being freed for a preemptor is its own: nothing else may take it.
        if protect_preemptors && !self.preemptors_fit(t) {
            let (&k, (_, until)) = self.awaiting.iter().next().expect("some preemptor waits");
            let reason = PendingReason::Reservation { job: self.jobs[k].name.clone(), start_s: *until };
            return refuse(self.engine, reason, false);
        }
        // A job that would still run at a reserved start must leave room for it. (Last: a
        // candidate these checks keep is recorded in the shadow or the plans.)
        let end = self.planned_length(job).map(|d| t + d);
        if let Some(((reserved, start_s), shadow)) = reservations.one.as_mut()
            && end.is_none_or(|e| e > *start_s)
            && shadow.delays(self.engine, alloc, &self.jobs[*reserved].job)
        {
            let reason = PendingReason::Reservation { job: self.jobs[*reserved].name.clone(), start_s: *start_s };
            return refuse(self.engine, reason, true);
        }
        if reservations.plans.iter().any(|(_, r)| end.is_none_or(|e| e > r.start_s)) {
            let mut running = running_list(&self.running_jobs);
            running.push(Running { alloc, end_s: end });
            let jobs: Vec<(&CompiledJob, Option<u64>)> =
                reservations.plans.iter().map(|&(k, _)| (&self.jobs[k].job, self.planned_length(k))).collect();
            let again = self.engine.replan(&jobs, &running, t);
            let delayed = reservations
                .plans
                .iter()
                .zip(&again)
                .find(|((_, before), after)| after.as_ref().is_none_or(|a| a.start_s > before.start_s));
            if let Some(((k, before), _)) = delayed {
                let reason = PendingReason::Reservation { job: self.jobs[*k].name.clone(), start_s: before.start_s };
                return refuse(self.engine, reason, true);
            }
            for ((_, plan), new) in reservations.plans.iter_mut().zip(again) {
                *plan = new.expect("none delayed");
            }
        }
        Ok((alloc, milli, demand))
    }
}
