//! Reconfiguring a GPU under a running engine (the online planner's one effect): only idle
//! GPUs change, illegal layouts are refused, and placement afterwards behaves exactly as on a
//! fleet built with the new modes from the start.

use crate::support::{engine, jobs, place_all};
use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy, SearchLimits};
use gantry_types::{GpuMode, JobOutcome, MigInstanceSpec};

const NODE: &str = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n\
                    [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";

fn seven_small() -> GpuMode {
    GpuMode::Mig { instances: (0..7).map(|start| MigInstanceSpec { profile: "1g.10gb".into(), start }).collect() }
}

fn outcomes_names(outcomes: &[JobOutcome]) -> Vec<bool> {
    outcomes.iter().map(|o| matches!(o, JobOutcome::Placed { .. })).collect()
}

#[test]
fn an_idle_gpu_takes_a_mig_layout_and_mig_jobs_then_fit() {
    let mut e = engine(NODE, Policy::Default);
    let mig = jobs("[[job]]\nname = \"infer\"\ncount = 7\ngpu = { mig = \"1g.10gb\" }\n");
    let before = e.compile(&mig[0]).expect("compiles");
    assert!(e.place(&before).is_err(), "no MIG GPU yet");
    assert_eq!(e.set_gpu_mode("n-0", 2, &seven_small()), Ok(true));
    assert!(!e.is_current(&before), "a new device class appeared: the old compile is stale");
    assert_eq!(outcomes_names(&place_all(&mut e, &mig)), vec![true; 7]);
    e.check_invariants().expect("ledger and counters agree");
    // The same layout again changes nothing.
    assert_eq!(e.set_gpu_mode("n-0", 2, &seven_small()), Ok(false));
}

#[test]
fn a_busy_gpu_is_refused_and_nothing_changes() {
    let mut e = engine(NODE, Policy::Default);
    // Fill a node whole, then try to carve one of its GPUs.
    let placed = place_all(&mut e, &jobs("[[job]]\nname = \"train\"\ngpu = { count = 4 }\n"));
    let JobOutcome::Placed { tasks } = &placed[0] else { panic!("placed") };
    let node = tasks[0].node.clone();
    let before = e.state().clone();
    let err = e.set_gpu_mode(&node, 0, &seven_small()).expect_err("busy");
    assert!(err.to_string().contains("busy") && err.to_string().contains("only an idle GPU"), "{err}");
    assert_eq!(*e.state(), before, "a refused reconfiguration changes nothing");
}

#[test]
fn an_illegal_layout_or_unknown_gpu_is_refused_with_why() {
    let mut e = engine(NODE, Policy::Default);
    let before = e.state().clone();
    let overlapping = GpuMode::Mig {
        instances: vec![
            MigInstanceSpec { profile: "4g.40gb".into(), start: 0 },
            MigInstanceSpec { profile: "3g.40gb".into(), start: 2 },
        ],
    };
    let cases: [(&str, u32, GpuMode, &str); 4] = [
        ("n-0", 0, overlapping, "3g.40gb cannot start"),
        ("n-0", 0, GpuMode::Mig { instances: vec![MigInstanceSpec { profile: "1g.5gb".into(), start: 0 }] }, "1g.5gb"),
        ("n-0", 9, GpuMode::Whole, "no GPU 9"),
        ("nowhere", 0, GpuMode::Whole, "no node"),
    ];
    for (node, index, mode, says) in cases {
        let err = e.set_gpu_mode(node, index, &mode).expect_err("refused");
        assert!(err.to_string().contains(says), "{node}/{index}: {err}");
    }
    assert_eq!(*e.state(), before);
}

#[test]
fn placements_after_reconfiguring_match_a_fleet_built_that_way() {
    // Reconfigure GPUs of one engine, build another with those modes from the start: the same
    // jobs must land in the same places.
    let catalog = Catalog::embedded();
    let mut fleet = gantry_spec::parse_fleet(NODE, catalog).expect("fleet");
    let config = EngineConfig { policy: Policy::Default, seed: 7, limits: SearchLimits::exhaustive(), shapes: None };
    let mut live = Engine::new(&fleet, catalog, config.clone()).expect("engine");
    let modes = [
        ("n-0", 1, seven_small()),
        ("n-1", 3, GpuMode::Mps { max_clients: 8 }),
        ("n-1", 0, GpuMode::TimeSlice { replicas: 4, memory_per_replica: gantry_types::Bytes(20 << 30) }),
    ];
    for (node, index, mode) in &modes {
        live.set_gpu_mode(node, *index, mode).expect("idle GPU reconfigures");
        let n = fleet.nodes.iter_mut().find(|n| n.name == *node).expect("node");
        n.gpus[*index as usize].mode = mode.clone();
    }
    // And back and forth once: the tables only grow, the result must not care.
    live.set_gpu_mode("n-1", 2, &seven_small()).expect("carve");
    live.set_gpu_mode("n-1", 2, &GpuMode::Whole).expect("and back");
    let mut fresh = Engine::new(&fleet, catalog, config).expect("engine");
    let workload = jobs(
        "[[job]]\nname = \"a\"\ncount = 3\ngpu = { mig = \"1g.10gb\" }\n\n\
         [[job]]\nname = \"b\"\ncount = 2\ngpu = { share = 250, memory = \"8GiB\", mode = \"mps\" }\n\n\
         [[job]]\nname = \"c\"\ncount = 2\ngpu = { share = 250, memory = \"8GiB\", mode = \"time-slice\" }\n\n\
         [[job]]\nname = \"d\"\ngpu = { count = 2 }\n\n\
         [[job]]\nname = \"e\"\ngpu = { count = 4 }\n",
    );
    assert_eq!(place_all(&mut live, &workload), place_all(&mut fresh, &workload));
    live.check_invariants().expect("counters agree");
}

#[test]
fn a_cordoned_gpu_takes_nothing_new_and_keeps_what_runs() {
    let mut e = engine(NODE, Policy::Default);
    for node in ["n-0", "n-1"] {
        for gpu in 0..4 {
            e.set_gpu_mode(node, gpu, &seven_small()).expect("idle");
        }
    }
    let one = jobs("[[job]]\nname = \"infer\"\ngpu = { mig = \"1g.10gb\" }\n");
    let placed = place_all(&mut e, &one);
    let JobOutcome::Placed { tasks } = &placed[0] else { panic!("placed") };
    let (node, gpu) = (tasks[0].node.clone(), tasks[0].gpus[0].gpu());
    assert_eq!(e.set_gpu_cordoned(&node, gpu, true), Ok(true));
    assert_eq!(e.set_gpu_cordoned(&node, gpu, true), Ok(false), "already cordoned");
    // 55 more instances fit on the other seven GPUs; none goes to the cordoned one.
    let many = jobs("[[job]]\nname = \"more\"\ncount = 56\ngpu = { mig = \"1g.10gb\" }\n");
    let outcomes = place_all(&mut e, &many);
    let landed: Vec<(String, u32)> = outcomes
        .iter()
        .filter_map(|o| match o {
            JobOutcome::Placed { tasks } => Some((tasks[0].node.clone(), tasks[0].gpus[0].gpu())),
            JobOutcome::Unplaced { .. } => None,
        })
        .collect();
    assert_eq!(landed.len(), 49, "7 GPUs × 7 instances");
    assert!(!landed.contains(&(node.clone(), gpu)), "nothing new on the cordoned GPU");
    e.check_invariants().expect("counters agree");
    // Uncordoned, its six free instances are usable again.
    e.set_gpu_cordoned(&node, gpu, false).expect("uncordon");
    let six = jobs("[[job]]\nname = \"six\"\ncount = 6\ngpu = { mig = \"1g.10gb\" }\n");
    assert_eq!(outcomes_names(&place_all(&mut e, &six)), vec![true; 6]);
    assert!(e.set_gpu_cordoned("n-9", 0, true).is_err());
}

#[test]
fn a_cordoned_whole_gpu_is_not_granted_whole() {
    let mut e = engine(NODE, Policy::Default);
    e.set_gpu_cordoned("n-0", 0, true).expect("cordon");
    // Four GPUs on one node no longer exist on n-0; the gang goes to n-1.
    let placed = place_all(
        &mut e,
        &jobs("[[job]]\nname = \"a\"\ngpu = { count = 4 }\n[[job]]\nname = \"b\"\ngpu = { count = 4 }\n"),
    );
    assert!(matches!(placed[0], JobOutcome::Placed { .. }));
    assert!(matches!(placed[1], JobOutcome::Unplaced { .. }), "only one node has four grantable GPUs");
    e.check_invariants().expect("counters agree");
}

#[test]
fn the_fleet_now_reflects_reconfigurations_and_rebuilds_the_same_engine() {
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(NODE, catalog).expect("fleet");
    let mut e = Engine::new(&fleet, catalog, EngineConfig::default()).expect("engine");
    assert_eq!(e.fleet_now(), fleet, "nothing changed yet");
    e.set_gpu_mode("n-1", 2, &seven_small()).expect("idle");
    let now = e.fleet_now();
    assert_eq!(now.nodes[1].gpus[2].mode, seven_small());
    for (n, node) in now.nodes.iter().enumerate() {
        assert_eq!(&e.node_now(n as gantry_engine::state::NodeIdx), node, "one node, as the whole fleet says it");
    }
    let rebuilt = Engine::new(&now, catalog, EngineConfig::default()).expect("engine");
    assert_eq!(rebuilt.fleet_now(), now);
    assert_eq!(rebuilt.state().gpus[6].units, e.state().gpus[6].units);
}
