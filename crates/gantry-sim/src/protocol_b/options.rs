//! How a replay runs: queue order, backfill, preemption, arrival compression.

use gantry_types::QueueTree;

/// Pods tried past a blocked queue head per scheduling pass: bounds the work per event.
pub const BACKFILL_SCAN_MAX: usize = 32;
/// How the waiting queue is ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Order {
    /// One FIFO queue (priority ignored), bounded backfill past a blocked head.
    Fifo,
    /// The engine's fair share over this queue tree: the starvation guard, priority, then the
    /// lowest weighted dominant share down the tree, then age; within a queue, priority then
    /// age, with the same bounded backfill per queue. Every job's queue must be in the tree.
    FairShare(QueueTree),
}

impl Order {
    pub fn name(&self) -> &'static str {
        match self {
            Order::Fifo => "fifo",
            Order::FairShare(_) => "fair-share",
        }
    }
}

/// What may start past a blocked job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backfill {
    /// Nothing: a queue waits behind its blocked head.
    Off,
    /// Up to `BACKFILL_SCAN_MAX` later jobs of the queue, whatever that does to the blocked
    /// one (no reservation: big jobs can starve).
    Greedy,
    /// EASY backfill: the first blocked job of a pass gets a reserved start (the engine's
    /// `earliest_start`, from running jobs' ends); a later job starts only if it fits and
    /// does not delay it (`Engine::delays`); at most `BACKFILL_SCAN_MAX` later jobs per queue
    /// are tried. (Reserving for more than one job needs each reservation planned around the
    /// earlier ones' future occupancy; not built.)
    Reserve,
}

impl Backfill {
    pub fn name(&self) -> String {
        match self {
            Backfill::Off => "off".into(),
            Backfill::Greedy => "greedy".into(),
            Backfill::Reserve => "reserve".into(),
        }
    }
}

/// How a replay runs: arrival compression, queue order, backfill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Divide the time between arrivals by this (durations unchanged); 1 = as traced.
    pub compress: u64,
    pub order: Order,
    pub backfill: Backfill,
    /// Stop lower-priority preemptible jobs for the first job a pass cannot start (needs
    /// `Order::FairShare`, where priority orders the queue).
    pub preempt: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions { compress: 1, order: Order::Fifo, backfill: Backfill::Greedy, preempt: false }
    }
}
