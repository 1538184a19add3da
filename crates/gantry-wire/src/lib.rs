//! What the controller and a node agent say to each other over HTTP (JSON): the agent
//! registers its node, then heartbeats; each heartbeat reports every task the agent knows
//! and a utilization sample, and its answer carries the agent's orders (launch, stop,
//! forget). The key decision: everything is idempotent, so a lost or repeated message is
//! harmless:
//!
//! - a launch is repeated in every answer until the agent reports the task; the agent claims
//!   a task on disk before starting it, so a repeat never starts it twice;
//! - a task's exit is repeated in every heartbeat until the controller says `forget`; the
//!   controller counts each task's exit once;
//! - a stop is repeated while the agent still reports the task running;
//! - a layout order (protocol 2) is repeated until the agent reports its outcome; the agent
//!   applies each order once, and applying a layout the GPU already has changes nothing; the
//!   outcome is repeated until the controller says `forget_layouts`.

pub mod client;

use serde::{Deserialize, Serialize};

/// The protocol this build speaks. An agent says which it speaks when it registers; the
/// controller refuses one newer than its own (the agent was upgraded first: upgrade the
/// controller) and answers with its own, so an agent can refuse an older controller. Version
/// 1 is the protocol as first shipped; a change that an older peer would misread bumps it.
/// 2 added layout orders ([`LayoutOrder`], [`LayoutReport`]): the controller orders a GPU's
/// reconfiguration only from an agent that speaks 2 or later. 3 added confinement: what a
/// launch may use on its node ([`Launch::cpu_milli`], [`Launch::memory_bytes`]), how the node
/// confines ([`Register::confinement`]), what its runs used ([`Heartbeat::usage`]) and an exit
/// by the OOM killer; the controller sends a launch's limits only to an agent of 3 or later.
/// 4 added output reads: the controller asks the agent for part of a task's output
/// ([`Orders::log_reads`]) and the agent answers with a [`LogChunk`] each; only an agent of 4
/// or later is asked. 5 added job steps and arrays' numbers: a launch carries its run's step
/// key ([`Launch::step_key`]) and its array's id and span, sent only to an agent of 5 or later.
/// 6 added users' signals ([`Orders::signals`], `scancel --signal`), sent only to an agent of 6
/// or later.
pub const PROTOCOL_VERSION: u32 = 6;

/// The first protocol with layout orders.
pub const PROTOCOL_LAYOUTS: u32 = 2;

/// The first protocol with confinement (limits in launches, usage in heartbeats).
pub const PROTOCOL_CONFINEMENT: u32 = 3;

/// The first protocol whose agents serve their tasks' output on request.
pub const PROTOCOL_LOGS: u32 = 4;

/// The first protocol whose launches carry a step key.
pub const PROTOCOL_STEPS: u32 = 5;

/// The first protocol whose agents deliver users' signals.
pub const PROTOCOL_SIGNALS: u32 = 6;

fn protocol_one() -> u32 {
    1
}

/// One task of one run of a job: what a launch, a report and a forget name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskKey {
    pub job: u64,
    pub group: String,
    pub replica: u32,
    /// Which run of the job (0, then one more per requeue).
    pub attempt: u32,
}

/// One task to launch: which job, which task, what it gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub job: u64,
    pub job_name: String,
    pub group: String,
    pub replica: u32,
    pub rank: u32,
    pub world_size: u32,
    pub node: String,
    /// The gang's first task's node (`GANTRY_MASTER_ADDR` when it is not this one).
    #[serde(default)]
    pub master_node: String,
    /// GPU or MIG UUIDs (`CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
    /// For an MPS share: (active thread percentage, pinned memory limit in bytes).
    #[schema(value_type = Option<Vec<u64>>)]
    pub mps: Option<(u32, u64)>,
    pub command: Vec<String>,
    /// `[name, value]` pairs.
    #[schema(value_type = Vec<Vec<String>>)]
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub time_limit_s: Option<u64>,
    pub grace_s: u64,
    /// Which run of the job this is (0, then one more per requeue).
    pub attempt: u32,
    /// The Unix account the task runs as (the job's user, or what the controller's `[users]`
    /// maps it to). An agent running as root runs it as this account, or refuses when the
    /// node has none; an agent that is not root runs only its own account's tasks.
    #[serde(default)]
    pub account: String,
    /// The CPU this task was granted, millicores (protocol 3; 0: it asked for none). The
    /// node holds the job's run to the sum of its tasks' there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    /// The memory this task was granted, bytes (protocol 3; 0: it asked for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Where the whole run is: its nodes in rank order, each once, this task's place among
    /// them, among the tasks on its node, and the GPUs the run holds on its node — what a
    /// Slurm or `torch.distributed` program reads from its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<RunLayout>,
    /// Its index in its job array (`SLURM_ARRAY_TASK_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_index: Option<u32>,
    /// The secret every task of this run shares and no other process has (protocol 5): a
    /// batch job's `srun` and the step hosts on its other nodes prove with it that they
    /// belong to the run (`GANTRY_STEP_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    /// Its array's job id and the array's lowest index, highest index and element count
    /// (protocol 5: `SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_MIN`, `_MAX`, `_COUNT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_span: Option<[u32; 3]>,
    /// The job's partition, or its queue where the queue file defines no partitions
    /// (protocol 5: `SLURM_JOB_PARTITION`; empty from an older controller).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
}

