//! Backfill with reservations: when will a blocked job be able to start, and would starting
//! another job now push that start back?
//!
//! Both questions are answered by re-running placement on a hypothetical copy of the engine
//! (gangs and topology included, the same policy), never by counting free GPUs: a job that
//! fits by the numbers may not fit by the topology. A candidate is checked on a *shadow*, the
//! fleet at the reserved time, with the exact GPUs the live engine gave the candidate. Running
//! jobs end at their time limit (`end_s`); a job without one never ends as far as planning
//! knows. Earliest start searches the number of running jobs released in end order (fitting
//! only gets easier as more is released, so the search is a bisection).
//!
//! Several blocked jobs are reserved in order ([`Engine::reserve_next`]): each one's start is
//! planned on the fleet as it will be then — running jobs that ended released, earlier
//! reservations that still run applied on the GPUs the plan gave them — and no earlier than
//! the reservation before it. That ordering keeps the plan consistent (every reservation was
//! planned around everything that overlaps it) and makes fitting monotone in time again, so
//! each start is still a bisection. Whether a candidate delays any of them is answered by
//! planning them again with the candidate running ([`Engine::replan`]).

use crate::state::ClusterState;
use crate::{AllocId, CompiledJob, Engine};
use std::sync::{Arc, Mutex};

/// A running allocation and when it will have ended at the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub alloc: AllocId,
    pub end_s: Option<u64>,
}

/// A planning copy's reusable parts: its state and its fragmentation cache.
type SpareState = (ClusterState, Vec<(u32, u64)>);

/// States of dropped planning copies, for the next copies to reuse: shared by an engine and
/// its copies (not per thread: a scheduler moved between a runtime's threads would keep
/// spares on every one of them), at most [`crate::limits::SPARE_STATES_MAX`].
#[derive(Clone, Default)]
pub(crate) struct SparePool(Arc<Mutex<Vec<SpareState>>>);

impl std::fmt::Debug for SparePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SparePool({} kept)", self.lock().len())
    }
}

impl SparePool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SpareState>> {
        // A panic while holding it leaves only spares behind: still usable.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn take(&self) -> Option<SpareState> {
        self.lock().pop()
    }

    /// Keep a dropped planning copy's state and fragmentation cache for the next copy.
    pub(crate) fn give_back(&self, state: &mut ClusterState, frag_cache: &mut Vec<(u32, u64)>) {
        let mut spares = self.lock();
        if spares.len() < crate::limits::SPARE_STATES_MAX {
            spares.push((std::mem::replace(state, ClusterState::empty()), std::mem::take(frag_cache)));
        }
    }
}

impl Engine {
    /// A copy to plan on: same state, policy and decision counter; no allocations (releases
    /// on it go through [`Engine::release_on`] with this engine's records) and no verdict memo
    /// (large; planning copies are short-lived). A cycle makes many: each starts from a spare
    /// state a dropped copy gave back, so its vectors are reused rather than allocated and
    /// freed (on 10,000 nodes that churn left the allocator holding five times the heap).
    pub(crate) fn planning_copy(&self) -> Engine {
        let (state, frag_cache) = match self.spares.take() {
            Some((mut state, mut cache)) => {
                state.clone_from(&self.state);
                cache.clone_from(&self.frag_cache);
                (state, cache)
            }
            None => (self.state.clone(), self.frag_cache.clone()),
        };
        Engine {
            catalog: self.catalog,
            state,
            config: self.config.clone(),
            frag: self.frag.clone(),
            rack_nodes: self.rack_nodes.clone(),
            frag_cache,
            verdicts: None,
            allocations: Default::default(),
            next_alloc: self.next_alloc,
            decisions: self.decisions,
            stats: self.stats,
            spares: self.spares.clone(),
            planning: true,
        }
    }

