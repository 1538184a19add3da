//! The agent-load harness (issue 24 §2): does one controller hold thousands of node agents?
//!
//! For each fleet size N it starts a real controller (`gantry serve`, this build, a child
//! process on loopback, HTTPS with agent certificates required) on a fleet of N nodes × 8
//! H100, gives every node an agent token and a client certificate, and runs N simulated
//! agents in this one process: each on its own TLS connection (a second one while a held
//! heartbeat is dropped, as the real agent does), speaking the real wire protocol — register,
//! then long-poll heartbeats (`wait_ms` 5000, the agent's default) that report every task and
//! a sample per GPU. A submitter sends 1-GPU jobs at a steady rate; the agent that gets a
//! job's launch order "runs" it for a set time, then reports its exit at once.
//!
//! Reported per N, over a measurement window after a warm-up:
//! - heartbeats per second, and the controller's CPU per heartbeat (all of its CPU in the
//!   window — heartbeats, submissions, scheduling cycles, commits — over the heartbeats);
//! - heartbeat round trip, p50/p99/max: heartbeats that report an exit (the controller
//!   answers those at once, with a commit); and how late held heartbeats come back past their
//!   5 s hold;
//! - submission → launch order at the agent, p50/p99;
//! - the controller's resident memory (now and peak).
//!
//! The harness shares the machine with the controller: its own CPU is reported beside it.
//!
//!     cargo bench -p gantry --bench agents -- [--agents 500,2000,5000] [--seconds 60]
//!         [--warmup 15] [--jobs-per-s 20] [--task-s 30]

use bytes::Bytes;
use gantry_wire::{AgentGpu, GpuSample, Heartbeat, Launch, Orders, Register, TaskKey, TaskReport, TaskState};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the controller may hold a heartbeat with nothing to order: the real agent's
/// default (`gantry agent`).
const WAIT_MS: u64 = 5_000;

/// Agents started per second while the fleet comes up (all at once would be N TLS handshakes
/// in the listen backlog at the same instant, which no real fleet does).
const STARTS_PER_S: u64 = 1_000;

#[derive(Clone, Debug)]
struct Options {
    agents: Vec<usize>,
    seconds: u64,
    warmup: u64,
    jobs_per_s: f64,
    task_s: f64,
}

fn options() -> Options {
    let mut o = Options { agents: vec![500, 2_000, 5_000], seconds: 60, warmup: 15, jobs_per_s: 20.0, task_s: 30.0 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--agents" => o.agents = value().split(',').map(|n| n.trim().parse().expect("--agents N,N,...")).collect(),
            "--seconds" => o.seconds = value().parse().expect("--seconds S"),
            "--warmup" => o.warmup = value().parse().expect("--warmup S"),
            "--jobs-per-s" => o.jobs_per_s = value().parse().expect("--jobs-per-s R"),
            "--task-s" => o.task_s = value().parse().expect("--task-s S"),
            "--bench" => {}
            other => {
                panic!("unknown flag {other:?} (--agents N,N,... --seconds S --warmup S --jobs-per-s R --task-s S)")
            }
        }
    }
    o
}

fn main() {
    let o = options();
    raise_open_files();
    let mut rows = Vec::new();
    for &n in &o.agents {
        eprintln!("== {n} agents");
        let point = run_point(n, &o);
        eprintln!("{}", point.row());
        rows.push(point);
    }
    println!(
        "\n| agents | all registered after | heartbeats/s | controller CPU | CPU per heartbeat | exit heartbeat RTT p50 / p99 / max | held heartbeat late p50 / p99 | submit → launch p50 / p99 | launched of submitted | errors | controller RSS now / peak | harness CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in &rows {
        println!("{}", p.row());
    }
}

/// What one fleet size measured.
#[derive(Debug, Default)]
struct Point {
    agents: usize,
    register_s: f64,
    window_s: f64,
    heartbeats: u64,
    controller_cpu_s: f64,
    harness_cpu_s: f64,
    exit_rtt_ms: Vec<f64>,
    held_late_ms: Vec<f64>,
    launch_ms: Vec<f64>,
    submitted: u64,
    errors: u64,
    rss_mib: f64,
    peak_mib: f64,
}

