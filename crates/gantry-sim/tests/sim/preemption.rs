//! Preemption in the time replay: a higher-priority job gets capacity within its victims'
//! grace period; non-preemptible jobs and jobs inside their minimum runtime are left alone;
//! victims wait again and their work is counted as lost. A queue within its guarantee
//! reclaims it from borrowers; a job past the starvation bound may stop work too.

use crate::TWO_A100;
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, parse_queues, read_trace};
use gantry_types::QueueTree;

fn replay(trace: &str, preempt: bool) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(TWO_A100, catalog).expect("fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("trace");
    let order = Order::FairShare(QueueTree::flat(["low", "high"], 86_400, 30 * 86_400));
    let options = ReplayOptions { order, preempt, ..Default::default() };
    run_trace(&fleet, catalog, &trace.jobs, Policy::Default, 1, &options).expect("replays")
}

#[test]
fn a_higher_priority_job_gets_capacity_within_the_grace_period() {
    // Two low-priority jobs hold both GPUs for 1,000 s; an urgent 1-GPU job arrives at 100.
    let trace = r#"{"arrival_s": 0, "duration_s": 1000, "job": {"name": "l1", "queue": "low", "grace": 20, "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 1000, "job": {"name": "l2", "queue": "low", "grace": 20, "gpu": {"count": 1}}}
{"arrival_s": 100, "duration_s": 50, "job": {"name": "urgent", "queue": "high", "priority": 10, "gpu": {"count": 1}}}
"#;
    let without = replay(trace, false);
    assert_eq!(without.delay_max_s, 900, "without preemption it waits for a job to end");
    let with = replay(trace, true);
    assert_eq!(with.preemptions, 1, "one victim is enough");
    assert_eq!(with.delay_p99_s, 20, "it starts when the victim's 20 s grace ends");
    assert_eq!((with.started, with.never_started), (3, 0), "the victim runs again later");
    assert!((with.preempted_gpu_s_lost - 120.0).abs() < 1e-9, "the victim had run 120 s");
}

#[test]
fn protected_jobs_are_never_stopped() {
    let base = |l1: &str, l2: &str| {
        format!(
            "{{\"arrival_s\": 0, \"duration_s\": 1000, \"job\": {{\"name\": \"l1\", \"queue\": \"low\", {l1} \"gpu\": {{\"count\": 1}}}}}}\n\
             {{\"arrival_s\": 0, \"duration_s\": 1000, \"job\": {{\"name\": \"l2\", \"queue\": \"low\", {l2} \"gpu\": {{\"count\": 1}}}}}}\n\
             {{\"arrival_s\": 100, \"duration_s\": 50, \"job\": {{\"name\": \"urgent\", \"queue\": \"high\", \"priority\": 10, \"gpu\": {{\"count\": 1}}}}}}\n"
        )
    };
    let none = replay(&base("\"preemptible\": false,", "\"preemptible\": false,"), true);
    assert_eq!((none.preemptions, none.delay_max_s), (0, 900));
    // l2 may not be stopped before it has run 500 s: at 100 only l1 is eligible.
    let one = replay(&base("\"grace\": 0,", "\"min_runtime\": \"500s\", \"grace\": 0,"), true);
    assert_eq!((one.preemptions, one.delay_p99_s), (1, 0));
    // Equal priority gives no right to preempt.
    let same = base("", "").replace("\"priority\": 10", "\"priority\": 0");
    assert_eq!(replay(&same, true).preemptions, 0);
}

/// The queue-policy validations on the committed fixtures (written by
/// `tools/queue-fixtures.py`; numbers in docs/PERFORMANCE.md).
fn fixture_replay(trace: &str, queues: &str, backfill: Backfill, preempt: bool) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(include_str!("../fixtures/fair-fleet.toml"), catalog).expect("fixture fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("fixture trace");
    let order = Order::FairShare(parse_queues(queues, catalog).expect("fixture queues"));
    let options = ReplayOptions { order, backfill, preempt, ..Default::default() };
    run_trace(&fleet, catalog, &trace.jobs, Policy::Default, 42, &options).expect("replays")
}

