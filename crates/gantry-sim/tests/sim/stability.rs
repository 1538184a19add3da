//! Sharing between teams holds under contention: small random multi-queue traces on a mixed
//! H100/A100 fleet (weights, guarantees, a best-effort queue with gangs, priorities, every
//! backfill mode, preemption on), each checked for the invariants a shared cluster relies on:
//!
//! - the replay terminates and every job starts (no reclaim thrash);
//! - preemptions per job and per simulated hour stay bounded;
//! - every preemption lets its preemptor start (at the kill, or when the victim ended first);
//! - a job within its queue's guarantee starts within one cycle plus its victims' grace period;
//! - no promised start is broken without a recorded higher right;
//! - while every queue is backlogged, GPU time follows the queues' weights (weighted Jain).
//!
//! 500 seeds by default (`GANTRY_STABILITY_SEEDS` to change), drawn by a small deterministic
//! generator; a seed that ever fails is kept in
//! `REGRESSIONS` with what it caught.

use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, parse_queues, read_trace};
use std::collections::BTreeMap;

const FLEET: &str = "[[node]]\nname = \"h100\"\ncount = 2\ncpu = 224\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n\n[[node]]\nname = \"a100\"\ncount = 2\ncpu = 128\nmemory = \"1TiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 8\n";
const MODELS: [&str; 2] = ["H100-SXM5-80GB", "A100-SXM4-80GB"];
const GRACE_S: u64 = 60;
const PROTECT_S: u64 = 300;

/// Seeds that once failed, with what they caught (kept as regression cases).
const REGRESSIONS: &[(u64, &str)] = &[
    (2, "two victims of one preemptor killed at the same second in two cycles: the first restarted on what it freed"),
    (4, "a promise from an earlier wait counted against the job's next wait"),
    (
        12,
        "one 1-GPU borrower, restarting each time, was the cheapest victim of ten reclaims; at reserve depth 4, a promise planned again from scratch landed later than the plan kept",
    ),
    (28, "a preemptor whose victims were stopping started on another preemptor's freed GPU"),
    (98, "preemptors protected in key order, not by their planned GPUs: one lost its capacity"),
    (112, "priority preemptions among flooding jobs, four and five per job (priority may)"),
    (147, "at depth 16, promises planned around a promise a preemptor took moved with no record"),
    (154, "a reserved start between events: no cycle ran then; it and those after it started late"),
    (189, "a preemptor started elsewhere before its victims died: their kills were wasted, six times"),
    (234, "a 1-GPU borrower reclaimed four times, restarting on capacity its team reclaimed again"),
    (430, "the same, six times at depth 4: a job restarted after a reclaim is now protected too"),
    (574, "two promises of one team, each refused for delaying the other: queue order decides"),
    (239, "the check counted a preempted team job waiting again as not holding its guarantee"),
    (1, "at depth 16, a team job refused for another team's reservation never got to reclaim"),
    (5, "a restarted borrower, protected outright, made a team job within its guarantee wait 193 s"),
    (84, "without backfill, the second team job behind a blocked head waited for the first's victims"),
    (606, "what stopping victims freed beyond their preemptor's need went to the next cycle's preemptor"),
    (
        110,
        "non-preemptible jobs kept off claimed capacity: priority-1 borrowers, reclaimed, restarted by stopping their queue's others (25 stops in an hour)",
    ),
    (
        140,
        "at depth 16, a promised preemptor's reservation was planned past its victims' time limits, not their kills: its team's next job, within the guarantee, was held off a free GPU for it (90 s)",
    ),
];

/// A tiny deterministic generator (splitmix64).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One generated case: the queue file, the trace, and per guaranteed queue its model and
/// guaranteed GPUs.
struct Case {
    queues: String,
    trace: String,
    guaranteed: BTreeMap<String, (usize, u64)>,
    weights: BTreeMap<String, u64>,
}

