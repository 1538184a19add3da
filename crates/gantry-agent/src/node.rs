//! The node agent (`gantry agent`, and one per node inside `serve --local`): it registers its
//! node (GPUs from NVML or an inventory file), then heartbeats in a loop through its [`Link`]
//! to the controller (HTTP, or in-process): each heartbeat reports every task it knows
//! (running, exited, lost) and a utilization sample, and the answer carries its orders
//! (launch, stop, forget; see `gantry_wire`). Tasks run through its [`Runner`].
//!
//! A task never runs twice: it is claimed on disk before it starts ([`crate::claims`]), and
//! a restarted agent reads its claims back. At start the agent finds how it can confine tasks
//! ([`crate::cgroup`]) and tells the controller in its registration; each heartbeat carries
//! what its runs have used.

use crate::claims::Claim;
use crate::runner::{Exit, Grant, Runner};
use gantry_wire::{
    AgentGpu, GpuSample, Heartbeat, JobShare, Launch, Orders, Register, Registered, TaskKey, TaskReport, TaskState,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

pub use crate::error::AgentError;

/// An answer to one message: the HTTP status and body, or why nothing came back.
pub type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(u16, String), String>> + Send>>;

/// How the agent reaches its controller: `POST path` with a JSON body, the answer's status and
/// body. Over HTTP ([`HttpLink`]) for `gantry agent`; in-process for `serve --local`, through
/// the same messages and the same handlers.
pub trait Link: Send + Sync + std::fmt::Debug {
    fn post(&self, path: String, body: String) -> Answer;
}

/// The controller over HTTPS (or plain HTTP on loopback), with an agent (or admin) token.
#[derive(Clone, Debug)]
pub struct HttpLink {
    /// The controller, its CA and this agent's client certificate.
    pub client: gantry_wire::client::Client,
    pub token: String,
}

impl Link for HttpLink {
    fn post(&self, path: String, body: String) -> Answer {
        let (client, token) = (self.client.clone(), self.token.clone());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || client.request(Some(&token), "POST", &path, Some(&body)))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        })
    }
}

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The controller.
    pub link: std::sync::Arc<dyn Link>,
    /// The fleet node this agent serves.
    pub node: String,
    pub gpus: Vec<AgentGpu>,
    /// Claims and task logs (`jobs/<id>/`).
    pub data_dir: PathBuf,
    /// How long the controller may hold a heartbeat with nothing to order (long poll).
    pub wait: Duration,
    /// Pause before trying again after the controller could not be reached.
    pub retry: Duration,
    /// Simulate tasks instead of running processes: each lasts this long (benchmarks).
    pub simulate: Option<Duration>,
    /// Sample the GPUs through NVML (else utilization is simulated): false for the agents of a
    /// simulated fleet run in-process.
    pub measure_gpus: bool,
    /// The MIG backend layout orders go through (`None`: only changes without MIG are made).
    pub mig: Option<crate::layouts::MigHandle>,
    /// How tasks are confined: found at start from this choice ([`confinement`]), unless the
    /// caller found it already (to say it in its banner).
    pub confine: crate::cgroup::Choice,
    pub confinement: Option<crate::cgroup::Confinement>,
    /// What a task that asked for no memory or CPU gets, and processes per task.
    pub defaults: crate::runner::Defaults,
    /// Where the GPUs' device numbers come from: the driver, or fake device nodes made in
    /// the data directory (a simulated node).
    pub devices: Devices,
}

/// Where a node's GPU device nodes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    /// `/dev/nvidia<minor>`, minors from NVML.
    Driver,
    /// Fake nodes in `<data>/dev/` (see [`crate::cgroup::devices`]).
    Fake,
}

/// A task the agent knows.
#[derive(Debug)]
struct Tracked {
    state: TaskState,
    stopping: bool,
    devices: Vec<String>,
    /// Its rank in its run (its files' and cgroup's name).
    rank: u32,
    /// Its log may hold job steps' records: a batch job's script task (or one recovered after
    /// a restart, whose command is not known).
    keeps_records: bool,
    /// Once it has exited: the job steps its log records.
    steps: Vec<gantry_types::StepRecord>,
}

