//! Preemption planning: which running jobs to stop so a job with a right to capacity fits.
//!
//! The preemptor's right is its priority (it may stop lower-priority work), its guarantee (a
//! queue whose guarantee has room for the job may stop other queues' borrowed capacity, in the
//! GPU models it has room in, and move its own queue's smaller jobs out of the way: a
//! consolidation, for a job whose shape — a whole node, NVLink-close GPUs — no borrower's stop
//! frees alone), or starvation (past the bound it may stop other queues' work of its priority
//! or lower that did not itself start starved). Never chosen: non-preemptible jobs, jobs
//! inside their minimum runtime, jobs that spent their preemption budget
//! (`PreemptionRules`), jobs a reclaim started less than the protection period ago (except
//! for priority; a job a reclaim stopped that started again within it is only taken last),
//! and — across queues — a job of a queue that runs nothing above its guarantee ([`Spare`]).
//! Borrowed capacity is always reclaimable: a borrower larger than what its queue borrowed (a
//! gang that must stop whole) may be taken, after every victim that is not.
//!
//! Among the sets of eligible victims that make room, the cheapest wins: the fewest capacity
//! taken below a guarantee, then the fewest GPU-seconds lost — the work thrown away
//! (milli-GPU × seconds since the last checkpoint) plus the way back (milli-GPU × the expected
//! wait before a job of the victim's shape can start again: a large young job is not stopped
//! to free one GPU while smaller victims exist) — then the fewest jobs, then the lowest
//! priority. Finding the cheapest set exactly is a packing problem, so
//! the planner compares a bounded number of candidates, each built greedily in cost order
//! until the job fits (placement re-run, gangs and topology included) and then pruned: the
//! victims over all nodes, and the victims on each of the [`PREEMPT_NODES_MAX`] cheapest nodes
//! alone (a 4-GPU job is better served by one 4-GPU victim than by four 1-GPU ones that ran
//! longer), and the cheapest single victim that alone makes room. Pruning gives back, most expensive first, every victim whose return still leaves
//! room, so every plan is minimal: removing any one victim makes the job not fit (fitting is
//! monotone in what is freed, so a victim found necessary stays necessary). Both steps search
//! rather than check after every victim (gallop and bisect for how many to add, batches that
//! double and halve for what to give back), on one planning copy per plan (`Trial`); a test
//! holds them to the sets checking one by one finds.
//!
//! The plan is a decision for the controller (or the simulator) to carry out: signal, grace
//! period, kill; the job is placed once the victims are gone.

pub use crate::limits::{PREEMPT_NODES_MAX, PREEMPT_SINGLES_MAX};
use crate::{AllocId, CompiledJob, Engine};
use gantry_types::Flavor;
use std::collections::{BTreeMap, BTreeSet};

/// Preemptions after which a job is chosen only when no other victim will do.
pub const PREEMPTED_TIMES_LAST: u32 = 2;

/// Why a preemptor may stop a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    Priority,
    Guarantee,
    /// The preemptor's guarantee moves its own queue's smaller job to make room for its shape.
    Consolidation,
    /// The preemptor's queue is below its weighted share; the victim's stays at or above it.
    FairShare,
    Starvation,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Cause::Priority => "priority",
            Cause::Guarantee => "guarantee",
            Cause::Consolidation => "consolidation",
            Cause::FairShare => "fair-share",
            Cause::Starvation => "starvation",
        }
    }
}

