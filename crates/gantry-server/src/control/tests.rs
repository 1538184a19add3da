//! The state machine's own properties, on random command sequences (seeded; every failing
//! seed is kept): the same commands at the same times give the same effects; the jobs table
//! in memory equals the one the store derives from the committed batches; and the command
//! log replays with every decision identical.

use super::*;
use crate::auth::Principal;
use gantry_engine::rng::SeededRng;
use gantry_engine::sched::{Backfill, Order, SchedulerConfig};
use gantry_store::{SqliteStore, Store};

const FLEET: &str = "[[node]]\nname = \"a\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";

fn open(scheduling: &SchedulerConfig) -> (Controller, Batch) {
    open_with(scheduling, Default::default())
}

fn open_with(scheduling: &SchedulerConfig, reconfigure: reconfig::ReconfigurePolicy) -> (Controller, Batch) {
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(FLEET, catalog).expect("fleet");
    let mut setup = Setup::new(fleet, scheduling, Agents::Local, crate::idle::IdlePolicy::default());
    setup.reconfigure = reconfigure;
    Controller::open(setup, Image::default(), catalog, &Default::default(), 1_000).expect("opens")
}

/// A random command given what the test's stand-in runner knows is running.
fn command(rng: &mut SeededRng, n: u64, running: &mut Vec<TaskKey>, stopping: &mut Vec<TaskKey>) -> Command {
    let who = Principal::controller();
    match rng.below(10) {
        0..=2 => {
            let queue = if rng.below(2) == 0 { "q1" } else { "q2" };
            let gpu = match rng.below(4) {
                0 => "{ mig = \"1g.10gb\" }".to_string(),
                1 => "{ mig = \"3g.40gb\" }".to_string(),
                _ => format!("{{ count = {} }}", 1 + rng.below(4)),
            };
            let mut text = format!(
                "[[job]]\nname = \"j{n}\"\nqueue = \"{queue}\"\npriority = {}\ngpu = {gpu}\ntime_limit = \"{}s\"\nhold = {}\n",
                rng.below(3),
                60 + rng.below(600),
                rng.below(8) == 0
            );
            if n > 1 && rng.below(4) == 0 {
                text += &format!("after = [\"j{}\"]\n", rng.below(n - 1) + 1);
            }
            let jobs = gantry_spec::parse_submission(&text, Catalog::embedded(), 10_000).expect("a valid workload");
            Command::Submit { who, jobs, key: (rng.below(3) == 0).then(|| format!("k{}", rng.below(4))) }
        }
        3 => Command::Cancel { who, job: 1 + rng.below(n.max(1)), force: false },
        4 if rng.below(3) == 0 => Command::Requeue { who, job: 1 + rng.below(n.max(1)) },
        4 => Command::Hold { who, job: 1 + rng.below(n.max(1)), held: rng.below(2) == 0 },
        5 | 6 if !stopping.is_empty() => {
            let task = stopping.remove(0);
            running.retain(|t| *t != task);
            Command::TaskExited { task, code: None, timed_out: false, lost: false }
        }
        5 | 6 if !running.is_empty() => {
            let task = running.remove(rng.below(running.len() as u64) as usize);
            Command::TaskExited { task, code: Some(i32::from(rng.below(5) == 0)), timed_out: false, lost: false }
        }
        _ => Command::tick(),
    }
}

/// Run `steps` random commands through two controllers and a store; check the properties.
fn run(seed: u64, steps: u64, scheduling: &SchedulerConfig) {
    run_with(seed, steps, scheduling, Default::default());
}

/// [`run`] with a reconfiguration policy; returns how many layout outcomes were applied.
fn run_with(seed: u64, steps: u64, scheduling: &SchedulerConfig, reconfigure: reconfig::ReconfigurePolicy) -> u32 {
    let mut outcomes = 0;
    let (mut a, opened) = open_with(scheduling, reconfigure.clone());
    let (mut b, _) = open_with(scheduling, reconfigure);
    let mut layouts: Vec<Command> = Vec::new();
    let mut store = SqliteStore::open_in_memory().expect("store");
    store.commit(&[opened]).expect("commits");
    let mut rng = SeededRng::new(seed);
    let (mut now, mut submitted) = (1_000u64, 0u64);
    let (mut running, mut stopping) = (Vec::new(), Vec::new());
    for step in 0..steps {
        now += rng.below(40);
        let cmd = match layouts.is_empty() || rng.below(3) > 0 {
            true => command(&mut rng, submitted + 1, &mut running, &mut stopping),
            false => {
                outcomes += 1;
                layouts.remove(0)
            }
        };
        let (ea, eb) = (a.apply(now, cmd.clone()), b.apply(now, cmd.clone()));
        let (ea, eb) = match (ea, eb) {
            (Ok(ea), Ok(eb)) => (ea, eb),
            (Err(x), Err(y)) => {
                assert_eq!(x.to_string(), y.to_string(), "seed {seed} step {step}");
                continue;
            }
            other => panic!("seed {seed} step {step}: one failed: {other:?}"),
        };
        assert_eq!(ea, eb, "seed {seed} step {step} {cmd:?}: same command, same time, same effects");
        if let Reply::Submitted { ids } = &ea.reply {
            // A repeated key answers with earlier ids: count the highest seen.
            submitted = submitted.max(ids.iter().copied().max().unwrap_or(0));
        }
        running.extend(ea.launch.iter().map(|l| l.key()));
        layouts.extend(ea.layouts.iter().map(|(node, order)| Command::LayoutDone {
            node: node.clone(),
            report: crate::wire::LayoutReport::applied_as_ordered(order),
        }));
        for stop in &ea.stop {
            stopping.extend(running.iter().filter(|t| t.job == stop.job && t.attempt == stop.attempt).cloned());
        }
        store.commit(&[ea.commit]).expect("the store takes what memory took");
        if step % 25 == 0 {
            let rows = store.jobs(&[]).expect("reads");
            assert_eq!(rows, a.jobs.values().cloned().collect::<Vec<_>>(), "seed {seed} step {step}: memory == store");
        }
    }
    let report = crate::replay::replay(&store, Catalog::embedded()).expect("replays");
    assert_eq!(report.first_difference, None, "seed {seed}");
    assert_eq!((report.identical, report.compared), (report.compared, report.total()), "seed {seed}");
    assert!(report.starts > 0, "seed {seed}: the sequence started something: {report:?}");
    outcomes
}

