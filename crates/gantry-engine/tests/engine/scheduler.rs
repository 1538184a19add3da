//! The scheduling cycle driven directly, as the live controller will: submit, cycle, carry
//! out decisions, report ends and kills. What the simulator measures at scale is checked here
//! step by step on a fleet small enough to reason about.

use crate::support::{engine, jobs};
use gantry_engine::Policy;
use gantry_engine::sched::{Admission, Backfill, Decision, Order, SchedJob, Scheduler, SchedulerConfig};
use gantry_types::{DependencyKind, PendingReason, QueueTree};

const TWO_GPUS: &str =
    "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";

fn job(s: &Scheduler, name: &str, queue: &str, gpus: u32, priority: i32, length: u64) -> SchedJob {
    let spec = jobs(&format!("[[job]]\nname = \"{name}\"\ngpu = {{ count = {gpus} }}\n")).remove(0);
    SchedJob {
        name: name.into(),
        queue: queue.into(),
        priority,
        lifecycle: Default::default(),
        control: Default::default(),
        planned_length_s: Some(length),
        after: Vec::new(),
        compiled: s.engine().compile(&spec).expect("compiles"),
    }
}

fn started(decisions: &[Decision]) -> Vec<u64> {
    decisions.iter().filter_map(|d| if let Decision::Start { job, .. } = d { Some(*job) } else { None }).collect()
}

#[test]
fn a_cycle_starts_what_fits_reserves_the_head_and_explains_the_rest() {
    let config = SchedulerConfig { backfill: Backfill::Reserve, ..Default::default() };
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), config);
    let a = job(&s, "a", "default", 1, 0, 100);
    assert_eq!(s.submit(1, a, 0), Ok(Admission::Queued { starving_at: None }));
    let d = s.cycle(0);
    assert_eq!(started(&d), [1]);
    let Decision::Start { alloc: a_alloc, .. } = d[0] else { unreachable!() };
    // wide needs both GPUs: reserved at a's end; long would hold the free GPU past it, short
    // (ends by then) is backfilled.
    for (id, j) in [
        (2, job(&s, "wide", "default", 2, 0, 50)),
        (3, job(&s, "long", "default", 1, 0, 500)),
        (4, job(&s, "short", "default", 1, 0, 60)),
    ] {
        s.submit(id, j, 10).expect("submits");
    }
    assert_eq!(started(&s.cycle(10)), [4], "short fits before wide's reserved start");
    let why: Vec<(String, Option<u64>, String)> =
        s.pending().into_iter().map(|p| (p.job, p.estimate_s, p.reason.kind())).collect();
    assert_eq!(
        why,
        [
            ("long".to_string(), None, "reservation".to_string()),
            ("wide".to_string(), Some(100), "resources: insufficient-whole-gpus".to_string())
        ]
    );
    // Resources by node class: what the A100 nodes have free now.
    let wide = s.pending().into_iter().find(|p| p.job == "wide").expect("waits");
    let PendingReason::Resources { by_class, .. } = &wide.reason else { panic!("{:?}", wide.reason) };
    let a100 = gantry_types::ClassFree {
        model: "A100-SXM4-80GB".into(),
        accepted: true,
        nodes: 1,
        max_whole_free_on_node: 0,
        free_milli: 0,
    };
    assert_eq!(by_class, &[a100]);
    assert!(
        wide.reason.to_string().ends_with("[A100-SXM4-80GB: 0 free, at most 0 whole on one of 1 node(s)]"),
        "{}",
        wide.reason
    );
    assert_eq!(
        s.submit(2, job(&s, "again", "default", 1, 0, 1), 10),
        Err(gantry_engine::sched::SchedError::Duplicate(2))
    );
    // a ends at 100 (short at 70): wide starts as promised.
    let short_alloc = s.engine().allocations().keys().copied().find(|&k| k != a_alloc).expect("short runs");
    s.ended(short_alloc, true, 70).expect("running");
    s.ended(a_alloc, true, 100).expect("running");
    assert_eq!(started(&s.cycle(100)), [2]);
    assert_eq!((s.stats().promised.len(), s.stats().late.len()), (2, 0), "wide, then long behind it");
}

