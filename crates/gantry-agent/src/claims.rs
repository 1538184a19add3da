//! A task never runs twice: before starting a task the agent *claims* it on disk
//! (`jobs/<job>/<attempt>/<rank>.claim`, created exclusively, through [`crate::files`]), so a
//! repeated launch order — the controller repeats it until the task is reported — finds the
//! claim and reports the task instead. An agent that restarts reads its claims back: a task
//! still alive (its cgroup holds a process; unconfined, its process group) is watched again
//! (re-adopted), one that left an exit file is reported exited, one that did neither is
//! reported lost. A claim keeps what its task was granted, so a re-adopted run is held to
//! the same limits.

use crate::error::AgentError;
use crate::files::{JobDir, Kind};
use crate::runner::{Grant, Runner};
use gantry_wire::{TaskKey, TaskState};
use std::path::Path;

/// A claim file's content.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    pub key: TaskKey,
    /// The task's rank in its run (its files' name).
    #[serde(default)]
    pub rank: u32,
    pub devices: Vec<String>,
    #[serde(default)]
    pub grant: Grant,
    /// The controller has recorded its end; it is no longer reported (the claim stays, so a
    /// late repeat of its launch still does not run it again).
    #[serde(default)]
    pub forgotten: bool,
}

fn io(path: &Path, e: impl std::fmt::Display) -> AgentError {
    AgentError::Io(format!("{}: {e}", path.display()))
}

/// Claim a task: `Ok(false)` if it was claimed before (this agent restarted, or the task was
/// forgotten).
pub fn claim(data_dir: &Path, claim: &Claim) -> Result<bool, AgentError> {
    let dir = JobDir::open(data_dir, claim.key.job, claim.key.attempt, true).map_err(|e| io(data_dir, e))?;
    let text = serde_json::to_string(claim).map_err(|e| AgentError::Io(e.to_string()))?;
    dir.create_new(claim.rank, Kind::Claim, &text).map_err(|e| io(&dir.file_path(claim.rank, Kind::Claim), e))
}

/// Mark a claim forgotten (its task's end is recorded by the controller).
pub fn forget(data_dir: &Path, key: &TaskKey, rank: u32) {
    let Ok(dir) = JobDir::open(data_dir, key.job, key.attempt, false) else { return };
    let Some(mut claim) =
        dir.read(rank, Kind::Claim).ok().flatten().and_then(|t| serde_json::from_str::<Claim>(&t).ok())
    else {
        return;
    };
    claim.forgotten = true;
    if let Ok(text) = serde_json::to_string(&claim) {
        let _ = dir.replace(rank, Kind::Claim, &text);
    }
}

/// A claimed task as a restarted agent finds it.
#[derive(Debug)]
pub struct Recovered {
    pub claim: Claim,
    pub state: TaskState,
}

/// Is a process running that was started for this pid file (it has `GANTRY_PID_FILE=<path>`
/// in its environment)? Reads `/proc/*/environ` (this user's processes).
fn started_process(pid_file: &Path) -> bool {
    let needle = format!("GANTRY_PID_FILE={}", pid_file.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())
            && std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
    })
}

/// Wait up to `limit` for the monitor to write its pid file.
fn wait_for_pid(dir: &JobDir, rank: u32, limit: std::time::Duration) {
    let deadline = std::time::Instant::now() + limit;
    while !dir.exists(rank, Kind::Pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Read back the claims of an earlier run of this agent, and how each task stands. A claim
/// whose task never started (the agent stopped between claiming and starting it) is
/// released, and not returned: the controller sees the task missing and offers it again.
pub fn recover(data_dir: &Path, runner: &Runner) -> Result<Vec<Recovered>, AgentError> {
    let (runs, legacy) = crate::files::runs_on_disk(data_dir);
    let mut found = Vec::new();
    for (job, attempt) in runs {
        let dir = JobDir::open(data_dir, job, attempt, false).map_err(|e| io(data_dir, e))?;
        for rank in dir.claimed_ranks().map_err(|e| io(dir.path(), e))? {
            let path = dir.file_path(rank, Kind::Claim);
            let text = dir.read(rank, Kind::Claim).map_err(|e| io(&path, e))?.unwrap_or_default();
            let claim: Claim = serde_json::from_str(&text)
                .map_err(|e| AgentError::Io(format!("{}: not a claim this agent wrote ({e})", path.display())))?;
            if claim.forgotten {
                continue;
            }
            if !dir.exists(rank, Kind::Pid) && !dir.exists(rank, Kind::Exit) {
                // A started task's monitor writes its pid file first thing; if its process
                // exists it carries the file's path in its environment.
                if started_process(&dir.file_path(rank, Kind::Pid)) {
                    wait_for_pid(&dir, rank, std::time::Duration::from_secs(10));
                } else {
                    tracing::info!(job, attempt, rank, "claimed before the restart but never started: released");
                    dir.remove(rank, Kind::Claim);
                    continue;
                }
            }
            let state = runner.state_on_disk(job, attempt, rank);
            found.push(Recovered { claim, state });
        }
    }
    for job in legacy {
        // An agent before per-run directories named files after task groups; how those
        // tasks stand cannot be read safely, so they are reported lost (the controller
        // requeues or ends their jobs); their processes are not touched.
        for text in crate::files::legacy_claims(data_dir, job) {
            let Ok(claim) = serde_json::from_str::<Claim>(&text) else { continue };
            if claim.forgotten {
                continue;
            }
            tracing::warn!(job, attempt = claim.key.attempt, "a task claimed by an older agent: reported lost");
            found.push(Recovered { claim, state: TaskState::Lost });
        }
    }
    Ok(found)
}
