//! How a task's first process comes to be: a root *monitor* (`sh`) in its own session, with no
//! controlling terminal and no descriptor but 0–2, already inside the task's cgroup, which
//! records its pid, runs the task (dropped to its account through `setpriv`), and records its
//! exit code — so a restarted agent can tell how a task ended while it was away.
//!
//! Done in the child between `fork` and `exec` (`pre_exec`, the one `unsafe` here):
//! - `setsid()`: a new session without a controlling terminal, so a task cannot reach the
//!   terminal the controller or agent was started from (TIOCSTI, `/dev/tty`);
//! - a write of `0` to the task cgroup's `cgroup.procs` (each v1 hierarchy's): the monitor,
//!   and so everything it ever starts, is in the cgroup before any task code runs;
//! - every descriptor past 2 set close-on-exec (`close_range`), whatever the agent's process
//!   inherited or opened without the flag.
//!
//! The job's environment never appears in any process's arguments (which every user of the
//! node can read in `/proc/<pid>/cmdline`): it travels in the monitor's environment (root's,
//! readable by root only) under `GANTRY_JOB_ENV_<NAME>`, a prefix no loader or shell gives a
//! meaning to (so `LD_PRELOAD` and friends never act on the root processes), and becomes the
//! task's own only after the drop, in the account's shell, which unsets the prefixed copies.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;

/// Records the monitor's pid first thing, runs the task and records its exit code (`$0` is a
/// label, `$@` the task's argv). Root, with gantry's own environment only.
const MONITOR: &str = "echo $$ > \"$GANTRY_PID_FILE\"; \"$@\"; code=$?; \
echo $code > \"$GANTRY_EXIT_FILE.tmp\" && mv \"$GANTRY_EXIT_FILE.tmp\" \"$GANTRY_EXIT_FILE\"; exit $code";

/// Runs as the task's account: forgets the monitor's files, turns `GANTRY_JOB_ENV_<NAME>`
/// into `<NAME>` for each name listed in `GANTRY_JOB_ENV` (names are checked to be shell
/// identifiers, so the `eval` sees nothing else), enters the working directory as the
/// account (`$0`; a missing one is named in the task's error log) and execs the task.
const ENTER: &str = "unset GANTRY_PID_FILE GANTRY_EXIT_FILE; \
for GANTRY_ENV_NAME_ in $GANTRY_JOB_ENV; do eval \"export $GANTRY_ENV_NAME_=\\\"\\$GANTRY_JOB_ENV_$GANTRY_ENV_NAME_\\\"; unset GANTRY_JOB_ENV_$GANTRY_ENV_NAME_\"; done; \
unset GANTRY_ENV_NAME_ GANTRY_JOB_ENV; \
cd -- \"$0\" 2>/dev/null || { echo \"gantry: cannot enter the working directory $0 (missing, or not open to this account)\" >&2; exit 126; }; exec \"$@\"";

/// The prefix of a job variable in the monitor's environment.
pub const JOB_ENV_PREFIX: &str = "GANTRY_JOB_ENV_";

/// Is `name` a variable a task may be given: a shell identifier, not one of gantry's?
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("GANTRY_")
}

/// Whether a job's variable would override one gantry sets (its devices, ranks, MPS, its
/// place in the run): gantry's win.
pub fn gantry_owned(name: &str) -> bool {
    name.starts_with("GANTRY_")
        || name.starts_with("CUDA_MPS_")
        || name == "CUDA_VISIBLE_DEVICES"
        || name == "NVIDIA_VISIBLE_DEVICES"
        || gantry_types::job::is_run_variable(name)
}

/// The job's variables as the monitor carries them: `GANTRY_JOB_ENV` (the names) and one
/// prefixed variable each. Gantry's own names are dropped (gantry's values win); a name that
/// is not an identifier is an error (the spec refuses them; an agent checks what it runs).
pub fn carried_env(job_env: &[(String, String)]) -> Result<Vec<(String, String)>, crate::error::TaskRefused> {
    let mut names = Vec::new();
    let mut vars = Vec::new();
    for (name, value) in job_env.iter().filter(|(k, _)| !gantry_owned(k)) {
        if !valid_env_name(name) {
            return Err(crate::error::TaskRefused::Env { name: name.clone() });
        }
        names.push(name.as_str());
        vars.push((format!("{JOB_ENV_PREFIX}{name}"), value.clone()));
    }
    vars.push(("GANTRY_JOB_ENV".to_string(), names.join(" ")));
    Ok(vars)
}

/// How the task is entered: as the agent's own user, or dropped to another account.
pub fn entry_argv(drop_to: Option<(u32, u32)>, workdir: &str, argv: &[String]) -> Vec<String> {
    let mut full = Vec::new();
    if let Some((uid, gid)) = drop_to {
        full.extend([
            crate::account::SETPRIV.to_string(),
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--init-groups".into(),
            "--".into(),
        ]);
    }
    full.extend(["sh".into(), "-c".into(), ENTER.into(), workdir.to_string()]);
    full.extend(argv.iter().cloned());
    full
}