#[test]
fn preemption_decisions_stop_victims_and_the_preemptor_gets_their_capacity() {
    let tree = QueueTree::flat(["low", "high"], 3600, 86_400);
    let config = SchedulerConfig { order: Order::FairShare(tree), preempt: true, ..Default::default() };
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), config);
    s.submit(1, job(&s, "l1", "low", 1, 0, 1000), 0).expect("submits");
    s.submit(2, job(&s, "l2", "low", 1, 0, 1000), 0).expect("submits");
    assert_eq!(started(&s.cycle(0)).len(), 2);
    let admission = s.submit(3, job(&s, "urgent", "high", 1, 10, 50), 100).expect("submits");
    assert_eq!(admission, Admission::Queued { starving_at: Some(100 + 86_400) });
    let d = s.cycle(100);
    let stops: Vec<_> = d.iter().filter(|d| matches!(d, Decision::Stop { .. })).collect();
    assert_eq!(stops.len(), 1, "one victim is enough: {d:?}");
    let Decision::Stop { alloc, kill_at, cause, .. } = *stops[0] else { unreachable!() };
    assert_eq!((kill_at, cause), (130, "priority"));
    assert!(matches!(s.pending()[0].reason, PendingReason::Preempting { victims: 1, until_s: 130 }));
    // Nothing else may take the capacity being freed; after the kill, urgent starts.
    let (victim, cause, again) = s.killed(alloc, 130).expect("running");
    assert_eq!((cause, again), ("priority", Admission::Queued { starving_at: Some(86_400) }));
    assert_eq!(started(&s.cycle(130)), [3]);
    assert!(s.pending().iter().any(|p| p.job == if victim == 1 { "l1" } else { "l2" }), "the victim waits again");
}

#[test]
fn dependencies_and_holds_keep_jobs_out_of_the_queue() {
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), SchedulerConfig::default());
    s.submit(1, job(&s, "prep", "default", 1, 0, 10), 0).expect("submits");
    let mut train = job(&s, "train", "default", 1, 0, 10);
    train.after = vec![(DependencyKind::AfterOk, 1)];
    let mut cleanup = job(&s, "cleanup", "default", 1, 0, 10);
    cleanup.after = vec![(DependencyKind::AfterNotOk, 1)];
    let mut held = job(&s, "held", "default", 1, 0, 10);
    held.control.hold = true;
    assert_eq!(s.submit(2, train, 0), Ok(Admission::Dependencies));
    assert_eq!(s.submit(3, cleanup, 0), Ok(Admission::Dependencies));
    assert_eq!(s.submit(4, held, 0), Ok(Admission::Held));
    let d = s.cycle(0);
    assert_eq!(started(&d), [1]);
    let Decision::Start { alloc, .. } = d[0] else { unreachable!() };
    let woken = s.ended(alloc, true, 10).expect("running");
    assert_eq!(woken, [(2, Admission::Queued { starving_at: None }), (3, Admission::Never)]);
    assert_eq!(started(&s.cycle(10)), [2]);
    assert_eq!(s.pending().iter().map(|p| p.reason.clone()).collect::<Vec<_>>(), [PendingReason::Held]);
    // Released, it is eligible from then on; holding a queued job takes it out again.
    assert_eq!(s.release(4, 15), Ok(Admission::Queued { starving_at: None }));
    assert_eq!(s.release(4, 15).map_err(|e| e.to_string()), Err("job \"held\" is not held".to_string()));
    s.hold(4).expect("queued");
    assert_eq!(started(&s.cycle(15)), Vec::<u64>::new(), "held again");
    s.release(4, 20).expect("held");
    assert_eq!(started(&s.cycle(20)), [4]);
    assert_eq!(s.hold(4).map_err(|e| e.to_string()), Err("job \"held\" is not waiting (running or done)".to_string()));
    assert_eq!(s.hold(99).map_err(|e| e.to_string()), Err("no job 99".to_string()));
}

