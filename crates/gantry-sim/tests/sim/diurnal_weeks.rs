//! Weeks of diurnal load with guarantees at the teams' weighted shares (issue 39's target
//! workload), on several random seeds rather than the one `tools/contention-workloads.py`
//! writes: 8 × 8 H100, three teams weighted 3:2:1 and guaranteed 32, 21 and 11 GPUs, each
//! with a daily peak at its own hour (about 1.3× the fleet where the peaks overlap), jobs of 1,
//! 2, 4 or 8 GPUs, and a burst of 24 one-GPU jobs every six hours. Defaults everywhere (30 s
//! grace, `overshoot_after` 0, budget 3). On every seed, greedy and reserve backfill:
//!
//! - every job starts;
//! - a job within its queue's guarantee starts within one cycle plus the grace period;
//! - no job is stopped more often than the budget allows, every stop lets its preemptor
//!   start by the victim's kill, and no promise is broken without a recorded right or
//!   pushed back by starvation past the slip bound (`stability_trees.rs`'s checks).
//!
//! Seeds 1–6 by default (`GANTRY_WEEK_SEEDS=N` runs 1–N, `GANTRY_WEEK_FIRST` moves the
//! start); on seeds 1–200 all 400 runs hold. The Python generator's other weeks (seeds 44–49;
//! the table's is 43) first broke the bound and led to four changes, without which seeds 1,
//! 5 and 6 here fail: a starving job counted as within its guarantee, so it took a wide job
//! below that job's guarantee, started protected and held the reclaiming queue off for the
//! protection period (660 s); a burst larger than the preemptors one cycle plans left the
//! ninth job waiting for the next event (two grace periods); a wide borrower was taken where
//! moving another team's small jobs would do; and a borrower the fair-share order put first
//! took the place of a job within its guarantee (jobs within their guarantee are now tried
//! first). Seeds 1–100 then broke it on eight runs along the way, which led to six more (`REGRESSIONS`):
//! moves that chain (a 4-GPU job moved onto a node whose 1-GPU job moves on), a moved job's
//! twins dropped with it, moves of jobs a reclaim just (re)started, a moved borrower taking
//! the place of another borrower of its queue, a moving borrower's share counted as still
//! borrowed, and starts placed around a preemptor's planned GPUs. The GPU-hours lost are
//! printed, not asserted: the replays are chaotic; on seeds 1–200 they average 4.14 %
//! (2.4–6.2 %).

use crate::stability::Rng;
use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_engine::limits::CYCLE_TICK_S;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, parse_queues, read_trace};
use gantry_types::GRACE_DEFAULT_S;
use gantry_types::preemption::OVERSHOOT_AFTER_DEFAULT_S;

const H100: &str = "H100-SXM5-80GB";
const FLEET: &str = r#"[[node]]
name = "h100"
count = 8
cpu = 224
memory = "2TiB"
[node.gpus]
model = "H100-SXM5-80GB"
count = 8
"#;
const WEEK_S: u64 = 7 * 86_400;

/// (name, weight, guaranteed GPUs, hour of its daily peak)
const TEAMS: [(&str, u64, u64, u64); 3] = [("alpha", 3, 32, 10), ("beta", 2, 21, 16), ("gamma", 1, 11, 22)];

/// Seeds that once failed (beyond the default 1–6), with what they caught.
const REGRESSIONS: &[(u64, &str)] = &[
    (14, "greedy: a 4-GPU job waited 1,162 s: the plan chose a 2-GPU job to move, then its twin"),
    (19, "greedy: 52 s: a moving borrower's queue counted below its guarantee until the move was done"),
    (28, "reserve: 37 s: a reserved borrower took the empty node an entitled 4-GPU job needed"),
    (29, "an 8-GPU job waited 765 s: its node's 4-GPU job could move only onto a node whose 1-GPU job moved on"),
    (42, "reserve: 234 s: every node held a job a consolidation had just moved"),
    (57, "reserve: 42 s: an entitled 1-GPU job was placed on a preemptor's planned GPU and refused"),
    (86, "reserve: 86 s: the only plan moved a borrower a reclaim had just started, and no GPU was left for it"),
];

fn queues() -> String {
    let mut q = "[fair_share]\nhalf_life = \"1h\"\nstarvation = \"1d\"\n".to_string();
    for (name, weight, guaranteed, _) in TEAMS {
        q.push_str(&format!(
            "\n[[queue]]\nname = \"{name}\"\nweight = {weight}\nquota = [{{ flavor = \"{H100}\", guaranteed = {guaranteed} }}]\n"
        ));
    }
    q
}