/// The job steps an exited task's log records (`steps::records`): read from the end of its
/// stderr through the run directory's checked access; none if it has none or cannot be read.
fn step_records(data_dir: &std::path::Path, key: &TaskKey, rank: u32) -> Vec<gantry_types::StepRecord> {
    use crate::steps::records;
    let piece = crate::output::read_piece(
        data_dir,
        (key.job, key.attempt, rank),
        gantry_wire::LogStream::Err,
        None,
        records::RECORDS_BYTES_MAX,
    );
    piece.map(|p| records::parse(&String::from_utf8_lossy(&p.bytes))).unwrap_or_default()
}

/// Node names go into URL paths: keep them to what needs no escaping.
pub fn check_node_name(node: &str) -> Result<(), AgentError> {
    if node.is_empty()
        || node.len() > 253
        || !node.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(AgentError::Config(format!(
            "node name {node:?}: use letters, digits, '-', '_' and '.' (at most 253)"
        )));
    }
    Ok(())
}

/// The agent's state between heartbeats.
struct Agent {
    config: AgentConfig,
    /// This agent's lasting identity (`instance_id`).
    instance: String,
    runner: Runner,
    tasks: BTreeMap<TaskKey, Tracked>,
    /// Runs ordered to stop (job, attempt), so each order is carried out once.
    stopped: BTreeSet<(u64, u32)>,
    sampler: Option<crate::sample::Sampler>,
    layouts: crate::layouts::Layouts,
}

impl Agent {
    /// Read back the claims of an earlier run of this agent: re-adopt, or report; then kill
    /// what runs in cgroups no claim accounts for.
    fn recover(&mut self) -> Result<(), AgentError> {
        let mut keep = BTreeSet::new();
        for found in crate::claims::recover(&self.config.data_dir, &self.runner)? {
            let Claim { key, rank, devices, grant, .. } = found.claim;
            if found.state == TaskState::Running {
                keep.insert((key.job, key.attempt));
                self.runner.watch(key.clone(), rank, grant);
            }
            tracing::info!(job = key.job, task = %format!("{}/{}", key.group, key.replica), state = ?found.state, "task from before the restart");
            self.tasks.insert(
                key,
                Tracked { state: found.state, stopping: false, devices, rank, keeps_records: true, steps: Vec::new() },
            );
        }
        self.runner.sweep(&keep);
        Ok(())
    }

    fn exited(&mut self, exit: Exit) {
        let data_dir = self.config.data_dir.clone();
        if let Some(task) = self.tasks.get_mut(&exit.key) {
            task.state = exit.state();
            if task.keeps_records {
                task.steps = step_records(&data_dir, &exit.key, task.rank);
            }
        }
    }

    fn heartbeat(&self) -> Heartbeat {
        let tasks = self
            .tasks
            .iter()
            .map(|(key, t)| TaskReport {
                key: key.clone(),
                state: t.state,
                stopping: t.stopping && t.state == TaskState::Running,
                steps: t.steps.clone(),
            })
            .collect();
        Heartbeat {
            tasks,
            samples: self.samples(),
            wait_ms: self.config.wait.as_millis() as u64,
            instance: self.instance.clone(),
            layouts: self.layouts.reports(),
            usage: self.runner.usage().into_iter().take(gantry_wire::USAGE_REPORTS_MAX).collect(),
        }
    }

    /// NVML's numbers where there is a driver; else a busy GPU (a running task holds it)
    /// reports a steady simulated load, an idle one 0.
    fn samples(&self) -> Vec<GpuSample> {
        if let Some(sampler) = &self.sampler {
            let groups = self.task_groups();
            let cgroups = self.runner.confinement().cgroups().cloned();
            // A process belongs to a job by its cgroup where the node confines (whatever
            // session or group it made itself), else by its process group.
            let owner = |pid: u32| -> Option<u64> {
                match &cgroups {
                    Some(cg) => cg.job_of(pid),
                    None => {
                        let group = crate::sample::process_group(pid)?;
                        groups.iter().find(|(_, g)| *g == group).map(|(job, _)| *job)
                    }
                }
            };
            return sampler
                .sample()
                .into_iter()
                .map(|m| {
                    let shares = crate::sample::attribute(&m.processes, owner);
                    GpuSample {
                        index: m.index,
                        utilization_pct: m.utilization_pct,
                        memory_used_mib: m.memory_used_mib,
                        measured: true,
                        jobs: shares
                            .into_iter()
                            .map(|(job, utilization_pct)| JobShare { job, utilization_pct })
                            .collect(),
                    }
                })
                .collect();
        }
        self.config
            .gpus
            .iter()
            .map(|gpu| {
                let short = gpu.uuid.trim_start_matches("GPU-");
                let holder = self.tasks.iter().find(|(_, t)| {
                    t.state == TaskState::Running && t.devices.iter().any(|d| d == &gpu.uuid || d.contains(short))
                });
                GpuSample {
                    index: gpu.index,
                    utilization_pct: holder.map_or(0, |(k, _)| crate::sample::simulated_pct(k.job, gpu.index)),
                    memory_used_mib: 0,
                    measured: false,
                    jobs: Vec::new(),
                }
            })
            .collect()
    }

