//! Preemption in a cycle: after the starting pass, jobs it could not start for lack of
//! resources may stop running work they have a right to — lower priority (priority), other
//! queues' borrowed capacity where their own guarantee has room (reclaim), or, once they have
//! waited past the starvation bound, other queues' work of their priority or lower
//! (starvation). The rules that make reclaim converge:
//!
//! - A queue's guarantee is judged once per cycle for all its waiting jobs together: each
//!   preemptor's claim (what it will hold, on the GPU model the plan actually places it on)
//!   is taken off its queue's room before the next one is judged, and so are the claims of
//!   preemptors still waiting for their victims.
//! - Preemption never takes another queue below its own guarantee ([`Spare`]).
//! - A job a reclaim started is protected from reclaim and starvation for
//!   `QueueTree::reclaim_protect_s` (priority may still stop it, and a consolidation may
//!   move it: a move keeps its queue's share), and a job a reclaim stopped
//!   is, once it starts again, a victim of last resort for as long: hysteresis both ways, so
//!   neither side is taken back minutes later, yet a queue within its guarantee never waits
//!   for a restarted borrower's protection to end.
//! - What the victims free is kept for their preemptor (`pass.rs`), which is tried first once
//!   its victims are gone; and while it waits, no other queue may borrow the flavor it
//!   reclaims (`owed`).
//!
//! The engine plans the victims for several preemptors in turn, each on what the ones before
//! it leave; the decisions say to signal the victims now and kill them when their grace period
//! ends.

use super::preemption_plan::{Plan, Room, within_room};
use super::{Awaiting, Decision, JobId, Scheduler};
use crate::preempt::{Cause, Right, Spare, Team, Victim};
use crate::{AllocId, CompiledJob, Engine};
use gantry_types::{Flavor, PendingReason};
use std::collections::{BTreeMap, BTreeSet};

/// Most jobs that may start preempting in one cycle (bounds the planning per cycle).
pub const PREEMPTORS_MAX: usize = 8;

/// Most plans per cycle that try moving any queue's jobs (after stops alone and its team's
/// moves found none): nearly every job within its guarantee has smaller jobs somewhere to
/// move, each such plan runs over every running job, and on a full fleet its moved jobs find
/// no place. Unbounded, it took a cycle with 50,000 waiting jobs on 1,000 nodes from 111 to
/// 158 ms without a single plan made; whole-node waits are rare enough that two a cycle
/// serve them (the random trees of `tests/sim/stability_trees.rs` hold their bound).
pub const MOVES_ACROSS_TEAMS_PLANS_MAX: usize = 2;

impl Scheduler {
    /// Room left in each queue's guarantee, per flavor it has one for.
    pub(super) fn guarantee_room(&self) -> Room {
        let Some(book) = &self.quotas else { return Room::new() };
        let mut room = Room::new();
        for (q, spec) in book.tree().queues.iter().enumerate() {
            for quota in &spec.quotas {
                let used = book.used(q, &quota.flavor);
                room.insert((q, quota.flavor.clone()), quota.guaranteed_milli.saturating_sub(used));
            }
        }
        room
    }

    /// What preemption may take from each queue: its usage above its guarantee, per flavor,
    /// and above its weighted share (`shares`, when the tree reclaims toward shares).
    fn spare(&self, shares: Option<&super::shares::Shares>) -> Spare {
        let above_share = shares.map(|s| s.held.keys().map(|&q| (q, s.above(q))).collect()).unwrap_or_default();
        let Some(book) = &self.quotas else { return Spare::unlimited().with_shares(above_share) };
        let mut above = BTreeMap::new();
        for r in self.running.values() {
            let q = self.jobs[&r.job].queue;
            for (flavor, _) in &r.demand {
                above
                    .entry((q, flavor.clone()))
                    .or_insert_with(|| book.used(q, flavor).saturating_sub(book.guaranteed(q, flavor)));
            }
        }
        Spare::above_guarantee(above).with_shares(above_share)
    }

