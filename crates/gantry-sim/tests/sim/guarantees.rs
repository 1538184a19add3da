//! Guarantees hold for shapes, and preemption's costs are bounded (issue 39), on small traces
//! built for each rule: a whole-node job within its guarantee behind its own team's small
//! jobs, or another team's (consolidation, moves that chain), a job no reclaim may stop (it borrows only where
//! guarantee holders were idle), a borrowing gang (always reclaimable), a job stopped again and again
//! (the budget), a young wide job against older narrow ones (the way back), a loan its holder
//! takes back (reclaim-aware lending), and a wide team at 0 GPUs while narrow teams fill the
//! fleet (fair-share reclaim).

use gantry_catalog::Catalog;
use gantry_engine::Policy;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions, ReplayResult, run_trace};
use gantry_spec::{parse_fleet, parse_queues, read_trace};

const H100: &str = "H100-SXM5-80GB";

fn fleet(nodes: u32) -> String {
    format!(
        "[[node]]\nname = \"h\"\ncount = {nodes}\ncpu = 224\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"{H100}\"\ncount = 8\n"
    )
}

/// `[[queue]]` tables: (name, weight, guaranteed GPUs).
fn queues(extra: &str, teams: &[(&str, u32, u32)]) -> String {
    let mut q = format!("[fair_share]\nhalf_life = \"1h\"\nstarvation = \"3d\"\n{extra}\n");
    for (name, weight, guaranteed) in teams {
        q.push_str(&format!("[[queue]]\nname = \"{name}\"\nweight = {weight}\n"));
        if *guaranteed > 0 {
            q.push_str(&format!("quota = [{{ flavor = \"{H100}\", guaranteed = {guaranteed} }}]\n"));
        }
    }
    q
}

/// One trace line: a job of `gpus` GPUs (a gang of `replicas` × `gpus` when `replicas` > 1).
fn job(at: u64, duration: u64, name: &str, queue: &str, gpus: u32, replicas: u32) -> String {
    let request = if replicas > 1 {
        format!("\"task\": [{{\"name\": \"w\", \"replicas\": {replicas}, \"cpu\": 4, \"gpu\": {{\"count\": {gpus}}}}}]")
    } else {
        format!("\"cpu\": 4, \"gpu\": {{\"count\": {gpus}}}")
    };
    format!(
        "{{\"arrival_s\": {at}, \"duration_s\": {duration}, \"job\": {{\"name\": \"{name}\", \"queue\": \"{queue}\", \"grace\": 30, \"time_limit\": \"24h\", {request}}}}}\n"
    )
}

fn replay(nodes: u32, queue_file: &str, trace: &str, backfill: Backfill) -> ReplayResult {
    replay_with(nodes, queue_file, trace, backfill, Policy::Default)
}

fn replay_with(nodes: u32, queue_file: &str, trace: &str, backfill: Backfill, policy: Policy) -> ReplayResult {
    let catalog = Catalog::embedded();
    let fleet = parse_fleet(&fleet(nodes), catalog).expect("fleet");
    let trace = read_trace(trace.as_bytes(), catalog, false).expect("trace");
    let order = Order::FairShare(parse_queues(queue_file, catalog).expect("queues"));
    let options = ReplayOptions { order, backfill, preempt: true, until_s: Some(3 * 86_400), ..Default::default() };
    run_trace(&fleet, catalog, &trace.jobs, policy, 7, &options).expect("replays")
}

fn first_start(r: &ReplayResult, job: &str) -> Option<u64> {
    r.events.iter().find(|e| e.event == "start" && e.job == job).map(|e| e.time_s)
}

fn stops(r: &ReplayResult, job: &str) -> usize {
    r.events.iter().filter(|e| e.event == "stop" && e.job == job).count()
}

/// eval borrows 7 GPUs on each of `nodes` nodes, `small`'s 1-GPU jobs take the eighth (at
/// 30 s), and at 600 s `wide` asks for a whole node (`wide-node`).
fn a_node_behind_small_jobs(nodes: u32, small: &str, wide: &str) -> String {
    let mut trace = String::new();
    for n in 0..nodes {
        trace.push_str(&job(0, 20 * 3600, &format!("eval-{n}"), "eval", 7, 1));
        trace.push_str(&job(30, 20 * 3600, &format!("{small}-{n}"), small, 1, 1));
    }
    trace + &job(600, 3600, "wide-node", wide, 8, 1)
}

