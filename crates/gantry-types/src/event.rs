//! What happened to a job, as the live system records it: the event log is the source of
//! truth, and every state table is derived from it in the same transaction (DESIGN §3 rule 3).

use crate::job::Job;
use serde::{Deserialize, Serialize};

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    /// It was running when its agent went away and could not be re-adopted: never run again
    /// automatically.
    Lost,
}

impl JobState {
    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Lost => "lost",
        }
    }

    /// No further event changes it.
    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running)
    }
}

/// Who cancelled a job the controller cancelled itself: a dependency that can never be met
/// (`kill_invalid_depend`), a run its queue reclaimed for idling.
pub const CANCELLED_BY_CONTROLLER: &str = "gantry";

/// How a job that ran ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Ending {
    /// Every task exited 0.
    Completed,
    /// A task exited non-zero or was killed by a signal.
    Failed,
    /// Stopped at its time limit.
    TimedOut,
    Cancelled,
    Lost,
    /// The kernel's OOM killer ended a task: it used more memory than its run was held to
    /// on its node (what it asked for there).
    #[serde(rename = "oom")]
    OutOfMemory,
}

impl Ending {
    /// Its name as the API writes it (`timed-out`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Failed => "failed",
            Ending::TimedOut => "timed-out",
            Ending::Cancelled => "cancelled",
            Ending::Lost => "lost",
            Ending::OutOfMemory => "oom",
        }
    }

    pub fn state(self) -> JobState {
        match self {
            Ending::Completed => JobState::Completed,
            Ending::Failed | Ending::TimedOut | Ending::OutOfMemory => JobState::Failed,
            Ending::Cancelled => JobState::Cancelled,
            Ending::Lost => JobState::Lost,
        }
    }
}

/// One job step of a batch job (an `srun` in its script), as its batch host recorded it: the
/// job's own statement, bounded ([`STEPS_MAX`], [`STEP_NAME_CHARS_MAX`]) and kept with the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StepRecord {
    /// Slurm's step number (`ID.0`, `ID.1`, ...).
    pub step: u32,
    /// The program it ran (its file name).
    pub name: String,
    pub tasks: u32,
    /// Its nodes, as a Slurm hostlist.
    pub nodes: String,
    pub start_s: u64,
    /// `None`: it had not ended when the job did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<u64>,
    /// The highest exit code of its tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Most steps kept of one run (a script that runs more keeps its first ones).
pub const STEPS_MAX: usize = 256;
/// The batch wrapper's flag telling its batch host the task's log is open as descriptor 3,
/// where the steps' records go: a task launched with it is the one whose log an agent reads
/// them from when it exits.
pub const STEP_RECORDS_FLAG: &str = "--records-to-fd3";

/// Longest step name kept, in characters.
pub const STEP_NAME_CHARS_MAX: usize = 64;

impl StepRecord {
    /// Whether it is within the bounds a record from a node must keep.
    pub fn is_sane(&self) -> bool {
        self.name.chars().count() <= STEP_NAME_CHARS_MAX
            && self.nodes.len() <= 4096
            && self.end_s.is_none_or(|end| end >= self.start_s)
    }
}

/// One task of a started job: where it runs and what it was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskStart {
    pub group: String,
    pub replica: u32,
    pub node: String,
    /// `CUDA_VISIBLE_DEVICES` as handed to the task (GPU or MIG UUIDs).
    pub devices: Vec<String>,
    /// The engine's placement of the task, so a restarted controller can take exactly that
    /// capacity again for a task that kept running.
    #[serde(default)]
    pub placement: Option<crate::outcome::TaskPlacement>,
    /// How its node confined it, as its agent said when the task started (`cgroup v1 (…)`,
    /// `unconfined: …`; `None`: not known, as for simulated runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
}

/// What a run used, as a node's cgroups measured it, and what it was held to there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Use {
    /// The most memory it held at once (`None`: the node could not measure it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    /// CPU time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    /// The memory it was held to (`None`: not limited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// The CPU quota it was held to, millicores (`None`: not limited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit_milli: Option<u64>,
}

