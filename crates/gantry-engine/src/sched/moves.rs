//! Changing the fleet under running work: cordoning single GPUs and moving running
//! allocations that may restart elsewhere (inference replicas) so that a GPU can be emptied
//! and reconfigured. The MIG planner's replay drives these; issue 21's live reconfiguration
//! will drive the same calls.

use super::{SchedError, Scheduler};
use crate::{AllocId, EngineError};

impl Scheduler {
    /// Cordon (or uncordon) one GPU: nothing new is placed on it, what runs there keeps
    /// running (see [`crate::Engine::set_gpu_cordoned`]). Returns whether anything changed.
    pub fn set_gpu_cordoned(&mut self, node: &str, index: u32, on: bool) -> Result<bool, SchedError> {
        let changed = self.engine.set_gpu_cordoned(node, index, on)?;
        if changed {
            self.last_reservation = None;
        }
        Ok(changed)
    }

    /// Move running allocations elsewhere, all or none: all are released first, then each
    /// goes where the engine would place its job now, in the order given — never on a
    /// cordoned GPU, so cordon the GPUs being emptied first (else one may land where another
    /// was). A moved job keeps its
    /// start and planned end; what it holds is counted again for its new place (fair share,
    /// quotas, per-user limits), at `now`. Returns the new allocation of each, in order, or
    /// `None` when one of them fits nowhere (then nothing changed). An allocation that is not
    /// running, or is in its grace period after a stop, is an error.
    pub fn relocate(&mut self, allocs: &[AllocId], now: u64) -> Result<Option<Vec<AllocId>>, SchedError> {
        for &alloc in allocs {
            if !self.running.contains_key(&alloc) {
                return Err(SchedError::Engine(EngineError::UnknownAllocation(alloc)));
            }
            if self.terminating.contains_key(&alloc) {
                return Err(SchedError::Stopping(alloc));
            }
        }
        let mut engine = self.engine.clone();
        for &alloc in allocs {
            engine.release(alloc)?;
        }
        let mut placed = Vec::with_capacity(allocs.len());
        for alloc in allocs {
            let job = &self.jobs[&self.running[alloc].job].job.compiled;
            match engine.place(job) {
                Ok(new) => placed.push(new),
                Err(_) => return Ok(None),
            }
        }
        self.engine = engine;
        for (old, &new) in allocs.iter().zip(&placed) {
            self.rekey(*old, new, now);
        }
        self.last_reservation = None;
        Ok(Some(placed))
    }

    /// Carry a running job's record from allocation `old` to `new` (already placed), its
    /// accounting moved from what it held to what it holds now.
    fn rekey(&mut self, old: AllocId, new: AllocId, now: u64) {
        let mut run = self.running.remove(&old).expect("checked running");
        let entry = &self.jobs[&run.job];
        let held = self.engine.held(new, &self.billing).expect("just placed");
        let demand = self.engine.quota_demand(new).unwrap_or_default();
        let milli: u64 =
            self.engine.allocations()[&new].tasks.iter().map(|t| t.milli(self.engine.state()) as u64).sum();
        if let Some(fs) = self.fair.as_mut() {
            fs.stop(entry.queue, run.held, now);
            fs.start(entry.queue, held, now);
        }
        if let Some(book) = self.quotas.as_mut() {
            book.refund(entry.queue, &run.demand);
            book.charge(entry.queue, &demand);
        }
        if let Some(user) = &entry.job.control.user {
            let used = self.user_running.get_mut(user).expect("counted at start");
            used.1 = used.1 - run.milli + milli;
        }
        run.held = held;
        run.demand = demand;
        run.milli = milli;
        self.running.insert(new, run);
    }
}
