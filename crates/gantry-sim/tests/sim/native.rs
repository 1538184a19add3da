//! Native traces (JSON lines on a fleet file): replay semantics, fit checks and the synthetic
//! generator's promises (determinism, every job fits, offered load as asked).

use crate::TWO_A100;
use gantry_catalog::Catalog;
use gantry_engine::{Engine, EngineConfig, Policy};
use gantry_sim::native::check_fits;
use gantry_sim::protocol_b::{ReplayOptions, run_trace};
use gantry_sim::synth::{SynthConfig, generate};
use gantry_spec::{parse_fleet, read_trace};
use gantry_types::Fleet;

fn fleet(text: &str) -> Fleet {
    parse_fleet(text, Catalog::embedded()).expect("fleet")
}

#[test]
fn a_job_waits_for_capacity_and_shares_follow_gpu_time() {
    // a holds both GPUs 0..100; b (1 GPU) arrives at 10 and waits 90 s; c (1 GPU) arrives at
    // 200 and starts at once.
    let text = r#"{"arrival_s": 0, "duration_s": 100, "utilization": 1.0, "job": {"name": "a", "queue": "x", "gpu": {"count": 2}}}
{"arrival_s": 10, "duration_s": 50, "utilization": 0.5, "job": {"name": "b", "queue": "y", "gpu": {"count": 1}}}
{"arrival_s": 200, "duration_s": 100, "job": {"name": "c", "queue": "y", "gpu": {"count": 1}}}
"#;
    let catalog = Catalog::embedded();
    let trace = read_trace(text.as_bytes(), catalog, false).expect("trace");
    let f = fleet(TWO_A100);
    let r = run_trace(&f, catalog, &trace.jobs, Policy::Default, 1, &ReplayOptions::default()).expect("replays");
    assert_eq!((r.started, r.never_started, r.pods), (3, 0, 3));
    assert_eq!((r.delay_p50_s, r.delay_p99_s), (0, 90));
    // GPU time: x 2 GPUs × 100 s = 200; y 1 × 50 + 1 × 100 = 150.
    let x = r.tenant_gpu_share_pct["x"];
    assert!((x - 200.0 / 350.0 * 100.0).abs() < 1e-9, "{x}");
    // Until b ends at 150, allocation is 100 % (a) or 50 % (b); utilization follows the
    // trace's figures: 100 % while a runs, 25 % while b runs.
    let at = |t: u64| r.series.iter().rev().find(|s| s.time_s <= t).expect("sampled");
    assert_eq!((at(50).alloc_pct, at(50).util_pct, at(50).queued), (100.0, 100.0, 1));
    assert_eq!((at(120).alloc_pct, at(120).util_pct), (50.0, 25.0));
    assert_eq!(
        r,
        run_trace(&f, catalog, &trace.jobs, Policy::Default, 1, &ReplayOptions::default()).expect("replays"),
        "deterministic"
    );
}

#[test]
fn jobs_the_empty_fleet_cannot_hold_are_refused_or_skipped() {
    let text = r#"{"arrival_s": 0, "duration_s": 10, "job": {"name": "ok", "gpu": {"count": 1}}}
{"arrival_s": 1, "duration_s": 10, "job": {"name": "big", "gpu": {"count": 4}}}
{"arrival_s": 2, "duration_s": 10, "job": {"name": "mig", "gpu": {"mig": "1g.10gb"}}}
"#;
    let catalog = Catalog::embedded();
    let f = fleet(TWO_A100);
    let jobs = read_trace(text.as_bytes(), catalog, false).expect("trace").jobs;
    let err = check_fits(&f, catalog, jobs.clone(), false).expect_err("strict refuses");
    assert!(err.to_string().starts_with("line 2 / job \"big\": can never run on this fleet, even empty: "), "{err}");
    let (kept, skipped) = check_fits(&f, catalog, jobs, true).expect("lenient skips");
    assert_eq!(kept.iter().map(|j| j.job.name.as_str()).collect::<Vec<_>>(), ["ok"]);
    assert_eq!(skipped.values().sum::<u64>(), 2);
}

