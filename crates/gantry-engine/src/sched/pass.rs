//! One scheduling cycle: pick jobs in queue order (fair share, or FIFO), start each one that
//! fits and passes its limits (array throttle, per-user limits, quota, capacity kept for a
//! preemptor or owed to a queue reclaiming its guarantee), and, past a blocked job, backfill
//! as the mode allows without delaying a reserved start; then preemption (`rights.rs`).
//!
//! Preemptors whose victims are gone are tried before anything else: the capacity was freed
//! for them, and trying them first is what makes every preemption start its preemptor.
//!
//! Reservations are promises, kept from cycle to cycle (`Scheduler::promises`): a job once
//! promised a start is reserved first in every later cycle, before the queue order is
//! consulted, so the jobs the order puts ahead of it (other queues' jobs, as shares change)
//! are checked against its reservation too. Only a higher right may start a job that pushes a
//! promised start back: a preemptor whose victims are gone, a higher priority (fair-share
//! order), or a job within its queue's guarantee against another queue's reservation; the
//! promise's record then says which (`SchedStats::broken`). Depth 1 is EASY backfill on a
//! shadow of the fleet at the reserved start (the previous start reused while it holds);
//! depth N > 1 plans the first N promises in order with the engine's planner (each keeping
//! its previous plan, start and GPUs, while that still holds: planning it again could put an
//! earlier reservation on other GPUs and push later ones back), and a candidate
//! that would still run at a reserved start is kept only if planning them again with it
//! running moves none later.
//!
//! A reservation that frees in the middle of a pass (its job started) goes to the first job
//! refused earlier in the pass that could not have one, not to the next job refused: else a
//! wide job the order put first, refused while the slot was held, never gets the promise and
//! the queue whose job held it keeps it for its next job (`Scan::unpromised`).
//!
//! Greedy backfill under fair share promises a start too, at depth 1, but only to a job that
//! has waited `greedy_reserve_after` (`QueueTree`): otherwise a queue whose waiting work is
//! wider than the others' is served less than its weight, every GPU that frees going to
//! someone's narrower job (like Slurm's `bf_min_age_reserve`).
//!
//! Past a queue's blocked head the scan is bounded by work, not by a count of jobs: at most
//! [`BACKFILL_WORK_MAX`] units of placement work (a placement, plus the nodes it visited) per
//! queue, and a job whose request is the same as one already refused for resources in this
//! pass is refused with the same reason without a placement (nothing is released during a
//! pass, so the answer cannot change) — a long run of blocked 8-GPU jobs cannot hide the small
//! jobs behind it. Looking at a job costs a lookup; at most [`BACKFILL_VISITS_MAX`] per queue
//! and [`CYCLE_VISITS_MAX`] in all per pass.

use super::admit::{Refusal, Reservations, running_list};
use super::{
    BACKFILL_VISITS_MAX, BACKFILL_WORK_MAX, Backfill, CYCLE_VISITS_MAX, Decision, JobId, Key, PREEMPTORS_MAX,
    PromiseBreak, Scheduler,
};
use crate::CompiledJob;
use crate::backfill::{Reservation, Running, Shadow};
use crate::fairshare::Candidate;
use crate::limits::{CYCLE_TICK_S, SHAPES_JUMP_MAX};
use gantry_types::{Flavor, PendingReason};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::Arc;

/// One pass's moment, its progress and what it decided, handed to its steps together.
struct Pass<'a> {
    now: u64,
    /// Reservations the backfill mode keeps (0: none).
    depth: usize,
    scan: &'a mut Scan,
    reservations: &'a mut Reservations,
    decisions: &'a mut Vec<Decision>,
}

