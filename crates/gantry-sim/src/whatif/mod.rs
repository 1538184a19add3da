//! The what-if report's arithmetic: a cluster's history as it happened (each job's recorded
//! start) and gantry's replays of the same arrivals, reduced to the same figures over the same
//! window, and the smallest part of the fleet on which a replay would have served the history
//! no worse. The reductions here are pure but for [`sufficed`], which replays shrinking
//! fleets; [`analysis`] runs the other replays and passes their results in, and [`report`]
//! lays the columns out as text, JSON and HTML.

pub mod analysis;
pub mod report;

use crate::protocol_b::{ReplayOptions, ReplayResult, Waits, run_trace};
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_spec::TraceJob;
use gantry_types::{Fleet, GpuRequest};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One job's run in one column: when it arrived, started and ended, what it held.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRun {
    pub queue: String,
    pub arrival_s: u64,
    /// `None`: never started.
    pub start_s: Option<u64>,
    /// `None`: still running at the end (held to the window's end).
    pub end_s: Option<u64>,
    /// Milli-GPU held while running.
    pub milli: u64,
    pub utilization: Option<f64>,
}

/// One column of the report before it is reduced: a name, a fleet size and every job's run.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub name: String,
    pub fleet_gpus: u64,
    pub jobs: Vec<JobRun>,
}

/// A column reduced: waits (overall and per queue) and GPU use over the report's window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Column {
    pub name: String,
    pub fleet_gpus: u64,
    pub jobs: u64,
    pub started: u64,
    pub waits: Waits,
    pub waits_by_queue: BTreeMap<String, Waits>,
    /// GPU-hours held (MIG instances and shares as their part of a GPU).
    pub gpu_hours: f64,
    /// From the first arrival to the last end.
    pub makespan_s: u64,
    /// Mean GPUs held over the window, as a share of this column's fleet, %.
    pub mean_alloc_pct: f64,
    pub peak_gpus: f64,
    /// Mean GPU compute used over the window, % of this column's fleet: only when every job
    /// of the trace says how busy it keeps its GPUs (otherwise unknown, not invented).
    pub mean_util_pct: Option<f64>,
}

/// Milli-GPU one job holds, as recorded (no placement): whole GPUs and shares exactly, a MIG
/// instance as its compute part on the first fleet model that has the profile, a memory-only
/// request as a whole GPU (at most).
pub fn job_milli(job: &gantry_types::Job, fleet: &Fleet, catalog: &Catalog) -> u64 {
    job.groups
        .iter()
        .map(|g| {
            let per_task = match &g.resources.gpu {
                None => 0,
                Some(GpuRequest::Whole { count }) => u64::from(*count) * 1000,
                Some(GpuRequest::Share { milli, .. }) => u64::from(milli.0),
                Some(GpuRequest::Memory { .. }) => 1000,
                Some(GpuRequest::Mig { profile }) => mig_milli(profile, fleet, catalog),
            };
            u64::from(g.replicas) * per_task
        })
        .sum()
}

fn mig_milli(profile: &str, fleet: &Fleet, catalog: &Catalog) -> u64 {
    let models: BTreeSet<&str> = fleet.nodes.iter().flat_map(|n| n.gpus.iter().map(|g| g.model.as_str())).collect();
    models
        .into_iter()
        .filter_map(|m| catalog.lookup(m).map(|id| catalog.model(id)))
        .find_map(|model| {
            let p = model.mig.as_ref()?.profile(profile)?;
            Some(u64::from(model.mig_milli(p).0))
        })
        .unwrap_or(1000)
}

/// GPUs in a fleet.
pub fn fleet_gpus(fleet: &Fleet) -> u64 {
    fleet.nodes.iter().map(|n| n.gpus.len() as u64).sum()
}

/// The history as recorded, or `None` when no job of the trace carries its start
/// (`started_s`). Jobs without one never started in the history.
pub fn history(fleet: &Fleet, catalog: &Catalog, jobs: &[TraceJob]) -> Option<Run> {
    if jobs.iter().all(|j| j.started_s.is_none()) {
        return None;
    }
    let runs = jobs
        .iter()
        .map(|j| JobRun {
            queue: j.job.queue.clone(),
            arrival_s: j.arrival_s,
            start_s: j.started_s,
            end_s: j.started_s.and_then(|s| j.duration_s.map(|d| s + d)),
            milli: job_milli(&j.job, fleet, catalog),
            utilization: j.utilization,
        })
        .collect();
    Some(Run { name: "as it happened".into(), fleet_gpus: fleet_gpus(fleet), jobs: runs })
}