    /// What entitles `job` to capacity at `now`, given the room left in guarantees and, with
    /// fair-share reclaim, in weighted shares.
    fn right(&self, job: JobId, now: u64, room: &Room, shares: Option<&super::shares::Shares>) -> Right {
        let entry = &self.jobs[&job];
        let milli = entry.job.compiled.milli_at_most();
        let guarantee =
            room.iter().filter(|((q, _), r)| *q == entry.queue && **r >= milli).map(|((_, f), _)| f.clone()).collect();
        Right {
            queue: entry.queue,
            priority: entry.job.priority,
            milli,
            guarantee,
            starving: self.starvation_s.is_some_and(|s| now.saturating_sub(entry.eligible_at) >= s),
            fair_share: shares.is_some_and(|s| s.room_for(entry.queue, milli)),
            consolidate: false,
            team: Team::Own,
            // Only a job within its guarantee: a starving job that overshot took its victim's
            // queue below its guarantee, and that queue took the capacity back.
            overshoot: self.entitled_for(job, now).is_some_and(|waited| waited >= self.rules.overshoot_after_s),
        }
    }

    /// A running job as the planner sees it (`way_backs`: the expected wait per shape).
    fn victim(&self, alloc: AllocId, now: u64, way_backs: &super::way_back::WayBacks) -> Victim {
        let r = &self.running[&alloc];
        let entry = &self.jobs[&r.job];
        let ran = now - r.started_at;
        let borrowed = match &self.quotas {
            Some(book) => r
                .demand
                .iter()
                .filter(|(f, _)| book.over_guarantee(entry.queue, f, 0))
                .map(|(f, _)| f.clone())
                .collect(),
            None => Vec::new(),
        };
        Victim {
            alloc,
            queue: entry.queue,
            priority: entry.job.priority,
            preemptible: entry.job.lifecycle.preemptible,
            milli: r.milli,
            demand: r.demand.clone(),
            borrowed,
            work_lost_milli_s: r.milli.saturating_mul(ran),
            way_back_milli_s: r.milli.saturating_mul(way_backs.get(&entry.shape).copied().unwrap_or(0)),
            budget_spent: self.budget_spent(r.job),
            min_runtime_left_s: entry.job.lifecycle.min_runtime_s.saturating_sub(ran),
            started_starved: r.started_starved,
            reclaim_protected: r.protected_since.is_some_and(|t| now < t.saturating_add(self.reclaim_protect_s)),
            restarted_after_reclaim: r.restarted_since.is_some_and(|t| now < t.saturating_add(self.reclaim_protect_s)),
            preempted_times: self.preempted_times.get(&r.job).copied().unwrap_or(0),
        }
    }

    /// The other children of `queue`'s parent (none for a root queue or without a tree).
    pub(super) fn siblings(&self, queue: usize) -> Vec<usize> {
        let Some(fair) = &self.fair else { return Vec::new() };
        let queues = &fair.tree().queues;
        let Some(parent) = queues[queue].parent else { return Vec::new() };
        (0..queues.len()).filter(|&q| q != queue && queues[q].parent == Some(parent)).collect()
    }

    /// May no reclaim ever stop `job` — it is not preemptible, or it spent its preemption
    /// budget? Such a job must not start on capacity a reclaim may need (`admit/budget.rs`,
    /// `lending.rs`).
    pub(super) fn unstoppable(&self, job: JobId) -> bool {
        !self.jobs[&job].job.lifecycle.preemptible || self.budget_spent(job)
    }

    /// Has `job` spent its preemption budget (stops, or work lost)?
    pub(super) fn budget_spent(&self, job: JobId) -> bool {
        let stops = self.preempted_times.get(&job).copied().unwrap_or(0);
        self.rules.spent(stops, self.preempted_lost.get(&job).copied().unwrap_or(0))
    }

