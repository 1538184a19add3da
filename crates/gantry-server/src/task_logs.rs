//! Where a task's output is, and reading it when its agent runs in this process
//! (`serve --local`): by the task's rank in its run, through the agent's own checked file
//! access (`gantry_agent::files`: no name from a job becomes a path, no symlink is followed,
//! no FIFO can block the reader), at most [`LOG_BYTES_MAX`] from the end.

use gantry_agent::files::{JobDir, Kind};
use gantry_store::JobRow;
use gantry_types::JobState;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The most of one stream of one task returned at once: the end of it (a job that printed
/// gigabytes would otherwise be read whole into the controller's memory per request).
pub const LOG_BYTES_MAX: u64 = 8 << 20;

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

/// Where task `rank` of `row`'s shown run keeps `kind`, relative to its agent's data directory.
pub fn relative(row: &JobRow, rank: u32, kind: Kind) -> String {
    gantry_agent::files::relative_path(row.id, shown_attempt(row), rank, kind)
}

/// Task `rank`'s stream `kind` (the end of it, see [`LOG_BYTES_MAX`]), from the in-process
/// agent of `node`: empty when there is none yet; a note when it cannot be read.
pub fn read_local(data_dir: &Path, node: &str, row: &JobRow, rank: u32, kind: Kind) -> String {
    let Ok(agent_dir) = std::fs::canonicalize(node_dir(data_dir, node)) else { return String::new() };
    let opened = JobDir::open(&agent_dir, row.id, shown_attempt(row), false).and_then(|d| d.open_log(rank, kind));
    let mut file = match opened {
        Ok(Some(file)) => file,
        Ok(None) => return String::new(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return String::new(),
        Err(e) => return format!("gantry: this log cannot be read: {e}\n"),
    };
    let size = file.metadata().map_or(0, |m| m.len());
    let mut text = String::new();
    if size > LOG_BYTES_MAX {
        let _ = file.seek(SeekFrom::Start(size - LOG_BYTES_MAX));
        text = format!(
            "gantry: the first {} bytes are left out (only the last {LOG_BYTES_MAX} are shown)\n",
            size - LOG_BYTES_MAX
        );
    }
    let mut bytes = Vec::new();
    let _ = file.take(LOG_BYTES_MAX).read_to_end(&mut bytes);
    text.push_str(&String::from_utf8_lossy(&bytes));
    text
}
