//! Protocol B — time replay: jobs arrive at their arrival time and run for their duration
//! once placed; a job that does not fit waits in a FIFO queue and is retried whenever
//! capacity frees. Measures allocation and (simulated) utilization over time, queueing delay,
//! and each tenant's share of GPU time (the job's queue; for the Alibaba trace, the pod's QoS
//! class).
//!
//! One replay loop ([`replay`]) over [`SimJob`]s; two adapters feed it: the Alibaba trace
//! ([`run`]: pods with creation and deletion times on the trace's nodes) and the native trace
//! ([`run_trace`]: job specs from JSON lines on a fleet file).
//!
//! The queue is FIFO with bounded backfill: after the head fails, up to `BACKFILL_SCAN_MAX`
//! later pods are tried (no reservation yet: the queue-policy work adds that). Everything runs
//! on a virtual clock in trace seconds; same trace, policy and seed ⇒ same result.

use crate::alibaba::{TraceNode, TracePod};
use crate::trace::{SimFleet, compile_pods, typical_shapes};
use gantry_catalog::Catalog;
use gantry_engine::rng::mix;
use gantry_engine::{AllocId, CompiledJob, Engine, EngineConfig, EngineError, Policy, SearchLimits};
use gantry_spec::TraceJob;
use gantry_types::Fleet;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// Pods tried past a blocked queue head per scheduling pass: bounds the work per event.
pub const BACKFILL_SCAN_MAX: usize = 32;
/// Points of the time series (evenly spaced over the trace's span).
pub const SAMPLES: usize = 200;

/// One point of the time series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub time_s: u64,
    /// GPU compute handed out, % of capacity.
    pub alloc_pct: f64,
    /// GPU compute actually used (simulated), % of capacity.
    pub util_pct: f64,
    pub running: u64,
    pub queued: u64,
}

/// Outcome of a time replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayResult {
    pub policy: String,
    pub seed: u64,
    /// Jobs in the trace (pods, for the Alibaba trace).
    pub pods: usize,
    pub started: u64,
    /// Pods still queued when the trace ended.
    pub never_started: u64,
    /// Queueing delay of started pods, seconds.
    pub delay_p50_s: u64,
    pub delay_p90_s: u64,
    pub delay_p99_s: u64,
    /// Time-averaged allocation and utilization between the first and the last arrival, %.
    pub mean_alloc_pct: f64,
    pub mean_util_pct: f64,
    /// Highest allocation reached, %.
    pub peak_alloc_pct: f64,
    /// Each tenant's share of the GPU time allocated, %.
    pub tenant_gpu_share_pct: BTreeMap<String, f64>,
    pub series: Vec<Sample>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A running pod ends (ordered before arrivals at the same second: capacity first).
    Depart {
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

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One job of a replay, ready for the engine.
#[derive(Debug)]
pub struct SimJob {
    pub name: String,
    /// Whose GPU time it is (the job's queue).
    pub tenant: String,
    /// Seconds on the trace's clock.
    pub arrival_s: u64,
    /// Run time once started; `None` = until the replay ends.
    pub duration_s: Option<u64>,
    /// Busy share of its GPUs, 0..=1; `None` = drawn with the seed.
    pub utilization: Option<f64>,
    pub job: CompiledJob,
}

/// Replay the Alibaba trace's `pods` (with creation times; pods without one arrive with the
/// first, without a deletion time run to the end) on `nodes` in `node_order`. `compress`
/// divides the time between arrivals (not the pods' durations): the Alibaba trace spreads
/// 8,152 pods over 149 days, a mean load of 0.2 %, so a useful replay compresses it.
pub fn run(
    nodes: &[TraceNode],
    pods: &[TracePod],
    node_order: &[usize],
    policy: Policy,
    seed: u64,
    compress: u64,
) -> Result<ReplayResult, EngineError> {
    let ordered: Vec<TraceNode> = node_order.iter().map(|&i| nodes[i].clone()).collect();
    let fleet = SimFleet::from_trace(&ordered);
    let probe = Engine::new(&fleet.fleet, fleet.catalog, EngineConfig::default())?;
    let shapes = typical_shapes(&probe, pods, 95);
    // A live-like bounded search: a replay makes many more attempts than Protocol A.
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: Some(shapes) };
    let mut engine = Engine::new(&fleet.fleet, fleet.catalog, config)?;
    let compiled = compile_pods(&engine, pods)?;
    let origin = pods.iter().filter_map(|p| p.creation_s).min().unwrap_or(0);
    let jobs: Vec<SimJob> = pods
        .iter()
        .zip(compiled)
        .map(|(p, job)| SimJob {
            name: p.name.clone(),
            tenant: if p.qos.is_empty() { "default".to_string() } else { p.qos.clone() },
            arrival_s: p.creation_s.unwrap_or(origin),
            duration_s: match (p.creation_s, p.deletion_s) {
                (Some(c), Some(d)) => Some(d.saturating_sub(c)),
                _ => None,
            },
            utilization: None,
            job,
        })
        .collect();
    Ok(replay(&mut engine, &jobs, seed, compress))
}