    /// Count each victim's way back in its price, cheapest first again.
    fn price_way_backs(&self, victims: &mut [Victim], now: u64) {
        let way_backs = self.way_backs(now);
        for v in victims.iter_mut() {
            let shape = self.jobs[&self.running[&v.alloc].job].shape;
            v.way_back_milli_s = v.milli.saturating_mul(way_backs.get(&shape).copied().unwrap_or(0));
        }
        victims.sort_by_key(|v| v.cost());
    }

    /// Plan victims for `job` on `base`; where the plan reclaims a guarantee, the job must be
    /// placed (with the victims gone) within its queue's room, else it is planned again with
    /// priority and starvation alone; failing that, a job within its guarantee may move its
    /// team's smaller jobs (`consolidation.rs`), and last any queue's (while `across_left`
    /// such plans remain this cycle). With the plan comes the planning copy as it leaves the
    /// fleet: the victims gone and the preemptor placed.
    #[allow(clippy::too_many_arguments)]
    fn plan_checked(
        &self,
        base: &Engine,
        job: &CompiledJob,
        right: Right,
        victims: &[Victim],
        spare: &Spare,
        room: &Room,
        across_left: &mut usize,
    ) -> Option<(Plan, Engine)> {
        let consolidating = |right: Right, across_left: &mut usize| {
            let team = Team::Queues(self.siblings(right.queue));
            let own = Right { consolidate: true, team, ..right.clone() };
            self.plan_consolidating(base, job, own, victims, spare, room).or_else(|| {
                // Bounded: each try runs over every running job.
                *across_left = across_left.checked_sub(1)?;
                let anyone = Right { consolidate: true, team: Team::Everyone, ..right };
                self.plan_consolidating(base, job, anyone, victims, spare, room)
            })
        };
        match self.plan_direct(base, job, right.clone(), victims, spare, room) {
            // A borrower wider than its queue's loan goes after every other way, moving jobs
            // included (any queue's: a moved job loses its work since its last checkpoint, but
            // its queue keeps what it holds): stopped, it takes its queue below its guarantee,
            // and that queue then reclaims from a third.
            Some(direct) if overshoots(&direct.0, victims, spare) => {
                consolidating(Right { overshoot: false, ..right }, across_left).or(Some(direct))
            }
            Some(direct) => Some(direct),
            None => consolidating(right, across_left),
        }
    }

    /// [`Scheduler::plan_checked`] without consolidation.
    fn plan_direct(
        &self,
        base: &Engine,
        job: &CompiledJob,
        mut right: Right,
        victims: &[Victim],
        spare: &Spare,
        room: &Room,
    ) -> Option<(Plan, Engine)> {
        loop {
            let (chosen, after, tasks, demand) = self.plan_placed(base, job, &right, victims, spare)?;
            let reclaims = chosen.iter().any(|a| {
                victims.iter().find(|v| v.alloc == *a).and_then(|v| v.cause(&right)) == Some(Cause::Guarantee)
            });
            if !reclaims || within_room(room, right.queue, &demand) {
                return Some((Plan { victims: chosen, right, tasks, demand, moves: Vec::new() }, after));
            }
            right.guarantee.clear();
        }
    }

    /// Plan and decide preemptions for the jobs `short` of resources this cycle.
    /// Whether it stopped at [`PREEMPTORS_MAX`] with preemptors left unplanned (the next tick
    /// plans them: `Scheduler::cycle`).
    pub(super) fn preempt(&mut self, now: u64, short: &[JobId], decisions: &mut Vec<Decision>) -> bool {
        if !self.config.preempt {
            return false;
        }
        // A preemptor whose victims are all gone plans again if it still waits.
        let terminating = &self.terminating;
        self.awaiting.retain(|_, a| a.victims.iter().any(|v| terminating.contains_key(v)));
        let capped = !short.is_empty() && self.plan_preemptors(now, short, decisions);
        let preempting: Vec<(JobId, PendingReason)> = self
            .awaiting
            .iter()
            .filter(|(job, _)| self.reason_of(**job).is_some())
            .map(|(&job, a)| {
                let victims = a.victims.iter().filter(|v| self.terminating.contains_key(v)).count() as u32;
                (job, PendingReason::Preempting { victims, until_s: a.until })
            })
            .collect();
        for (job, reason) in preempting {
            self.set_reason(job, std::sync::Arc::new(reason));
        }
        capped
    }