/// Where a task sits in its run (see [`Launch::layout`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunLayout {
    /// The run's nodes in rank order, each once.
    pub nodes: Vec<String>,
    /// This task's node's place in `nodes`.
    pub node_index: u32,
    /// This task's place among the run's tasks on its node, and how many those are.
    pub local_rank: u32,
    pub local_tasks: u32,
    /// GPUs (or GPU units) the run holds on this task's node.
    pub gpus_on_node: u32,
}

impl Launch {
    pub fn key(&self) -> TaskKey {
        TaskKey { job: self.job, group: self.group.clone(), replica: self.replica, attempt: self.attempt }
    }
}

/// `POST /v1/agents/register`: the node an agent serves and the GPUs it found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Register {
    pub node: String,
    pub gpus: Vec<AgentGpu>,
    /// The agent's version (`gantry --version`), for the log.
    #[serde(default)]
    pub version: String,
    /// The protocol version the agent speaks ([`PROTOCOL_VERSION`]; 1 when absent).
    #[serde(default = "protocol_one")]
    pub protocol: u32,
    /// The agent process's lasting identity: random, kept in its data directory, so a
    /// restarted agent is known again and a second agent for a live node is not.
    #[serde(default)]
    pub instance: String,
    /// How the node confines its tasks (protocol 3; absent: an older agent, unconfined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<Confinement>,
}

/// How a node confines what it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ConfinementKind {
    /// A cgroup v1 hierarchy per controller.
    CgroupV1,
    /// The cgroup v2 tree.
    CgroupV2,
    /// No confinement: the agent is not root, cannot write a cgroup, or was told not to.
    Unconfined,
}

/// A node's confinement as its agent found it at start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Confinement {
    pub kind: ConfinementKind,
    /// What it applies (`memory`, `cpu`, `cpuacct`, `pids`, `devices`, `freezer`, `kill`).
    #[serde(default)]
    pub controllers: Vec<String>,
    /// Limits the node cannot apply (its hierarchy lacks the controller).
    #[serde(default)]
    pub missing: Vec<String>,
    /// Where its cgroups are; when unconfined, why.
    #[serde(default)]
    pub note: String,
}

/// The longest a confinement report's words may be (they are shown, never parsed).
pub const CONFINEMENT_TEXT_MAX: usize = 256;

impl Confinement {
    /// What an agent that does not say is: it runs tasks unconfined.
    pub fn unknown() -> Confinement {
        Confinement {
            kind: ConfinementKind::Unconfined,
            controllers: Vec::new(),
            missing: Vec::new(),
            note: "its agent is older than confinement (protocol 3)".into(),
        }
    }

    /// Cut to the shown lengths (an agent's words are bounded like any input).
    pub fn bounded(&self) -> Confinement {
        let cut = |s: &str| s.chars().take(CONFINEMENT_TEXT_MAX).collect::<String>();
        Confinement {
            kind: self.kind,
            controllers: self.controllers.iter().take(16).map(|c| cut(c)).collect(),
            missing: self.missing.iter().take(16).map(|c| cut(c)).collect(),
            note: cut(&self.note),
        }
    }

    pub fn is_confined(&self) -> bool {
        self.kind != ConfinementKind::Unconfined
    }
}

impl std::fmt::Display for Confinement {
    /// `cgroup v1 (memory, cpu, pids, devices, freezer)`, `cgroup v2 (devices, kill; not
    /// limited: memory, cpu, pids)`, `unconfined: the agent is not root, …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.kind {
            ConfinementKind::CgroupV1 => "cgroup v1",
            ConfinementKind::CgroupV2 => "cgroup v2",
            ConfinementKind::Unconfined => return write!(f, "unconfined: {}", self.note),
        };
        write!(f, "{name} ({}", self.controllers.join(", "))?;
        if !self.missing.is_empty() {
            write!(f, "; not limited: {}", self.missing.join(", "))?;
        }
        write!(f, ")")
    }
}

