//! Moving running work (`Scheduler::relocate`) and cordoning single GPUs: a move keeps the
//! job's start and its accounting, never lands on a cordoned GPU, happens for all the
//! allocations asked or for none, and is refused for what is not running or is being stopped;
//! a placement around GPUs held for another job leaves them as they were.

use crate::support::{engine, jobs};
use gantry_engine::sched::{Decision, Order, SchedError, SchedJob, Scheduler, SchedulerConfig};
use gantry_engine::{EngineError, Policy};
use gantry_types::{JobControl, PendingReason, QueueTree, UserLimit};

fn fleet(gpus: u32) -> String {
    format!(
        "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = {gpus}\n"
    )
}

fn job(s: &Scheduler, name: &str, queue: &str, user: &str, priority: i32) -> SchedJob {
    let spec = jobs(&format!("[[job]]\nname = \"{name}\"\ngpu = {{ count = 1 }}\n")).remove(0);
    SchedJob {
        name: name.into(),
        queue: queue.into(),
        priority,
        lifecycle: Default::default(),
        control: JobControl { user: Some(user.into()), ..Default::default() },
        planned_length_s: Some(1000),
        after: Vec::new(),
        compiled: s.engine().compile(&spec).expect("compiles"),
    }
}

fn starts(decisions: &[Decision]) -> Vec<(u64, u64)> {
    decisions
        .iter()
        .filter_map(|d| if let Decision::Start { job, alloc, .. } = d { Some((*job, *alloc)) } else { None })
        .collect()
}

fn gpu_of(s: &Scheduler, alloc: u64) -> u32 {
    s.placement(alloc).expect("running")[0].gpus[0].gpu()
}

#[test]
fn a_moved_job_keeps_its_start_and_its_accounting_and_avoids_cordoned_gpus() {
    // One GPU per user at a time: what a move counts twice or forgets shows at once.
    let mut tree = QueueTree::flat(["team"], 3600, 86_400);
    tree.user_default = UserLimit { max_running_jobs: None, max_gpus_milli: Some(1000) };
    let config = SchedulerConfig { order: Order::FairShare(tree), ..Default::default() };
    let mut s = Scheduler::new(engine(&fleet(3), Policy::BestFit), config);
    s.submit(1, job(&s, "a", "team", "ann", 0), 0).expect("submits");
    s.submit(2, job(&s, "b", "team", "ann", 0), 0).expect("submits");
    let first = starts(&s.cycle(0));
    assert_eq!(first.len(), 1, "ann's limit lets one start: {first:?}");
    let (job_a, old) = first[0];
    let from = gpu_of(&s, old);

    assert_eq!(s.set_gpu_cordoned("n", from, true), Ok(true));
    assert_eq!(s.set_gpu_cordoned("n", from, true), Ok(false), "already cordoned");
    let moved = s.relocate(&[old], 50).expect("running").expect("two GPUs are free");
    let new = moved[0];
    assert_ne!(new, old);
    assert_ne!(gpu_of(&s, new), from, "never onto the cordoned GPU");
    assert_eq!(s.running(new), Some((job_a, 0)), "it keeps its start");
    assert_eq!(s.running(old), None);
    assert!(s.engine().allocations().get(&old).is_none());
    s.engine().check_invariants().expect("consistent");

    // Still one GPU counted for ann: b waits for her limit, then starts once a ends.
    assert!(starts(&s.cycle(60)).is_empty());
    assert!(matches!(s.why(2).expect("waits").reason, PendingReason::UserLimit { .. }), "{:?}", s.why(2));
    assert_eq!(s.ended(old, true, 70), None, "the old allocation is gone");
    s.ended(new, true, 100).expect("the moved one runs");
    assert_eq!(starts(&s.cycle(100)).iter().map(|d| d.0).collect::<Vec<_>>(), [2]);
}

