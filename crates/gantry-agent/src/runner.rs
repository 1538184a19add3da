//! The agent's task runner: each task is a real process tree, started by a root monitor
//! ([`crate::spawn`]: its own session, no terminal, descriptors 0–2 only) and run as its
//! job's Unix account ([`crate::account`]) with a clean environment (the job's variables and
//! gantry's), its devices and ranks in that environment, stdout and stderr in its run's
//! directory ([`crate::files`]: named by rank, owned by the task's account, mode 0600).
//!
//! Where the node confines ([`crate::cgroup`]), every task is a cgroup inside its run's: the
//! run is held to what its tasks were granted here (memory without swap, a CPU quota, a
//! process limit) and each task to its own GPU devices. A task has ended when its cgroup is
//! empty: once its monitor exits, whatever it left behind is killed and waited for; a time
//! limit or a stop is SIGTERM to every process of the cgroup, then the cgroup killed after the
//! grace period; a process the OOM killer ended makes the exit an `oom`. Where the node does
//! not confine, a task is its monitor's process group, signalled as a group, as before.
//!
//! The cgroup side — limits, the end of a task's cgroup, what runs used — is [`crate::runs`];
//! what a task asked for nothing of gets the agent's defaults there ([`Defaults`]), so "asked
//! for nothing" never means "may take the node".

use crate::cgroup::{Cgroups, Confinement};
use crate::files::{JobDir, Kind};
use crate::runs::Runs;
pub use crate::runs::{Defaults, Grant};
use gantry_wire::{Launch, RunUsage, TaskKey, TaskState};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A task ended: which, its exit code (`None`: killed by a signal), whether its time limit
/// ended it, whether it vanished without a trace (re-adopted after a restart, then gone with
/// no exit recorded), and whether the OOM killer ended it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub key: TaskKey,
    pub code: Option<i32>,
    pub timed_out: bool,
    pub lost: bool,
    pub oom: bool,
}

impl Exit {
    pub fn state(&self) -> TaskState {
        if self.lost {
            TaskState::Lost
        } else {
            TaskState::Exited { code: self.code, timed_out: self.timed_out, oom: self.oom }
        }
    }
}