/// A GPU as the agent found it (NVML or its inventory file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentGpu {
    pub index: u32,
    pub uuid: String,
    /// Catalog model id.
    pub model: String,
    /// Whether the GPU is in MIG mode. The controller refuses a registration whose MIG modes
    /// or layouts differ from its own (tasks would be given instances that do not exist);
    /// absent: not checked (an agent that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
    /// In MIG mode: its GPU instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<AgentMigInstance>,
}

/// One MIG GPU instance an agent found: its profile and start (memory slice), and the
/// driver's id for it where NVML gave one (what DCGM's `GPU_I_ID` label says; it names the
/// instance in metrics, never in decisions).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentMigInstance {
    pub profile: String,
    pub start: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
}

impl AgentGpu {
    /// A fleet file's GPU as an agent reports it: its index, UUID, model and mode.
    pub fn of_fleet(g: &gantry_types::Gpu) -> AgentGpu {
        AgentGpu { index: g.index, uuid: g.uuid.clone(), model: g.model.clone(), mig_mode: None, mig: Vec::new() }
            .with_mode(&g.mode)
    }

    /// The mode the hardware has, as the controller would record it (MIG with the reported
    /// instances, else whole); `None` when the agent does not say.
    pub fn mode(&self) -> Option<gantry_types::GpuMode> {
        self.mig_mode.map(|mig| match mig {
            true => gantry_types::GpuMode::Mig {
                instances: self
                    .mig
                    .iter()
                    .map(|i| gantry_types::MigInstanceSpec { profile: i.profile.clone(), start: i.start })
                    .collect(),
            },
            false => gantry_types::GpuMode::Whole,
        })
    }

    /// What an agent reports for a GPU in `mode` (MPS and time-slicing are the controller's
    /// software modes: to the hardware they are whole GPUs).
    pub fn with_mode(mut self, mode: &gantry_types::GpuMode) -> AgentGpu {
        match mode {
            gantry_types::GpuMode::Mig { instances } => {
                self.mig_mode = Some(true);
                self.mig = instances
                    .iter()
                    .map(|i| AgentMigInstance { profile: i.profile.clone(), start: i.start, gpu_instance_id: None })
                    .collect();
                self.mig.sort();
            }
            _ => {
                self.mig_mode = Some(false);
                self.mig.clear();
            }
        }
        self
    }
}

/// The controller's answer to a registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Registered {
    pub node: String,
    /// Silent longer than this, the node gets no new work until the agent is back.
    pub heartbeat_timeout_s: u64,
    /// The protocol version the controller speaks (1 when absent).
    #[serde(default = "protocol_one")]
    pub protocol: u32,
}

/// How a task the agent knows is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum TaskState {
    Running,
    /// Ended: its exit code (`None`: killed by a signal), and whether its time limit ended it.
    Exited {
        code: Option<i32>,
        timed_out: bool,
        /// The kernel's OOM killer ended a process of the task: it used more memory than its
        /// run was held to on the node (protocol 3).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        oom: bool,
    },
    /// Gone without an exit recorded (re-adopted after an agent restart, then vanished).
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskReport {
    #[serde(flatten)]
    pub key: TaskKey,
    #[serde(flatten)]
    pub state: TaskState,
    /// Running, and the agent is already stopping it (no need to order it again).
    #[serde(default)]
    pub stopping: bool,
    /// Ended: the job steps its batch host recorded in its log (a batch job's script task;
    /// protocol 6).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<gantry_types::StepRecord>,
}

/// One GPU's utilization when the heartbeat left: measured by NVML, or simulated (a busy
/// simulated GPU reports a steady made-up load, an idle one 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub index: u32,
    /// Percent of time a kernel ran (NVML's `utilization.gpu`).
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
    /// Whether this came from NVML (false: simulated).
    pub measured: bool,
    /// Per job, where NVML reports per-process utilization (not on MIG GPUs): the SM
    /// utilization of the job's processes on this GPU, percent of the whole GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobShare>,
}

/// One job's part of a GPU's utilization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobShare {
    pub job: u64,
    pub utilization_pct: u32,
}