    /// (job, process group) of every running task, from the pid files their monitors wrote.
    fn task_groups(&self) -> Vec<(u64, i32)> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.state == TaskState::Running)
            .filter_map(|(key, t)| {
                let dir = crate::files::JobDir::open(&self.config.data_dir, key.job, key.attempt, false).ok()?;
                Some((key.job, dir.read_number(t.rank, crate::files::Kind::Pid)?))
            })
            .collect()
    }

    fn apply(&mut self, orders: Orders) {
        for key in orders.forget {
            if let Some(task) = self.tasks.remove(&key) {
                crate::claims::forget(&self.config.data_dir, &key, task.rank);
                if !self.tasks.keys().any(|k| k.job == key.job && k.attempt == key.attempt) {
                    self.runner.forget_usage(key.job, key.attempt);
                }
            }
        }
        for stop in &orders.stop {
            if !self.stopped.insert((stop.job, stop.attempt)) {
                continue;
            }
            tracing::info!(job = stop.job, attempt = stop.attempt, grace_s = stop.grace_s, "stopping");
            for (key, task) in self.tasks.iter_mut() {
                if key.job == stop.job && key.attempt == stop.attempt {
                    task.stopping = true;
                }
            }
            // Registered with the runner even before its tasks exist: a launch in this same
            // answer is stopped as soon as it starts.
            self.runner.stop(stop.job, stop.attempt, Duration::from_secs(stop.grace_s));
        }
        for launch in orders.launch {
            self.launch(launch);
        }
        for order in &orders.signals {
            let Ok(signal) = nix::sys::signal::Signal::try_from(order.signal) else { continue };
            if gantry_wire::USER_SIGNALS.iter().any(|(_, n)| *n == order.signal) {
                let sent = self.runner.user_signal(order.job, order.attempt, signal, order.all);
                tracing::info!(job = order.job, attempt = order.attempt, %signal, sent, "a user's signal");
            }
        }
        self.layouts.forget(&orders.forget_layouts);
        for order in &orders.layouts {
            let Some(position) = self.config.gpus.iter().position(|g| g.index == order.gpu) else {
                tracing::warn!(gpu = order.gpu, "a layout order for a GPU this node does not have: ignored");
                continue;
            };
            let busy = self.uses_gpu(&self.config.gpus[position]);
            self.layouts.apply(order, &mut self.config.gpus[position], busy);
        }
    }

    /// Does a running task of this agent hold `gpu` (the card, or one of its MIG instances)?
    fn uses_gpu(&self, gpu: &AgentGpu) -> bool {
        let short = gpu.uuid.trim_start_matches("GPU-");
        self.tasks
            .values()
            .any(|t| t.state == TaskState::Running && t.devices.iter().any(|d| d == &gpu.uuid || d.contains(short)))
    }

    fn launch(&mut self, launch: Launch) {
        let key = launch.key();
        if self.tasks.contains_key(&key) {
            return;
        }
        if launch.node != self.config.node {
            tracing::warn!(job = key.job, node = %launch.node, "a launch for another node: ignored");
            return;
        }
        let claim = Claim {
            key: key.clone(),
            rank: launch.rank,
            devices: launch.devices.clone(),
            grant: Grant::of(&launch),
            forgotten: false,
        };
        let rank = launch.rank;
        // The allocation's first slot runs the script; the others serve steps and record none.
        let keeps_records = rank == 0 && launch.command.iter().any(|w| w.contains(gantry_types::STEP_RECORDS_FLAG));
        match crate::claims::claim(&self.config.data_dir, &claim) {
            Ok(true) => {}
            Ok(false) => {
                // Claimed before (this agent restarted, or the task was forgotten): report it
                // as it stands rather than run it again.
                let state = self.runner.state_on_disk(key.job, key.attempt, rank);
                if state == TaskState::Running {
                    self.runner.watch(key.clone(), rank, claim.grant);
                }
                self.tasks.insert(
                    key,
                    Tracked { state, stopping: false, devices: launch.devices, rank, keeps_records, steps: Vec::new() },
                );
                return;
            }
            Err(e) => {
                tracing::error!(job = key.job, error = %e, "cannot claim the task");
                let state = TaskState::Exited { code: Some(126), timed_out: false, oom: false };
                self.tasks.insert(
                    key,
                    Tracked {
                        state,
                        stopping: false,
                        devices: Vec::new(),
                        rank,
                        keeps_records: false,
                        steps: Vec::new(),
                    },
                );
                return;
            }
        }
        let stopping = self.stopped.contains(&(key.job, key.attempt));
        tracing::info!(job = key.job, task = %format!("{}/{}", key.group, key.replica), attempt = key.attempt, "launching");
        self.tasks.insert(
            key,
            Tracked {
                state: TaskState::Running,
                stopping,
                devices: launch.devices.clone(),
                rank,
                keeps_records,
                steps: Vec::new(),
            },
        );
        self.runner.launch(launch);
    }
}

