//! The seeded fault-injection soak: two controllers on one private PostgreSQL, two agents that
//! follow the leader, a seeded workload submitted while seeded faults hit the system — kill -9
//! of the leader, of the standby and of agents, a leader paused past its lease (SIGSTOP, how a
//! partition looks to a lease), a PostgreSQL restart. A supervisor restarts controllers that
//! stop (as standbys) and agents that were killed. Checked at the end: every acknowledged
//! submission's jobs completed, no job ran twice, no GPU held by two jobs at once (from the
//! tasks' own start/end records), and each leader term claimed by one process only.
//!
//! CI runs a short seeded run. A long one: `GANTRY_SOAK_FAULTS=1000 GANTRY_SOAK_SEED=7 cargo
//! test --release -p gantry --test soak -- --nocapture` (docs/PERFORMANCE.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn gantry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
}

/// A child process killed when dropped, its stderr appended to a log the checks read.
struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (process id, term) of every "leading, term N" banner seen.
type Banners = Arc<Mutex<Vec<(u32, u64)>>>;

fn spawn_logged(args: &[String], log: &Path, banners: Option<Banners>) -> Proc {
    let mut child =
        gantry().args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("starts");
    let pid = child.id();
    let stderr = child.stderr.take().expect("stderr");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            // "… (leading, term N) …": which process claimed which term.
            if let (Some(banners), Some(rest)) = (&banners, line.split("(leading, term ").nth(1))
                && let Some(term) = rest.split(')').next().and_then(|t| t.parse().ok())
            {
                banners.lock().expect("lock").push((pid, term));
            }
            let _ = writeln!(file, "{line}");
        }
    });
    Proc { child }
}

struct Soak {
    dir: PathBuf,
    store: String,
    fleet: String,
    ports: [u16; 2],
    banners: Banners,
    controllers: [Option<Proc>; 2],
    agents: [Option<Proc>; 2],
    admin: String,
}

impl Soak {
    fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    fn both(&self) -> String {
        format!("{},{}", self.url(0), self.url(1))
    }

