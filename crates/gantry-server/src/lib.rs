//! The controller (`gantry serve`): the REST API, the scheduling loop over the engine's
//! `Scheduler`, the store, and the node agents — remote (`gantry agent`) or, with `--local`,
//! one per node in this process ([`local_agents`]) — that register their nodes and heartbeat
//! ([`wire`]). What `gantry serve` tells the operator is built in [`banner`]; `--demo`'s
//! workload and its submission are in [`demo`].
//!
//! The key decision: the controller is a state machine ([`control::Controller::apply`]: time and a command in,
//! effects out) behind one lock; this module is its edge. Every API call that changes
//! something and every tick of the loop becomes a [`control::Command`] applied under the lock
//! with the wall clock's time; its effects' batch goes to the group committer ([`commit`]),
//! and only once that is durable are launches, stops and the reply carried out. The loop
//! wakes on a submit, a cancel, a task's exit, or a tick. Views ([`views`]) read the state
//! under the same lock.

pub mod admission;
pub mod agent_service;
pub mod api;
pub mod auth;
pub mod banner;
pub mod clock;
pub mod commit;
pub mod control;
pub mod demo;
pub mod error;
pub mod idle;
pub mod json_errors;
pub mod live_sim;
pub mod local_agents;
pub mod meter;
pub mod metrics;
pub mod output;
pub mod rate;
pub mod replay;
pub mod retention;
pub mod series;
pub mod settings;
pub mod signals;
pub mod standby;
pub mod supervise;
pub mod task_logs;
pub mod tls;
pub mod ui;
pub mod users;
pub mod views;

use control::{Command, Controller, Effects, Reply};
use error::{ControlError, ServeError};
pub use gantry_agent::runner;
use gantry_catalog::Catalog;
use gantry_store::{PostgresStore, SqliteStore, Store};
use gantry_types::Fleet;
pub use gantry_wire as wire;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

/// Seconds since the Unix epoch: the controller's clock (the engine only ever gets it as an
/// argument).
pub fn now_s() -> u64 {
    clock::now_s()
}

/// Open files the controller needs beside its agents' connections (the store, logs, the
/// CLI's and the UI's connections).
pub const OPEN_FILES_BESIDE_AGENTS: u64 = 256;

/// Raise this process's soft limit on open files to its hard limit: every remote agent keeps
/// a connection open (two while a held heartbeat is given up for a task's exit), and the
/// common default soft limit, 1,024, would refuse connections from about the 500th node on.
/// Returns the limit now in force.
pub fn raise_open_files() -> Result<u64, ServeError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| ServeError::Io(format!("reading the open-file limit: {e}")))?;
    if soft >= hard {
        return Ok(soft);
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(|e| ServeError::Io(format!("raising the open-file limit to {hard}: {e}")))?;
    Ok(hard)
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Holds `gantry.db` and `jobs/<id>/` (task logs).
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub fleet: Fleet,
    /// How often a cycle runs with nothing else happening.
    pub tick: Duration,
    /// Queue order, backfill, preemption (the engine's scheduler settings).
    pub scheduling: gantry_engine::sched::SchedulerConfig,
    /// Simulate tasks instead of running processes: each lasts this long (benchmarks).
    pub simulate_tasks: Option<Duration>,
    /// `Local`: one agent per fleet node runs in this process (`serve --local`); `Remote`:
    /// each node's agent connects over the network (`gantry agent`).
    pub agents: control::Agents,
    /// The fleet is this machine's GPUs as NVML found them: the in-process agents measure
    /// their utilization (else it is simulated).
    pub measure_local_gpus: bool,
    /// Prices and weights for chargeback (`GET /v1/usage`).
    pub billing: meter::Billing,
    /// When a job counts as idle, and what each queue does about it.
    pub idle: idle::IdlePolicy,
    /// Commit what queued during a commit together (the default); `false`: one transaction
    /// per command (the baseline the load benchmark measures against).
    pub group_commit: bool,
    /// What one request, user and queue may put in.
    pub admission: admission::AdmissionLimits,
    /// HTTPS (`None`: plain HTTP, only on loopback unless `insecure_http`).
    pub tls: Option<tls::TlsSetup>,
    /// Allow plain HTTP on an address other than loopback (`serve --insecure-http`).
    pub insecure_http: bool,
    /// Which Unix account runs each user's tasks (single-user when not root).
    pub accounts: users::Accounts,
    /// Where the state lives: SQLite in the data directory (the default), or PostgreSQL.
    pub store: StoreChoice,
    /// Whether the controller reconfigures GPUs itself, and its guards (`[reconfigure]`).
    pub reconfigure: control::reconfig::ReconfigurePolicy,
    /// How the in-process agents of `--local` confine their tasks.
    pub confinement: local_agents::LocalConfinement,
    /// Checkpoints and how much command log is kept (`[log]`).
    pub log: retention::LogRetention,
    /// The URL clients reach this controller by, which standbys name to clients while it
    /// leads (`serve --advertise`; `None`: the scheme and the address it listens on, the
    /// host name for an unspecified address).
    pub advertise: Option<String>,
}