/// Per-queue progress of one pass.
struct Scan {
    now: u64,
    blocked: Vec<bool>,
    /// Placement work spent past each queue's blocked head.
    work: Vec<u64>,
    visits: Vec<usize>,
    cursor: Vec<Option<Key>>,
    /// Request shapes refused for resources this pass, with the reason (any queue: placement
    /// does not depend on it).
    refused: BTreeMap<u64, Arc<PendingReason>>,
    /// Per queue and refused shape: its jobs looked at one by one (each a preemption
    /// candidate, each offered a promise) before the pass jumps over the rest
    /// (`Scan::passes_over`).
    looked: BTreeMap<(usize, u64), usize>,
    /// How many: [`PREEMPTORS_MAX`] plus the reservation depth — what preemption and the
    /// promises could take from one queue's run of one request (the jobs behind in a run
    /// have no higher priority and no earlier eligibility than those looked at).
    looks_max: usize,
    /// Per queue and request shape: refused for delaying the one reservation without a
    /// right (`Refusal::delays_one`), while that still holds for the rest of the group.
    delayed: BTreeMap<(usize, u64), Delayed>,
    /// How many times live delays went stale: a head found by jumping before may be wrong.
    delays_changed: u64,
    tried: BTreeSet<JobId>,
    short: Vec<JobId>,
    /// Jobs refused this pass that could not be promised a start because every reservation was
    /// held, in pass order: when a reserved job starts later in the pass, its slot goes to the
    /// first of them (not to whichever job the scan refuses next, which would hand the promise
    /// to the same queue again and again while the job the order put first never gets one).
    unpromised: Vec<JobId>,
}

impl Scan {
    fn new(queues: usize, depth: usize, now: u64) -> Scan {
        Scan {
            now,
            blocked: vec![false; queues],
            work: vec![0; queues],
            visits: vec![0; queues],
            cursor: vec![None; queues],
            refused: BTreeMap::new(),
            looked: BTreeMap::new(),
            looks_max: PREEMPTORS_MAX + depth,
            delayed: BTreeMap::new(),
            delays_changed: 0,
            tried: BTreeSet::new(),
            short: Vec::new(),
            unpromised: Vec::new(),
        }
    }

    /// Refused for resources this pass, and looked at enough in queue `q`.
    fn refused_enough(&self, q: usize, shape: u64) -> bool {
        self.refused.contains_key(&shape) && self.looked.get(&(q, shape)).is_some_and(|&n| n >= self.looks_max)
    }

    /// Something started or the reservation changed: a refusal for delaying it no longer
    /// speaks for the jobs not yet looked at (it still does for those jumped over), and a
    /// queue's next job found by jumping over them is looked up again.
    fn stale_delays(&mut self) {
        if self.delayed.values().any(|d| d.live) {
            self.delays_changed += 1;
        }
        for d in self.delayed.values_mut() {
            d.live = false;
        }
    }
}

/// A queue's job of one request refused for delaying the one reservation, with no right.
struct Delayed {
    reason: Arc<PendingReason>,
    /// The reserved start: a job of the group known to end by then may still start.
    start_s: u64,
    /// Nothing started and the reservation is the same since.
    live: bool,
}

/// A queue's next job for the pass, found as of `delays_changed` (once delays went stale
/// since, the jobs jumped over to reach it may start and it is looked up again).
#[derive(Clone, Copy)]
struct Head {
    key: Key,
    delays_changed: u64,
}

/// A job's request shape: jobs with the same shape get the same placement answer on the same
/// fleet. A group's fingerprint covers what one task's fit on a node depends on (topology
/// included); the replicas make the gang; which nodes a group may use at all (a node of its
/// own per task, whole nodes, labels) is checked beside the fit, so it is part of the shape
/// too — else a job refused for its node selector would refuse the same request without one.
pub(super) fn shape_of(job: &CompiledJob) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for g in &job.groups {
        (g.fingerprint, g.replicas, g.distinct_nodes, g.exclusive_node, &g.node_selector).hash(&mut h);
    }
    h.finish()
}

impl Scheduler {
    /// Run one cycle at `now`: start what can start, then (with preemption on) stop what
    /// waiting jobs have a right to. Every job left waiting carries its reason.
    pub fn cycle(&mut self, now: u64) -> Vec<Decision> {
        let mut decisions = Vec::new();
        self.peaks.record_from(now);
        self.track_entitled(now);
        let short = self.pass(now, &mut decisions);
        let capped = self.preempt(now, &short, &mut decisions);
        let started = decisions.iter().any(|d| matches!(d, Decision::Start { .. }));
        let left = self.entitled.keys().any(|job| !self.awaiting.contains_key(job));
        self.recheck_at = ((started || capped) && left).then_some(now + CYCLE_TICK_S);
        decisions
    }

