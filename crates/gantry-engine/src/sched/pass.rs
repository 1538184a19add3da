//! One scheduling cycle: pick jobs in queue order (fair share, or FIFO), start each one that
//! fits and passes its limits (array throttle, per-user limits, quota, capacity kept for a
//! preemptor), and, past a blocked job, backfill as the mode allows without delaying a
//! reserved start; then preemption (`rights.rs`).
//!
//! Reservations: depth 1 is EASY backfill on a shadow of the fleet at the reserved start
//! (cheap; the previous cycle's reservation is reused while it holds). Depth N > 1 reserves
//! the first N blocked jobs in order with the engine's planner, and a candidate that would
//! still run at a reserved start is kept only if planning them again with it running moves
//! no reserved start later.

use super::{BACKFILL_SCAN_MAX, Backfill, Decision, JobId, Order, RunningJob, Scheduler};
use crate::backfill::{Reservation, Running, Shadow};
use crate::fairshare::Candidate;
use crate::{AllocId, CompiledJob, Engine};
use gantry_types::{Flavor, PendingReason};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

fn running_list(running: &BTreeMap<AllocId, RunningJob>) -> Vec<Running> {
    running.iter().map(|(&alloc, r)| Running { alloc, end_s: r.limit_end }).collect()
}

/// The cycle's reservations: none, one on a shadow, or several planned in order.
#[derive(Default)]
struct Reservations {
    one: Option<((JobId, u64), Shadow)>,
    plans: Vec<(JobId, Reservation)>,
}

/// What a refused job's refusal means for the cycle.
struct Refusal {
    reason: PendingReason,
    /// Its queue is blocked behind it (resources, quota, reservations); a user limit or an
    /// array throttle concerns this job alone.
    blocks_queue: bool,
}

impl Scheduler {
    /// Run one cycle at `now`: start what can start, then (with preemption on) stop what
    /// waiting jobs have a right to. Every job left waiting carries its reason.
    pub fn cycle(&mut self, now: u64) -> Vec<Decision> {
        let mut decisions = Vec::new();
        let short = self.pass(now, &mut decisions);
        self.preempt(now, &short, &mut decisions);
        decisions
    }

    /// The reserved start for `job` (blocked at `now`) and the fleet at that start: the
    /// previous cycle's start if it was for the same job and the job still fits then (cheap,
    /// and still exact: backfill never delays it and nothing ends later than planned), else
    /// the engine's earliest start. `None` if it would never fit.
    fn reserve_one(&mut self, job: JobId, now: u64) -> Option<((JobId, u64), Shadow)> {
        let compiled = &self.jobs[&job].job.compiled;
        let running = running_list(&self.running);
        if let Some((previous, start_s)) = self.last_reservation
            && previous == job
            && start_s >= now
        {
            let mut shadow = self.engine.shadow_at(&running, start_s);
            if shadow.fits(compiled) {
                return Some(((job, start_s), shadow));
            }
        }
        let start_s = self.engine.earliest_start(compiled, &running, now)?;
        self.last_reservation = Some((job, start_s));
        Some(((job, start_s), self.engine.shadow_at(&running, start_s)))
    }

    /// Will every job waiting for its victims fit once they are gone (as the fleet is now)?
    fn preemptors_fit(&self, now: u64) -> bool {
        let preemptors: Vec<&CompiledJob> = self.awaiting.keys().map(|k| &self.jobs[k].job.compiled).collect();
        let stopping: Vec<Running> =
            self.terminating.keys().map(|&alloc| Running { alloc, end_s: Some(now) }).collect();
        self.engine.shadow_at(&stopping, now).fits_all(&preemptors)
    }

