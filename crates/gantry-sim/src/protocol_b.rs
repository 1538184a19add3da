//! Protocol B — time replay: pods arrive at their creation time and run for their traced
//! duration (deletion − creation) once placed; a pod that does not fit waits in a FIFO queue
//! and is retried whenever capacity frees. Measures allocation and (simulated) utilization
//! over time, queueing delay, and each tenant's share of GPU time (the pod's QoS class is its
//! tenant when the trace names none).
//!
//! The queue is FIFO with bounded backfill: after the head fails, up to `BACKFILL_SCAN_MAX`
//! later pods are tried (no reservation yet: the queue-policy work adds that). Everything runs
//! on a virtual clock in trace seconds; same trace, policy and seed ⇒ same result.

use crate::alibaba::{TraceNode, TracePod};
use crate::trace::{SimFleet, compile_pods, typical_shapes};
use gantry_engine::rng::mix;
use gantry_engine::{AllocId, Engine, EngineConfig, EngineError, Policy, SearchLimits};
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
        pod: usize,
        alloc: AllocId,
    },
    Arrive {
        pod: usize,
    },
}

/// Simulated utilization of a pod's allocation: a seeded draw in [0.2, 1.0), stable per pod.
fn utilization(seed: u64, pod: usize) -> f64 {
    0.2 + 0.8 * (mix(seed ^ (pod as u64).wrapping_mul(0x9E37_79B9)) >> 11) as f64 / (1u64 << 53) as f64
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Replay `pods` (with creation times; pods without one arrive at 0, without a deletion time
/// run to the end) on `nodes` in `node_order`. `compress` divides the time between arrivals
/// (not the pods' durations): the Alibaba trace spreads 8,152 pods over 149 days, a mean load
/// of 0.2 %, so a useful replay compresses it.
pub fn run(
    nodes: &[TraceNode],
    pods: &[TracePod],
    node_order: &[usize],
    policy: Policy,
    seed: u64,
    compress: u64,
) -> Result<ReplayResult, EngineError> {
    let compress = compress.max(1);
    let origin = pods.iter().filter_map(|p| p.creation_s).min().unwrap_or(0);
    let pods: Vec<TracePod> = pods
        .iter()
        .map(|p| {
            let mut q = p.clone();
            if let Some(c) = p.creation_s {
                let arrival = origin + (c - origin) / compress;
                q.creation_s = Some(arrival);
                q.deletion_s = p.deletion_s.map(|d| arrival + (d - c));
            }
            q
        })
        .collect();
    let pods = &pods[..];
    let ordered: Vec<TraceNode> = node_order.iter().map(|&i| nodes[i].clone()).collect();
    let fleet = SimFleet::from_trace(&ordered);
    let capacity = fleet.capacity_milli.max(1) as f64;
    let probe = Engine::new(&fleet.fleet, fleet.catalog, EngineConfig::default())?;
    let shapes = typical_shapes(&probe, pods, 95);
    // A live-like bounded search: a replay makes many more attempts than Protocol A.
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: Some(shapes) };
    let mut engine = Engine::new(&fleet.fleet, fleet.catalog, config)?;
    let jobs = compile_pods(&engine, pods)?;

    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (i, p) in pods.iter().enumerate() {
        events.push(Reverse((p.creation_s.unwrap_or(0), Event::Arrive { pod: i })));
    }
    let start = pods.iter().filter_map(|p| p.creation_s).min().unwrap_or(0);
    // Means are taken over the arrival window: the trace's long-running pods are censored at
    // its end, and averaging over their tail would dilute the busy period to nothing.
    let last_arrival = pods.iter().filter_map(|p| p.creation_s).max().unwrap_or(start).max(start + 1);
    let end = pods.iter().filter_map(|p| p.deletion_s.or(p.creation_s)).max().unwrap_or(start).max(start + 1);
    let step = ((last_arrival - start) / SAMPLES as u64).max(1);

    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut started_at: BTreeMap<usize, u64> = BTreeMap::new();
    let mut delays = Vec::new();
    let mut running_util = 0.0f64; // milli-GPU in use (simulated)
    let mut running: u64 = 0;
    let mut tenant_gpu_s: BTreeMap<String, f64> = BTreeMap::new();
    let mut series = Vec::with_capacity(SAMPLES + 1);
    let (mut area_alloc, mut area_util, mut last_t) = (0.0f64, 0.0f64, start);
    let mut peak_alloc = 0.0f64;
    let mut next_sample = start;

    while let Some(Reverse((t, event))) = events.pop() {
        let t = t.max(start);
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
            Event::Arrive { pod } => queue.push_back(pod),
            Event::Depart { pod, alloc } => {
                engine.release(alloc).expect("a running pod's allocation exists");
                running -= 1;
                running_util -= pods[pod].total_gpu_milli() as f64 * utilization(seed, pod);
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
            let pod = queue[i];
            match engine.place(&jobs[pod]) {
                Ok(alloc) => {
                    queue.remove(i);
                    let p = &pods[pod];
                    let arrived = p.creation_s.unwrap_or(0).max(start);
                    delays.push(t - arrived);
                    started_at.insert(pod, t);
                    running += 1;
                    running_util += p.total_gpu_milli() as f64 * utilization(seed, pod);
                    let duration = match (p.creation_s, p.deletion_s) {
                        (Some(c), Some(d)) => d - c,
                        _ => end.saturating_sub(t),
                    };
                    let tenant = if p.qos.is_empty() { "default".to_string() } else { p.qos.clone() };
                    *tenant_gpu_s.entry(tenant).or_default() += p.total_gpu_milli() as f64 / 1000.0 * duration as f64;
                    events.push(Reverse((t + duration, Event::Depart { pod, alloc })));
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
    Ok(ReplayResult {
        policy: policy.name().to_string(),
        seed,
        pods: pods.len(),
        started: started_at.len() as u64,
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
    })
}