#[test]
fn the_synthetic_trace_is_seeded_fits_the_fleet_and_offers_the_load_asked() {
    let catalog = Catalog::embedded();
    let demo = fleet(include_str!("../../../../examples/demo-fleet.toml"));
    let config = SynthConfig {
        jobs: 3000,
        seed: 9,
        tenants: 5,
        tenant_mix: Vec::new(),
        load: 0.8,
        mix: Default::default(),
        days: None,
    };
    let text = generate(&demo, catalog, &config).expect("generates");
    assert_eq!(text, generate(&demo, catalog, &config).expect("generates"), "same seed, same bytes");
    assert_ne!(text, generate(&demo, catalog, &SynthConfig { seed: 10, ..config.clone() }).expect("generates"));
    let trace = read_trace(text.as_bytes(), catalog, false).expect("the generator writes valid lines");
    assert_eq!(trace.jobs.len(), 3000);
    let (kept, _) = check_fits(&demo, catalog, trace.jobs.clone(), false).expect("every job fits the empty fleet");
    assert_eq!(kept.len(), 3000);
    let tenants: std::collections::BTreeSet<&str> = trace.jobs.iter().map(|j| j.job.queue.as_str()).collect();
    assert_eq!(tenants.len(), 5);
    // Offered load: Σ milli × duration over the arrival span, against capacity — within 15 %
    // of the target (a Poisson process of 3,000 arrivals with heavy-tailed sizes).
    let mut engine = Engine::new(&demo, catalog, EngineConfig::default()).expect("engine");
    let mut offered = 0.0;
    for j in &trace.jobs {
        let before = engine.state().used_milli();
        let id = engine.place(&engine.compile(&j.job).expect("compiles")).expect("fits");
        offered += (engine.state().used_milli() - before) as f64 * j.duration_s.expect("has a duration") as f64;
        engine.release(id).expect("releases");
    }
    let span = trace.jobs.last().expect("jobs").arrival_s as f64;
    let load = offered / span / (engine.state().gpus.len() as f64 * 1000.0);
    assert!((load - 0.8).abs() < 0.8 * 0.15, "offered load {load}");
    // Utilization below allocation: no kind keeps its GPUs fully busy.
    assert!(trace.jobs.iter().all(|j| j.utilization.is_some_and(|u| u > 0.0 && u < 1.0)));
}

/// `--days`: the arrivals span the days asked (a Poisson process: within 5 %), and the load
/// reported is what the trace offers; bad spans are refused.
#[test]
fn a_synthetic_trace_spread_over_days_spans_them_and_reports_its_load() {
    let catalog = Catalog::embedded();
    let demo = fleet(include_str!("../../../../examples/demo-fleet.toml"));
    let config = SynthConfig { jobs: 4000, days: Some(2.0), ..SynthConfig::default() };
    let (text, load) = gantry_sim::synth::generate_with_load(&demo, catalog, &config).expect("generates");
    let trace = read_trace(text.as_bytes(), catalog, false).expect("valid lines");
    let span = trace.jobs.last().expect("jobs").arrival_s as f64;
    assert!((span / (2.0 * 86_400.0) - 1.0).abs() < 0.05, "span {span} s");
    let (_, at_load) =
        gantry_sim::synth::generate_with_load(&demo, catalog, &SynthConfig { load, days: None, ..config.clone() })
            .expect("generates");
    assert!((at_load - load).abs() < 1e-9, "the load reported is the one that gives this span");
    for days in [0.0, -1.0, f64::NAN, 4000.0] {
        let err = generate(&demo, catalog, &SynthConfig { days: Some(days), ..config.clone() }).expect_err("refused");
        assert!(err.to_string().contains("--days"), "{err}");
    }
}

#[test]
fn dependencies_hold_a_job_until_the_ones_it_names_have_ended() {
    // b may start only after a (100 s); c only if a fails, which never happens here; d after b.
    let text = r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "a", "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 50, "job": {"name": "b", "after": ["afterok:a"], "gpu": {"count": 1}}}
{"arrival_s": 0, "duration_s": 50, "job": {"name": "c", "after": ["afternotok:a"], "gpu": {"count": 1}}}
{"arrival_s": 10, "duration_s": 50, "job": {"name": "d", "after": ["afterany:b"], "gpu": {"count": 1}}}
"#;
    let catalog = Catalog::embedded();
    let trace = read_trace(text.as_bytes(), catalog, false).expect("trace");
    let r = run_trace(&fleet(TWO_A100), catalog, &trace.jobs, Policy::Default, 1, &ReplayOptions::default())
        .expect("replays");
    assert_eq!((r.started, r.dependency_never, r.waiting_on_dependencies, r.never_started), (3, 1, 0, 0));
    // Waits count from when a job became eligible: nobody waited for a GPU.
    assert_eq!(r.delay_max_s, 0);
    // On dependencies: b 100 s, c 100 s (until a ended and c was dropped), d 140 s (10 → 150).
    assert_eq!(r.wait_job_s_by_reason.get("dependency"), Some(&340), "{:?}", r.wait_job_s_by_reason);
    // Two GPUs, yet never more than one busy: each job waited for the one before.
    assert!(
        r.series.iter().all(|s| s.alloc_pct <= 50.0),
        "{:?}",
        r.series.iter().map(|s| s.alloc_pct).collect::<Vec<_>>()
    );
}