/// Two or three guaranteed teams (1-GPU jobs on their model, guarantees proportional to their
/// weights over half the fleet) and one best-effort queue (no guarantee) that floods with
/// jobs of 1 to 8 GPUs, gangs of 2 × 8, priorities and non-preemptible work.
fn generate(seed: u64) -> Case {
    let mut rng = Rng(seed);
    let teams = 2 + rng.below(2) as usize;
    let weights: Vec<u64> = (0..teams).map(|_| 1 + rng.below(3)).collect();
    let mut queues = format!(
        "[fair_share]\nhalf_life = \"30m\"\nstarvation = \"1d\"\nreclaim_protect = {PROTECT_S}\n\n[[queue]]\nname = \"flood\"\nweight = 1\n"
    );
    let mut guaranteed = BTreeMap::new();
    let mut all_weights = BTreeMap::from([("flood".to_string(), 1)]);
    for (t, &w) in weights.iter().enumerate() {
        let model = t % 2;
        let same_model: u64 = weights.iter().enumerate().filter(|(i, _)| i % 2 == model).map(|(_, w)| w).sum();
        let gpus = (8 * w / same_model).max(1);
        let name = format!("team-{t}");
        queues.push_str(&format!(
            "\n[[queue]]\nname = \"{name}\"\nweight = {w}\nquota = [{{ flavor = \"{}\", guaranteed = {gpus} }}]\n",
            MODELS[model]
        ));
        guaranteed.insert(name.clone(), (model, gpus));
        all_weights.insert(name, w);
    }
    let mut lines = Vec::new();
    let job = |arrival: u64, duration: u64, queue: &str, body: String, lines: &mut Vec<String>| {
        let n = lines.len();
        lines.push(format!(
            "{{\"arrival_s\": {arrival}, \"duration_s\": {duration}, \"job\": {{\"name\": \"j{n}\", \"queue\": \"{queue}\", \"grace\": {GRACE_S}, {body}}}}}"
        ));
    };
    // The flood: from t=0, more than the fleet.
    for _ in 0..(20 + rng.below(20)) {
        let arrival = rng.below(1800);
        let duration = 1800 + rng.below(7200);
        let body = match rng.below(10) {
            0 => "\"task\": [{\"name\": \"w\", \"replicas\": 2, \"cpu\": 4, \"gpu\": {\"count\": 8}}]".to_string(),
            1 => "\"priority\": 1, \"gpu\": {\"count\": 2}".to_string(),
            2 => "\"preemptible\": false, \"gpu\": {\"count\": 1}".to_string(),
            k => format!("\"gpu\": {{\"count\": {}}}", [1, 2, 4, 8][k as usize % 4]),
        };
        job(arrival, duration, "flood", body, &mut lines);
    }
    // The teams: later, in bursts, on their model.
    let teams: Vec<(String, usize)> = guaranteed.iter().map(|(n, &(m, _))| (n.clone(), m)).collect();
    for (name, model) in teams {
        for _ in 0..(8 + rng.below(12)) {
            let arrival = 1200 + rng.below(3 * 3600);
            let duration = 600 + rng.below(3600);
            let body = format!("\"model\": [\"{}\"], \"gpu\": {{\"count\": 1}}", MODELS[model]);
            job(arrival, duration, &name, body, &mut lines);
        }
    }
    Case { queues, trace: lines.join("\n") + "\n", guaranteed, weights: all_weights }
}