    /// Undo this engine's allocation `id` on a planning copy's state.
    pub(crate) fn release_on(&self, copy: &mut Engine, id: AllocId) {
        for task in self.allocations[&id].tasks.iter().rev() {
            crate::ledger::revert(&mut copy.state, task);
        }
    }

    /// Would `job` fit on `copy` (a planning copy)? A refusal leaves the copy's state as it
    /// was (a refused placement rolls back) and its decision counter is wound back, so a copy
    /// made of it later draws the same tie-breaks as a fresh copy of this engine would.
    fn fits_on(copy: &mut Engine, job: &CompiledJob) -> bool {
        let decisions = copy.decisions;
        let fits = copy.place(job).is_ok();
        copy.decisions = decisions;
        fits
    }

    /// The earliest time `job` could start if nothing else started: `now` if it fits now (or
    /// once the jobs ending at `now` are gone), else the end of the running job whose end makes
    /// it fit, `None` if it would not fit even with everything that ends released.
    ///
    /// A galloping search over the running jobs in order of end: release the first 1, 2, 4,
    /// … until the job fits, then bisect the last step. Each probe copies the fleet as the
    /// last refused probe left it and releases only the jobs ending between, so finding the
    /// k-th end costs about 2k releases and 2 log k placements, however many jobs run (the
    /// way-back estimates run this for several shapes every cycle a preemptor plans, where
    /// the answer is most often one of the first few ends among thousands).
    pub fn earliest_start(&self, job: &CompiledJob, running: &[Running], now: u64) -> Option<u64> {
        let mut ends: Vec<(u64, AllocId)> =
            running.iter().filter_map(|r| r.end_s.map(|e| (e.max(now), r.alloc))).collect();
        ends.sort_unstable();
        // The fleet with the first `lo` of `ends` released, where `job` does not fit.
        let mut refused = self.planning_copy();
        if Self::fits_on(&mut refused, job) {
            return Some(now);
        }
        let released = |from: &Engine, range: &[(u64, AllocId)]| {
            let mut copy = from.planning_copy();
            for &(_, alloc) in range {
                self.release_on(&mut copy, alloc);
            }
            copy
        };
        // Smallest k that fits: gallop until some k does (k = 0 does not), then bisect.
        let (mut lo, mut hi, mut step) = (0usize, 0usize, 1usize);
        while lo < ends.len() {
            hi = (lo + step).min(ends.len());
            let mut probe = released(&refused, &ends[lo..hi]);
            if Self::fits_on(&mut probe, job) {
                break;
            }
            (lo, refused, step) = (hi, probe, step * 2);
        }
        if lo == ends.len() {
            return None;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let mut probe = released(&refused, &ends[lo..mid]);
            if Self::fits_on(&mut probe, job) {
                hi = mid;
            } else {
                (lo, refused) = (mid, probe);
            }
        }
        // Everything ending at the same second as the k-th is released too, which keeps it
        // fitting.
        Some(ends[hi - 1].0)
    }

    /// The fleet as it will be at `at` if nothing new starts: a copy with every running job
    /// that ends by then released. Used to check backfill candidates against a reservation at
    /// `at` (see [`Shadow`]).
    pub fn shadow_at(&self, running: &[Running], at: u64) -> Shadow {
        let mut engine = self.planning_copy();
        for r in running {
            if r.end_s.is_some_and(|end| end <= at) {
                self.release_on(&mut engine, r.alloc);
            }
        }
        Shadow { engine }
    }
}

/// What frees capacity at a time the reservation search looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ended {
    Running(AllocId),
    /// An earlier reservation, by its place in `earlier`.
    Reserved(usize),
}

/// A planned reservation: when the job starts, until when it holds its GPUs (`None`: no time
/// limit, as far as planning knows it never ends), and what the plan gave it.
#[derive(Clone, Debug)]
pub struct Reservation {
    pub start_s: u64,
    pub end_s: Option<u64>,
    pub(crate) tasks: Vec<crate::ledger::TaskGrant>,
}

