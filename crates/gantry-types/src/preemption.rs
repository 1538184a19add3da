//! What preemption may cost one job and one promised start: the bounds a queue file's
//! `[preemption]` table sets for the whole tree. They exist because a right to capacity
//! (priority, a guarantee, the starvation guard) is judged one cycle at a time, and cycle by
//! cycle the cheapest victim is often the same job again: without a bound, a borrower can be
//! stopped twenty times in a day and a reserved gang pushed back by hours.

use serde::{Deserialize, Serialize};

/// Default of [`PreemptionRules::budget_stops`]: three stops, then a job runs to its end.
pub const BUDGET_STOPS_DEFAULT: u32 = 3;

/// Default of [`PreemptionRules::budget_lost_milli_s`]: 24 GPU-hours of one job's work thrown
/// away (three stops of an 8-GPU job an hour in), in milli-GPU-seconds.
pub const BUDGET_LOST_DEFAULT_MILLI_S: u64 = 24 * 3600 * 1000;

/// Default of [`PreemptionRules::promise_slip_max_s`]: one hour.
pub const PROMISE_SLIP_MAX_DEFAULT_S: u64 = 3600;

/// Default of [`PreemptionRules::lend_horizon_s`]: half an hour (docs/policies.md weighs it
/// against 10 minutes and 1-2 hours on the contention workloads).
pub const LEND_HORIZON_DEFAULT_S: u64 = 1800;

/// Default of [`PreemptionRules::overshoot_after_s`]: none. A borrower wider than its loan
/// is stopped only when no other plan exists, moving the waiting team's own smaller jobs
/// included, so waiting first bought little: docs/policies.md weighs 0 against 30 s, one
/// minute and the 10-minute reclaim protection on the contention workloads.
pub const OVERSHOOT_AFTER_DEFAULT_S: u64 = 0;

fn overshoot_after_default() -> u64 {
    OVERSHOOT_AFTER_DEFAULT_S
}

/// The tree's preemption bounds (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionRules {
    /// A job stopped this many times is not stopped again, by any right; waiting again, it
    /// starts only within its queue's guarantee (where no reclaim can take it back).
    pub budget_stops: u32,
    /// The same once this much of its work (milli-GPU × seconds since its last start, summed
    /// over its stops) has been thrown away.
    pub budget_lost_milli_s: u64,
    /// A promised (reserved) start may be pushed back by a higher right by at most this long
    /// in one wait; past it, the reservation holds against guarantee and starvation starts too
    /// (priority still goes first).
    pub promise_slip_max_s: u64,
    /// How far back a guarantee holder's recent usage counts as a claim on its idle
    /// guarantee when a job would borrow it (a job with a minimum runtime looks back that
    /// long instead): lending only what its holder did not use in the last stretch as long as
    /// the borrower's run, up to this, keeps a borrower from being reclaimed soon after it
    /// starts.
    pub lend_horizon_s: u64,
    /// Reclaim toward the weighted share, not only the guarantee: a job whose queue stays
    /// within its weighted share with it may stop work of queues above theirs, none taken below
    /// its share (`sched/shares.rs`). Off by default: it throws work away to enforce what the
    /// fair-share order reaches anyway as jobs end; on where jobs run long against the wait a
    /// team accepts (docs/policies.md, "Preemption").
    #[serde(default)]
    pub fair_share_reclaim: bool,
    /// A job within its guarantee that no plan within what other queues borrow can start
    /// (their borrowers are wider than their loans: a gang, a whole-node job), moving its
    /// team's smaller jobs included, may take such a borrower whole once it has waited this
    /// long within its guarantee (default at once): capacity that frees on its own in that
    /// time costs no one's work, and the borrower's queue falls below its own guarantee (the
    /// lender's guarantee wins).
    #[serde(default = "overshoot_after_default")]
    pub overshoot_after_s: u64,
}

impl Default for PreemptionRules {
    fn default() -> Self {
        PreemptionRules {
            budget_stops: BUDGET_STOPS_DEFAULT,
            budget_lost_milli_s: BUDGET_LOST_DEFAULT_MILLI_S,
            promise_slip_max_s: PROMISE_SLIP_MAX_DEFAULT_S,
            lend_horizon_s: LEND_HORIZON_DEFAULT_S,
            fair_share_reclaim: false,
            overshoot_after_s: OVERSHOOT_AFTER_DEFAULT_S,
        }
    }
}

impl PreemptionRules {
    /// Has a job stopped `stops` times, losing `lost_milli_s`, spent its budget?
    pub fn spent(&self, stops: u32, lost_milli_s: u64) -> bool {
        stops >= self.budget_stops || lost_milli_s >= self.budget_lost_milli_s
    }
}