/// The monitor's command: `sh -c MONITOR gantry-task <entry argv>`, with `env` (gantry's
/// variables and the carried job variables) and nothing else of the agent's, stdin from
/// `/dev/null`, stdout and stderr to the task's logs; in the child, a new session, the
/// cgroup joined through `join`, every other descriptor closed at exec.
pub fn monitor_command(
    entry: &[String],
    env: &[(String, String)],
    out: std::fs::File,
    err: std::fs::File,
    join: Vec<OwnedFd>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(MONITOR)
        .arg("gantry-task")
        .args(entry)
        .current_dir("/")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(false);
    let fds: Vec<i32> = join.iter().map(AsRawFd::as_raw_fd).collect();
    let fallback_max = fd_limit();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: setsid, write, syscall(close_range) and fcntl are system calls; it
    // allocates nothing (the descriptors were collected before the fork, and an io::Error
    // from errno holds no heap data). The descriptors in `fds` stay open until `join` is
    // dropped, after the spawn returns (the closure keeps them alive by owning `join`).
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &join;
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for &fd in &fds {
                if libc::write(fd, c"0".as_ptr().cast(), 1) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let all_from_3 = libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            if all_from_3 < 0 {
                // Before Linux 5.11: one by one up to the descriptor limit.
                for fd in 3..fallback_max {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
    cmd
}

/// The highest descriptor number to mark one by one where `close_range` is missing.
fn fd_limit() -> i32 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft.min(65_536) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_variables_travel_prefixed_and_names_are_checked() {
        let env = [("LR".to_string(), "3e-4".to_string()), ("CUDA_VISIBLE_DEVICES".to_string(), "all".to_string())];
        let carried = carried_env(&env).expect("valid");
        assert_eq!(
            carried,
            [("GANTRY_JOB_ENV_LR".to_string(), "3e-4".to_string()), ("GANTRY_JOB_ENV".to_string(), "LR".to_string())],
            "gantry's own variables are not the job's to set"
        );
        for bad in ["A B", "1X", "X;rm", "GANTRY_X", ""] {
            assert!(carried_env(&[(bad.to_string(), "v".into())]).is_err() || gantry_owned(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_entry_drops_before_the_job_variables_are_set() {
        let argv = entry_argv(Some((1234, 99)), "/w d", &["python".into(), "x y".into()]);
        assert_eq!(&argv[..5], ["setpriv", "--reuid=1234", "--regid=99", "--init-groups", "--"]);
        assert_eq!(&argv[5..7], ["sh", "-c"]);
        assert_eq!(&argv[argv.len() - 3..], ["/w d", "python", "x y"]);
        assert!(!argv.iter().any(|a| a.contains("3e-4")));
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any variable the spec accepts reaches the task with its value byte for byte
        /// (quotes, `$`, newlines, spaces, globs), through the real shell.
        #[test]
        fn any_job_variable_arrives_intact(
            name in "[A-Za-z_][A-Za-z0-9_]{0,12}",
            value in "[ -~\n\t]{0,40}",
        ) {
            prop_assume!(!gantry_owned(&name) && !["PATH", "PWD", "IFS", "HOME", "OLDPWD", "SHLVL"].contains(&name.as_str()));
            let mut cmd = std::process::Command::new("sh");
            let script = format!("printf '%s' \"${name}\"");
            cmd.args(&entry_argv(None, "/", &["sh".into(), "-c".into(), script])[1..]);
            cmd.env_clear().env("PATH", "/usr/bin:/bin");
            for (k, v) in carried_env(&[(name.clone(), value.clone())]).expect("valid") {
                cmd.env(k, v);
            }
            let out = cmd.output().expect("sh");
            prop_assert_eq!(String::from_utf8_lossy(&out.stdout), value);
        }
    }

    /// The shell part, run for real: the variables arrive with odd values intact, the
    /// prefixed copies are gone, and the working directory is entered.
    #[test]
    fn the_entry_shell_restores_the_job_variables() {
        let env = [("ODD".to_string(), "a b\n'$(id)' \"x\" *".to_string()), ("EMPTY".to_string(), String::new())];
        let mut cmd = std::process::Command::new("sh");
        cmd.args(&entry_argv(None, "/tmp", &["sh".into(), "-c".into(), "printf '%s|%s|%s|%s|%s' \"$ODD\" \"${EMPTY-unset}\" \"${GANTRY_JOB_ENV_ODD-gone}\" \"${GANTRY_JOB_ENV-gone}\" \"$PWD\"".into()])[1..]);
        cmd.env_clear().env("PATH", "/usr/bin:/bin");
        for (k, v) in carried_env(&env).expect("valid") {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b\n'$(id)' \"x\" *||gone|gone|/tmp");
    }
}