impl Use {
    /// Add a later run's use: CPU time adds up, the peak is the higher, the limits are the
    /// later run's.
    pub fn add(&mut self, later: &Use) {
        self.cpu_ms = match (self.cpu_ms, later.cpu_ms) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        self.memory_peak_bytes = self.memory_peak_bytes.max(later.memory_peak_bytes);
        self.memory_limit_bytes = later.memory_limit_bytes;
        self.cpu_limit_milli = later.cpu_limit_milli;
    }
}

/// What a job's run (or runs) used on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeUse {
    pub node: String,
    #[serde(flatten)]
    pub used: Use,
}

/// Which task the OOM killer ended, where, and the memory its run was held to there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OomKill {
    pub group: String,
    pub replica: u32,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
}

impl OomKill {
    /// In words, for `gantry show`, `why` and the dashboard.
    pub fn reason(&self) -> String {
        let limit = match self.memory_limit_bytes {
            Some(bytes) => format!("its memory limit there, {}", crate::quantity::Bytes(bytes)),
            None => "the memory it was allowed there".to_string(),
        };
        format!(
            "task {}/{} on node {} used more than {limit}, and the kernel's OOM killer ended it; ask for more memory (memory = \"…\")",
            self.group, self.replica, self.node
        )
    }
}

/// One entry of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A job was accepted (validated, compiled against the fleet) as `id`.
    Submitted { id: u64, at_s: u64, job: Box<Job> },
    /// The scheduler started it: its tasks and where they run.
    Started { id: u64, at_s: u64, tasks: Vec<TaskStart> },
    /// It ended (ran, or was cancelled or lost), with the first non-zero exit code if any,
    /// what its last run used on each node, and the task the OOM killer ended if one was.
    Ended {
        id: u64,
        at_s: u64,
        ending: Ending,
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        used: Vec<NodeUse>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        oom: Option<OomKill>,
        /// Who cancelled it: a token's name, or [`CANCELLED_BY_CONTROLLER`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The job steps its batch host recorded (a batch job's `srun`s).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        steps: Vec<StepRecord>,
    },
    /// It was stopped for another (preemption) and waits again; what that run used.
    Requeued {
        id: u64,
        at_s: u64,
        why: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        used: Vec<NodeUse>,
    },
    /// A waiting job was held (`held`: it never starts until released) or released.
    Held { id: u64, at_s: u64, held: bool },
}

impl Event {
    /// A job ended with nothing measured (it never ran, or ran where nothing measures).
    pub fn ended(id: u64, at_s: u64, ending: Ending, exit_code: Option<i32>) -> Event {
        Event::Ended { id, at_s, ending, exit_code, used: Vec::new(), oom: None, by: None, steps: Vec::new() }
    }

    /// A job cancelled by `by` (a token's name, or [`CANCELLED_BY_CONTROLLER`]) before it ran.
    pub fn cancelled(id: u64, at_s: u64, by: &str) -> Event {
        Event::Ended {
            id,
            at_s,
            ending: Ending::Cancelled,
            exit_code: None,
            used: Vec::new(),
            oom: None,
            by: Some(by.into()),
            steps: Vec::new(),
        }
    }

    /// A job waits again, its run's use not measured.
    pub fn requeued(id: u64, at_s: u64, why: impl Into<String>) -> Event {
        Event::Requeued { id, at_s, why: why.into(), used: Vec::new() }
    }

    pub fn job_id(&self) -> u64 {
        match self {
            Event::Submitted { id, .. }
            | Event::Started { id, .. }
            | Event::Ended { id, .. }
            | Event::Requeued { id, .. }
            | Event::Held { id, .. } => *id,
        }
    }

    /// When it happened.
    pub fn at_s(&self) -> u64 {
        match self {
            Event::Submitted { at_s, .. }
            | Event::Started { at_s, .. }
            | Event::Ended { at_s, .. }
            | Event::Requeued { at_s, .. }
            | Event::Held { at_s, .. } => *at_s,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "submitted",
            Event::Started { .. } => "started",
            Event::Ended { .. } => "ended",
            Event::Requeued { .. } => "requeued",
            Event::Held { held: true, .. } => "held",
            Event::Held { held: false, .. } => "released",
        }
    }
}
