//! An operator changes the fleet while a time replay runs — the online MIG planner
//! reconfigures GPUs, cordons them and moves restartable work — through the scheduler's own
//! calls, at instants it chooses, so that the replay loop stays the only event loop.

use gantry_engine::AllocId;
use gantry_engine::sched::Scheduler;
use std::collections::{BTreeMap, BTreeSet};

/// What an operator sees and may change at one instant.
pub(crate) struct Moment<'a> {
    pub scheduler: &'a mut Scheduler,
    /// Running allocations: the job (its index in the replay) and its planned end.
    pub running: &'a BTreeMap<AllocId, Run>,
    /// Jobs waiting in a queue (indices in the replay), in index order.
    pub waiting: &'a BTreeSet<usize>,
}

/// Something that changes the fleet as a replay runs.
pub(crate) trait Operator {
    /// The next instant it wants to act at, once it has acted (the first: before any).
    fn next_at(&self) -> Option<u64>;
    /// Act at `now`, after that instant's events and before its scheduling cycle. Returns the
    /// running allocations it moved, as (old, new): they keep running where they went.
    fn act(&mut self, now: u64, moment: Moment<'_>) -> Result<Vec<(AllocId, AllocId)>, crate::SimError>;
    /// The fleet as it was from `from` to `to` (called as the clock moves, before it changes).
    fn observe(&mut self, from: u64, to: u64, scheduler: &Scheduler);
}

/// A running allocation as the replay measures it.
pub(crate) struct Run {
    /// The job (its index in the replay's jobs).
    pub job: usize,
    pub(super) started_at: u64,
    /// When its departure is scheduled.
    pub planned_end: u64,
    /// It is stopped at its time limit (before its work was done): a failure.
    pub(super) hits_limit: bool,
    pub(super) milli: u64,
}