/// A running task, as the runner signals it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    attempt: u32,
    kind: HandleKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandleKind {
    /// Unconfined: its monitor's process group.
    Group(i32),
    /// Confined: its cgroup (by rank in the run).
    Cgroup(u32),
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

/// Create `dir` (and its parents) and make it private to this user (0700): a controller's or
/// agent's data directory holds the store, tokens and task logs.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Launches and signals task processes.
#[derive(Clone, Debug)]
pub struct Runner {
    data_dir: PathBuf,
    exits: mpsc::Sender<Exit>,
    /// Running tasks per job.
    handles: Arc<Mutex<BTreeMap<u64, Vec<Handle>>>>,
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
    /// The runs with a cgroup here (none where the node does not confine).
    runs: Runs,
}

fn signal_group(pgid: i32, signal: Signal) {
    // Never 0 or below: killpg(0) would signal the controller's own group.
    if pgid > 0 {
        // ESRCH (already gone) is the normal race with a task that just exited.
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

impl Runner {
    pub fn new(data_dir: PathBuf, exits: mpsc::Sender<Exit>, confinement: Confinement, defaults: Defaults) -> Runner {
        let mps = Arc::new(crate::mps::MpsDaemons::new(&data_dir));
        let identity = crate::account::Identity::of_this_process();
        Runner {
            data_dir,
            exits,
            handles: Arc::default(),
            stopping: Arc::default(),
            simulate: None,
            mps,
            identity,
            runs: Runs::new(confinement, defaults),
        }
    }

    /// A runner whose tasks are simulated: each lasts `duration`, no process is started.
    pub fn simulated(data_dir: PathBuf, exits: mpsc::Sender<Exit>, duration: Duration) -> Runner {
        let unconfined = Confinement::Unconfined("its tasks are simulated (no processes)".into());
        Runner { simulate: Some(duration), ..Runner::new(data_dir, exits, unconfined, Defaults::default()) }
    }

    pub fn confinement(&self) -> &Confinement {
        self.runs.confinement()
    }

    fn cgroups(&self) -> Option<&Arc<Cgroups>> {
        self.runs.cgroups()
    }

    /// What each run here has used: the live ones measured now, the ended ones as they ended.
    pub fn usage(&self) -> Vec<RunUsage> {
        self.runs.usage()
    }

    /// The controller has every exit of run `job`/`attempt` here: its measure is no longer
    /// reported.
    pub fn forget_usage(&self, job: u64, attempt: u32) {
        self.runs.forget_usage(job, attempt);
    }

    /// Kill and remove the cgroups of runs this agent no longer has (`keep`: the runs its
    /// claims still hold).
    pub fn sweep(&self, keep: &BTreeSet<(u64, u32)>) {
        self.runs.sweep(keep);
    }

    /// Start one task; its exit is sent on the exits channel.
    pub fn launch(&self, l: Launch) {
        let runner = self.clone();
        tokio::spawn(async move {
            let exit = match runner.simulate {
                Some(duration) => {
                    tokio::time::sleep(duration).await;
                    Exit { key: l.key(), code: Some(0), timed_out: false, lost: false, oom: false }
                }
                None => runner.run(&l).await,
            };
            let _ = runner.exits.send(exit).await;
        });
    }

    async fn run(&self, l: &Launch) -> Exit {
        let failed = |code| Exit { key: l.key(), code: Some(code), timed_out: false, lost: false, oom: false };
        let dir = match JobDir::open(&self.data_dir, l.job, l.attempt, true) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::error!(job = l.job, error = %e, "cannot open the run's directory");
                return failed(126);
            }
        };
        let rank = l.rank;
        let refuse = |why: &dyn std::fmt::Display| {
            tracing::warn!(job = l.job, rank, "task refused: {why}");
            let _ = dir.append(rank, Kind::Err, &format!("gantry: task refused: {why}\n"));
            failed(126)
        };
        let account = match crate::account::resolve(&self.identity, &l.account, &l.node) {
            Ok(account) => account,
            Err(why) => return refuse(&why),
        };
        let Some((out, err)) = task_logs(l, &dir, &account) else { return failed(126) };
        if let (crate::account::RunAs::Same, Some(workdir)) = (&account, &l.workdir)
            && !Path::new(workdir).is_dir()
        {
            return refuse(&crate::error::TaskRefused::Workdir { dir: workdir.clone(), node: l.node.clone() });
        }
        let carried = match crate::spawn::carried_env(&l.env) {
            Ok(vars) => vars,
            Err(why) => return refuse(&why),
        };
        let join = match self.runs.confine(l) {
            Ok(join) => join,
            Err(why) => {
                self.runs.abandon(l.job, l.attempt, rank);
                return refuse(&why);
            }
        };
        let handle_kind = if self.cgroups().is_some() { Some(HandleKind::Cgroup(rank)) } else { None };
        let mut env = self.task_env(l, &account, &dir, carried);
        let (entry, program) = task_entry(l, &account, &dir);
        let mps_key = self.join_mps(l, &account, &mut env).await;
        let spawned = crate::spawn::monitor_command(&entry, &env, out, err, join).spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                self.leave_mps(&mps_key).await;
                self.runs.abandon(l.job, l.attempt, rank);
                return refuse(&format!("cannot start sh for {program:?}: {e}"));
            }
        };
        let (code, timed_out, oom) = self.supervise(l, &mut child, handle_kind).await;
        self.leave_mps(&mps_key).await;
        Exit { key: l.key(), code, timed_out, lost: false, oom }
    }

    /// An MPS client: its GPU's daemon runs before it starts (device 0 is the one GPU it sees),
    /// and `env` gets the client's limits and pipe. The GPU and account to release it by, or
    /// `None` for a task not under MPS.
    async fn join_mps(
        &self,
        l: &Launch,
        account: &crate::account::RunAs,
        env: &mut Vec<(String, String)>,
    ) -> Option<(String, crate::account::RunAs)> {
        let mps_key = l.mps.and_then(|_| l.devices.first().cloned()).map(|gpu| (gpu, account.clone()));
        if let (Some((percentage, memory)), Some((gpu, account))) = (l.mps, &mps_key) {
            let pipe = self.mps.acquire(gpu, account).await;
            env.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), percentage.to_string()));
            env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), format!("0={}M", memory >> 20)));
            env.push(("CUDA_MPS_PIPE_DIRECTORY".into(), pipe.display().to_string()));
        }
        mps_key
    }

    /// Releases the MPS client `join_mps` counted, if any.
    async fn leave_mps(&self, mps_key: &Option<(String, crate::account::RunAs)>) {
        if let Some((gpu, account)) = mps_key {
            self.mps.release(gpu, account).await;
        }
    }

    /// A started task, registered for stops while it runs, waited for within its time limit and
    /// then cleared away: its exit code, whether its time limit ended it, whether the OOM
    /// killer did.
    async fn supervise(
        &self,
        l: &Launch,
        child: &mut tokio::process::Child,
        handle_kind: Option<HandleKind>,
    ) -> (Option<i32>, bool, bool) {
        let pgid = child.id().map_or(0, |p| p as i32);
        let handle = Handle { attempt: l.attempt, kind: handle_kind.unwrap_or(HandleKind::Group(pgid)) };
        self.register(l.job, handle);
        let (status, timed_out) = self.wait_within_limit(child, l.job, handle, l).await;
        self.unregister(l.job, handle);
        let code = status.ok().and_then(|s| s.code());
        let oom = self.clear_away(l, handle, code).await;
        (code, timed_out, oom)
    }

    /// After a task's exit, what it left: its process group killed (its own children go with
    /// it), or its cgroup drained. Whether the OOM killer ended it.
    async fn clear_away(&self, l: &Launch, handle: Handle, code: Option<i32>) -> bool {
        match handle.kind {
            HandleKind::Group(pgid) => {
                signal_group(pgid, Signal::SIGKILL);
                false
            }
            HandleKind::Cgroup(_) => self.runs.drain(l.job, l.attempt, l.rank).await && code != Some(0),
        }
    }

    /// The monitor's environment: the account's basics, gantry's variables, the job's carried
    /// variables, and the monitor's own files.
    fn task_env(
        &self,
        l: &Launch,
        account: &crate::account::RunAs,
        dir: &JobDir,
        carried: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        // Real MIG UUIDs where NVML knows them (the controller names instances by layout).
        let devices = crate::mig_nvml::resolve_devices(&l.devices).join(",");
        let mut env = account.basic_env();
        env.extend(carried);
        env.extend([
            ("GANTRY_EXIT_FILE".to_string(), dir.file_path(l.rank, Kind::Exit).display().to_string()),
            ("GANTRY_PID_FILE".to_string(), dir.file_path(l.rank, Kind::Pid).display().to_string()),
            (
                "NVIDIA_VISIBLE_DEVICES".to_string(),
                if devices.is_empty() { "void".to_string() } else { devices.clone() },
            ),
            ("CUDA_VISIBLE_DEVICES".to_string(), devices),
            ("GANTRY_JOB_ID".to_string(), l.job.to_string()),
            ("GANTRY_JOB_NAME".to_string(), l.job_name.clone()),
            ("GANTRY_TASK_GROUP".to_string(), l.group.clone()),
            ("GANTRY_TASK_INDEX".to_string(), l.replica.to_string()),
            ("GANTRY_RANK".to_string(), l.rank.to_string()),
            ("GANTRY_WORLD_SIZE".to_string(), l.world_size.to_string()),
            ("GANTRY_NODE".to_string(), l.node.clone()),
            ("GANTRY_MASTER_ADDR".to_string(), master_addr(l).to_string()),
            ("GANTRY_MASTER_PORT".to_string(), crate::task_env::master_port(l.job).to_string()),
        ]);
        env.extend(crate::task_env::run_env(l, master_addr(l)));
        env.extend(crate::task_env::step_env(l));
        // An agent started without a login (a service manager's) has no USER to pass on:
        // the task's account is who it is.
        for key in ["USER", "LOGNAME"] {
            if !l.account.is_empty() && !env.iter().any(|(k, _)| k == key) {
                env.push((key.to_string(), l.account.clone()));
            }
        }
        env
    }

    fn register(&self, job: u64, handle: Handle) {
        self.handles.lock().expect("not poisoned").entry(job).or_default().push(handle);
        let stop_now = self.stopping.lock().expect("not poisoned").get(&job).copied();
        if let Some((attempt, grace)) = stop_now
            && attempt == handle.attempt
        {
            self.stop_handles(job, vec![handle], grace);
        }
    }

    fn unregister(&self, job: u64, handle: Handle) {
        let mut handles = self.handles.lock().expect("not poisoned");
        if let Some(list) = handles.get_mut(&job) {
            list.retain(|h| *h != handle);
            if list.is_empty() {
                handles.remove(&job);
            }
        }
    }

    /// How a claimed task of run `job`/`attempt` stands: its exit file, else alive (its
    /// cgroup holds a process; unconfined, its monitor's process group), else lost.
    pub fn state_on_disk(&self, job: u64, attempt: u32, rank: u32) -> TaskState {
        let Ok(dir) = JobDir::open(&self.data_dir, job, attempt, false) else { return TaskState::Lost };
        if let Some(code) = dir.read_number::<i32>(rank, Kind::Exit) {
            return TaskState::Exited { code: Some(code), timed_out: false, oom: false };
        }
        if self.alive(&dir, job, attempt, rank) { TaskState::Running } else { TaskState::Lost }
    }

    fn alive(&self, dir: &JobDir, job: u64, attempt: u32, rank: u32) -> bool {
        match self.cgroups() {
            Some(cg) if cg.task_exists(job, attempt, rank) => cg.task_populated(job, attempt, rank),
            _ => group_alive(dir.read_number(rank, Kind::Pid).unwrap_or(0)),
        }
    }

    /// Watch a task started before a restart until it ends: its exit file says how; a task
    /// whose cgroup (unconfined: process group) is empty without one is lost. It can be
    /// signalled meanwhile; its run's limits are known again from its `grant`.
    pub fn watch(&self, key: TaskKey, rank: u32, grant: Grant) {
        let runner = self.clone();
        tokio::spawn(async move {
            let exit = runner.watched(&key, rank, grant).await;
            let _ = runner.exits.send(exit).await;
        });
    }

    async fn watched(&self, key: &TaskKey, rank: u32, grant: Grant) -> Exit {
        let (job, attempt) = (key.job, key.attempt);
        let lost = Exit { key: key.clone(), code: None, timed_out: false, lost: true, oom: false };
        let Ok(dir) = JobDir::open(&self.data_dir, job, attempt, false) else { return lost };
        let confined = self.cgroups().is_some_and(|cg| cg.task_exists(job, attempt, rank));
        let kind = if confined {
            self.runs.adopt(job, attempt, rank, grant);
            HandleKind::Cgroup(rank)
        } else {
            HandleKind::Group(dir.read_number(rank, Kind::Pid).unwrap_or(0))
        };
        let handle = Handle { attempt, kind };
        self.register(job, handle);
        let code = loop {
            if let Some(code) = dir.read_number::<i32>(rank, Kind::Exit) {
                break Some(code);
            }
            if !self.alive(&dir, job, attempt, rank) {
                // It may have written its exit file just before going.
                break dir.read_number::<i32>(rank, Kind::Exit);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        self.unregister(job, handle);
        let oom = confined && self.runs.drain(job, attempt, rank).await && code != Some(0);
        match code {
            Some(code) => Exit { key: key.clone(), code: Some(code), timed_out: false, lost: false, oom },
            None => Exit { oom, ..lost },
        }
    }

    /// Stop every task of run `attempt` of `job`, those still starting included: SIGTERM to
    /// each now, killed after `grace`.
    pub fn stop(&self, job: u64, attempt: u32, grace: Duration) {
        // Under the handles lock, so a task registering now either is listed or sees the request.
        let handles = self.handles.lock().expect("not poisoned");
        self.stopping.lock().expect("not poisoned").insert(job, (attempt, grace));
        let mine: Vec<Handle> =
            handles.get(&job).map(|l| l.iter().copied().filter(|h| h.attempt == attempt).collect()).unwrap_or_default();
        drop(handles);
        self.stop_handles(job, mine, grace);
    }

    /// A user's signal to run `attempt` of `job` here (`crate::signals`): how many
    /// processes got it.
    pub fn user_signal(&self, job: u64, attempt: u32, signal: Signal, all: bool) -> usize {
        let handles = self.handles.lock().expect("not poisoned").get(&job).cloned().unwrap_or_default();
        let me = std::env::current_exe().ok();
        let mut sent = 0;
        for handle in handles.iter().filter(|h| h.attempt == attempt) {
            let pids = match (handle.kind, self.cgroups()) {
                (HandleKind::Group(pgid), _) => crate::signals::group_members(pgid),
                (HandleKind::Cgroup(rank), Some(cg)) => cg.task_procs(job, attempt, rank),
                (HandleKind::Cgroup(_), None) => Vec::new(),
            };
            sent += crate::signals::deliver(&pids, signal, all, me.as_deref());
        }
        sent
    }

    /// SIGTERM to each task now, killed after `grace`.
    fn stop_handles(&self, job: u64, handles: Vec<Handle>, grace: Duration) {
        for handle in &handles {
            self.signal(job, handle, Signal::SIGTERM);
        }
        let runner = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            for handle in &handles {
                runner.signal(job, handle, Signal::SIGKILL);
            }
        });
    }

    /// Signal a task: its process group, or every process of its cgroup (SIGKILL: the cgroup
    /// killed whole).
    fn signal(&self, job: u64, handle: &Handle, sig: Signal) {
        match (handle.kind, self.cgroups()) {
            (HandleKind::Group(pgid), _) => signal_group(pgid, sig),
            (HandleKind::Cgroup(rank), Some(cg)) if sig == Signal::SIGKILL => cg.kill_task(job, handle.attempt, rank),
            (HandleKind::Cgroup(rank), Some(cg)) => cg.signal_task(job, handle.attempt, rank, sig),
            (HandleKind::Cgroup(_), None) => {}
        }
    }

    /// Wait for a task's monitor; past its time limit, SIGTERM the task, then kill it after
    /// its grace period. Its exit status, and whether the limit ended it.
    async fn wait_within_limit(
        &self,
        child: &mut tokio::process::Child,
        job: u64,
        handle: Handle,
        l: &Launch,
    ) -> (std::io::Result<std::process::ExitStatus>, bool) {
        let Some(limit) = l.time_limit_s.map(Duration::from_secs) else { return (child.wait().await, false) };
        if let Ok(status) = tokio::time::timeout(limit, child.wait()).await {
            return (status, false);
        }
        self.signal(job, &handle, Signal::SIGTERM);
        let status = match tokio::time::timeout(Duration::from_secs(l.grace_s), child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.signal(job, &handle, Signal::SIGKILL);
                child.wait().await
            }
        };
        (status, true)
    }
}

