//! Following a job's output while it runs: each look asks for the job and, for each of its
//! tasks, what each stream gained since the last look (a task not read yet: its end, or its
//! last lines). `gantry logs -f` prints the pieces under headers; `srun` and `salloc` run
//! outside a job print them raw, as if the job ran here. One follower per job; a requeued
//! job's new run is read from its start.

use crate::connection::{CallError, Connection};
use crate::queries::{LogsQuery, Query};
use crate::{JobView, LogPiece, LogsView};
use gantry_wire::LogStream;
use std::collections::BTreeMap;

/// A look that failed: the controller could not be asked, or answered what this client
/// does not read.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("the controller's {0} reply is not what this client reads: {1}")]
    Reply(&'static str, serde_json::Error),
}

/// Where one job's output was read up to.
#[derive(Debug)]
pub struct Follower {
    job: u64,
    /// Only this task (`GROUP/REPLICA`), else all.
    task: Option<String>,
    /// Only this stream, else both.
    stream: Option<LogStream>,
    /// A task's first read: only its last this many lines.
    tail: Option<u32>,
    /// (attempt, task, stream) → the byte the next read starts at.
    cursors: BTreeMap<(u64, String, String), u64>,
}

impl Follower {
    pub fn new(job: u64, task: Option<String>, stream: Option<LogStream>, tail: Option<u32>) -> Follower {
        Follower { job, task, stream, tail, cursors: BTreeMap::new() }
    }

    /// The job as it is now, and what its tasks wrote since the last look, task by task.
    /// Once the job shows as ended, one more look has all it wrote.
    pub fn look(&mut self, conn: &Connection) -> Result<(JobView, Vec<LogPiece>), FollowError> {
        let job: JobView = decode("job", conn.call("GET", &format!("/v1/jobs/{}", self.job), None, &[])?)?;
        let attempt = u64::from(job.row.requeues);
        let tasks: Vec<String> = job
            .row
            .tasks
            .iter()
            .map(|t| format!("{}/{}", t.group, t.replica))
            .filter(|t| self.task.as_ref().is_none_or(|want| want == t))
            .collect();
        let mut out = Vec::new();
        for task in &tasks {
            for piece in self.next_pieces(conn, attempt, task)? {
                self.cursors.insert((attempt, task.clone(), piece.stream.clone()), piece.end);
                out.push(piece);
            }
        }
        Ok((job, out))
    }

    /// What `task` wrote since this attempt's cursors.
    fn next_pieces(&self, conn: &Connection, attempt: u64, task: &str) -> Result<Vec<LogPiece>, FollowError> {
        let known: Vec<(LogStream, u64)> = self
            .cursors
            .iter()
            .filter(|((a, t, _), _)| *a == attempt && t == task)
            .map(|((_, _, s), at)| (if s == "out" { LogStream::Out } else { LogStream::Err }, *at))
            .collect();
        let query = |stream, offset, tail| LogsQuery {
            format: Some("json".into()),
            task: Some(task.to_string()),
            stream,
            offset,
            tail,
        };
        if known.is_empty() {
            return self.read(conn, &query(self.stream, None, self.tail));
        }
        let mut pieces = Vec::new();
        for (stream, at) in known {
            pieces.extend(self.read(conn, &query(Some(stream), Some(at), None))?);
        }
        Ok(pieces)
    }

    fn read(&self, conn: &Connection, query: &LogsQuery) -> Result<Vec<LogPiece>, FollowError> {
        let path = format!("/v1/jobs/{}/logs{}", self.job, query.to_query());
        let view: LogsView = decode("logs", conn.call("GET", &path, None, &[])?)?;
        Ok(view.pieces)
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &'static str, value: serde_json::Value) -> Result<T, FollowError> {
    serde_json::from_value(value).map_err(|e| FollowError::Reply(what, e))
}