/// Seconds to the next arrival of a Poisson stream of `per_hour` jobs an hour.
fn exponential(rng: &mut Rng, per_hour: f64) -> u64 {
    let u = ((rng.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    ((-u.ln() * 3600.0 / per_hour) as u64).max(1)
}

fn trace(seed: u64) -> String {
    let mut rng = Rng(seed ^ 0xd1a1);
    let mut lines = Vec::new();
    let mut add = |arrival: u64, duration: u64, name: String, queue: &str, gpus: u64, limit: &str| {
        lines.push((arrival, format!(
            "{{\"arrival_s\": {arrival}, \"duration_s\": {duration}, \"job\": {{\"name\": \"{name}\", \"queue\": \"{queue}\", \"cpu\": 4, \"memory\": \"32GiB\", \"time_limit\": \"{limit}\", \"gpu\": {{\"count\": {gpus}}}}}}}"
        )));
    };
    for (team, weight, _, peak) in TEAMS {
        let (mut t, mut i): (u64, u32) = (0, 0);
        loop {
            let hour = (t / 3600) % 24;
            let near = hour.abs_diff(peak).min(24 - hour.abs_diff(peak));
            // Jobs an hour: high for six hours around the team's peak, low at night.
            let rate = weight as f64 * if near <= 3 { 3.2 } else { 0.8 };
            t += exponential(&mut rng, rate);
            if t >= WEEK_S {
                break;
            }
            let gpus = [1, 1, 1, 2, 2, 4, 8][rng.below(7) as usize];
            add(t, 1800 + rng.below(4 * 3600 - 1800), format!("{team}-{i:05}"), team, gpus, "6h");
            i += 1;
        }
    }
    for k in 0..(7 * 4) {
        for n in 0..24 {
            add(k * 6 * 3600 + 5 * 3600, 1800 + rng.below(1800), format!("burst-{k:02}-{n:02}"), "gamma", 1, "2h");
        }
    }
    lines.sort_by_key(|(arrival, _)| *arrival);
    lines.into_iter().map(|(_, l)| l).collect::<Vec<_>>().join("\n") + "\n"
}

fn run(trace: &str, backfill: Backfill) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(FLEET, catalog).expect("fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("generated trace").jobs;
    let tree = parse_queues(&queues(), catalog).expect("queues");
    let options = ReplayOptions {
        order: Order::FairShare(tree),
        backfill,
        reserve_depth: 1,
        preempt: true,
        until_s: Some(WEEK_S + 3 * 86_400),
        ..Default::default()
    };
    run_trace(&fleet, catalog, &trace, Policy::Default, 11, &options).expect("replays")
}

/// The tree test's invariants (every job starts, the budget, every stop lets its preemptor
/// start, promises), and the guarantee wait at the default grace.
fn check(r: &ReplayResult) -> Result<(), String> {
    crate::stability_trees::check_but_guarantee_waits(r)?;
    let bound = OVERSHOOT_AFTER_DEFAULT_S + CYCLE_TICK_S + GRACE_DEFAULT_S;
    for (queue, &waited) in &r.guarantee_wait_max_by_queue_s {
        if waited > bound {
            return Err(format!("a job of {queue} waited {waited} s within its guarantee (bound {bound} s)"));
        }
    }
    Ok(())
}

#[test]
fn diurnal_weeks_meet_every_guarantee_within_one_cycle_plus_grace() {
    let last: u64 = std::env::var("GANTRY_WEEK_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let first: u64 = std::env::var("GANTRY_WEEK_FIRST").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    weeks_hold((first..=last).chain(REGRESSIONS.iter().map(|(s, _)| *s)).collect());
}

fn weeks_hold(mut seeds: Vec<u64>) {
    seeds.sort_unstable();
    seeds.dedup();
    let mut failures = Vec::new();
    let mut preempted = 0;
    for &seed in &seeds {
        let trace = trace(seed);
        for backfill in [Backfill::Greedy, Backfill::Reserve] {
            let r = run(&trace, backfill);
            let span_h = r.series.last().map_or(0.0, |p| p.time_s as f64 / 3600.0);
            let lost = r.preempted_gpu_s_lost / 3600.0;
            eprintln!(
                "seed {seed} {}: {} preemptions, {lost:.1} GPU-h lost ({:.2} %), longest guarantee wait {} s, longest wait {} s",
                backfill.name(),
                r.preemptions,
                100.0 * lost / (r.fleet_gpus as f64 * span_h),
                r.guarantee_wait_max_s.unwrap_or(0),
                r.waits_by_queue.values().map(|w| w.max_s).max().unwrap_or(0),
            );
            preempted += r.preemptions;
            if let Err(e) = check(&r) {
                failures.push(format!("seed {seed}, {}: {e}", backfill.name()));
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    // The weeks exercise reclaim.
    assert!(preempted > 100 * seeds.len() as u64, "{preempted} preemptions over {} seeds", seeds.len());
}