    /// The starting pass. Returns the jobs it could not start for lack of resources (or kept
    /// off a preemptor's capacity), in the order it tried them: the candidates for preemption.
    fn pass(&mut self, now: u64, decisions: &mut Vec<Decision>) -> Vec<JobId> {
        let backfill = self.config.backfill;
        let scan_max = match backfill {
            Backfill::Off => 0,
            Backfill::Greedy | Backfill::Reserve => BACKFILL_SCAN_MAX,
        };
        let depth = if backfill == Backfill::Reserve { self.config.reserve_depth.max(1) } else { 0 };
        let mut blocked = vec![false; self.queue_count];
        let mut scanned = vec![0usize; self.queue_count];
        let mut tried: BTreeSet<JobId> = BTreeSet::new();
        let mut short = Vec::new();
        let mut reservations = Reservations::default();
        loop {
            let mut candidates: Vec<(Candidate, JobId)> = Vec::new();
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
                Some(fs) => fs.pick(&candidates.iter().map(|(c, _)| *c).collect::<Vec<_>>(), now),
            };
            let Some(pick) = pick else { break };
            let (candidate, job) = candidates[pick];
            let q = candidate.queue;
            if blocked[q] {
                scanned[q] += 1;
            }
            tried.insert(job);
            match self.try_start(job, now, &mut reservations) {
                Ok((alloc, milli, demand)) => {
                    self.dequeue(job, candidate.priority, candidate.submitted_s);
                    self.start(job, alloc, milli, demand, now);
                    let eligible_since = self.jobs[&job].eligible_at;
                    decisions.push(Decision::Start { job, alloc, milli, eligible_since });
                }
                Err(Refusal { reason, blocks_queue }) => {
                    let resources = matches!(reason, PendingReason::Resources { .. });
                    // Kept off capacity freed for a preemptor: it may preempt in turn.
                    let preemptor_kept = matches!(&reason, PendingReason::Reservation { job: k, .. }
                        if self.awaiting.keys().any(|a| &self.jobs[a].job.name == k));
                    // Deeper reservations also go to jobs that fit now but would delay an
                    // earlier one: they are ahead in the queue, and a later cycle would
                    // otherwise reserve them ahead of (and push back) what was promised.
                    let delayed = matches!(reason, PendingReason::Reservation { .. });
                    self.reason.insert(job, reason);
                    if blocks_queue {
                        blocked[q] = true;
                    }
                    if preemptor_kept {
                        short.push(job);
                    }
                    if resources {
                        short.push(job);
                    }
                    if !(resources || (delayed && depth > 1)) {
                        continue;
                    }
                    if depth == 1 && reservations.one.is_none() {
                        reservations.one = self.reserve_one(job, now);
                        if let Some(((_, start_s), _)) = &reservations.one {
                            self.stats.promised.entry(job).or_insert(*start_s);
                        }
                    } else if depth > 1 && reservations.plans.len() < depth {
                        let earlier: Vec<Reservation> = reservations.plans.iter().map(|(_, r)| r.clone()).collect();
                        let running = running_list(&self.running);
                        let j = &self.jobs[&job].job;
                        let planned =
                            self.engine.reserve_next(&j.compiled, j.planned_length_s, &running, &earlier, now);
                        if let Some(r) = planned {
                            self.stats.promised.entry(job).or_insert(r.start_s);
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
        short
    }

    /// Try to start `job` now. On success: its allocation, milli-GPU and quota demand (not
    /// yet recorded). On refusal: why, and whether that blocks its queue.
    #[allow(clippy::type_complexity)]
    fn try_start(
        &mut self,
        job: JobId,
        now: u64,
        reservations: &mut Reservations,
    ) -> Result<(AllocId, u64, Vec<(Flavor, u64)>), Refusal> {
        let entry = &self.jobs[&job];
        let j = &entry.job;
        if let Some(a) = &j.control.array
            && let Some(max) = a.max_running
            && self.array_running.get(&a.array).copied().unwrap_or(0) >= max
        {
            let reason = PendingReason::ArrayThrottle { array: a.array.clone(), max_running: max };
            return Err(Refusal { reason, blocks_queue: false });
        }
        let user_limit = match (&j.control.user, &self.config.order) {
            (Some(user), Order::FairShare(tree)) => Some((user.clone(), tree.user_limit(user))),
            _ => None,
        };
        let (user_jobs, user_milli) =
            user_limit.as_ref().map(|(u, _)| self.user_running.get(u).copied().unwrap_or_default()).unwrap_or_default();
        if let Some((user, limit)) = &user_limit
            && let Some(max) = limit.max_running_jobs
            && user_jobs >= max
        {
            let reason = PendingReason::UserLimit {
                user: user.clone(),
                limit: "running-jobs".into(),
                used: user_jobs as u64,
                bound: max as u64,
            };
            self.stats.user_limit_waited.insert(job);
            return Err(Refusal { reason, blocks_queue: false });
        }
        let protect_preemptors =
            !self.awaiting.is_empty() && !self.awaiting.contains_key(&job) && self.preemptors_fit(now);
        let before = self.engine.state().used_milli();
        let alloc = self.engine.place(&self.jobs[&job].job.compiled).map_err(|reasons| Refusal {
            reason: PendingReason::Resources { reasons, by_class: Vec::new() },
            blocks_queue: true,
        })?;
        let milli = self.engine.state().used_milli() - before;
        let refuse = |engine: &mut Engine, reason: PendingReason, blocks_queue: bool| {
            engine.release(alloc).expect("just placed");
            Err(Refusal { reason, blocks_queue })
        };
        if let Some((user, limit)) = &user_limit
            && let Some(max) = limit.max_gpus_milli
            && user_milli + milli > max
        {
            self.stats.user_limit_waited.insert(job);
            let reason =
                PendingReason::UserLimit { user: user.clone(), limit: "gpus".into(), used: user_milli, bound: max };
            return refuse(&mut self.engine, reason, false);
        }
        let mut demand = Vec::new();
        if let Some(book) = &self.quotas {
            demand = self.engine.quota_demand(alloc).expect("just placed");
            if let Err(e) = book.check(self.jobs[&job].queue, &demand) {
                self.stats.quota_waited.insert(job);
                let reason = PendingReason::Quota {
                    queue: e.queue,
                    flavor: e.flavor,
                    rule: e.rule.to_string(),
                    used_milli: e.used,
                    asked_milli: e.asked,
                    bound_milli: e.bound,
                };
                return refuse(&mut self.engine, reason, true);
            }
        }
        // Capacity being freed for a preemptor is its own: nothing else may take it.
        if protect_preemptors && !self.preemptors_fit(now) {
            let (&k, (_, until)) = self.awaiting.iter().next().expect("some preemptor waits");
            let reason = PendingReason::Reservation { job: self.jobs[&k].job.name.clone(), start_s: *until };
            return refuse(&mut self.engine, reason, false);
        }
        // A job that would still run at a reserved start must leave room for it. (Last: a
        // candidate these checks keep is recorded in the shadow or the plans.)
        let end = self.jobs[&job].job.planned_length_s.map(|d| now + d);
        if let Some(((reserved, start_s), shadow)) = reservations.one.as_mut()
            && end.is_none_or(|e| e > *start_s)
            && shadow.delays(&self.engine, alloc, &self.jobs[reserved].job.compiled)
        {
            let reason = PendingReason::Reservation { job: self.jobs[reserved].job.name.clone(), start_s: *start_s };
            return refuse(&mut self.engine, reason, true);
        }
        if reservations.plans.iter().any(|(_, r)| end.is_none_or(|e| e > r.start_s)) {
            let mut running = running_list(&self.running);
            running.push(Running { alloc, end_s: end });
            let jobs: Vec<(&CompiledJob, Option<u64>)> = reservations
                .plans
                .iter()
                .map(|(k, _)| (&self.jobs[k].job.compiled, self.jobs[k].job.planned_length_s))
                .collect();
            let again = self.engine.replan(&jobs, &running, now);
            let delayed = reservations
                .plans
                .iter()
                .zip(&again)
                .find(|((_, before), after)| after.as_ref().is_none_or(|a| a.start_s > before.start_s));
            if let Some(((k, before), _)) = delayed {
                let reason = PendingReason::Reservation { job: self.jobs[k].job.name.clone(), start_s: before.start_s };
                return refuse(&mut self.engine, reason, true);
            }
            for ((_, plan), new) in reservations.plans.iter_mut().zip(again) {
                *plan = new.expect("none delayed");
            }
        }
        Ok((alloc, milli, demand))
    }
}