impl Engine {
    /// The fleet at `t` as planned: running jobs that end by `t` released, `earlier`
    /// reservations still running at `t` applied.
    fn planned_at(&self, running: &[Running], earlier: &[Reservation], t: u64) -> Engine {
        let mut copy = self.shadow_at(running, t).engine;
        for r in earlier {
            if r.start_s <= t && r.end_s.is_none_or(|e| e > t) {
                for task in &r.tasks {
                    crate::ledger::apply(&mut copy.state, task);
                }
            }
        }
        copy
    }

    /// Reserve `job` (holding its GPUs for `limit_s` once started, `None` = no limit) after
    /// the `earlier` reservations: the first time, no earlier than `now` or the last earlier
    /// start, at which it fits the planned fleet. `None` if it would never fit.
    pub fn reserve_next(
        &self,
        job: &CompiledJob,
        limit_s: Option<u64>,
        running: &[Running],
        earlier: &[Reservation],
        now: u64,
    ) -> Option<Reservation> {
        let from = earlier.iter().map(|r| r.start_s).max().unwrap_or(now).max(now);
        // What ends after `from`, in time order: running jobs, and earlier reservations (all
        // started by `from`, so applied at `from` until they end). The times to try are `from`
        // and each of those ends.
        let mut ends: Vec<(u64, Ended)> = running
            .iter()
            .filter_map(|r| r.end_s.filter(|&e| e > from).map(|e| (e, Ended::Running(r.alloc))))
            .chain(
                earlier
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.end_s.filter(|&e| e > from).map(|e| (e, Ended::Reserved(i)))),
            )
            .collect();
        ends.sort_unstable();
        let mut times: Vec<u64> = std::iter::once(from).chain(ends.iter().map(|&(e, _)| e)).collect();
        times.dedup();
        let attempt = |t: u64| -> Option<Vec<crate::ledger::TaskGrant>> {
            let mut copy = self.planned_at(running, earlier, t);
            let id = copy.place(job).ok()?;
            Some(copy.allocations.remove(&id).expect("just placed").tasks)
        };
        let (hi, tasks) = self.first_fit_in_time(job, running, earlier, &ends, &times)?;
        // The search walks one copy forward instead of planning each probe from scratch: the
        // same first time and the same grants (checked in debug builds, every test and replay).
        debug_assert!(hi == 0 || attempt(times[hi - 1]).is_none(), "{} fits before {}", job.name, times[hi]);
        debug_assert_eq!(attempt(times[hi]).as_ref(), Some(&tasks), "{} at {}", job.name, times[hi]);
        Some(Reservation { start_s: times[hi], end_s: limit_s.map(|d| times[hi] + d), tasks })
    }

    /// The first of `times` (`from`, then every time in `ends`, which are sorted) at which
    /// `job` fits the fleet as planned then, and its grants; `None` if it never does. Fitting
    /// only gets easier with time from `from` on (things end, nothing starts), so the search
    /// gallops forward on one copy — releasing only what ends between two probes — and then
    /// bisects the last step, each probe a copy of the step's start. Each probe from scratch
    /// cost a copy of the fleet and a release of everything ended by then; this costs about
    /// three releases per end before the answer, and a copy per bisection step.
    fn first_fit_in_time(
        &self,
        job: &CompiledJob,
        running: &[Running],
        earlier: &[Reservation],
        ends: &[(u64, Ended)],
        times: &[u64],
    ) -> Option<(usize, Vec<crate::ledger::TaskGrant>)> {
        let from = times[0];
        let advance = |copy: &mut Engine, after: u64, until: u64| {
            let first = ends.partition_point(|(e, _)| *e <= after);
            for (_, ended) in ends[first..].iter().take_while(|(e, _)| *e <= until) {
                match *ended {
                    Ended::Running(alloc) => self.release_on(copy, alloc),
                    Ended::Reserved(i) => {
                        for task in earlier[i].tasks.iter().rev() {
                            crate::ledger::revert(&mut copy.state, task);
                        }
                    }
                }
            }
        };
        let base = self.planned_at(running, earlier, from);
        let mut walker = base.planning_copy();
        if let Some(tasks) = self.probe(&mut walker, job) {
            return Some((0, tasks));
        }
        let last = times.len() - 1;
        let (mut lo, mut step) = (0usize, 1usize);
        let (mut hi, mut tasks) = loop {
            let hi = (lo + step).min(last);
            advance(&mut walker, times[lo], times[hi]);
            if let Some(tasks) = self.probe(&mut walker, job) {
                break (hi, tasks);
            }
            if hi == last {
                return None;
            }
            (lo, step) = (hi, step * 2);
        };
        drop(walker);
        let mut at_lo = base;
        advance(&mut at_lo, times[0], times[lo]);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let mut copy = at_lo.planning_copy();
            advance(&mut copy, times[lo], times[mid]);
            match self.probe(&mut copy, job) {
                Some(found) => (hi, tasks) = (mid, found),
                None => (lo, at_lo) = (mid, copy),
            }
        }
        Some((hi, tasks))
    }

    /// Place `job` on planning copy `copy` as a fresh copy of this engine would: the same
    /// decision counter (placement's tie-breaks depend on it; a planning copy's fragmentation
    /// model is this engine's, since planning copies do not learn). The grants if it fits (the
    /// copy then holds them); else the copy is unchanged.
    fn probe(&self, copy: &mut Engine, job: &CompiledJob) -> Option<Vec<crate::ledger::TaskGrant>> {
        copy.decisions = self.decisions;
        debug_assert!(copy.frag == self.frag, "a planning copy searches with its engine's model");
        let id = copy.place(job).ok()?;
        Some(copy.allocations.remove(&id).expect("just placed").tasks)
    }

    /// Does allocation `alloc` hold anything on a node `r` plans on? The ledger's effects are
    /// per node, so an allocation elsewhere cannot change whether `r` holds: checking that
    /// costs a look at two task lists instead of a copy of the fleet.
    pub fn shares_nodes(&self, alloc: AllocId, r: &Reservation) -> bool {
        let Some(a) = self.allocations.get(&alloc) else { return true };
        a.tasks.iter().any(|t| r.tasks.iter().any(|p| p.node == t.node))
    }

    /// Does reservation `r`, planned in an earlier cycle, still hold after the `earlier`
    /// reservations: its exact grants free on the fleet as planned at its start? (Kept, it
    /// cannot push later ones back the way planning it again on other GPUs can.)
    pub fn plan_holds(&self, r: &Reservation, running: &[Running], earlier: &[Reservation]) -> bool {
        let mut copy = self.planned_at(running, earlier, r.start_s);
        crate::ledger::try_apply_all(&mut copy.state, &r.tasks)
    }

    /// Plan `jobs` (with their limits) in order from scratch: each reservation, or `None` for
    /// a job that would never fit (it does not hold up the ones after it).
    pub fn replan(
        &self,
        jobs: &[(&CompiledJob, Option<u64>)],
        running: &[Running],
        now: u64,
    ) -> Vec<Option<Reservation>> {
        let mut planned: Vec<Reservation> = Vec::new();
        jobs.iter()
            .map(|&(job, limit)| {
                let r = self.reserve_next(job, limit, running, &planned, now);
                if let Some(r) = &r {
                    planned.push(r.clone());
                }
                r
            })
            .collect()
    }
}