/// The store a controller runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreChoice {
    /// `gantry.db` in the data directory: one controller.
    #[default]
    Sqlite,
    /// A PostgreSQL database (`postgres://…`): one leading controller at a time, holding the
    /// store's leader lock; `standby`: wait for the lock (take over when the leader's
    /// connection ends) instead of refusing to start while another leads.
    Postgres { url: String, standby: bool },
}

/// A boxed store of either kind.
pub type AnyStore = Box<dyn Store + Send>;

/// One wake-up per node, for the heartbeats its agent holds in a long poll: a start on one
/// node wakes that node's agent, not every agent of the fleet.
#[derive(Debug, Default)]
pub struct AgentWakes {
    nodes: Mutex<std::collections::BTreeMap<String, Arc<Notify>>>,
}

impl AgentWakes {
    pub fn of(&self, node: &str) -> Arc<Notify> {
        self.nodes.lock().expect("not poisoned").entry(node.to_string()).or_default().clone()
    }

    /// Wake every held heartbeat (the controller steps down: each is answered now, as a
    /// standby would, and the agent goes on to the leader).
    pub fn wake_all(&self) {
        for wake in self.nodes.lock().expect("not poisoned").values() {
            wake.notify_waiters();
        }
    }
}

/// What the API handlers share.
#[derive(Clone, Debug)]
pub struct Shared {
    pub controller: Arc<Mutex<Controller>>,
    /// The store's writer (group commit).
    pub committer: commit::Committer,
    /// A second connection to the store, for what the controller does not keep in memory
    /// (the usage ledger).
    pub reader: Arc<Mutex<AnyStore>>,
    /// The agents run in this process (`serve --local`): task logs are on this machine, under
    /// each node's directory (`task_logs::node_dir`).
    pub local: bool,
    /// Wakes the scheduling loop.
    pub wake: Arc<Notify>,
    /// Wakes remote agents' held heartbeats: there are new orders.
    pub agents_wake: Arc<AgentWakes>,
    /// Reads of task output waiting for remote agents.
    pub output: Arc<output::OutputReads>,
    /// Users' signals waiting for remote agents.
    pub signals: Arc<signals::SignalQueue>,
    /// How fast each node's agent may heartbeat.
    pub heartbeat_rates: Arc<rate::NodeRates>,
    /// How fast each token may ask for start estimates (each runs a cycle on a copy of the
    /// scheduler), at the heartbeats' pace.
    pub estimate_rates: Arc<rate::NodeRates>,
    pub data_dir: PathBuf,
    /// What one request, user and queue may put in (`[admission]`).
    pub admission: admission::AdmissionLimits,
    /// Checkpoints and how much command log is kept (`[log]`).
    pub log: retention::LogRetention,
    /// With PostgreSQL: whether this controller still holds its lease. Past it (a leader paused
    /// and woken, not yet told it was replaced) it answers nothing from its memory.
    pub lease: Option<gantry_store::LeaseWatch>,
    /// Whether remote agents must present a client certificate for their node.
    pub agent_certs: tls::AgentCerts,
    /// Set once the store has failed (a deposed leader's writes fenced, a lost connection):
    /// the controller can do nothing more and its process should stop.
    pub fatal: Arc<tokio::sync::watch::Sender<Option<String>>>,
    /// The API's requests and answer times, for `/metrics`.
    pub http: Arc<metrics::http::HttpStats>,
    /// The dashboard's logged-in sessions.
    pub ui_sessions: Arc<ui::session::Sessions>,
}