/// A running job that might be stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub alloc: AllocId,
    /// Its queue (an index of the scheduler's queue tree; 0 without one).
    pub queue: usize,
    pub priority: i32,
    pub preemptible: bool,
    /// Milli-GPU it holds.
    pub milli: u64,
    /// What it counts against its queue's quotas, per flavor (milli-GPU).
    pub demand: Vec<(Flavor, u64)>,
    /// Flavors in which its queue runs above its guarantee (that capacity is borrowed).
    pub borrowed: Vec<Flavor>,
    /// Milli-GPU × seconds of work lost if stopped now (since its last checkpoint).
    pub work_lost_milli_s: u64,
    /// Milli-GPU × the seconds a job of its shape is expected to wait before it can start
    /// again (its way back).
    pub way_back_milli_s: u64,
    /// It was stopped as often, or lost as much work, as the preemption budget allows: never
    /// stopped again.
    pub budget_spent: bool,
    /// Seconds until it has run its minimum runtime (0 = it may be stopped).
    pub min_runtime_left_s: u64,
    /// It had waited past the starvation bound when it started.
    pub started_starved: bool,
    /// A reclaim started it less than the protection period ago: only priority may stop it.
    pub reclaim_protected: bool,
    /// A reclaim stopped it, and it started again less than the protection period ago: taken
    /// only when no other victim will do (a hard protection would make a queue within its
    /// guarantee wait for it; none would let the job that just restarted, having lost least,
    /// be the cheapest again at every reclaim).
    pub restarted_after_reclaim: bool,
    /// How often it was preempted before.
    pub preempted_times: u32,
}

/// What entitles the preemptor to capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Right {
    pub queue: usize,
    pub priority: i32,
    /// Milli-GPU the preemptor will hold (its own queue's smaller jobs may make way for it).
    pub milli: u64,
    /// Flavors in which its queue's guarantee has room for the job (with what other waiting
    /// jobs of the queue already claimed this cycle): it may reclaim borrowed capacity there.
    pub guarantee: Vec<Flavor>,
    /// It has waited past the starvation bound.
    pub starving: bool,
    /// Its queue stays within its weighted share with it, and the tree reclaims toward shares:
    /// it may stop other queues' work of its priority or lower, within what they hold above
    /// their shares ([`Spare`]).
    pub fair_share: bool,
    /// It may take a borrower larger than what the borrower's queue runs above its guarantee
    /// (a gang that must stop whole): it has waited within its guarantee for
    /// `PreemptionRules::overshoot_after_s`, so capacity did not free on its own.
    pub overshoot: bool,
    /// Its own queue's smaller jobs may make way for it (planned only when no plan without
    /// them exists, each moved job placed again in the same plan: `sched/consolidation.rs`).
    pub consolidate: bool,
    /// The queues (besides its own) whose jobs a consolidation may move too (only when
    /// `consolidate` is set).
    pub team: Team,
}

/// Whose jobs a consolidating preemptor may move besides its own queue's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Team {
    /// None.
    #[default]
    Own,
    /// These queues: its siblings in the tree, which share their parent's guarantee.
    Queues(Vec<usize>),
    /// Every queue: tried last, when moving its own team's jobs frees no room.
    Everyone,
}

impl Team {
    /// Does it include `queue`?
    pub fn includes(&self, queue: usize) -> bool {
        match self {
            Team::Own => false,
            Team::Queues(queues) => queues.contains(&queue),
            Team::Everyone => true,
        }
    }
}

impl Victim {
    /// Why a preemptor with `right` may stop this job, if it may: lower priority anywhere;
    /// within its own queue, a smaller job of its priority when the preemptor's guarantee has
    /// room (consolidation); across queues only, borrowed capacity where the preemptor's
    /// guarantee has room, or — for a starving preemptor — work of its priority or lower that
    /// did not start starved.
    pub fn cause(&self, right: &Right) -> Option<Cause> {
        if !self.preemptible || self.min_runtime_left_s > 0 || self.budget_spent {
            return None;
        }
        if self.priority < right.priority {
            return Some(Cause::Priority);
        }
        let consolidates = self.moves_for(right);
        if self.reclaim_protected {
            // The protection keeps a reclaim from taking its queue's share straight back; a
            // move leaves that share as it is (a job moved within its protection is one more
            // stop within its budget).
            return consolidates.then_some(Cause::Consolidation);
        }
        let own = self.queue == right.queue;
        if own {
            return consolidates.then_some(Cause::Consolidation);
        }
        if self.borrowed.iter().any(|f| right.guarantee.contains(f)) {
            return Some(Cause::Guarantee);
        }
        if consolidates {
            return Some(Cause::Consolidation);
        }
        if right.fair_share && self.priority <= right.priority {
            return Some(Cause::FairShare);
        }
        (right.starving && self.priority <= right.priority && !self.started_starved).then_some(Cause::Starvation)
    }

