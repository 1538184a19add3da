//! Safety properties, checked on random fleets and random streams of place/release.

use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy, SearchLimits, Shape, state::Units};
use gantry_types::{
    Bytes, Fleet, Gpu, GpuMode, GpuRequest, Isolation, Job, MigInstanceSpec, MilliCpu, MilliGpu, Node, ShareMode,
    TaskGroup, TaskResources, Topology, TopologyLevel,
};
use proptest::prelude::*;

fn mig(layout: &[(&str, u8)]) -> GpuMode {
    GpuMode::Mig { instances: layout.iter().map(|&(p, s)| MigInstanceSpec { profile: p.into(), start: s }).collect() }
}

fn mode_strategy(model: &'static str) -> impl Strategy<Value = GpuMode> {
    let memory = Catalog::embedded().model(Catalog::embedded().lookup(model).expect("model")).memory.0;
    let mig_layouts: Vec<GpuMode> = match model {
        "A100-SXM4-80GB" | "H100-SXM5-80GB" => vec![
            mig(&[
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("1g.10gb", 4),
                ("1g.10gb", 5),
                ("1g.10gb", 6),
            ]),
            mig(&[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]),
            mig(&[("4g.40gb", 0), ("3g.40gb", 4)]),
            mig(&[("2g.20gb", 0), ("1g.20gb", 4)]),
        ],
        _ => vec![GpuMode::Whole],
    };
    prop_oneof![
        3 => Just(GpuMode::Whole),
        2 => proptest::sample::select(mig_layouts),
        2 => (1u32..=48).prop_map(|max_clients| GpuMode::Mps { max_clients }),
        2 => (2u32..=8).prop_map(move |replicas| GpuMode::TimeSlice { replicas, memory_per_replica: Bytes(memory / replicas as u64) }),
    ]
}

fn node_strategy(index: usize) -> impl Strategy<Value = Node> {
    let models = ["H100-SXM5-80GB", "A100-SXM4-80GB", "L4-24GB", "T4-16GB"];
    (0..models.len(), 1usize..=8, 0u32..2, any::<bool>()).prop_flat_map(move |(m, count, rack, nvlink)| {
        let model = models[m];
        proptest::collection::vec(mode_strategy(model), count).prop_map(move |modes| Node {
            name: format!("n{index}"),
            cpu: MilliCpu(64_000),
            memory: Bytes::gib(512),
            labels: Default::default(),
            taints: Vec::new(),
            rack: Some(format!("rack{rack}")),
            block: None,
            gpus: modes
                .into_iter()
                .enumerate()
                .map(|(i, mode)| Gpu {
                    index: i as u32,
                    model: model.into(),
                    uuid: format!("GPU-{index}-{i}"),
                    numa: (i * 2 / count) as u32,
                    pcie_switch: i as u32 / 2,
                    nvlink_domain: nvlink.then_some(0),
                    mode,
                })
                .collect(),
        })
    })
}

fn fleet_strategy() -> impl Strategy<Value = Fleet> {
    (1usize..=5).prop_flat_map(|n| (0..n).map(node_strategy).collect::<Vec<_>>()).prop_map(|nodes| Fleet { nodes })
}

fn request_strategy() -> impl Strategy<Value = (GpuRequest, Isolation)> {
    prop_oneof![
        (1u32..=4).prop_map(|count| (GpuRequest::Whole { count }, Isolation::Hard)),
        proptest::sample::select(vec!["1g.10gb", "2g.20gb", "3g.40gb", "1g.20gb", "4g.40gb"])
            .prop_map(|p| (GpuRequest::Mig { profile: p.into() }, Isolation::Hard)),
        (1u32..=1000, 0u64..=16, proptest::sample::select(vec![ShareMode::Mps, ShareMode::TimeSlice, ShareMode::Any]))
            .prop_map(|(milli, gib, mode)| (
                GpuRequest::Share { milli: MilliGpu(milli), memory: Bytes::gib(gib), mode },
                Isolation::None
            )),
        (1u64..=40, proptest::sample::select(vec![Isolation::Hard, Isolation::Soft, Isolation::None]))
            .prop_map(|(gib, iso)| (GpuRequest::Memory { memory: Bytes::gib(gib), hint: None }, iso)),
    ]
}