#[test]
fn a_plan_is_carried_out_on_its_exact_gpus_or_not_at_all() {
    let mut planner = engine(TWO_GPUS, Policy::BestFit);
    let one = jobs("[[job]]\nname = \"x\"\ngpu = { count = 1 }\n").remove(0);
    let one = planner.compile(&one).expect("compiles");
    let id = planner.place(&one).expect("fits");
    let tasks = planner.allocations()[&id].tasks.clone();
    // The same GPU is busy on the live engine: nothing is taken.
    let mut live = engine(TWO_GPUS, Policy::BestFit);
    let busy = live.place(&one).expect("fits");
    let before = live.state().used_milli();
    assert_eq!(live.place_exact(&one, &tasks), None);
    assert_eq!(live.state().used_milli(), before);
    live.check_invariants().expect("unchanged");
    // Freed, the exact grants are taken.
    live.release(busy).expect("held");
    let exact = live.place_exact(&one, &tasks).expect("free again");
    assert_eq!(live.allocations()[&exact].tasks, tasks);
    live.check_invariants().expect("consistent");
}

#[test]
fn a_drained_node_takes_nothing_new_until_resumed() {
    let mut engine = engine(TWO_GPUS, Policy::BestFit);
    let one = jobs("[[job]]\nname = \"x\"\ngpu = { count = 1 }\n").remove(0);
    let one = engine.compile(&one).expect("compiles");
    let running = engine.place(&one).expect("fits");
    assert_eq!(engine.set_drained("n", true), Ok(true));
    assert_eq!(engine.set_drained("n", true), Ok(false), "already drained");
    assert!(engine.is_drained("n"));
    let reasons = engine.place(&one).expect_err("drained");
    assert!(reasons[0].reason.to_string().contains("gantry.io/drained"), "{:?}", reasons);
    engine.release(running).expect("what ran keeps its allocation until it ends");
    assert_eq!(engine.set_drained("n", false), Ok(true));
    engine.place(&one).expect("resumed");
    assert!(engine.set_drained("nope", true).is_err());
    engine.check_invariants().expect("consistent");
}

/// A GPU reconfigured under a running scheduler: every job it holds is compiled again from
/// its spec, so a MIG job that waited for the layout starts; without a job's spec nothing
/// changes.
#[test]
fn a_reconfigured_gpu_takes_the_waiting_mig_job_once_jobs_are_compiled_again() {
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::Default), SchedulerConfig::default());
    let spec = jobs("[[job]]\nname = \"infer\"\ngpu = { mig = \"3g.40gb\" }\n").remove(0);
    let mig = SchedJob {
        name: "infer".into(),
        queue: "default".into(),
        priority: 0,
        lifecycle: Default::default(),
        control: Default::default(),
        planned_length_s: Some(100),
        after: Vec::new(),
        compiled: s.engine().compile(&spec).expect("compiles"),
    };
    s.submit(1, mig, 0).expect("submits");
    assert_eq!(started(&s.cycle(0)), Vec::<u64>::new(), "no GPU is in MIG mode yet");
    let instances = [0, 4].map(|start| gantry_types::MigInstanceSpec { profile: "3g.40gb".into(), start }).to_vec();
    let layout = gantry_types::GpuMode::Mig { instances };
    // A spec missing: refused, and the GPU keeps its mode.
    let refused = s.set_gpu_mode("n", 0, &layout, |_| None);
    assert!(refused.as_ref().is_err_and(|e| e.to_string().contains("job 1")), "{refused:?}");
    assert_eq!(s.engine().fleet_now().nodes[0].gpus[0].mode, gantry_types::GpuMode::Whole);
    assert_eq!(s.set_gpu_mode("n", 0, &layout, |id| (id == 1).then(|| spec.clone())), Ok(true));
    assert_eq!(started(&s.cycle(1)), [1], "compiled again, it starts on the new instances");
}

