//! Backfill in the time replay: EASY reservations never let a backfilled job delay the
//! reserved start (checked on every start: a reserved job that starts after its first
//! promise is counted), and backfill raises allocation over none.

use crate::TWO_A100;
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Backfill, ReplayOptions, ReplayResult, run_trace};
use gantry_sim::synth::{SynthConfig, generate};
use gantry_spec::{parse_fleet, read_trace};

fn replay(fleet: &str, trace: &str, backfill: Backfill) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(fleet, catalog).expect("fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("trace");
    let options = ReplayOptions { backfill, ..Default::default() };
    run_trace(&fleet, catalog, &trace.jobs, Policy::Default, 1, &options).expect("replays")
}

#[test]
fn a_reservation_keeps_a_long_job_from_jumping_the_queue() {
    // a holds one GPU until 100; b needs both (arrives 10); c fits in the gap and ends at 70,
    // before b could start; d would hold a GPU until 270.
    let trace = r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "a", "gpu": {"count": 1}}}
{"arrival_s": 10, "duration_s": 50, "job": {"name": "b", "gpu": {"count": 2}}}
{"arrival_s": 20, "duration_s": 50, "job": {"name": "c", "gpu": {"count": 1}}}
{"arrival_s": 30, "duration_s": 200, "job": {"name": "d", "gpu": {"count": 1}}}
"#;
    let reserve = replay(TWO_A100, trace, Backfill::Reserve);
    // b starts at 100 as promised (waits 90); c is backfilled at 20; d, refused at 70 since it
    // would run past 100, is promised b's end (150) once b starts, and gets it.
    assert_eq!((reserve.reserved, reserve.reserved_late), (2, 0));
    assert_eq!(reserve.delay_max_s, 120, "d waits 30 → 150");
    // Why they waited: b for GPUs (until 100), d first for GPUs (30 → 70), then for the
    // reservation (70 → 100), then for GPUs again (100 → 150).
    let why = &reserve.wait_job_s_by_reason;
    assert_eq!(why.get("reservation"), Some(&30), "{why:?}");
    assert_eq!(why.get("resources: insufficient-whole-gpus"), Some(&(90 + 40 + 50)), "{why:?}");
    // Greedy lets d take c's GPU at 70, and b waits until d ends at 270.
    let greedy = replay(TWO_A100, trace, Backfill::Greedy);
    assert_eq!(greedy.delay_max_s, 260, "b waits 10 → 270");
    // No backfill: c waits behind b too.
    let off = replay(TWO_A100, trace, Backfill::Off);
    assert_eq!(off.started, 4);
    assert!(off.delay_p50_s > reserve.delay_p50_s);
}

#[test]
fn backfill_never_delays_a_reserved_start_and_raises_allocation() {
    let catalog = Catalog::embedded();
    let demo = include_str!("../../../../examples/demo-fleet.toml");
    let fleet = parse_fleet(demo, catalog).expect("demo fleet");
    for seed in 1..=3 {
        let config = SynthConfig { jobs: 800, seed, load: 1.2, ..SynthConfig::default() };
        let trace = generate(&fleet, catalog, &config).expect("generates");
        let off = replay(demo, &trace, Backfill::Off);
        let reserve = replay(demo, &trace, Backfill::Reserve);
        assert!(reserve.reserved > 10, "seed {seed}: {} reservations", reserve.reserved);
        assert_eq!(reserve.reserved_late, 0, "seed {seed}: a backfilled job delayed a reserved start");
        // Deeper reservations keep every promise too (each planned around the ones before it).
        let catalog = Catalog::embedded();
        let jobs = read_trace(trace.as_bytes(), catalog, false).expect("trace").jobs;
        let options = ReplayOptions { backfill: Backfill::Reserve, reserve_depth: 4, ..Default::default() };
        let deep = run_trace(&fleet, catalog, &jobs, Policy::Default, 1, &options).expect("replays");
        assert!(deep.reserved > reserve.reserved, "seed {seed}: more jobs get a promise");
        assert_eq!(deep.reserved_late, 0, "seed {seed}: a depth-4 promise was broken");
        assert!(
            reserve.mean_alloc_pct > off.mean_alloc_pct + 5.0,
            "seed {seed}: reserve {:.1} % vs off {:.1} %",
            reserve.mean_alloc_pct,
            off.mean_alloc_pct
        );
    }
}