impl Shared {
    /// The store failed or the lease is lost: from now on every answer is a standby's
    /// (`standby::lease_guard`), held heartbeats are answered at once, and the caller of
    /// [`Running::store_failed`] learns why.
    pub fn step_down(&self, why: String) {
        self.fatal.send_replace(Some(why));
        self.agents_wake.wake_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Controller> {
        self.controller.lock().expect("not poisoned")
    }

    /// Apply `command` now, wait until its changes are durable, carry out its effects, and
    /// return its reply.
    pub async fn execute(&self, command: Command) -> Result<Reply, ControlError> {
        self.execute_all(vec![command]).await.pop().unwrap_or(Ok(Reply::Done))
    }

    /// Apply `commands` in order under one lock, then wait for all their commits (one group)
    /// and carry out each one's effects in order.
    pub async fn execute_all(&self, commands: Vec<Command>) -> Vec<Result<Reply, ControlError>> {
        self.execute_all_timed(commands).await.0
    }

    /// [`Shared::execute_all`], and how long applying took (under the lock: CPU, not the wait
    /// for the commit).
    async fn execute_all_timed(&self, commands: Vec<Command>) -> (Vec<Result<Reply, ControlError>>, Duration) {
        let mut applied = Vec::with_capacity(commands.len());
        let locked = std::time::Instant::now();
        {
            let mut c = self.lock();
            for command in commands {
                if let Some(why) = self.committer.failed() {
                    applied.push(Err(ControlError::StoreFailed(why)));
                    continue;
                }
                if let Some(why) = self.committer.stalled() {
                    // Applied now, it would wait behind the stalled commit with its effects;
                    // refused, nothing changes and the caller may try again.
                    applied.push(Err(ControlError::StoreFull(why)));
                    continue;
                }
                let is_tick = matches!(command, Command::Tick { .. });
                let started = std::time::Instant::now();
                let result = c.apply(now_s(), command);
                if is_tick {
                    c.observe_cycle(started.elapsed());
                }
                applied.push(result.map(|mut effects| {
                    let durable = self.committer.submit(std::mem::take(&mut effects.commit));
                    (effects, durable)
                }));
            }
        }
        let took = locked.elapsed();
        let mut replies = Vec::with_capacity(applied.len());
        for result in applied {
            replies.push(match result {
                Ok((effects, durable)) => match commit::Committer::durable(durable).await {
                    Ok(()) => {
                        self.carry_out(&effects);
                        Ok(effects.reply)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            });
        }
        (replies, took)
    }

    /// Read the state, then wait until every change applied before the read is durable (what
    /// is answered was committed: an agent never gets a launch whose start could be lost).
    pub async fn read_durable<T>(&self, read: impl FnOnce(&Controller) -> T) -> Result<T, ControlError> {
        let (value, barrier) = {
            let c = self.lock();
            (read(&c), self.committer.submit(gantry_store::Batch::default()))
        };
        commit::Committer::durable(barrier).await?;
        Ok(value)
    }

    /// Read the state (views: nothing changes).
    pub fn read<T>(&self, read: impl FnOnce(&Controller) -> T) -> T {
        read(&self.lock())
    }

    /// Wake-ups to the agents with new orders and to the loop. (Launches and stops reach the
    /// agents in their heartbeats' answers; `Effects::launch` and `stop` are for a caller that
    /// runs tasks itself, as `gantry sim --live` does.)
    fn carry_out(&self, effects: &Effects) {
        for node in &effects.wake {
            self.agents_wake.of(node).notify_waiters();
        }
        if effects.schedule {
            self.wake.notify_one();
        }
    }
}

/// A started controller: where it listens, and how to stop it.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    /// Where the first admin token was written, if this start created it.
    pub admin_token_file: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
    committer: commit::Committer,
    agents: local_agents::Agents,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    scheduler: tokio::task::JoinHandle<()>,
    /// The leader term this controller holds on a PostgreSQL store (0 with SQLite).
    pub term: u64,
    fatal: tokio::sync::watch::Receiver<Option<String>>,
}

impl Running {
    /// How the in-process agents confine their tasks (empty with remote agents): each
    /// distinct confinement once, with the nodes that have it.
    pub fn confinement(&self) -> Vec<(wire::Confinement, Vec<String>)> {
        let mut out: Vec<(wire::Confinement, Vec<String>)> = Vec::new();
        for (node, c) in &self.agents.confinement {
            match out
                .iter_mut()
                .find(|(have, _)| have.kind == c.kind && have.controllers == c.controllers && have.missing == c.missing)
            {
                Some((_, nodes)) => nodes.push(node.clone()),
                None => out.push((c.clone(), vec![node.clone()])),
            }
        }
        out
    }

    /// Transactions committed so far, and the commands' batches they held.
    pub fn commit_stats(&self) -> (u64, u64) {
        let stats = self.committer.stats();
        (stats.commits, stats.batches)
    }

    /// Resolves when the store has failed for good (why): the caller should stop serving.
    pub async fn store_failed(&mut self) -> String {
        match self.fatal.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            // The loop is gone: never, as far as this caller is concerned.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stop accepting requests, finish those in flight, stop the loop. Running tasks keep
    /// running (they are in their own process groups); the next start re-adopts them.
    pub async fn shutdown(mut self) {
        std::mem::take(&mut self.agents).stop().await;
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.server.await;
        self.scheduler.abort();
        self.committer.close();
    }
}

/// In-process agents heartbeat at least every 5 s; silent this long, they are gone.
const LOCAL_HEARTBEAT_TIMEOUT_S: u64 = 30;

/// Open the store, recover, make the first admin token if there is none: the controller,
/// with everything recovery changed committed.
fn open_controller(
    config: &ServeConfig,
    mut store: AnyStore,
) -> Result<(Controller, AnyStore, Option<PathBuf>), ServeError> {
    let week_ago = now_s().saturating_sub(series::COARSE_POINTS as u64 * series::COARSE_STEP_S);
    let image = control::Image::read(store.as_ref(), week_ago)?;
    // Time goes on from the last the store recorded, even if the wall clock went back.
    let recorded = image
        .jobs
        .iter()
        .flat_map(|j| [Some(j.submitted_at_s), j.started_at_s, j.ended_at_s])
        .chain(image.tokens.iter().map(|t| Some(t.created_at_s)))
        .flatten()
        .max();
    clock::not_before(recorded.unwrap_or(0));
    let now = now_s();
    // In-process agents are agents like any other: the controller waits for them to register
    // and to heartbeat, and takes their word for what runs after a restart.
    let agents = control::Agents::Remote {
        heartbeat_timeout_s: LOCAL_HEARTBEAT_TIMEOUT_S,
        node_lost_after_s: control::NODE_LOST_AFTER_DEFAULT_S,
    };
    let agents = if config.agents == control::Agents::Local { agents } else { config.agents };
    let mut setup = control::Setup::new(config.fleet.clone(), &config.scheduling, agents, config.idle.clone());
    setup.admission = config.admission.clone();
    setup.accounts = config.accounts.clone();
    setup.reconfigure = config.reconfigure.clone();
    setup.step_secret = Some(auth::new_secret()?);
    let (mut controller, recovered) = Controller::open(setup, image, Catalog::embedded(), &Default::default(), now)?;
    controller.set_billing(config.billing.clone());
    let mut batches = vec![recovered];
    let mut admin_token_file = None;
    let mut secret = None;
    if controller.has_no_tokens() {
        let new = auth::new_secret()?;
        let command = Command::CreateToken {
            who: auth::Principal::controller(),
            name: "admin".into(),
            role: gantry_store::Role::Admin,
            queues: Vec::new(),
            hash: auth::hash(&new),
            node: None,
            lifetime_s: None,
        };
        batches.push(controller.apply(now, command)?.commit);
        secret = Some(new);
    }
    store.commit(&batches)?;
    if let Some(secret) = secret {
        let path = config.data_dir.join("admin.token");
        // A stale file from an earlier store would not match any token: replace it.
        let _ = std::fs::remove_file(&path);
        auth::write_secret_file(&path, &secret)?;
        admin_token_file = Some(path);
    }
    Ok((controller, store, admin_token_file))
}

/// The store and its WAL readable by this user only (SQLite gives the WAL and shared-memory
/// files it creates later the database file's mode).
fn private_store_files(dir: &std::path::Path) -> Result<(), ServeError> {
    use std::os::unix::fs::PermissionsExt;
    for name in ["gantry.db", "gantry.db-wal", "gantry.db-shm"] {
        let path = dir.join(name);
        if path.exists() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| ServeError::Io(format!("cannot make {} private: {e}", path.display())))?;
        }
    }
    Ok(())
}

/// Open the writer and a reader of the chosen store; with PostgreSQL, lead it first (wait for
/// the leader lock as a standby, or refuse while another leads): the term it leads with.
/// The writer, a reader, the term led and (with PostgreSQL) the lease's watch.
type OpenedStore = (AnyStore, AnyStore, u64, Option<gantry_store::LeaseWatch>);

fn open_store(
    choice: &StoreChoice,
    data_dir: &std::path::Path,
    advertised: &str,
    seen: &gantry_store::LeaderHint,
) -> Result<OpenedStore, ServeError> {
    match choice {
        StoreChoice::Sqlite => {
            let path = data_dir.join("gantry.db");
            Ok((Box::new(SqliteStore::open(&path)?), Box::new(SqliteStore::open(&path)?), 0, None))
        }
        StoreChoice::Postgres { url, standby: false } => Ok(lead_postgres(url, Some(LEAD_WAIT), advertised, seen)?),
        // A standby waits for the lock, and for the store itself while it cannot be reached
        // (PostgreSQL restarting, the network cut): it never gives up by itself.
        StoreChoice::Postgres { url, standby: true } => {
            let mut tries = 0u64;
            loop {
                match lead_postgres(url, None, advertised, seen) {
                    Err(gantry_store::StoreError::Unreachable(why)) => {
                        if tries.is_multiple_of(STORE_RETRY_LOG_EVERY) {
                            tracing::warn!(error = %why, "standby: the store cannot be reached; trying again every second");
                        }
                        tries += 1;
                        std::thread::sleep(STORE_RETRY);
                    }
                    led => return Ok(led?),
                }
            }
        }
    }
}

/// How often a standby tries a store it cannot reach, and how many tries between two warnings.
const STORE_RETRY: Duration = Duration::from_secs(1);
const STORE_RETRY_LOG_EVERY: u64 = 30;

/// Connect to PostgreSQL and lead it (waiting `wait` for the lock; `None`: until it is free).
fn lead_postgres(
    url: &str,
    wait: Option<Duration>,
    advertised: &str,
    seen: &gantry_store::LeaderHint,
) -> Result<OpenedStore, gantry_store::StoreError> {
    let mut store = PostgresStore::open(url)?.advertising(advertised, seen.clone());
    let holder = format!("{}:{}", hostname(), std::process::id());
    if wait.is_none() {
        tracing::info!(store = %store.url(), "standby: waiting to lead the store");
    }
    let term = store.lead(&holder, now_s(), wait)?;
    tracing::info!(store = %store.url(), term, "leading the store");
    let reader = PostgresStore::open(url)?;
    let lease = store.lease_watch();
    Ok((Box::new(store), Box::new(reader), term, Some(lease)))
}

/// Where clients reach a controller listening on `addr`: its address, or this machine's host
/// name when it listens on every address.
fn advertised_url(https: bool, addr: SocketAddr) -> String {
    let scheme = if https { "https" } else { "http" };
    if addr.ip().is_unspecified() {
        format!("{scheme}://{}:{}", hostname(), addr.port())
    } else {
        format!("{scheme}://{addr}")
    }
}

/// How long a controller that is not a standby waits for a leader lock another holds (a
/// leader that just stopped lets go at once; one that runs does not).
const LEAD_WAIT: Duration = Duration::from_secs(2);

/// This machine's name: the node name of a discovered fleet, the default agent's node, the
/// leader's holder name and advertised host ("localhost" when the kernel has none).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Open the store, recover, bind and start serving.
pub async fn start(config: ServeConfig) -> Result<Running, ServeError> {
    let config = checked(config)?;
    let tls_config = config.tls.as_ref().map(tls::server_config).transpose()?;
    // Bound first: a standby answers there (503, "standby") while it waits to lead.
    let socket = std::net::TcpListener::bind(config.listen)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| ServeError::Config(format!("cannot listen on {}: {e}", config.listen)))?;
    let addr = socket.local_addr().map_err(|e| ServeError::Io(e.to_string()))?;
    let (store, reader, term, lease) = open_leading(&config, &socket, addr, &tls_config).await?;
    let (controller, store, admin_token_file) = open_controller(&config, store)?;
    private_store_files(&config.data_dir)?;
    let shared = shared_state(&config, controller, store, reader, lease);
    let fatal = shared.fatal.subscribe();
    let listener = tokio_listener(&socket)?;
    drop(socket);