#[test]
fn a_queue_within_its_guarantee_gets_it_within_the_grace_period_by_reclaim() {
    // team-a borrows the whole fleet; team-b submits within its guarantee (half) later.
    let (trace, queues) = (include_str!("../fixtures/reclaim.jsonl"), include_str!("../fixtures/reclaim-queues.toml"));
    let without = fixture_replay(trace, queues, Backfill::Greedy, false);
    assert!(without.delay_max_by_queue_s["team-b"] > 3600, "{:?}", without.delay_max_by_queue_s);
    let with = fixture_replay(trace, queues, Backfill::Greedy, true);
    assert!(
        with.delay_max_by_queue_s["team-b"] <= gantry_types::GRACE_DEFAULT_S,
        "every team-b job starts within one pass plus the grace period: {:?}",
        with.delay_max_by_queue_s
    );
    assert_eq!(with.preemptions_by_right.keys().collect::<Vec<_>>(), ["guarantee"], "only borrowers are stopped");
    assert_eq!((with.started, with.never_started), (120, 0), "the victims run again later");
    // With reservations too (a backfill check must never see capacity kept for a preemptor).
    for depth in [1, 4] {
        let catalog = Catalog::embedded();
        let fleet = parse_fleet(include_str!("../fixtures/fair-fleet.toml"), catalog).expect("fixture fleet");
        let jobs = read_trace(trace.as_bytes(), catalog, false).expect("fixture trace").jobs;
        let order = Order::FairShare(parse_queues(queues, catalog).expect("fixture queues"));
        let options = ReplayOptions {
            order,
            backfill: Backfill::Reserve,
            reserve_depth: depth,
            preempt: true,
            ..Default::default()
        };
        let r = run_trace(&fleet, catalog, &jobs, Policy::Default, 42, &options).expect("replays");
        assert!(r.delay_max_by_queue_s["team-b"] <= gantry_types::GRACE_DEFAULT_S, "depth {depth}: {r:?}");
    }
}

#[test]
fn with_preemption_no_job_waits_beyond_the_starvation_bound_plus_grace() {
    // Wide 8-GPU jobs starve behind a stream of 1-GPU jobs under greedy backfill that never
    // reserves (`greedy_reserve_after` past the trace).
    let (trace, queues) =
        (include_str!("../fixtures/starvation.jsonl"), include_str!("../fixtures/starvation-queues.toml"));
    let pure = queues.replace("starvation = \"1h\"", "starvation = \"1h\"\ngreedy_reserve_after = \"30d\"");
    let bound = parse_queues(queues, Catalog::embedded()).expect("queues").starvation_s;
    let without = fixture_replay(trace, &pure, Backfill::Greedy, false);
    assert!(without.delay_max_s > 2 * bound, "wide jobs starve: {:?}", without.delay_max_by_queue_s);
    // With the default (30 min), the wide job left behind longest is promised a start.
    let aging = fixture_replay(trace, queues, Backfill::Greedy, false);
    assert!(aging.delay_max_s < 2 * bound, "greedy reserves for the long-waiting: {:?}", aging.delay_max_by_queue_s);
    let with = fixture_replay(trace, &pure, Backfill::Greedy, true);
    assert!(
        with.delay_max_s <= bound + gantry_types::GRACE_DEFAULT_S,
        "max wait {} s, bound {bound} s: {:?}",
        with.delay_max_s,
        with.delay_max_by_queue_s
    );
    assert!(with.preemptions_by_right.get("starvation").is_some_and(|&n| n > 0));
    // Reservations keep wide jobs within the bound here without stopping anything.
    let reserve = fixture_replay(trace, queues, Backfill::Reserve, true);
    assert!(reserve.delay_max_s <= bound, "{:?}", reserve.delay_max_by_queue_s);
}

/// Seed 21 of `gantry synth` (1,200 jobs, three teams) on the demo fleet, in fair-share
/// order with preemption and no compression: a job killed for a starving one waits again
/// from its first submission, already past the starvation bound. Its starvation instant was
/// queued in the past, and the replay's clock ran backwards (an overflow panic) until it was
/// taken as now.
#[test]
fn a_victim_past_the_starvation_bound_starves_now_not_in_the_past() {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(include_str!("../../../../examples/demo-fleet.toml"), catalog).expect("demo fleet");
    let config = gantry_sim::synth::SynthConfig { jobs: 1200, seed: 21, tenants: 3, ..Default::default() };
    let text = gantry_sim::synth::generate(&fleet, catalog, &config).expect("a synthetic trace");
    let trace = read_trace(text.as_bytes(), catalog, false).expect("trace");
    let tree = gantry_sim::experiment::queue_tree(None, trace.jobs.iter().map(|j| j.job.queue.as_str())).expect("tree");
    let options = ReplayOptions { order: Order::FairShare(tree), preempt: true, ..Default::default() };
    let r = run_trace(&fleet, catalog, &trace.jobs, Policy::Default, 0, &options).expect("replays to the end");
    assert!(r.preemptions > 0, "the case needs a victim of starvation");
    assert_eq!(r.started + r.never_started, 1200);
}