    /// May a consolidating preemptor with `right` move this job (stop it and place it again in
    /// the same plan)? A job of its team (`Right::team`) smaller than it, of no higher
    /// priority (one just restarted after a reclaim too, last: its budget bounds how often).
    /// (The rules of [`Victim::cause`] that stop any victim — not preemptible, within its
    /// minimum runtime — are checked there.)
    pub fn moves_for(&self, right: &Right) -> bool {
        right.consolidate
            && (self.queue == right.queue || right.team.includes(self.queue))
            && !right.guarantee.is_empty()
            && self.priority <= right.priority
            && self.milli < right.milli
    }

    /// Cheaper victims sort first; a job already preempted [`PREEMPTED_TIMES_LAST`] times or
    /// more, or just restarted after a reclaim, goes after every other (else the job that just
    /// restarted, having lost least, is the cheapest again at every reclaim).
    pub(crate) fn cost(&self) -> (bool, u64, i32, AllocId) {
        (self.last_resort(), self.price(), self.priority, self.alloc)
    }

    /// What stopping it costs, in milli-GPU-seconds: the work lost and the way back.
    pub fn price(&self) -> u64 {
        self.work_lost_milli_s.saturating_add(self.way_back_milli_s)
    }

    /// Taken only when no other victim will do: preempted [`PREEMPTED_TIMES_LAST`] times, or
    /// just restarted after a reclaim.
    fn last_resort(&self) -> bool {
        self.preempted_times >= PREEMPTED_TIMES_LAST || self.restarted_after_reclaim
    }
}

/// How much of each queue's usage preemption may still take, per flavor: what it runs above
/// its guarantee. Across queues, a victim of a queue with nothing above its guarantee (in a
/// flavor it holds) is passed over; one larger than what its queue runs above (a borrowing
/// gang) may be taken — borrowed capacity is always reclaimable — but costs the difference
/// ([`Spare::overshoot`]), so such victims go after the others; a preemptor's own queue is not
/// bound (it replaces like with like).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spare {
    /// `None`: no quotas, everything may be taken. Per queue, then per flavor: looked up for
    /// every eligible victim of every plan, without building a key.
    above: Option<BTreeMap<usize, BTreeMap<Flavor, u64>>>,
    /// Per queue, milli-GPU it holds above its weighted share: what fair-share reclaim may
    /// take from it (a queue not listed has nothing above).
    above_share: BTreeMap<usize, u64>,
}

impl Spare {
    /// No guarantees to keep.
    pub fn unlimited() -> Spare {
        Spare { above: None, above_share: BTreeMap::new() }
    }

    /// What each queue holds above its weighted share (for fair-share reclaim).
    pub fn with_shares(mut self, above_share: BTreeMap<usize, u64>) -> Spare {
        self.above_share = above_share;
        self
    }

    /// Each (queue, flavor)'s usage above its guarantee; pairs not listed have nothing to spare.
    pub fn above_guarantee(above: BTreeMap<(usize, Flavor), u64>) -> Spare {
        let mut by_queue: BTreeMap<usize, BTreeMap<Flavor, u64>> = BTreeMap::new();
        for ((q, f), spare) in above {
            by_queue.entry(q).or_default().insert(f, spare);
        }
        Spare { above: Some(by_queue), above_share: BTreeMap::new() }
    }