/// Three or four queues with random weights 1–3, no guarantees, each submitting more than the
/// whole fleet from t = 0 in 1–2 GPU jobs of 10–40 minutes on any model: every queue stays
/// backlogged for hours, so GPU time should follow the weights. The starvation bound (which
/// serves the oldest first whatever the weights) is set past the backlog.
fn generate_backlogged(seed: u64) -> Case {
    let mut rng = Rng(seed ^ 0xB4C1);
    let n = 3 + rng.below(2) as usize;
    let mut queues = String::from("[fair_share]\nhalf_life = \"30m\"\nstarvation = \"7d\"\n");
    let mut weights = BTreeMap::new();
    let mut lines = Vec::new();
    for q in 0..n {
        let w = 1 + rng.below(3);
        let name = format!("q{q}");
        queues.push_str(&format!("\n[[queue]]\nname = \"{name}\"\nweight = {w}\n"));
        weights.insert(name.clone(), w);
        // About 115 GPU-hours a queue: 11-15 hours of work for the 32 GPUs.
        for i in 0..200 {
            let (arrival, duration, gpus) = (rng.below(3600), 600 + rng.below(1800), 1 + rng.below(2));
            lines.push(format!(
                "{{\"arrival_s\": {arrival}, \"duration_s\": {duration}, \"job\": {{\"name\": \"{name}-{i}\", \"queue\": \"{name}\", \"gpu\": {{\"count\": {gpus}}}}}}}"
            ));
        }
    }
    Case { queues, trace: lines.join("\n") + "\n", guaranteed: BTreeMap::new(), weights }
}

fn run(case: &Case, backfill: Backfill, depth: usize) -> (ReplayResult, Vec<gantry_spec::TraceJob>) {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(FLEET, catalog).expect("fleet");
    let trace = read_trace(case.trace.as_bytes(), catalog, false).expect("generated trace").jobs;
    let tree = parse_queues(&case.queues, catalog).expect("generated queues");
    let options = ReplayOptions {
        order: Order::FairShare(tree),
        backfill,
        reserve_depth: depth,
        preempt: true,
        until_s: Some(30 * 86_400),
        ..Default::default()
    };
    (run_trace(&fleet, catalog, &trace, Policy::Default, 7, &options).expect("replays"), trace)
}

/// Per job: when it arrived, its queue and GPUs (from the trace; names are unique).
fn arrivals(trace: &[gantry_spec::TraceJob]) -> BTreeMap<String, (u64, String)> {
    trace.iter().map(|t| (t.job.name.clone(), (t.arrival_s, t.job.queue.clone()))).collect()
}

/// Check every invariant on one replay; returns a description of the first violation.
fn check(case: &Case, r: &ReplayResult, trace: &[gantry_spec::TraceJob]) -> Result<(), String> {
    if r.stopped_at_s.is_some() || r.never_started > 0 || r.started as usize != trace.len() {
        return Err(format!("did not finish: started {}/{}, stopped at {:?}", r.started, trace.len(), r.stopped_at_s));
    }
    if r.preemptions_per_job_max > PREEMPTIONS_PER_JOB_MAX {
        return Err(format!("a job was preempted {} times", r.preemptions_per_job_max));
    }
    check_hysteresis(r)?;
    let mut per_hour: BTreeMap<u64, u64> = BTreeMap::new();
    for e in r.events.iter().filter(|e| e.event == "stop") {
        *per_hour.entry(e.time_s / 3600).or_default() += 1;
    }
    if let Some((h, n)) = per_hour.iter().find(|(_, n)| **n > PREEMPTIONS_PER_HOUR_MAX) {
        let causes: Vec<String> = r
            .events
            .iter()
            .filter(|e| e.event == "stop" && e.time_s / 3600 == *h)
            .map(|e| {
                let by = e.preemptor.as_deref().unwrap_or("?");
                format!("{} ({}) at {} s for {by} by {}", e.job, e.queue, e.time_s, e.cause.unwrap_or("?"))
            })
            .collect();
        return Err(format!("{n} preemptions in hour {h}: {causes:?}"));
    }
    // Every preemption lets its preemptor start: by the last kill of its victims (or sooner).
    every_stop_lets_its_preemptor_start(r)?;
    if !r.reserved_late_without_cause.is_empty() {
        return Err(format!("promises broken without a higher right: {:?}", r.reserved_late_without_cause));
    }
    check_guarantees(case, r, trace)
}