    /// Is `job` waiting in its queue?
    fn is_queued(&self, job: JobId) -> bool {
        let e = &self.jobs[&job];
        self.pending.contains(e.queue, &(Reverse(self.priority(job)), e.eligible_at, job))
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

    /// `job`'s reservation from the previous cycle (`previous`), if it still holds after
    /// `plans`: not in the past, not before an earlier reservation, its GPUs free then.
    fn keep_plan(
        &self,
        job: JobId,
        previous: &[(JobId, Reservation)],
        plans: &[(JobId, Reservation)],
        now: u64,
    ) -> Option<Reservation> {
        let (_, r) = previous.iter().find(|(k, _)| *k == job)?;
        let earlier: Vec<Reservation> = plans.iter().map(|(_, r)| r.clone()).collect();
        let ordered = earlier.iter().all(|e| e.start_s <= r.start_s);
        (r.start_s >= now && ordered && self.engine.plan_holds(r, &running_list(&self.running), &earlier))
            .then(|| r.clone())
    }

    /// Do `plans`, in order, all still hold on the fleet `running` leaves?
    pub(super) fn plans_hold(&self, plans: &[(JobId, Reservation)], running: &[Running]) -> bool {
        let mut earlier: Vec<Reservation> = Vec::with_capacity(plans.len());
        for (_, r) in plans {
            if !self.engine.plan_holds(r, running, &earlier) {
                return false;
            }
            earlier.push(r.clone());
        }
        true
    }

    /// Plan `job` after the reservations already in `plans`.
    fn reserve_after(&self, job: JobId, plans: &[(JobId, Reservation)], now: u64) -> Option<Reservation> {
        let earlier: Vec<Reservation> = plans.iter().map(|(_, r)| r.clone()).collect();
        let j = &self.jobs[&job].job;
        self.engine.reserve_next(&j.compiled, j.planned_length_s, &running_list(&self.running), &earlier, now)
    }

    /// A promise was (re)planned at `start_s`, after the promises `before` it: if that is
    /// later than its first promise with no higher right on record for it, the cause is the
    /// one that pushed back an earlier promise in this wait (the later ones were planned
    /// around it), else there is none — counted, so tests can hold the scheduler to it.
    fn check_promise(&mut self, job: JobId, start_s: u64, before: &[JobId], now: u64) {
        if self.promise_at.get(&job).is_none_or(|&first| start_s <= first) || self.broken_now.contains_key(&job) {
            return;
        }
        match before.iter().find_map(|k| self.broken_now.get(k)).cloned() {
            Some(cause) => self.break_promise(job, cause.by, cause.right, now),
            None => {
                self.stats.broken_without_cause.insert(job);
            }
        }
    }

    /// Record that `by` pushed `job`'s promise back with `right` (the first such record stays).
    fn break_promise(&mut self, job: JobId, by: JobId, right: &'static str, now: u64) {
        self.stats.broken.entry(job).or_insert(PromiseBreak { by, right, at_s: now });
        self.broken_now.insert(job, PromiseBreak { by, right, at_s: now });
    }

    /// Reserve the promises still waiting, in order, before the pass looks at anything.
    fn reserve_promised(&mut self, now: u64, depth: usize) -> Reservations {
        let promises: Vec<JobId> = self.promises.iter().copied().filter(|&j| self.is_queued(j)).collect();
        let previous = std::mem::take(&mut self.plans);
        let mut out = Reservations::default();
        let mut kept = Vec::new();
        for job in promises {
            if kept.len() == depth {
                break;
            }
            if depth == 1 {
                if let Some(one) = self.reserve_one(job, now) {
                    self.check_promise(job, one.0.1, &[], now);
                    out.one = Some(one);
                    kept.push(job);
                }
            } else if let Some(r) =
                self.keep_plan(job, &previous, &out.plans, now).or_else(|| self.reserve_after(job, &out.plans, now))
            {
                self.check_promise(job, r.start_s, &kept, now);
                out.plans.push((job, r));
                kept.push(job);
            }
        }
        self.promises = kept;
        out
    }

    /// Promise `job` (just refused at `now`) a reserved start if the depth allows; at depth 1 a
    /// job of higher priority than the current holder takes the reservation from it.
    fn promise(&mut self, job: JobId, now: u64, depth: usize, reservations: &mut Reservations) {
        if self.promises.contains(&job) {
            return;
        }
        let greedy_waited = self.jobs[&job].eligible_at.saturating_add(self.greedy_reserve_after_s);
        if self.config.backfill == Backfill::Greedy && now < greedy_waited {
            return;
        }
        if depth == 1 {
            if let Some(&holder) = self.promises.first() {
                if self.fair.is_none() || self.jobs[&job].job.priority <= self.jobs[&holder].job.priority {
                    return;
                }
                self.break_promise(holder, job, "priority", now);
                self.promises.clear();
                reservations.one = None;
            }
            reservations.one = self.reserve_one(job, now);
            if let Some(((_, start_s), _)) = &reservations.one {
                self.stats.promised.entry(job).or_insert(*start_s);
                self.promise_at.entry(job).or_insert(*start_s);
                self.promises.push(job);
            }
        } else if reservations.plans.len() < depth
            && let Some(r) = self.reserve_after(job, &reservations.plans, now)
        {
            self.stats.promised.entry(job).or_insert(r.start_s);
            self.promise_at.entry(job).or_insert(r.start_s);
            self.charge_promise(job, &r, now);
            reservations.plans.push((job, r));
            self.promises.push(job);
        }
    }

    /// The fleet once the victims in their grace period are gone.
    fn without_stopping(&self, now: u64) -> Shadow {
        let stopping: Vec<Running> =
            self.terminating.keys().map(|&alloc| Running { alloc, end_s: Some(now) }).collect();
        self.engine.shadow_at(&stopping, now)
    }

    /// The jobs waiting for their victims, other than `job`, whose planned GPUs are free once
    /// the victims are gone: those GPUs are theirs, and no other job may take them. Each is
    /// protected on its own — one whose plan no longer holds does not unprotect the rest — and
    /// a preemptor whose victims are still stopping is bound by the others' like any job.
    pub(super) fn protected_preemptors(&self, job: JobId, now: u64) -> Vec<JobId> {
        if self.awaiting.keys().all(|&k| k == job) {
            return Vec::new();
        }
        let mut shadow = self.without_stopping(now);
        self.awaiting.iter().filter(|(k, a)| **k != job && shadow.take_exact(&a.tasks)).map(|(&k, _)| k).collect()
    }

    /// Are the planned GPUs of every preemptor in `protected` still free (once the victims are
    /// gone)?
    pub(super) fn preemptors_keep(&self, protected: &[JobId], now: u64) -> bool {
        let mut shadow = self.without_stopping(now);
        protected.iter().all(|k| shadow.take_exact(&self.awaiting[k].tasks))
    }

    /// The starting pass. Returns the jobs it could not start for lack of resources (or kept
    /// off a preemptor's capacity), in the order it tried them: the candidates for preemption.
    fn pass(&mut self, now: u64, decisions: &mut Vec<Decision>) -> Vec<JobId> {
        let backfill = self.config.backfill;
        let depth = match backfill {
            Backfill::Reserve => self.config.reserve_depth.max(1),
            Backfill::Greedy if self.fair.is_some() => 1,
            _ => 0,
        };
        let mut scan = Scan::new(self.queue_count, depth, now);
        let mut reservations = if depth > 0 { self.reserve_promised(now, depth) } else { Reservations::default() };
        for (job, r) in &reservations.plans {
            self.charge_promise(*job, r, now);
        }
        let mut pass = Pass { now, depth, scan: &mut scan, reservations: &mut reservations, decisions };
        self.try_ready(&mut pass);
        let work_max = if backfill == Backfill::Off { 0 } else { BACKFILL_WORK_MAX };
        self.visit_queues(&mut pass, work_max);
        if backfill == Backfill::Off && self.config.preempt {
            self.behind_short_heads(&mut scan);
        }
        // Every job of a refused request that the pass did not try says so (a refusal for
        // resources came after any start, so after a delay it overrides).
        for (&(q, shape), d) in &scan.delayed {
            self.pending.settle_in(q, shape, &d.reason, &scan.tried);
        }
        for (shape, reason) in &scan.refused {
            self.pending.settle(*shape, reason, &scan.tried);
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
        self.release_promise_charges(now);
        scan.short
    }

    /// First the jobs whose capacity is theirs now: preemptors whose victims are gone, reserved
    /// jobs whose start has come, and jobs within their queue's guarantee (`entitled.rs`).
    /// (Tried later, after the jobs the order puts first were refused for delaying them, the
    /// next promise would go to the next job of the same queue, again and again: a convoy. And
    /// a borrower the order put first could take the one place an entitled job fits — lending
    /// counts GPUs, not shapes — to be reclaimed a grace period later.)
    fn try_ready(&mut self, pass: &mut Pass<'_>) {
        let now = pass.now;
        let mut ready: Vec<JobId> = self
            .awaiting
            .iter()
            .filter(|(_, a)| a.victims.iter().all(|v| !self.terminating.contains_key(v)))
            .map(|(&j, _)| j)
            .collect();
        let due = |start_s: u64| start_s <= now;
        ready.extend(pass.reservations.one.iter().filter(|((_, s), _)| due(*s)).map(|((j, _), _)| *j));
        ready.extend(pass.reservations.plans.iter().filter(|(_, r)| due(r.start_s)).map(|(j, _)| *j));
        // (Bounded like the visits: a tree of many queues, each with jobs within its
        // guarantee, would otherwise try them all every cycle.)
        ready.extend(self.entitled.keys().copied().take(CYCLE_VISITS_MAX));
        for job in ready {
            if self.is_queued(job) && !pass.scan.tried.contains(&job) {
                let e = &self.jobs[&job];
                let candidate = Candidate { queue: e.queue, priority: self.priority(job), submitted_s: e.eligible_at };
                self.attempt(job, candidate, now, pass.depth, pass.scan, pass.reservations, pass.decisions);
            }
        }
    }

    /// Then the queues in the order's turn, each from its cursor, within the visit and work
    /// bounds. Each queue's next job past its cursor is kept between visits: a visit moves only
    /// its own queue's cursor, so only that head (or one tried since, out of order) is looked
    /// up again — not every queue's at every visit.
    fn visit_queues(&mut self, pass: &mut Pass<'_>, work_max: u64) {
        let (now, depth) = (pass.now, pass.depth);
        let mut heads: Vec<Option<Head>> = (0..self.queue_count).map(|q| self.next_untried(q, pass.scan)).collect();
        let mut candidates: Vec<(Candidate, JobId)> = Vec::with_capacity(self.queue_count);
        for _ in 0..CYCLE_VISITS_MAX {
            candidates.clear();
            for (q, head) in heads.iter_mut().enumerate() {
                let scan = &pass.scan;
                if (scan.blocked[q] && scan.work[q] >= work_max) || scan.visits[q] >= BACKFILL_VISITS_MAX {
                    continue;
                }
                if head.is_some_and(|h| scan.tried.contains(&h.key.2) || h.delays_changed != scan.delays_changed) {
                    *head = self.next_untried(q, scan);
                }
                if let Some(Head { key: (Reverse(p), since, job), .. }) = *head {
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
            pass.scan.cursor[q] = Some((Reverse(candidate.priority), candidate.submitted_s, job));
            pass.scan.visits[q] += 1;
            heads[q] = self.next_untried(q, pass.scan);
            let shape = self.jobs[&job].shape;
            if let Some(reason) = pass.scan.refused.get(&shape).cloned() {
                // The same request was refused for resources this pass: the same answer.
                pass.scan.tried.insert(job);
                if !self.awaiting.contains_key(&job) {
                    *pass.scan.looked.entry((q, shape)).or_default() += 1;
                }
                self.set_reason(job, reason);
                pass.scan.blocked[q] = true;
                pass.scan.short.push(job);
                if depth > 0 {
                    self.offer_promise(job, now, depth, pass.scan, pass.reservations);
                }
                continue;
            }
            self.attempt(job, candidate, now, depth, pass.scan, pass.reservations, pass.decisions);
        }
    }

    /// Queue `q`'s first job past its cursor not yet tried this pass, jumping by shape over the
    /// jobs of requests refused this pass (`Scan::passes_over`) — unless the queue holds more
    /// than [`SHAPES_JUMP_MAX`] shapes: then each is looked at in turn, within the visit
    /// bounds, as a job of a refused request always was.
    fn next_untried(&self, q: usize, scan: &Scan) -> Option<Head> {
        let from = scan.cursor[q].map_or(Bound::Unbounded, Bound::Excluded);
        let head = |key: Key| Head { key, delays_changed: scan.delays_changed };
        for key in self.pending.order(q).range((from, Bound::Unbounded)) {
            if scan.tried.contains(&key.2) {
                continue;
            }
            if self.pending.shape_count(q) > SHAPES_JUMP_MAX || !self.passes_over(q, self.jobs[&key.2].shape, scan) {
                return Some(head(*key));
            }
            return self.next_by_shape(q, scan, key).map(head);
        }
        None
    }

    /// Queue `q`'s first job after `after` that is not tried and not of a shape the pass
    /// passes over: the earliest such job of each of its shapes, the first of them.
    fn next_by_shape(&self, q: usize, scan: &Scan, after: &Key) -> Option<Key> {
        self.pending
            .groups(q)
            .filter(|&(shape, _)| !self.passes_over(q, shape, scan))
            .filter_map(|(_, keys)| {
                keys.range((Bound::Excluded(after), Bound::Unbounded)).find(|k| !scan.tried.contains(&k.2)).copied()
            })
            .min()
    }

    /// Does queue `q`'s group of request `shape` hold a job with a right of its own over a
    /// reservation (a promise, victims stopping for it)? Then it is never jumped over for a
    /// delay.
    fn group_has_rights(&self, q: usize, shape: u64) -> bool {
        let key = |&j: &JobId| (Reverse(self.priority(j)), self.jobs[&j].eligible_at, j);
        self.pending.holds_any(q, shape, self.promises.iter().chain(self.awaiting.keys()).map(key))
    }

    /// Does the pass jump over queue `q`'s jobs of request `shape`? When every one of them would
    /// get the answer one of them got, and gets it when the pass ends (`Waiting::settle`):
    /// refused for resources and looked at enough (`Scan::refused_enough`), or refused for
    /// delaying the reservation with no right while none of the group ends by its start.
    fn passes_over(&self, q: usize, shape: u64, scan: &Scan) -> bool {
        scan.refused_enough(q, shape)
            || scan
                .delayed
                .get(&(q, shape))
                .is_some_and(|d| d.live && scan.now.saturating_add(self.pending.shortest(q, shape)) > d.start_s)
    }

    /// Without backfill the pass stops at a queue's blocked head, but a queue's right to
    /// reclaim is for all its waiting jobs together: behind each head short of resources, the
    /// next jobs of its queue (up to [`PREEMPTORS_MAX`]) become preemption candidates too, in
    /// order. (Else a second job within the guarantee waits a whole grace period for the first
    /// one's victims before it may reclaim.) They start only on what their own victims free.
    fn behind_short_heads(&self, scan: &mut Scan) {
        let heads: BTreeSet<usize> = scan.short.iter().map(|j| self.jobs[j].queue).collect();
        for q in heads {
            let Some(from) = scan.cursor[q] else { continue };
            let behind = self.pending.order(q).range((Bound::Excluded(from), Bound::Unbounded));
            scan.short.extend(behind.map(|&(_, _, j)| j).filter(|j| !scan.tried.contains(j)).take(PREEMPTORS_MAX));
        }
    }

    /// Promise `job` a start if a reservation is free; else remember it for the next slot that
    /// frees in this pass.
    fn offer_promise(&mut self, job: JobId, now: u64, depth: usize, scan: &mut Scan, reservations: &mut Reservations) {
        self.promise(job, now, depth, reservations);
        if self.promises.contains(&job) {
            scan.stale_delays();
        } else {
            scan.unpromised.push(job);
        }
    }

    /// A reservation freed in the middle of the pass: offer it to the jobs refused earlier
    /// that could not have one, in the order they were refused.
    fn promise_unpromised(&mut self, now: u64, depth: usize, scan: &mut Scan, reservations: &mut Reservations) {
        let waiting = std::mem::take(&mut scan.unpromised);
        let mut left = Vec::new();
        for (i, &job) in waiting.iter().enumerate() {
            if self.promises.len() >= depth {
                // Every reservation held again: the rest wait for the next slot.
                left.extend_from_slice(&waiting[i..]);
                break;
            }
            if self.is_queued(job) && !self.promises.contains(&job) {
                self.promise(job, now, depth, reservations);
                if self.promises.contains(&job) {
                    scan.stale_delays();
                } else {
                    left.push(job);
                }
            }
        }
        scan.unpromised = left;
    }

    /// Count promise `job` (planned as `r`) in its queue's fair share for the rest of the pass,
    /// as if it ran: the order's next pick, and the next promise, go to the queue that is
    /// behind once it runs. (Otherwise every promise of a deep reservation list goes to the
    /// queue furthest behind now, and the fleet serves that queue alone until they have all
    /// started: a convoy, one queue after another.)
    fn charge_promise(&mut self, job: JobId, r: &Reservation, now: u64) {
        let Some(fs) = self.fair.as_mut() else { return };
        let (q, amount) = (self.jobs[&job].queue, self.engine.planned_held(r, &self.billing));
        fs.start(q, amount, now);
        self.promise_charges.insert(job, (q, amount));
    }

    /// Take back every charge `charge_promise` made (at the same `now`: fair share's decayed
    /// usage is as it was; a promise that started was taken back when it did).
    fn release_promise_charges(&mut self, now: u64) {
        let charges = std::mem::take(&mut self.promise_charges);
        if let Some(fs) = self.fair.as_mut() {
            for (q, amount) in charges.into_values() {
                fs.stop(q, amount, now);
            }
        }
    }

    /// Try to start `job` (picked as `candidate`) and record what came of it.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &mut self,
        job: JobId,
        candidate: Candidate,
        now: u64,
        depth: usize,
        scan: &mut Scan,
        reservations: &mut Reservations,
        decisions: &mut Vec<Decision>,
    ) {
        let q = candidate.queue;
        scan.tried.insert(job);
        match self.try_start(job, now, reservations) {
            Ok(go) => {
                scan.stale_delays();
                if scan.blocked[q] {
                    scan.work[q] += go.work;
                }
                self.dequeue(job, candidate.priority, candidate.submitted_s);
                self.start(job, go.alloc, go.milli, go.demand, now);
                // Its own reservation, if it had one, is spent: the slot goes to the first job
                // refused before it that could not have one.
                let held = reservations.plans.len() + usize::from(reservations.one.is_some());
                reservations.plans.retain(|(k, _)| *k != job);
                if reservations.one.as_ref().is_some_and(|((k, _), _)| *k == job) {
                    reservations.one = None;
                }
                if reservations.plans.len() + usize::from(reservations.one.is_some()) < held {
                    self.promise_unpromised(now, depth, scan, reservations);
                }
                let eligible_since = self.jobs[&job].eligible_at;
                decisions.push(Decision::Start { job, alloc: go.alloc, milli: go.milli, eligible_since });
                self.replan_displaced(job, &go.displaced, now, reservations);
            }
            Err(Refusal { reason, blocks_queue, work, delays_one }) => {
                if scan.blocked[q] {
                    scan.work[q] += work;
                }
                let resources = matches!(reason, PendingReason::Resources { .. });
                // Kept off capacity freed for a preemptor: it may preempt in turn.
                let preemptor_kept = matches!(&reason, PendingReason::Reservation { job: k, .. }
                    if self.awaiting.keys().any(|a| &self.jobs[a].job.name == k));
                // Deeper reservations also go to jobs that fit now but would delay an earlier
                // one: they are ahead in the queue, and a later cycle would otherwise reserve
                // them ahead of (and push back) what was promised.
                let delayed = matches!(reason, PendingReason::Reservation { .. });
                // One reason shared by every job of the shape refused after it (a long queue of
                // one request would otherwise hold a copy of a long reason per job).
                let reason = Arc::new(reason);
                let shape = self.jobs[&job].shape;
                if resources {
                    scan.refused.insert(shape, reason.clone());
                }
                if delays_one
                    && depth == 1
                    && let Some(((_, start_s), _)) = &reservations.one
                    && !self.group_has_rights(q, shape)
                {
                    let start_s = *start_s;
                    scan.delayed.insert((q, shape), Delayed { reason: reason.clone(), start_s, live: true });
                }
                if !resources && !delayed && self.promises.contains(&job) {
                    // A promised job its own limits hold back (quota, per-user limit).
                    self.break_promise(job, job, "own-limit", now);
                }
                self.set_reason(job, reason);
                if blocks_queue {
                    scan.blocked[q] = true;
                }
                if resources || preemptor_kept {
                    scan.short.push(job);
                }
                if depth > 0 && (resources || (delayed && depth > 1)) {
                    self.offer_promise(job, now, depth, scan, reservations);
                }
            }
        }
    }

    /// `job` started by a higher right over the promises in `displaced`: record each break
    /// and plan the reservations again around it.
    fn replan_displaced(
        &mut self,
        job: JobId,
        displaced: &[(JobId, &'static str)],
        now: u64,
        reservations: &mut Reservations,
    ) {
        if displaced.is_empty() {
            return;
        }
        for &(k, right) in displaced {
            self.break_promise(k, job, right, now);
        }
        if let Some(((k, _), _)) = &reservations.one {
            let k = *k;
            self.last_reservation = None;
            reservations.one = self.reserve_one(k, now);
            if reservations.one.is_none() {
                self.promises.retain(|&p| p != k);
            }
        }
    }

    /// May `job`, placed with `demand`, start though it pushes back `reserved`'s promise? The
    /// right it would do so by: its preemption's, a higher priority (fair share), its own
    /// promise ahead of `reserved`'s in their queue's order (`queue-order`: two promises of one
    /// queue must not hold each other back), or its guarantee against another
    /// queue's reservation (a reservation holds capacity against borrowers, not against a
    /// guarantee; a reserved job within its own guarantee keeps its right to reclaim).
    ///
    /// Starvation, and a guarantee against a reserved job that is itself within its queue's
    /// guarantee, push a promise back only within the slip bound
    /// (`PreemptionRules::promise_slip_max_s`): `new_start`, when the reserved job would start
    /// with `job` running (`None`: not known to end), must stay within the bound of the first
    /// start promised in its wait; past it, the reservation holds. A guarantee against a
    /// reserved job that would borrow is not bounded: the lender's guarantee wins over a
    /// borrower's promise, as over its running jobs. Nor is a preemptor's, whose victims are
    /// already stopping for it.
    pub(super) fn overrides(
        &self,
        job: JobId,
        demand: &[(Flavor, u64)],
        reserved: JobId,
        new_start: Option<u64>,
    ) -> Option<&'static str> {
        let right = self.override_right(job, demand, reserved)?;
        // A preemptor's victims are already stopping for it: refusing it now would waste them.
        if matches!(right, "priority" | "queue-order") || self.awaiting.contains_key(&job) {
            return Some(right);
        }
        let r = &self.jobs[&reserved];
        let borrows =
            self.quotas.as_ref().is_some_and(|b| !b.within_guarantee(r.queue, r.job.compiled.milli_at_most()));
        if matches!(right, "guarantee" | "consolidation") && borrows {
            return Some(right);
        }
        let Some(&promised) = self.promise_at.get(&reserved) else { return Some(right) };
        new_start.is_some_and(|t| t <= promised.saturating_add(self.rules.promise_slip_max_s)).then_some(right)
    }

    /// [`Scheduler::overrides`] before the slip bound.
    pub(super) fn override_right(&self, job: JobId, demand: &[(Flavor, u64)], reserved: JobId) -> Option<&'static str> {
        if let Some(a) = self.awaiting.get(&job) {
            return Some(a.right);
        }
        let (j, r) = (&self.jobs[&job], &self.jobs[&reserved]);
        if self.fair.is_some() && j.job.priority > r.job.priority {
            return Some("priority");
        }
        if j.queue == r.queue {
            // Only another promise: letting every older job of the queue pass would hand the
            // queue each GPU that frees, whatever the fair-share order says (a convoy).
            let key = |id: JobId, e: &super::Entry| (Reverse(self.priority(id)), e.eligible_at, id);
            return (self.promises.contains(&job) && key(job, j) < key(reserved, r)).then_some("queue-order");
        }
        let book = self.quotas.as_ref()?;
        let within = !demand.is_empty() && demand.iter().all(|(f, d)| !book.over_guarantee(j.queue, f, *d));
        (j.queue != r.queue && within).then_some("guarantee")
    }

    /// Refuse `job` if it would borrow (run its queue above its guarantee) in a flavor another
    /// queue is reclaiming right now: what the reclaim frees must not be borrowed back at once.
    pub(super) fn owed_to_other(&self, job: JobId, demand: &[(Flavor, u64)]) -> Option<(JobId, PendingReason)> {
        let book = self.quotas.as_ref()?;
        if !self.config.preempt || self.awaiting.contains_key(&job) {
            return None;
        }
        let q = self.jobs[&job].queue;
        let borrows: Vec<&Flavor> =
            demand.iter().filter(|(f, d)| book.over_guarantee(q, f, *d)).map(|(f, _)| f).collect();
        let (k, a) = self
            .awaiting
            .iter()
            .find(|(k, a)| self.jobs[k].queue != q && a.owed.iter().any(|f| borrows.contains(&f)))?;
        Some((*k, PendingReason::Reservation { job: self.jobs[k].job.name.clone(), start_s: a.until }))
    }

    /// `job`, refused because capacity is kept for preemptor `k`, loses its promised start (if
    /// it has one) to `k`'s right.
    pub(super) fn preemptor_takes_promise(&mut self, job: JobId, k: JobId, now: u64) {
        if self.promises.contains(&job) {
            let right = self.awaiting[&k].right;
            self.break_promise(job, k, right, now);
        }
    }
}
