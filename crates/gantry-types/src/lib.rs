//! Plain data shared by every gantry crate.
//!
//! The key decision: everything here is inert data (serde only) — no I/O, no clock, no async — so
//! the engine, the simulator, the controller and the CLI can all exchange the same values and a
//! decision can be written down and replayed bit for bit. Validation lives where the knowledge
//! is (`gantry-spec` for files, `gantry-catalog` for MIG geometry); these types only promise
//! their units.

pub mod event;
pub mod fleet;
pub mod job;
pub mod job_row;
pub mod outcome;
pub mod partition;
pub mod pending;
pub mod preemption;
pub mod quantity;
pub mod queue;
pub mod text;
pub mod time;
pub mod token;

pub use event::{
    CANCELLED_BY_CONTROLLER, Ending, Event, JobState, NodeUse, OomKill, STEP_NAME_CHARS_MAX, STEP_RECORDS_FLAG,
    STEPS_MAX, StepRecord, TaskStart, Use,
};
pub use fleet::{Fleet, Gpu, GpuMode, MigInstanceSpec, Node, Taint};
pub use job::{
    ArrayElement, Dependency, DependencyKind, GRACE_DEFAULT_S, GpuRequest, Isolation, Job, JobControl, Lifecycle,
    ModelPattern, Purpose, Run, ShareMode, TaskGroup, TaskResources, Topology, TopologyLevel, UnitHint,
};
pub use job_row::{JobRow, Outcome};
pub use outcome::{GpuGrant, JobOutcome, Reason, ReasonCount, TaskPlacement, add_reason, add_reason_ref, add_reasons};
pub use partition::{DEFAULT_QUEUE, PlaceRefusal, QOS_DEFAULT, nodes_asked};
pub use pending::{ClassFree, PendingJob, PendingReason, REASON_CATEGORIES};
pub use preemption::PreemptionRules;
pub use quantity::{Bytes, MilliCpu, MilliGpu};
pub use queue::{
    Flavor, GREEDY_RESERVE_AFTER_DEFAULT_S, Partition, PriorityRange, Qos, QueueSpec, QueueTree, Quota,
    RECLAIM_PROTECT_DEFAULT_S, UserLimit,
};
pub use token::{Role, TokenRecord};