/// The fleet at a reservation's start, as far as planning knows: what still runs then,
/// plus backfilled jobs that will still be running.
#[derive(Debug)]
pub struct Shadow {
    engine: Engine,
}

impl Shadow {
    /// Do all of `jobs` fit here together (nothing kept)?
    pub fn fits_all(&mut self, jobs: &[&CompiledJob]) -> bool {
        let mut placed = Vec::new();
        let mut all = true;
        for job in jobs {
            match self.engine.place(job) {
                Ok(id) => placed.push(id),
                Err(_) => {
                    all = false;
                    break;
                }
            }
        }
        for id in placed.into_iter().rev() {
            self.engine.release(id).expect("just placed");
        }
        all
    }

    /// Take exactly these grants here if they are all free (kept), else change nothing.
    pub fn take_exact(&mut self, tasks: &[crate::ledger::TaskGrant]) -> bool {
        crate::ledger::try_apply_all(&mut self.engine.state, tasks)
    }

    /// Does `job` fit here (nothing kept)?
    pub fn fits(&mut self, job: &CompiledJob) -> bool {
        match self.engine.place(job) {
            Ok(id) => {
                self.engine.release(id).expect("just placed");
                true
            }
            Err(_) => false,
        }
    }

    /// Would `reserved` fit here if `live`'s allocation `candidate` (just placed, running past
    /// the reservation) also held its GPUs? If it would, the candidate stays in the shadow (so
    /// later candidates are checked with it) and the answer is `false` (no delay); if not,
    /// the shadow is left as it was and the answer is `true`.
    pub fn delays(&mut self, live: &Engine, candidate: AllocId, reserved: &CompiledJob) -> bool {
        let tasks = live.allocations[&candidate].tasks.clone();
        for task in &tasks {
            crate::ledger::apply(&mut self.engine.state, task);
        }
        let fits = match self.engine.place(reserved) {
            Ok(id) => {
                self.engine.release(id).expect("just placed");
                true
            }
            Err(_) => false,
        };
        if !fits {
            for task in tasks.iter().rev() {
                crate::ledger::revert(&mut self.engine.state, task);
            }
        }
        !fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        crate::test_fleet::a100_engine(4)
    }

