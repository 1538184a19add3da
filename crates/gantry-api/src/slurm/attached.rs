//! `srun` outside a batch job and `salloc`: submit the job gantry-spec's `srun_cli` makes of
//! the command line, say when it has to wait and when it starts (as Slurm's commands do),
//! print its output as it comes — the job's stdout to stdout, its stderr to stderr — and end
//! with its exit code. The first Ctrl-C cancels the job (its output up to the end is still
//! printed); a second one leaves at once.

use crate::connection::Connection;
use crate::follow::Follower;
use gantry_spec::sbatch_cli::{Submitter, batch_job};
use gantry_types::{Ending, JobState};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The variable only a batch job's tasks have: `srun` with it starts a step in that job.
const IN_A_JOB: &str = "GANTRY_STEP_DIR";

/// How often the job and its output are looked at.
const LOOK_EVERY: Duration = Duration::from_millis(300);

/// The task whose output is the command's: the batch slot on the allocation's first node
/// (the other nodes' tasks come back through it).
const FIRST_SLOT: &str = "batch/0";

/// Run `name args` if it is `salloc`, or `srun` outside a batch job: its exit code; `None`
/// for anything else.
pub fn run_if_attached(name: &str, args: &[String], conn: &Connection) -> Option<i32> {
    let salloc = match name {
        "salloc" => true,
        "srun" if std::env::var_os(IN_A_JOB).is_none() => false,
        _ => return None,
    };
    Some(run(salloc, args, conn).unwrap_or_else(|e| {
        eprintln!("{name}: error: {e}");
        1
    }))
}

/// Where this command runs from: its directory, its shell's variables, its host.
pub fn submitter() -> Result<Submitter, String> {
    let cwd =
        std::env::current_dir().map_err(|e| format!("the current directory (the job's working directory): {e}"))?;
    let env = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string());
    Ok(Submitter { cwd: cwd.display().to_string(), env, host })
}

fn run(salloc: bool, args: &[String], conn: &Connection) -> Result<i32, String> {
    let program = if salloc { "salloc" } else { "srun" };
    let line = gantry_spec::srun_cli::attached_line(salloc, args).map_err(|e| e.to_string())?;
    let (job, _) = batch_job(&line, None, &submitter()?).map_err(|e| e.to_string())?;
    let text = gantry_spec::sbatch::workload(job);
    let key = crate::replies::idempotency_key().map_err(|e| format!("/dev/urandom: {e}"))?;
    let reply = conn.call("POST", "/v1/jobs", Some(&text), &[("Idempotency-Key", &key)]).map_err(|e| e.to_string())?;
    let submitted: crate::Submitted = serde_json::from_value(reply).map_err(|e| e.to_string())?;
    let id = *submitted.ids.first().ok_or("the controller made no job")?;
    let interrupts = interrupts();
    attend(program, id, conn, &interrupts)
}

/// Follow job `id` to its end; `interrupts` counts Ctrl-Cs.
fn attend(program: &str, id: u64, conn: &Connection, interrupts: &AtomicU32) -> Result<i32, String> {
    let mut follower = Follower::new(id, Some(FIRST_SLOT.into()), None, None);
    let (mut said_waiting, mut said_started, mut cancelled) = (false, false, false);
    let mut notes: Vec<String> = Vec::new();
    loop {
        let (job, pieces) = follower.look(conn).map_err(|e| e.to_string())?;
        let state = job.row.state;
        if state == JobState::Pending && !said_waiting {
            eprintln!("{program}: job {id} queued and waiting for resources");
            said_waiting = true;
        }
        if state != JobState::Pending && !said_started && job.row.started_at_s.is_some() {
            match program {
                "salloc" => eprintln!("salloc: Granted job allocation {id}"),
                _ if said_waiting => eprintln!("srun: job {id} has been allocated resources"),
                _ => {}
            }
            said_started = true;
        }
        for piece in pieces {
            let bytes = piece.text.as_bytes();
            let _ = if piece.stream == "err" {
                std::io::stderr().write_all(bytes)
            } else {
                std::io::stdout().write_all(bytes)
            };
            if let Some(note) = piece.note.filter(|n| !notes.contains(n)) {
                eprintln!("{program}: {note}");
                notes.push(note);
            }
        }
        let _ = std::io::stdout().flush();
        if state.is_final() {
            if program == "salloc" && said_started {
                eprintln!("salloc: Relinquishing job allocation {id}");
            }
            return Ok(exit_code(program, id, &job));
        }
        match interrupts.load(Ordering::SeqCst) {
            0 => {}
            1 if !cancelled => {
                eprintln!("{program}: interrupt: cancelling job {id} (Ctrl-C again to leave at once)");
                conn.call("DELETE", &format!("/v1/jobs/{id}"), None, &[]).map_err(|e| e.to_string())?;
                cancelled = true;
            }
            1 => {}
            _ => return Ok(130),
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

/// The command's exit code: the job's (its script's, which is the step's; killed by signal N:
/// 128 + N, as a shell says it); a job that ended otherwise (cancelled, lost, out of time)
/// says how, and ends 1.
fn exit_code(program: &str, id: u64, job: &crate::JobView) -> i32 {
    let ending = job.row.outcome.ending;
    let code = job.row.exit_code.map(|c| if c < 0 { 128 + c.saturating_neg().min(127) } else { c.min(255) });
    match (code, ending) {
        (Some(code), Some(Ending::Completed | Ending::Failed) | None) => code,
        (_, ending) => {
            let how = ending.map_or_else(|| job.row.state.name().to_string(), |e| e.name().to_string());
            eprintln!("{program}: error: job {id} ended {how}");
            1
        }
    }
}

/// Ctrl-Cs counted by a thread that waits for them: SIGINT blocked here (and in threads
/// started after), so no handler is needed.
fn interrupts() -> Arc<AtomicU32> {
    use nix::sys::signal::{SigSet, Signal};
    let count = Arc::new(AtomicU32::new(0));
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    if set.thread_block().is_ok() {
        let seen = Arc::clone(&count);
        std::thread::spawn(move || {
            while set.wait().is_ok() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    count
}
