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
