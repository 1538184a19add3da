//! A user's signal to a job (`scancel --signal=USR1`), unlike a stop, must leave the job
//! running: it goes to the job's own processes on this node and never to gantry's — the
//! step hosts, `srun`, a task's monitor — which a SIGUSR1 would end, taking the job down. As
//! Slurm does, it goes only to the job's steps (processes started by `srun`, which carry
//! `SLURM_STEP_ID` in their environment) unless `all` asks for the batch script too. gantry's
//! processes are told by their executable (the agent's own binary: step hosts, `srun`) or by
//! the variable only a task's monitor shell still has (`GANTRY_PID_FILE`: it writes the task's
//! exit code, so a signal that ended it would lose how the task ended).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::Path;

/// Deliver `signal` to those of `pids` it is for: not gantry's (`gantry_exe`), and only
/// steps' unless `all`. How many got it.
pub fn deliver(pids: &[i32], signal: Signal, all: bool, gantry_exe: Option<&Path>) -> usize {
    let mut sent = 0;
    for &pid in pids.iter().filter(|&&p| p > 1) {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if exe.is_none() || gantry_exe.is_some_and(|g| exe.as_deref() == Some(g)) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let has = |name: &[u8]| environ.split(|b| *b == 0).any(|var| var.starts_with(name));
        if has(MONITOR_VAR) || (!all && !has(STEP_VAR)) {
            continue;
        }
        if kill(Pid::from_raw(pid), signal).is_ok() {
            sent += 1;
        }
    }
    sent
}

/// What a process started in a job step has in its environment.
const STEP_VAR: &[u8] = b"SLURM_STEP_ID=";

/// What only a task's monitor shell (the agent's `sh -c 'echo $$ > "$GANTRY_PID_FILE"; …'`)
/// has in its environment: the task it starts unsets it before it runs the job's command.
const MONITOR_VAR: &[u8] = b"GANTRY_PID_FILE=";

/// The processes of process group `pgid` (an unconfined task's).
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| process_group(*pid) == Some(pgid))
        .collect()
}

/// The process group of `pid`, from `/proc/PID/stat` (the fifth field, after the name in
/// parentheses, which may itself hold spaces and parentheses).
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_step_processes_get_a_users_signal_unless_all() {
        use std::process::Command;
        // A "batch script" and a "step": both trap USR1 and say so in their exit codes.
        let spawn = |step: bool| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "trap 'exit 10' USR1; i=0; while [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; exit 0"]);
            if step {
                cmd.env("SLURM_STEP_ID", "0");
            } else {
                cmd.env_remove("SLURM_STEP_ID");
            }
            cmd.spawn().expect("sh starts")
        };
        let (mut batch, mut step) = (spawn(false), spawn(true));
        std::thread::sleep(std::time::Duration::from_millis(100));
        let pids = [batch.id() as i32, step.id() as i32];
        assert_eq!(deliver(&pids, Signal::SIGUSR1, false, None), 1);
        assert_eq!(step.wait().expect("exits").code(), Some(10), "the step got it");
        assert_eq!(deliver(&pids[..1], Signal::SIGUSR1, false, None), 0, "not the batch script");
        let sh = std::fs::read_link(format!("/proc/{}/exe", pids[0])).expect("exe");
        assert_eq!(deliver(&pids[..1], Signal::SIGUSR1, true, Some(&sh)), 0, "never gantry's own");
        assert_eq!(deliver(&pids[..1], Signal::SIGUSR1, true, None), 1, "all: the batch script too");
        assert_eq!(batch.wait().expect("exits").code(), Some(10));
        let mut cmd = Command::new("sh");
        let mut monitor_like = cmd.args(["-c", "sleep 5"]).env("GANTRY_PID_FILE", "/x").spawn().expect("sh starts");
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(deliver(&[monitor_like.id() as i32], Signal::SIGUSR1, true, None), 0, "never a task's monitor");
        let _ = monitor_like.kill();
        let _ = monitor_like.wait();
    }

    #[test]
    fn a_process_group_is_read_from_proc() {
        let me = std::process::id() as i32;
        let group = process_group(me).expect("readable");
        assert!(group_members(group).contains(&me));
    }
}