/// The one job a consolidation moved: stopped at 600 s, it restarts at 630 s where the same
/// plan put it (its queue keeps what it holds), and every other stop is eval's.
fn moved_once(r: &ReplayResult) -> String {
    let moved: Vec<&str> = r
        .events
        .iter()
        .filter(|e| e.event == "stop" && e.cause == Some("consolidation"))
        .map(|e| e.job.as_str())
        .collect();
    assert_eq!(moved.len(), 1, "one small job makes way: {moved:?}");
    let restarts: Vec<u64> =
        r.events.iter().filter(|e| e.event == "start" && e.job == moved[0]).map(|e| e.time_s).collect();
    assert_eq!(restarts, vec![30, 630], "{moved:?} restarts where its plan put it");
    assert!(r.events.iter().filter(|e| e.event == "stop").all(|e| e.job == moved[0] || e.queue == "eval"));
    moved[0].to_string()
}

#[test]
fn a_whole_node_job_within_its_guarantee_moves_its_own_small_jobs_and_reclaims_the_rest() {
    // train, within its guarantee of 16, asks for a whole node: no borrower's stop frees one
    // alone, its own small job moves.
    let trace = a_node_behind_small_jobs(4, "train", "train");
    let q = queues("", &[("train", 1, 16), ("eval", 1, 0)]);
    for backfill in [Backfill::Greedy, Backfill::Reserve] {
        let r = replay(4, &q, &trace, backfill);
        assert_eq!(first_start(&r, "wide-node"), Some(630), "one pass plus the 30 s grace");
        assert_eq!(r.guarantee_wait_max_by_queue_s.get("train").copied(), Some(30));
        moved_once(&r);
    }
}

#[test]
fn a_borrowing_gang_is_reclaimed_though_it_takes_its_queue_below_its_guarantee() {
    // batch (guaranteed 20) runs two 16-GPU gangs: 12 borrowed, each gang larger than that.
    let mut trace = job(0, 20 * 3600, "gang-0", "batch", 8, 2) + &job(0, 20 * 3600, "gang-1", "batch", 8, 2);
    trace.push_str(&job(600, 1800, "serve-0", "serve", 1, 1));
    let q = queues("reclaim_protect = 300\n", &[("batch", 1, 20), ("serve", 1, 12)]);
    let r = replay(4, &q, &trace, Backfill::Greedy);
    // Nothing else makes room: it takes a gang whole at once (`overshoot_after` is 0).
    assert_eq!(first_start(&r, "serve-0"), Some(600 + 30), "{:?}", r.events);
    assert_eq!(r.preemptions, 1);
    assert_eq!(r.preemptions_by_right.get("guarantee"), Some(&1));
    assert_eq!(r.guarantee_wait_max_by_queue_s.get("serve").copied(), Some(30));
    // With `overshoot_after` set (to the protection period), it waits that long first.
    let q = queues(
        "reclaim_protect = 300\n\n[preemption]\novershoot_after = \"5m\"\n",
        &[("batch", 1, 20), ("serve", 1, 12)],
    );
    let r = replay(4, &q, &trace, Backfill::Greedy);
    assert_eq!(first_start(&r, "serve-0"), Some(600 + 300 + 30), "{:?}", r.events);
}

#[test]
fn no_job_is_stopped_more_often_than_its_budget_allows() {
    // A long borrower and a lender whose 1-GPU jobs arrive one after another: every reclaim's
    // cheapest victim is the borrower that restarted last.
    let mut trace = String::new();
    for n in 0..8 {
        trace.push_str(&job(0, 12 * 3600, &format!("borrow-{n}"), "flood", 1, 1));
    }
    for k in 0..40 {
        trace.push_str(&job(1000 + k * 1000, 900, &format!("own-{k}"), "team", 1, 1));
    }
    for budget in [1, 2] {
        let q = queues(
            &format!("reclaim_protect = 0\n\n[preemption]\nbudget = {budget}\nlend_horizon = 0\n"),
            &[("team", 1, 8), ("flood", 1, 0)],
        );
        let fleet_one = replay(1, &q, &trace, Backfill::Greedy);
        assert!(fleet_one.preemptions > 0);
        assert!(fleet_one.preemptions_per_job_max <= budget, "{budget}: {}", fleet_one.preemptions_per_job_max);
        for n in 0..8 {
            assert!(stops(&fleet_one, &format!("borrow-{n}")) <= budget as usize);
        }
    }
}