/// A replay's runs, from its events (a job preempted and started again counts from its last
/// start; its wait is the replay's own first-start delay).
pub fn replayed(name: &str, fleet: &Fleet, jobs: &[TraceJob], r: &ReplayResult) -> Run {
    let mut runs: Vec<JobRun> = jobs
        .iter()
        .map(|j| JobRun {
            queue: j.job.queue.clone(),
            arrival_s: j.arrival_s,
            start_s: None,
            end_s: None,
            milli: 0,
            utilization: j.utilization,
        })
        .collect();
    for e in &r.events {
        let Some(run) = runs.get_mut(e.index) else { continue };
        match e.event {
            "start" => {
                run.start_s.get_or_insert(e.time_s);
                run.milli = e.milli;
                run.end_s = None;
            }
            "end" | "time-limit" | "kill" => run.end_s = Some(e.time_s),
            _ => {}
        }
    }
    Run { name: name.into(), fleet_gpus: fleet_gpus(fleet), jobs: runs }
}

/// The columns over one window: from the first arrival to the latest end of any column (so
/// every column's work is inside it).
pub fn columns(runs: &[Run]) -> Vec<Column> {
    let origin = runs.iter().flat_map(|r| r.jobs.iter().map(|j| j.arrival_s)).min().unwrap_or(0);
    let last = |r: &Run| r.jobs.iter().filter_map(|j| j.end_s.or(j.start_s)).max().unwrap_or(origin);
    let window_end = runs.iter().map(last).max().unwrap_or(origin).max(origin + 1);
    runs.iter().map(|r| column(r, origin, window_end)).collect()
}

fn column(run: &Run, origin: u64, window_end: u64) -> Column {
    let window = (window_end - origin) as f64;
    let (mut all, mut by_queue): (Vec<u64>, BTreeMap<String, Vec<u64>>) = (Vec::new(), BTreeMap::new());
    let (mut gpu_s, mut util_s, mut util_known) = (0.0, 0.0, true);
    let mut changes: Vec<(u64, i64)> = Vec::new();
    for j in &run.jobs {
        let Some(start) = j.start_s else { continue };
        let wait = start.saturating_sub(j.arrival_s);
        all.push(wait);
        by_queue.entry(j.queue.clone()).or_default().push(wait);
        let end = j.end_s.unwrap_or(window_end).min(window_end).max(start);
        let held = (end - start) as f64 * j.milli as f64 / 1000.0;
        gpu_s += held;
        match j.utilization {
            Some(u) => util_s += held * u,
            None => util_known = false,
        }
        changes.push((start, j.milli as i64));
        changes.push((end, -(j.milli as i64)));
    }
    changes.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in changes {
        now += d;
        peak = peak.max(now);
    }
    all.sort_unstable();
    let capacity = run.fleet_gpus.max(1) as f64 * window;
    Column {
        name: run.name.clone(),
        fleet_gpus: run.fleet_gpus,
        jobs: run.jobs.len() as u64,
        started: all.len() as u64,
        waits: Waits::of(&all),
        waits_by_queue: by_queue
            .into_iter()
            .map(|(q, mut w)| {
                w.sort_unstable();
                (q, Waits::of(&w))
            })
            .collect(),
        gpu_hours: gpu_s / 3600.0,
        makespan_s: run
            .jobs
            .iter()
            .filter_map(|j| j.end_s.or(j.start_s))
            .max()
            .map_or(0, |e| e - run.jobs.iter().map(|j| j.arrival_s).min().unwrap_or(e)),
        mean_alloc_pct: gpu_s / capacity * 100.0,
        peak_gpus: peak as f64 / 1000.0,
        mean_util_pct: (util_known && !run.jobs.is_empty()).then(|| util_s / capacity * 100.0),
    }
}

/// The fleet's first `keep` nodes, taken round-robin across its node shapes (model and GPU
/// count) so a smaller fleet keeps the mix; each `keep` is a superset of the one before.
pub fn keep_nodes(fleet: &Fleet, keep: usize) -> Fleet {
    let mut groups: BTreeMap<(String, usize), Vec<usize>> = BTreeMap::new();
    for (i, n) in fleet.nodes.iter().enumerate() {
        let model = n.gpus.first().map_or_else(String::new, |g| g.model.clone());
        groups.entry((model, n.gpus.len())).or_default().push(i);
    }
    let mut order = Vec::with_capacity(fleet.nodes.len());
    let mut round = 0;
    while order.len() < fleet.nodes.len() {
        for members in groups.values() {
            if let Some(&i) = members.get(round) {
                order.push(i);
            }
        }
        round += 1;
    }
    let mut kept: Vec<usize> = order.into_iter().take(keep).collect();
    kept.sort_unstable();
    Fleet { nodes: kept.into_iter().map(|i| fleet.nodes[i].clone()).collect() }
}