/// Task `l`'s stdout and stderr logs, owned by the account it runs as; `None` when they
/// cannot be created (said in the agent's own log: there is no task log to say it in).
fn task_logs(l: &Launch, dir: &JobDir, account: &crate::account::RunAs) -> Option<(std::fs::File, std::fs::File)> {
    let rank = l.rank;
    let owner = match account {
        crate::account::RunAs::Drop(user) => Some((user.uid, user.gid)),
        crate::account::RunAs::Same => None,
    };
    let logs =
        dir.create_log(rank, Kind::Out, owner).and_then(|out| Ok((out, dir.create_log(rank, Kind::Err, owner)?)));
    match logs {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::error!(job = l.job, rank, error = %e, "cannot create the task's logs");
            None
        }
    }
}

/// How task `l` is entered: as its account (dropped to with setpriv when it is not the
/// agent's), in its working directory (the account's home, or the run's directory), running
/// its command (a placeholder when it has none); and the program named, for a refusal.
fn task_entry(l: &Launch, account: &crate::account::RunAs, dir: &JobDir) -> (Vec<String>, String) {
    let argv: Vec<String> =
        if l.command.is_empty() { vec!["sh".into(), "-c".into(), PLACEHOLDER.into()] } else { l.command.clone() };
    let (drop_to, workdir) = match account {
        crate::account::RunAs::Drop(user) => {
            (Some((user.uid.as_raw(), user.gid.as_raw())), l.workdir.clone().unwrap_or_else(|| user.default_workdir()))
        }
        crate::account::RunAs::Same => (None, l.workdir.clone().unwrap_or_else(|| dir.path().display().to_string())),
    };
    (crate::spawn::entry_argv(drop_to, &workdir, &argv), argv[0].clone())
}
