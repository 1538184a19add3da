//! Placement benchmark: throughput and latency on a synthetic 10,000-node × 8-GPU fleet, and
//! the memory the engine's state takes. A custom harness (not criterion) because the targets
//! are a throughput, a p99 and a memory figure, which criterion does not report.
//!
//! Run: `cargo bench -p gantry-engine --bench placement` (add `-- --quick` for a short run).
//! Targets (issue 2): ≥ 100,000 single-task placements/s on one core, p99 ≤ 1 ms for a
//! 64-GPU gang, state for 80k GPUs ≤ 500 MiB.

use gantry_catalog::Catalog;
use gantry_engine::{AllocId, CompiledJob, Engine, EngineConfig, Policy, SearchLimits};
use gantry_types::{GpuRequest, Isolation, Topology, TopologyLevel};
use std::collections::VecDeque;

#[path = "common/measure.rs"]
mod measure;
#[path = "common/mixed_fleet.rs"]
mod mixed_fleet;
use measure::{percentile, rss_bytes};
use std::time::{Duration, Instant};

const NODES: usize = 10_000;
const GPUS_PER_NODE: usize = mixed_fleet::GPUS_PER_NODE;

fn limits() -> SearchLimits {
    let mut limits = SearchLimits::default();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--feasible") {
        limits.feasible_nodes_max = args[i + 1].parse().expect("--feasible N");
    }
    limits
}

fn engine(policy: Policy) -> Engine {
    let config = EngineConfig { policy, seed: 1, limits: limits(), shapes: None };
    Engine::new(&mixed_fleet::fleet(NODES), Catalog::embedded(), config).expect("bench fleet is valid")
}

/// Keep the fleet near `target` allocated by releasing the oldest allocations.
fn release_to(engine: &mut Engine, live: &mut VecDeque<AllocId>, target_milli: u64) {
    while engine.state().used_milli() > target_milli {
        let Some(id) = live.pop_front() else { break };
        engine.release(id).expect("live allocation");
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let placements = if quick { 20_000 } else { 200_000 };
    let gangs = if quick { 200 } else { 2_000 };
    println!("gantry placement benchmark: {NODES} nodes x {GPUS_PER_NODE} GPUs, policy default, limits {:?}", limits());

    // Memory.
    let rss_before = rss_bytes();
    let mut engine = engine(Policy::Default);
    let rss_after = rss_bytes();
    let gpus = engine.state().gpus.len();
    println!(
        "\nstate: {gpus} GPUs; engine state ~{:.1} MiB by size accounting; process RSS grew {} while building it",
        engine.state().approx_bytes() as f64 / (1 << 20) as f64,
        match (rss_before, rss_after) {
            (Some(a), Some(b)) => format!("{:.1} MiB", b.saturating_sub(a) as f64 / (1 << 20) as f64),
            _ => "(unknown)".into(),
        }
    );

    // Single-task throughput at a steady ~70% allocation.
    let mix: Vec<CompiledJob> =
        mixed_fleet::single_task_mix().iter().map(|j| engine.compile(j).expect("compiles")).collect();
    let target = engine.state().total_milli * 7 / 10;
    let mut live = VecDeque::new();
    let mut i = 0usize;
    while engine.state().used_milli() < target {
        if let Ok(id) = engine.place(&mix[i % mix.len()]) {
            live.push_back(id);
        }
        i += 1;
    }
    println!(
        "warm-up: {i} placements to reach {:.1}% allocated",
        engine.state().used_milli() as f64 * 100.0 / engine.state().total_milli as f64
    );
    let mut place_time = Duration::ZERO;
    let mut latencies = Vec::with_capacity(placements);
    let mut placed = 0usize;
    let mut per_kind = vec![(Duration::ZERO, 0u32, 0u32, 0u64); mix.len()];
    let stats_before = engine.stats();
    let wall = Instant::now();
    for k in 0..placements {
        let kind = (k * 7 + 3) % mix.len();
        let job = &mix[kind];
        let visited_before = engine.stats().nodes_visited;
        let start = Instant::now();
        let result = engine.place(job);
        let took = start.elapsed();
        per_kind[kind].3 += engine.stats().nodes_visited - visited_before;
        per_kind[kind].0 += took;
        per_kind[kind].1 += 1;
        per_kind[kind].2 += result.is_err() as u32;
        place_time += took;
        latencies.push(took);
        if let Ok(id) = result {
            placed += 1;
            live.push_back(id);
        }
        release_to(&mut engine, &mut live, target);
    }
    let wall = wall.elapsed();
    let stats = engine.stats();
    latencies.sort_unstable();
    println!(
        "  work: {:.1} nodes visited and {:.1} options scored per decision",
        (stats.nodes_visited - stats_before.nodes_visited) as f64 / placements as f64,
        (stats.options_scored - stats_before.options_scored) as f64 / placements as f64
    );
    println!(
        "\nsingle-task placements: {placements} decisions ({placed} placed) in {:.3}s of placement time ({:.3}s wall with releases)",
        place_time.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "  throughput: {:.0} decisions/s (placement time), {:.0}/s (wall incl. releases)",
        placements as f64 / place_time.as_secs_f64(),
        placements as f64 / wall.as_secs_f64()
    );
    println!(
        "  latency: p50 {:?}  p99 {:?}  max {:?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    for (job, (time, n, failed, visited)) in mix.iter().zip(&per_kind) {
        println!(
            "    {:<10} mean {:>9.2?}  ({n} decisions, {failed} refused, {:.0} nodes visited each)",
            job.name,
            *time / (*n).max(1),
            *visited as f64 / (*n).max(1) as f64
        );
    }

    // 64-GPU gangs: 8 tasks x 8 GPUs, preferring one rack.
    let gang = engine
        .compile(&mixed_fleet::job(
            "gang-64",
            8,
            GpuRequest::Whole { count: 8 },
            Isolation::Hard,
            Topology { within: TopologyLevel::Rack, required: false },
        ))
        .expect("compiles");
    let mut gang_latencies = Vec::with_capacity(gangs);
    let mut gang_placed = 0;
    for k in 0..gangs {
        let start = Instant::now();
        let result = engine.place(&gang);
        gang_latencies.push(start.elapsed());
        if let Ok(id) = result {
            gang_placed += 1;
            engine.release(id).expect("just placed");
        }
        // Churn the background load so gangs meet different states.
        let job = &mix[k % mix.len()];
        if let Ok(id) = engine.place(job) {
            live.push_back(id);
        }
        release_to(&mut engine, &mut live, target);
    }
    gang_latencies.sort_unstable();
    println!("\n64-GPU gangs (8 x 8 GPUs, rack preferred): {gangs} decisions, {gang_placed} placed");
    println!(
        "  latency: p50 {:?}  p99 {:?}  max {:?}",
        percentile(&gang_latencies, 0.5),
        percentile(&gang_latencies, 0.99),
        gang_latencies[gang_latencies.len() - 1]
    );
    engine.check_invariants().expect("ledger consistent after the run");
    println!("\ninvariants: ok");
}