/// The smallest fleet found (by bisection over [`keep_nodes`]) on which gantry's replay starts
/// every job the target started and keeps the overall p90 wait within the target's: the GPUs
/// that would have sufficed. `whole` is the replay on the whole fleet, already run. `None`
/// when even the whole fleet does not suffice.
pub fn sufficed(
    fleet: &Fleet,
    catalog: &'static Catalog,
    jobs: &[TraceJob],
    options: &ReplayOptions,
    target: &Column,
    whole: &Run,
) -> Result<Option<Column>, crate::SimError> {
    let suffices =
        |col: Column| (col.started >= target.started && col.waits.p90_s <= target.waits.p90_s).then_some(col);
    let good = |keep: usize| -> Result<Option<Column>, crate::SimError> {
        let smaller = keep_nodes(fleet, keep);
        let r = run_trace(&smaller, catalog, jobs, Policy::Default, 0, options)?;
        Ok(suffices(columns(&[replayed("sufficed", &smaller, jobs, &r)]).remove(0)))
    };
    let Some(mut best) = suffices(columns(std::slice::from_ref(whole)).remove(0)) else { return Ok(None) };
    let (mut lo, mut hi) = (0, fleet.nodes.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match good(mid)? {
            Some(col) => {
                hi = mid;
                best = col;
            }
            None => lo = mid,
        }
    }
    let kept = keep_nodes(fleet, hi);
    best.name = format!("gantry on {} of {} nodes", kept.nodes.len(), fleet.nodes.len());
    best.fleet_gpus = fleet_gpus(&kept);
    Ok(Some(best))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, gpus: u64, jobs: &[(u64, Option<u64>, Option<u64>, u64)]) -> Run {
        Run {
            name: name.into(),
            fleet_gpus: gpus,
            jobs: jobs
                .iter()
                .map(|&(arrival_s, start_s, end_s, milli)| JobRun {
                    queue: if milli > 1000 { "train".into() } else { "infer".into() },
                    arrival_s,
                    start_s,
                    end_s,
                    milli,
                    utilization: None,
                })
                .collect(),
        }
    }

    #[test]
    fn columns_share_one_window_and_count_what_was_held() {
        // History: a 2-GPU job waits 100 s and runs 100 s; a 1-GPU job starts at once and runs
        // 300 s. The replay starts both at once.
        let history = run("history", 4, &[(0, Some(100), Some(200), 2000), (0, Some(0), Some(300), 1000)]);
        let replay = run("gantry", 4, &[(0, Some(0), Some(100), 2000), (0, Some(0), Some(300), 1000)]);
        let cols = columns(&[history, replay]);
        assert_eq!((cols[0].waits.max_s, cols[1].waits.max_s), (100, 0));
        assert_eq!(cols[0].waits_by_queue["train"].p50_s, 100);
        // 200 + 300 GPU-s over 300 s of 4 GPUs.
        assert!((cols[0].gpu_hours - 500.0 / 3600.0).abs() < 1e-9);
        assert!((cols[0].mean_alloc_pct - 500.0 / 1200.0 * 100.0).abs() < 1e-9, "{}", cols[0].mean_alloc_pct);
        assert_eq!((cols[0].peak_gpus, cols[1].peak_gpus), (3.0, 3.0));
        assert_eq!((cols[0].makespan_s, cols[1].makespan_s), (300, 300));
        assert_eq!(cols[0].mean_util_pct, None, "no job says how busy it was");
    }

    #[test]
    fn a_job_that_never_started_has_no_wait_and_holds_nothing() {
        let cols = columns(&[run("h", 1, &[(0, None, None, 1000), (10, Some(20), None, 1000)])]);
        assert_eq!((cols[0].started, cols[0].jobs), (1, 2));
        assert_eq!(cols[0].waits.p50_s, 10);
        assert_eq!(cols[0].gpu_hours, 0.0, "still running at the window's end, which is its start");
    }

    #[test]
    fn smaller_fleets_keep_the_mix_and_grow_by_supersets() {
        let fleet = gantry_spec::parse_fleet(
            "[[node]]\nname = \"a\"\ncpu = 8\nmemory = \"64GiB\"\ngpus = { model = \"A100-SXM4-80GB\", count = 8 }\n\
             [[node]]\nname = \"b\"\ncpu = 8\nmemory = \"64GiB\"\ngpus = { model = \"A100-SXM4-80GB\", count = 8 }\n\
             [[node]]\nname = \"c\"\ncpu = 8\nmemory = \"64GiB\"\ngpus = { model = \"H100-SXM5-80GB\", count = 8 }\n",
            Catalog::embedded(),
        )
        .expect("fleet");
        let names = |k| keep_nodes(&fleet, k).nodes.into_iter().map(|n| n.name).collect::<Vec<_>>();
        assert_eq!(names(2), ["a", "c"], "one of each shape first");
        assert_eq!(names(3), ["a", "b", "c"]);
        assert_eq!(fleet_gpus(&keep_nodes(&fleet, 1)), 8);
    }
}