#[test]
fn a_young_wide_job_is_not_stopped_to_free_one_gpu_while_narrow_victims_exist() {
    // Node 0 holds four 1-GPU borrowers that ran an hour; node 1 an 8-GPU borrower that
    // started a minute before the lender's 1-GPU job. Work lost alone picks the young wide
    // job (8 GPU-minutes against 60); with its way back (a whole node to empty) counted, a
    // narrow one goes.
    let mut trace = String::new();
    for n in 0..4 {
        trace.push_str(&job(0, 10 * 3600, &format!("narrow-{n}"), "flood", 1, 1));
    }
    trace.push_str(&job(0, 10 * 3600, "filler", "flood", 4, 1));
    trace.push_str(&job(3540, 10 * 3600, "wide", "flood", 8, 1));
    trace.push_str(&job(3600, 600, "lender", "team", 1, 1));
    let q = queues("\n[preemption]\nlend_horizon = 0\n", &[("team", 1, 4), ("flood", 1, 0)]);
    let r = replay(2, &q, &trace, Backfill::Greedy);
    let stopped: Vec<&str> = r.events.iter().filter(|e| e.event == "stop").map(|e| e.job.as_str()).collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert!(stopped[0].starts_with("narrow-"), "{stopped:?}");
    assert_eq!(first_start(&r, "lender"), Some(3630));
}

#[test]
fn a_loan_its_holder_took_back_in_the_last_stretch_is_not_made_again() {
    // team used 8 GPUs until 3,600 s; a borrower planned for 2 h arrives at 3,700 s.
    let trace = job(0, 3600, "team-a", "team", 8, 1) + &job(3700, 7200, "borrower", "flood", 8, 1);
    let run = |horizon: &str| {
        let q = queues(&format!("\n[preemption]\nlend_horizon = \"{horizon}\"\n"), &[("team", 1, 8), ("flood", 1, 0)]);
        replay(1, &q, &trace, Backfill::Greedy)
    };
    // Half an hour back covers the team's use: the loan waits that long.
    let held = run("30m");
    assert_eq!(first_start(&held, "borrower"), Some(3600 + 1800));
    assert!(held.pending.is_empty());
    // Without a horizon it borrows at once.
    assert_eq!(first_start(&run("0s"), "borrower"), Some(3700));
}

#[test]
fn fair_share_reclaim_gives_a_wide_team_at_zero_its_share_within_the_grace_period() {
    // Two weight-1 teams stream 1-GPU jobs over both nodes; the weight-3 team's 8-GPU job
    // arrives when no node is empty.
    let mut trace = String::new();
    for k in 0..16 {
        trace.push_str(&job(k, 4 * 3600, &format!("a-{k}"), "narrow-a", 1, 1));
        trace.push_str(&job(k, 4 * 3600, &format!("b-{k}"), "narrow-b", 1, 1));
    }
    trace.push_str(&job(600, 3600, "wide-0", "wide", 8, 1));
    let teams = [("wide", 3, 0), ("narrow-a", 1, 0), ("narrow-b", 1, 0)];
    let off = replay(2, &queues("", &teams), &trace, Backfill::Greedy);
    assert!(first_start(&off, "wide-0").is_some_and(|t| t >= 4 * 3600), "off, it waits for jobs to end");
    assert_eq!(off.preemptions, 0);
    let on = replay(2, &queues("\n[preemption]\nfair_share_reclaim = true\n", &teams), &trace, Backfill::Greedy);
    assert_eq!(first_start(&on, "wide-0"), Some(630));
    assert_eq!(on.preemptions_by_right.get("fair-share"), Some(&8));
    assert_eq!(on.zero_gpus_waiting_max_by_queue_s["wide"], 30);
}

