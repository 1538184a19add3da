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

/// How a job that ran ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
        }
    }

    pub fn state(self) -> JobState {
        match self {
            Ending::Completed => JobState::Completed,
            Ending::Failed | Ending::TimedOut => JobState::Failed,
            Ending::Cancelled => JobState::Cancelled,
            Ending::Lost => JobState::Lost,
        }
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
}

/// One entry of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// A job was accepted (validated, compiled against the fleet) as `id`.
    Submitted { id: u64, at_s: u64, job: Box<Job> },
    /// The scheduler started it: its tasks and where they run.
    Started { id: u64, at_s: u64, tasks: Vec<TaskStart> },
    /// It ended (ran, or was cancelled or lost), with the first non-zero exit code if any.
    Ended { id: u64, at_s: u64, ending: Ending, exit_code: Option<i32> },
    /// It was stopped for another (preemption) and waits again.
    Requeued { id: u64, at_s: u64, why: String },
    /// A waiting job was held (`held`: it never starts until released) or released.
    Held { id: u64, at_s: u64, held: bool },
}

impl Event {
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
