//! Admission limits: what one request, one user and one queue may put into the controller.
//! A tenant who floods the queue (one 60-byte array line can ask for 100,000 jobs) must meet
//! a named bound with a clear answer — 413 for a request too large, 429 for a backlog too
//! deep — and nothing stored. The `[admission]` table of the controller's config file.

use crate::error::{ControlError, ServeError};
use serde::{Deserialize, Serialize};

/// The limits, each with the reason for its default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionLimits {
    /// Bytes of one request body. A workload file of thousands of jobs is well under 1 MiB.
    pub body_bytes: usize,
    /// Jobs one submission may create, counts and arrays expanded: checked before they are
    /// built. Slurm's default MaxArraySize is 1,001; 10,000 leaves room for sweeps.
    pub jobs_per_request: usize,
    /// Jobs one user may have waiting (not yet started). Slurm's MaxSubmitJobs is often in
    /// the thousands; 10,000 keeps one user's backlog from filling the scheduler's passes.
    pub pending_per_user: usize,
    /// Jobs one queue may have waiting, all users together.
    pub pending_per_queue: usize,
    /// Characters of a job or task name (at most `gantry_spec::NAME_CHARS_MAX`).
    pub name_chars: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            body_bytes: 1 << 20,
            jobs_per_request: 10_000,
            pending_per_user: 10_000,
            pending_per_queue: 100_000,
            name_chars: 128,
        }
    }
}

impl AdmissionLimits {
    pub fn check(&self) -> Result<(), ServeError> {
        let bounds: [(&str, usize, usize, usize); 5] = [
            ("body_bytes", self.body_bytes, 1024, gantry_spec::SPEC_BYTES_MAX),
            ("jobs_per_request", self.jobs_per_request, 1, gantry_spec::JOBS_MAX as usize),
            ("pending_per_user", self.pending_per_user, 1, 10_000_000),
            ("pending_per_queue", self.pending_per_queue, 1, 10_000_000),
            ("name_chars", self.name_chars, 1, gantry_spec::NAME_CHARS_MAX),
        ];
        for (name, value, low, high) in bounds {
            if !(low..=high).contains(&value) {
                return Err(ServeError::Config(format!("admission.{name} = {value}: use {low} to {high}")));
            }
        }
        Ok(())
    }

    /// A job's names within `name_chars` (the spec already refused unprintable ones).
    pub fn check_names(&self, job: &gantry_types::Job) -> Result<(), ControlError> {
        let names = std::iter::once(&job.name).chain(job.groups.iter().map(|g| &g.name));
        for name in names {
            let chars = name.chars().count();
            if chars > self.name_chars {
                return Err(ControlError::TooLarge {
                    limit: "name_chars",
                    value: self.name_chars as u64,
                    message: format!("job {:?}: the name {name:?} has {chars} characters", job.name),
                });
            }
        }
        Ok(())
    }
}
