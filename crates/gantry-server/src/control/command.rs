//! What reaches the controller's state machine ([`Command`]) and what must follow
//! ([`Effects`]). Commands carry everything the state machine needs that it may not fetch
//! itself: the caller's identity, a token's hash (the secret is drawn at the edge), NVML's
//! samples of this machine's GPUs. Each applied command is recorded, with its time, in the
//! command log (`gantry replay` re-runs it).

use crate::auth::Principal;
use crate::wire::{Heartbeat, Launch, Orders, Register, Registered, TaskKey};
use gantry_store::{Batch, Role};
use serde::{Deserialize, Serialize};

/// Something that happened, for the controller to apply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Command {
    /// A workload file's jobs, all or none, as the edge parsed them (the log keeps the jobs,
    /// so a replay does not depend on the parser).
    Submit {
        who: Principal,
        jobs: Vec<gantry_types::Job>,
        /// The request's idempotency key: a submission with a key this token used before is
        /// answered with the jobs that one made, and makes none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    Cancel {
        who: Principal,
        job: u64,
        /// `cancel --force`: tasks on unreachable nodes count as ended now.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// An admin declares a node lost (`gantry node lost NAME`).
    NodeLost {
        who: Principal,
        node: String,
    },
    /// When a workload's first job would start if submitted now (`sbatch --test-only`):
    /// nothing changes, and it is not logged.
    Estimate {
        who: Principal,
        jobs: Vec<gantry_types::Job>,
    },
    /// Stop a running job and have it wait again (`scontrol requeue`).
    Requeue {
        who: Principal,
        job: u64,
    },
    /// Hold a waiting job (`held`: it never starts until released) or release it.
    Hold {
        who: Principal,
        job: u64,
        held: bool,
    },
    /// Drain (`true`) or resume a node.
    Drain {
        who: Principal,
        node: String,
        drained: bool,
    },
    /// A new token; only its secret's hash travels (and is logged).
    CreateToken {
        who: Principal,
        name: String,
        role: Role,
        queues: Vec<String>,
        hash: String,
        /// An agent token's node (logs from before node binding have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        /// How long it works from its creation (seconds; `None`: until revoked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lifetime_s: Option<u64>,
    },
    RevokeToken {
        who: Principal,
        name: String,
    },
    Register {
        who: Principal,
        registration: Register,
    },
    Heartbeat {
        who: Principal,
        node: String,
        beat: Heartbeat,
    },
    /// A caller running tasks itself (`Agents::Local`: the simulator) saw a task exit (`code`: `None` if killed by a signal; `lost`:
    /// it vanished without an exit recorded).
    TaskExited {
        task: TaskKey,
        code: Option<i32>,
        timed_out: bool,
        lost: bool,
    },
    /// A caller running tasks itself (`Agents::Local`) carried out a layout order it was
    /// handed in `Effects::layouts`: what became of it.
    LayoutDone {
        node: String,
        report: crate::wire::LayoutReport,
    },
    /// Time passes: silent agents, the meter, idle jobs, reconfigurations, then a scheduling
    /// cycle.
    Tick {
        /// Remote nodes whose agent has not been heard from past the heartbeat timeout, with
        /// how long (seconds). The live controller fills it in as it applies the tick (from
        /// when it last heard each agent, heartbeats it did not log included) and the log
        /// keeps it, so a replay decides from the same silences. `None` in logs from before
        /// it was kept: then computed the same way.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        silent: Option<std::collections::BTreeMap<String, u64>>,
    },
    /// Re-open from memory at a quiet moment and let the store delete the command log before
    /// the newest such point at or before `keep_log_s` ago (`None`: delete nothing). Not
    /// logged as a command: the `open` entry it writes is.
    Checkpoint {
        keep_log_s: Option<u64>,
    },
}

impl Command {
    /// A tick whose silences the controller fills in.
    pub fn tick() -> Command {
        Command::Tick { silent: None }
    }
}

impl Command {
    /// Its name in logs and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Submit { .. } => "submit",
            Command::Cancel { .. } => "cancel",
            Command::Requeue { .. } => "requeue",
            Command::Estimate { .. } => "estimate",
            Command::Hold { held: true, .. } => "hold",
            Command::Hold { held: false, .. } => "release",
            Command::Drain { .. } => "drain",
            Command::NodeLost { .. } => "node-lost",
            Command::CreateToken { .. } => "create-token",
            Command::RevokeToken { .. } => "revoke-token",
            Command::Register { .. } => "register",
            Command::Heartbeat { .. } => "heartbeat",
            Command::TaskExited { .. } => "task-exited",
            Command::LayoutDone { .. } => "layout-done",
            Command::Tick { .. } => "tick",
            Command::Checkpoint { .. } => "checkpoint",
        }
    }
}