    /// Plan victims for the jobs `short` of resources (at most [`PREEMPTORS_MAX`] of those
    /// with an eligible victim), each on what the ones before it leave, and decide the stops.
    /// Whether it stopped at that bound with jobs left to try.
    fn plan_preemptors(&mut self, now: u64, short: &[JobId], decisions: &mut Vec<Decision>) -> bool {
        let mut room = self.guarantee_room();
        let mut shares = self.weighted_shares();
        let mut spare = self.spare(shares.as_ref());
        // The fleet as the stopping victims leave it, their preemptors placed and claimed.
        let mut base = self.engine.planning_copy();
        for &alloc in self.terminating.keys() {
            self.engine.release_on(&mut base, alloc);
            // A job a consolidation moves holds as much after its move as before: what its
            // queue borrows stays reclaimable (taken, a queue whose borrowing gang moved
            // looked below its guarantee until the move was done).
            if !self.awaiting.contains_key(&self.running[&alloc].job) {
                spare.take(&self.victim(alloc, now, &Default::default()));
            }
        }
        for (&k, a) in &self.awaiting {
            // A moved job runs where it was until its kill, and its queue's use counts it
            // there: its place after the move is not claimed from the room a second time.
            let moving = self.allocation_of(k).is_some();
            if base.place_exact(&self.jobs[&k].job.compiled, &a.tasks).is_some() && !moving {
                claim(&mut room, self.jobs[&k].queue, &a.demand);
            }
        }
        // Way backs are estimated once a preemptor has an eligible victim (until then no
        // victim's price matters).
        let mut priced = false;
        let mut victims: Vec<Victim> = self
            .running
            .keys()
            .filter(|alloc| !self.terminating.contains_key(alloc))
            .map(|&alloc| self.victim(alloc, now, &Default::default()))
            .collect();
        // Cheapest first, as every plan takes them: each plan then filters, not sorts.
        victims.sort_by_key(|v| v.cost());
        let mut requests = 0;
        // Whether a right has an eligible victim, per right: a long queue's short jobs share a
        // few rights (queue, priority, guarantee, starving), and without this every one of
        // them scanned every running job — short jobs × running jobs per cycle. Forgotten
        // whenever a plan changes the victims or the spare.
        // Per right: whether it has a victim to stop, and whether it has one to move.
        let mut eligible: Vec<(Right, (bool, bool))> = Vec::new();
        let mut across_left = MOVES_ACROSS_TEAMS_PLANS_MAX;
        for &job in short {
            if requests == PREEMPTORS_MAX {
                return true;
            }
            if self.awaiting.contains_key(&job) {
                continue;
            }
            let right = self.right(job, now, &room, shares.as_ref());
            let (stops, moves) = match eligible.iter().find(|(r, _)| *r == right) {
                Some(&(_, any)) => any,
                None => {
                    let stops = victims.iter().any(|v| v.cause(&right).is_some() && spare.allows(v, &right));
                    let moving = Right { consolidate: true, team: Team::Everyone, ..right.clone() };
                    let moves = victims.iter().any(|v| v.moves_for(&moving) && v.cause(&moving).is_some());
                    eligible.push((right.clone(), (stops, moves)));
                    (stops, moves)
                }
            };
            if !(stops || moves && across_left > 0) {
                continue;
            }
            if !priced {
                priced = true;
                self.price_way_backs(&mut victims, now);
            }
            eligible.clear();
            requests += 1;
            let compiled = &self.jobs[&job].job.compiled;
            let planned = self.plan_checked(&base, compiled, right, &victims, &spare, &room, &mut across_left);
            let Some((plan, after)) = planned else {
                continue;
            };
            if self.reclaimed_next(job, &plan, now) {
                continue;
            }
            claim(&mut room, plan.right.queue, &plan.demand);
            if let Some(s) = shares.as_mut() {
                s.claim(
                    plan.right.queue,
                    plan.right.milli,
                    plan.victims.iter().map(|a| {
                        let r = &self.running[a];
                        (self.jobs[&r.job].queue, r.milli)
                    }),
                );
            }
            base = after;
            if plan.victims.is_empty() {
                self.await_leftover(job, &plan.right, plan.tasks, plan.demand, now);
                continue;
            }
            self.stop_victims(job, plan, &mut victims, &mut spare, now, decisions);
        }
        false
    }