/// Replay a native trace on `fleet` (FGD's task types learned from the jobs placed).
pub fn run_trace(
    fleet: &Fleet,
    catalog: &'static Catalog,
    trace: &[TraceJob],
    policy: Policy,
    seed: u64,
    compress: u64,
) -> Result<ReplayResult, EngineError> {
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: None };
    let mut engine = Engine::new(fleet, catalog, config)?;
    let jobs = trace
        .iter()
        .map(|t| {
            Ok(SimJob {
                name: t.job.name.clone(),
                tenant: t.job.queue.clone(),
                arrival_s: t.arrival_s,
                duration_s: t.duration_s,
                utilization: t.utilization,
                job: engine.compile(&t.job)?,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok(replay(&mut engine, &jobs, seed, compress))
}

/// The replay loop over `engine` (empty at the start). Same jobs, engine and seed ⇒ same result.
pub fn replay(engine: &mut Engine, jobs: &[SimJob], seed: u64, compress: u64) -> ReplayResult {
    let compress = compress.max(1);
    let capacity = (engine.state().gpus.len() as f64 * 1000.0).max(1.0);
    let origin = jobs.iter().map(|j| j.arrival_s).min().unwrap_or(0);
    let arrival_of = |j: &SimJob| origin + (j.arrival_s - origin) / compress;
    let start = origin;
    // Means are taken over the arrival window: long-running jobs are censored at the trace's
    // end, and averaging over their tail would dilute the busy period to nothing.
    let last_arrival = jobs.iter().map(arrival_of).max().unwrap_or(start).max(start + 1);
    let end = jobs.iter().map(|j| arrival_of(j) + j.duration_s.unwrap_or(0)).max().unwrap_or(start).max(start + 1);
    let step = ((last_arrival - start) / SAMPLES as u64).max(1);

    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, j) in jobs.iter().enumerate() {
        events.push(Reverse((arrival_of(j), Event::Arrive { job: i })));
    }
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut started: u64 = 0;
    let mut delays = Vec::new();
    let mut running_util = 0.0f64; // milli-GPU in use (simulated)
    let mut running: u64 = 0;
    let mut granted: BTreeMap<usize, u64> = BTreeMap::new(); // job → milli-GPU allocated
    let mut tenant_gpu_s: BTreeMap<String, f64> = BTreeMap::new();
    let mut series = Vec::with_capacity(SAMPLES + 1);
    let (mut area_alloc, mut area_util, mut last_t) = (0.0f64, 0.0f64, start);
    let mut peak_alloc = 0.0f64;
    let mut next_sample = start;
    let utilization = |job: usize| jobs[job].utilization.unwrap_or_else(|| drawn_utilization(seed, job));

    while let Some(Reverse((t, event))) = events.pop() {
        // Integrate the state that held until now, and sample the series.
        let alloc_now = engine.state().used_milli() as f64;
        peak_alloc = peak_alloc.max(alloc_now);
        let counted = t.min(last_arrival).saturating_sub(last_t.min(last_arrival)) as f64;
        area_alloc += alloc_now * counted;
        area_util += running_util * counted;
        while next_sample <= t && series.len() <= SAMPLES {
            series.push(Sample {
                time_s: next_sample,
                alloc_pct: alloc_now / capacity * 100.0,
                util_pct: running_util / capacity * 100.0,
                running,
                queued: queue.len() as u64,
            });
            next_sample += step;
        }
        last_t = t;
        match event {
            Event::Arrive { job } => queue.push_back(job),
            Event::Depart { job, alloc } => {
                engine.release(alloc).expect("a running job's allocation exists");
                running -= 1;
                running_util -= granted.remove(&job).unwrap_or(0) as f64 * utilization(job);
            }
        }
        // Scheduling pass: FIFO, then bounded backfill past a blocked head.
        let mut blocked = false;
        let mut scanned = 0;
        let mut i = 0;
        while i < queue.len() {
            if blocked {
                if scanned >= BACKFILL_SCAN_MAX {
                    break;
                }
                scanned += 1;
            }
            let job = queue[i];
            let before = engine.state().used_milli();
            match engine.place(&jobs[job].job) {
                Ok(alloc) => {
                    queue.remove(i);
                    let milli = engine.state().used_milli() - before;
                    let j = &jobs[job];
                    delays.push(t - arrival_of(j));
                    started += 1;
                    running += 1;
                    granted.insert(job, milli);
                    running_util += milli as f64 * utilization(job);
                    let duration = j.duration_s.unwrap_or_else(|| end.saturating_sub(t));
                    *tenant_gpu_s.entry(j.tenant.clone()).or_default() += milli as f64 / 1000.0 * duration as f64;
                    events.push(Reverse((t + duration, Event::Depart { job, alloc })));
                }
                Err(_) => {
                    blocked = true;
                    i += 1;
                }
            }
        }
    }
    let span = (last_arrival - start) as f64;
    delays.sort_unstable();
    let total_gpu_s: f64 = tenant_gpu_s.values().sum();
    ReplayResult {
        policy: engine.config().policy.name().to_string(),
        seed,
        pods: jobs.len(),
        started,
        never_started: queue.len() as u64,
        delay_p50_s: percentile(&delays, 0.50),
        delay_p90_s: percentile(&delays, 0.90),
        delay_p99_s: percentile(&delays, 0.99),
        mean_alloc_pct: area_alloc / span / capacity * 100.0,
        mean_util_pct: area_util / span / capacity * 100.0,
        peak_alloc_pct: peak_alloc.max(engine.state().used_milli() as f64) / capacity * 100.0,
        tenant_gpu_share_pct: tenant_gpu_s
            .into_iter()
            .map(|(k, v)| (k, if total_gpu_s > 0.0 { v / total_gpu_s * 100.0 } else { 0.0 }))
            .collect(),
        series,
    }
}
