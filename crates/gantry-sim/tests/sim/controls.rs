//! Job controls in the time replay: time limits end jobs (and planning counts on them),
//! holds keep jobs waiting, array throttles and per-user limits cap what runs at once, and
//! every waiting job carries a typed reason and, where reserved, an estimated start (`why`).

use crate::TWO_A100;
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, parse_queues, read_trace};
use gantry_types::{PendingReason, QueueTree};

fn replay_on(fleet: &str, trace: &str, options: &ReplayOptions) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(fleet, catalog).expect("fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("trace");
    run_trace(&fleet, catalog, &trace.jobs, Policy::Default, 1, options).expect("replays")
}

fn fair(queues: &str) -> Order {
    Order::FairShare(parse_queues(queues, Catalog::embedded()).expect("queue file"))
}

#[test]
fn a_time_limit_ends_the_job_and_fails_its_afterok_dependents() {
    // a needs 500 s but may run 100; b runs after a succeeds (never), c after it fails.
    let trace = r#"{"arrival_s": 0, "duration_s": 500, "job": {"name": "a", "time_limit": "100s", "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 10, "job": {"name": "b", "after": ["afterok:a"], "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 10, "job": {"name": "c", "after": ["afternotok:a"], "gpu": {"count": 1}}}
"#;
    let r = replay_on(TWO_A100, trace, &ReplayOptions::default());
    assert_eq!(r.time_limit_ended, 1);
    assert_eq!((r.started, r.dependency_never), (2, 1), "a and c ran; b never can");
    assert_eq!(r.delay_max_s, 0, "c became eligible when a was stopped, at 100");
    // The limit, not the duration, is what planning counts on: a 2-GPU job reserved behind a
    // job limited to 300 s is promised 300 even though that job is done at 50.
    let trace = r#"{"arrival_s": 0, "duration_s": 50, "job": {"name": "short", "time_limit": "300s", "gpu": {"count": 1}}}
{"arrival_s": 1, "duration_s": 10, "job": {"name": "wide", "gpu": {"count": 2}}}
"#;
    let options = ReplayOptions { backfill: Backfill::Reserve, until_s: Some(10), ..Default::default() };
    let r = replay_on(TWO_A100, trace, &options);
    let wide = r.pending.iter().find(|p| p.job == "wide").expect("waiting at 10");
    assert_eq!(wide.estimate_s, Some(300));
    assert!(matches!(wide.reason, PendingReason::Resources { .. }), "{:?}", wide.reason);
}

#[test]
fn held_jobs_wait_and_say_so() {
    let trace = r#"{"arrival_s": 0, "duration_s": 10, "job": {"name": "a", "hold": true, "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 10, "job": {"name": "b", "gpu": {"count": 1}}}
"#;
    let r = replay_on(TWO_A100, trace, &ReplayOptions::default());
    assert_eq!((r.started, r.held), (1, 1));
    assert_eq!(r.pending.len(), 1);
    assert_eq!((r.pending[0].job.as_str(), &r.pending[0].reason), ("a", &PendingReason::Held));
    assert_eq!(r.pending[0].reason.to_string(), "held (release it to let it start)");
}

#[test]
fn an_array_throttle_caps_running_elements_and_a_dependency_names_the_whole_array() {
    let fleet = TWO_A100.replace("count = 2", "count = 8");
    let trace = r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "sweep", "array": "0-5%2", "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 100, "job": {"name": "report", "after": ["afterok:sweep"], "gpu": {"count": 1}}}
"#;
    let options = ReplayOptions { until_s: Some(50), ..Default::default() };
    let early = replay_on(&fleet, trace, &options);
    let throttled = early.pending.iter().filter(|p| matches!(p.reason, PendingReason::ArrayThrottle { .. })).count();
    assert_eq!(throttled, 4, "two of six run, eight GPUs notwithstanding: {:?}", early.pending);
    let report = early.pending.iter().find(|p| p.job == "report").expect("waits");
    let PendingReason::Dependency { waiting_on } = &report.reason else { panic!("{:?}", report.reason) };
    assert_eq!(waiting_on.len(), 6, "every element");
    let done = replay_on(&fleet, trace, &ReplayOptions::default());
    assert_eq!(done.started, 7);
    // Three rounds of two, then the report: its wait is the sweep's 300 s.
    assert_eq!(done.delay_max_s, 200, "the last pair waited 200 s");
    assert_eq!(done.pending, Vec::new());
}

