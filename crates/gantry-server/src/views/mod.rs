//! Read-only views over the controller's state, one module per thing shown: they take the
//! state by reference, change nothing, and are what the API and the dashboard serialize.

pub mod jobs;
pub mod metrics;
pub mod nodes;
pub mod plan;
pub mod queues;
pub mod reconfig;

pub use jobs::JobView;
pub use nodes::{GpuView, MigInstanceView, NodeView};
pub use plan::{PlanView, PlannedChange};
pub use queues::QueueView;
pub use reconfig::ReconfigurationsView;

use crate::auth::Principal;
use crate::control::Controller;

/// Allocation and utilization over time: the last hour at 10 s (`fine`), or the last week at
/// 5 minutes. A member sees only its queues in the per-queue breakdown.
pub fn series(c: &Controller, who: &Principal, fine: bool) -> Vec<crate::series::Point> {
    let mut points = if fine { c.series.fine() } else { c.series.coarse() };
    for p in &mut points {
        p.queues.retain(|q, _| who.sees(q));
    }
    points
}

/// Idle events (newest last); a member sees only its queues'.
pub fn idle_events(c: &Controller, who: &Principal) -> Vec<crate::idle::IdleEvent> {
    c.idle.events().into_iter().filter(|e| who.sees(&e.queue)).collect()
}

/// Is this running job flagged idle now?
pub fn is_idle(c: &Controller, job: u64) -> bool {
    c.idle.is_flagged(job)
}

/// The chargeback report over ledger rows the caller read from the store (`rows`), grouped
/// `by`; a member sees only its queues'.
pub fn usage(
    c: &Controller,
    who: &Principal,
    rows: Vec<gantry_store::UsageRow>,
    by: crate::meter::UsageBy,
) -> Result<Vec<crate::meter::UsageLine>, crate::error::ControlError> {
    who.not_agent()?;
    let rows: Vec<gantry_store::UsageRow> = rows.into_iter().filter(|r| who.sees(&r.queue)).collect();
    Ok(crate::meter::report(&rows, by, &c.billing))
}

/// Every token, without its hash (admins only).
pub fn tokens(c: &Controller, who: &Principal) -> Result<Vec<gantry_store::TokenRecord>, crate::error::ControlError> {
    who.admin_only("listing tokens")?;
    Ok(c.tokens.list())
}
