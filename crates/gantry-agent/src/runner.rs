//! The agent's task runner: each task is a real process in its own process group, run as its
//! job's Unix account ([`crate::account`]) with a clean environment (the job's variables and
//! gantry's), its devices and ranks in that environment, stdout and stderr in the agent's data
//! directory (owned by the task's account, mode 0600), its time limit enforced (SIGTERM to the
//! group, SIGKILL after the grace period), and its exit reported to the agent's loop.

use gantry_wire::{Launch, TaskKey};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A task ended: which, its exit code (`None`: killed by a signal), whether its time limit
/// ended it, and whether it vanished without a trace (re-adopted after a restart, then gone
/// with no exit recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub key: TaskKey,
    pub code: Option<i32>,
    pub timed_out: bool,
    pub lost: bool,
}

/// Records the task's process group in `$GANTRY_PID_FILE` first thing, runs its command and
/// records the exit code in `$GANTRY_EXIT_FILE`, so a controller that restarts while the task
/// runs can find it and learn how it ended (`$0` is a label, `$@` the argv).
const WRAPPER: &str = "echo $$ > \"$GANTRY_PID_FILE\"; \"$@\"; code=$?; echo $code > \"$GANTRY_EXIT_FILE.tmp\" && mv \"$GANTRY_EXIT_FILE.tmp\" \"$GANTRY_EXIT_FILE\"; exit $code";

/// One task's files: `<group>-<replica>.{out,err,pid,exit}` in the job's directory.
pub fn task_base(data_dir: &Path, job: u64, group: &str, replica: u32) -> PathBuf {
    job_dir(data_dir, job).join(format!("{group}-{replica}"))
}

/// The file `ext` of a task (`pid`, `exit`, `out`, `err`).
/// A new (or emptied) file only its owner may read: task logs hold what jobs print, secrets
/// included; admins read them through the API.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // An older run's file keeps its mode on open: set it.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// Create `dir` (and its parents) and make it private to this user (0700): a controller's or
/// agent's data directory holds the store, tokens and task logs.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

