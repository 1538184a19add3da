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

/// Why a task was refused before it ran (it fails with 126, this in its error log): the
/// account it must run as, its environment, its working directory, its confinement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefused {
    /// The Unix account it must run as is not this agent's user, does not exist here, or was
    /// not named.
    #[error("{message}")]
    Account { account: String, message: String },
    /// A job variable whose name is not a variable name.
    #[error("the job's variable {name:?} is not a variable name")]
    Env { name: String },
    /// Its working directory does not exist on this node.
    #[error("the working directory {dir} does not exist on node {node}")]
    Workdir { dir: String, node: String },
    /// Its cgroup could not be made, held to its run's limits, given its device rules, or
    /// joined: which cgroup, and why.
    #[error("cannot confine it on node {node}: {message}")]
    Confine { node: String, cgroup: String, message: String },
}

/// A device rule that could not be set, or a fake device node that could not be made: where
/// (a cgroup, a device path, a system call), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DeviceError {
    pub at: String,
    pub message: String,
}

impl DeviceError {
    pub fn new(at: impl Into<String>, message: impl Into<String>) -> DeviceError {
        DeviceError { at: at.into(), message: message.into() }
    }
}

/// Why `gantry agent` cannot start: which node it serves and its GPUs, where its layout orders
/// go, its token. Each says what to pass instead.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The inventory file has no node by the name asked for.
    #[error("{}: no node {node:?} (it has: {})", file.display(), known.join(", "))]
    NoSuchNode { file: std::path::PathBuf, node: String, known: Vec<String> },
    /// The inventory file has several nodes and none was named.
    #[error("{} has {} nodes: pick one with --node ({})", file.display(), known.len(), known.join(", "))]
    WhichNode { file: std::path::PathBuf, known: Vec<String> },
    /// No inventory file, and NVML found no GPU.
    #[error("{0}: pass --inventory FILE (a fleet file; --node picks its node)")]
    NoGpus(crate::discover::Unavailable),
    /// The data directory that holds the simulated MIG hardware could not be made.
    #[error("cannot create data directory {}", dir.display())]
    DataDir { dir: std::path::PathBuf, source: std::io::Error },
    /// The simulated MIG hardware could not be read or written.
    #[error("--fake-mig: {0}")]
    FakeMig(crate::mig::MigError),
    /// A token on the command line, which every user of the machine can read.
    #[error(
        "the agent takes its token from --token-file FILE or $GANTRY_TOKEN, not from --token: \
         a command line is readable by every user of the machine"
    )]
    TokenOnCommandLine,
    /// The token file could not be read.
    #[error("cannot read {}", file.display())]
    TokenFile { file: std::path::PathBuf, source: std::io::Error },
    /// Neither a token file nor `$GANTRY_TOKEN`.
    #[error(
        "no token: pass --token-file FILE or set $GANTRY_TOKEN (gantry token create NAME --role agent --node NODE)"
    )]
    NoToken(#[source] std::env::VarError),
    #[error("the agent token is empty")]
    EmptyToken,
}
