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

use crate::{AllocId, CompiledJob, Engine};

/// A running allocation and when it will have ended at the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub alloc: AllocId,
    pub end_s: Option<u64>,
}

impl Engine {
    /// A copy to plan on: same state, policy and decision counter; no allocations (releases
    /// on it go through [`Engine::release_on`] with this engine's records) and no verdict memo
    /// (large; planning copies are short-lived).
    pub(crate) fn planning_copy(&self) -> Engine {
        Engine {
            catalog: self.catalog,
            state: self.state.clone(),
            config: self.config.clone(),
            frag: self.frag.clone(),
            rack_nodes: self.rack_nodes.clone(),
            frag_cache: self.frag_cache.clone(),
            verdicts: None,
            allocations: Default::default(),
            next_alloc: self.next_alloc,
            decisions: self.decisions,
            stats: self.stats,
        }
    }

    /// Undo this engine's allocation `id` on a planning copy's state.
    pub(crate) fn release_on(&self, copy: &mut Engine, id: AllocId) {
        for task in self.allocations[&id].tasks.iter().rev() {
            crate::ledger::revert(&mut copy.state, task);
        }
    }

    /// Would `job` fit once the first `k` of `ends` (sorted by end) have ended?
    fn fits_after(&self, job: &CompiledJob, ends: &[(u64, AllocId)], k: usize) -> bool {
        let mut copy = self.planning_copy();
        for &(_, alloc) in &ends[..k] {
            self.release_on(&mut copy, alloc);
        }
        copy.place(job).is_ok()
    }

    /// The earliest time `job` could start if nothing else started: `now` if it fits now (or
    /// once the jobs ending at `now` are gone), else the end of the running job whose end makes
    /// it fit, `None` if it would not fit even with everything that ends released.
    pub fn earliest_start(&self, job: &CompiledJob, running: &[Running], now: u64) -> Option<u64> {
        let mut ends: Vec<(u64, AllocId)> =
            running.iter().filter_map(|r| r.end_s.map(|e| (e.max(now), r.alloc))).collect();
        ends.sort_unstable();
        if self.fits_after(job, &ends, 0) {
            return Some(now);
        }
        if !self.fits_after(job, &ends, ends.len()) {
            return None;
        }
        // Smallest k that fits (fits(0) is false, fits(len) true); then everything ending at
        // the same second as the k-th is released too, which keeps it fitting.
        let (mut lo, mut hi) = (0usize, ends.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.fits_after(job, &ends, mid) { hi = mid } else { lo = mid }
        }
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

/// The fleet at a reservation's start, as far as planning knows: what still runs then,
/// plus backfilled jobs that will still be running.
#[derive(Debug)]
pub struct Shadow {
    engine: Engine,
}

impl Shadow {
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
