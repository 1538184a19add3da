//! The small replies of the API's actions (submit, cancel, hold, drain, declare lost, make a
//! token) and the one body every error has.

use serde::{Deserialize, Serialize};

/// Every error the API answers, whatever the status.
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    /// The field the request got wrong, where the refusal names one (a workload's
    /// `job "train" / gpu.count`, a token's `queues`, a header's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What to do about it, where the refusal knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For 413 and 429: the admission limit the request went over, and its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Submitted {
    pub ids: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cancelled {
    pub id: u64,
    /// `cancelled` (it was waiting) or `stopping` (its tasks are being signalled).
    pub status: String,
}

/// The one time a secret is shown.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenSecret {
    pub name: String,
    pub secret: String,
}

/// `POST /v1/jobs/{id}/signal`'s body: a signal for a running job's processes.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// `USR1`, `SIGUSR1` or `10`: one of HUP INT QUIT KILL USR1 USR2 ALRM TERM CONT STOP TSTP WINCH.
    #[schema(
        pattern = "^((SIG)?(HUP|INT|QUIT|KILL|USR1|USR2|ALRM|TERM|CONT|STOP|TSTP|WINCH)|1|2|3|9|10|12|14|15|18|19|20|28)$"
    )]
    pub signal: String,
    /// Every process of the job, its batch script's too; by default only its steps' (those
    /// `srun` started), as Slurm's `scancel --signal` without `--full`. A job with no steps
    /// (not a batch job) gets it in every process either way.
    #[serde(default)]
    pub all: bool,
}

/// A signal on its way: to the nodes that run the job, each with its next heartbeat.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Signalled {
    pub id: u64,
    /// The signal's number.
    pub signal: i32,
    pub nodes: Vec<String>,
}

/// When a job would start if it were submitted now (`POST /v1/jobs/estimate`, `sbatch
/// --test-only`): nothing was submitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Estimate {
    /// The id it would get.
    pub id: u64,
    pub queue: String,
    /// The partition it would run in (its queue where the queue file defines none).
    #[serde(default)]
    pub partition: String,
    /// When it would start (Unix seconds): now where it fits now, its reserved start where
    /// one is planned, else none.
    pub start_s: Option<u64>,
    /// Where it would start now (empty unless it starts now).
    pub nodes: Vec<String>,
    /// The CPUs it would hold.
    pub cpus: u64,
    /// Why it would wait, if it would.
    pub reason: Option<String>,
}

/// A running job being stopped to wait again: it is pending once its tasks have exited.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Requeued {
    pub id: u64,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Held {
    pub id: u64,
    pub held: bool,
    /// Whether this call changed anything.
    pub changed: bool,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Drained {
    pub node: String,
    pub drained: bool,
    /// Whether this call changed anything.
    pub changed: bool,
}

/// A node declared lost.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeLost {
    pub node: String,
    /// False if it was lost already.
    pub changed: bool,
}

/// `POST /v1/tokens`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// Letters, digits, `-`, `_`, `.`, `@`; at most 64.
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    pub name: String,
    pub role: gantry_types::Role,
    #[serde(default)]
    pub queues: Vec<String>,
    /// For an agent token: the one node it may act for.
    #[serde(default)]
    pub node: Option<String>,
    /// Seconds until it stops working (60 to ten years); leave out for a token that works
    /// until revoked.
    #[serde(default)]
    #[schema(minimum = 60, maximum = 315_360_000)]
    pub expires_in_s: Option<u64>,
}

/// What a checkpoint request did.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Checkpointed {
    /// Whether it was taken (it is not while a run is being stopped or moved, a launch is
    /// unacknowledged or a GPU is being reconfigured: try again shortly).
    pub taken: bool,
    /// Why not, when it was not.
    pub why: Option<String>,
    /// The command log kept before now, seconds (`[log] keep_days`; `None`: all of it).
    pub keep_log_s: Option<u64>,
}

/// A reply that is not the type its call returns: from a controller of another version.
#[derive(Debug)]
pub struct UnexpectedReply {
    pub path: String,
    pub error: serde_json::Error,
}

impl std::fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the controller's reply to {} is not what this gantry reads ({}): is it another version?",
            self.path, self.error
        )
    }
}

impl std::error::Error for UnexpectedReply {}

/// The reply to `path` read as the API's type `T`; one that is not says which call gave it.
pub fn read_reply<T: serde::de::DeserializeOwned>(value: &serde_json::Value, path: &str) -> Result<T, UnexpectedReply> {
    T::deserialize(value).map_err(|error| UnexpectedReply { path: path.to_string(), error })
}

/// A fresh idempotency key for a submission (`Idempotency-Key`): 128 random bits, hex. If
/// the controller that took the submission dies before answering, the same key sent to the
/// next one (a standby that took over) does not submit it twice.
pub fn idempotency_key() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod reply_tests {
    use super::*;

    #[test]
    fn a_reply_of_another_shape_is_refused_by_its_call() {
        let err = read_reply::<crate::JobView>(&serde_json::json!([1, 2]), "/v1/jobs/3").expect_err("not a job");
        assert!(err.to_string().contains("reply to /v1/jobs/3 is not what this gantry reads"), "{err}");
        let jobs: Vec<crate::JobView> = read_reply(&serde_json::json!([]), "/v1/jobs").expect("an empty list");
        assert!(jobs.is_empty());
        assert_eq!(idempotency_key().expect("urandom").len(), 32);
    }
}