/// One message to the controller (the transport's failures are retried, never returned: a
/// message is enough).
async fn call(config: &AgentConfig, path: String, body: String) -> Result<(u16, String), String> {
    config.link.post(path, body).await
}

fn error_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(String::from))
        .unwrap_or_else(|| body.trim().to_string())
}

/// Register with the controller: `Err` for an answer that will not change by retrying
/// (wrong token, unknown node, GPUs that do not match the fleet file).
async fn register(
    config: &AgentConfig,
    instance: &str,
    confinement: &crate::cgroup::Confinement,
) -> Result<Option<Registered>, AgentError> {
    let reg = Register {
        node: config.node.clone(),
        gpus: config.gpus.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        protocol: gantry_wire::PROTOCOL_VERSION,
        instance: instance.to_string(),
        confinement: Some(confinement.report()),
    };
    let body = serde_json::to_string(&reg).map_err(|e| AgentError::Protocol(e.to_string()))?;
    match call(config, "/v1/agents/register".into(), body).await {
        Ok((200, text)) => {
            let registered: Registered =
                serde_json::from_str(&text).map_err(|e| AgentError::Protocol(format!("registration answer: {e}")))?;
            if registered.protocol < gantry_wire::PROTOCOL_VERSION {
                return Err(AgentError::Protocol(format!(
                    "the controller speaks protocol {}, this agent {}: upgrade the controller first",
                    registered.protocol,
                    gantry_wire::PROTOCOL_VERSION
                )));
            }
            Ok(Some(registered))
        }
        Ok((409, text)) => {
            // Another agent holds the node (or the controller runs its own): it may go away.
            tracing::warn!(error = %error_text(&text), "registration refused for now; trying again");
            tokio::time::sleep(config.retry).await;
            Ok(None)
        }
        Ok((status, text)) if (400..500).contains(&status) => {
            Err(AgentError::Refused { status, message: error_text(&text) })
        }
        Ok((status, text)) => {
            tracing::warn!(status, error = %error_text(&text), "registration failed; trying again");
            Ok(None)
        }
        Err(e) => {
            tracing::warn!(error = %e, "controller unreachable; trying again");
            Ok(None)
        }
    }
}

/// The agent's lasting identity: 128 random bits kept in `agent.id` (0600) in its data
/// directory, made on first start. A restarted agent (same directory) is the same agent to
/// the controller; another process for the same node is not.
pub fn instance_id(data_dir: &std::path::Path) -> Result<String, AgentError> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("agent.id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(id.to_string());
        }
    }
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| AgentError::Io(format!("cannot read /dev/urandom: {e}")))?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{id}"))
        .map_err(|e| AgentError::Io(format!("{}: {e}", path.display())))?;
    Ok(id)
}