    /// May a preemptor with `right` take `v`? Its queue must run above its guarantee in every
    /// flavor `v` holds — by at least `v`'s demand, unless the right may overshoot.
    pub fn allows(&self, v: &Victim, right: &Right) -> bool {
        match v.cause(right) {
            // A moved job is placed again by the same plan: its queue keeps what it holds. (So
            // is a borrower beyond what its queue borrows, when the preemptor consolidates.)
            Some(Cause::Consolidation) => return true,
            Some(Cause::Guarantee) if v.moves_for(right) => return true,
            Some(Cause::FairShare) if self.above_share.get(&v.queue).is_none_or(|&above| above < v.milli) => {
                return false;
            }
            _ => {}
        }
        match &self.above {
            None => true,
            Some(_) if v.queue == right.queue => true,
            Some(above) => {
                let queue = above.get(&v.queue);
                let enough = |f: &Flavor, d: u64| {
                    queue.and_then(|q| q.get(f)).is_some_and(|&spare| spare > 0 && (right.overshoot || spare >= d))
                };
                v.demand.iter().all(|(f, d)| enough(f, *d))
            }
        }
    }

    /// Milli-GPU that taking `victims`, in this order, for a preemptor of queue `preemptor`
    /// takes below their queues' guarantees.
    pub fn overshoot_all<'v>(&self, victims: impl IntoIterator<Item = &'v Victim>, preemptor: usize) -> u64 {
        let mut left = self.clone();
        victims
            .into_iter()
            .map(|v| {
                let over = left.overshoot(v, preemptor);
                left.take(v);
                over
            })
            .sum()
    }

    /// Milli-GPU that taking `v` for a preemptor of queue `preemptor` takes below its queue's
    /// guarantee (0 when what its queue runs above covers it).
    pub fn overshoot(&self, v: &Victim, preemptor: usize) -> u64 {
        match &self.above {
            Some(above) if v.queue != preemptor => {
                let queue = above.get(&v.queue);
                v.demand.iter().map(|(f, d)| d.saturating_sub(queue.and_then(|q| q.get(f)).copied().unwrap_or(0))).sum()
            }
            _ => 0,
        }
    }

    /// Count `v` as taken.
    pub fn take(&mut self, v: &Victim) {
        if let Some(above) = self.above_share.get_mut(&v.queue) {
            *above = above.saturating_sub(v.milli);
        }
        if let Some(above) = self.above.as_mut() {
            for (f, d) in &v.demand {
                if let Some(spare) = above.get_mut(&v.queue).and_then(|q| q.get_mut(f)) {
                    *spare = spare.saturating_sub(*d);
                }
            }
        }
    }
}

/// A candidate set's cost, compared lexicographically: jobs in it of last resort (preempted
/// [`PREEMPTED_TIMES_LAST`] times, or just restarted after a reclaim), milli-GPU taken below
/// a guarantee, GPU-seconds lost (work and way back), jobs, highest priority among them,
/// then the allocations (a deterministic tie-break).
type PlanCost = (usize, u64, u64, usize, i32, Vec<AllocId>);

impl Engine {
    /// Would `job` fit on this engine's state? (Places and releases: the state is unchanged,
    /// and so is the decision counter — a check is not a decision. Every check on a planning
    /// copy therefore searches with the seed the job's real placement will use; advancing it
    /// made the answer depend on how many checks came before, so a planner could find no room
    /// where releasing the same victims in one go does.)
    pub(crate) fn fits_now(&mut self, job: &CompiledJob) -> bool {
        let (decisions, next_alloc) = (self.decisions, self.next_alloc);
        let fits = match self.place(job) {
            Ok(alloc) => {
                self.release(alloc).expect("just placed");
                true
            }
            Err(_) => false,
        };
        (self.decisions, self.next_alloc) = (decisions, next_alloc);
        fits
    }

    /// Put this engine's allocation `id` back on a planning copy's state.
    pub(crate) fn apply_on(&self, copy: &mut Engine, id: AllocId) {
        for task in &self.allocations[&id].tasks {
            crate::ledger::apply(&mut copy.state, task);
        }
    }

    /// The cheapest victims to stop so `job` fits (no quotas to keep), or `None` if no eligible
    /// set makes room (or it fits already: then nothing needs stopping, `Some(vec![])`).
    pub fn plan_preemption(&self, job: &CompiledJob, right: &Right, victims: &[Victim]) -> Option<Vec<AllocId>> {
        self.plan_on(&self.planning_copy(), job, right, victims, &Spare::unlimited())
    }

