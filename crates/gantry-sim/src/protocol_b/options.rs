//! How a replay runs: queue order, backfill, preemption (the engine scheduler's settings),
//! arrival compression and where to stop.

pub use gantry_engine::sched::{BACKFILL_WORK_MAX, Backfill, Order, RESERVE_DEPTH_MAX};

/// How a replay runs: arrival compression, queue order, backfill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Divide the time between arrivals by this (durations unchanged); 1 = as traced.
    pub compress: u64,
    pub order: Order,
    pub backfill: Backfill,
    /// Let jobs a pass cannot start stop work they have a right to: lower priority, borrowed
    /// guarantee, or anything of their priority once starving (the engine's `sched`; needs
    /// `Order::FairShare`, where priority orders the queue).
    pub preempt: bool,
    /// Blocked jobs given a reserved start per pass (`Backfill::Reserve`), ≥ 1.
    pub reserve_depth: usize,
    /// Stop the replay at this time (replay clock): the result then lists every waiting job
    /// with its reason and estimate as of that moment.
    pub until_s: Option<u64>,
}

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
