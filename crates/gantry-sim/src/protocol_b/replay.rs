//! The replay loop: events on a virtual clock, scheduling passes, and the measurements.

use super::SimJob;
use super::options::{BACKFILL_SCAN_MAX, Backfill, Order, ReplayOptions};
use super::result::{JAIN_WINDOWS, ReplayResult, SAMPLES, Sample, jain, percentile};
use gantry_engine::backfill::{Running, Shadow};
use gantry_engine::fairshare::{Candidate, FairShare, Resources};
use gantry_engine::preempt::{Right, Victim};
use gantry_engine::quota::QuotaBook;
use gantry_engine::rng::mix;
use gantry_engine::{AllocId, CompiledJob, Engine};
use gantry_types::{DependencyKind, Flavor};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A running pod ends (ordered before arrivals at the same second: capacity first).
    Depart {
        job: usize,
        alloc: AllocId,
    },
    /// The grace period of a preempted job is over: it is killed and waits again.
    Kill {
        job: usize,
        alloc: AllocId,
    },
    Arrive {
        job: usize,
    },
}

/// Simulated utilization of a job's allocation where the trace gives none: a seeded draw in
/// [0.2, 1.0), stable per job.
fn drawn_utilization(seed: u64, job: usize) -> f64 {
    0.2 + 0.8 * (mix(seed ^ (job as u64).wrapping_mul(0x9E37_79B9)) >> 11) as f64 / (1u64 << 53) as f64
}

/// A running allocation: whose, since when, until when, and what it holds.
struct RunningJob {
    job: usize,
    started_at: u64,
    /// When its departure is scheduled.
    planned_end: u64,
    /// Its end as planning may count on (`None`: the job has no duration, it runs to the end).
    limit_end: Option<u64>,
    /// Milli-GPU granted, fair share's units, and quota demand.
    milli: u64,
    held: Resources,
    demand: Vec<(Flavor, u64)>,
}

fn running_list(running: &BTreeMap<AllocId, RunningJob>) -> Vec<Running> {
    running.iter().map(|(&alloc, r)| Running { alloc, end_s: r.limit_end }).collect()
}

/// The reserved start for `job` (blocked at `now`) and the fleet at that start: the previous
/// pass's start if it was for the same job and the job still fits then (cheap, and still exact:
/// backfill never delays it and nothing ends later than planned), else the engine's earliest
/// start. A start at `now` is kept too: capacity freed this second by departures not yet
/// processed is what it waits for. `None` if it would never fit.
fn reserve(
    engine: &Engine,
    compiled: &CompiledJob,
    job: usize,
    running_jobs: &BTreeMap<AllocId, RunningJob>,
    now: u64,
    last: &mut Option<(usize, u64)>,
) -> Option<((usize, u64), Shadow)> {
    let running = running_list(running_jobs);
    if let Some((previous, start_s)) = *last
        && previous == job
        && start_s >= now
    {
        let mut shadow = engine.shadow_at(&running, start_s);
        if shadow.fits(compiled) {
            return Some(((job, start_s), shadow));
        }
    }
    let start_s = engine.earliest_start(compiled, &running, now)?;
    *last = Some((job, start_s));
    Some(((job, start_s), engine.shadow_at(&running, start_s)))
}

