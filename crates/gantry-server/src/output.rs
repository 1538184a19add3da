//! Task output on remote nodes, read through the controller: a reader's request (already
//! authorized, `api::logs`) becomes a [`LogRead`] waiting for its node; the node's agent gets
//! it with its next heartbeat's orders (its held heartbeat is woken) and answers with a
//! [`LogChunk`] (`POST /v1/agents/{node}/logs`), which goes to the waiting reader. Nothing of
//! this is a command: output is not the controller's state, and never enters its log.
//!
//! Bounded: at most [`LOG_READS_MAX`] reads wait per node (more: 429), each at most
//! [`LOG_READ_BYTES_MAX`] bytes, each given up after [`OUTPUT_WAIT`]; an agent may answer
//! only its own node's reads, and an answer carrying more than was asked is refused.

use crate::error::ControlError;
use gantry_wire::{LOG_READ_BYTES_MAX, LOG_READS_MAX, LogChunk, LogRead};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a reader waits for a node's agent (the API's figure, which clients wait for).
pub const OUTPUT_WAIT: Duration = gantry_api::connection::OUTPUT_WAIT;

/// One read waiting for its node's answer.
#[derive(Debug)]
struct Waiting {
    node: String,
    read: LogRead,
    reader: oneshot::Sender<LogChunk>,
}

/// The reads waiting for agents, by id.
#[derive(Debug, Default)]
pub struct OutputReads {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    waiting: BTreeMap<u64, Waiting>,
}

/// What an agent's answer did.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// It went to its reader.
    Delivered,
    /// Its reader had given up (or it was answered already): dropped.
    Late,
}

impl OutputReads {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("not poisoned")
    }

    /// Queue `read` for `node` (its id is given here); the receiver gets the agent's answer.
    pub fn ask(&self, node: &str, mut read: LogRead) -> Result<(u64, oneshot::Receiver<LogChunk>), ControlError> {
        let mut inner = self.lock();
        let queued = inner.waiting.values().filter(|w| w.node == node).count();
        if queued >= LOG_READS_MAX {
            return Err(ControlError::TooMany {
                limit: "log_reads",
                value: LOG_READS_MAX as u64,
                message: format!("node {node:?} has {queued} output reads waiting already; try again in a moment"),
            });
        }
        inner.next_id += 1;
        read.id = inner.next_id;
        read.max_bytes = read.max_bytes.min(LOG_READ_BYTES_MAX);
        let (reader, answer) = oneshot::channel();
        inner.waiting.insert(read.id, Waiting { node: node.to_string(), read, reader });
        Ok((inner.next_id, answer))
    }

    /// The reads `node`'s agent has to answer (they stay until answered or given up: an
    /// answer lost on the way is asked for again).
    pub fn for_node(&self, node: &str) -> Vec<LogRead> {
        self.lock().waiting.values().filter(|w| w.node == node).map(|w| w.read.clone()).collect()
    }

    /// The reader of `id` stops waiting.
    pub fn give_up(&self, id: u64) {
        self.lock().waiting.remove(&id);
    }

    /// `node`'s agent answers: only its own node's reads, with no more than was asked.
    pub fn answer(&self, node: &str, chunk: LogChunk) -> Result<Answered, ControlError> {
        let mut inner = self.lock();
        let Some(waiting) = inner.waiting.get(&chunk.id) else { return Ok(Answered::Late) };
        if waiting.node != node {
            return Err(ControlError::Forbidden(format!(
                "output read {} is not for node {node:?}: an agent answers only its own node's reads",
                chunk.id
            )));
        }
        if chunk.error.is_none() {
            let bytes = chunk
                .bytes()
                .ok_or_else(|| chunk_refused(node, "data", "an output chunk's data is not base64".into()))?;
            let asked = waiting.read.max_bytes;
            if bytes.len() as u64 > asked {
                let message = format!("an output chunk of {} bytes answers a read of at most {asked}", bytes.len());
                return Err(chunk_refused(node, "data", message));
            }
            if waiting.read.offset.is_some_and(|at| at != chunk.offset) {
                return Err(chunk_refused(node, "offset", "an output chunk from another offset than asked".into()));
            }
        }
        let waiting = inner.waiting.remove(&chunk.id).expect("looked up above");
        Ok(if waiting.reader.send(chunk).is_ok() { Answered::Delivered } else { Answered::Late })
    }

    /// Reads waiting, all nodes together (the metrics' and tests' view).
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// An output chunk `node`'s agent sent that does not answer what was asked.
fn chunk_refused(node: &str, field: &'static str, message: String) -> ControlError {
    ControlError::Agent { node: node.to_string(), field, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_wire::LogStream;

    fn read(offset: Option<u64>) -> LogRead {
        LogRead { id: 0, job: 1, attempt: 0, rank: 0, stream: LogStream::Out, offset, max_bytes: u64::MAX }
    }

    #[test]
    fn an_agent_answers_its_own_nodes_reads_within_what_was_asked() {
        let reads = OutputReads::default();
        let (id, mut answer) = reads.ask("n1", read(Some(5))).expect("queued");
        let queued = reads.for_node("n1");
        assert_eq!((queued.len(), queued[0].id, queued[0].max_bytes), (1, id, LOG_READ_BYTES_MAX), "bounded");
        assert!(reads.for_node("n2").is_empty());
        // Another node's agent: refused, the read still waits.
        let theirs = LogChunk::new(id, 5, 9, b"evil");
        assert!(matches!(reads.answer("n2", theirs), Err(ControlError::Forbidden(_))));
        // More than asked, another offset, not base64: refused.
        let big = LogChunk::new(id, 5, 1 << 30, &vec![b'x'; LOG_READ_BYTES_MAX as usize + 1]);
        assert!(matches!(reads.answer("n1", big), Err(ControlError::Agent { .. })));
        assert!(matches!(reads.answer("n1", LogChunk::new(id, 6, 9, b"abc")), Err(ControlError::Agent { .. })));
        let garbled = LogChunk { data: "%%%".into(), ..LogChunk::new(id, 5, 9, b"") };
        assert!(matches!(reads.answer("n1", garbled), Err(ControlError::Agent { .. })));
        assert!(answer.try_recv().is_err(), "nothing delivered yet");
        assert_eq!(reads.answer("n1", LogChunk::new(id, 5, 9, b"abcd")).ok(), Some(Answered::Delivered));
        assert_eq!(answer.try_recv().expect("delivered").bytes(), Some(b"abcd".to_vec()));
        assert_eq!(reads.answer("n1", LogChunk::new(id, 5, 9, b"abcd")).ok(), Some(Answered::Late), "once only");
        assert_eq!(reads.waiting(), 0);
    }

    #[test]
    fn reads_per_node_are_bounded_and_given_up() {
        let reads = OutputReads::default();
        let ids: Vec<u64> = (0..LOG_READS_MAX).map(|_| reads.ask("n1", read(None)).expect("queued").0).collect();
        let err = reads.ask("n1", read(None)).expect_err("full");
        assert!(matches!(err, ControlError::TooMany { limit: "log_reads", .. }), "{err}");
        reads.ask("n2", read(None)).expect("another node has its own room");
        reads.give_up(ids[0]);
        reads.ask("n1", read(None)).expect("room again");
        assert_eq!(reads.answer("n1", LogChunk::new(ids[0], 0, 0, b"")).ok(), Some(Answered::Late));
    }
}
