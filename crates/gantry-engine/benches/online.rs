//! Online planner benchmark: one `online::step` (plan the fleet for the demand, complete the
//! layouts, match nodes to target configurations, decide changes) on fleets of 8 × A100-80GB
//! nodes, half their GPUs in MIG, with a demand of MIG instances and whole-GPU gangs sized to
//! about 60 % of the fleet. A custom harness: the figure is the time of one step.
//!
//! Run: `cargo bench -p gantry-engine --bench online`; other fleet sizes (nodes, comma-separated):
//! `GANTRY_BENCH_NODES=1250,12500 cargo bench -p gantry-engine --bench online`.

use gantry_catalog::Catalog;
use gantry_engine::online::{GpuNow, OnlineConfig, step};
use gantry_types::{GpuMode, Job, MigInstanceSpec};
use std::time::Instant;

fn fleet(nodes: usize) -> gantry_types::Fleet {
    let text = format!(
        "[[node]]\nname = \"n\"\ncount = {nodes}\ncpu = 256\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 8\n"
    );
    let mut fleet = gantry_spec::parse_fleet(&text, Catalog::embedded()).expect("fleet");
    let layout: Vec<MigInstanceSpec> = [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
        .iter()
        .map(|&(p, start)| MigInstanceSpec { profile: p.into(), start })
        .collect();
    for node in fleet.nodes.iter_mut().step_by(2) {
        for gpu in &mut node.gpus {
            gpu.mode = GpuMode::Mig { instances: layout.clone() };
        }
    }
    fleet
}

fn demand(gpus: usize) -> Vec<Job> {
    // Per 8 GPUs: 12 MIG instances (~2 GPUs) and gangs of 1, 2 and 4 whole GPUs (~3 GPUs).
    let per = gpus / 8;
    let text = format!(
        "[[job]]\nname = \"i1\"\ncount = {}\ngpu = {{ mig = \"1g.10gb\" }}\n\n\
         [[job]]\nname = \"i2\"\ncount = {}\ngpu = {{ mig = \"2g.20gb\" }}\n\n\
         [[job]]\nname = \"i3\"\ncount = {}\ngpu = {{ mig = \"3g.40gb\" }}\n\n\
         [[job]]\nname = \"t1\"\ncount = {}\ngpu = {{ count = 1 }}\n\n\
         [[job]]\nname = \"t2\"\ncount = {}\ngpu = {{ count = 2 }}\n\n\
         [[job]]\nname = \"t4\"\ncount = {}\ngpu = {{ count = 4 }}\n",
        6 * per,
        4 * per,
        2 * per,
        per,
        per.div_ceil(2),
        per.div_ceil(4),
    );
    gantry_spec::parse_workload(&text, Catalog::embedded()).expect("workload")
}

fn main() {
    println!("gantry online planner benchmark: one step, 8 x A100-SXM4-80GB per node, half the nodes in MIG");
    let sizes: Vec<usize> = match std::env::var("GANTRY_BENCH_NODES") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("GANTRY_BENCH_NODES: node counts, comma-separated"))
            .collect(),
        Err(_) => vec![16, 125, 500, 1000],
    };
    for nodes in sizes {
        let fleet = fleet(nodes);
        let now: Vec<Vec<GpuNow>> = (0..nodes)
            .map(|n| {
                (0..8)
                    .map(|g| GpuNow {
                        busy_until_s: ((n + g) % 3 == 0).then_some(1000 + (n * 37 % 5000) as u64),
                        ..GpuNow::default()
                    })
                    .collect()
            })
            .collect();
        let jobs = demand(nodes * 8);
        let started = Instant::now();
        let planned = gantry_engine::plan::plan(&fleet, &jobs, Catalog::embedded()).expect("plan");
        println!(
            "  offline plan alone: {:.1} ms ({} placed)",
            started.elapsed().as_secs_f64() * 1000.0,
            planned.placed.len()
        );
        let started = Instant::now();
        let decided = step(&fleet, &now, &jobs, 0, &OnlineConfig::default(), Catalog::embedded()).expect("plans");
        let took = started.elapsed();
        println!(
            "{:>5} nodes ({:>5} GPUs), {:>5} demand jobs: {:>8.1} ms; {} reconfigurations, {} GPUs to drain, {} deferred",
            nodes,
            nodes * 8,
            jobs.iter().map(|j| j.task_count()).sum::<u32>(),
            took.as_secs_f64() * 1000.0,
            decided.reconfigure.len(),
            decided.drain.len(),
            decided.deferred
        );
    }
}