/// The replay loop over `engine` (empty at the start). Same jobs, engine, order and seed ⇒
/// same result. Fails only if a job's queue is not in the fair-share tree.
pub fn replay(
    engine: &mut Engine,
    jobs: &[SimJob],
    seed: u64,
    options: &ReplayOptions,
) -> Result<ReplayResult, String> {
    let compress = options.compress.max(1);
    if options.preempt && options.order == Order::Fifo {
        return Err("preemption needs fair-share order (FIFO ignores priority)".into());
    }
    let order = &options.order;
    let backfill = options.backfill;
    let capacity = (engine.state().gpus.len() as f64 * 1000.0).max(1.0);
    let origin = jobs.iter().map(|j| j.arrival_s).min().unwrap_or(0);
    let arrival_of = |j: &SimJob| origin + (j.arrival_s - origin) / compress;
    let start = origin;
    // Means are taken over the arrival window: long-running jobs are censored at the trace's
    // end, and averaging over their tail would dilute the busy period to nothing.
    let last_arrival = jobs.iter().map(arrival_of).max().unwrap_or(start).max(start + 1);
    let end = jobs.iter().map(|j| arrival_of(j) + j.duration_s.unwrap_or(0)).max().unwrap_or(start).max(start + 1);
    let step = ((last_arrival - start) / SAMPLES as u64).max(1);

    // Queues: one FIFO, or the tree's; tenants for fairness figures are the jobs' queues.
    let mut fair = match order {
        Order::Fifo => None,
        Order::FairShare(tree) => Some(FairShare::new(tree.clone(), engine.capacity(&tree.billing_milli))),
    };
    let queue_of: Vec<usize> = match &fair {
        None => vec![0; jobs.len()],
        Some(fs) => jobs
            .iter()
            .map(|j| fs.tree().find(&j.tenant).ok_or_else(|| format!("job {:?}: unknown queue {:?}", j.name, j.tenant)))
            .collect::<Result<_, _>>()?,
    };
    let queue_count = fair.as_ref().map_or(1, |fs| fs.tree().queues.len());
    let billing: Vec<(String, u32)> = fair.as_ref().map(|fs| fs.tree().billing_milli.clone()).unwrap_or_default();
    let tenants: Vec<String> = {
        let mut t: Vec<String> = jobs.iter().map(|j| j.tenant.clone()).collect();
        t.sort();
        t.dedup();
        t
    };
    let tenant_of: Vec<usize> =
        jobs.iter().map(|j| tenants.binary_search(&j.tenant).expect("every tenant is listed")).collect();

    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in jobs.iter().enumerate() {
        events.push(Reverse((arrival_of(j), Event::Arrive { job: i })));
    }
    // Per queue: pending jobs by (priority high first, arrival, file order).
    let mut pending: Vec<BTreeSet<(Reverse<i32>, u64, usize)>> = vec![BTreeSet::new(); queue_count];
    let mut pending_count = 0usize;
    let mut started: u64 = 0;
    let mut delays = Vec::new();
    let mut running_util = 0.0f64; // milli-GPU in use (simulated)
    let mut running_jobs: BTreeMap<AllocId, RunningJob> = BTreeMap::new();
    let mut tenant_gpu_s: BTreeMap<String, f64> = BTreeMap::new();
    let mut tenant_running = vec![0u64; tenants.len()];
    let mut tenant_pending = vec![0usize; tenants.len()];
    let window_s = ((last_arrival - start) as f64 / JAIN_WINDOWS as f64).max(1.0);
    let mut window_gpu_s = vec![vec![0.0f64; tenants.len()]; JAIN_WINDOWS];
    let mut window_active = vec![vec![false; tenants.len()]; JAIN_WINDOWS];
    // The first start each blocked job was promised.
    let mut promised: BTreeMap<usize, u64> = BTreeMap::new();
    let mut last_reservation: Option<(usize, u64)> = None;
    // Quotas, where the tree declares any; jobs that ever waited on one.
    let mut quotas = match order {
        Order::FairShare(tree) => Some(QuotaBook::new(tree.clone())).filter(QuotaBook::has_quotas),
        Order::Fifo => None,
    };
    let mut quota_waited: BTreeSet<usize> = BTreeSet::new();
    // Preemption: allocations signalled and in their grace period, and what was lost.
    let mut terminating: BTreeSet<AllocId> = BTreeSet::new();
    let mut ever_started: BTreeSet<usize> = BTreeSet::new();
    // Waiting jobs by reason after the last pass, and job-seconds waited by reason.
    let mut waiting_now: BTreeMap<String, u64> = BTreeMap::new();
    let mut wait_job_s: BTreeMap<String, u64> = BTreeMap::new();
    // Dependencies by index; a job naming one that is not in the replay can never start.
    let index_of: BTreeMap<&str, usize> = jobs.iter().enumerate().map(|(i, j)| (j.name.as_str(), i)).collect();
    let mut dependency_never = 0u64;
    let mut unknown_dependency: BTreeSet<usize> = BTreeSet::new();
    let deps: Vec<Vec<(DependencyKind, usize)>> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            j.after
                .iter()
                .filter_map(|d| match index_of.get(d.job.as_str()) {
                    Some(&k) => Some((d.kind, k)),
                    None => {
                        unknown_dependency.insert(i);
                        None
                    }
                })
                .collect()
        })
        .collect();
    let mut finished = vec![false; jobs.len()];
    let mut eligible_at: Vec<u64> = jobs.iter().map(arrival_of).collect();
    let mut waiting_on_deps: BTreeSet<usize> = BTreeSet::new();
    // No failures are modelled: an afternotok dependency that has ended can never be met, nor
    // can one on a job that is not in the replay.
    let never_satisfiable = |d: &[(DependencyKind, usize)], finished: &[bool]| {
        d.iter().any(|&(kind, k)| kind == DependencyKind::AfterNotOk && finished[k])
    };
    let (mut preemptions, mut lost_gpu_s) = (0u64, 0.0f64);
    let mut late = 0u64;
    let mut series = Vec::with_capacity(SAMPLES + 1);
    let (mut area_alloc, mut area_util, mut last_t) = (0.0f64, 0.0f64, start);
    let mut peak_alloc = 0.0f64;
    let mut next_sample = start;
    let utilization = |job: usize| jobs[job].utilization.unwrap_or_else(|| drawn_utilization(seed, job));
    let use_priority = fair.is_some();
    let priority = |job: usize| if use_priority { jobs[job].priority } else { 0 };

    while let Some(Reverse((t, event))) = events.pop() {
        // Integrate the state that held until now, and sample the series.
        let alloc_now = engine.state().used_milli() as f64;
        peak_alloc = peak_alloc.max(alloc_now);
        let counted = t.min(last_arrival).saturating_sub(last_t.min(last_arrival)) as f64;
        area_alloc += alloc_now * counted;
        area_util += running_util * counted;
        // Per-tenant GPU time, window by window.
        let (mut from, to) = ((last_t - start) as f64, (t.min(last_arrival) - start) as f64);
        while from < to {
            let w = ((from / window_s) as usize).min(JAIN_WINDOWS - 1);
            let until = (((w + 1) as f64) * window_s).min(to);
            for (k, &milli) in tenant_running.iter().enumerate() {
                window_gpu_s[w][k] += milli as f64 / 1000.0 * (until - from);
            }
            from = if until > from { until } else { to };
        }
        while next_sample <= t && series.len() <= SAMPLES {
            series.push(Sample {
                time_s: next_sample,
                alloc_pct: alloc_now / capacity * 100.0,
                util_pct: running_util / capacity * 100.0,
                running: running_jobs.len() as u64,
                queued: pending_count as u64,
            });
            next_sample += step;
        }
        for (reason, &n) in &waiting_now {
            *wait_job_s.entry(reason.clone()).or_default() += n * (t - last_t);
        }
        last_t = t;
        match event {
            Event::Arrive { job } if unknown_dependency.contains(&job) => dependency_never += 1,
            Event::Arrive { job } => {
                if never_satisfiable(&deps[job], &finished) {
                    dependency_never += 1;
                } else if deps[job].iter().all(|&(_, d)| finished[d]) {
                    eligible_at[job] = t;
                    pending[queue_of[job]].insert((Reverse(priority(job)), t, job));
                    pending_count += 1;
                    tenant_pending[tenant_of[job]] += 1;
                } else {
                    waiting_on_deps.insert(job);
                }
            }
            Event::Depart { job, alloc } | Event::Kill { job, alloc } => {
                // A job killed earlier still has its planned departure queued: nothing to do.
                let Some(ended) = running_jobs.remove(&alloc) else { continue };
                engine.release(alloc).expect("a running job's allocation exists");
                terminating.remove(&alloc);
                let milli = ended.milli;
                running_util -= milli as f64 * utilization(job);
                tenant_running[tenant_of[job]] -= milli;
                if let Some(fs) = fair.as_mut() {
                    fs.stop(queue_of[job], ended.held, t);
                }
                if let Some(book) = quotas.as_mut() {
                    book.refund(queue_of[job], &ended.demand);
                }
                if matches!(event, Event::Depart { .. }) {
                    // It ended (successfully: failures are not modelled); wake its dependents.
                    finished[job] = true;
                    let woken: Vec<usize> =
                        waiting_on_deps.iter().copied().filter(|&w| deps[w].iter().any(|&(_, d)| d == job)).collect();
                    for w in woken {
                        if never_satisfiable(&deps[w], &finished) {
                            waiting_on_deps.remove(&w);
                            dependency_never += 1;
                        } else if deps[w].iter().all(|&(_, d)| finished[d]) {
                            waiting_on_deps.remove(&w);
                            eligible_at[w] = t;
                            pending[queue_of[w]].insert((Reverse(priority(w)), t, w));
                            pending_count += 1;
                            tenant_pending[tenant_of[w]] += 1;
                        }
                    }
                }
                if matches!(event, Event::Kill { .. }) {
                    // Its work is lost (no checkpoints modelled) and it waits again, with its
                    // original arrival; the GPU time it was credited past now is taken back.
                    preemptions += 1;
                    lost_gpu_s += milli as f64 / 1000.0 * (t - ended.started_at) as f64;
                    *tenant_gpu_s.entry(jobs[job].tenant.clone()).or_default() -=
                        milli as f64 / 1000.0 * ended.planned_end.saturating_sub(t) as f64;
                    pending[queue_of[job]].insert((Reverse(priority(job)), eligible_at[job], job));
                    pending_count += 1;
                    tenant_pending[tenant_of[job]] += 1;
                }
            }
        }
        // Scheduling pass: pick the next queue's first untried job (FIFO: the one queue); after
        // a queue's first refusal, later jobs are tried as the backfill mode allows.
        let scan_max = match backfill {
            Backfill::Off => 0,
            Backfill::Greedy | Backfill::Reserve => BACKFILL_SCAN_MAX,
        };
        let mut blocked = vec![false; queue_count];
        let mut scanned = vec![0usize; queue_count];
        let mut refused: BTreeSet<usize> = BTreeSet::new();
        // The pass's reservation (job, start) and the fleet at its start.
        let mut reservation: Option<(usize, u64)> = None;
        let mut shadow: Option<Shadow> = None;
        let mut first_refused: Option<usize> = None;
        let mut why: BTreeMap<usize, String> = BTreeMap::new();
        loop {
            let mut candidates: Vec<(Candidate, usize)> = Vec::new();
            for (q, set) in pending.iter().enumerate() {
                if blocked[q] && scanned[q] >= scan_max {
                    continue;
                }
                if let Some(&(Reverse(p), arrived, job)) = set.iter().find(|(_, _, j)| !refused.contains(j)) {
                    candidates.push((Candidate { queue: q, priority: p, submitted_s: arrived }, job));
                }
            }
            let pick = match fair.as_mut() {
                None => (!candidates.is_empty()).then_some(0),
                Some(fs) => fs.pick(&candidates.iter().map(|(c, _)| *c).collect::<Vec<_>>(), t),
            };
            let Some(pick) = pick else { break };
            let (candidate, job) = candidates[pick];
            let q = candidate.queue;
            if blocked[q] {
                scanned[q] += 1;
            }
            let duration = jobs[job].duration_s;
            // Past the reservation, a job that would still run at the reserved start must leave
            // room for the reserved job then, on the GPUs it actually got.
            let check = reservation.filter(|&(_, start_s)| duration.is_none_or(|d| t + d > start_s));
            let before = engine.state().used_milli();
            let mut placed = match engine.place(&jobs[job].job) {
                Ok(alloc) => Some(alloc),
                Err(reasons) => {
                    // The engine's leading reason, by kind (its figures vary node by node).
                    let kind = reasons
                        .first()
                        .and_then(|r| serde_json::to_value(&r.reason).ok())
                        .and_then(|v| v.get("reason").and_then(|k| k.as_str()).map(str::to_string))
                        .unwrap_or_else(|| "unknown".into());
                    why.insert(job, format!("resources: {kind}"));
                    None
                }
            };
            // Quota: the queue (and its ancestors) may take what this placement gives it.
            let mut demand = Vec::new();
            if let (Some(alloc), Some(book)) = (placed, quotas.as_ref()) {
                demand = engine.quota_demand(alloc).expect("just placed");
                if book.check(q, &demand).is_err() {
                    engine.release(alloc).expect("just placed");
                    placed = None;
                    quota_waited.insert(job);
                    why.insert(job, "quota".into());
                }
            }
            if let (Some(alloc), Some((reserved, _)), Some(shadow)) = (placed, check, shadow.as_mut())
                && shadow.delays(engine, alloc, &jobs[reserved].job)
            {
                engine.release(alloc).expect("just placed");
                placed = None;
                why.insert(job, "reservation (would delay a reserved start)".into());
            }
            match placed {
                Some(alloc) => {
                    pending[q].remove(&(Reverse(candidate.priority), candidate.submitted_s, job));
                    pending_count -= 1;
                    tenant_pending[tenant_of[job]] -= 1;
                    let milli = engine.state().used_milli() - before;
                    let held = engine.held(alloc, &billing).expect("just placed");
                    if let Some(fs) = fair.as_mut() {
                        fs.start(q, held, t);
                    }
                    if let Some(book) = quotas.as_mut() {
                        book.charge(q, &demand);
                    }
                    if promised.get(&job).is_some_and(|&p| t > p) {
                        late += 1;
                    }
                    let j = &jobs[job];
                    // A preempted job that starts again keeps its first wait.
                    if ever_started.insert(job) {
                        delays.push(t - eligible_at[job]);
                        started += 1;
                    }
                    running_util += milli as f64 * utilization(job);
                    tenant_running[tenant_of[job]] += milli;
                    let duration = duration.unwrap_or_else(|| end.saturating_sub(t));
                    running_jobs.insert(
                        alloc,
                        RunningJob {
                            job,
                            started_at: t,
                            planned_end: t + duration,
                            limit_end: j.duration_s.map(|_| t + duration),
                            milli,
                            held,
                            demand: std::mem::take(&mut demand),
                        },
                    );
                    *tenant_gpu_s.entry(j.tenant.clone()).or_default() += milli as f64 / 1000.0 * duration as f64;
                    events.push(Reverse((t + duration, Event::Depart { job, alloc })));
                }
                None => {
                    refused.insert(job);
                    blocked[q] = true;
                    first_refused.get_or_insert(job);
                    if backfill == Backfill::Reserve
                        && reservation.is_none()
                        && let Some((reserved, fleet_then)) =
                            reserve(engine, &jobs[job].job, job, &running_jobs, t, &mut last_reservation)
                    {
                        promised.entry(job).or_insert(reserved.1);
                        reservation = Some(reserved);
                        shadow = Some(fleet_then);
                    }
                }
            }
        }
        // Preemption: the first job the pass could not start may stop lower-priority work
        // (one preemption in flight at a time; the victims are signalled now and killed when
        // their grace period ends, and the preemptor, first by priority, starts then).
        if options.preempt
            && terminating.is_empty()
            && let Some(job) = first_refused
        {
            let victims: Vec<Victim> = running_jobs
                .iter()
                .map(|(&alloc, r)| {
                    let victim = &jobs[r.job];
                    let ran = t - r.started_at;
                    Victim {
                        alloc,
                        priority: victim.priority,
                        preemptible: victim.lifecycle.preemptible,
                        borrower: false,
                        work_lost_s: ran,
                        min_runtime_left_s: victim.lifecycle.min_runtime_s.saturating_sub(ran),
                    }
                })
                .collect();
            let right = Right { priority: jobs[job].priority, within_guarantee: false };
            if let Some(chosen) = engine.plan_preemption(&jobs[job].job, right, &victims) {
                for alloc in chosen {
                    let victim = running_jobs[&alloc].job;
                    terminating.insert(alloc);
                    events.push(Reverse((t + jobs[victim].lifecycle.grace_s, Event::Kill { job: victim, alloc })));
                }
            }
        }
        // Why each job still waits, held until the next event.
        waiting_now.clear();
        for set in &pending {
            for &(_, _, job) in set {
                let reason = if options.preempt && first_refused == Some(job) && !terminating.is_empty() {
                    "preemption (victims in their grace period)".to_string()
                } else {
                    why.get(&job).cloned().unwrap_or_else(|| "queue order (not reached this pass)".to_string())
                };
                *waiting_now.entry(reason).or_default() += 1;
            }
        }
        if !waiting_on_deps.is_empty() {
            waiting_now.insert("dependency".into(), waiting_on_deps.len() as u64);
        }
        // Who wanted GPUs in this window (waiting or holding).
        if t < last_arrival {
            let w = (((t - start) as f64 / window_s) as usize).min(JAIN_WINDOWS - 1);
            for k in 0..tenants.len() {
                window_active[w][k] |= tenant_pending[k] > 0 || tenant_running[k] > 0;
            }
        }
    }
    let span = (last_arrival - start) as f64;
    delays.sort_unstable();
    let total_gpu_s: f64 = tenant_gpu_s.values().sum();
    let jains: Vec<f64> = (0..JAIN_WINDOWS)
        .filter_map(|w| {
            let x: Vec<f64> = (0..tenants.len()).filter(|&k| window_active[w][k]).map(|k| window_gpu_s[w][k]).collect();
            if x.len() < 2 { None } else { jain(&x) }
        })
        .collect();
    Ok(ReplayResult {
        policy: engine.config().policy.name().to_string(),
        order: order.name().to_string(),
        backfill: backfill.name(),
        reserved: promised.len() as u64,
        reserved_late: late,
        quota_waited: quota_waited.len() as u64,
        preemptions,
        preempted_gpu_s_lost: lost_gpu_s,
        dependency_never,
        waiting_on_dependencies: waiting_on_deps.len() as u64,
        wait_job_s_by_reason: wait_job_s,
        seed,
        pods: jobs.len(),
        started,
        never_started: pending_count as u64,
        delay_p50_s: percentile(&delays, 0.50),
        delay_p90_s: percentile(&delays, 0.90),
        delay_p99_s: percentile(&delays, 0.99),
        delay_max_s: delays.last().copied().unwrap_or(0),
        mean_alloc_pct: area_alloc / span / capacity * 100.0,
        mean_util_pct: area_util / span / capacity * 100.0,
        peak_alloc_pct: peak_alloc.max(engine.state().used_milli() as f64) / capacity * 100.0,
        tenant_gpu_share_pct: tenant_gpu_s
            .into_iter()
            .map(|(k, v)| (k, if total_gpu_s > 0.0 { v / total_gpu_s * 100.0 } else { 0.0 }))
            .collect(),
        jain_mean: (!jains.is_empty()).then(|| jains.iter().sum::<f64>() / jains.len() as f64),
        jain_min: jains.iter().copied().reduce(f64::min),
        series,
    })
}
