//! Protocol B (time replay): waiting, departures, delays and tenant shares on a tiny trace.

use crate::fixture;
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::seeded_node_order;
use gantry_sim::protocol_b;

#[test]
fn a_pod_waits_until_capacity_frees_and_shares_follow_gpu_time() {
    let nodes = alibaba::read_nodes(
        &fixture("r-nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,16000,65536,1,T4\n"),
        Mode::Strict,
        &mut Skipped::default(),
    )
    .expect("nodes");
    let pods =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
a,4000,8192,1,1000,,LS,Running,0,100,0
b,4000,8192,1,1000,,BE,Running,10,60,10
c,1000,1024,1,250,,BE,Running,200,300,200
";
    let pods = alibaba::read_pods(&fixture("r-pods.csv", pods), Mode::Strict, &mut Skipped::default()).expect("pods");
    let order = seeded_node_order(&nodes, 1);
    let r =
        protocol_b::run(&nodes, &pods, &order, Policy::Fgd, 1, &protocol_b::ReplayOptions::default()).expect("replays");
    assert_eq!((r.started, r.never_started), (3, 0));
    // b arrives at 10 while a holds the only GPU until 100: it waits 90 s; a and c wait 0.
    assert_eq!((r.delay_p50_s, r.delay_p99_s), (0, 90));
    // GPU time: a 100 s, b 50 s, c 0.25 × 100 s: LS 100 / 175, BE 75 / 175.
    let ls = r.tenant_gpu_share_pct["LS"];
    assert!((ls - 100.0 / 175.0 * 100.0).abs() < 1e-9, "{ls}");
    assert!(r.peak_alloc_pct <= 100.0 && r.peak_alloc_pct >= 99.9, "{}", r.peak_alloc_pct);
    assert_eq!(
        r,
        protocol_b::run(&nodes, &pods, &order, Policy::Fgd, 1, &protocol_b::ReplayOptions::default()).expect("replays"),
        "deterministic"
    );
    // Compressing the arrivals by 10 puts c at t = 20, behind b: it waits for a too.
    let squeezed = protocol_b::run(
        &nodes,
        &pods,
        &order,
        Policy::Fgd,
        1,
        &protocol_b::ReplayOptions { compress: 10, ..Default::default() },
    )
    .expect("replays");
    assert!(squeezed.delay_p99_s >= 80, "{squeezed:?}");
}

/// Patience (`SimJob::patience_s`): a job may still start at the last second of it; one past
/// it gives up (cancelled, its `afterok` dependents dropped); patience never touches a job
/// that has started.
#[test]
fn a_job_gives_up_when_its_patience_runs_out_before_it_starts() {
    use gantry_catalog::Catalog;
    use gantry_engine::{Engine, EngineConfig};
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(crate::TWO_A100, catalog).expect("fleet");
    let engine = Engine::new(&fleet, catalog, EngineConfig::default()).expect("engine");
    let workload = r#"
[[job]]
name = "hog"
gpu = { count = 2 }
[[job]]
name = "eager"
gpu = { count = 1 }
[[job]]
name = "impatient"
gpu = { count = 1 }
[[job]]
name = "after-impatient"
gpu = { count = 1 }
after = ["afterok:impatient"]
"#;
    let specs = gantry_spec::parse_workload(workload, catalog).expect("workload");
    // (arrival, duration, patience) per job: the hog holds both GPUs until 100.
    let timing = [(0, 100, Some(5)), (10, 50, Some(90)), (10, 50, Some(89)), (20, 50, None)];
    let jobs: Vec<protocol_b::SimJob> = specs
        .into_iter()
        .zip(timing)
        .map(|(spec, (arrival_s, duration_s, patience_s))| protocol_b::SimJob {
            job: engine.compile(&spec).expect("compiles"),
            spec,
            arrival_s,
            duration_s: Some(duration_s),
            utilization: None,
            patience_s,
        })
        .collect();
    let r = protocol_b::replay(engine, jobs, 1, &protocol_b::ReplayOptions::default()).expect("replays");
    assert_eq!((r.started, r.gave_up, r.dependency_never, r.never_started), (2, 1, 1, 0), "{:?}", r.events);
    let at = |event: &str, job: &str| r.events.iter().find(|e| e.event == event && e.job == job).map(|e| e.time_s);
    assert_eq!(at("start", "hog"), Some(0), "its patience is moot once started");
    assert_eq!(at("start", "eager"), Some(100), "the last second of its patience");
    assert_eq!(at("give-up", "impatient"), Some(100));
    assert_eq!(at("start", "impatient"), None);
}

/// Random seeded workloads with patience, dependencies and preemption under fair share:
/// every job is accounted for exactly once (started, gave up, dropped for a dependency, or
/// still waiting), and the replay never fails.
#[test]
fn patience_dependencies_and_preemption_account_for_every_job() {
    use gantry_catalog::Catalog;
    use gantry_engine::rng::SeededRng;
    use gantry_engine::{Engine, EngineConfig};
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(crate::TWO_A100, catalog).expect("fleet");
    let tree = gantry_types::QueueTree::flat(["a", "b"], 600, 900);
    let (mut gave_up, mut dropped, mut preempted) = (0, 0, 0);
    for seed in 0..40 {
        let mut rng = SeededRng::new(seed);
        let engine = Engine::new(&fleet, catalog, EngineConfig::default()).expect("engine");
        let n = 5 + rng.below(20) as usize;
        let mut toml = String::new();
        for i in 0..n {
            let queue = if rng.below(2) == 0 { "a" } else { "b" };
            toml.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\nqueue = \"{queue}\"\npriority = {}\ngpu = {{ count = {} }}\n",
                rng.below(3),
                1 + rng.below(2)
            ));
            if i > 0 && rng.below(4) == 0 {
                toml.push_str(&format!(
                    "after = [\"{}:j{}\"]\n",
                    ["afterok", "afterany"][rng.below(2) as usize],
                    rng.below(i as u64)
                ));
            }
        }
        let specs = gantry_spec::parse_workload(&toml, catalog).expect("workload");
        let jobs: Vec<protocol_b::SimJob> = specs
            .into_iter()
            .map(|spec| protocol_b::SimJob {
                job: engine.compile(&spec).expect("compiles"),
                spec,
                arrival_s: rng.below(300),
                duration_s: Some(10 + rng.below(200)),
                utilization: None,
                patience_s: (rng.below(3) > 0).then(|| rng.below(150)),
            })
            .collect();
        let options = protocol_b::ReplayOptions {
            order: protocol_b::Order::FairShare(tree.clone()),
            preempt: seed % 2 == 0,
            ..Default::default()
        };
        let r = protocol_b::replay(engine, jobs, seed, &options).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let accounted =
            r.started + r.gave_up + r.dependency_never + r.never_started + r.held + r.waiting_on_dependencies;
        assert_eq!(accounted, n as u64, "seed {seed}: {r:?}");
        let gave: Vec<&str> = r.events.iter().filter(|e| e.event == "give-up").map(|e| e.job.as_str()).collect();
        assert_eq!(gave.len() as u64, r.gave_up, "seed {seed}");
        assert!(
            gave.iter().all(|j| !r.events.iter().any(|e| e.event == "start" && e.job == *j)),
            "seed {seed}: a job that gave up never starts"
        );
        (gave_up, dropped, preempted) = (gave_up + r.gave_up, dropped + r.dependency_never, preempted + r.preemptions);
    }
    assert!(
        gave_up > 0 && dropped > 0 && preempted > 0,
        "the sweep reaches each case: {gave_up} {dropped} {preempted}"
    );
}
