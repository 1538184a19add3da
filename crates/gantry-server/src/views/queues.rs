//! The dashboard's queues: each with its quota, what it holds and uses now, and its jobs.

use crate::auth::Principal;
use crate::control::Controller;
use gantry_types::JobState;
use std::collections::BTreeMap;

/// A queue as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct QueueView {
    pub name: String,
    pub parent: Option<String>,
    pub weight: Option<u32>,
    /// GPUs' worth guaranteed and at most (all flavors), from the queue file.
    pub guaranteed_gpus: Option<f64>,
    pub limit_gpus: Option<f64>,
    pub allocated_gpus: f64,
    pub used_gpus: f64,
    pub pending: u32,
    pub running: u32,
}

impl QueueView {
    fn named(name: &str) -> QueueView {
        QueueView {
            name: name.to_string(),
            parent: None,
            weight: None,
            guaranteed_gpus: None,
            limit_gpus: None,
            allocated_gpus: 0.0,
            used_gpus: 0.0,
            pending: 0,
            running: 0,
        }
    }
}

/// Every queue with what it holds and uses now, its jobs, and its quota (from the queue
/// file; none under FIFO). Members see only their queues.
pub fn queues(c: &Controller, who: &Principal) -> Vec<QueueView> {
    let mut views: BTreeMap<String, QueueView> = BTreeMap::new();
    if let gantry_engine::sched::Order::FairShare(tree) = &c.scheduler().config().order {
        for q in &tree.queues {
            let view = views.entry(q.name.clone()).or_insert_with(|| QueueView::named(&q.name));
            view.weight = Some(q.weight);
            view.parent = q.parent.map(|p| tree.queues[p].name.clone());
            for quota in &q.quotas {
                view.guaranteed_gpus =
                    Some(view.guaranteed_gpus.unwrap_or(0.0) + quota.guaranteed_milli as f64 / 1000.0);
                view.limit_gpus = Some(view.limit_gpus.unwrap_or(0.0) + quota.limit_milli as f64 / 1000.0);
            }
        }
    }
    for (queue, held) in c.usage_meter().queues() {
        let view = views.entry(queue.clone()).or_insert_with(|| QueueView::named(queue));
        (view.allocated_gpus, view.used_gpus) = held.gpus();
    }
    for row in c.jobs().values().filter(|r| !r.state.is_final()) {
        let view = views.entry(row.queue.clone()).or_insert_with(|| QueueView::named(&row.queue));
        if row.state == JobState::Pending {
            view.pending += 1;
        } else {
            view.running += 1;
        }
    }
    views.into_values().filter(|v| who.sees(&v.name)).collect()
}