/// Check the node's name, and make the data directory private (0700) and absolute: tasks'
/// monitors write their pid and exit files by paths under it. Idempotent.
pub fn prepare_data_dir(config: &mut AgentConfig) -> Result<(), AgentError> {
    check_node_name(&config.node)?;
    crate::runner::private_dir(&config.data_dir)
        .map_err(|e| AgentError::Config(format!("cannot create data directory {}: {e}", config.data_dir.display())))?;
    config.data_dir = std::fs::canonicalize(&config.data_dir)
        .map_err(|e| AgentError::Config(format!("data directory {}: {e}", config.data_dir.display())))?;
    Ok(())
}

/// How this agent will confine its tasks: the hierarchy [`crate::cgroup::detect`] finds for
/// `config.confine`, under the parent cgroup `gantry/<node>-<instance>`, with the node's GPU
/// device rules (a simulated node's fake device nodes made in `<data>/dev`). Call after
/// [`prepare_data_dir`].
pub fn confinement(config: &AgentConfig) -> Result<crate::cgroup::Confinement, AgentError> {
    use crate::cgroup::{Choice, Confinement, devices::DeviceRules};
    if config.simulate.is_some() {
        return Ok(Confinement::Unconfined("its tasks are simulated (no processes)".into()));
    }
    let instance = instance_id(&config.data_dir)?;
    let by_index = || config.gpus.iter().map(|g| (g.uuid.clone(), g.index)).collect();
    let rules = match config.devices {
        Devices::Driver => DeviceRules::driver(crate::mig_nvml::minor_numbers().unwrap_or_else(by_index)),
        Devices::Fake => {
            let gpus: Vec<(u32, String)> = config.gpus.iter().map(|g| (g.index, g.uuid.clone())).collect();
            let rules = DeviceRules::fake(&gpus);
            if config.confine != Choice::Off
                && nix::unistd::geteuid().is_root()
                && let Err(note) = crate::cgroup::devices::make_fake_nodes(&config.data_dir.join("dev"), &rules)
            {
                tracing::info!(node = %config.node, "{note}");
            }
            rules
        }
    };
    let parent = format!("gantry/{}-{}", config.node, &instance[..8.min(instance.len())]);
    Ok(crate::cgroup::detect(config.confine, &parent, rules))
}

/// The agent, before it recovers its tasks: its runner real or simulated (tasks sent to
/// `exits_tx` as they end), no task tracked yet.
fn new_agent(
    config: &AgentConfig,
    instance: &str,
    exits_tx: mpsc::Sender<Exit>,
    confinement: &crate::cgroup::Confinement,
) -> Agent {
    Agent {
        instance: instance.to_string(),
        runner: match config.simulate {
            Some(duration) => Runner::simulated(config.data_dir.clone(), exits_tx, duration),
            None => Runner::new(config.data_dir.clone(), exits_tx, confinement.clone(), config.defaults),
        },
        config: config.clone(),
        tasks: BTreeMap::new(),
        stopped: BTreeSet::new(),
        sampler: if config.measure_gpus { crate::sample::Sampler::open() } else { None },
        layouts: crate::layouts::Layouts::new(config.mig.clone()),
    }
}

/// The agent stops: its tasks keep running (the next start re-adopts them); an agent with
/// none leaves no empty cgroup behind.
fn shut_down(report: &crate::cgroup::Confinement) -> Result<(), AgentError> {
    if let Some(cg) = report.cgroups() {
        cg.remove_parent_if_empty();
    }
    Ok(())
}

