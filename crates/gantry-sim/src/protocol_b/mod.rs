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
//! How the waiting queue is ordered, what may pass a blocked job and whether jobs may be
//! preempted are [`ReplayOptions`] (`options.rs`); what is measured is [`ReplayResult`]
//! (`result.rs`); the loop is `replay.rs`, over the engine's `Scheduler` (the same cycle the
//! live controller runs). Everything runs on a virtual clock in trace seconds;
//! same trace, options, policy and seed ⇒ same result.

mod operator;
mod options;
mod replay;
mod result;

pub use gantry_engine::sched::PREEMPTORS_MAX;
pub(crate) use operator::{Moment, Operator};
pub use options::{BACKFILL_WORK_MAX, Backfill, Order, RESERVE_DEPTH_MAX, ReplayOptions};
pub use replay::replay;
pub(crate) use replay::replay_with;
pub use result::{BrokenPromise, JAIN_WINDOWS, JobEvent, ReplayResult, SAMPLES, Sample, Waits};

use crate::alibaba::{TraceNode, TracePod};
use crate::trace::{SimFleet, compile_pods, typical_shapes};
use gantry_catalog::Catalog;
use gantry_engine::{CompiledJob, Engine, EngineConfig, EngineError, Policy, SearchLimits};
use gantry_spec::TraceJob;
use gantry_types::Fleet;

/// One job of a replay, ready for the engine.
#[derive(Debug)]
pub struct SimJob {
    /// The job as submitted (its queue is the tenant whose GPU time it is).
    pub spec: gantry_types::Job,
    /// Seconds on the trace's clock.
    pub arrival_s: u64,
    /// Run time once started; `None` = until the replay ends.
    pub duration_s: Option<u64>,
    /// Busy share of its GPUs, 0..=1; `None` = drawn with the seed.
    pub utilization: Option<f64>,
    /// `spec` compiled against the replay's engine, once.
    pub job: CompiledJob,
    /// Seconds it waits for a first start before it gives up (a deployment that goes
    /// elsewhere); `None` = for ever.
    pub patience_s: Option<u64>,
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
    options: &ReplayOptions,
) -> Result<ReplayResult, crate::SimError> {
    let ordered: Vec<TraceNode> = node_order.iter().map(|&i| nodes[i].clone()).collect();
    let fleet = SimFleet::from_trace(&ordered);
    let probe = Engine::new(&fleet.fleet, fleet.catalog, EngineConfig::default())?;
    let shapes = typical_shapes(&probe, pods, 95);
    // A live-like bounded search: a replay makes many more attempts than Protocol A.
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: Some(shapes) };
    let engine = Engine::new(&fleet.fleet, fleet.catalog, config)?;
    let compiled = compile_pods(&engine, pods)?;
    let origin = pods.iter().filter_map(|p| p.creation_s).min().unwrap_or(0);
    let jobs: Vec<SimJob> = pods
        .iter()
        .zip(compiled)
        .map(|(p, job)| SimJob {
            spec: crate::trace::job_for(p, p.name.clone()),
            arrival_s: p.creation_s.unwrap_or(origin),
            duration_s: match (p.creation_s, p.deletion_s) {
                (Some(c), Some(d)) => Some(d.saturating_sub(c)),
                _ => None,
            },
            utilization: None,
            job,
            patience_s: None,
        })
        .collect();
    replay(engine, jobs, seed, options)
}

/// Replay a native trace on `fleet` (FGD's task types learned from the jobs placed).
pub fn run_trace(
    fleet: &Fleet,
    catalog: &'static Catalog,
    trace: &[TraceJob],
    policy: Policy,
    seed: u64,
    options: &ReplayOptions,
) -> Result<ReplayResult, crate::SimError> {
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: None };
    let engine = Engine::new(fleet, catalog, config)?;
    let jobs = trace
        .iter()
        .map(|t| {
            Ok(SimJob {
                spec: t.job.clone(),
                arrival_s: t.arrival_s,
                duration_s: t.duration_s,
                utilization: t.utilization,
                job: engine.compile(&t.job)?,
                patience_s: None,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    replay(engine, jobs, seed, options)
}
