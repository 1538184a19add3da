//! A job as the controller keeps it and the API shows it: its spec as accepted, its state and
//! times, where its tasks ran, and how its runs went. The store's jobs table holds exactly
//! this (derived from the event log in the same transaction); `GET /v1/jobs` shows it.

use crate::{Ending, Event, Job, JobState, NodeUse, OomKill, TaskStart};
use serde::{Deserialize, Serialize};

/// A job as the state table holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRow {
    pub id: u64,
    pub name: String,
    pub queue: String,
    pub state: JobState,
    pub submitted_at_s: u64,
    pub started_at_s: Option<u64>,
    pub ended_at_s: Option<u64>,
    pub exit_code: Option<i32>,
    /// Times it was stopped for another and requeued.
    pub requeues: u32,
    /// The job as accepted (the workload file's fields, docs/formats.md).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub job: Job,
    /// Where its tasks run (or last ran).
    pub tasks: Vec<TaskStart>,
    /// How it ended (`oom`, `timed-out`, …: the state says only failed), what its runs used
    /// on each node, and the task the OOM killer ended: the store's `outcome` column.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl JobRow {
    /// The partition it runs in as Slurm's tools show it: the one the queue file placed it
    /// in, else its queue (where the file defines no partitions, a queue is one).
    pub fn partition(&self) -> &str {
        self.job.control.partition.as_deref().unwrap_or(&self.queue)
    }
}

/// How a job's runs went: set when a run ends (`ended`, `requeued`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Outcome {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<Ending>,
    /// What its runs used, per node: CPU time summed over runs, the highest memory peak.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used: Vec<NodeUse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<OomKill>,
    /// Who cancelled it (a token's name; `gantry`: the controller itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// Its last run's job steps (a batch job's `srun`s), as its batch host recorded them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::StepRecord>,
}

impl Outcome {
    /// Add one run's use, node by node.
    pub fn add_used(&mut self, used: &[NodeUse]) {
        for u in used {
            match self.used.iter_mut().find(|have| have.node == u.node) {
                Some(have) => have.used.add(&u.used),
                None => self.used.push(u.clone()),
            }
        }
        self.used.sort_by(|a, b| a.node.cmp(&b.node));
    }

    /// The outcome after `event` (only a run's end changes it).
    pub fn after(&self, event: &Event) -> Outcome {
        let mut next = self.clone();
        match event {
            Event::Ended { ending, used, oom, by, steps, .. } => {
                next.steps = steps.clone();
                next.ending = Some(*ending);
                next.oom = oom.clone();
                next.cancelled_by = by.clone().filter(|_| *ending == crate::Ending::Cancelled);
                next.add_used(used);
            }
            Event::Requeued { used, .. } => next.add_used(used),
            _ => {}
        }
        next
    }
}