/// A job asking for `cpu` cores, `memory` GiB and one GPU: each pair is a request shape.
fn job_sized(s: &Scheduler, name: &str, queue: &str, cpu: u32, memory: u32) -> SchedJob {
    let spec =
        jobs(&format!("[[job]]\nname = \"{name}\"\ncpu = {cpu}\nmemory = \"{memory}GiB\"\ngpu = {{ count = 1 }}\n"))
            .remove(0);
    SchedJob { compiled: s.engine().compile(&spec).expect("compiles"), ..job(s, name, queue, 1, 0, 10) }
}

#[test]
fn a_long_queue_of_one_request_is_jumped_over_yet_every_job_says_why_it_waits() {
    // Three queues, together over the cycle's bound of looks, all of one request.
    let tree = QueueTree::flat(["a", "b", "c"], 3600, 86_400);
    let config = SchedulerConfig { order: Order::FairShare(tree), ..Default::default() };
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), config);
    let bound = gantry_engine::sched::CYCLE_VISITS_MAX;
    let per_queue = bound / 3 + 100;
    s.submit(1, job(&s, "wide", "a", 2, 0, 100), 0).expect("submits");
    assert_eq!(started(&s.cycle(0)), [1], "the fleet is full");
    let mut last = 0;
    for k in 0..3 * per_queue as u64 {
        last = k + 2;
        let queue = ["a", "b", "c"][(k % 3) as usize];
        s.submit(last, job(&s, "one", queue, 1, 0, 10), 1).expect("submits");
    }
    assert!(started(&s.cycle(1)).is_empty());
    // Every job, looked at or jumped over, has the refusal of its request.
    assert_eq!(s.reasons().count(), last as usize - 1);
    let why = s.why(last).expect("waits").reason;
    assert!(matches!(why, PendingReason::Resources { .. }), "{why:?}");
    assert_eq!(s.waiting_by_kind().values().sum::<u64>(), last - 1);
    // Room frees: two of the first in line start, however long the queues behind them.
    let alloc = s.allocation_of(1).expect("runs");
    s.ended(alloc, true, 100).expect("running");
    let first = started(&s.cycle(100));
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|&j| j <= 4), "{first:?}");
    assert_eq!(s.reasons().count(), last as usize - 3, "the two started have no reason");
}

#[test]
fn a_queue_of_many_request_shapes_is_looked_at_job_by_job_within_the_cycles_bound() {
    use gantry_engine::sched::{CYCLE_VISITS_MAX, SHAPES_JUMP_MAX};
    let tree = QueueTree::flat(["a", "b", "c"], 3600, 86_400);
    let config = SchedulerConfig { order: Order::FairShare(tree), ..Default::default() };
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), config);
    s.submit(1, job(&s, "wide", "a", 2, 0, 100), 0).expect("submits");
    assert_eq!(started(&s.cycle(0)), [1], "the fleet is full");
    // Per queue: more shapes than a pass jumps over (one job each), a long run of one of
    // them, and last a request of its own (no other queue's) that the cycle's bound keeps
    // the pass from.
    let run = CYCLE_VISITS_MAX / 3 + 100;
    let mut id = 1;
    let mut tail = Vec::new();
    for (k, queue) in ["a", "b", "c"].into_iter().enumerate() {
        for cpu in 2..=SHAPES_JUMP_MAX as u32 + 2 {
            id += 1;
            s.submit(id, job_sized(&s, "shape", queue, cpu, 8), 1).expect("submits");
        }
        for _ in 0..run {
            id += 1;
            s.submit(id, job_sized(&s, "run", queue, 2, 8), 1).expect("submits");
        }
        id += 1;
        s.submit(id, job_sized(&s, "tail", queue, 1, 16 + k as u32), 1).expect("submits");
        tail.push(id);
    }
    assert!(started(&s.cycle(1)).is_empty());
    // The order serves the queues one after another here (equal shares): the bound leaves
    // the last queue's tail unseen.
    let unseen = tail.iter().filter(|&&j| s.why(j).expect("waits").reason == PendingReason::QueueOrder).count();
    assert_eq!(unseen, 1, "the pass stopped at its bound");
}

