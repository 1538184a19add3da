//! Where a task's output is, and reading it for the API and the dashboard: from the files of
//! an agent in this process (`serve --local`), or through a remote node's agent
//! ([`crate::output`]). Both read by the task's rank in its run with the agent's own checked
//! file access ([`gantry_agent::output`]), at most [`gantry_wire::LOG_READ_BYTES_MAX`] per
//! stream per request. Who may read is decided before (`Principal::reads_logs_of`).

use crate::Shared;
pub use gantry_api::logs::LogPiece;
use gantry_store::JobRow;
use gantry_types::JobState;
use gantry_wire::{LOG_READ_BYTES_MAX, LogRead, LogStream};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Tasks one request reads when it names none: a job of more (a large gang) is read a task
/// at a time (`?task=GROUP/REPLICA`), not by asking every node at once.
pub const LOG_TASKS_MAX: usize = 64;

/// An in-process agent's data directory (claims, task logs under `jobs/<id>/<attempt>/`,
/// MPS pipes, fake devices).
pub fn node_dir(data_dir: &Path, node: &str) -> PathBuf {
    data_dir.join("nodes").join(node)
}

/// Which run of the job `row.tasks` describes: its latest start (a job requeued and waiting
/// again still lists where its last run was).
pub fn shown_attempt(row: &JobRow) -> u32 {
    if row.state == JobState::Pending { row.requeues.saturating_sub(1) } else { row.requeues }
}

/// Where task `rank` of `row`'s shown run keeps `stream`, relative to its agent's data directory.
pub fn relative(row: &JobRow, rank: u32, stream: LogStream) -> String {
    gantry_agent::files::relative_path(row.id, shown_attempt(row), rank, gantry_agent::output::kind(stream))
}

/// Which output to read.
#[derive(Clone, Debug)]
pub struct Want {
    /// Tasks by rank in the shown run.
    pub ranks: Vec<u32>,
    pub streams: Vec<LogStream>,
    /// From this byte of the one stream asked for; `None`: the end of each.
    pub offset: Option<u64>,
}

/// Read what `want` names of `row`'s shown run, task by task, stdout before stderr. The
/// agents have [`crate::output::OUTPUT_WAIT`] for the whole request, not each piece: a client
/// knows how long an answer may take.
pub async fn read(shared: &Shared, row: &JobRow, want: &Want) -> Vec<LogPiece> {
    let deadline = tokio::time::Instant::now() + crate::output::OUTPUT_WAIT;
    let mut pieces = Vec::new();
    // A node that failed once in this request is not asked again for its next tasks.
    let mut failed: BTreeMap<String, String> = BTreeMap::new();
    for &rank in &want.ranks {
        let Some(task) = row.tasks.get(rank as usize) else { continue };
        for &stream in &want.streams {
            let mut piece = LogPiece {
                task: format!("{}/{}", task.group, task.replica),
                node: task.node.clone(),
                stream: stream.name().into(),
                ..LogPiece::default()
            };
            let read = LogRead {
                id: 0,
                job: row.id,
                attempt: shown_attempt(row),
                rank,
                stream,
                offset: want.offset,
                max_bytes: LOG_READ_BYTES_MAX,
            };
            let got = match failed.get(&task.node) {
                Some(why) => Err(why.clone()),
                None if shared.local => read_local(&shared.data_dir, &task.node, &read),
                None => read_remote(shared, &task.node, read, deadline).await,
            };
            match got {
                Ok(part) => fill(&mut piece, part, want.offset.is_none()),
                Err(why) => {
                    failed.insert(task.node.clone(), why.clone());
                    piece.note = Some(format!("{why} (on the node: {})", relative(row, rank, stream)));
                }
            }
            pieces.push(piece);
        }
    }
    pieces
}

fn fill(piece: &mut LogPiece, part: gantry_agent::output::Piece, from_end: bool) {
    piece.offset = part.offset;
    piece.end = part.end();
    piece.size = part.size;
    piece.text = String::from_utf8_lossy(&part.bytes).into_owned();
    if from_end && part.offset > 0 {
        piece.note = Some(format!(
            "the first {} bytes are left out (at most {LOG_READ_BYTES_MAX} are read at once)",
            part.offset
        ));
    }
}

/// From the files of `node`'s agent in this process.
fn read_local(data_dir: &Path, node: &str, read: &LogRead) -> Result<gantry_agent::output::Piece, String> {
    let Ok(agent_dir) = std::fs::canonicalize(node_dir(data_dir, node)) else {
        return Ok(gantry_agent::output::Piece::default());
    };
    gantry_agent::output::read_piece(
        &agent_dir,
        (read.job, read.attempt, read.rank),
        read.stream,
        read.offset,
        read.max_bytes,
    )
    .map_err(|e| format!("this output cannot be read: {e}"))
}

/// Through `node`'s agent: asked with its next heartbeat's orders (its held one woken), until
/// `deadline` at most.
async fn read_remote(
    shared: &Shared,
    node: &str,
    read: LogRead,
    deadline: tokio::time::Instant,
) -> Result<gantry_agent::output::Piece, String> {
    if let Some(why) = shared.read(|c| c.output_unavailable(node, crate::now_s())) {
        return Err(why);
    }
    let (id, answer) = shared.output.ask(node, read).map_err(|e| e.to_string())?;
    shared.agents_wake.of(node).notify_waiters();
    let answered = tokio::time::timeout_at(deadline, answer).await;
    shared.output.give_up(id);
    let chunk = match answered {
        Ok(Ok(chunk)) => chunk,
        _ => {
            return Err(format!(
                "node {node}'s agent did not answer within {} s: it may be stuck or cut off",
                crate::output::OUTPUT_WAIT.as_secs()
            ));
        }
    };
    if let Some(error) = chunk.error {
        return Err(format!("node {node}: {error}"));
    }
    let bytes = chunk.bytes().ok_or_else(|| format!("node {node}'s agent answered with garbled data"))?;
    Ok(gantry_agent::output::Piece { offset: chunk.offset, size: chunk.size, bytes })
}

/// The last `lines` lines of `text` (all when it has fewer).
pub fn last_lines(text: &str, lines: usize) -> &str {
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(lines.saturating_sub(1)) {
        Some((at, _)) if lines > 0 => &text[at + 1..],
        _ if lines == 0 => "",
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_of_a_text() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\n", 5), "a\nb\n");
        assert_eq!(last_lines("a\nb\n", 0), "");
        assert_eq!(last_lines("", 3), "");
        assert_eq!(last_lines("only", 1), "only");
    }
}