#[test]
fn per_user_limits_cap_running_jobs_and_gpus() {
    let fleet = TWO_A100.replace("count = 2", "count = 8");
    let queues = r#"
[[queue]]
name = "default"
[user_limits]
max_running_jobs = 3
[[user]]
name = "bob"
max_gpus = 2
"#;
    let job = |n: usize, user: &str, gpus: u32| {
        format!(
            "{{\"arrival_s\": 0, \"duration_s\": 100, \"job\": {{\"name\": \"{user}-{n}\", \"user\": \"{user}\", \"gpu\": {{\"count\": {gpus}}}}}}}\n"
        )
    };
    let mut trace = String::new();
    for n in 0..5 {
        trace += &job(n, "alice", 1);
    }
    for n in 0..3 {
        trace += &job(n, "bob", 1);
    }
    let options = ReplayOptions { order: fair(queues), until_s: Some(10), ..Default::default() };
    let r = replay_on(&fleet, &trace, &options);
    let waiting = |user: &str| r.pending.iter().filter(|p| p.job.starts_with(user)).collect::<Vec<_>>();
    assert_eq!(waiting("alice").len(), 2, "alice runs 3 (the default limit)");
    assert_eq!(waiting("bob").len(), 1, "bob runs 2 GPUs' worth");
    assert_eq!(
        waiting("bob")[0].reason,
        PendingReason::UserLimit { user: "bob".into(), limit: "gpus".into(), used: 2000, bound: 2000 }
    );
    assert_eq!(waiting("alice")[0].reason.to_string(), "user alice runs 3 jobs, the limit is 3");
    assert_eq!(r.user_limit_waited, 3);
    // Without the queue file's limits, all eight start at once.
    let free = ReplayOptions { order: Order::FairShare(QueueTree::flat(["default"], 3600, 86_400)), ..options };
    assert_eq!(replay_on(&fleet, &trace, &free).pending.len(), 0);
}

#[test]
fn deeper_reservations_give_estimates_and_are_kept() {
    // Two GPUs. a holds one until 100, b one until 200; w1 (2 GPUs, 100 s) and w2 (2 GPUs,
    // 50 s) queue behind; s (1 GPU, 40 s) arrives later.
    let trace = r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "a", "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 200, "job": {"name": "b", "gpu": {"count": 1}}}
{"arrival_s": 1, "duration_s": 100, "job": {"name": "w1", "gpu": {"count": 2}}}
{"arrival_s": 2, "duration_s": 50, "job": {"name": "w2", "gpu": {"count": 2}}}
{"arrival_s": 3, "duration_s": 40, "job": {"name": "s", "gpu": {"count": 1}}}
"#;
    let depth = |n: usize, until: Option<u64>| {
        let options =
            ReplayOptions { backfill: Backfill::Reserve, reserve_depth: n, until_s: until, ..Default::default() };
        replay_on(TWO_A100, trace, &options)
    };
    let snapshot = depth(2, Some(5));
    let estimate = |job: &str| snapshot.pending.iter().find(|p| p.job == job).and_then(|p| p.estimate_s);
    assert_eq!(estimate("w1"), Some(200), "both GPUs free once b ends");
    assert_eq!(estimate("w2"), Some(300), "after w1");
    assert_eq!(estimate("s"), None, "not reserved");
    // At 100 (a's GPU free) s runs to 140, before w1's reserved 200: it is backfilled, and
    // every reserved start is kept.
    let two = depth(2, None);
    assert_eq!((two.reserved, two.reserved_late), (2, 0));
    assert_eq!(two.started, 5);
    // EASY (depth 1) also keeps its one promise; depth 2 promised w2 too.
    let one = depth(1, None);
    assert_eq!(one.reserved_late, 0);
}