fn job_strategy(index: usize) -> impl Strategy<Value = Job> {
    let group = (
        request_strategy(),
        1u32..=3,
        0u32..=8000,
        proptest::sample::select(vec![
            TopologyLevel::Nvlink,
            TopologyLevel::Numa,
            TopologyLevel::Node,
            TopologyLevel::Rack,
        ]),
        any::<bool>(),
        // One group in eight takes whole nodes (Slurm's --exclusive).
        proptest::sample::select(vec![false, false, false, false, false, false, false, true]),
    )
        .prop_map(|((gpu, isolation), replicas, cpu, within, required, exclusive_node)| TaskGroup {
            name: "g".into(),
            replicas,
            distinct_nodes: false,
            exclusive_node,
            node_selector: Default::default(),
            resources: TaskResources {
                cpu: MilliCpu(cpu),
                memory: Bytes::gib(4),
                gpu: Some(gpu),
                models: Vec::new(),
                selector: None,
                isolation,
                topology: Topology { within, required },
                tolerations: Vec::new(),
            },
        });
    proptest::collection::vec(group, 1..=2).prop_map(move |mut groups| {
        for (i, g) in groups.iter_mut().enumerate() {
            g.name = format!("g{i}");
        }
        Job {
            name: format!("job{index}"),
            queue: "q".into(),
            priority: 0,
            groups,
            lifecycle: Default::default(),
            after: Vec::new(),
            control: Default::default(),
            run: Default::default(),
        }
    })
}

#[derive(Clone, Debug)]
enum Op {
    Place(Box<Job>),
    /// Release the n-th live allocation (modulo how many there are).
    Release(usize),
}

fn ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![3 => any::<u16>().prop_map(|i| i as usize).prop_flat_map(job_strategy).prop_map(|j| Op::Place(Box::new(j))), 1 => any::<usize>().prop_map(Op::Release)],
        1..40,
    )
}

fn new_engine(fleet: &Fleet, policy: Policy, seed: u64) -> Engine {
    let config = EngineConfig { policy, seed, limits: SearchLimits::default(), shapes: None };
    Engine::new(fleet, Catalog::embedded(), config).expect("generated fleets are valid")
}

/// Run ops, checking after each one; returns the decisions for determinism checks.
fn run(fleet: &Fleet, policy: Policy, seed: u64, ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    run_engine(new_engine(fleet, policy, seed), ops)
}

fn run_engine(mut engine: Engine, ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    let mut log = Vec::new();
    // Allocations → their groups that take whole nodes.
    let mut exclusive: std::collections::BTreeMap<u64, Vec<u32>> = std::collections::BTreeMap::new();
    for op in ops {
        match op {
            Op::Place(job) => {
                let before = engine.state().clone();
                let compiled = engine.compile(job).expect("generated jobs compile");
                match engine.place(&compiled) {
                    Ok(id) => {
                        let tasks = &engine.allocations()[&id].tasks;
                        prop_assert_eq!(tasks.len() as u32, job.task_count(), "a gang is all or nothing");
                        log.push(format!("{id}:{tasks:?}"));
                        let groups: Vec<u32> =
                            (0..job.groups.len() as u32).filter(|&g| job.groups[g as usize].exclusive_node).collect();
                        exclusive.insert(id, groups);
                    }
                    Err(reasons) => {
                        prop_assert!(engine.state() == &before, "a failed gang left state behind");
                        prop_assert!(!reasons.is_empty(), "a refusal carries reasons");
                        log.push(format!("refused:{reasons:?}"));
                    }
                }
            }
            Op::Release(n) => {
                let ids: Vec<u64> = engine.allocations().keys().copied().collect();
                if !ids.is_empty() {
                    engine.release(ids[n % ids.len()]).expect("live allocation");
                }
            }
        }
        if let Err(e) = engine.check_invariants() {
            return Err(TestCaseError::fail(format!("invariant broken: {e}")));
        }
        // A task that takes a whole node shares it with no other task, of its job or another.
        exclusive.retain(|id, _| engine.allocations().contains_key(id));
        for (id, groups) in &exclusive {
            for task in engine.allocations()[id].tasks.iter().filter(|t| groups.contains(&t.group)) {
                let beside = engine
                    .allocations()
                    .iter()
                    .flat_map(|(other, a)| a.tasks.iter().map(move |t| (*other, t)))
                    .filter(|(_, t)| t.node == task.node)
                    .count();
                prop_assert_eq!(beside, 1, "an exclusive task shares node {} ({:?})", task.node, task);
            }
        }
        // Every MIG layout the engine holds is legal.
        for gpu in &engine.state().gpus {
            if let Units::Mig { slots } = &gpu.units {
                let model = Catalog::embedded().model(gpu.model);
                let geometry = model.mig.as_ref().expect("MIG GPU has geometry");
                let spec: Vec<MigInstanceSpec> = slots
                    .iter()
                    .map(|s| MigInstanceSpec {
                        profile: geometry.profiles[s.profile as usize].name.clone(),
                        start: s.start,
                    })
                    .collect();
                prop_assert!(geometry.validate_layout(&model.id, &spec).is_ok());
            }
        }
    }
    Ok(log)
}