    let scheduler = tokio::spawn(scheduling_loop(shared.clone(), config.tick, config.log.clone()));
    let agents = if shared.local {
        local_agents::start(
            &shared,
            &config.fleet,
            config.simulate_tasks,
            config.measure_local_gpus,
            config.confinement,
        )
    } else {
        local_agents::Agents::default()
    };
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let committer = shared.committer.clone();
    let app = api::router(shared);
    let server = tokio::spawn(tls::serve_either(listener, tls_config, app, shutdown_rx));
    Ok(Running {
        addr,
        admin_token_file,
        shutdown: Some(shutdown_tx),
        committer,
        agents,
        server,
        scheduler,
        term,
        fatal,
    })
}

/// The configuration checked, its data directory made (private) and absolute: tasks run in
/// their own working directories and write their pid and exit files by these paths.
fn checked(mut config: ServeConfig) -> Result<ServeConfig, ServeError> {
    gantry_agent::runner::private_dir(&config.data_dir)
        .map_err(|e| ServeError::Io(format!("cannot create data directory {}: {e}", config.data_dir.display())))?;
    config.data_dir = std::fs::canonicalize(&config.data_dir)
        .map_err(|e| ServeError::Io(format!("data directory {}: {e}", config.data_dir.display())))?;
    config.billing.check()?;
    config.idle.check()?;
    config.admission.check()?;
    config.log.check()?;
    if config.tls.is_none() && !config.insecure_http && !config.listen.ip().is_loopback() {
        return Err(ServeError::Config(format!(
            "plain HTTP on {} would send tokens and jobs in the clear: serve HTTPS there, or pass --insecure-http on a network you trust",
            config.listen
        )));
    }
    Ok(config)
}