/// `POST /v1/agents/{node}/heartbeat`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub tasks: Vec<TaskReport>,
    #[serde(default)]
    pub samples: Vec<GpuSample>,
    /// With nothing to order, the controller holds the answer up to this long (a long poll:
    /// a launch reaches the agent at once rather than at the next heartbeat). At most 10 000.
    #[serde(default)]
    pub wait_ms: u64,
    /// The registered agent's `instance`: another process's heartbeats are refused.
    #[serde(default)]
    pub instance: String,
    /// Outcomes of layout orders (protocol 2), repeated until the controller forgets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<LayoutReport>,
    /// What each run on this node has used so far, measured by its cgroup (protocol 3),
    /// repeated until its tasks are forgotten; a run's last report is its total.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<RunUsage>,
}

/// One run's use of its node, as its cgroup counts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunUsage {
    pub job: u64,
    pub attempt: u32,
    /// Measured so far (absent fields: not measured, or not limited).
    pub used: gantry_types::Use,
}

/// Run usages one heartbeat may report (more are ignored): a node runs far fewer runs at once.
pub const USAGE_REPORTS_MAX: usize = 4096;

/// Change one GPU's mode (protocol 2): the agent applies it all or nothing through its MIG
/// backend — only on a GPU none of its tasks uses — and reports a [`LayoutReport`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LayoutOrder {
    /// The controller's reconfiguration id: an order is applied once, its outcome reported
    /// under this id.
    pub id: u64,
    pub gpu: u32,
    /// The mode wanted: a MIG layout, or a mode without MIG (MPS and time-slicing are the
    /// controller's bookkeeping: to the hardware they are whole GPUs).
    #[schema(value_type = Object)]
    pub mode: gantry_types::GpuMode,
}

/// What became of a layout order, and the GPU as the hardware has it afterwards (applied or
/// not, that is what the controller records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LayoutReport {
    pub id: u64,
    pub gpu: u32,
    /// `None`: applied. Otherwise why not (the previous layout was put back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Whether the GPU is in MIG mode now.
    pub mig_mode: bool,
    /// Its GPU instances now (MIG mode only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<AgentMigInstance>,
}

impl LayoutReport {
    /// `order` applied, the hardware as ordered: what a simulated agent answers.
    pub fn applied_as_ordered(order: &LayoutOrder) -> LayoutReport {
        let gpu =
            AgentGpu { index: order.gpu, uuid: String::new(), model: String::new(), mig_mode: None, mig: Vec::new() }
                .with_mode(&order.mode);
        LayoutReport {
            id: order.id,
            gpu: order.gpu,
            refused: None,
            mig_mode: gpu.mig_mode.unwrap_or(false),
            mig: gpu.mig,
        }
    }

    /// The GPU's mode as the hardware has it (MIG with its instances, else whole).
    pub fn hardware(&self) -> gantry_types::GpuMode {
        AgentGpu {
            index: self.gpu,
            uuid: String::new(),
            model: String::new(),
            mig_mode: Some(self.mig_mode),
            mig: self.mig.clone(),
        }
        .mode()
        .unwrap_or(gantry_types::GpuMode::Whole)
    }
}

/// Stop a job's tasks of run `attempt` on this node: SIGTERM, SIGKILL after `grace_s`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StopOrder {
    pub job: u64,
    pub attempt: u32,
    pub grace_s: u64,
}

/// A user's signal to a job's processes of run `attempt` on this node (`scancel --signal`):
/// never to gantry's own processes; only the job steps' unless `all`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalOrder {
    pub job: u64,
    pub attempt: u32,
    /// The signal's number (one of [`USER_SIGNALS`]).
    pub signal: i32,
    /// Every process of the job (the batch script's too), not only its steps'.
    pub all: bool,
}

/// The signals a user may send a job, by name and number (Linux's numbering).
pub const USER_SIGNALS: [(&str, i32); 12] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("WINCH", 28),
];

/// A signal as a user types it (`usr1`, ` SIGUSR1`, `10`): case and surrounding spaces aside,
/// [`exact_signal`].
pub fn user_signal(name: &str) -> Option<i32> {
    exact_signal(&name.trim().to_ascii_uppercase())
}

/// A signal as the API takes it, exactly what its schema's pattern says: `USR1`, `SIGUSR1` or
/// `10` (no sign, no leading zero), if it is one of [`USER_SIGNALS`].
pub fn exact_signal(name: &str) -> Option<i32> {
    let bare = name.strip_prefix("SIG").unwrap_or(name);
    USER_SIGNALS.iter().find(|(n, number)| *n == bare || name == number.to_string()).map(|(_, number)| *number)
}