impl Point {
    fn row(&self) -> String {
        let hb_per_s = self.heartbeats as f64 / self.window_s;
        let ms = |v: &mut Vec<f64>, q: f64| percentile(v, q);
        let (mut e, mut h, mut l) = (self.exit_rtt_ms.clone(), self.held_late_ms.clone(), self.launch_ms.clone());
        format!(
            "| {} | {:.0} s | {:.0} | {:.0} % | {:.0} µs | {:.1} / {:.1} / {:.1} ms | {:.1} / {:.1} ms | {:.1} / {:.1} ms | {} of {} | {} | {:.0} / {:.0} MiB | {:.0} % |",
            self.agents,
            self.register_s,
            hb_per_s,
            100.0 * self.controller_cpu_s / self.window_s,
            1e6 * self.controller_cpu_s / self.heartbeats.max(1) as f64,
            ms(&mut e, 0.5),
            ms(&mut e, 0.99),
            ms(&mut e, 1.0),
            ms(&mut h, 0.5),
            ms(&mut h, 0.99),
            ms(&mut l, 0.5),
            ms(&mut l, 0.99),
            l.len(),
            self.submitted,
            self.errors,
            self.rss_mib,
            self.peak_mib,
            100.0 * self.harness_cpu_s / self.window_s,
        )
    }
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

/// One fleet size, start to finish.
fn run_point(n: usize, o: &Options) -> Point {
    let dir = std::env::temp_dir().join(format!("gantry-agents-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let fleet_file = dir.join("fleet.toml");
    let fleet_text = format!(
        "[[node]]\nname = \"sim\"\ncount = {n}\ncpu = 128\nmemory = \"1TiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n"
    );
    std::fs::write(&fleet_file, &fleet_text).expect("fleet file");
    let fleet = gantry_spec::parse_fleet(&fleet_text, gantry_catalog::Catalog::embedded()).expect("fleet");
    let data = dir.join("controller");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let mut controller = Controller::start(&fleet_file, &data, port, &dir.join("controller.log"));
    let admin = controller.admin_token();
    let ca = data.join(gantry_server::tls::CA_CERT);
    let server = format!("https://127.0.0.1:{port}");
    let client = gantry_wire::client::Client::new(
        &server,
        &gantry_wire::client::Tls { ca: Some(ca.clone()), ..Default::default() },
    )
    .expect("a client");

    let started = Instant::now();
    let identities = identities(&fleet, &data, &client, &admin);
    eprintln!("tokens and certificates for {n} nodes: {:.1} s", started.elapsed().as_secs_f64());

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let shared = Arc::new(Shared {
        addr: format!("127.0.0.1:{port}"),
        task: Duration::from_secs_f64(o.task_s),
        submitted_at: Mutex::new(HashMap::new()),
        registered: AtomicU64::new(0),
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        stopped: tokio::sync::Notify::new(),
        heartbeats: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stats: Mutex::new(Stats::default()),
    });
    let ca_der = CertificateDer::from_pem_file(&ca).expect("ca.pem");
    let started = Instant::now();
    let handles: Vec<_> = identities
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let shared = shared.clone();
            let config = client_config(&ca_der, &id);
            let delay = Duration::from_micros(i as u64 * 1_000_000 / STARTS_PER_S);
            runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                SimAgent::new(id, config, shared).run().await
            })
        })
        .collect();
    while shared.registered.load(Ordering::Relaxed) < n as u64 {
        assert!(started.elapsed() < Duration::from_secs(600), "agents did not all register within 10 minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
    let register_s = started.elapsed().as_secs_f64();
    eprintln!("{n} agents registered in {register_s:.1} s");

    let submitter = {
        let (shared, client, admin) = (shared.clone(), client.clone(), admin.clone());
        let (rate, total) = (o.jobs_per_s, Duration::from_secs(o.warmup + o.seconds));
        std::thread::spawn(move || submit_jobs(&client, &admin, &shared, rate, total))
    };
    std::thread::sleep(Duration::from_secs(o.warmup));
    let (cpu0, own0) = (controller.cpu_s(), own_cpu_s());
    shared.measuring.store(true, Ordering::SeqCst);
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(o.seconds));
    shared.measuring.store(false, Ordering::SeqCst);
    let window_s = window.elapsed().as_secs_f64();
    let (cpu1, own1) = (controller.cpu_s(), own_cpu_s());
    let (rss_mib, peak_mib) = controller.memory_mib();
    let submitted = submitter.join().expect("the submitter");
    shared.stop.store(true, Ordering::SeqCst);
    shared.stopped.notify_waiters();
    runtime.block_on(async {
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    controller.stop();
    let stats = std::mem::take(&mut *shared.stats.lock().expect("stats"));
    let submitted_at = shared.submitted_at.lock().expect("times");
    let launch_ms = stats
        .launches
        .iter()
        .filter_map(|(name, at)| submitted_at.get(name).map(|(sent, in_window)| (at, sent, in_window)))
        .filter(|(_, _, in_window)| **in_window)
        .map(|(at, sent, _)| at.saturating_duration_since(*sent).as_secs_f64() * 1e3)
        .collect();
    let point = Point {
        agents: n,
        register_s,
        window_s,
        heartbeats: shared.heartbeats.load(Ordering::Relaxed),
        controller_cpu_s: cpu1 - cpu0,
        harness_cpu_s: own1 - own0,
        exit_rtt_ms: stats.exit_rtt_ms,
        held_late_ms: stats.held_late_ms,
        launch_ms,
        submitted,
        errors: shared.errors.load(Ordering::Relaxed),
        rss_mib,
        peak_mib,
    };
    let _ = std::fs::remove_dir_all(&dir);
    point
}

/// The controller under test: `gantry serve`, this build.
struct Controller {
    child: std::process::Child,
    data: PathBuf,
}

impl Controller {
    fn start(fleet: &Path, data: &Path, port: u16, log: &Path) -> Controller {
        let log = std::fs::File::create(log).expect("log file");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(["serve", "--fleet"])
            .arg(fleet)
            .arg("--data")
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--agent-certs", "required"])
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("gantry serve starts");
        Controller { child, data: data.to_path_buf() }
    }

    /// The admin token, once the controller has written it and answers.
    fn admin_token(&mut self) -> String {
        let file = self.data.join("admin.token");
        let started = Instant::now();
        while !file.exists() || !self.data.join(gantry_server::tls::CA_CERT).exists() {
            assert!(self.child.try_wait().expect("wait").is_none(), "the controller exited: see its log");
            assert!(started.elapsed() < Duration::from_secs(60), "the controller did not start within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::read_to_string(file).expect("admin.token").trim().to_string()
    }

    /// User + system CPU seconds the controller has used.
    fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).expect("its /proc stat");
        cpu_of_stat(&stat)
    }

    /// Resident memory now and at its peak (MiB).
    fn memory_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("its /proc status");
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of a `/proc/PID/stat` line, in seconds (the clock ticks Linux reports in,
/// 100 per second on every architecture gantry runs on).
fn cpu_of_stat(stat: &str) -> f64 {
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

fn own_cpu_s() -> f64 {
    cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").expect("own stat"))
}

/// Thousands of connections: the soft limit on open files up to the hard one (as
/// `gantry serve` does for itself).
fn raise_open_files() {
    let limit = gantry_server::raise_open_files().expect("the open-file limit");
    eprintln!("open files: limit {limit} (one or two per agent connection, here and in the controller)");
}

/// One node's credentials: its agent token and client certificate.
struct Identity {
    node: String,
    gpus: Vec<AgentGpu>,
    token: String,
    cert_pem: String,
    key_pem: String,
}

/// An agent token (over the API) and a client certificate (from the controller's CA) for
/// every node, four nodes at a time.
fn identities(
    fleet: &gantry_types::Fleet,
    data: &Path,
    client: &gantry_wire::client::Client,
    admin: &str,
) -> Vec<Identity> {
    let chunk = fleet.nodes.len().div_ceil(4).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = fleet
            .nodes
            .chunks(chunk)
            .map(|nodes| {
                scope.spawn(move || {
                    nodes
                        .iter()
                        .map(|node| {
                            let body = serde_json::json!({"name": format!("agent-{}", node.name), "role": "agent", "node": node.name});
                            let (status, text) = client
                                .request(Some(admin), "POST", "/v1/tokens", Some(&body.to_string()))
                                .expect("the controller answers");
                            assert_eq!(status, 201, "token for {}: {text}", node.name);
                            let reply: serde_json::Value = serde_json::from_str(&text).expect("json");
                            let (cert_pem, key_pem) =
                                gantry_server::tls::issue_agent_cert(data, &node.name).expect("a certificate");
                            let gpus = node.gpus.iter().map(AgentGpu::of_fleet).collect();
                            Identity {
                                node: node.name.clone(),
                                gpus,
                                token: reply["secret"].as_str().expect("a secret").to_string(),
                                cert_pem,
                                key_pem,
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts.into_iter().flat_map(|p| p.join().expect("a token thread")).collect()
    })
}

fn client_config(ca: &CertificateDer<'static>, id: &Identity) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).expect("the CA");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(id.cert_pem.as_bytes()).collect::<Result<_, _>>().expect("cert");
    let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .expect("client certificate");
    Arc::new(config)
}

/// Submit one 1-GPU job every 1/`rate` s for `total`; each job's send time is recorded by
/// name before it is sent (its launch may reach an agent before the answer comes back).
/// Returns how many were submitted in the window.
fn submit_jobs(client: &gantry_wire::client::Client, admin: &str, shared: &Shared, rate: f64, total: Duration) -> u64 {
    let started = Instant::now();
    let mut in_window = 0;
    for i in 0u64.. {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        if due > started + total {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let name = format!("j{i}");
        let measuring = shared.measuring.load(Ordering::SeqCst);
        shared.submitted_at.lock().expect("times").insert(name.clone(), (Instant::now(), measuring));
        let body = format!("[[job]]\nname = \"{name}\"\ngpu = {{ count = 1 }}\ncommand = \"true\"\n");
        match client.request(Some(admin), "POST", "/v1/jobs", Some(&body)) {
            Ok((201, _)) => in_window += measuring as u64,
            other => {
                eprintln!("submission {name}: {other:?}");
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    in_window
}

/// What the agents share with the harness.
struct Shared {
    addr: String,
    task: Duration,
    /// Job name → (when it was sent, whether in the window).
    submitted_at: Mutex<HashMap<String, (Instant, bool)>>,
    registered: AtomicU64,
    measuring: AtomicBool,
    stop: AtomicBool,
    stopped: tokio::sync::Notify,
    /// Heartbeats answered in the window.
    heartbeats: AtomicU64,
    errors: AtomicU64,
    stats: Mutex<Stats>,
}

/// Measurements, gathered from every agent when it stops.
#[derive(Debug, Default)]
struct Stats {
    exit_rtt_ms: Vec<f64>,
    held_late_ms: Vec<f64>,
    /// (job name, when its first launch order arrived).
    launches: Vec<(String, Instant)>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// One simulated node agent.
struct SimAgent {
    id: Identity,
    tls: tokio_rustls::TlsConnector,
    shared: Arc<Shared>,
    instance: String,
    /// Idle connections; a held heartbeat dropped for a task's exit hands its connection
    /// back here when its answer comes.
    idle: Arc<Mutex<Vec<Sender>>>,
    tasks: BTreeMap<TaskKey, Task>,
    stats: Stats,
}

struct Task {
    state: TaskState,
    ends_at: Instant,
    gpus: Vec<u32>,
}

impl SimAgent {
    fn new(id: Identity, config: Arc<rustls::ClientConfig>, shared: Arc<Shared>) -> SimAgent {
        SimAgent {
            instance: format!("harness-{}", id.node),
            id,
            tls: tokio_rustls::TlsConnector::from(config),
            shared,
            idle: Arc::default(),
            tasks: BTreeMap::new(),
            stats: Stats::default(),
        }
    }

    async fn run(mut self) {
        while !self.register().await {
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.shared.registered.fetch_add(1, Ordering::Relaxed);
        while !self.shared.stop.load(Ordering::SeqCst) {
            self.beat().await;
        }
        let mut all = self.shared.stats.lock().expect("stats");
        all.exit_rtt_ms.append(&mut self.stats.exit_rtt_ms);
        all.held_late_ms.append(&mut self.stats.held_late_ms);
        all.launches.append(&mut self.stats.launches);
    }

    async fn register(&mut self) -> bool {
        let body = Register {
            node: self.id.node.clone(),
            gpus: self.id.gpus.clone(),
            version: "load harness".into(),
            protocol: gantry_wire::PROTOCOL_VERSION,
            instance: self.instance.clone(),
            confinement: None,
        };
        let body = serde_json::to_string(&body).expect("json");
        let Some(mut sender) = self.connection().await else { return false };
        match post(&mut sender, "/v1/agents/register", &self.id.token, body).await {
            Ok((200, _)) => {
                self.idle.lock().expect("idle").push(sender);
                true
            }
            Ok((status, text)) => panic!("registering {} refused ({status}): {text}", self.id.node),
            Err(_) => false,
        }
    }

    /// An idle kept-alive connection, else a new one (TCP, TLS with the node's certificate).
    async fn connection(&self) -> Option<Sender> {
        loop {
            let Some(sender) = self.idle.lock().expect("idle").pop() else { break };
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        let tcp = tokio::net::TcpStream::connect(&self.shared.addr).await.ok()?;
        tcp.set_nodelay(true).ok()?;
        let name = ServerName::try_from("localhost").expect("a name");
        let tls = self.tls.connect(name, tcp).await.ok()?;
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.ok()?;
        tokio::spawn(conn);
        Some(sender)
    }

    fn heartbeat(&self) -> String {
        let tasks = self
            .tasks
            .iter()
            .map(|(key, t)| TaskReport { key: key.clone(), state: t.state, stopping: false, steps: Vec::new() })
            .collect();
        let busy: Vec<u32> =
            self.tasks.values().filter(|t| t.state == TaskState::Running).flat_map(|t| t.gpus.clone()).collect();
        let samples = self
            .id
            .gpus
            .iter()
            .map(|g| GpuSample {
                index: g.index,
                utilization_pct: if busy.contains(&g.index) { 60 } else { 0 },
                memory_used_mib: 0,
                measured: false,
                jobs: Vec::new(),
            })
            .collect();
        let beat = Heartbeat {
            tasks,
            samples,
            wait_ms: WAIT_MS,
            instance: self.instance.clone(),
            layouts: Vec::new(),
            usage: Vec::new(),
        };
        serde_json::to_string(&beat).expect("json")
    }

    /// One heartbeat: sent, then its answer — unless a task ends first, which is reported at
    /// once on another connection (the held answer is dropped, its orders come again).
    async fn beat(&mut self) {
        let Some(mut sender) = self.connection().await else {
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        };
        let reports_exit = self.tasks.values().any(|t| t.state != TaskState::Running);
        let next_end = self.tasks.values().filter(|t| t.state == TaskState::Running).map(|t| t.ends_at).min();
        let measuring = self.shared.measuring.load(Ordering::Relaxed);
        let path = format!("/v1/agents/{}/heartbeat", self.id.node);
        let token = self.id.token.clone();
        let body = self.heartbeat();
        let sent = Instant::now();
        let idle = self.idle.clone();
        let mut call = tokio::spawn(async move {
            let answer = post(&mut sender, &path, &token, body).await;
            idle.lock().expect("idle").push(sender);
            answer
        });
        let never = Instant::now() + Duration::from_secs(3_600);
        let answer = tokio::select! {
            answer = &mut call => answer.expect("the call"),
            _ = tokio::time::sleep_until(next_end.unwrap_or(never).into()) => {
                self.end_due_tasks();
                return;
            }
            _ = self.shared.stopped.notified() => return,
        };
        let took_ms = sent.elapsed().as_secs_f64() * 1e3;
        match answer {
            Ok((200, text)) => {
                let orders: Orders = serde_json::from_str(&text).expect("orders");
                if measuring {
                    self.shared.heartbeats.fetch_add(1, Ordering::Relaxed);
                    if reports_exit {
                        self.stats.exit_rtt_ms.push(took_ms);
                    } else if orders.is_empty() {
                        self.stats.held_late_ms.push((took_ms - WAIT_MS as f64).max(0.0));
                    }
                }
                self.apply(orders);
            }
            Ok((409, _)) => {
                self.register().await;
            }
            Ok((status, text)) => {
                eprintln!("{}: heartbeat answered {status}: {text}", self.id.node);
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn end_due_tasks(&mut self) {
        let now = Instant::now();
        for t in self.tasks.values_mut() {
            if t.state == TaskState::Running && t.ends_at <= now {
                t.state = TaskState::Exited { code: Some(0), timed_out: false, oom: false };
            }
        }
    }

    fn apply(&mut self, orders: Orders) {
        for key in orders.forget {
            self.tasks.remove(&key);
        }
        for stop in orders.stop {
            for (key, t) in self.tasks.iter_mut() {
                if key.job == stop.job && key.attempt == stop.attempt && t.state == TaskState::Running {
                    t.state = TaskState::Exited { code: None, timed_out: false, oom: false };
                }
            }
        }
        for launch in orders.launch {
            self.launch(launch);
        }
    }

    fn launch(&mut self, launch: Launch) {
        let key = launch.key();
        if self.tasks.contains_key(&key) {
            return;
        }
        self.stats.launches.push((launch.job_name.clone(), Instant::now()));
        let gpus = self.id.gpus.iter().filter(|g| launch.devices.contains(&g.uuid)).map(|g| g.index).collect();
        let task = Task { state: TaskState::Running, ends_at: Instant::now() + self.shared.task, gpus };
        self.tasks.insert(key, task);
    }
}

/// POST a JSON body with the agent's token: the answer's status and body.
async fn post(sender: &mut Sender, path: &str, token: &str, body: String) -> Result<(u16, String), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