#[test]
fn a_promise_within_its_guarantee_slips_at_most_the_bound() {
    // Two non-preemptible borrowers hold the node for an hour by their limits; a's whole-node
    // job is promised then. One borrower ends after 1,000 s: c's job, within c's guarantee and
    // planned for 2 h, would push the promise 4,600 s later. All of it an hour in (`T`): a job
    // no reclaim may stop borrows only once the usage record covers its planned length
    // (`lending.rs`), and `warm` starts the record at 0.
    const T: u64 = 3600;
    let pinned = |t: &str| t.replace("\"grace\": 30,", "\"grace\": 30, \"preemptible\": false,").replace("24h", "1h");
    let trace = job(0, 10, "warm", "b", 1, 1)
        + &pinned(&job(T, 1000, "b-short", "b", 4, 1))
        + &pinned(&job(T, 3600, "b-long", "b", 4, 1))
        + &job(T + 10, 3600, "a-node", "a", 8, 1)
        + &job(T + 500, 3600, "c-half", "c", 4, 1).replace("24h", "2h");
    let teams = [("a", 1, 8), ("b", 1, 0), ("c", 1, 4)];
    let run = |slip: &str| {
        let q = queues(&format!("\n[preemption]\npromise_slip_max = \"{slip}\"\nlend_horizon = 0\n"), &teams);
        replay(1, &q, &trace, Backfill::Reserve)
    };
    let bounded = run("1h");
    assert_eq!(first_start(&bounded, "b-long"), Some(T), "the record covers its hour");
    assert_eq!(first_start(&bounded, "a-node"), Some(T + 3600), "kept: {:?}", bounded.promises_broken);
    assert!(first_start(&bounded, "c-half").is_some_and(|t| t >= T + 3600));
    let loose = run("10h");
    assert_eq!(first_start(&loose, "c-half"), Some(T + 1000));
    // (Planned to T + 8,200 by c's limit; it ran an hour.)
    assert_eq!(first_start(&loose, "a-node"), Some(T + 1000 + 3600));
    assert!(loose.promises_broken.iter().any(|p| p.job == "a-node" && p.right == "guarantee"));
}

#[test]
fn a_whole_node_job_within_its_guarantee_moves_another_teams_small_jobs() {
    // b's 1-GPU jobs are within b's own guarantee; a, within its guarantee, asks for a whole
    // node and has no team to move: b's job on the chosen node is moved to the other, which
    // the move reclaims from eval.
    let trace = a_node_behind_small_jobs(2, "b", "a");
    let q = queues("", &[("a", 1, 8), ("b", 1, 2), ("eval", 1, 0)]);
    for backfill in [Backfill::Greedy, Backfill::Reserve] {
        let r = replay(2, &q, &trace, backfill);
        assert_eq!(first_start(&r, "wide-node"), Some(630), "one pass plus the 30 s grace: {:?}", r.events);
        assert!(moved_once(&r).starts_with("b-"));
    }
}

#[test]
fn a_consolidation_whose_moved_job_finds_no_place_is_planned_again_on_another_node() {
    // Three nodes, each holding a borrower of e (guaranteed 6, running 14: 8 borrowed) beside a
    // job within its own queue's guarantee. The oldest node's plan (the cheapest) stops e's
    // 6-GPU job and must move b's 2-GPU job, which has nowhere to go: the 4 GPUs of either
    // other borrower would take e past what it borrows. Planned again without that job,
    // another node's plan moves a 4-GPU job where e's other 4-GPU borrower was.
    let trace = job(0, 20 * 3600, "e-6", "e", 6, 1)
        + &job(1, 20 * 3600, "b-2", "b", 2, 1)
        + &job(2, 20 * 3600, "d-4", "d", 4, 1)
        + &job(3, 20 * 3600, "e-4-old", "e", 4, 1)
        + &job(100, 20 * 3600, "b-4", "b", 4, 1)
        + &job(101, 20 * 3600, "e-4", "e", 4, 1)
        + &job(600, 3600, "a-node", "a", 8, 1);
    // With a wait before a borrower wider than its loan may be taken (here the moved job's
    // new place would take e's other 4-GPU borrower, 2 past e's loan, at once).
    let q = queues("\n[preemption]\novershoot_after = \"1m\"\n", &[("a", 1, 8), ("b", 1, 6), ("d", 1, 4), ("e", 1, 6)]);
    for backfill in [Backfill::Greedy, Backfill::Reserve] {
        let r = replay(3, &q, &trace, backfill);
        // (With one try, it waits until it may take a borrower past e's loan: 690 s.)
        assert_eq!(first_start(&r, "a-node"), Some(630), "one pass plus the 30 s grace: {:?}", r.events);
        assert_eq!(stops(&r, "b-2"), 0, "the job that had nowhere to go stays: {:?}", r.events);
        let moved = r.events.iter().filter(|e| e.event == "stop" && e.cause == Some("consolidation")).count();
        assert_eq!(moved, 1, "{:?}", r.events);
    }
}

