//! How big the controller's store grows on a normal fleet (issue 36 §2): the controller's
//! state machine on a virtual clock over a real SQLite file, committed once per simulated
//! second as the group commit does, with `--nodes` remote agents of 8 H100s each. Each agent
//! heartbeats with its GPUs' utilization (moving), its runs' usage (growing) and its tasks
//! every `--beat` seconds (a real agent heartbeats more often; the heartbeats between that
//! change nothing are not logged, and the one a minute that brings its samples is — so one a
//! minute is what the log sees; the heartbeat timeout is set past it). A tick every second. Jobs arrive to keep about three
//! quarters of the GPUs busy: 1 to 8 GPUs, 10 minutes to 6 hours, in four fair-share queues;
//! each ends when its time is up and its node reports the exit. Checkpoints every
//! `--checkpoint-every` hours keep `--keep` hours of log.
//!
//! Printed each simulated `--report-every` hours: the store's size (file and WAL), the
//! command log's entries and the events; at the end, the kept log's entries and bytes by kind
//! and the time taken.
//!
//!     cargo bench -p gantry --bench fleet_store -- [--nodes 1000] [--days 2] \
//!         [--checkpoint-every 24] [--keep 168] [--beat 60] [--report-every 6]

use gantry_catalog::Catalog;
use gantry_server::auth::Principal;
use gantry_server::control::{Agents, Command, Controller, Image, Reply, Setup};
use gantry_store::{Batch, SqliteStore, Store};
use gantry_wire::{GpuSample, Heartbeat, Register, RunUsage, TaskKey, TaskReport, TaskState};
use std::collections::BTreeMap;
use std::time::Instant;

struct Args {
    nodes: usize,
    days: u64,
    checkpoint_every_h: u64,
    keep_h: u64,
    beat_s: u64,
    report_every_h: u64,
}

fn args() -> Args {
    let mut a = Args { nodes: 1000, days: 2, checkpoint_every_h: 24, keep_h: 168, beat_s: 60, report_every_h: 6 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value =
            || it.next().unwrap_or_else(|| panic!("{flag} needs a value")).parse::<u64>().expect("a number");
        match flag.as_str() {
            "--nodes" => a.nodes = value() as usize,
            "--days" => a.days = value(),
            "--checkpoint-every" => a.checkpoint_every_h = value(),
            "--keep" => a.keep_h = value(),
            "--beat" => a.beat_s = value(),
            "--report-every" => a.report_every_h = value(),
            "--bench" => {}
            other => panic!("unknown flag {other:?}"),
        }
    }
    a
}

/// A deterministic generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// One node's agent.
#[derive(Default)]
struct Agent {
    /// Running tasks, with when they end.
    running: BTreeMap<TaskKey, u64>,
    /// Ended tasks, reported until the controller forgets them.
    ended: Vec<TaskKey>,
    utilization: [u32; 8],
}