/// A queue whose head is a long run of blocked 8-GPU jobs still runs its small jobs: the scan
/// past the blocked head is bounded by placement work, and big jobs no node has room for are
/// refused cheaply. The big jobs differ (CPU, memory) so no two share a request, as real
/// training jobs would; the old bound of 32 jobs never reached the small ones.
#[test]
fn greedy_backfill_reaches_small_jobs_behind_a_long_run_of_blocked_big_ones() {
    let fleet = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 224\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n";
    let mut trace = String::new();
    for i in 0..2 {
        trace += &format!(
            "{{\"arrival_s\": 0, \"duration_s\": 7200, \"job\": {{\"name\": \"fill{i}\", \"cpu\": 8, \"gpu\": {{\"count\": 7}}}}}}\n"
        );
    }
    for i in 0..200 {
        let (cpu, mem) = (8 + i % 50, 64 + i / 50);
        trace += &format!(
            "{{\"arrival_s\": 10, \"duration_s\": 3600, \"job\": {{\"name\": \"big{i}\", \"cpu\": {cpu}, \"memory\": \"{mem}GiB\", \"gpu\": {{\"count\": 8}}}}}}\n"
        );
    }
    for i in 0..2 {
        trace += &format!(
            "{{\"arrival_s\": 20, \"duration_s\": 600, \"job\": {{\"name\": \"small{i}\", \"cpu\": 2, \"gpu\": {{\"count\": 1}}}}}}\n"
        );
    }
    let r = replay(fleet, &trace, Backfill::Greedy);
    let small: Vec<u64> =
        r.events.iter().filter(|e| e.event == "start" && e.job.starts_with("small")).map(|e| e.time_s).collect();
    assert_eq!(small, [20, 20], "the two free GPUs go to the small jobs at once");
}

/// Under fair share, a reservation that frees in the middle of a pass (its job started) goes
/// to the first job refused before it that could not have one — here the wide queue's 2-GPU
/// job, first in the order — not to the next job the scan refuses. (It went to the narrow
/// queue's next job every time: the 2-GPU job waited 24 s and started last, after all twelve
/// 1-GPU jobs that arrived with it, with reservations on.) At depth 4 the four promises made
/// at t = 0, before it arrived, stay ahead of it (promises are kept in the order made).
#[test]
fn a_reservation_freed_mid_pass_goes_to_the_job_the_order_put_first() {
    let mut trace = String::new();
    for i in 0..12 {
        let duration = 3 + i % 3;
        trace.push_str(&format!(
            "{{\"arrival_s\": 0, \"duration_s\": {duration}, \"job\": {{\"name\": \"n{i}\", \"queue\": \"narrow\", \"gpu\": {{\"count\": 1}}, \"time_limit\": \"20s\"}}}}\n"
        ));
    }
    trace.push_str("{\"arrival_s\": 1, \"duration_s\": 2, \"job\": {\"name\": \"w\", \"queue\": \"wide\", \"gpu\": {\"count\": 2}, \"time_limit\": \"20s\"}}\n");
    let queues =
        "[fair_share]\ngreedy_reserve_after = \"5s\"\n[[queue]]\nname = \"narrow\"\n[[queue]]\nname = \"wide\"\n";
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(TWO_A100, catalog).expect("fleet");
    let jobs = read_trace(trace.as_bytes(), catalog, false).expect("trace").jobs;
    for (backfill, depth) in [(Backfill::Reserve, 1), (Backfill::Greedy, 1)] {
        let order =
            gantry_sim::protocol_b::Order::FairShare(gantry_spec::parse_queues(queues, catalog).expect("queues"));
        let options = ReplayOptions { order, backfill, reserve_depth: depth, ..Default::default() };
        let r = run_trace(&fleet, catalog, &jobs, Policy::Default, 1, &options).expect("replays");
        let wide = r.delay_max_by_queue_s["wide"];
        assert!(wide <= 10, "{} depth {depth}: the wide job waited {wide} s", backfill.name());
        assert!(r.reserved_late_without_cause.is_empty(), "{:?}", r.reserved_late_without_cause);
    }
}
