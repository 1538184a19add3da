//! `GET /metrics`, per queue: what each holds and uses, its jobs by state and waiting ones by
//! reason category, its quotas (guaranteed, limit, in use, borrowed) and how long its jobs
//! waited. Every queue of the queue file is listed, with every state and category at 0 until
//! something is there: `sum(gantry_jobs{state="pending"})` is 0, not empty, on an idle
//! controller, and a rate never misses a series' first increase.

use crate::control::Controller;
use crate::metrics::{Exposition, Histogram, Labels, WAIT_BUCKETS};
use gantry_types::{Flavor, JobState, REASON_CATEGORIES};
use std::collections::{BTreeMap, BTreeSet};

pub fn queues(out: &mut Exposition, c: &Controller) {
    let names = queue_names(c);
    held_and_used(out, c, &names);
    jobs_by_state(out, c, &names);
    pending_by_reason(out, c, &names);
    quotas(out, c);
    waits(out, c, &names);
}

/// The queue file's queues, and any other a job, the meter or a wait was counted under (with
/// no queue file, queues are whatever jobs name).
fn queue_names(c: &Controller) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    if let Some(tree) = c.scheduler().queue_tree() {
        names.extend(tree.queues.iter().map(|q| q.name.clone()));
    }
    names.extend(c.jobs().values().filter(|r| !r.state.is_final()).map(|r| r.queue.clone()));
    names.extend(c.usage_meter().queues().keys().cloned());
    names.extend(c.stats().wait_seconds.keys().cloned());
    names
}

fn held_and_used(out: &mut Exposition, c: &Controller, names: &BTreeSet<String>) {
    let held = c.usage_meter().queues();
    out.family("gantry_queue_allocated_gpus", "gauge", "", "GPUs' worth of compute held by a queue's running jobs.");
    out.family(
        "gantry_queue_used_gpus",
        "gauge",
        "",
        "GPUs' worth of compute a queue's running jobs use: allocation × utilization.",
    );
    for queue in names {
        let (allocated, used) = held.get(queue).map_or((0.0, 0.0), |h| h.gpus());
        out.sample("gantry_queue_allocated_gpus", &[("queue", queue)], allocated);
        out.sample("gantry_queue_used_gpus", &[("queue", queue)], used);
    }
}

/// Jobs waiting or running, by queue and state.
fn jobs_by_state(out: &mut Exposition, c: &Controller, names: &BTreeSet<String>) {
    let mut jobs: BTreeMap<(&str, &'static str), u64> = BTreeMap::new();
    for row in c.jobs().values().filter(|r| !r.state.is_final()) {
        *jobs.entry((row.queue.as_str(), row.state.name())).or_default() += 1;
    }
    out.family("gantry_jobs", "gauge", "", "Jobs waiting or running, by queue and state.");
    for queue in names {
        for state in [JobState::Pending.name(), JobState::Running.name()] {
            let count = jobs.get(&(queue.as_str(), state)).copied().unwrap_or(0);
            out.sample("gantry_jobs", &[("queue", queue), ("state", state)], count as f64);
        }
    }
}

/// Waiting jobs by queue and the category of what keeps each (`gantry why` has the details).
fn pending_by_reason(out: &mut Exposition, c: &Controller, names: &BTreeSet<String>) {
    let mut counts: BTreeMap<(&str, &'static str), u64> = BTreeMap::new();
    for row in c.jobs().values().filter(|r| r.state == JobState::Pending) {
        if let Some(category) = c.scheduler().why_category(row.id) {
            *counts.entry((row.queue.as_str(), category)).or_default() += 1;
        }
    }
    out.family(
        "gantry_pending_jobs",
        "gauge",
        "",
        "Waiting jobs by queue and the category of the reason they wait, as `gantry why` gives it.",
    );
    for queue in names {
        for category in REASON_CATEGORIES {
            let count = counts.get(&(queue.as_str(), category)).copied().unwrap_or(0);
            out.sample("gantry_pending_jobs", &[("queue", queue), ("reason", category)], count as f64);
        }
    }
}

/// The label of a quota's flavor: a catalog model id, or `shares` for the milli-GPU pool.
fn flavor_label(flavor: &Flavor) -> &str {
    match flavor {
        Flavor::Model(model) => model,
        Flavor::MilliPool => "shares",
    }
}

/// Each quota of the queue file: guaranteed, limit (+Inf where none), in use (descendants
/// included) and borrowed (in use above the guarantee), in GPUs.
fn quotas(out: &mut Exposition, c: &Controller) {
    let scheduler = c.scheduler();
    let (Some(tree), Some(book)) = (scheduler.queue_tree(), scheduler.quota_book()) else { return };
    let gpus = |milli: u64| if milli == u64::MAX { f64::INFINITY } else { milli as f64 / 1000.0 };
    let families = [
        (
            "gantry_queue_quota_guaranteed_gpus",
            "GPUs always available to a queue for a flavor (reclaimed from borrowers when it asks).",
        ),
        (
            "gantry_queue_quota_limit_gpus",
            "Most GPUs a queue may hold of a flavor, borrowing included (+Inf: no limit).",
        ),
        ("gantry_queue_quota_used_gpus", "GPUs a queue and its descendants hold of a quota's flavor."),
        (
            "gantry_queue_quota_borrowed_gpus",
            "GPUs a queue holds of a flavor above its guarantee: borrowed, reclaimable by lenders.",
        ),
    ];
    for (name, help) in families {
        out.family(name, "gauge", "", help);
    }
    for (index, queue) in tree.queues.iter().enumerate() {
        for quota in &queue.quotas {
            let labels = [("queue", queue.name.as_str()), ("flavor", flavor_label(&quota.flavor))];
            let used = book.used(index, &quota.flavor);
            out.sample(families[0].0, &labels, gpus(quota.guaranteed_milli));
            out.sample(families[1].0, &labels, gpus(quota.limit_milli));
            out.sample(families[2].0, &labels, gpus(used));
            out.sample(families[3].0, &labels, gpus(used.saturating_sub(quota.guaranteed_milli)));
        }
    }
}

/// Eligible-to-start times, per queue (an empty histogram for a queue nothing started in).
fn waits(out: &mut Exposition, c: &Controller, names: &BTreeSet<String>) {
    let seen = &c.stats().wait_seconds;
    let each: Vec<(Labels, Histogram)> = names
        .iter()
        .map(|queue| {
            let histogram = seen.get(queue).cloned().unwrap_or_else(|| Histogram::new(WAIT_BUCKETS));
            (vec![("queue".to_string(), queue.clone())], histogram)
        })
        .collect();
    out.histograms("gantry_job_wait_seconds", "Time from a job's eligibility to its start, per start, by queue.", each);
}