#[test]
fn a_move_is_all_or_nothing() {
    let mut s = Scheduler::new(engine(&fleet(3), Policy::BestFit), SchedulerConfig::default());
    s.submit(1, job(&s, "x", "default", "ann", 0), 0).expect("submits");
    s.submit(2, job(&s, "y", "default", "bob", 0), 0).expect("submits");
    let running: Vec<u64> = starts(&s.cycle(0)).into_iter().map(|d| d.1).collect();
    assert_eq!(running.len(), 2);
    let before: Vec<u32> = running.iter().map(|&a| gpu_of(&s, a)).collect();
    let free = (0..3).find(|g| !before.contains(g)).expect("a third GPU");
    // Every GPU cordoned: neither can go anywhere, so neither moves.
    for gpu in 0..3 {
        s.set_gpu_cordoned("n", gpu, true).expect("a GPU of n");
    }
    assert_eq!(s.relocate(&running, 10), Ok(None));
    assert_eq!(running.iter().map(|&a| gpu_of(&s, a)).collect::<Vec<_>>(), before, "nothing changed");
    s.engine().check_invariants().expect("consistent");
    // One GPU open: only one of the two could move, so again neither does; one alone does.
    s.set_gpu_cordoned("n", free, false).expect("a GPU of n");
    assert_eq!(s.relocate(&running, 10), Ok(None));
    assert_eq!(running.iter().map(|&a| gpu_of(&s, a)).collect::<Vec<_>>(), before, "nothing changed");
    let moved = s.relocate(&running[..1], 10).expect("running").expect("the open GPU takes x");
    assert_eq!(gpu_of(&s, moved[0]), free);
    s.engine().check_invariants().expect("consistent");
    assert!(s.set_gpu_cordoned("n", 9, true).is_err(), "no GPU 9 on n");
    assert!(s.set_gpu_cordoned("nope", 0, true).is_err());
}

#[test]
fn what_is_not_running_or_is_being_stopped_cannot_move() {
    let tree = QueueTree::flat(["low", "high"], 3600, 86_400);
    let config = SchedulerConfig { order: Order::FairShare(tree), preempt: true, ..Default::default() };
    let mut s = Scheduler::new(engine(&fleet(1), Policy::BestFit), config);
    assert_eq!(s.relocate(&[99], 0), Err(SchedError::Engine(EngineError::UnknownAllocation(99))));
    s.submit(1, job(&s, "low", "low", "ann", 0), 0).expect("submits");
    let (_, victim) = starts(&s.cycle(0))[0];
    s.submit(2, job(&s, "urgent", "high", "bob", 10), 100).expect("submits");
    let stopped = s.cycle(100);
    assert!(stopped.iter().any(|d| matches!(d, Decision::Stop { alloc, .. } if *alloc == victim)), "{stopped:?}");
    assert_eq!(s.relocate(&[victim], 101), Err(SchedError::Stopping(victim)));
    assert!(s.engine().allocations().contains_key(&victim), "still there until killed");
}

#[test]
fn a_placement_avoids_the_gpus_asked_and_leaves_them_as_they_were() {
    // GPUs held for a preemptor that has not started (`Engine::place_avoiding`): a start goes
    // around them while it fits elsewhere, and they are open again after.
    let mut e = engine(&fleet(3), Policy::BestFit);
    let spec = jobs("[[job]]\nname = \"x\"\ngpu = { count = 1 }\n").remove(0);
    let x = e.compile(&spec).expect("compiles");
    let avoid: Vec<_> = [0, 1].iter().map(|&i| e.gpu_by_name("n", i).expect("a GPU of n")).collect();
    let gpu = |e: &gantry_engine::Engine, alloc: u64| e.allocations()[&alloc].tasks[0].grants[0].gpu();
    let first = e.place_avoiding(&x, &avoid).expect("GPU 2 is free");
    assert_eq!(gpu(&e, first), e.gpu_by_name("n", 2).expect("GPU 2"));
    assert!(e.place_avoiding(&x, &avoid).is_err(), "only the avoided GPUs are left");
    e.check_invariants().expect("consistent");
    // Nothing stays cordoned: plain placements take GPUs 0 and 1.
    let rest = [e.place(&x).expect("a free GPU"), e.place(&x).expect("the last one")];
    let mut taken: Vec<_> = rest.iter().map(|&a| gpu(&e, a)).collect();
    taken.sort_unstable();
    assert_eq!(taken, avoid);
}