proptest! {
    // 64 cases in the suite; PROPTEST_CASES=N explores more (a soak before a release).
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64), .. ProptestConfig::default() })]

    /// No GPU, MIG instance or share is ever over-allocated; gangs are all-or-nothing; every
    /// MIG layout is legal.
    #[test]
    fn nothing_is_ever_over_allocated(fleet in fleet_strategy(), ops in ops_strategy(), policy in proptest::sample::select(Policy::ALL.to_vec()), seed in any::<u64>()) {
        run(&fleet, policy, seed, &ops)?;
    }

    /// The same inputs and seed give the same decisions, bit for bit.
    #[test]
    fn same_seed_same_decisions(fleet in fleet_strategy(), ops in ops_strategy(), policy in proptest::sample::select(Policy::ALL.to_vec()), seed in any::<u64>()) {
        prop_assert_eq!(run(&fleet, policy, seed, &ops)?, run(&fleet, policy, seed, &ops)?);
    }

    /// Placing a job and releasing it returns the exact prior state.
    #[test]
    fn place_then_release_restores_the_state(fleet in fleet_strategy(), prefill in proptest::collection::vec(job_strategy(0), 0..6), job in job_strategy(99), policy in proptest::sample::select(Policy::ALL.to_vec())) {
        let mut engine = new_engine(&fleet, policy, 7);
        for j in &prefill {
            let compiled = engine.compile(j).expect("compiles");
            let _ = engine.place(&compiled);
        }
        let before = engine.state().clone();
        let compiled = engine.compile(&job).expect("compiles");
        if let Ok(id) = engine.place(&compiled) {
            engine.release(id).expect("just placed");
        }
        prop_assert!(engine.state() == &before);
    }

    /// The per-node verdict memo is invisible: with a fixed FGD type distribution (where it is
    /// on for every policy), decisions and refusal reasons are the same with it and without.
    #[test]
    fn the_verdict_memo_never_changes_a_decision(fleet in fleet_strategy(), pool in proptest::collection::vec(job_strategy(0), 1..4), picks in proptest::collection::vec((any::<usize>(), 0..4u8), 1..60), policy in proptest::sample::select(Policy::ALL.to_vec()), seed in any::<u64>(), exhaustive in any::<bool>()) {
        // Few job kinds, placed again and again: the memo's case.
        let ops: Vec<Op> = picks
            .iter()
            .enumerate()
            .map(|(i, &(n, kind))| match kind {
                0 => Op::Release(n),
                _ => Op::Place(Box::new(Job { name: format!("j{i}"), ..pool[n % pool.len()].clone() })),
            })
            .collect();
        let any = u64::MAX;
        let shapes = vec![
            (Shape { milli: 500, count: 1, cpu: 1000, classes: any }, 3),
            (Shape { milli: 1000, count: 2, cpu: 0, classes: any }, 1),
            (Shape { milli: 0, count: 0, cpu: 2000, classes: any }, 1),
        ];
        let limits = if exhaustive { SearchLimits::exhaustive() } else { SearchLimits::default() };
        let config = EngineConfig { policy, seed, limits, shapes: Some(shapes) };
        let with = Engine::new(&fleet, Catalog::embedded(), config.clone()).expect("valid fleet");
        let without = Engine::new(&fleet, Catalog::embedded(), config).expect("valid fleet").without_verdict_memo();
        prop_assert_eq!(run_engine(with, &ops)?, run_engine(without, &ops)?);
    }

    /// Preemption frees exactly what is needed: the preemptor fits with the victims gone, each
    /// victim is one it has a right to stop, and putting back any single victim leaves no room
    /// (checked on clones with the public place/release, not with the planner's own helpers).
    /// When no plan is found, stopping every eligible job would not make room either; and no
    /// single eligible victim that alone makes room costs less than the plan (cost order).
    #[test]
    fn preemption_never_evicts_a_victim_that_was_not_needed(fleet in fleet_strategy(), pool in proptest::collection::vec(job_strategy(0), 1..4), picks in proptest::collection::vec(any::<usize>(), 1..30), traits in proptest::collection::vec((-3i32..3, any::<bool>(), any::<bool>(), 0u64..3, 0usize..3), 30), preemptor in job_strategy(77), priority in -3i32..4, within_guarantee in any::<bool>(), starving in any::<bool>()) {
        use gantry_engine::preempt::{Right, Team, Victim};
        use gantry_types::Flavor;
        let config = EngineConfig { policy: Policy::BestFit, seed: 1, limits: SearchLimits::exhaustive(), shapes: None };
        let mut engine = Engine::new(&fleet, Catalog::embedded(), config).expect("valid fleet");
        for (i, &n) in picks.iter().enumerate() {
            let job = Job { name: format!("r{i}"), ..pool[n % pool.len()].clone() };
            let _ = engine.place(&engine.compile(&job).expect("compiles"));
        }
        let pool_flavor = Flavor::MilliPool;
        let victims: Vec<Victim> = engine
            .allocations()
            .keys()
            .enumerate()
            .map(|(i, &alloc)| {
                let (priority, preemptible, borrower, min_left, queue) = traits[i % traits.len()];
                Victim {
                    alloc,
                    queue,
                    priority,
                    preemptible: preemptible || i % 3 == 0,
                    milli: 1000,
                    demand: vec![(pool_flavor.clone(), 1000)],
                    borrowed: if borrower { vec![pool_flavor.clone()] } else { Vec::new() },
                    work_lost_milli_s: (i as u64 * 7919) % 1000,
                    way_back_milli_s: (i as u64 * 104_729) % 500,
                    budget_spent: i % 11 == 4,
                    min_runtime_left_s: min_left % 2,
                    started_starved: i % 5 == 0,
                    reclaim_protected: i % 7 == 0,
                    restarted_after_reclaim: i % 5 == 0,
                    preempted_times: (i % 4) as u32,
                }
            })
            .collect();
        let right = Right {
            queue: 0,
            priority,
            milli: 1000,
            guarantee: if within_guarantee { vec![pool_flavor.clone()] } else { Vec::new() },
            starving,
            fair_share: false,
            overshoot: false,
            consolidate: false,
            team: Team::Own,
        };
        let job = engine.compile(&preemptor).expect("compiles");
        let without = |gone: &[u64]| {
            let mut copy = engine.clone();
            for &a in gone {
                copy.release(a).expect("a live allocation");
            }
            copy.place(&job).is_ok()
        };
        match engine.plan_preemption(&job, &right, &victims) {
            Some(chosen) => {
                for a in &chosen {
                    let v = victims.iter().find(|v| v.alloc == *a).expect("a known victim");
                    let own = v.queue == right.queue;
                    let entitled = v.priority < priority
                        || (!own && !v.reclaim_protected && within_guarantee && !v.borrowed.is_empty())
                        || (!own && !v.reclaim_protected && starving && v.priority <= priority && !v.started_starved);
                    prop_assert!(v.preemptible && v.min_runtime_left_s == 0 && !v.budget_spent && entitled, "{v:?} is not the preemptor's to stop");
                }
                prop_assert!(without(&chosen), "the preemptor does not fit after {chosen:?}");
                for i in 0..chosen.len() {
                    let rest: Vec<u64> = chosen.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &a)| a).collect();
                    prop_assert!(!without(&rest), "victim {} was not needed", chosen[i]);
                }
                let key = |v: &Victim| (usize::from(v.preempted_times >= gantry_engine::preempt::PREEMPTED_TIMES_LAST || v.restarted_after_reclaim), v.price());
                let of = |a: &u64| victims.iter().find(|v| v.alloc == *a).expect("known");
                let plan = chosen.iter().fold((0usize, 0u64), |(r, l), a| (r + key(of(a)).0, l + key(of(a)).1));
                for v in victims.iter().filter(|v| v.cause(&right).is_some()) {
                    prop_assert!(!(without(&[v.alloc]) && key(v) < plan), "{v:?} alone makes room for less than {plan:?}");
                }
            }
            None => {
                let all: Vec<u64> = victims.iter().filter(|v| v.cause(&right).is_some()).map(|v| v.alloc).collect();
                prop_assert!(!without(&all), "a plan existed: stopping every eligible job makes room");
            }
        }
    }
}