/// The answer to the command's caller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    #[default]
    Done,
    Submitted {
        ids: Vec<u64>,
    },
    /// `stopping`: its tasks are being signalled (else it ended at once).
    Cancelled {
        stopping: bool,
    },
    /// Whether the drain or resume changed anything.
    Drained {
        changed: bool,
    },
    /// Whether the node was not lost already.
    Lost {
        changed: bool,
    },
    /// A running job is being stopped to wait again.
    Requeued,
    /// When a job would start.
    Estimated(gantry_api::replies::Estimate),
    /// Whether the hold or release changed anything.
    Held {
        changed: bool,
    },
    Registered(Registered),
    Orders(Orders),
    /// Whether a checkpoint was taken; if not, why not (it is tried again later).
    Checkpoint {
        taken: bool,
        why: Option<String>,
    },
}

/// A run a caller running tasks itself must signal now and kill after `grace_s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StopRun {
    pub job: u64,
    pub attempt: u32,
    pub grace_s: u64,
}

/// What must follow a command, in this order: `commit` made durable, then the launches and
/// stops carried out, agents woken, and the reply sent. Nothing of it may happen before the
/// commit: a start is in the log before its processes exist.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    pub commit: Batch,
    /// For a caller running tasks itself (`Agents::Local`); agents get theirs in their
    /// heartbeats' answers.
    pub launch: Vec<Launch>,
    pub stop: Vec<StopRun>,
    /// For a caller running tasks itself: GPUs to reconfigure (node, order); it answers each
    /// with `Command::LayoutDone`. Agents get theirs in their heartbeats' answers.
    pub layouts: Vec<(String, crate::wire::LayoutOrder)>,
    /// Nodes whose agents have new orders: wake their held heartbeats.
    pub wake: std::collections::BTreeSet<String>,
    /// Capacity may have come back or work arrived: a scheduling cycle should run soon.
    pub schedule: bool,
    pub reply: Reply,
    /// The command changed nothing a replay needs (a heartbeat that only repeated what the
    /// controller knew): it is not put in the command log.
    pub unlogged: bool,
}

/// The decisions of one applied command, as the command log keeps them for replay: what a
/// replay must reproduce exactly.
#[derive(Debug, Serialize)]
pub(crate) struct Decisions<'a> {
    pub events: &'a [gantry_types::Event],
    pub launch: &'a [Launch],
    pub stop: &'a [StopRun],
    pub reply: &'a Reply,
    /// After a tick: the scheduler's fingerprint of every waiting job's reason and estimated
    /// start (kept up to date as they change, so free to read however long the queue).
    pub reasons: Option<String>,
}

/// A command log entry: the command and a fingerprint of its decisions.
#[derive(Debug, Serialize, Deserialize)]
pub struct Logged {
    #[serde(flatten)]
    pub command: Command,
    /// FNV-1a of the decisions' JSON (events, launches, stops, reply, and a tick's pending
    /// reasons).
    pub decisions: String,
}

/// FNV-1a, 64 bits, as 16 hex digits: stable across versions and platforms (unlike std's
/// hasher), which a fingerprint kept in a log must be.
/// Decisions as JSON without the launches' step keys: exactly what they serialize to with
/// none (the key is never a launch's first field, and is hex).
pub fn forget_step_keys(json: &str) -> String {
    const KEY: &str = ",\"step_key\":\"";
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at]);
        let value = &rest[at + KEY.len()..];
        rest = value.find('"').map_or("", |end| &value[end + 1..]);
    }
    out.push_str(rest);
    out
}

pub fn fingerprint(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod step_key_tests {
    /// A launch's step key never reaches the decisions' fingerprint: a replay (which has no
    /// controller secret) fingerprints the same launches the same way.
    #[test]
    fn step_keys_leave_the_fingerprinted_text_as_if_there_were_none() {
        let with = r#"{"launch":[{"job":1,"array_index":2,"step_key":"ab12","queue":"q"},{"job":2,"step_key":"ff"}]}"#;
        let without = r#"{"launch":[{"job":1,"array_index":2,"queue":"q"},{"job":2}]}"#;
        assert_eq!(super::forget_step_keys(with), without);
        assert_eq!(super::forget_step_keys(without), without);
    }
}