    fn job(engine: &Engine, gpus: u32) -> CompiledJob {
        crate::test_fleet::whole_gpu_job(engine, gpus, 1)
    }

    /// The first fit by planning every time from scratch, the way the search did before it
    /// walked one copy forward: the reference the forward search must agree with.
    fn first_fit_from_scratch(
        live: &Engine,
        job: &CompiledJob,
        running: &[Running],
        earlier: &[Reservation],
        now: u64,
    ) -> Option<(u64, Vec<crate::ledger::TaskGrant>)> {
        let from = earlier.iter().map(|r| r.start_s).max().unwrap_or(now).max(now);
        let mut times: Vec<u64> = running
            .iter()
            .filter_map(|r| r.end_s)
            .chain(earlier.iter().filter_map(|r| r.end_s))
            .filter(|&e| e > from)
            .chain([from])
            .collect();
        times.sort_unstable();
        times.dedup();
        times.into_iter().find_map(|t| {
            let mut copy = live.planned_at(running, earlier, t);
            let id = copy.place(job).ok()?;
            Some((t, copy.allocations.remove(&id).expect("just placed").tasks))
        })
    }

    /// The test fleet with fewer than `most` jobs of 1–4 GPUs placed, each ending between 100
    /// and 170 s or never (no time limit); ties between ends are common.
    fn random_fleet(rng: &mut crate::rng::SeededRng, most: u64) -> (Engine, Vec<Running>) {
        let mut live = engine();
        let jobs: Vec<CompiledJob> = (1..=4).map(|g| job(&live, g)).collect();
        let mut running = Vec::new();
        for _ in 0..rng.below(most) {
            let Ok(alloc) = live.place(&jobs[rng.below(4) as usize]) else { continue };
            let end_s = (rng.below(4) > 0).then(|| 100 + 10 * rng.below(8));
            running.push(Running { alloc, end_s });
        }
        (live, running)
    }