    /// [`Engine::plan_preemption`] on `base` (a planning copy: what earlier preemptors leave),
    /// keeping what `spare` says each queue must keep.
    pub fn plan_on(
        &self,
        base: &Engine,
        job: &CompiledJob,
        right: &Right,
        victims: &[Victim],
        spare: &Spare,
    ) -> Option<Vec<AllocId>> {
        let mut trial = Trial::of(self, base);
        if trial.fits(job) {
            return Some(Vec::new());
        }
        let mut eligible: Vec<&Victim> = victims
            .iter()
            .filter(|v| v.cause(right).is_some() && self.allocations.contains_key(&v.alloc))
            .filter(|v| spare.allows(v, right))
            .collect();
        // (Linear when `victims` come sorted by cost, as the scheduler passes them.) Victims
        // that would take their queue below its guarantee go after every other.
        eligible.sort_by_key(|v| (spare.overshoot(v, right.queue) > 0, v.cost()));
        let mut best: Option<(PlanCost, Vec<AllocId>)> = None;
        // The eligible victims by allocation, sorted once the first plan needs its cost.
        let mut by_alloc: Vec<(AllocId, &Victim)> = Vec::new();
        let mut consider = |trial: &mut Trial<'_>, order: &[&Victim]| {
            if let Some(chosen) = trial.greedy_then_prune(job, order, spare.clone(), right) {
                if by_alloc.is_empty() {
                    by_alloc = eligible.iter().map(|v| (v.alloc, *v)).collect();
                    by_alloc.sort_unstable_by_key(|&(a, _)| a);
                }
                let cost = plan_cost(&chosen, &by_alloc, spare, right.queue);
                if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                    best = Some((cost, chosen));
                }
            }
        };
        consider(&mut trial, &eligible);
        // The cheapest single victim that alone makes room (greedy sets can miss it when
        // cheaper ones add up to enough).
        for v in eligible.iter().take(PREEMPT_SINGLES_MAX) {
            let fits = trial.fits_without(job, &[v.alloc]);
            if fits {
                consider(&mut trial, &[*v]);
                break;
            }
        }
        for on_node in self.cheapest_nodes(&eligible) {
            if on_node.len() < eligible.len() {
                consider(&mut trial, &on_node);
            }
        }
        best.map(|(_, chosen)| chosen)
    }

    /// The eligible victims on each node hosting some, in `eligible`'s order, for the
    /// [`PREEMPT_NODES_MAX`] nodes whose victims cost least in total, cheapest first. (Grouped
    /// in one pass: filtering all eligible victims again per node was an eighth of a 10,000-node
    /// cycle.)
    fn cheapest_nodes<'v>(&self, eligible: &[&'v Victim]) -> Vec<Vec<&'v Victim>> {
        let mut by_node: BTreeMap<crate::state::NodeIdx, (u64, Vec<&'v Victim>)> = BTreeMap::new();
        for &v in eligible {
            let nodes: BTreeSet<_> = self.allocations[&v.alloc].tasks.iter().map(|t| t.node).collect();
            for n in nodes {
                let (cost, on_node) = by_node.entry(n).or_default();
                *cost = cost.saturating_add(v.price());
                on_node.push(v);
            }
        }
        let mut nodes: Vec<(u64, crate::state::NodeIdx, Vec<&Victim>)> =
            by_node.into_iter().map(|(n, (c, on_node))| (c, n, on_node)).collect();
        nodes.sort_unstable_by_key(|&(c, n, _)| (c, n));
        nodes.into_iter().take(PREEMPT_NODES_MAX).map(|(_, _, on_node)| on_node).collect()
    }
}

/// One planning copy of a plan's `base` that every check of the plan runs on: victims are
/// released on it and put back, which the ledger undoes exactly, so the copy is `base` again
/// between checks. (A fresh copy per check cost a copy of the whole fleet's state each time —
/// about 100 MB on 100,000 nodes, and most of a preemption plan's time there.) Planning copies
/// do not learn from what they place, so a check's answer depends on the state alone: the same
/// as on a fresh copy.
struct Trial<'e> {
    owner: &'e Engine,
    /// Allocations of `owner` released on the copy (the ledger's counters do not depend on the
    /// order they go and come back in).
    gone: BTreeSet<AllocId>,
    copy: Engine,
    #[cfg(debug_assertions)]
    base: &'e Engine,
}