    fn start_controller(&mut self, i: usize) {
        let data = self.dir.join(format!("controller-{i}"));
        let args: Vec<String> = [
            "serve",
            "--fleet",
            &self.fleet,
            "--data",
            data.to_str().expect("utf-8"),
            "--listen",
            &format!("127.0.0.1:{}", self.ports[i]),
            "--store",
            &self.store,
            "--standby",
            "--insecure-http",
            "--node-lost-after",
            "3600",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let log = self.dir.join(format!("controller-{i}.log"));
        self.controllers[i] = Some(spawn_logged(&args, &log, Some(self.banners.clone())));
    }

    fn start_agent(&mut self, i: usize) {
        let node = format!("n{}", i + 1);
        let args: Vec<String> = [
            "agent",
            "--server",
            &self.both(),
            "--token-file",
            self.dir.join(format!("{node}.token")).to_str().expect("utf-8"),
            "--inventory",
            &self.fleet,
            "--node",
            &node,
            "--data",
            self.dir.join(format!("agent-{node}")).to_str().expect("utf-8"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        self.agents[i] = Some(spawn_logged(&args, &self.dir.join(format!("agent-{node}.log")), None));
    }

    /// Restart whatever stopped: a controller that exited (fenced, or its store went away)
    /// comes back as a standby.
    fn supervise(&mut self) {
        for i in 0..2 {
            let exited = self.controllers[i].as_mut().is_none_or(|p| matches!(p.child.try_wait(), Ok(Some(_))));
            if exited {
                self.start_controller(i);
            }
            let gone = self.agents[i].as_mut().is_none_or(|p| matches!(p.child.try_wait(), Ok(Some(_))));
            if gone {
                self.start_agent(i);
            }
        }
    }

    fn call(&self, args: &[&str]) -> Option<String> {
        let mut command = gantry();
        command.args(args).args(["--server", &self.both(), "--token", &self.admin]);
        run_within(command, Duration::from_secs(20))
    }

    /// Which controller answers as leader now (none while a standby takes over). A paused
    /// controller accepts connections and never answers: each probe gives up after 2 s.
    fn leader(&self) -> Option<usize> {
        (0..2).find(|&i| {
            let mut command = gantry();
            command.args(["queue", "--state", "running", "--server", &self.url(i), "--token", &self.admin]);
            run_within(command, Duration::from_secs(2)).is_some()
        })
    }

    fn wait_for_leader(&mut self, within: Duration) -> Option<(usize, Duration)> {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(i) = self.leader() {
                return Some((i, started.elapsed()));
            }
            self.supervise();
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn signal(&self, which: &Option<Proc>, signal: &str) {
        if let Some(p) = which {
            let _ = Command::new("kill").args([signal, &p.child.id().to_string()]).stderr(Stdio::null()).status();
        }
    }
}

/// Run `command`; its stdout if it succeeded within `limit` (else it is killed).
fn run_within(mut command: Command, limit: Duration) -> Option<String> {
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = reader.join().ok()?;
            return status.success().then_some(text);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug, Default)]
struct Tally {
    faults: BTreeMap<&'static str, u32>,
    /// Time until a controller answered again, by the fault that took the leader away.
    failovers_ms: BTreeMap<&'static str, Vec<u128>>,
    /// The fleet, not just the leader: time from the fault until both nodes' agents are
    /// attached to the leader again, and until a task starts (when work was waiting).
    reattached_ms: BTreeMap<&'static str, Vec<u128>>,
    first_task_ms: BTreeMap<&'static str, Vec<u128>>,
    acknowledged: BTreeSet<u64>,
}

/// Tasks started so far, by the tasks' own records.
fn starts(ran: &Path) -> usize {
    std::fs::read_to_string(ran).map_or(0, |t| t.lines().filter(|l| l.contains(" start ")).count())
}

impl Soak {
    /// Are both nodes' agents attached to the leader (ready)?
    fn attached(&self) -> bool {
        self.call(&["nodes", "--json"])
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
            .and_then(|v| v.as_array().map(|nodes| nodes.len() == 2 && nodes.iter().all(|n| n["ready"] == true)))
            .unwrap_or(false)
    }

    /// After a fault at `at`: how long until both agents were attached and (when work was
    /// waiting, `waiting`) a task started. Gives up after a minute (then not counted).
    fn measure_fleet(
        &mut self,
        at: Instant,
        ran: &Path,
        waiting: Option<usize>,
        kind: &'static str,
        tally: &mut Tally,
    ) {
        let (mut attached, mut started) = (None, waiting.is_none().then_some(Duration::ZERO));
        while at.elapsed() < Duration::from_secs(60) && (attached.is_none() || started.is_none()) {
            if started.is_none() && waiting.is_some_and(|before| starts(ran) > before) {
                started = Some(at.elapsed());
            }
            if attached.is_none() && self.attached() {
                attached = Some(at.elapsed());
            }
            self.supervise();
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(t) = attached {
            tally.reattached_ms.entry(kind).or_default().push(t.as_millis());
        }
        if let (Some(t), Some(_)) = (started, waiting) {
            tally.first_task_ms.entry(kind).or_default().push(t.as_millis());
        }
    }
}

#[test]
fn a_seeded_soak_of_faults_loses_and_doubles_nothing() {
    let seed: u64 = std::env::var("GANTRY_SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(11);
    let faults: u32 = std::env::var("GANTRY_SOAK_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let mut rng = gantry_engine::rng::SeededRng::new(seed);
    let mut pg = gantry_store::test_postgres::TestPostgres::start("soak").expect("a private PostgreSQL");
    let store = pg.create_database("gantry").expect("a database");
    let dir = std::env::temp_dir().join(format!("gantry-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n\n\
         [[node]]\nname = \"n2\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n",
    )
    .expect("fleet");
    let free = || std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let mut soak = Soak {
        dir: dir.clone(),
        store,
        fleet: fleet.to_str().expect("utf-8").to_string(),
        ports: [free(), free()],
        banners: Arc::default(),
        controllers: [None, None],
        agents: [None, None],
        admin: String::new(),
    };
    soak.start_controller(0);
    let admin_file = dir.join("controller-0").join("admin.token");
    let started = Instant::now();
    while !admin_file.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "the first controller never led");
        std::thread::sleep(Duration::from_millis(50));
    }
    soak.admin = std::fs::read_to_string(&admin_file).expect("admin").trim().to_string();
    soak.start_controller(1);
    for node in ["n1", "n2"] {
        let out = soak
            .call(&["token", "create", &format!("rack-{node}"), "--role", "agent", "--node", node])
            .expect("an agent token");
        std::fs::write(dir.join(format!("{node}.token")), out.lines().next().expect("secret").trim()).expect("token");
    }
    soak.supervise();
    let ran = dir.join("ran.log");
    let mut tally = Tally::default();
    for round in 0..faults {
        // A batch of jobs (1 GPU each, a second or two), then a fault.
        let count = 2 + rng.below(3);
        let sleep = 1.0 + rng.below(10) as f64 / 10.0;
        let workload = dir.join(format!("batch-{round}.toml"));
        std::fs::write(
            &workload,
            format!(
                "[[job]]\nname = \"r{round}\"\ncount = {count}\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID $CUDA_VISIBLE_DEVICES start $(date +%s.%N) >> {ran}; sleep {sleep}; echo $GANTRY_JOB_ID $CUDA_VISIBLE_DEVICES end $(date +%s.%N) >> {ran}\"\n",
                ran = ran.display()
            ),
        )
        .expect("workload");
        if let Some(out) = soak.call(&["submit", workload.to_str().expect("utf-8"), "--json"]) {
            let reply: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
            tally.acknowledged.extend(reply["ids"].as_array().into_iter().flatten().filter_map(|v| v.as_u64()));
        }
        std::thread::sleep(Duration::from_millis(300 + rng.below(1200)));
        let leader = soak.leader();
        // Every kind once first (so even a short run covers them all), then drawn.
        const KINDS: [&str; 5] = ["kill-leader", "pause-leader", "restart-postgres", "kill-agent", "kill-standby"];
        let kind = match round {
            r if (r as usize) < KINDS.len() => KINDS[r as usize],
            _ => match rng.below(6) {
                0 | 1 => "kill-leader",
                2 => "kill-standby",
                3 => "kill-agent",
                4 => "pause-leader",
                _ => "restart-postgres",
            },
        };
        *tally.faults.entry(kind).or_default() += 1;
        let fault_at = Instant::now();
        let started_before = starts(&ran);
        // Work waiting: acknowledged jobs that have not started yet.
        let waiting = (tally.acknowledged.len() > started_before).then_some(started_before);
        match (kind, leader) {
            ("kill-leader", Some(l)) => {
                soak.signal(&soak.controllers[l], "-KILL");
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("a new leader within 30 s");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
            }
            ("kill-standby", Some(l)) => soak.signal(&soak.controllers[1 - l], "-KILL"),
            ("kill-agent", _) => {
                let i = rng.below(2) as usize;
                soak.signal(&soak.agents[i], "-KILL");
            }
            ("pause-leader", Some(l)) => {
                soak.signal(&soak.controllers[l], "-STOP");
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("the standby takes over");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
                soak.signal(&soak.controllers[l], "-CONT");
            }
            ("restart-postgres", _) => {
                let started = Instant::now();
                let term = soak.banners.lock().expect("lock").iter().map(|(_, t)| *t).max().unwrap_or(0);
                pg.restart().expect("PostgreSQL comes back");
                // Both controllers lost their store: the old leader stops at its next commit, the
                // supervisor brings it back, and someone leads a new term.
                while soak.banners.lock().expect("lock").iter().all(|(_, t)| *t <= term) {
                    assert!(started.elapsed() < Duration::from_secs(60), "seed {seed}: no new term after the restart");
                    soak.supervise();
                    std::thread::sleep(Duration::from_millis(100));
                }
                tally.failovers_ms.entry(kind).or_default().push(started.elapsed().as_millis());
            }
            _ => {}
        }
        soak.supervise();
        soak.wait_for_leader(Duration::from_secs(30)).expect("a leader after the fault");
        soak.measure_fleet(fault_at, &ran, waiting, kind, &mut tally);
    }
    eprintln!(
        "soak seed {seed}: {faults} faults injected {:?}; draining {} acknowledged jobs",
        tally.faults,
        tally.acknowledged.len()
    );
    // Let everything acknowledged finish. A long run leaves a backlog (the fleet is four GPUs,
    // and each agent reports an exit with its next heartbeat): what must hold is progress, so
    // the run fails only if nothing completes for a minute.
    let stall = Duration::from_secs(60);
    let mut last_progress = (Instant::now(), 0usize);
    let completed = |soak: &Soak| -> BTreeSet<u64> {
        soak.call(&["queue", "--state", "completed", "--json"])
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
            .map(|v| v.as_array().into_iter().flatten().filter_map(|j| j["id"].as_u64()).collect())
            .unwrap_or_default()
    };
    loop {
        soak.supervise();
        let done = completed(&soak);
        if tally.acknowledged.is_subset(&done) {
            break;
        }
        if done.len() > last_progress.1 {
            last_progress = (Instant::now(), done.len());
        }
        if last_progress.0.elapsed() > stall {
            let all = soak.call(&["queue", "--all"]).unwrap_or_default();
            panic!(
                "seed {seed}: nothing completed for {stall:?}; acknowledged jobs not completed: {:?}\n{all}",
                tally.acknowledged.difference(&done).collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    check_records(&ran, &tally, seed);
    let banners = soak.banners.lock().expect("lock").clone();
    let mut by_term: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (pid, term) in &banners {
        by_term.entry(*term).or_default().insert(*pid);
    }
    for (term, pids) in &by_term {
        assert_eq!(pids.len(), 1, "seed {seed}: term {term} claimed by {pids:?}");
    }
    let figures = |by_kind: &BTreeMap<&'static str, Vec<u128>>| -> String {
        let lines: Vec<String> = by_kind
            .iter()
            .map(|(kind, ms)| {
                let mut ms = ms.clone();
                ms.sort_unstable();
                format!("{kind} p50 {} ms max {} ms (n={})", ms[ms.len() / 2], ms[ms.len() - 1], ms.len())
            })
            .collect();
        lines.join("; ")
    };
    eprintln!(
        "soak seed {seed}: {faults} faults {:?}; {} jobs acknowledged, all completed exactly once, no GPU held twice; {} terms, one process each; back to a leader: {}; agents reattached: {}; first task started: {}",
        tally.faults,
        tally.acknowledged.len(),
        by_term.len(),
        figures(&tally.failovers_ms),
        figures(&tally.reattached_ms),
        figures(&tally.first_task_ms)
    );
    drop(soak);
    let _ = std::fs::remove_dir_all(&dir);
}

/// From the tasks' own records: every acknowledged job started exactly once, and no two jobs
/// held one GPU at the same time.
fn check_records(ran: &Path, tally: &Tally, seed: u64) {
    let text = std::fs::read_to_string(ran).unwrap_or_default();
    let mut starts: BTreeMap<u64, u32> = BTreeMap::new();
    let mut spans: BTreeMap<(u64, String), (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [job, device, what, at] = parts.as_slice() else { continue };
        let (Ok(job), Ok(at)) = (job.parse::<u64>(), at.parse::<f64>()) else { continue };
        let span = spans.entry((job, device.to_string())).or_insert((at, f64::INFINITY));
        match *what {
            "start" => {
                *starts.entry(job).or_default() += 1;
                span.0 = at;
            }
            _ => span.1 = at,
        }
    }
    for id in &tally.acknowledged {
        assert_eq!(starts.get(id), Some(&1), "seed {seed}: job {id} started {:?} times", starts.get(id));
    }
    for (job, n) in &starts {
        assert_eq!(*n, 1, "seed {seed}: job {job} ran {n} times");
    }
    let mut by_device: BTreeMap<&str, Vec<(f64, f64, u64)>> = BTreeMap::new();
    for ((job, device), (a, b)) in &spans {
        by_device.entry(device.as_str()).or_default().push((*a, *b, *job));
    }
    for (device, mut spans) in by_device {
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        for pair in spans.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "seed {seed}: GPU {device} held by jobs {} and {} at once ({:?} / {:?})",
                pair[0].2,
                pair[1].2,
                pair[0],
                pair[1]
            );
        }
    }
}