fn tokio_listener(socket: &std::net::TcpListener) -> Result<tokio::net::TcpListener, ServeError> {
    socket.try_clone().and_then(tokio::net::TcpListener::from_std).map_err(|e| ServeError::Io(e.to_string()))
}

/// The store opened, and led: a standby answers on `socket` (503, "standby") until it leads.
async fn open_leading(
    config: &ServeConfig,
    socket: &std::net::TcpListener,
    addr: SocketAddr,
    tls_config: &Option<Arc<rustls::ServerConfig>>,
) -> Result<OpenedStore, ServeError> {
    let seen = gantry_store::LeaderHint::default();
    let responder = match &config.store {
        StoreChoice::Postgres { standby: true, .. } => {
            Some(standby::Responder::start(tokio_listener(socket)?, tls_config.clone(), seen.clone()))
        }
        _ => None,
    };
    let choice = config.store.clone();
    let data_dir = config.data_dir.clone();
    let advertised = config.advertise.clone().unwrap_or_else(|| advertised_url(config.tls.is_some(), addr));
    let opened = tokio::task::spawn_blocking(move || open_store(&choice, &data_dir, &advertised, &seen)).await;
    if let Some(responder) = responder {
        responder.stop().await;
    }
    opened.map_err(|e| ServeError::Io(format!("opening the store: {e}")))?
}