impl<'e> Trial<'e> {
    fn of(owner: &'e Engine, base: &'e Engine) -> Trial<'e> {
        Trial {
            owner,
            gone: BTreeSet::new(),
            copy: base.planning_copy(),
            #[cfg(debug_assertions)]
            base,
        }
    }

    fn fits(&mut self, job: &CompiledJob) -> bool {
        self.copy.fits_now(job)
    }

    fn release(&mut self, alloc: AllocId) {
        self.owner.release_on(&mut self.copy, alloc);
        assert!(self.gone.insert(alloc), "released once");
    }

    fn put_back(&mut self, alloc: AllocId) {
        assert!(self.gone.remove(&alloc), "put back what was released");
        self.owner.apply_on(&mut self.copy, alloc);
    }

    /// Back to `base`: everything released is put back.
    fn reset(&mut self) {
        while let Some(alloc) = self.gone.pop_first() {
            self.owner.apply_on(&mut self.copy, alloc);
        }
        #[cfg(debug_assertions)]
        assert!(self.copy.state == self.base.state, "putting victims back restores the plan's base");
    }

    /// Does `job` fit on `base` once `gone` are released, in that order? (The copy is `base`
    /// again afterwards.)
    fn fits_without(&mut self, job: &CompiledJob, gone: &[AllocId]) -> bool {
        self.reset();
        for &alloc in gone {
            self.release(alloc);
        }
        let fits = self.fits(job);
        self.reset();
        fits
    }

    /// Add victims of `order` (skipping those `spare` keeps) until `job` fits on `base`, then
    /// give back, most expensive first, every one not needed.
    ///
    /// Both steps search instead of checking after every victim: fitting is monotone in what is
    /// freed, so the shortest prefix of the order that fits is found by galloping and bisecting,
    /// and victims are given back in batches that double while a whole batch can go and halve
    /// when one cannot — the sets checking one by one finds, in a number of checks that grows
    /// with the log of the victims tried rather than with them. (One by one, a 64-GPU gang on a
    /// full 10,000-node fleet tried some 6,000 scattered victims before a rack had room, and
    /// gave each back in turn: 12,000 placements per plan.)
    fn greedy_then_prune(
        &mut self,
        job: &CompiledJob,
        order: &[&Victim],
        mut spare: Spare,
        right: &Right,
    ) -> Option<Vec<AllocId>> {
        self.reset();
        // What one-by-one adding would release, in order, if the job never fit (`spare`
        // changes with what is taken, not with whether the job fits), drawn as far as the
        // search goes.
        let mut rest = order
            .iter()
            .filter(|v| {
                let allowed = spare.allows(v, right);
                if allowed {
                    spare.take(v);
                }
                allowed
            })
            .map(|v| v.alloc);
        let mut admitted = Vec::new();
        let Some(k) = self.shortest_fitting_prefix(job, &mut admitted, &mut rest) else {
            self.reset();
            return None;
        };
        let greedy = admitted[..k].to_vec();
        let chosen = self.prune(job, &greedy);
        // Checked again from `base` with exactly these gone, in this order, as the stops will
        // leave it (a state reached by putting victims back once differed in how the search
        // found room, while checks taught the copy's fragmentation model).
        [chosen, greedy].into_iter().find(|set| self.fits_without(job, set))
    }

    /// Release or put back victims so that exactly `admitted[..to]` are released, given that
    /// `admitted[..from]` are now.
    fn move_prefix(&mut self, admitted: &[AllocId], from: usize, to: usize) {
        if to > from {
            admitted[from..to].iter().for_each(|&a| self.release(a));
        } else {
            admitted[to..from].iter().for_each(|&a| self.put_back(a));
        }
    }

    /// The fewest victims, taken in order from `admitted` and then `rest` (moved into
    /// `admitted` as the search reaches them), with which `job` fits (it does not fit with
    /// none), the copy left with exactly those released; `None` if not even all of them do.
    fn shortest_fitting_prefix(
        &mut self,
        job: &CompiledJob,
        admitted: &mut Vec<AllocId>,
        rest: &mut impl Iterator<Item = AllocId>,
    ) -> Option<usize> {
        let (mut lo, mut at, mut step): (usize, usize, usize) = (0, 0, 1);
        // Gallop: `lo` does not fit; try `lo + step`, doubling the step.
        let mut hi = loop {
            admitted.extend(rest.by_ref().take((lo + step).saturating_sub(admitted.len())));
            let next = (lo + step).min(admitted.len());
            if next == lo {
                return None;
            }
            self.move_prefix(admitted, at, next);
            at = next;
            if self.fits(job) {
                break next;
            }
            (lo, step) = (next, step * 2);
        };
        // Bisect: `lo` does not fit, `hi` does.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            self.move_prefix(admitted, at, mid);
            at = mid;
            if self.fits(job) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        self.move_prefix(admitted, at, hi);
        Some(hi)
    }

    /// Give back, last first, every victim of `chosen` (all released now) that `job` fits
    /// without, the ones given back before it staying back; the ones needed, in `chosen`'s
    /// order. Batches of the next victims go back together, doubling while the job still fits
    /// and halving when it does not; a victim alone that it does not fit without is needed.
    fn prune(&mut self, job: &CompiledJob, chosen: &[AllocId]) -> Vec<AllocId> {
        let mut needed = Vec::new();
        let (mut end, mut batch) = (chosen.len(), 1);
        while end > 0 {
            let b = batch.min(end);
            let group = &chosen[end - b..end];
            group.iter().rev().for_each(|&a| self.put_back(a));
            if self.fits(job) {
                end -= b;
                batch = b * 2;
                continue;
            }
            group.iter().for_each(|&a| self.release(a));
            if b == 1 {
                needed.push(chosen[end - 1]);
                end -= 1;
            } else {
                batch = b / 2;
            }
        }
        needed.reverse();
        needed
    }
}

