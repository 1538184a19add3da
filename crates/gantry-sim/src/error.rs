//! What a replay or a generator refuses, as data at the crate's boundary: input it cannot take
//! (a trace, a scenario, a synthetic mix — the message says which field or line), or the
//! engine's and the scheduler's own typed refusals.

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The input does not fit: a job no node could ever hold, a model the catalog lacks, a
    /// setting out of range.
    #[error("{0}")]
    Input(String),
    /// A trace or reference file that cannot be read.
    #[error(transparent)]
    Trace(#[from] crate::TraceError),
    #[error(transparent)]
    Engine(#[from] gantry_engine::EngineError),
    #[error(transparent)]
    Sched(#[from] gantry_engine::sched::SchedError),
    /// The MIG planner refused (a fleet or demand it cannot plan for).
    #[error(transparent)]
    Plan(#[from] gantry_engine::plan::PlanError),
}

impl From<String> for SimError {
    fn from(message: String) -> Self {
        SimError::Input(message)
    }
}

impl From<&str> for SimError {
    fn from(message: &str) -> Self {
        SimError::Input(message.to_string())
    }
}
