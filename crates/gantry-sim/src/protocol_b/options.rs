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
    /// Backfill with reservations: the first `reserve_depth` jobs of a pass blocked for lack
    /// of resources get reserved starts (from running jobs' time limits, each planned around
    /// the ones before it); a later job starts only if it fits and moves no reserved start
    /// later; at most `BACKFILL_SCAN_MAX` later jobs per queue are tried. Depth 1 is EASY
    /// backfill.
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
    /// Let jobs a pass cannot start stop work they have a right to: lower priority, borrowed
    /// guarantee, or anything of their priority once starving (see `rights.rs`; needs
    /// `Order::FairShare`, where priority orders the queue).
    pub preempt: bool,
    /// Blocked jobs given a reserved start per pass (`Backfill::Reserve`), ≥ 1.
    pub reserve_depth: usize,
    /// Stop the replay at this time (replay clock): the result then lists every waiting job
    /// with its reason and estimate as of that moment.
    pub until_s: Option<u64>,
}

/// Most reservations per pass.
pub const RESERVE_DEPTH_MAX: usize = 64;

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            compress: 1,
            order: Order::Fifo,
            backfill: Backfill::Greedy,
            preempt: false,
            reserve_depth: 1,
            until_s: None,
        }
    }
}
