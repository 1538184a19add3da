//! What confinement costs a task's start (issue 35): the agent's runner launches the same
//! task again and again, alternately confined (a cgroup per run and per task, limits, device
//! rules, joined before exec) and unconfined, in one process, one after the other.
//!
//! For each launch it records
//! - **start**: from `Runner::launch` to the task's first instruction (the task prints
//!   `date +%s%N` as it starts; no polling in the measure), and
//! - **round trip**: from `Runner::launch` to its exit on the runner's channel (a confined
//!   task's cgroup emptied and removed, its run's measure kept, before the exit is sent),
//!
//! and prints the median, p99 and maximum of each, per mode. Needs root to confine; without it
//! only the unconfined side runs, and it says so.
//!
//!     cargo bench -p gantry-agent --bench launch -- [--launches 400] [--confinement auto|cgroup-v1|cgroup-v2]

use gantry_agent::cgroup::{Choice, Confinement, devices::DeviceRules};
use gantry_agent::runner::{Defaults, Exit, Runner};
use gantry_wire::Launch;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// A one-task job on one (fake) GPU, printing when it started.
fn launch(job: u64) -> Launch {
    Launch {
        job,
        job_name: "bench".into(),
        group: "main".into(),
        replica: 0,
        rank: 0,
        world_size: 1,
        node: "bench".into(),
        master_node: String::new(),
        devices: vec!["GPU-bench-0".into()],
        mps: None,
        command: vec!["date".into(), "+%s%N".into()],
        env: vec![("LR".into(), "3e-4".into())],
        workdir: Some("/".into()),
        time_limit_s: None,
        grace_s: 1,
        attempt: 0,
        account: "root".into(),
        cpu_milli: Some(1000),
        memory_bytes: Some(1 << 30),
        layout: None,
        array_index: None,
        step_key: None,
        array_job: None,
        array_span: None,
        queue: String::new(),
    }
}

/// Milliseconds at quantile `q` of sorted `xs`.
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

struct Side {
    name: &'static str,
    runner: Runner,
    exits: tokio::sync::mpsc::Receiver<Exit>,
    data: std::path::PathBuf,
    start_ms: Vec<f64>,
    round_trip_ms: Vec<f64>,
}

impl Side {
    fn new(name: &'static str, confinement: Confinement) -> Side {
        let data = std::env::temp_dir().join(format!("gantry-bench-launch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        gantry_agent::runner::private_dir(&data).expect("data dir");
        let (tx, exits) = tokio::sync::mpsc::channel(16);
        let runner = Runner::new(data.clone(), tx, confinement, Defaults::default());
        Side { name, runner, exits, data, start_ms: Vec::new(), round_trip_ms: Vec::new() }
    }

    async fn once(&mut self, job: u64) {
        let before = now_ns();
        let started = Instant::now();
        self.runner.launch(launch(job));
        let exit = self.exits.recv().await.expect("an exit");
        self.round_trip_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(exit.code, Some(0), "{exit:?}");
        let out = std::fs::read_to_string(self.data.join(format!("jobs/{job}/0/0.out"))).expect("output");
        let at: u128 = out.trim().parse().expect("date +%s%N");
        self.start_ms.push(at.saturating_sub(before) as f64 / 1e6);
    }

    fn report(&mut self) {
        for (what, xs) in [("start", &mut self.start_ms), ("round trip", &mut self.round_trip_ms)] {
            xs.sort_by(f64::total_cmp);
            println!(
                "{:<11} {:<11} n={:<5} median {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
                self.name,
                what,
                xs.len(),
                quantile(xs, 0.5),
                quantile(xs, 0.99),
                xs.last().copied().unwrap_or(f64::NAN)
            );
        }
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn main() {
    let launches: u64 = arg("--launches").and_then(|n| n.parse().ok()).unwrap_or(400);
    let choice: Choice = arg("--confinement").map_or(Choice::Auto, |c| c.parse().expect("auto|cgroup-v1|cgroup-v2"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let rules = DeviceRules::fake(&[(0, "GPU-bench-0".into()), (1, "GPU-bench-1".into())]);
        let parent = format!("gantry-bench/launch-{}", std::process::id());
        let confined = gantry_agent::cgroup::detect(choice, &parent, rules);
        let report = confined.report();
        println!("launches: {launches} per side, alternating; confinement: {report}");
        let mut sides = vec![Side::new("unconfined", Confinement::Unconfined("the baseline".into()))];
        match &confined {
            Confinement::Cgroups(_) => sides.push(Side::new("confined", confined.clone())),
            Confinement::Unconfined(why) => println!("confined side skipped: {why}"),
        }
        // A few of each first, not measured (page cache, the first cgroups).
        for job in 0..5 {
            for side in sides.iter_mut() {
                side.once(1_000_000 + job).await;
            }
        }
        for side in sides.iter_mut() {
            side.start_ms.clear();
            side.round_trip_ms.clear();
        }
        for job in 1..=launches {
            for side in sides.iter_mut() {
                side.once(job).await;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for side in sides.iter_mut() {
            side.report();
        }
        if let Some(cg) = confined.cgroups() {
            cg.remove_parent_if_empty();
        }
    });
}