/// What the service's handlers and loops share.
fn shared_state(
    config: &ServeConfig,
    controller: Controller,
    store: AnyStore,
    reader: AnyStore,
    lease: Option<gantry_store::LeaseWatch>,
) -> Shared {
    Shared {
        controller: Arc::new(Mutex::new(controller)),
        committer: commit::Committer::start(store, config.group_commit),
        reader: Arc::new(Mutex::new(reader)),
        local: config.agents == control::Agents::Local,
        wake: Arc::new(Notify::new()),
        agents_wake: Arc::new(AgentWakes::default()),
        output: Arc::new(output::OutputReads::default()),
        signals: Arc::new(signals::SignalQueue::default()),
        heartbeat_rates: Arc::new(rate::NodeRates::default()),
        estimate_rates: Arc::default(),
        data_dir: config.data_dir.clone(),
        admission: config.admission.clone(),
        log: config.log.clone(),
        lease,
        agent_certs: config.tls.as_ref().map(|t| t.agent_certs).unwrap_or_default(),
        fatal: Arc::new(tokio::sync::watch::channel(None).0),
        http: Arc::default(),
        ui_sessions: Arc::default(),
    }
}

/// Longest pause the loop takes between two cycles under load (see [`scheduling_loop`]): bounds
/// what a slow cycle adds to submit → running.
pub const CYCLE_PAUSE_MAX: Duration = Duration::from_millis(25);