    /// Would `job`, started by `plan` on borrowed capacity by priority alone in place of its
    /// own queue's jobs, hold what guarantee holders claim (`lending.rs`), with the victims'
    /// capacity freed? Then the next reclaim takes it back: a borrower of higher priority, the
    /// youngest and cheapest victim, would stop its queue's others, be reclaimed, and start
    /// again by stopping more. (Only like for like within a queue: checked after planning, for
    /// every borrowing preemptor it cost a live cycle with 50,000 waiting a third more.)
    fn reclaimed_next(&self, job: JobId, plan: &Plan, now: u64) -> bool {
        let own = |a: &crate::AllocId| self.jobs[&self.running[a].job].queue == plan.right.queue;
        if !borrows_by_priority(&plan.right) || plan.victims.is_empty() || !plan.victims.iter().all(own) {
            return false;
        }
        let freed: Vec<(Flavor, u64)> =
            plan.victims.iter().flat_map(|a| self.running[a].demand.iter().cloned()).collect();
        self.owed_after(job, &plan.demand, &freed, now).is_some()
    }

    /// Decide the stops of `plan`'s victims for `job`, which then awaits them, and those of
    /// its moves (each moved job awaits its own victims, or the preemptor's when it needs none).
    fn stop_victims(
        &mut self,
        job: JobId,
        mut plan: Plan,
        victims: &mut Vec<Victim>,
        spare: &mut Spare,
        now: u64,
        decisions: &mut Vec<Decision>,
    ) {
        let moves = std::mem::take(&mut plan.moves);
        let waits_for = plan.victims.clone();
        self.stop_for(job, plan, victims, spare, now, decisions);
        for m in moves {
            let plan = Plan { victims: m.victims, right: m.right, tasks: m.tasks, demand: m.demand, moves: Vec::new() };
            if plan.victims.is_empty() {
                let until = self.awaiting[&job].until;
                let (tasks, demand) = (plan.tasks, plan.demand);
                let right = Cause::Consolidation.name();
                let awaiting = Awaiting { victims: waits_for.clone(), until, right, owed: Vec::new(), tasks, demand };
                self.awaiting.insert(m.job, awaiting);
            } else {
                self.stop_for(m.job, plan, victims, spare, now, decisions);
            }
        }
    }