/// Every stop lets its preemptor start by the victim's kill (or sooner); a preemptor that is
/// itself a running job moved by a consolidation may instead end on its own before the kill.
pub(crate) fn every_stop_lets_its_preemptor_start(r: &ReplayResult) -> Result<(), String> {
    let mut started_at: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for e in r.events.iter().filter(|e| e.event == "start") {
        started_at.entry(e.job.as_str()).or_default().push(e.time_s);
    }
    // (A preemptor that is itself a running job moved by a consolidation may end on its own
    // before the kill: then there is nothing left to start.)
    let mut ended_at: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for e in r.events.iter().filter(|e| e.event == "end") {
        ended_at.entry(e.job.as_str()).or_default().push(e.time_s);
    }
    for e in r.events.iter().filter(|e| e.event == "stop") {
        let p = e.preemptor.as_deref().expect("a stop names its preemptor");
        let kill = e.kill_at_s.expect("a stop has its kill time");
        let within = |ts: Option<&Vec<u64>>| ts.is_some_and(|ts| ts.iter().any(|&t| t >= e.time_s && t <= kill));
        if !within(started_at.get(p)) && !within(ended_at.get(p)) {
            return Err(format!("{} was stopped at {} for {p}, which did not start by {kill}", e.job, e.time_s));
        }
    }
    Ok(())
}

