//! The live system's store. The event log is the source of truth; the `jobs` table is derived
//! from it in the same transaction, so a crash leaves either both or neither (DESIGN §3 rule 3).
//! An event that does not fit the job's state (starting a job twice, ending one that never
//! ran) is refused and the whole batch is rolled back: nothing is half-applied.
//!
//! [`Store`] is the boundary the controller writes through; every backend must pass the one
//! `conformance` suite (the `test-support` feature). The controller writes one [`Batch`] per group of commands: the
//! commands themselves (the command log a replay re-runs), their events and every side table
//! they change, in one transaction. [`SqliteStore`] is the embedded default (WAL, `synchronous=FULL`:
//! an append that returned is on disk).

/// Test support (the `test-support` feature): the suite every backend passes, and a private
/// PostgreSQL server for tests. Not in a production build.
#[cfg(feature = "test-support")]
pub mod conformance;
mod pg;
pub mod pg_tls;
mod sqlite;
#[cfg(feature = "test-support")]
pub mod test_postgres;

use gantry_types::{Event, JobState};
pub use gantry_types::{JobRow, Outcome, Role, TokenRecord};
use serde::{Deserialize, Serialize};

pub use pg::{LEADER_LOCK, LEASE, LeaderHint, LeaseWatch, POSTGRES_SCHEMA_VERSION, PostgresStore, redact_url};
pub use sqlite::SqliteStore;

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The event does not fit the job's state; nothing of its batch was written.
    #[error("job {id}: cannot apply {event} to a job that is {state}")]
    Conflict { id: u64, event: &'static str, state: String },
    /// A token with this name exists already.
    #[error("a token named {0:?} exists already")]
    TokenExists(String),
    #[error("store: {0}")]
    Backend(String),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    /// Another controller leads this store now (its term is `current`): this one must stop
    /// writing (it was deposed: paused, or cut off, past its lease).
    #[error(
        "another controller took over this store (term {current}; this one led term {ours}): it writes nothing more"
    )]
    Fenced { ours: u64, current: u64 },
    /// Another controller leads this store and did not let go in time.
    #[error("another controller leads this store ({holder:?}, term {term})")]
    Led { term: u64, holder: String },
    /// The disk the store writes to is full: nothing of the transaction was written, and the
    /// same transaction can be tried again once there is space.
    #[error("the store's disk is full: {0}")]
    Full(String),
    /// The store's server cannot be reached (refused, restarting, the connection ended): what
    /// was in flight may or may not have been written; a new connection may succeed.
    #[error("the store cannot be reached: {0}")]
    Unreachable(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full(e.to_string()),
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

/// The accounting ledger's unit: one job's use of one GPU model within one hour. Integer
/// milli-GPU-seconds (a whole GPU for one second is 1000), so sums are exact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// Start of the hour (Unix seconds, a multiple of 3600).
    pub hour_s: u64,
    pub job: u64,
    pub queue: String,
    /// The job's user (empty when it named none).
    pub user: String,
    /// Catalog model id.
    pub model: String,
    /// Compute held, whatever it did with it.
    pub allocated_milli_s: u64,
    /// Compute used: held × measured (or simulated) utilization.
    pub used_milli_s: u64,
}

/// Seconds per ledger bucket.
pub const USAGE_BUCKET_S: u64 = 3600;

/// One entry of the command log: what reached the controller's state machine, when, in the
/// order it was applied (`body` is the command's JSON, opaque to the store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    pub seq: u64,
    pub at_s: u64,
    pub body: String,
}

/// A point the command log can be replayed from: an `open` entry (the controller opened, or
/// re-opened itself at a checkpoint), with the last event written before it — the jobs table
/// a replay starting there must begin from is the events up to that one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRecord {
    /// The `open` entry's sequence number in the command log.
    pub seq: u64,
    pub at_s: u64,
    /// The last event's sequence number before the entry (0: none).
    pub events_through: u64,
}

/// Everything one or more commands change, written all or none in one transaction (and, on
/// SQLite, one fsync): the group commit's unit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// The command log: (time, command JSON), in the order applied.
    pub commands: Vec<(u64, String)>,
    pub events: Vec<Event>,
    pub tokens_added: Vec<TokenRecord>,
    pub tokens_revoked: Vec<String>,
    /// (node, drained).
    pub drained: Vec<(String, bool)>,
    /// (node, GPU index, mode JSON).
    pub gpu_modes: Vec<(String, u32, String)>,
    /// (id, record JSON, finished): a GPU reconfiguration the controller carries out, written
    /// at each of its steps (a second write for the same id replaces it).
    pub reconfigurations: Vec<(u64, String, bool)>,
    pub usage: Vec<UsageRow>,
    /// (time, point JSON, drop points before this time).
    pub series: Vec<(u64, String, u64)>,
    /// Its first command is an `open` entry: recorded as a point to replay from
    /// ([`OpenRecord`]).
    pub opened: bool,
    /// Retention: delete the command log before the newest point to replay from that is at or
    /// before this time (what a replay of the window since needs is kept; the events, the
    /// ledger and the jobs are never deleted). Deleted [`COMPACT_CHUNK`] entries per commit,
    /// this one and the next ones, so a day of a large fleet's log is not one long transaction.
    pub compact_before_s: Option<u64>,
}

