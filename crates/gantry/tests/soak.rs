//! The seeded fault-injection soak: two controllers on one private PostgreSQL, two agents that
//! follow the leader, a seeded workload submitted while seeded faults hit the system — kill -9
//! of the leader, of the standby and of agents, a leader paused past its lease (SIGSTOP, how a
//! partition looks to a lease) and one left paused long after it was replaced, a PostgreSQL
//! restart, a node that dies (its agent and tasks killed) during a failover, a node cut off
//! (its agent paused) until it is declared lost and then back, and a step of the controllers'
//! wall clock (libfaketime; a controller reads it when it starts). A supervisor restarts only
//! what the soak killed with -9 (a machine's supervisor would): a controller that exits by
//! itself fails the run. Checked at the end: every acknowledged submission's jobs completed;
//! none ran twice, except a job a lost node held (its node may have run it on while it was
//! rerun elsewhere: at-least-once, as any scheduler); no GPU held by two attempts at once, of
//! one job or two (from the tasks' own start/end records); no job ending before it started;
//! each leader term claimed by one process only.
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

fn spawn_logged(args: &[String], log: &Path, banners: Option<Banners>, env: &[(&str, String)]) -> Proc {
    let mut child = gantry()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
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
    /// Controllers the soak killed with -9 (the supervisor restarts those only).
    killed: [bool; 2],
    /// Nodes kept down (their agents are not restarted until the soak says so).
    down: [bool; 2],
    /// Controllers that exited without being killed: each is a failure.
    exits: Vec<String>,
    /// libfaketime's file: the controllers' wall-clock offset.
    clock: PathBuf,
    /// The controller that answered as leader last: the harness's own calls ask it first, so
    /// its figures do not include waits on a paused one (an operator's CLI call's are measured
    /// by the failover test).
    prefer: std::cell::Cell<usize>,
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
            "--agent-timeout",
            "10",
            "--node-lost-after",
            &NODE_LOST_AFTER_S.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let log = self.dir.join(format!("controller-{i}.log"));
        let clock = [
            ("LD_PRELOAD", libfaketime()),
            ("FAKETIME_TIMESTAMP_FILE", self.clock.to_str().expect("utf-8").to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
            ("FAKETIME_CACHE_DURATION", "1".to_string()),
        ];
        self.controllers[i] = Some(spawn_logged(&args, &log, Some(self.banners.clone()), &clock));
        self.killed[i] = false;
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
        self.agents[i] = Some(spawn_logged(&args, &self.dir.join(format!("agent-{node}.log")), None, &[]));
    }

    /// Restart what the soak killed, as a machine's supervisor would (a controller comes back
    /// as a standby); a controller that exited by itself is noted as a failure, and restarted
    /// so the run goes on. Nodes kept down stay down.
    fn supervise(&mut self) {
        for i in 0..2 {
            let exited = self.controllers[i].as_mut().and_then(|p| p.child.try_wait().ok().flatten());
            match (&self.controllers[i], exited) {
                (None, _) => self.start_controller(i),
                (Some(_), Some(status)) => {
                    if !self.killed[i] {
                        self.exits.push(format!("controller {i} exited by itself ({status})"));
                    }
                    self.start_controller(i);
                }
                (Some(_), None) => {}
            }
            let gone = self.agents[i].as_mut().is_none_or(|p| matches!(p.child.try_wait(), Ok(Some(_))));
            if gone && !self.down[i] {
                self.start_agent(i);
            }
        }
    }

    fn kill_controller(&mut self, i: usize) {
        self.killed[i] = true;
        self.signal(&self.controllers[i], "-KILL");
    }

    /// Node `i` dies: its agent and every process of its tasks (their files are under the
    /// agent's data directory), at once; it stays down until [`Soak::revive`].
    /// As a machine dies: everything stopped first (nothing reports a task's end while the
    /// rest is being found), then killed.
    fn kill_node(&mut self, i: usize) {
        self.down[i] = true;
        let marker = format!("agent-n{}/", i + 1);
        let mut pids: Vec<String> = self.agents[i].iter().map(|p| p.child.id().to_string()).collect();
        let _ = Command::new("kill").arg("-STOP").args(&pids).stderr(Stdio::null()).status();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
            let mentions = ["environ", "cmdline"].iter().any(|f| {
                std::fs::read(entry.path().join(f)).is_ok_and(|b| String::from_utf8_lossy(&b).contains(&marker))
            });
            if mentions && pid != std::process::id() {
                let _ = Command::new("kill").args(["-STOP", &pid.to_string()]).stderr(Stdio::null()).status();
                pids.push(pid.to_string());
            }
        }
        let _ = Command::new("kill").arg("-KILL").args(&pids).stderr(Stdio::null()).status();
    }

    fn revive(&mut self, i: usize) {
        self.down[i] = false;
        self.supervise();
    }

    /// Is node `i` declared lost by the leader?
    fn lost(&self, i: usize) -> bool {
        self.call(&["nodes", "--json"])
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
            .and_then(|v| v.as_array()?.iter().find(|n| n["name"] == format!("n{}", i + 1)).map(|n| n["lost"] == true))
            .unwrap_or(false)
    }

    fn call(&self, args: &[&str]) -> Option<String> {
        let first = self.prefer.get();
        let servers = format!("{},{}", self.url(first), self.url(1 - first));
        let mut command = gantry();
        command.args(args).args(["--server", &servers, "--token", &self.admin]);
        run_within(command, Duration::from_secs(20))
    }

    /// Which controller answers as leader now (none while a standby takes over). A paused
    /// controller accepts connections and never answers: each probe gives up after 2 s.
    fn leader(&self) -> Option<usize> {
        let first = self.prefer.get();
        let found = [first, 1 - first].into_iter().find(|&i| {
            let mut command = gantry();
            command.args(["queue", "--state", "running", "--server", &self.url(i), "--token", &self.admin]);
            run_within(command, Duration::from_secs(2)).is_some()
        });
        if let Some(i) = found {
            self.prefer.set(i);
        }
        found
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

    /// Wait until the leader declares node `i` lost — or, if nothing runs there by its
    /// account, until it is plain there is nothing to lose (a node without work is never
    /// "lost": nothing depends on it; it is just not ready).
    fn wait_lost(&mut self, i: usize, kind: &'static str, at: Instant, tally: &mut Tally) {
        let limit = Duration::from_secs(NODE_LOST_AFTER_S + 60);
        loop {
            if self.lost(i) {
                tally.lost_ms.entry(kind).or_default().push(at.elapsed().as_millis());
                return;
            }
            if self.leader().is_some() && !self.has_work(i) {
                *tally.nothing_to_lose.entry(kind).or_default() += 1;
                return;
            }
            assert!(at.elapsed() < limit, "{kind}: node n{} never declared lost", i + 1);
            self.supervise();
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Does the leader have a job running on node `i`? (`true` when it cannot tell.)
    fn has_work(&self, i: usize) -> bool {
        let node = format!("n{}", i + 1);
        self.call(&["queue", "--state", "running", "--json"])
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
            .and_then(|v| {
                let jobs = v.as_array()?.clone();
                Some(jobs.iter().any(|j| {
                    j["tasks"].as_array().is_some_and(|tasks| tasks.iter().any(|t| t["node"] == node.as_str()))
                }))
            })
            .unwrap_or(true)
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
    /// Time from the fault until the leader declared the node lost.
    lost_ms: BTreeMap<&'static str, Vec<u128>>,
    /// Node faults that hit a node with no work (nothing to declare lost).
    nothing_to_lose: BTreeMap<&'static str, u32>,
    acknowledged: BTreeSet<u64>,
    /// Nodes lost, and when (Unix seconds, the tasks' clock): a job that started there before
    /// may have run on while it was rerun elsewhere.
    losses: Vec<(String, f64)>,
    /// Nodes killed, and when: their tasks' records end there.
    kills: Vec<(String, f64)>,
}

/// How long a silent node takes to be declared lost here.
const NODE_LOST_AFTER_S: u64 = 20;

/// Now, in Unix seconds, as the tasks' `date +%s.%N` says it.
fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

/// Debian's libfaketime (tools/install-test-deps.sh installs it).
fn libfaketime() -> String {
    let dir = std::fs::read_dir("/usr/lib").expect("/usr/lib");
    dir.filter_map(Result::ok)
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .map(|p| p.to_str().expect("utf-8").to_string())
        .expect("libfaketime is installed (bash tools/install-test-deps.sh)")
}

/// Tasks started so far, by the tasks' own records.
/// The jobs that started at least once, by the tasks' own records.
fn started_ids(ran: &Path) -> BTreeSet<u64> {
    let text = std::fs::read_to_string(ran).unwrap_or_default();
    text.lines().filter(|l| l.contains(" start ")).filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect()
}

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
    let faults: u32 = std::env::var("GANTRY_SOAK_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(9);
    let mut rng = gantry_engine::rng::SeededRng::new(seed);
    let mut pg = gantry_store::test_postgres::TestPostgres::start("soak").expect("a private PostgreSQL");
    let store = pg.create_database("gantry").expect("a database");
    let dir = std::env::temp_dir().join(format!("gantry-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let clock = dir.join("faketime");
    std::fs::write(&clock, "+0\n").expect("faketime file");
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
        killed: [false; 2],
        down: [false; 2],
        exits: Vec::new(),
        clock,
        prefer: std::cell::Cell::new(0),
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
                "[[job]]\nname = \"r{round}\"\ncount = {count}\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID $GANTRY_NODE:$CUDA_VISIBLE_DEVICES start $(date +%s.%N) >> {ran}; sleep {sleep}; echo $GANTRY_JOB_ID $GANTRY_NODE:$CUDA_VISIBLE_DEVICES end $(date +%s.%N) >> {ran}\"\n",
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
        const KINDS: [&str; 9] = [
            "kill-leader",
            "pause-leader",
            "restart-postgres",
            "kill-agent",
            "kill-standby",
            "clock-step",
            "pause-leader-long",
            "node-dies-during-failover",
            "node-returns-after-loss",
        ];
        let kind = match round {
            r if (r as usize) < KINDS.len() => KINDS[r as usize],
            // The slow kinds (a lease or a node-lost wait each, 10–27 s) drawn less often, so a
            // 1,000-fault run takes hours, not a day.
            _ => match rng.below(24) {
                0..=4 => "kill-leader",
                5..=7 => "kill-standby",
                8..=11 => "kill-agent",
                12..=15 => "restart-postgres",
                16..=18 => "clock-step",
                19 | 20 => "pause-leader",
                21 => "pause-leader-long",
                22 => "node-dies-during-failover",
                _ => "node-returns-after-loss",
            },
        };
        *tally.faults.entry(kind).or_default() += 1;
        let fault_at = Instant::now();
        let started_before = starts(&ran);
        // Work waiting: acknowledged jobs that have not started yet (by id: unacknowledged
        // submissions and reruns also write start lines).
        let ran_ids = started_ids(&ran);
        let waiting = tally.acknowledged.iter().any(|id| !ran_ids.contains(id)).then_some(started_before);
        match (kind, leader) {
            ("kill-leader", Some(l)) => {
                soak.kill_controller(l);
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("a new leader within 30 s");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
            }
            ("kill-standby", Some(l)) => soak.kill_controller(1 - l),
            ("clock-step", _) => {
                // Forward past --node-lost-after, or back: read by the controllers that start
                // after it (a restart, a takeover by a restarted standby).
                let step = ["+30m", "-10m", "+2h", "+0"][rng.below(4) as usize];
                std::fs::write(&soak.clock, format!("{step}\n")).expect("steps the clock");
                let l = leader.unwrap_or(0);
                soak.kill_controller(l);
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("a leader after the step");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
            }
            ("pause-leader-long", Some(l)) => {
                // Paused long past the clients' answer limit and the lease: the fleet must run
                // on the new leader meanwhile; woken, the old one rejoins as a standby.
                soak.signal(&soak.controllers[l], "-STOP");
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("the standby takes over");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
                soak.measure_fleet(fault_at, &ran, waiting, kind, &mut tally);
                while fault_at.elapsed() < Duration::from_secs(25) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                soak.signal(&soak.controllers[l], "-CONT");
            }
            ("node-dies-during-failover", Some(l)) => {
                let i = rng.below(2) as usize;
                let at = unix_now();
                soak.kill_node(i);
                soak.kill_controller(l);
                tally.kills.push((format!("n{}", i + 1), at));
                tally.losses.push((format!("n{}", i + 1), at));
                let (_, took) = soak.wait_for_leader(Duration::from_secs(30)).expect("a new leader within 30 s");
                tally.failovers_ms.entry(kind).or_default().push(took.as_millis());
                soak.wait_lost(i, kind, fault_at, &mut tally);
                soak.revive(i);
            }
            ("node-returns-after-loss", _) => {
                let i = rng.below(2) as usize;
                tally.losses.push((format!("n{}", i + 1), unix_now()));
                soak.signal(&soak.agents[i], "-STOP");
                soak.wait_lost(i, kind, fault_at, &mut tally);
                soak.signal(&soak.agents[i], "-CONT");
            }
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
                // Both controllers lost their store: the old leader steps down and rejoins as a
                // standby by itself, the standby keeps waiting, and one leads a new term.
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
        if kind != "pause-leader-long" {
            soak.measure_fleet(fault_at, &ran, waiting, kind, &mut tally);
        }
        if (round + 1) % 50 == 0 {
            eprintln!("soak seed {seed}: {} faults so far {:?}; {}", round + 1, tally.faults, tally.figures());
        }
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
    let reruns = check_records(&ran, &tally, seed);
    check_times(&soak, seed);
    assert!(soak.exits.is_empty(), "seed {seed}: controllers stopped by themselves: {:?}", soak.exits);
    let banners = soak.banners.lock().expect("lock").clone();
    let mut by_term: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (pid, term) in &banners {
        by_term.entry(*term).or_default().insert(*pid);
    }
    for (term, pids) in &by_term {
        assert_eq!(pids.len(), 1, "seed {seed}: term {term} claimed by {pids:?}");
    }
    eprintln!(
        "soak seed {seed}: {faults} faults {:?}; {} jobs acknowledged, all completed, none run twice but what a lost node held ({} runs), no GPU held twice; {} terms, one process each; {}",
        tally.faults,
        tally.acknowledged.len(),
        reruns,
        by_term.len(),
        tally.figures()
    );
    drop(soak);
    // GANTRY_SOAK_KEEP=1 keeps the logs and records for a look.
    if std::env::var_os("GANTRY_SOAK_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

impl Tally {
    /// p50 and max of each figure, by fault kind.
    fn figures(&self) -> String {
        let by = |by_kind: &BTreeMap<&'static str, Vec<u128>>| -> String {
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
        format!(
            "back to a leader: {}; agents reattached: {}; first task started: {}; node declared lost: {}; node faults with nothing running there: {:?}",
            by(&self.failovers_ms),
            by(&self.reattached_ms),
            by(&self.first_task_ms),
            by(&self.lost_ms),
            self.nothing_to_lose
        )
    }
}

/// One task's run on one GPU, from its own records: (start, end, job); a task killed with its
/// node ends when the node was killed.
type Span = (f64, f64, u64);

/// From the tasks' own records: every acknowledged job started exactly once — or, if a node
/// it started on was lost, at least once — and no GPU ran two attempts at once (of two jobs,
/// or of one). The extra runs of jobs a lost node held, counted.
fn check_records(ran: &Path, tally: &Tally, seed: u64) -> usize {
    let text = std::fs::read_to_string(ran).unwrap_or_default();
    let mut starts: BTreeMap<u64, u32> = BTreeMap::new();
    let mut open: BTreeMap<(u64, String), Vec<usize>> = BTreeMap::new();
    let mut spans: Vec<(String, Span)> = Vec::new();
    let mut on_lost_node: BTreeSet<u64> = BTreeSet::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [job, device, what, at] = parts.as_slice() else { continue };
        let (Ok(job), Ok(at)) = (job.parse::<u64>(), at.parse::<f64>()) else { continue };
        let node = device.split(':').next().unwrap_or_default();
        match *what {
            "start" => {
                *starts.entry(job).or_default() += 1;
                if tally.losses.iter().any(|(lost, when)| lost == node && at <= *when) {
                    on_lost_node.insert(job);
                }
                let end = tally
                    .kills
                    .iter()
                    .filter(|(killed, when)| killed == node && *when >= at)
                    .map(|(_, when)| *when)
                    .fold(f64::INFINITY, f64::min);
                open.entry((job, device.to_string())).or_default().push(spans.len());
                spans.push((device.to_string(), (at, end, job)));
            }
            _ => {
                if let Some(index) = open.get_mut(&(job, device.to_string())).and_then(Vec::pop) {
                    spans[index].1.1 = spans[index].1.1.min(at);
                }
            }
        }
    }
    for id in &tally.acknowledged {
        let n = starts.get(id).copied().unwrap_or(0);
        if on_lost_node.contains(id) {
            assert!(n >= 1, "seed {seed}: job {id} never started");
        } else {
            assert_eq!(n, 1, "seed {seed}: job {id} started {n} times");
        }
    }
    for (job, n) in &starts {
        assert!(*n == 1 || on_lost_node.contains(job), "seed {seed}: job {job} ran {n} times");
    }
    let mut by_device: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    for (device, span) in &spans {
        by_device.entry(device.as_str()).or_default().push(*span);
    }
    for (device, mut spans) in by_device {
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        for pair in spans.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "seed {seed}: GPU {device} held by two attempts at once (jobs {} and {}: {:?} / {:?})",
                pair[0].2,
                pair[1].2,
                pair[0],
                pair[1]
            );
        }
    }
    starts.values().map(|n| (*n as usize).saturating_sub(1)).sum()
}

/// By the controller's records: no job ended before it started, whatever the clock did.
fn check_times(soak: &Soak, seed: u64) {
    let jobs = soak
        .call(&["queue", "--all", "--json"])
        .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
        .expect("the job list");
    let jobs = jobs.as_array().expect("a list");
    assert!(jobs.iter().any(|j| j["started_at_s"].is_u64()), "seed {seed}: the job list has times");
    for job in jobs {
        if let (Some(start), Some(end)) = (job["started_at_s"].as_u64(), job["ended_at_s"].as_u64()) {
            assert!(start <= end, "seed {seed}: job {} ended at {end}, before it started at {start}", job["id"]);
        }
    }
}