pub fn with_ext(base: &Path, ext: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// `GANTRY_MASTER_ADDR`: loopback when the gang's first task is on this node, else that
/// node's name (fleet node names are expected to resolve as host names).
fn master_addr(l: &Launch) -> &str {
    if l.master_node.is_empty() || l.master_node == l.node { "127.0.0.1" } else { &l.master_node }
}

/// Is a process group still there?
pub fn group_alive(pgid: i32) -> bool {
    pgid > 0 && !matches!(killpg(Pid::from_raw(pgid), None), Err(nix::errno::Errno::ESRCH))
}

/// What a task runs when its job names no command: it says what it got, briefly.
const PLACEHOLDER: &str = "echo \"gantry task $GANTRY_RANK/$GANTRY_WORLD_SIZE of job $GANTRY_JOB_ID on $GANTRY_NODE: \
CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"; sleep 2";

/// Where job `id`'s task logs go.
pub fn job_dir(data_dir: &Path, id: u64) -> PathBuf {
    data_dir.join("jobs").join(id.to_string())
}

/// Launches and signals task processes.
#[derive(Clone, Debug)]
pub struct Runner {
    data_dir: PathBuf,
    exits: mpsc::Sender<Exit>,
    /// Running process groups per job.
    groups: Arc<Mutex<BTreeMap<u64, Vec<i32>>>>,
    /// Jobs asked to stop — which run of them (attempt) and the grace period: a task of that
    /// run that starts after the request (its launch was already on the way) is stopped as
    /// soon as it exists; a later run (the job was preempted and requeued) is not.
    stopping: Arc<Mutex<BTreeMap<u64, (u32, Duration)>>>,
    /// Simulated tasks (benchmarks, demos of big fleets): no process; each "runs" this long
    /// and exits 0.
    simulate: Option<Duration>,
    /// MPS control daemons for the MPS shares' GPUs.
    mps: Arc<crate::mps::MpsDaemons>,
    /// Who this agent is: root (tasks run as their accounts) or one user (only its tasks).
    identity: crate::account::Identity,
}

fn signal_group(pgid: i32, signal: Signal) {
    // Never 0 or below: killpg(0) would signal the controller's own group.
    if pgid > 0 {
        // ESRCH (already gone) is the normal race with a task that just exited.
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

impl Runner {
    pub fn new(data_dir: PathBuf, exits: mpsc::Sender<Exit>) -> Runner {
        let mps = Arc::new(crate::mps::MpsDaemons::new(&data_dir));
        let identity = crate::account::Identity::of_this_process();
        Runner { data_dir, exits, groups: Arc::default(), stopping: Arc::default(), simulate: None, mps, identity }
    }

    /// A runner whose tasks are simulated: each lasts `duration`, no process is started.
    pub fn simulated(data_dir: PathBuf, exits: mpsc::Sender<Exit>, duration: Duration) -> Runner {
        Runner { simulate: Some(duration), ..Runner::new(data_dir, exits) }
    }

    /// Start one task; its exit is sent on the exits channel.
    pub fn launch(&self, l: Launch) {
        let runner = self.clone();
        tokio::spawn(async move {
            let exit = match runner.simulate {
                Some(duration) => {
                    tokio::time::sleep(duration).await;
                    Exit { key: l.key(), code: Some(0), timed_out: false, lost: false }
                }
                None => runner.run(&l).await,
            };
            let _ = runner.exits.send(exit).await;
        });
    }

    async fn run(&self, l: &Launch) -> Exit {
        let failed = |code| Exit { key: l.key(), code: Some(code), timed_out: false, lost: false };
        let dir = job_dir(&self.data_dir, l.job);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::error!(job = l.job, error = %e, "cannot create the job directory");
            return failed(126);
        }
        let base = task_base(&self.data_dir, l.job, &l.group, l.replica);
        // A run before this one (the job was preempted and started again) left its files.
        for ext in ["exit", "pid"] {
            let _ = std::fs::remove_file(with_ext(&base, ext));
        }
        let (Ok(out), Ok(err)) = (private_file(&with_ext(&base, "out")), private_file(&with_ext(&base, "err"))) else {
            return failed(126);
        };
        let account = match crate::account::resolve(&self.identity, &l.account, &l.node) {
            Ok(account) => account,
            Err(why) => {
                tracing::warn!(job = l.job, account = %l.account, "task refused: {why}");
                let _ = std::fs::write(with_ext(&base, "err"), format!("gantry: task refused: {why}\n"));
                return failed(126);
            }
        };
        if let crate::account::RunAs::Drop(user) = &account {
            // The task's own logs are its account's to read (and nobody else's).
            for ext in ["out", "err"] {
                let _ = nix::unistd::chown(&with_ext(&base, ext), Some(user.uid), Some(user.gid));
            }
        }
        if let (crate::account::RunAs::Same, Some(workdir)) = (&account, &l.workdir)
            && !Path::new(workdir).is_dir()
        {
            let why = format!("gantry: the working directory {workdir} does not exist on node {}\n", l.node);
            let _ = std::fs::write(with_ext(&base, "err"), why);
            return failed(126);
        }
        let argv: Vec<String> =
            if l.command.is_empty() { vec!["sh".into(), "-c".into(), PLACEHOLDER.into()] } else { l.command.clone() };
        let mut cmd = task_command(l, &argv, &base, &dir, &account, out, err);
        // An MPS client: its GPU's daemon runs before it starts (device 0 is the one GPU it sees).
        let mps_gpu = l.mps.and_then(|_| l.devices.first().cloned());
        let mps_key = mps_gpu.as_ref().map(|gpu| (gpu.clone(), account.clone()));
        if let (Some((percentage, memory)), Some((gpu, account))) = (l.mps, &mps_key) {
            let pipe = self.mps.acquire(gpu, account).await;
            cmd.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", percentage.to_string())
                .env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", format!("0={}M", memory >> 20))
                .env("CUDA_MPS_PIPE_DIRECTORY", pipe);
        }
        let spawned = cmd.spawn();
        if let (Err(_), Some((gpu, account))) = (&spawned, &mps_key) {
            self.mps.release(gpu, account).await;
        }
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ =
                    std::fs::write(with_ext(&base, "err"), format!("gantry: cannot start sh for {:?}: {e}\n", argv[0]));
                return failed(127);
            }
        };
        let pgid = child.id().map_or(0, |p| p as i32);
        self.groups.lock().expect("not poisoned").entry(l.job).or_default().push(pgid);
        let stop_now = self.stopping.lock().expect("not poisoned").get(&l.job).copied();
        if let Some((attempt, grace)) = stop_now
            && attempt == l.attempt
        {
            stop_groups(vec![pgid], grace);
        }
        let (status, timed_out) = wait_within_limit(&mut child, pgid, l).await;
        if let Some(list) = self.groups.lock().expect("not poisoned").get_mut(&l.job) {
            list.retain(|&g| g != pgid);
        }
        // The task's own children go with it.
        signal_group(pgid, Signal::SIGKILL);
        if let Some((gpu, account)) = &mps_key {
            self.mps.release(gpu, account).await;
        }
        let code = status.ok().and_then(|s| s.code());
        Exit { key: l.key(), code, timed_out, lost: false }
    }

    /// Watch a task started before a restart until it ends: its exit file says how; a process
    /// group that is gone without one is lost. Its group can be signalled meanwhile.
    pub fn watch(&self, key: TaskKey, base: PathBuf) {
        let runner = self.clone();
        let job = key.job;
        tokio::spawn(async move {
            let pgid: i32 =
                std::fs::read_to_string(with_ext(&base, "pid")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
            if pgid > 0 {
                runner.groups.lock().expect("not poisoned").entry(job).or_default().push(pgid);
                let stop_now = runner.stopping.lock().expect("not poisoned").get(&job).copied();
                if let Some((_, grace)) = stop_now {
                    stop_groups(vec![pgid], grace);
                }
            }
            let exit_code = || -> Option<i32> {
                std::fs::read_to_string(with_ext(&base, "exit")).ok().and_then(|t| t.trim().parse().ok())
            };
            let exit = loop {
                if let Some(code) = exit_code() {
                    break Exit { key, code: Some(code), timed_out: false, lost: false };
                }
                if !group_alive(pgid) {
                    // It may have written its exit file just before going.
                    break match exit_code() {
                        Some(code) => Exit { key, code: Some(code), timed_out: false, lost: false },
                        None => Exit { key, code: None, timed_out: false, lost: true },
                    };
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            if let Some(list) = runner.groups.lock().expect("not poisoned").get_mut(&job) {
                list.retain(|&g| g != pgid);
            }
            let _ = runner.exits.send(exit).await;
        });
    }

    /// Stop every task of run `attempt` of `job`, those still starting included: SIGTERM to
    /// each process group now, SIGKILL after `grace`.
    pub fn stop(&self, job: u64, attempt: u32, grace: Duration) {
        // Under the groups lock, so a task registering now either is listed or sees the request.
        let groups = self.groups.lock().expect("not poisoned");
        self.stopping.lock().expect("not poisoned").insert(job, (attempt, grace));
        stop_groups(groups.get(&job).cloned().unwrap_or_default(), grace);
    }
}

/// SIGTERM to each group now, SIGKILL after `grace`.
fn stop_groups(groups: Vec<i32>, grace: Duration) {
    for &pgid in &groups {
        signal_group(pgid, Signal::SIGTERM);
    }
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        for pgid in groups {
            signal_group(pgid, Signal::SIGKILL);
        }
    });
}

/// The wrapped command of a task: its program under the `sh` wrapper that writes the pid and
/// exit files (as the agent's user), dropped to its account through `setpriv` when that is
/// another; a clean environment (the account's basics, the job's variables, then gantry's),
/// working directory (entered as the task's account, so it must be allowed to), logs and its
/// own process group.
fn task_command(
    l: &Launch,
    argv: &[String],
    base: &Path,
    dir: &Path,
    account: &crate::account::RunAs,
    out: std::fs::File,
    err: std::fs::File,
) -> tokio::process::Command {
    use crate::account::RunAs;
    // Real MIG UUIDs where NVML knows them (the controller names instances by layout).
    let devices = crate::mig_nvml::resolve_devices(&l.devices).join(",");
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(WRAPPER).arg("gantry-task");
    match account {
        RunAs::Same => {
            cmd.args(argv).current_dir(l.workdir.as_deref().map_or(dir.to_path_buf(), PathBuf::from));
        }
        RunAs::Drop(user) => {
            // The job's own variables are set only after the drop (by `env`): in the root
            // wrapper's environment, LD_PRELOAD and friends would run the job's code as root.
            let workdir = l.workdir.clone().unwrap_or_else(|| user.default_workdir());
            cmd.args(crate::account::dropped(user, &workdir, &l.env, argv)).current_dir("/");
        }
    }
    let job_env: &[(String, String)] = if matches!(account, RunAs::Same) { &l.env } else { &[] };
    cmd.env_clear()
        .envs(account.basic_env())
        .env("GANTRY_EXIT_FILE", with_ext(base, "exit"))
        .env("GANTRY_PID_FILE", with_ext(base, "pid"))
        .envs(job_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("CUDA_VISIBLE_DEVICES", &devices)
        .env("NVIDIA_VISIBLE_DEVICES", if devices.is_empty() { "void" } else { devices.as_str() })
        .env("GANTRY_JOB_ID", l.job.to_string())
        .env("GANTRY_JOB_NAME", &l.job_name)
        .env("GANTRY_TASK_GROUP", &l.group)
        .env("GANTRY_TASK_INDEX", l.replica.to_string())
        .env("GANTRY_RANK", l.rank.to_string())
        .env("GANTRY_WORLD_SIZE", l.world_size.to_string())
        .env("GANTRY_NODE", &l.node)
        .env("GANTRY_MASTER_ADDR", master_addr(l))
        .env("GANTRY_MASTER_PORT", (29_500 + l.job % 10_000).to_string())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(false);
    cmd
}

/// Wait for a task; past its time limit, SIGTERM its group, then SIGKILL after its grace
/// period. Its exit status, and whether the limit ended it.
async fn wait_within_limit(
    child: &mut tokio::process::Child,
    pgid: i32,
    l: &Launch,
) -> (std::io::Result<std::process::ExitStatus>, bool) {
    let Some(limit) = l.time_limit_s.map(Duration::from_secs) else { return (child.wait().await, false) };
    if let Ok(status) = tokio::time::timeout(limit, child.wait()).await {
        return (status, false);
    }
    signal_group(pgid, Signal::SIGTERM);
    let status = match tokio::time::timeout(Duration::from_secs(l.grace_s), child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            signal_group(pgid, Signal::SIGKILL);
            child.wait().await
        }
    };
    (status, true)
}
