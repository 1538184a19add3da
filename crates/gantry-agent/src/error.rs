//! Why the agent stopped, or never started: one error type for its loop, its claims and its
//! settings, so that its modules can share it without depending on one another.

/// Why the agent stopped (or never started).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its own settings: the node name, the data directory.
    #[error("{0}")]
    Config(String),
    /// The controller said no for good (a wrong token, an unknown node, other GPUs).
    #[error("the controller refused this agent ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The two sides do not speak the same protocol version.
    #[error("{0}")]
    Protocol(String),
    /// Reading or writing its own files (claims, task state).
    #[error("{0}")]
    Io(String),
}