/// Run the agent until `shutdown` fires (its tasks keep running: the next start re-adopts
/// them) or the controller refuses it for good.
pub async fn run(config: AgentConfig, mut shutdown: oneshot::Receiver<()>) -> Result<(), AgentError> {
    let mut config = config;
    prepare_data_dir(&mut config)?;
    let confinement = match config.confinement.clone() {
        Some(found) => found,
        None => confinement(&config)?,
    };
    tracing::info!(node = %config.node, confinement = %confinement.report(), "agent starting");
    let (exits_tx, mut exits) = mpsc::channel::<Exit>(1024);
    let instance = instance_id(&config.data_dir)?;
    let mut agent = new_agent(&config, &instance, exits_tx, &confinement);
    // Register with the GPUs as the hardware has them (a layout half-applied before a crash
    // included): the controller reconciles.
    agent.layouts.refresh(&mut agent.config.gpus);
    agent.recover()?;
    let path = format!("/v1/agents/{}/heartbeat", config.node);
    let mut registered = false;
    let mut unreachable = false;
    let report = agent.runner.confinement().clone();
    let stopped = || shut_down(&report);
    loop {
        if !registered {
            tokio::select! {
                _ = &mut shutdown => return stopped(),
                answer = register(&agent.config, &instance, &report) => match answer? {
                    Some(r) => {
                        tracing::info!(node = %r.node, heartbeat_timeout_s = r.heartbeat_timeout_s, tasks = agent.tasks.len(), "registered");
                        registered = true;
                        unreachable = false;
                    }
                    None => {
                        tokio::time::sleep(config.retry).await;
                        continue;
                    }
                },
            }
        }
        while let Ok(exit) = exits.try_recv() {
            agent.exited(exit);
        }
        let body = serde_json::to_string(&agent.heartbeat()).map_err(|e| AgentError::Protocol(e.to_string()))?;
        let answer = tokio::select! {
            _ = &mut shutdown => return stopped(),
            // A task ended while the heartbeat was held: report it now (the held answer is
            // dropped; its orders come again).
            exit = exits.recv() => {
                if let Some(exit) = exit {
                    agent.exited(exit);
                }
                continue;
            }
            answer = call(&config, path.clone(), body) => answer,
        };
        handle_answer(&mut agent, &config, answer, &mut registered, &mut unreachable).await?;
    }
}

/// Answer the controller's reads of this node's task output, one message each (a read not
/// answered comes again with the next orders, until the reader gives up).
async fn answer_reads(config: &AgentConfig, reads: Vec<gantry_wire::LogRead>) {
    let path = format!("/v1/agents/{}/logs", config.node);
    for read in reads.into_iter().take(gantry_wire::LOG_READS_MAX) {
        let data_dir = config.data_dir.clone();
        let chunk = tokio::task::spawn_blocking(move || crate::output::answer(&data_dir, &read)).await;
        let Ok(chunk) = chunk else { continue };
        let Ok(body) = serde_json::to_string(&chunk) else { continue };
        match call(config, path.clone(), body).await {
            Ok((200, _)) => {}
            Ok((status, text)) => {
                tracing::warn!(status, error = %error_text(&text), "an output read's answer was refused")
            }
            Err(e) => tracing::warn!(error = %e, "an output read's answer did not reach the controller"),
        }
    }
}

/// What to do with a heartbeat's answer: carry out its orders, register again (the controller
/// restarted), stop for good (refused), or wait and try again.
async fn handle_answer(
    agent: &mut Agent,
    config: &AgentConfig,
    answer: Result<(u16, String), String>,
    registered: &mut bool,
    unreachable: &mut bool,
) -> Result<(), AgentError> {
    match answer {
        Ok((200, text)) => {
            *unreachable = false;
            match serde_json::from_str::<Orders>(&text) {
                Ok(mut orders) => {
                    let reads = std::mem::take(&mut orders.log_reads);
                    agent.apply(orders);
                    answer_reads(config, reads).await;
                }
                Err(e) => tracing::error!(error = %e, "unreadable orders"),
            }
        }
        Ok((409, _)) => {
            // The controller restarted (it forgets agents): register again.
            *registered = false;
        }
        Ok((status @ (401 | 403), text)) => {
            return Err(AgentError::Refused { status, message: error_text(&text) });
        }
        Ok((status, text)) => {
            tracing::warn!(status, error = %error_text(&text), "heartbeat refused; trying again");
            tokio::time::sleep(config.retry).await;
        }
        Err(e) => {
            if !*unreachable {
                tracing::warn!(error = %e, "controller unreachable; tasks keep running, trying again");
                *unreachable = true;
            }
            *registered = false;
            tokio::time::sleep(config.retry).await;
        }
    }
    Ok(())
}