fn fair(backfill: Backfill, preempt: bool) -> SchedulerConfig {
    let tree = gantry_types::QueueTree::flat(["q1", "q2"], 3600, 7200);
    SchedulerConfig { order: Order::FairShare(tree), backfill, reserve_depth: 2, preempt, keep_unsatisfiable: false }
}

#[test]
fn random_command_sequences_are_deterministic_and_replay_exactly() {
    for seed in 1..=12 {
        run(seed, 300, &fair(Backfill::Reserve, true));
    }
    for seed in 13..=16 {
        run(seed, 300, &SchedulerConfig::default());
        run(seed, 300, &fair(Backfill::Greedy, false));
    }
}

/// The same with the controller reconfiguring GPUs itself: orders, outcomes and moves are
/// decisions like any other — the same for the same commands, and replayed exactly.
#[test]
fn random_sequences_with_reconfiguration_are_deterministic_and_replay_exactly() {
    let auto = reconfig::ReconfigurePolicy {
        mode: reconfig::ReconfigureMode::Auto,
        period_s: 60,
        ..reconfig::ReconfigurePolicy::default()
    };
    let mut outcomes = 0;
    for seed in 21..=28 {
        outcomes += run_with(seed, 400, &fair(Backfill::Reserve, true), auto.clone());
    }
    assert!(outcomes >= 8, "the sequences reconfigured GPUs (else this proves nothing): {outcomes}");
}

/// A submission repeated with its idempotency key (a client that did not hear the answer, or
/// sent it again to a standby that took over) gets the same jobs back and makes none; the key
/// is the submitting token's, and it survives a restart (recovered from the jobs).
#[test]
fn a_repeated_submission_key_gets_its_jobs_back_even_after_a_restart() {
    let (mut c, opened) = open(&SchedulerConfig::default());
    let mut store = SqliteStore::open_in_memory().expect("store");
    store.commit(&[opened]).expect("commits");
    let ada =
        Principal { name: "ada".into(), role: gantry_store::Role::Member, queues: vec!["default".into()], node: None };
    let bob = Principal { name: "bob".into(), ..ada.clone() };
    let jobs = || {
        gantry_spec::parse_submission("[[job]]\nname = \"a\"\ncount = 2\ncommand = \"true\"\n", Catalog::embedded(), 10)
            .expect("jobs")
    };
    let submit = |c: &mut Controller, who: &Principal, key: Option<&str>, store: &mut SqliteStore| {
        let effects = c
            .apply(2_000, Command::Submit { who: who.clone(), jobs: jobs(), key: key.map(str::to_string) })
            .expect("submits");
        store.commit(&[effects.commit]).expect("commits");
        match effects.reply {
            Reply::Submitted { ids } => ids,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(submit(&mut c, &ada, Some("k1"), &mut store), [1, 2]);
    assert_eq!(submit(&mut c, &ada, Some("k1"), &mut store), [1, 2], "the same key: the same jobs");
    assert_eq!(c.jobs.len(), 2, "and no new ones");
    assert_eq!(submit(&mut c, &bob, Some("k1"), &mut store), [3, 4], "another token's key is its own");
    assert_eq!(submit(&mut c, &ada, None, &mut store), [5, 6], "no key: always new jobs");
    // A restart recovers the keys with the jobs.
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(FLEET, catalog).expect("fleet");
    let setup = Setup::new(fleet, &SchedulerConfig::default(), Agents::Local, crate::idle::IdlePolicy::default());
    let image = Image::read(&store, 0).expect("reads");
    let (mut again, _) = Controller::open(setup, image, catalog, &Default::default(), 3_000).expect("reopens");
    assert_eq!(submit(&mut again, &ada, Some("k1"), &mut store), [1, 2]);
    assert_eq!(submit(&mut again, &bob, Some("k1"), &mut store), [3, 4]);
    assert_eq!(again.jobs.len(), 6);
}