/// A flood of backfill candidates on the nodes of reserved jobs costs a cycle a bounded number
/// of checks (each plans the fleet at every reservation's start): the rest wait for a later
/// cycle, refused for the reservation, and every promise is kept.
#[test]
fn a_flood_of_candidates_on_reserved_nodes_is_checked_a_bounded_number_of_times_a_cycle() {
    const EIGHT_GPUS: &str =
        "[[node]]\nname = \"n\"\ncpu = 256\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 8\n";
    use gantry_engine::sched::RESERVATION_CHECKS_MAX;
    let config = SchedulerConfig { backfill: Backfill::Reserve, reserve_depth: 4, ..Default::default() };
    let mut s = Scheduler::new(engine(EIGHT_GPUS, Policy::BestFit), config);
    for id in 1..=4 {
        s.submit(id, job(&s, &format!("hold{id}"), "default", 1, 0, 100), 0).expect("submits");
    }
    assert_eq!(started(&s.cycle(0)).len(), 4, "four GPUs held until 100");
    // Two jobs wanting the whole node are promised 100 and 150; then a flood of 1-GPU jobs
    // that would still run at 100 (each one a check: it shares the node with both plans).
    s.submit(10, job(&s, "wide1", "default", 8, 0, 50), 10).expect("submits");
    s.submit(11, job(&s, "wide2", "default", 8, 0, 50), 10).expect("submits");
    let flood = RESERVATION_CHECKS_MAX as u64 + 20;
    for id in 100..100 + flood {
        s.submit(id, job(&s, &format!("f{id}"), "default", 1, 0, 500), 10).expect("submits");
    }
    assert_eq!(started(&s.cycle(10)), Vec::<u64>::new(), "no candidate may delay a promise");
    assert_eq!(s.stats().reservation_checks_spent, 20, "past the bound, candidates wait unchecked");
    let reasons: Vec<String> =
        s.pending().into_iter().filter(|p| p.job.starts_with('f')).map(|p| p.reason.kind()).collect();
    assert_eq!(reasons.len() as u64, flood);
    assert!(reasons.iter().all(|r| r == "reservation"), "{reasons:?}");
    // The next cycle has its own checks; the promises hold.
    started(&s.cycle(11));
    assert_eq!(s.stats().reservation_checks_spent, 40);
    let holds: Vec<_> = s.engine().allocations().keys().copied().collect();
    for alloc in holds {
        s.ended(alloc, true, 100).expect("running");
    }
    assert_eq!(started(&s.cycle(100)), [10], "wide1 starts as promised");
    assert!(s.stats().late.is_empty() && s.stats().broken_without_cause.is_empty());
}

/// A job refused for where it may run (a node selector no node matches, whole nodes none of
/// which is idle) does not refuse the same request without that constraint in the same cycle:
/// which nodes a group may use is part of its shape.
#[test]
fn a_constrained_job_refused_does_not_refuse_the_same_request_unconstrained() {
    let mut s = Scheduler::new(engine(TWO_GPUS, Policy::BestFit), SchedulerConfig::default());
    let with = |s: &Scheduler, name: &str, extra: &str| {
        let text = format!("[[job]]\nname = \"{name}\"\n[[job.task]]\nname = \"t\"\n{extra}gpu = {{ count = 1 }}\n");
        SchedJob {
            compiled: s.engine().compile(&jobs(&text).remove(0)).expect("compiles"),
            ..job(s, name, "default", 1, 0, 100)
        }
    };
    let first = job(&s, "first", "default", 1, 0, 100);
    s.submit(1, first, 0).expect("submits");
    assert_eq!(started(&s.cycle(0)), [1]);
    let nowhere = with(&s, "nowhere", "node_selector = { pool = \"none\" }\n");
    let whole = with(&s, "whole", "exclusive_node = true\n");
    let plain = with(&s, "plain", "");
    for (id, j) in [(2, nowhere), (3, whole), (4, plain)] {
        s.submit(id, j, 1).expect("submits");
    }
    assert_eq!(started(&s.cycle(1)), [4], "the plain request starts on the free GPU");
    let reasons: Vec<(String, String)> = s.pending().into_iter().map(|p| (p.job, p.reason.kind())).collect();
    assert!(reasons.iter().any(|(j, r)| j == "whole" && r.contains("node-in-use")), "{reasons:?}");
}