/// Hysteresis: a job that started on capacity its own reclaim freed is not stopped by reclaim
/// or starvation within `reclaim_protect` of that start. (A job a reclaim stopped and that
/// started again is only a victim of last resort for as long: checked in the engine's
/// scenarios, and bounded here by the preemptions per job.)
fn check_hysteresis(r: &ReplayResult) -> Result<(), String> {
    let is_reclaim = |e: &gantry_sim::protocol_b::JobEvent| e.cause.is_some_and(|c| c != "priority");
    let mut protected_since: BTreeMap<&str, u64> = BTreeMap::new();
    // Jobs waiting for a reclaim's victims.
    let mut reclaiming = Vec::new();
    for e in &r.events {
        let job = e.job.as_str();
        match e.event {
            "stop" if is_reclaim(e) => {
                if let Some(&since) = protected_since.get(job)
                    && e.time_s < since + PROTECT_S
                {
                    return Err(format!("{job} reclaimed at {} though protected since {since}", e.time_s));
                }
                reclaiming.push(e.preemptor.as_deref().expect("a stop names its preemptor"));
            }
            "start" => {
                let was = reclaiming.contains(&job);
                reclaiming.retain(|j| *j != job);
                if was {
                    protected_since.insert(job, e.time_s);
                } else {
                    protected_since.remove(job);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A team job that arrives within its team's guarantee (the team's jobs that arrived and have
/// not ended — running, or waiting, preempted or not — all 1-GPU, plus this one) starts within
/// one cycle plus the grace period: the replay runs a cycle at its arrival, and its victims are
/// gone a grace period later.
fn check_guarantees(case: &Case, r: &ReplayResult, trace: &[gantry_spec::TraceJob]) -> Result<(), String> {
    let arrived = arrivals(trace);
    let mut first_start: BTreeMap<&str, u64> = BTreeMap::new();
    let mut ended: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &r.events {
        match e.event {
            "start" => {
                first_start.entry(e.job.as_str()).or_insert(e.time_s);
            }
            "end" | "time-limit" => {
                ended.insert(e.job.as_str(), e.time_s);
            }
            _ => {}
        }
    }
    let bound = GRACE_S;
    for (team, &(_, gpus)) in &case.guaranteed {
        let jobs: Vec<(u64, &str)> =
            arrived.iter().filter(|(_, (_, q))| q == team).map(|(n, (a, _))| (*a, n.as_str())).collect();
        for &(arrival, name) in &jobs {
            let busy = jobs.iter().filter(|&&(a, n)| a <= arrival && ended[n] > arrival).count() as u64;
            let waited = first_start[name] - arrival;
            if busy <= gpus && waited > bound {
                return Err(format!(
                    "{team}'s {name} arrived at {arrival} within its guarantee ({busy} of {gpus}) and waited {waited} s"
                ));
            }
        }
    }
    Ok(())
}

/// Each queue's demand-capped entitlement, in GPUs: the fleet shared by weight, no queue given
/// more than it can use (a team's jobs run only on its model's 16 GPUs; the best-effort queue
/// on all 32), what a capped queue cannot use shared again among the others (water-filling).
fn entitlements(case: &Case, queues: &[&String]) -> Vec<f64> {
    let cap = |q: &str| case.guaranteed.get(q).map_or(32.0, |_| 16.0);
    let mut share = vec![0.0f64; queues.len()];
    let mut open: Vec<usize> = (0..queues.len()).collect();
    let mut left = 32.0;
    while !open.is_empty() && left > 1e-9 {
        let weight: f64 = open.iter().map(|&k| case.weights[queues[k].as_str()] as f64).sum();
        let (capped, free): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|&&k| share[k] + left * case.weights[queues[k].as_str()] as f64 / weight >= cap(queues[k]));
        if capped.is_empty() {
            for &k in &open {
                share[k] += left * case.weights[queues[k].as_str()] as f64 / weight;
            }
            break;
        }
        for &k in &capped {
            left -= cap(queues[k]) - share[k];
            share[k] = cap(queues[k]);
        }
        open = free;
    }
    share
}

/// Jain's index of each queue's GPU time over its demand-capped entitlement, over the span in
/// which every queue has a job waiting.
fn weighted_jain_while_backlogged(case: &Case, r: &ReplayResult, trace: &[gantry_spec::TraceJob]) -> Option<f64> {
    let x = served_while_backlogged(case, r, trace)?;
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    Some(sum * sum / (x.len() as f64 * squares))
}

/// Per queue (in name order), its GPU time over its demand-capped entitlement while every
/// queue has a job waiting; `None` if that span is under an hour.
fn served_while_backlogged(case: &Case, r: &ReplayResult, trace: &[gantry_spec::TraceJob]) -> Option<Vec<f64>> {
    let arrived = arrivals(trace);
    let queues: Vec<&String> = case.weights.keys().collect();
    // Waiting count and held milli per queue as events go; integrate while all wait.
    let mut changes: Vec<(u64, usize, i64, i64)> = Vec::new(); // (t, queue, waiting delta, milli delta)
    let qi = |q: &str| queues.iter().position(|x| *x == q).expect("known queue");
    for (a, q) in arrived.values() {
        changes.push((*a, qi(q), 1, 0));
    }
    for e in &r.events {
        let q = qi(&e.queue);
        match e.event {
            "start" => changes.push((e.time_s, q, -1, e.milli as i64)),
            "end" | "time-limit" => changes.push((e.time_s, q, 0, -(e.milli as i64))),
            "kill" => changes.push((e.time_s, q, 1, -(e.milli as i64))),
            _ => {}
        }
    }
    changes.sort_unstable();
    let (mut waiting, mut held) = (vec![0i64; queues.len()], vec![0i64; queues.len()]);
    let mut gpu_s = vec![0f64; queues.len()];
    let mut last = 0u64;
    let mut span = 0u64;
    for (t, q, dw, dm) in changes {
        if waiting.iter().all(|&w| w > 0) {
            span += t - last;
            for k in 0..queues.len() {
                gpu_s[k] += held[k] as f64 / 1000.0 * (t - last) as f64;
            }
        }
        last = t;
        waiting[q] += dw;
        held[q] += dm;
    }
    if span < 3600 {
        return None;
    }
    let entitled = entitlements(case, &queues);
    Some((0..queues.len()).map(|k| gpu_s[k] / entitled[k] / span as f64).collect())
}

/// Bounds a thrashing scheduler breaks by orders of magnitude (the case: 660
/// preemptions in two hours): per job, the preemption budget (`[preemption] budget`, every
/// right included); per hour, room for honest reclaim, at most one per protection period and
/// job (`check_hysteresis`).
const PREEMPTIONS_PER_JOB_MAX: u64 = gantry_types::preemption::BUDGET_STOPS_DEFAULT as u64;
const PREEMPTIONS_PER_HOUR_MAX: u64 = 24;

const MODES: [(Backfill, usize); 5] = [
    (Backfill::Off, 1),
    (Backfill::Greedy, 1),
    (Backfill::Reserve, 1),
    (Backfill::Reserve, 4),
    (Backfill::Reserve, 16),
];

#[test]
fn random_multi_queue_traces_keep_every_sharing_invariant() {
    let last: u64 = std::env::var("GANTRY_STABILITY_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let first: u64 = std::env::var("GANTRY_STABILITY_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut seeds: Vec<u64> = (first..=last).chain(REGRESSIONS.iter().map(|(s, _)| *s)).collect();
    seeds.sort_unstable();
    seeds.dedup();
    let mut failures = Vec::new();
    let (mut promised, mut late) = (0, 0);
    for &seed in &seeds {
        let case = generate(seed);
        for (backfill, depth) in MODES {
            let (r, trace) = run(&case, backfill, depth);
            promised += r.reserved;
            late += r.reserved_late;
            if let Err(e) = check(&case, &r, &trace) {
                failures.push(format!("seed {seed}, {} depth {depth}: {e}", backfill.name()));
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(
        promised > 100 && late > 0,
        "the traces exercise promises: {promised} promised, {late} late (with a cause)"
    );
}

/// Weighted Jain of GPU time against demand-capped entitlements while every queue is
/// backlogged, at least 0.95 in every backfill mode, on seeds 1–6 (depth 16 on 1–2: each of
/// its replays takes most of a minute on these traces). Measured on seeds 1–12, worst: off
/// 0.992, greedy 0.995, reserve 1 0.996, depth 4 0.996, depth 16 0.995 (docs/PERFORMANCE.md).
/// Greedy reaches it by promising a start to a job blocked for `greedy_reserve_after` (without,
/// 0.949: a queue left with wider jobs than the others loses each GPU that frees to their
/// narrower ones); deep reservation lists by counting each promise in its queue's share while
/// the pass picks (without, depth 16 gave every promise to the queue furthest behind: 0.923).
#[test]
fn gpu_time_follows_weights_while_every_queue_is_backlogged() {
    let modes = [
        (Backfill::Off, 1, 6),
        (Backfill::Greedy, 1, 6),
        (Backfill::Reserve, 1, 6),
        (Backfill::Reserve, 4, 6),
        (Backfill::Reserve, 16, 2),
    ];
    let mut failures = Vec::new();
    let mut measured = 0;
    for (backfill, depth, seeds) in modes {
        for seed in 1..=seeds {
            let case = generate_backlogged(seed);
            let (r, trace) = run(&case, backfill, depth);
            if let Some(j) = weighted_jain_while_backlogged(&case, &r, &trace) {
                measured += 1;
                if j < 0.95 {
                    failures
                        .push(format!("seed {seed}, {} depth {depth}: weighted Jain {j:.3} < 0.95", backfill.name()));
                }
            }
        }
    }
    assert!(measured >= 26, "every queue backlogged for an hour in only {measured} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The measurement behind the numbers above, on any seeds (`GANTRY_JAIN_SEEDS`, default 12):
/// `cargo test --release -p gantry-sim --test sim weighted_jain_by_mode -- --ignored --nocapture`.
#[test]
#[ignore]
fn weighted_jain_by_mode() {
    let seeds: u64 = std::env::var("GANTRY_JAIN_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    for seed in 1..=seeds {
        let case = generate_backlogged(seed);
        let mut line = format!("seed {seed:3}:");
        for (backfill, depth) in MODES {
            let (r, trace) = run(&case, backfill, depth);
            let j = weighted_jain_while_backlogged(&case, &r, &trace).map_or("-".into(), |j| format!("{j:.3}"));
            line.push_str(&format!(" {} {depth} {j}", backfill.name()));
        }
        println!("{line}");
    }
}
