//! Preemption in the time replay: a higher-priority job gets capacity within its victims'
//! grace period; non-preemptible jobs and jobs inside their minimum runtime are left alone;
//! victims wait again and their work is counted as lost.

use crate::TWO_A100;
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, read_trace};
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