/// Waiting jobs' reasons are kept per request group and counted as they change
/// (`sched/waiting.rs`): on random mixes of requests, priorities, holds, releases, cancels and
/// ends, the counts by kind, the listing of reasons and every job's own `why` must agree
/// after each cycle, under every backfill mode (greedy with a reservation, the one mode where
/// a pass jumps over jobs refused for delaying it). Queues grow to dozens of jobs of a few
/// requests, so passes jump. (What this holds is agreement, not which refusal is right: that
/// the jump changes no start is held by the replays compared before and after it.)
#[test]
fn reasons_kept_per_request_agree_with_every_jobs_own_why_on_random_runs() {
    const TWO_NODES: &str = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 16\nmemory = \"256GiB\"\n\
        [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
    for seed in 0..30u64 {
        for backfill in [Backfill::Greedy, Backfill::Reserve, Backfill::Off] {
            let mut rng = gantry_engine::rng::SeededRng::new(seed);
            let mut draw = |n: u64| rng.below(n);
            let tree = QueueTree::flat(["a", "b", "c"], 3600, 86_400);
            let config = SchedulerConfig { order: Order::FairShare(tree), backfill, ..Default::default() };
            let mut s = Scheduler::new(engine(TWO_NODES, Policy::BestFit), config);
            let mut running: Vec<gantry_engine::AllocId> = Vec::new();
            let mut waiting: Vec<u64> = Vec::new();
            for step in 0..80u64 {
                let now = step * 40;
                for _ in 0..draw(12) {
                    let id = 1000 + step * 20 + draw(20);
                    let queue = ["a", "b", "c"][draw(3) as usize];
                    let spec = format!(
                        "[[job]]\nname = \"j{id}\"\ncpu = {}\ngpu = {{ count = {} }}\n",
                        [1, 2][draw(2) as usize],
                        [1, 1, 2, 4][draw(4) as usize]
                    );
                    let job = SchedJob {
                        compiled: s.engine().compile(&jobs(&spec).remove(0)).expect("compiles"),
                        ..job(&s, "j", queue, 1, draw(2) as i32, [30, 200, 2000][draw(3) as usize])
                    };
                    if s.submit(id, job, now).is_ok() {
                        waiting.push(id);
                    }
                }
                if !waiting.is_empty() {
                    let id = waiting[draw(waiting.len() as u64) as usize];
                    match draw(6) {
                        0 => drop(s.hold(id)),
                        1 => drop(s.release(id, now)),
                        2 => drop(s.cancel_waiting(id, now)),
                        _ => {}
                    }
                }
                while !running.is_empty() && draw(3) == 0 {
                    let alloc = running.swap_remove(draw(running.len() as u64) as usize);
                    s.ended(alloc, true, now);
                }
                for d in s.cycle(now) {
                    if let Decision::Start { alloc, job, .. } = d {
                        running.push(alloc);
                        waiting.retain(|&w| w != job);
                    }
                }
                let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
                for p in s.pending() {
                    *expected.entry(p.reason.kind()).or_default() += 1;
                }
                let context = format!("seed {seed}, {backfill:?}, step {step}");
                assert_eq!(s.waiting_by_kind(), expected, "{context}");
                for (id, reason, _) in s.reasons() {
                    let why = s.why(id).unwrap_or_else(|| panic!("{context}: job {id} has a reason, not waiting"));
                    assert_eq!(why.reason.kind(), reason.kind(), "{context}: job {id}");
                }
            }
        }
    }
}