/// What stopping `chosen` costs; `by_alloc` holds the eligible victims sorted by allocation,
/// `spare` what each queue may lose before the plan.
fn plan_cost(chosen: &[AllocId], by_alloc: &[(AllocId, &Victim)], spare: &Spare, preemptor: usize) -> PlanCost {
    let of = |a: &AllocId| {
        let i = by_alloc.binary_search_by_key(a, |&(alloc, _)| alloc).expect("chosen among the eligible victims");
        by_alloc[i].1
    };
    let below = spare.overshoot_all(chosen.iter().map(of), preemptor);
    let lost = chosen.iter().map(|a| of(a).price()).fold(0u64, u64::saturating_add);
    let repeated = chosen.iter().filter(|a| of(a).last_resort()).count();
    let priority = chosen.iter().map(|a| of(a).priority).max().unwrap_or(i32::MIN);
    let mut allocs = chosen.to_vec();
    allocs.sort_unstable();
    (repeated, below, lost, chosen.len(), priority, allocs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fleet::{a100_engine, whole_gpu_job as job};

    fn engine() -> Engine {
        a100_engine(6)
    }

    /// What the planner did before it searched: release victims one by one, checking after
    /// each, until the job fits; then give them back one by one, last first, keeping each the
    /// job does not fit without.
    /// Returns how many were released, and which were kept.
    fn one_by_one(trial: &mut Trial<'_>, job: &CompiledJob, admitted: &[AllocId]) -> Option<(usize, Vec<AllocId>)> {
        trial.reset();
        let mut chosen = Vec::new();
        for &alloc in admitted {
            trial.release(alloc);
            chosen.push(alloc);
            if trial.fits(job) {
                let released = chosen.len();
                for i in (0..chosen.len()).rev() {
                    trial.put_back(chosen[i]);
                    if trial.fits(job) {
                        chosen.remove(i);
                    } else {
                        trial.release(chosen[i]);
                    }
                }
                trial.reset();
                return Some((released, chosen));
            }
        }
        trial.reset();
        None
    }

    /// Hold the search to one-by-one checking for `wanted` on `live`, its allocations taken in
    /// an order `rng` shuffles; whether `wanted` needed victims.
    fn search_matches_one_by_one(
        live: &Engine,
        wanted: &CompiledJob,
        rng: &mut crate::rng::SeededRng,
        seed: u64,
    ) -> bool {
        let mut order: Vec<AllocId> = live.allocations.keys().copied().collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let base = live.planning_copy();
        let mut trial = Trial::of(live, &base);
        if trial.fits(wanted) {
            return false;
        }
        let reference = one_by_one(&mut trial, wanted, &order);
        let searched = trial.shortest_fitting_prefix(wanted, &mut Vec::new(), &mut order.iter().copied()).map(|k| {
            let greedy = order[..k].to_vec();
            (k, trial.prune(wanted, &greedy))
        });
        trial.reset();
        assert_eq!(searched, reference, "seed {seed}");
        reference.is_some()
    }

    #[test]
    fn searching_for_victims_finds_the_sets_checking_one_by_one_finds_on_random_fleets() {
        let mut planned = 0;
        for seed in 0..300u64 {
            let mut rng = crate::rng::SeededRng::new(seed);
            let mut live = engine();
            let shapes: Vec<CompiledJob> = (1..=4).map(|g| job(&live, g, 1)).collect();
            for _ in 0..40 {
                let _ = live.place(&shapes[rng.below(4) as usize]);
            }
            let wanted = job(&live, 1 + rng.below(4) as u32, 1 + rng.below(4) as u32);
            planned += usize::from(search_matches_one_by_one(&live, &wanted, &mut rng, seed));
        }
        assert!(planned > 100, "{planned} plans: most fleets must need victims");
    }

    /// The same on the demo fleet's mix — whole GPUs, MIG slices, time-sliced and MPS GPUs —
    /// with requests of every kind, CPU-heavy ones among them: fitting there depends on more
    /// than whole GPUs, where the search's premise (fitting is monotone in what is freed)
    /// could fail.
    #[test]
    fn searching_for_victims_matches_one_by_one_on_a_mixed_fleet_with_every_kind_of_request() {
        let fleet = include_str!("../../../examples/demo-fleet.toml");
        let fleet = gantry_spec::parse_fleet(fleet, gantry_catalog::Catalog::embedded()).expect("fleet");
        let requests = [
            "gpu = { count = 1 }",
            "gpu = { count = 2 }\ncpu = 100",
            "gpu = { count = 4 }",
            "gpu = { mig = \"1g.10gb\" }",
            "gpu = { mig = \"3g.40gb\" }",
            "gpu = { share = 125, memory = \"8GiB\", mode = \"time-slice\" }",
            "gpu = { share = 250, memory = \"5GiB\", mode = \"mps\" }\ncpu = 20",
            "gpu = { memory = \"18GiB\" }",
        ];
        let mut planned = 0;
        for seed in 0..300u64 {
            let mut rng = crate::rng::SeededRng::new(seed);
            let mut live =
                Engine::new(&fleet, gantry_catalog::Catalog::embedded(), Default::default()).expect("engine");
            let compile = |live: &Engine, i: usize, replicas: u64| {
                let text = format!("[[job]]\nname = \"j\"\nreplicas = {replicas}\n{}\n", requests[i]);
                let spec =
                    gantry_spec::parse_workload(&text, gantry_catalog::Catalog::embedded()).expect("job").remove(0);
                live.compile(&spec).expect("compiles")
            };
            for _ in 0..60 {
                let j = compile(&live, rng.below(requests.len() as u64) as usize, 1);
                let _ = live.place(&j);
            }
            let wanted = compile(&live, rng.below(requests.len() as u64) as usize, 1 + rng.below(3));
            planned += usize::from(search_matches_one_by_one(&live, &wanted, &mut rng, seed));
        }
        assert!(planned > 100, "{planned} plans: most fleets must need victims");
    }
}