/// The answer to a heartbeat: what the agent must do.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Orders {
    pub launch: Vec<Launch>,
    pub stop: Vec<StopOrder>,
    /// Ended tasks whose exits the controller has recorded: the agent may stop reporting them.
    pub forget: Vec<TaskKey>,
    /// GPUs to reconfigure (protocol 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<LayoutOrder>,
    /// Layout outcomes the controller has recorded: the agent may stop reporting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forget_layouts: Vec<u64>,
    /// Parts of task output someone is waiting to read (protocol 4): the agent answers each
    /// with a [`LogChunk`] (`POST /v1/agents/{node}/logs`). Repeated until answered or given up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_reads: Vec<LogRead>,
    /// Users' signals to deliver (protocol 6), each sent once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<SignalOrder>,
}

impl Orders {
    pub fn is_empty(&self) -> bool {
        self.launch.is_empty()
            && self.stop.is_empty()
            && self.forget.is_empty()
            && self.layouts.is_empty()
            && self.forget_layouts.is_empty()
            && self.log_reads.is_empty()
            && self.signals.is_empty()
    }
}

/// The most of one task stream one read returns: 256 KiB, so an agent's answer (base64, a
/// third more) is one modest message and a reader waits for one round trip, not a download.
pub const LOG_READ_BYTES_MAX: u64 = 256 << 10;

/// Output reads one node may have waiting at once (more are refused with 429: the node's
/// agent reads them one by one between heartbeats).
pub const LOG_READS_MAX: usize = 32;

/// A task's standard output or standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    Out,
    Err,
}

impl LogStream {
    pub fn name(self) -> &'static str {
        match self {
            LogStream::Out => "out",
            LogStream::Err => "err",
        }
    }
}

/// Read part of one task's output on this node (protocol 4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogRead {
    /// The controller's number for this read: the answer names it.
    pub id: u64,
    pub job: u64,
    pub attempt: u32,
    /// The task's rank in its run (its files are named by it).
    pub rank: u32,
    pub stream: LogStream,
    /// Where to start, in bytes; absent: the last `max_bytes` of the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// At most this many bytes ([`LOG_READ_BYTES_MAX`] at most).
    pub max_bytes: u64,
}

/// `POST /v1/agents/{node}/logs`: the answer to one [`LogRead`].
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogChunk {
    /// The read it answers ([`LogRead::id`]).
    pub id: u64,
    /// Where these bytes start in the stream.
    pub offset: u64,
    /// The stream's size when read (bytes): more follows when `offset` plus the bytes is less.
    pub size: u64,
    /// The bytes, base64 (standard alphabet, padded): output is bytes, not always UTF-8.
    pub data: String,
    /// Why the stream could not be read (nothing else is then meaningful).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LogChunk {
    /// A chunk carrying `bytes` from `offset` of a stream of `size` bytes.
    pub fn new(id: u64, offset: u64, size: u64, bytes: &[u8]) -> LogChunk {
        use base64::Engine;
        LogChunk { id, offset, size, data: base64::engine::general_purpose::STANDARD.encode(bytes), error: None }
    }

    /// The bytes it carries; `None` when `data` is not base64.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(&self.data).ok()
    }
}

/// Layout outcomes one heartbeat may report (more are ignored until the next one): a node
/// has at most 64 GPUs and each has at most one order under way.
pub const LAYOUT_REPORTS_MAX: usize = 64;

/// The longest a heartbeat may ask the controller to hold its answer.
pub const WAIT_MS_MAX: u64 = 10_000;

#[cfg(test)]
mod signal_tests {
    use super::*;

    #[test]
    fn a_users_signal_is_named_as_users_name_it_and_nothing_else_passes() {
        for name in ["USR1", "usr1", "SIGUSR1", "10", " USR1 "] {
            assert_eq!(user_signal(name), Some(10), "{name}");
        }
        assert_eq!(user_signal("TERM"), Some(15));
        for name in ["usr1", " USR1", "010", "+10", "SIGusr1"] {
            assert_eq!(exact_signal(name), None, "the API takes names exactly: {name}");
        }
        assert_eq!((exact_signal("SIGWINCH"), exact_signal("28")), (Some(28), Some(28)));
        for name in ["SEGV", "11", "0", "-9", "SIG", "", "USR1;", "99999999999"] {
            assert_eq!(user_signal(name), None, "{name}");
        }
    }
}