/// A job no reclaim may stop (here: not preemptible) borrows only where no guarantee holder ran
/// within its planned length. Before the usage record reaches back that far — a fresh
/// scheduler knows no past — every holder counts as having run, and the reason says so; a
/// controller that takes over carries the record and the guarantee clocks
/// ([`gantry_engine::sched::SchedulerMemory`]), so a failover neither forgets a holder's use
/// nor restarts the record.
#[test]
fn an_unstoppable_borrower_waits_for_the_usage_record_which_a_new_controller_carries() {
    let queues = "[fair_share]\nhalf_life = \"1h\"\nstarvation = \"1d\"\n\n[[queue]]\nname = \"holder\"\nweight = 1\n\
                  quota = [{ flavor = \"A100-SXM4-80GB\", guaranteed = 1 }]\n\n[[queue]]\nname = \"batch\"\nweight = 1\n";
    let tree = gantry_spec::parse_queues(queues, gantry_catalog::Catalog::embedded()).expect("queues");
    let config = SchedulerConfig { order: Order::FairShare(tree), preempt: true, ..Default::default() };
    let fresh = || Scheduler::new(engine(TWO_GPUS, Policy::BestFit), config.clone());
    let pinned = |s: &Scheduler, name: &str, length: u64| {
        let mut j = job(s, name, "batch", 2, 0, length);
        j.lifecycle.preemptible = false;
        j
    };
    let mut s = fresh();
    s.submit(1, pinned(&s, "pinned", 3600), 0).expect("submits");
    assert!(started(&s.cycle(0)).is_empty(), "the record starts now: holder's past is unknown");
    let why = s.why(1).expect("waits").reason.to_string();
    assert!(why.contains("usage is known only since 0 s, so holder counts as having run"), "{why}");
    // An hour on, holder has not run: the loan is made.
    assert_eq!(started(&s.cycle(3600)), [1]);

    // holder runs for a while; a new pinned job must wait an hour after holder's use.
    let mut s = fresh();
    s.submit(1, job(&s, "h", "holder", 1, 0, 600), 0).expect("submits");
    let d = s.cycle(0);
    assert_eq!(started(&d), [1]);
    let Decision::Start { alloc, .. } = d[0] else { unreachable!() };
    s.ended(alloc, true, 600).expect("running");
    s.submit(2, pinned(&s, "pinned", 3600), 3700).expect("submits");
    assert!(started(&s.cycle(3700)).is_empty(), "holder ran within the last hour");
    let memory = s.memory();
    assert!(memory.usage_since == Some(0) && !memory.usage.is_empty(), "{memory:?}");

    // A controller taking over at 3,700: the same reason, not "known only since 3,700 s".
    let mut taken = fresh();
    taken.submit(2, pinned(&taken, "pinned", 3600), 3700).expect("submits");
    assert!(taken.remember(&memory));
    assert!(started(&taken.cycle(3700)).is_empty());
    let why = taken.why(2).expect("waits").reason.to_string();
    assert!(why.contains("holder did"), "{why}");
    assert_eq!(taken.memory().usage, memory.usage);
    // Holder's use ended at 600: the loan is made an hour later, in both.
    assert!(started(&s.cycle(4199)).is_empty() && started(&taken.cycle(4199)).is_empty());
    assert_eq!(started(&s.cycle(4200)), [2]);
    assert_eq!(started(&taken.cycle(4200)), [2]);

    // A record said to start in the future (a hand-edited checkpoint) starts at the first
    // cycle instead of never covering anything.
    let mut edited = fresh();
    edited.submit(2, pinned(&edited, "pinned", 3600), 3700).expect("submits");
    assert!(edited.remember(&gantry_engine::sched::SchedulerMemory { usage_since: Some(u64::MAX), ..memory.clone() }));
    assert!(started(&edited.cycle(3700)).is_empty());
    let why = edited.why(2).expect("waits").reason.to_string();
    assert!(why.contains("usage is known only since 3700 s"), "{why}");
    assert_eq!(started(&edited.cycle(7300)), [2]);
}