fn main() {
    let a = args();
    let catalog = Catalog::embedded();
    let fleet = format!(
        "[[node]]\nname = \"n\"\ncount = {}\ncpu = 128\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n",
        a.nodes
    );
    let fleet = gantry_spec::parse_fleet(&fleet, catalog).expect("fleet");
    let names: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let queues = ["research", "prod", "interns", "batch"];
    let tree = gantry_types::QueueTree::flat(queues, 7 * 86_400, 30 * 86_400);
    let scheduling = gantry_engine::sched::SchedulerConfig {
        order: gantry_engine::sched::Order::FairShare(tree),
        ..Default::default()
    };
    // Real agents heartbeat every few seconds; here only the heartbeat a minute that is logged
    // is sent, so the timeout is past that minute (else every node would go silent between).
    let agents = Agents::Remote { heartbeat_timeout_s: a.beat_s + 30, node_lost_after_s: 300 };
    let setup = Setup::new(fleet, &scheduling, agents, Default::default());
    let dir = std::env::temp_dir().join(format!("gantry-fleet-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let path = dir.join("gantry.db");
    let mut store = SqliteStore::open(&path).expect("store");
    let t0 = 1_800_000_000u64;
    let (mut c, opened) = Controller::open(setup, Image::default(), catalog, &Default::default(), t0).expect("opens");
    store.commit(&[opened]).expect("commits");
    let mut batches: Vec<Batch> = Vec::new();
    let apply = |c: &mut Controller, batches: &mut Vec<Batch>, now: u64, command: Command| {
        let effects = c.apply(now, command).expect("applies");
        batches.push(effects.commit);
        effects.reply
    };
    for name in &names {
        let gpus = (0..8)
            .map(|index| gantry_wire::AgentGpu {
                index,
                uuid: format!("GPU-{name}-{index}"),
                model: "H100-SXM5-80GB".into(),
                mig_mode: None,
                mig: Vec::new(),
            })
            .collect();
        let registration = Register {
            node: name.clone(),
            gpus,
            version: String::new(),
            protocol: gantry_wire::PROTOCOL_VERSION,
            instance: format!("i-{name}"),
            confinement: None,
        };
        apply(&mut c, &mut batches, t0, Command::Register { who: Principal::controller(), registration });
    }
    store.commit(&batches).expect("commits");
    batches.clear();
    let size = || {
        let bytes = |suffix: &str| std::fs::metadata(dir.join(format!("gantry.db{suffix}"))).map_or(0, |m| m.len());
        (bytes(""), bytes("-wal"))
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut fleet_agents: Vec<Agent> = names.iter().map(|_| Agent::default()).collect();
    // Jobs submitted, and each job's duration (the agent ends it when its time is up).
    let mut durations: BTreeMap<u64, u64> = BTreeMap::new();
    let mut submitted = 0u64;
    // ~0.75 of the GPUs busy: 8 × nodes × 0.75 GPUs / (mean GPUs × mean seconds) jobs a second.
    let gpu_choices = [1u64, 1, 1, 2, 2, 4, 8];
    let mean_gpus = gpu_choices.iter().sum::<u64>() as f64 / gpu_choices.len() as f64;
    let (min_s, max_s) = (600u64, 6 * 3600);
    let mean_s = (min_s + max_s) as f64 / 2.0;
    let per_minute = 60.0 * 8.0 * a.nodes as f64 * 0.75 / (mean_gpus * mean_s);
    let mut owed = 0.0f64;
    let end = t0 + a.days * 86_400;
    let every = a.checkpoint_every_h * 3600;
    let keep = a.keep_h * 3600;
    let started = Instant::now();
    let (mut checkpoints, mut postponed) = (0u64, 0u64);
    println!(
        "{} nodes × 8 H100, {} simulated days, heartbeat with samples every {} s, checkpoint every {} h keeping {} h of log, ~{per_minute:.1} jobs a minute",
        a.nodes, a.days, a.beat_s, a.checkpoint_every_h, a.keep_h
    );
    let mut next_checkpoint = t0 + every;
    for now in t0 + 1..=end {
        let since = now - t0;
        if since.is_multiple_of(60) {
            owed += per_minute;
            let count = owed.floor() as u64;
            owed -= count as f64;
            let mut text = String::new();
            let mut lengths = Vec::new();
            for n in 0..count {
                let gpus = gpu_choices[rng.below(gpu_choices.len() as u64) as usize];
                let queue = queues[rng.below(queues.len() as u64) as usize];
                let seconds = min_s + rng.below(max_s - min_s);
                text.push_str(&format!(
                    "[[job]]\nname = \"j{n}\"\nqueue = \"{queue}\"\ngpu = {{ count = {gpus} }}\ntime_limit = \"{}s\"\n",
                    seconds + 3600
                ));
                lengths.push(seconds);
            }
            if count > 0 {
                let jobs = gantry_spec::parse_submission(&text, catalog, 10_000).expect("workload");
                submitted += count;
                let reply =
                    apply(&mut c, &mut batches, now, Command::Submit { who: Principal::controller(), jobs, key: None });
                if let Reply::Submitted { ids } = reply {
                    durations.extend(ids.into_iter().zip(lengths));
                }
            }
        }
        // Each node heartbeats once every `beat_s`, staggered across the fleet.
        for (i, name) in names.iter().enumerate() {
            if !(since + i as u64).is_multiple_of(a.beat_s) {
                continue;
            }
            let agent = &mut fleet_agents[i];
            let finished: Vec<TaskKey> =
                agent.running.iter().filter(|(_, e)| **e <= now).map(|(k, _)| k.clone()).collect();
            for key in finished {
                agent.running.remove(&key);
                agent.ended.push(key);
            }
            for u in agent.utilization.iter_mut() {
                *u = (*u + rng.below(21) as u32).saturating_sub(10).min(100);
            }
            let mut tasks: Vec<TaskReport> = agent
                .running
                .keys()
                .map(|key| TaskReport {
                    key: key.clone(),
                    state: TaskState::Running,
                    stopping: false,
                    steps: Vec::new(),
                })
                .collect();
            tasks.extend(agent.ended.iter().map(|key| TaskReport {
                key: key.clone(),
                state: TaskState::Exited { code: Some(0), timed_out: false, oom: false },
                stopping: false,
                steps: Vec::new(),
            }));
            let samples = (0..8)
                .map(|index| GpuSample {
                    index,
                    utilization_pct: agent.utilization[index as usize],
                    memory_used_mib: u64::from(agent.utilization[index as usize]) * 800,
                    measured: true,
                    jobs: Vec::new(),
                })
                .collect();
            let usage = agent
                .running
                .keys()
                .chain(agent.ended.iter())
                .map(|k| RunUsage {
                    job: k.job,
                    attempt: k.attempt,
                    used: gantry_types::Use { cpu_ms: Some(since * 1000), ..Default::default() },
                })
                .collect();
            let beat = Heartbeat { tasks, samples, instance: format!("i-{name}"), usage, ..Default::default() };
            let reply = apply(
                &mut c,
                &mut batches,
                now,
                Command::Heartbeat { who: Principal::controller(), node: name.clone(), beat },
            );
            if let Reply::Orders(orders) = reply {
                let agent = &mut fleet_agents[i];
                for launch in &orders.launch {
                    let ends = now + durations.get(&launch.job).copied().unwrap_or(600);
                    agent.running.entry(launch.key()).or_insert(ends);
                }
                agent.ended.retain(|k| !orders.forget.contains(k));
                for stop in &orders.stop {
                    let stopped: Vec<TaskKey> = agent
                        .running
                        .keys()
                        .filter(|k| k.job == stop.job && k.attempt == stop.attempt)
                        .cloned()
                        .collect();
                    for key in stopped {
                        agent.running.remove(&key);
                        agent.ended.push(key);
                    }
                }
            }
        }
        apply(&mut c, &mut batches, now, Command::tick());
        if every > 0 && now >= next_checkpoint {
            match apply(&mut c, &mut batches, now, Command::Checkpoint { keep_log_s: Some(keep) }) {
                Reply::Checkpoint { taken: true, .. } => {
                    checkpoints += 1;
                    next_checkpoint = now + every;
                }
                _ => {
                    postponed += 1;
                    next_checkpoint = now + 60;
                }
            }
        }
        store.commit(&batches).expect("commits");
        batches.clear();
        if since.is_multiple_of(a.report_every_h * 3600) {
            let (db, wal) = size();
            let commands = store.commands_after(0, 1).expect("reads").first().map_or(0, |c| c.seq);
            let running: usize = fleet_agents.iter().map(|a| a.running.len()).sum();
            println!(
                "day {:.2}: gantry.db {:.1} MiB, WAL {:.1} MiB; log kept from entry {commands}; jobs submitted {submitted}, tasks running {running}; checkpoints {checkpoints} ({postponed} postponed); {:.0} s so far",
                since as f64 / 86_400.0,
                db as f64 / 1048576.0,
                wal as f64 / 1048576.0,
                started.elapsed().as_secs_f64()
            );
        }
    }
    // The kept log by kind.
    let mut kinds: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut seq = 0;
    loop {
        let page = store.commands_after(seq, 10_000).expect("reads");
        let Some(last) = page.last() else { break };
        seq = last.seq;
        for record in &page {
            let kind = serde_json::from_str::<serde_json::Value>(&record.body)
                .ok()
                .and_then(|v| v["command"].as_str().map(str::to_string))
                .unwrap_or_default();
            let entry = kinds.entry(kind).or_default();
            entry.0 += 1;
            entry.1 += record.body.len() as u64;
        }
    }
    for (kind, (n, bytes)) in &kinds {
        println!(
            "kept log: {kind}: {n} entries, {:.1} MiB ({} bytes each on average)",
            *bytes as f64 / 1048576.0,
            bytes / n.max(&1)
        );
    }
    let events = store.events_after(0, 100_000_000).map_or(0, |e| e.len());
    let (db, wal) = size();
    println!(
        "end: gantry.db {:.1} MiB + WAL {:.1} MiB; {events} events; {submitted} jobs; {:.0} s for {} simulated days",
        db as f64 / 1048576.0,
        wal as f64 / 1048576.0,
        started.elapsed().as_secs_f64(),
        a.days
    );
    let _ = std::fs::remove_dir_all(&dir);
}
