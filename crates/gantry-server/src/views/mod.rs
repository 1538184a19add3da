//! Read-only views over the controller's state, one module per thing shown: they take the
//! state by reference, change nothing, and are what the API and the dashboard serialize.

pub mod jobs;
pub mod metrics;
mod metrics_queues;
mod metrics_service;
pub mod nodes;
pub mod partitions;
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
    let mut points = if fine { c.series().fine() } else { c.series().coarse() };
    for p in &mut points {
        p.queues.retain(|q, _| who.sees(q));
    }
    points
}

/// Idle events (newest last); a member sees only its queues'.
pub fn idle_events(c: &Controller, who: &Principal) -> Vec<crate::idle::IdleEvent> {
    c.idle().events().into_iter().filter(|e| who.sees(&e.queue)).collect()
}

/// Is this running job flagged idle now?
pub fn is_idle(c: &Controller, job: u64) -> bool {
    c.idle().is_flagged(job)
}

/// The chargeback report over ledger rows the caller read from the store (`rows`, the window
/// `[from_s, to_s)`), grouped `by`, with the CPU time and memory peak the nodes measured of
/// the jobs in it; a member sees only its queues'.
pub fn usage(
    c: &Controller,
    who: &Principal,
    rows: Vec<gantry_store::UsageRow>,
    by: crate::meter::UsageBy,
    window: (u64, u64),
) -> Result<Vec<crate::meter::UsageLine>, crate::error::ControlError> {
    who.not_agent()?;
    let rows: Vec<gantry_store::UsageRow> = rows.into_iter().filter(|r| who.sees(&r.queue)).collect();
    let mut lines = crate::meter::report(&rows, by, c.billing());
    measured_use(c, who, &rows, by, window, &mut lines);
    Ok(lines)
}

/// Add what the nodes measured (CPU time, the highest memory peak) to each line: a job counts
/// whole under each key it has GPU time under in the window, and a job with no GPU time
/// (CPU only) under its user, queue or id (`(no GPU)` by model) when it ran in the window.
/// CPU time is per job, not split by hour: a job's whole run counts in any window it touched.
fn measured_use(
    c: &Controller,
    who: &Principal,
    rows: &[gantry_store::UsageRow],
    by: crate::meter::UsageBy,
    (from_s, to_s): (u64, u64),
    lines: &mut Vec<crate::meter::UsageLine>,
) {
    use crate::meter::UsageBy;
    use std::collections::{BTreeMap, BTreeSet};
    let mut jobs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for r in rows {
        jobs.entry(crate::meter::key_of(r, by)).or_default().insert(r.job);
    }
    let in_rows: BTreeSet<u64> = rows.iter().map(|r| r.job).collect();
    for row in c.jobs().values().filter(|row| who.sees(&row.queue) && !in_rows.contains(&row.id)) {
        let ran = row.started_at_s.is_some_and(|start| start < to_s && row.ended_at_s.is_none_or(|end| end >= from_s));
        if !ran {
            continue;
        }
        let key = match by {
            UsageBy::User => row.job.control.user.clone().unwrap_or_else(|| "(none)".into()),
            UsageBy::Queue => row.queue.clone(),
            UsageBy::Model => "(no GPU)".into(),
            UsageBy::Job => row.id.to_string(),
        };
        jobs.entry(key).or_default().insert(row.id);
    }
    for (key, ids) in jobs {
        let (mut cpu_ms, mut peak) = (0u64, None::<u64>);
        for id in ids {
            let ended = c.jobs().get(&id).map(|r| r.outcome.used.clone()).unwrap_or_default();
            let live = c.running().get(&id).map(|r| r.used.values().cloned().collect::<Vec<_>>()).unwrap_or_default();
            for used in ended.iter().chain(live.iter()) {
                cpu_ms = cpu_ms.saturating_add(used.used.cpu_ms.unwrap_or(0));
                peak = peak.max(used.used.memory_peak_bytes);
            }
        }
        if cpu_ms == 0 && peak.is_none() && !lines.iter().any(|l| l.key == key) {
            continue;
        }
        let line = match lines.iter_mut().position(|l| l.key == key) {
            Some(at) => &mut lines[at],
            None => {
                lines.push(crate::meter::UsageLine::empty(key));
                lines.last_mut().expect("just pushed")
            }
        };
        line.cpu_hours += cpu_ms as f64 / 3_600_000.0;
        line.memory_peak_bytes = line.memory_peak_bytes.max(peak);
    }
}

/// Every token, without its hash (admins only).
pub fn tokens(c: &Controller, who: &Principal) -> Result<Vec<gantry_store::TokenRecord>, crate::error::ControlError> {
    who.admin_only("listing tokens")?;
    Ok(c.tokens().list())
}