/// The loop: wakes on a wake-up or the tick and applies a tick (a scheduling cycle). Under a
/// flood of submissions each wakes the loop, and a cycle per submission would spend the
/// controller on cycles (each walks the waiting queue) and hold the lock the submissions need:
/// so after each cycle the loop pauses as long as it took (at most [`CYCLE_PAUSE_MAX`]) before
/// the next, and cycles take at most about half the time; an idle controller answers a
/// wake-up at once. (The pause is the time spent applying, under the lock; not the wait for
/// the commit, which is I/O.)
///
/// Checkpoints ([`retention`]) are taken from the same loop, after a cycle, when due.
async fn scheduling_loop(shared: Shared, tick: Duration, log: retention::LogRetention) {
    let mut next_allowed = tokio::time::Instant::now();
    let mut checkpoint = retention::Due::new(&log, now_s());
    loop {
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        tokio::time::sleep_until(next_allowed).await;
        // A leader that lost its lease for good (the store's connection ended, or another
        // controller took over) steps down: its caller may rejoin as a standby.
        if let Some(why) = shared.lease.as_ref().and_then(gantry_store::LeaseWatch::lost) {
            tracing::error!(error = %why, "this controller lost its lease to lead: stepping down");
            shared.step_down(why);
            return;
        }
        // Past its lease (paused, and just woken) a leader decides nothing: its view of the
        // nodes is as old as its pause, and another controller may lead by now.
        if shared.lease.as_ref().is_some_and(|l| !l.fresh()) {
            continue;
        }
        let mut commands = vec![Command::tick()];
        if checkpoint.is_due(now_s()) {
            commands.push(Command::Checkpoint { keep_log_s: log.keep_s });
        }
        let (results, took) = shared.execute_all_timed(commands).await;
        for result in results {
            match result {
                Ok(Reply::Checkpoint { taken, why }) => {
                    match &why {
                        None => tracing::info!("checkpoint taken"),
                        Some(why) => tracing::info!(why, "checkpoint postponed"),
                    }
                    checkpoint.after(taken, now_s());
                }
                // The committer said so once; the cycle resumes with the space.
                Err(ControlError::StoreFull(_)) => {}
                Err(ControlError::StoreFailed(why)) => {
                    tracing::error!(error = %why, "the store failed: this controller can do nothing more");
                    shared.step_down(why);
                    return;
                }
                Err(e) => tracing::error!(error = %e, "the scheduling cycle failed"),
                Ok(_) => {}
            }
        }
        next_allowed = tokio::time::Instant::now() + took.min(CYCLE_PAUSE_MAX);
    }
}
