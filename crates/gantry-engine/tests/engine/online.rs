//! The online planner's safety properties on random situations: it only reconfigures idle
//! GPUs out of their cooldown, only drains busy ones, only offers busy MIG GPUs whose tasks
//! can all move for emptying, every change it proposes is legal (the engine accepts it), and
//! on an idle fleet its plan is a fixed point (applying it and asking again changes nothing).

use gantry_catalog::Catalog;
use gantry_engine::online::{GpuNow, OnlineConfig, step};
use gantry_engine::{Engine, EngineConfig};
use gantry_types::{Fleet, GpuMode, Job, MigInstanceSpec};
use proptest::prelude::*;

fn layout(list: &[(&str, u8)]) -> GpuMode {
    GpuMode::Mig { instances: list.iter().map(|&(p, start)| MigInstanceSpec { profile: p.into(), start }).collect() }
}

fn modes() -> Vec<GpuMode> {
    vec![
        GpuMode::Whole,
        layout(&[("3g.40gb", 0), ("3g.40gb", 4)]),
        layout(&[("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]),
        layout(&[
            ("1g.10gb", 0),
            ("1g.10gb", 1),
            ("1g.10gb", 2),
            ("1g.10gb", 3),
            ("1g.10gb", 4),
            ("1g.10gb", 5),
            ("1g.10gb", 6),
        ]),
        GpuMode::Mps { max_clients: 8 },
    ]
}

fn fleet(nodes: usize, picks: &[usize]) -> Fleet {
    let text = format!(
        "[[node]]\nname = \"n\"\ncount = {nodes}\ncpu = 128\nmemory = \"1TiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n"
    );
    let mut fleet = gantry_spec::parse_fleet(&text, Catalog::embedded()).expect("fleet");
    let all = modes();
    for (gpu, pick) in fleet.nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()).zip(picks) {
        gpu.mode = all[pick % all.len()].clone();
    }
    fleet
}

fn demand(counts: &[u32; 5]) -> Vec<Job> {
    let shapes = [
        "gpu = { mig = \"1g.10gb\" }",
        "gpu = { mig = \"3g.40gb\" }",
        "gpu = { count = 1 }",
        "gpu = { count = 2 }",
        "gpu = { share = 250, memory = \"8GiB\", mode = \"mps\" }",
    ];
    let mut text = String::new();
    for (i, (&n, shape)) in counts.iter().zip(shapes).enumerate() {
        if n > 0 {
            text += &format!("[[job]]\nname = \"d{i}\"\ncount = {n}\n{shape}\n\n");
        }
    }
    if text.is_empty() {
        return Vec::new();
    }
    gantry_spec::parse_workload(&text, Catalog::embedded()).expect("workload")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_planner_changes_only_idle_gpus_legally_and_settles(
        nodes in 1usize..=3,
        picks in proptest::collection::vec(0usize..5, 12),
        busy in proptest::collection::vec(proptest::option::of(0u64..20_000), 12),
        cooling in proptest::collection::vec(proptest::bool::weighted(0.2), 12),
        counts in proptest::array::uniform5(0u32..10),
        movable in proptest::collection::vec(proptest::bool::ANY, 12),
        move_work in proptest::bool::ANY,
    ) {
        let catalog = Catalog::embedded();
        let fleet = fleet(nodes, &picks);
        let now_s = 10_000;
        let config = OnlineConfig { cooldown_s: 3600, drain_horizon_s: 1800, move_work, ..OnlineConfig::default() };
        let situation: Vec<Vec<GpuNow>> = (0..nodes)
            .map(|n| (0..4).map(|g| GpuNow {
                busy_until_s: busy[n * 4 + g].map(|d| now_s + d),
                last_change_s: cooling[n * 4 + g].then_some(now_s - 60),
                tasks: u32::from(busy[n * 4 + g].is_some()),
                movable: movable[n * 4 + g],
            }).collect())
            .collect();
        let jobs = demand(&counts);
        let decided = step(&fleet, &situation, &jobs, now_s, &config, catalog).expect("plans");
        let mut engine = Engine::new(&fleet, catalog, EngineConfig::default()).expect("engine");
        for (node, index, mode) in &decided.reconfigure {
            let n: usize = node.trim_start_matches("n-").parse().expect("node name");
            let gpu = situation[n][*index as usize];
            prop_assert!(gpu.busy_until_s.is_none(), "reconfigures a busy GPU: {node}/{index}");
            prop_assert!(gpu.last_change_s.is_none(), "reconfigures a GPU in its cooldown: {node}/{index}");
            prop_assert_eq!(engine.set_gpu_mode(node, *index, mode), Ok(true), "an illegal or empty change");
        }
        for (node, index) in decided.drain.keys() {
            let n: usize = node.trim_start_matches("n-").parse().expect("node name");
            let gpu = situation[n][*index as usize];
            prop_assert!(gpu.busy_until_s.is_some_and(|end| end <= now_s + config.drain_horizon_s), "drains {node}/{index}");
        }
        prop_assert!(move_work || decided.empty.is_empty(), "offers GPUs to empty without move_work");
        for (node, index) in &decided.empty {
            let n: usize = node.trim_start_matches("n-").parse().expect("node name");
            let gpu = situation[n][*index as usize];
            prop_assert!(gpu.busy_until_s.is_some() && gpu.movable && gpu.last_change_s.is_none(), "offers {node}/{index}");
            prop_assert!(matches!(fleet.nodes[n].gpus[*index as usize].mode, GpuMode::Mig { .. }), "offers a non-MIG GPU");
        }
        // On an idle fleet out of cooldown, the plan is a fixed point.
        let idle: Vec<Vec<GpuNow>> = (0..nodes).map(|_| vec![GpuNow::default(); 4]).collect();
        let first = step(&fleet, &idle, &jobs, now_s, &config, catalog).expect("plans");
        let mut applied = fleet.clone();
        for (node, index, mode) in &first.reconfigure {
            let n = applied.nodes.iter_mut().find(|x| x.name == *node).expect("node");
            n.gpus[*index as usize].mode = mode.clone();
        }
        let again = step(&applied, &idle, &jobs, now_s, &config, catalog).expect("plans");
        prop_assert!(again.reconfigure.is_empty(), "not settled: {:?}", again.reconfigure);
    }
}
