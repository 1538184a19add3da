//! What a command or a view can get wrong, as data: the state machine and the views return
//! these; only the API layer turns them into HTTP status codes (`api::status_of`).

use gantry_store::StoreError;

/// A setting or a name that cannot be used: the field it is in (`reconfigure.period`,
/// `users.alice`, `advertise`) and what is wrong, in words that name it too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), message: message.into() }
    }
}

/// Why the controller could not start: its configuration, its files, its store.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting out of range (`[billing]`, `[idle]`, the listen address).
    #[error("{0}")]
    Config(String),
    /// The data directory, `admin.token`, the random source.
    #[error("{0}")]
    Io(String),
    // Its messages say "store" themselves; transparent, so a chain printer says them once.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Control(#[from] ControlError),
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A workload that does not parse or check: gantry-spec's refusal, with the job, the
    /// field and a hint. Nothing changed.
    #[error(transparent)]
    Workload(gantry_spec::SpecError),
    /// A job this controller cannot take as given: it can never fit the fleet, names a queue
    /// or a dependency it does not know, or belongs to a user who cannot run here.
    #[error("{message}")]
    Job { job: String, field: &'static str, message: String },
    /// The request's own form: its body, a header, a path or query parameter.
    #[error("{message}")]
    Request { field: &'static str, message: String },
    /// A token's fields, on creation.
    #[error("{message}")]
    TokenField { field: &'static str, message: String },
    /// What an agent says does not fit its node or what was asked of it: its protocol, its
    /// GPUs or their layout, an output chunk.
    #[error("{message}")]
    Agent { node: String, field: &'static str, message: String },
    /// An entry of the command log (or the checkpoint in it) that does not read.
    #[error("{message}")]
    Log { seq: Option<u64>, message: String },
    /// The controller's own setup: a backfill name, a fleet the engine refuses.
    #[error("{message}")]
    Setup { field: &'static str, message: String },
    #[error("no job {0}")]
    UnknownJob(u64),
    /// A job's task by a name it does not have.
    #[error("{0}")]
    UnknownTask(String),
    #[error("{0}")]
    UnknownNode(String),
    #[error("no token {0:?}")]
    UnknownToken(String),
    #[error("a token named {0:?} exists already")]
    TokenExists(String),
    /// No token, or one the controller does not know.
    #[error("{0}")]
    Unauthenticated(String),
    /// A token that may not do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("job {id} has already ended ({state})")]
    JobEnded { id: u64, state: &'static str },
    /// A request over an admission limit of size (`admission.rs`): nothing stored.
    #[error("{message}: over the limit {limit} = {value}")]
    TooLarge { limit: &'static str, value: u64, message: String },
    /// A request over an admission limit of backlog (pending jobs per user or queue):
    /// nothing stored; it may succeed once jobs have started or ended.
    #[error("{message}: over the limit {limit} = {value}")]
    TooMany { limit: &'static str, value: u64, message: String },
    /// The command does not fit the controller's state (an agent of a node that has not
    /// registered, a remote agent against an in-process one).
    #[error("{0}")]
    Conflict(String),
    /// The client sent its request too slowly (a body past its read timeout).
    #[error("{0}")]
    TooSlow(String),
    /// The store failed: what was applied is not durable; the controller takes no more
    /// commands until it is restarted (and recovers from the store).
    #[error("the store failed ({0}); restart the controller: it recovers from what was committed")]
    StoreFailed(String),
    /// The store's disk is full: nothing changed; commands are taken again, by themselves,
    /// once there is space.
    #[error(
        "the controller takes no changes now: {0}; reads still work, and changes are taken again once there is space"
    )]
    StoreFull(String),
    // Its messages say "store" themselves; transparent, so a chain printer says them once.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The scheduler refused: its own typed reason (`api::status_of` maps each).
    #[error("{0}")]
    Sched(#[from] gantry_engine::sched::SchedError),
    /// A broken invariant: a bug, reported rather than hidden.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ControlError {
    /// The field a refusal is about, where it names one (the API answers it beside the
    /// message).
    pub fn field(&self) -> Option<String> {
        match self {
            ControlError::Workload(e) => (!e.field.is_empty()).then(|| e.field.clone()),
            ControlError::Job { field, .. }
            | ControlError::Request { field, .. }
            | ControlError::TokenField { field, .. }
            | ControlError::Agent { field, .. }
            | ControlError::Setup { field, .. } => Some(field.to_string()),
            _ => None,
        }
    }

    /// What to do about it, where the refusal knows.
    pub fn hint(&self) -> Option<String> {
        match self {
            ControlError::Workload(e) => e.hint.clone(),
            _ => None,
        }
    }

    /// A refusal of the request's own form.
    pub fn request(field: &'static str, message: impl Into<String>) -> ControlError {
        ControlError::Request { field, message: message.into() }
    }
}