#[test]
fn a_moved_job_that_fits_nowhere_moves_a_smaller_one_in_turn() {
    // Three nodes, every queue at its guarantee: e's 4-GPU and d's 1-GPU job on one node (3
    // free), f's 7-GPU job on another (1 free), c's 4-GPU job on the third (4 free); e's and
    // f's jobs may not be stopped. a's whole-node job can only have the third node: c's job
    // must move, and the only 4 GPUs for it are the first node's once d's job moves on to the
    // second's free GPU — a chain of two moves in one plan.
    let pinned = |t: String| t.replace("\"grace\": 30,", "\"grace\": 30, \"preemptible\": false,");
    let trace = pinned(job(0, 20 * 3600, "e-4", "e", 4, 1))
        + &job(1, 20 * 3600, "d-1", "d", 1, 1)
        + &pinned(job(2, 20 * 3600, "f-7", "f", 7, 1))
        + &job(3, 20 * 3600, "c-4", "c", 4, 1)
        + &job(600, 3600, "a-node", "a", 8, 1);
    let q = queues("", &[("a", 1, 8), ("c", 1, 4), ("d", 1, 1), ("e", 1, 4), ("f", 1, 7)]);
    for backfill in [Backfill::Greedy, Backfill::Reserve] {
        // Best fit, so that the layout above is the one placement makes.
        let r = replay_with(3, &q, &trace, backfill, Policy::BestFit);
        // (Without chains no plan exists: it waits for a job to end, 20 hours.)
        assert_eq!(first_start(&r, "a-node"), Some(630), "one pass plus the 30 s grace: {:?}", r.events);
        for moved in ["c-4", "d-1"] {
            assert_eq!(stops(&r, moved), 1, "{moved}: {:?}", r.events);
            assert_eq!(r.events.iter().filter(|e| e.event == "start" && e.job == moved).count(), 2);
        }
        assert_eq!(r.preemptions, 2, "{:?}", r.events);
    }
}

#[test]
fn a_job_no_reclaim_may_stop_borrows_only_where_guarantee_holders_were_idle() {
    // team used its node until 3,600 s. At 3,700 s three 1-GPU jobs of flood (no guarantee)
    // arrive, each planned for an hour: a preemptible one borrows once the lending horizon
    // is past; a non-preemptible one only once team has been idle for its whole planned hour.
    let pinned = |t: String| t.replace("\"grace\": 30,", "\"grace\": 30, \"preemptible\": false,");
    let trace = job(0, 3600, "team-a", "team", 8, 1)
        + &job(3700, 600, "loan", "flood", 1, 1).replace("24h", "1h")
        + &pinned(job(3700, 600, "pinned", "flood", 1, 1).replace("24h", "1h"));
    let q = queues("\n[preemption]\nlend_horizon = \"30m\"\n", &[("team", 1, 8), ("flood", 1, 0)]);
    let r = replay(1, &q, &trace, Backfill::Greedy);
    assert_eq!(first_start(&r, "loan"), Some(3600 + 1800));
    assert_eq!(first_start(&r, "pinned"), Some(3600 + 3600), "{:?}", r.events);
    // Within its queue's guarantee it starts at once; beyond it, it waits.
    let trace = pinned(job(0, 600, "own-0", "team", 1, 1)) + &pinned(job(0, 600, "own-1", "team", 1, 1));
    let q = queues("", &[("team", 1, 1), ("flood", 1, 0)]);
    let r = replay(1, &q, &trace, Backfill::Greedy);
    let starts: Vec<u64> = ["own-0", "own-1"].iter().filter_map(|j| first_start(&r, j)).collect();
    assert_eq!(starts.iter().min(), Some(&0));
    assert_eq!(starts.iter().max(), Some(&600), "the second waits for the first: {:?}", r.events);
}
