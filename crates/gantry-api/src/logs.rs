//! A job's output as `GET /v1/jobs/{id}/logs?format=json` returns it: a piece of each task's
//! stream, with where the next read goes on from.

use serde::{Deserialize, Serialize};

/// Part of one task's stream, as a reader gets it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogPiece {
    /// `GROUP/REPLICA`.
    pub task: String,
    pub node: String,
    /// `out` or `err`.
    pub stream: String,
    /// Where `text` starts in the stream (bytes).
    pub offset: u64,
    /// Where the next read goes on from (bytes; `offset` when nothing was read).
    pub end: u64,
    /// The stream's size when read (bytes).
    pub size: u64,
    /// The bytes read, as UTF-8 (what is not UTF-8 replaced by U+FFFD).
    pub text: String,
    /// Why nothing could be read (the node is down, its agent did not answer), or what was
    /// left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `?format=json`: each stream's piece, and how many tasks were left out.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogsView {
    pub pieces: Vec<LogPiece>,
    /// Tasks not read (a job of more than 64 tasks, no `task` named).
    pub tasks_left_out: usize,
}