    /// The earliest start by releasing the running jobs one more at a time, in end order,
    /// on a fresh copy each time: the oracle for the galloping search.
    fn earliest_by_scan(live: &Engine, job: &CompiledJob, running: &[Running], now: u64) -> Option<u64> {
        let mut ends: Vec<(u64, AllocId)> =
            running.iter().filter_map(|r| r.end_s.map(|e| (e.max(now), r.alloc))).collect();
        ends.sort_unstable();
        let fits = |k: usize| {
            let mut copy = live.planning_copy();
            ends[..k].iter().for_each(|&(_, alloc)| live.release_on(&mut copy, alloc));
            copy.place(job).is_ok()
        };
        (0..=ends.len()).find(|&k| fits(k)).map(|k| if k == 0 { now } else { ends[k - 1].0 })
    }

    #[test]
    fn the_earliest_start_is_the_first_end_after_which_the_job_fits_on_random_fleets() {
        for seed in 0..150u64 {
            let mut rng = crate::rng::SeededRng::new(seed);
            let (live, running) = random_fleet(&mut rng, 24);
            for gpus in [1, 2, 4, 8, 16] {
                let wanted = job(&live, gpus);
                let decisions = live.decisions;
                let found = live.earliest_start(&wanted, &running, 100);
                assert_eq!(live.decisions, decisions, "a search decides nothing on the live engine");
                assert_eq!(found, earliest_by_scan(&live, &wanted, &running, 100), "seed {seed}, {gpus} GPUs");
            }
        }
    }

    #[test]
    fn reservations_found_walking_forward_are_those_planned_from_scratch_on_random_fleets() {
        for seed in 0..150u64 {
            let mut rng = crate::rng::SeededRng::new(seed);
            let (live, running) = random_fleet(&mut rng, 12);
            let mut earlier: Vec<Reservation> = Vec::new();
            for k in 0..3 {
                let gpus = 1 + rng.below(16) as u32;
                let wanted = job(&live, gpus);
                let limit = (rng.below(3) > 0).then(|| 5 + 10 * rng.below(6));
                let found = live.reserve_next(&wanted, limit, &running, &earlier, 100);
                let reference = first_fit_from_scratch(&live, &wanted, &running, &earlier, 100);
                assert_eq!(
                    found.as_ref().map(|r| (r.start_s, r.tasks.clone())),
                    reference,
                    "seed {seed}, reservation {k} of {gpus} GPUs"
                );
                earlier.extend(found);
            }
        }
    }

    #[test]
    fn a_copy_made_from_a_spare_state_is_the_engine_state_whatever_the_spare_held() {
        let mut live = engine();
        let (one, two) = (job(&live, 1), job(&live, 2));
        live.place(&two).expect("fits");
        // A copy changed a lot, then dropped: its state becomes the spare.
        let mut scratch = live.planning_copy();
        for _ in 0..6 {
            scratch.place(&two).expect("fits on the copy");
        }
        drop(scratch);
        assert_eq!(live.spares.lock().len(), 1);
        live.place(&one).expect("fits");
        let copy = live.planning_copy();
        assert_eq!(copy.state, live.state, "the spare was cloned into, field by field");
        assert_eq!(copy.frag_cache, live.frag_cache);
        assert!(live.spares.lock().is_empty(), "taken");
    }

    #[test]
    fn spares_are_bounded_per_engine_whichever_thread_drops_the_copies() {
        let live = engine();
        let copies: Vec<Engine> = (0..3 * crate::limits::SPARE_STATES_MAX).map(|_| live.planning_copy()).collect();
        std::thread::scope(|s| {
            let mut copies = copies;
            while !copies.is_empty() {
                let batch: Vec<Engine> = copies.drain(..copies.len().min(3)).collect();
                s.spawn(move || drop(batch));
            }
        });
        assert_eq!(live.spares.lock().len(), crate::limits::SPARE_STATES_MAX);
        drop(live.planning_copy());
        assert_eq!(live.spares.lock().len(), crate::limits::SPARE_STATES_MAX, "one taken, one given back");
    }
}