/// Command-log entries retention deletes per commit. Deleting a day of a 1,000-node fleet's
/// log (1.44 million entries) in one SQLite transaction took 10 s and grew the WAL to 1.9 GB;
/// 20,000 at a time is a fraction of a second and a WAL in tens of MB, and a busy controller
/// commits many times a second.
pub const COMPACT_CHUNK: i64 = 20_000;

impl Batch {
    pub fn is_empty(&self) -> bool {
        self == &Batch::default()
    }
}

/// The boundary the controller writes through. One writer at a time.
pub trait Store: std::fmt::Debug {
    /// Append `events` in order, all or none, updating the derived state in the same
    /// transaction. Returns the sequence number of the last one.
    fn append(&mut self, events: &[Event]) -> Result<u64, StoreError>;
    /// Write `batches` in order, in one transaction, all or none (a conflicting event, a token
    /// name taken, a ledger row off the hour: nothing of any of them is written). Several
    /// commands' batches in one call is the group commit: one transaction, one sync.
    fn commit(&mut self, batches: &[Batch]) -> Result<(), StoreError>;
    /// Up to `limit` entries of the command log after sequence number `seq`, in order.
    fn commands_after(&self, seq: u64, limit: usize) -> Result<Vec<CommandRecord>, StoreError>;
    /// Up to `limit` events after sequence number `seq`, in order.
    fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, Event)>, StoreError>;
    fn job(&self, id: u64) -> Result<Option<JobRow>, StoreError>;
    /// Jobs in any of `states` (all jobs if empty), by id.
    fn jobs(&self, states: &[JobState]) -> Result<Vec<JobRow>, StoreError>;
    /// The id the next submitted job should get (one more than any seen).
    fn next_job_id(&self) -> Result<u64, StoreError>;
    /// Derive the state tables again from the event log alone.
    fn rebuild(&mut self) -> Result<(), StoreError>;
    /// Add a token; its name must be new (a conflict otherwise).
    fn put_token(&mut self, token: &TokenRecord) -> Result<(), StoreError>;
    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError>;
    /// Every token, by name.
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Remove the token called `name`; whether there was one.
    fn revoke_token(&mut self, name: &str) -> Result<bool, StoreError>;
    /// Record a node as drained (or not): it survives restarts.
    fn set_drained(&mut self, node: &str, drained: bool) -> Result<(), StoreError>;
    /// The drained nodes, by name.
    fn drained(&self) -> Result<Vec<String>, StoreError>;
    /// Record the mode a GPU was reconfigured to at run time (an opaque JSON text; a second
    /// write for the same GPU replaces it): it overrides the fleet file's after a restart.
    fn set_gpu_mode(&mut self, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError>;
    /// The recorded GPU modes: (node, GPU index, mode), by node and index.
    fn gpu_modes(&self) -> Result<Vec<(String, u32, String)>, StoreError>;
    /// The reconfiguration records (an opaque JSON text per id) not finished, and the newest
    /// `finished` finished ones, by id: what a controller reads when it opens (it resumes the
    /// unfinished; the others feed its guards). Older finished ones stay, unread.
    fn reconfigurations(&self, finished: usize) -> Result<Vec<(u64, String)>, StoreError>;
    /// Add to the ledger, all or none: rows for the same (hour, job, model) add up.
    fn add_usage(&mut self, rows: &[UsageRow]) -> Result<(), StoreError>;
    /// Ledger rows of the hours that start in `[from_s, to_s)`, by hour, job and model.
    fn usage(&self, from_s: u64, to_s: u64) -> Result<Vec<UsageRow>, StoreError>;
    /// Keep one point of the downsampled time series (an opaque JSON text, one per time;
    /// a second write for the same time replaces it), and drop the points before `keep_from_s`.
    fn put_series_point(&mut self, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError>;
    /// The series points at or after `from_s`, oldest first.
    fn series_points(&self, from_s: u64) -> Result<Vec<(u64, String)>, StoreError>;
    /// The points the command log can be replayed from, oldest first (the first is where
    /// what is kept begins, once retention has deleted older entries).
    fn opens(&self) -> Result<Vec<OpenRecord>, StoreError>;
}

/// A boxed store is a store: the controller picks its backend at start (`--store`).
impl<S: Store + ?Sized> Store for Box<S> {
    fn append(&mut self, events: &[Event]) -> Result<u64, StoreError> {
        (**self).append(events)
    }
    fn commit(&mut self, batches: &[Batch]) -> Result<(), StoreError> {
        (**self).commit(batches)
    }
    fn commands_after(&self, seq: u64, limit: usize) -> Result<Vec<CommandRecord>, StoreError> {
        (**self).commands_after(seq, limit)
    }
    fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, Event)>, StoreError> {
        (**self).events_after(seq, limit)
    }
    fn job(&self, id: u64) -> Result<Option<JobRow>, StoreError> {
        (**self).job(id)
    }
    fn jobs(&self, states: &[JobState]) -> Result<Vec<JobRow>, StoreError> {
        (**self).jobs(states)
    }
    fn next_job_id(&self) -> Result<u64, StoreError> {
        (**self).next_job_id()
    }
    fn rebuild(&mut self) -> Result<(), StoreError> {
        (**self).rebuild()
    }
    fn put_token(&mut self, token: &TokenRecord) -> Result<(), StoreError> {
        (**self).put_token(token)
    }
    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        (**self).token_by_hash(hash)
    }
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        (**self).tokens()
    }
    fn revoke_token(&mut self, name: &str) -> Result<bool, StoreError> {
        (**self).revoke_token(name)
    }
    fn set_drained(&mut self, node: &str, drained: bool) -> Result<(), StoreError> {
        (**self).set_drained(node, drained)
    }
    fn drained(&self) -> Result<Vec<String>, StoreError> {
        (**self).drained()
    }
    fn set_gpu_mode(&mut self, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError> {
        (**self).set_gpu_mode(node, gpu, mode)
    }
    fn gpu_modes(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        (**self).gpu_modes()
    }
    fn reconfigurations(&self, finished: usize) -> Result<Vec<(u64, String)>, StoreError> {
        (**self).reconfigurations(finished)
    }
    fn add_usage(&mut self, rows: &[UsageRow]) -> Result<(), StoreError> {
        (**self).add_usage(rows)
    }
    fn usage(&self, from_s: u64, to_s: u64) -> Result<Vec<UsageRow>, StoreError> {
        (**self).usage(from_s, to_s)
    }
    fn put_series_point(&mut self, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError> {
        (**self).put_series_point(t_s, point, keep_from_s)
    }
    fn series_points(&self, from_s: u64) -> Result<Vec<(u64, String)>, StoreError> {
        (**self).series_points(from_s)
    }
    fn opens(&self) -> Result<Vec<OpenRecord>, StoreError> {
        (**self).opens()
    }
}

/// `row` after `event` (`None`: a job not seen before): the one derivation of the `jobs`
/// table from the log, for backends and for the controller's own copy in memory.
pub fn apply_event(row: Option<&JobRow>, event: &Event) -> Result<JobRow, StoreError> {
    let next = transition(row.map(|r| r.state), event)?;
    let mut row = match (row, event) {
        (None, Event::Submitted { id, at_s, job }) => JobRow {
            id: *id,
            name: job.name.clone(),
            queue: job.queue.clone(),
            state: next,
            submitted_at_s: *at_s,
            started_at_s: None,
            ended_at_s: None,
            exit_code: None,
            requeues: 0,
            job: (**job).clone(),
            tasks: Vec::new(),
            outcome: Outcome::default(),
        },
        (Some(row), _) => row.clone(),
        (None, _) => unreachable!("transition refuses any first event but submitted"),
    };
    row.state = next;
    row.outcome = row.outcome.after(event);
    match event {
        Event::Submitted { .. } => {}
        Event::Started { at_s, tasks, .. } => {
            row.started_at_s = Some(*at_s);
            row.tasks = tasks.clone();
        }
        Event::Ended { at_s, exit_code, .. } => {
            row.ended_at_s = Some(*at_s);
            row.exit_code = *exit_code;
        }
        Event::Requeued { .. } => row.requeues += 1,
        Event::Held { held, .. } => row.job.control.hold = *held,
    }
    Ok(row)
}

/// The state a job moves to on `event`, or a conflict. `current` is `None` for a job the
/// store has never seen.
pub fn transition(current: Option<JobState>, event: &Event) -> Result<JobState, StoreError> {
    use JobState::*;
    let next = match (current, event) {
        (None, Event::Submitted { .. }) => Some(Pending),
        (Some(Pending), Event::Started { .. }) => Some(Running),
        (Some(Running), Event::Requeued { .. }) => Some(Pending),
        (Some(Pending), Event::Held { .. }) => Some(Pending),
        (Some(Pending), Event::Ended { ending: gantry_types::Ending::Cancelled, .. }) => Some(Cancelled),
        (Some(Running), Event::Ended { ending, .. }) => Some(ending.state()),
        _ => None,
    };
    next.ok_or_else(|| StoreError::Conflict {
        id: event.job_id(),
        event: event.kind(),
        state: current.map_or("unknown", JobState::name).to_string(),
    })
}