    /// Decide the stops of `plan`'s victims for `job`, which then awaits them.
    fn stop_for(
        &mut self,
        job: JobId,
        plan: Plan,
        victims: &mut Vec<Victim>,
        spare: &mut Spare,
        now: u64,
        decisions: &mut Vec<Decision>,
    ) {
        let mut until = now;
        let mut causes = Vec::new();
        for &alloc in &plan.victims {
            let v = victims.iter().find(|v| v.alloc == alloc).expect("chosen among the victims");
            let cause = v.cause(&plan.right).expect("an eligible victim");
            spare.take(v);
            let victim = self.running[&alloc].job;
            let kill_at = now + self.jobs[&victim].job.lifecycle.grace_s;
            until = until.max(kill_at);
            causes.push(cause);
            self.terminating.insert(alloc, cause.name());
            // Planning counts on its GPUs from its kill at the latest (not its time limit):
            // else a preemptor's reservation lies past the victims' limits, and holds other
            // capacity against the jobs behind it — its own queue's too.
            let r = self.running.get_mut(&alloc).expect("a running victim");
            r.limit_end = Some(r.limit_end.map_or(kill_at, |e| e.min(kill_at)));
            decisions.push(Decision::Stop { job: victim, alloc, kill_at, cause: cause.name(), for_job: job });
        }
        victims.retain(|v| !plan.victims.contains(&v.alloc));
        let owed = if causes.contains(&Cause::Guarantee) {
            plan.demand.iter().map(|(f, _)| f.clone()).filter(|f| plan.right.guarantee.contains(f)).collect()
        } else {
            Vec::new()
        };
        let right = causes.iter().min().copied().expect("some victim").name();
        let (tasks, demand) = (plan.tasks, plan.demand);
        self.awaiting.insert(job, Awaiting { victims: plan.victims, until, right, owed, tasks, demand });
    }
}

impl Scheduler {
    /// `job` fits, with no victim of its own, on what victims already stopping free beyond
    /// their preemptors' needs: it waits for those victims like a preemptor, its planned GPUs
    /// kept for it (else the next cycle's preemptor, of any queue, takes them and `job` must
    /// stop victims of its own a cycle later).
    fn await_leftover(
        &mut self,
        job: JobId,
        right: &Right,
        tasks: Vec<crate::ledger::TaskGrant>,
        demand: Vec<(Flavor, u64)>,
        now: u64,
    ) {
        let gpus: BTreeSet<_> = tasks.iter().flat_map(|t| t.grants.iter().map(|g| g.gpu())).collect();
        let allocations = self.engine.allocations();
        let uses = |alloc: &AllocId| {
            allocations
                .get(alloc)
                .is_some_and(|a| a.tasks.iter().flat_map(|t| &t.grants).any(|g| gpus.contains(&g.gpu())))
        };
        let victims: Vec<AllocId> = self.terminating.keys().copied().filter(uses).collect();
        if victims.is_empty() {
            return;
        }
        let until = self
            .awaiting
            .values()
            .filter(|a| a.victims.iter().any(|v| victims.contains(v)))
            .map(|a| a.until)
            .max()
            .unwrap_or(now);
        let owed: Vec<Flavor> = demand.iter().map(|(f, _)| f.clone()).filter(|f| right.guarantee.contains(f)).collect();
        let right = if !owed.is_empty() {
            Cause::Guarantee
        } else if right.starving {
            Cause::Starvation
        } else {
            Cause::Priority
        };
        self.awaiting.insert(job, Awaiting { victims, until, right: right.name(), owed, tasks, demand });
    }
}

/// Does a preemptor with `right` stop victims by priority alone, borrowing what it takes (no
/// room in its queue's guarantee, no starvation, no fair-share right)?
fn borrows_by_priority(right: &Right) -> bool {
    right.guarantee.is_empty() && !right.starving && !right.fair_share
}

/// Take a preemptor's `demand` off its queue's room.
fn claim(room: &mut Room, queue: usize, demand: &[(Flavor, u64)]) {
    for (f, d) in demand {
        if let Some(r) = room.get_mut(&(queue, f.clone())) {
            *r = r.saturating_sub(*d);
        }
    }
}

/// Does `plan` take a victim's queue below its guarantee (`Spare::overshoot`, victims taken in
/// the plan's order)?
fn overshoots(plan: &Plan, victims: &[Victim], spare: &Spare) -> bool {
    let taken = plan.victims.iter().filter_map(|a| victims.iter().find(|v| v.alloc == *a));
    spare.overshoot_all(taken, plan.right.queue) > 0
}
