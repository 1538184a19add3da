//! The controller's synchronous core: the store (source of truth), the engine's scheduler,
//! and the one applier through which every change goes. The async edges (HTTP, processes)
//! call into it under one lock; it never blocks on I/O other than the store's commit.
//!
//! Order of effects, so a crash at any instant loses nothing and runs nothing twice: an event
//! is committed to the store *before* it is acted on (a job is `started` in the log before
//! its processes are launched); on restart, jobs the log says were running are marked `lost`
//! (the in-process agent that ran them is gone), never started again.

use crate::auth::{self, Principal};
use gantry_catalog::Catalog;
use gantry_engine::sched::{Admission, Decision, JobId, SchedJob, Scheduler, SchedulerConfig};
use gantry_engine::{AllocId, Engine, EngineConfig};
use gantry_store::{JobRow, Role, SqliteStore, Store, StoreError, TokenRecord};
use gantry_types::{Ending, Event, Fleet, GpuGrant, Job, JobState, PendingJob, TaskPlacement, TaskStart};
use std::collections::BTreeMap;

/// What an API call can get wrong; each maps to a 4xx or 5xx.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } | StoreError::TokenExists(_) => ApiError::Conflict(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// One task to launch: which job, which task, what it gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub job: u64,
    pub job_name: String,
    pub group: String,
    pub replica: u32,
    pub rank: u32,
    pub world_size: u32,
    pub node: String,
    /// GPU or MIG UUIDs (`CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
    /// For an MPS share: (active thread percentage, pinned memory limit in bytes).
    pub mps: Option<(u32, u64)>,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub time_limit_s: Option<u64>,
    pub grace_s: u64,
    /// Which run of the job this is (0, then one more per requeue).
    pub attempt: u32,
}

/// A running job's tasks as the runner tracks them.
#[derive(Debug)]
struct Runs {
    alloc: AllocId,
    /// Which run of the job (its requeues so far).
    attempt: u32,
    tasks_left: u32,
    /// First non-zero exit code seen, if any.
    failed: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    lost: bool,
    /// Being stopped for another job (the preemptor's right): it waits again when its tasks
    /// have exited.
    preempted: Option<&'static str>,
}

impl Runs {
    fn new(alloc: AllocId, attempt: u32, tasks: u32) -> Runs {
        Runs {
            alloc,
            attempt,
            tasks_left: tasks,
            failed: None,
            timed_out: false,
            cancelled: false,
            lost: false,
            preempted: None,
        }
    }
}

/// A task that was running when the controller stopped, for the runner to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub job: u64,
    pub group: String,
    pub replica: u32,
}

/// What the runner should do after a change.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub launch: Vec<Launch>,
    /// Jobs whose processes should be signalled now and killed after the grace period:
    /// (job, attempt, grace seconds).
    pub stop: Vec<(u64, u32, u64)>,
}

/// The controller: store + scheduler + the jobs it is running.
#[derive(Debug)]
pub struct Controller {
    store: SqliteStore,
    scheduler: Scheduler,
    catalog: &'static Catalog,
    /// (node, GPU index) → UUID.
    uuids: BTreeMap<(String, u32), String>,
    running: BTreeMap<u64, Runs>,
    /// Tasks re-adopted at open, until the runner takes them.
    recovered: Vec<Recovered>,
    /// The fleet with nothing running: could a submitted job ever run here?
    empty: Engine,
}

/// A node as `gantry nodes` shows it: its GPUs, what each holds, which jobs run there.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeView {
    pub name: String,
    pub drained: bool,
    pub gpus: Vec<GpuView>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// whole, mig, mps or time-slice.
    pub mode: String,
    /// Compute handed out, milli-GPU of 1000.
    pub allocated_milli: u32,
    /// Running jobs holding part or all of it.
    pub jobs: Vec<u64>,
}

/// A job as `queue` and `show` list it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobView {
    #[serde(flatten)]
    pub row: JobRow,
    /// Why it waits and when it may start, while it is pending.
    pub pending: Option<PendingJob>,
}

impl Controller {
    /// Open the controller on `store` for `fleet`, recovering what the store holds: pending
    /// jobs wait again; jobs that were running are re-adopted on exactly their recorded
    /// placement (the runner then watches their tasks: see [`Controller::take_recovered`]),
    /// or marked lost if that cannot be.
    pub fn open(
        store: SqliteStore,
        fleet: &Fleet,
        catalog: &'static Catalog,
        scheduling: SchedulerConfig,
        data_dir: &std::path::Path,
        now: u64,
    ) -> Result<Controller, String> {
        let engine = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| e.to_string())?;
        let empty = engine.clone();
        let uuids = fleet
            .nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(move |g| ((n.name.clone(), g.index), g.uuid.clone())))
            .collect();
        let mut controller = Controller {
            store,
            scheduler: Scheduler::new(engine, scheduling),
            catalog,
            uuids,
            running: BTreeMap::new(),
            recovered: Vec::new(),
            empty,
        };
        for node in controller.store.drained().map_err(|e| e.to_string())? {
            if let Err(e) = controller.scheduler.set_drained(&node, true) {
                tracing::warn!(node, error = %e, "a drained node is no longer in the fleet");
            }
        }
        for row in controller.store.jobs(&[]).map_err(|e| e.to_string())? {
            if row.state.is_final() {
                controller.scheduler.record_ended(row.id, row.state == JobState::Completed);
            }
        }
        let rows = controller.store.jobs(&[JobState::Pending, JobState::Running]).map_err(|e| e.to_string())?;
        for row in rows {
            if row.state == JobState::Running {
                // Started in the log, but no task ever ran (the controller stopped between
                // committing the start and launching): it simply waits again.
                let launched = row.tasks.iter().any(|t| {
                    crate::runner::with_ext(&crate::runner::task_base(data_dir, row.id, &t.group, t.replica), "pid")
                        .exists()
                });
                if !launched {
                    let requeued =
                        Event::Requeued { id: row.id, at_s: now, why: "never launched before a restart".into() };
                    controller.store.append(&[requeued]).map_err(|e| e.to_string())?;
                    if let Err(e) = controller.admit(row.id, &row.job, row.submitted_at_s) {
                        tracing::warn!(job = row.id, error = %e, "requeued job dropped on restart");
                    }
                    continue;
                }
                if let Err(e) = controller.readopt(&row, now) {
                    tracing::warn!(job = row.id, error = %e, "a running job could not be re-adopted: lost");
                    let lost = Event::Ended { id: row.id, at_s: now, ending: Ending::Lost, exit_code: None };
                    controller.store.append(&[lost]).map_err(|e| e.to_string())?;
                }
                continue;
            }
            // A job the fleet can no longer hold (the fleet file changed) is failed, with why.
            let admitted = controller.admit(row.id, &row.job, row.submitted_at_s);
            if let Ok(admission) = admitted {
                controller.settle(vec![(row.id, admission)], now).map_err(|e| e.to_string())?;
            }
            if let Err(e) = admitted {
                let failed = Event::Ended { id: row.id, at_s: now, ending: Ending::Failed, exit_code: None };
                controller.store.append(&[failed]).map_err(|e| e.to_string())?;
                tracing::warn!(job = row.id, error = %e, "pending job dropped on restart");
            }
        }
        Ok(controller)
    }

    /// Take a job that was running at the last stop back on its recorded placement.
    fn readopt(&mut self, row: &JobRow, now: u64) -> Result<(), String> {
        let placement: Vec<TaskPlacement> =
            row.tasks.iter().map(|t| t.placement.clone().ok_or("no recorded placement")).collect::<Result<_, _>>()?;
        let sched = self.sched_job(&row.job).map_err(|e| e.to_string())?;
        let alloc = self.scheduler.adopt(row.id, sched, &placement, row.started_at_s.unwrap_or(now), now)?;
        self.running.insert(row.id, Runs::new(alloc, row.requeues, placement.len() as u32));
        self.recovered.extend(row.tasks.iter().map(|t| Recovered {
            job: row.id,
            group: t.group.clone(),
            replica: t.replica,
        }));
        Ok(())
    }

    /// Tasks re-adopted when the controller opened, for the runner to watch (once).
    pub fn take_recovered(&mut self) -> Vec<Recovered> {
        std::mem::take(&mut self.recovered)
    }

    fn sched_job(&self, job: &Job) -> Result<SchedJob, ApiError> {
        let compiled = self.scheduler.engine().compile(job).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let after = job
            .after
            .iter()
            .map(|d| {
                d.job
                    .strip_prefix('#')
                    .and_then(|id| id.parse().ok())
                    .map(|id| (d.kind, id))
                    .ok_or_else(|| ApiError::Internal(format!("stored dependency {:?} is not resolved", d.job)))
            })
            .collect::<Result<_, _>>()?;
        Ok(SchedJob {
            name: job.name.clone(),
            queue: job.queue.clone(),
            priority: job.priority,
            lifecycle: job.lifecycle,
            control: job.control.clone(),
            planned_length_s: job.control.time_limit_s,
            after,
            compiled,
        })
    }

    /// Dependencies name jobs of the same file (an array's name: all its elements), else the
    /// latest earlier job of that name; stored resolved, as `#<id>`.
    fn resolve_dependencies(&self, mut jobs: Vec<Job>, first: u64) -> Result<Vec<Job>, ApiError> {
        if jobs.iter().all(|j| j.after.is_empty()) {
            return Ok(jobs);
        }
        let local: BTreeMap<String, Vec<usize>> =
            gantry_spec::dependency_index(jobs.iter()).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let earlier = self.store.jobs(&[])?;
        for job in &mut jobs {
            let mut resolved = Vec::new();
            for d in &job.after {
                let ids: Vec<u64> = match local.get(d.job.as_str()) {
                    Some(indices) => indices.iter().map(|&i| first + i as u64).collect(),
                    None => match earlier.iter().rev().find(|r| r.name == d.job) {
                        Some(row) => vec![row.id],
                        None => {
                            return Err(ApiError::BadRequest(format!(
                                "job {:?} / after: unknown job {:?} (not in this file, not submitted before)",
                                job.name, d.job
                            )));
                        }
                    },
                };
                resolved
                    .extend(ids.into_iter().map(|id| gantry_types::Dependency { kind: d.kind, job: format!("#{id}") }));
            }
            job.after = resolved;
        }
        Ok(jobs)
    }

    /// A job whose dependency can never be met ends, cancelled, with the store saying why.
    fn settle(&mut self, admissions: Vec<(u64, Admission)>, now: u64) -> Result<(), ApiError> {
        for (id, admission) in admissions {
            if admission == Admission::Never {
                self.store.append(&[Event::Ended { id, at_s: now, ending: Ending::Cancelled, exit_code: None }])?;
                tracing::info!(job = id, "cancelled: a dependency can never be met");
            }
        }
        Ok(())
    }

    fn admit(&mut self, id: u64, job: &Job, at_s: u64) -> Result<Admission, ApiError> {
        let sched = self.sched_job(job)?;
        self.scheduler.submit(id, sched, at_s).map_err(ApiError::BadRequest)
    }

    /// Every node with its GPUs and the running jobs on them.
    pub fn nodes(&self) -> Result<Vec<NodeView>, ApiError> {
        let engine = self.scheduler.engine();
        let state = engine.state();
        let mut on_gpu: BTreeMap<(String, u32), Vec<u64>> = BTreeMap::new();
        for row in self.store.jobs(&[JobState::Running])? {
            for task in &row.tasks {
                for grant in task.placement.iter().flat_map(|p| p.gpus.iter()) {
                    on_gpu.entry((task.node.clone(), grant.gpu())).or_default().push(row.id);
                }
            }
        }
        let mut nodes: Vec<NodeView> = state
            .info
            .iter()
            .map(|n| NodeView { name: n.name.clone(), drained: engine.is_drained(&n.name), gpus: Vec::new() })
            .collect();
        for gpu in &state.gpus {
            let node = &mut nodes[gpu.node as usize];
            let mut jobs = on_gpu.get(&(node.name.clone(), gpu.index)).cloned().unwrap_or_default();
            jobs.dedup();
            node.gpus.push(GpuView {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                model: self.catalog.model(gpu.model).id.clone(),
                mode: format!("{:?}", gpu.units.kind()).to_ascii_lowercase().replace("timeslice", "time-slice"),
                allocated_milli: gpu.used_milli,
                jobs,
            });
        }
        Ok(nodes)
    }

    /// Drain (nothing new starts there; what runs keeps running) or resume a node; remembered
    /// across restarts.
    pub fn set_drained(&mut self, who: &Principal, node: &str, drained: bool) -> Result<bool, ApiError> {
        who.admin_only(if drained { "draining a node" } else { "resuming a node" })?;
        let changed = self.scheduler.set_drained(node, drained).map_err(ApiError::NotFound)?;
        self.store.set_drained(node, drained)?;
        Ok(changed)
    }

    /// Who holds this secret?
    pub fn authenticate(&self, secret: &str) -> Result<Principal, ApiError> {
        let record = self.store.token_by_hash(&auth::hash(secret))?;
        record.map(Principal::from).ok_or_else(|| ApiError::Unauthorized("unknown or revoked token".into()))
    }

    /// On a store without tokens, create the `admin` token and write its secret to
    /// `admin.token` in `data_dir`; returns that path if it did.
    pub fn bootstrap_admin(
        &mut self,
        data_dir: &std::path::Path,
        now: u64,
    ) -> Result<Option<std::path::PathBuf>, String> {
        if !self.store.tokens().map_err(|e| e.to_string())?.is_empty() {
            return Ok(None);
        }
        let path = data_dir.join("admin.token");
        // A stale file from an earlier store would not match any token: replace it.
        let _ = std::fs::remove_file(&path);
        let secret = auth::new_secret()?;
        let record = TokenRecord {
            name: "admin".into(),
            role: Role::Admin,
            queues: Vec::new(),
            hash: auth::hash(&secret),
            created_at_s: now,
        };
        self.store.put_token(&record).map_err(|e| e.to_string())?;
        auth::write_secret_file(&path, &secret)?;
        Ok(Some(path))
    }

    /// Create a token; returns its secret (shown once, stored only hashed).
    pub fn create_token(&mut self, name: &str, role: Role, queues: Vec<String>, now: u64) -> Result<String, ApiError> {
        auth::check_name(name)?;
        if role == Role::Member && queues.is_empty() {
            return Err(ApiError::BadRequest("a member token needs at least one queue".into()));
        }
        if role != Role::Member && !queues.is_empty() {
            return Err(ApiError::BadRequest("queues apply to member tokens only".into()));
        }
        let secret = auth::new_secret().map_err(ApiError::Internal)?;
        let record = TokenRecord { name: name.into(), role, queues, hash: auth::hash(&secret), created_at_s: now };
        self.store.put_token(&record)?;
        Ok(secret)
    }

    /// Every token, without its hash.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, ApiError> {
        Ok(self.store.tokens()?.into_iter().map(|t| TokenRecord { hash: String::new(), ..t }).collect())
    }

    pub fn revoke_token(&mut self, name: &str) -> Result<(), ApiError> {
        if self.store.revoke_token(name)? { Ok(()) } else { Err(ApiError::NotFound(format!("no token {name:?}"))) }
    }

    /// Accept a workload file's jobs, all or none: each is checked against the fleet (a job no
    /// node could ever hold is refused with the engine's reasons) before anything is stored.
    pub fn submit(&mut self, who: &Principal, workload: &str, now: u64) -> Result<Vec<u64>, ApiError> {
        let jobs =
            gantry_spec::parse_submission(workload, self.catalog).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if jobs.is_empty() {
            return Err(ApiError::BadRequest("the workload has no jobs".into()));
        }
        for job in &jobs {
            who.acts_on(&job.queue)?;
            if !self.scheduler.knows_queue(&job.queue) {
                return Err(ApiError::BadRequest(format!(
                    "job {:?}: unknown queue {:?} (not in the controller's queue file)",
                    job.name, job.queue
                )));
            }
        }
        let first = self.store.next_job_id()?;
        let jobs = self.resolve_dependencies(jobs, first)?;
        // Could each ever run here? Placed, then released, on the empty fleet.
        for job in &jobs {
            let compiled =
                self.empty.compile(job).map_err(|e| ApiError::BadRequest(format!("job {:?}: {e}", job.name)))?;
            match self.empty.place(&compiled) {
                Ok(alloc) => {
                    self.empty.release(alloc).map_err(|e| ApiError::Internal(e.to_string()))?;
                }
                Err(reasons) => {
                    let why: Vec<String> = reasons.iter().take(3).map(|r| r.reason.to_string()).collect();
                    return Err(ApiError::BadRequest(format!(
                        "job {:?} can never run on this fleet: {}",
                        job.name,
                        why.join("; ")
                    )));
                }
            }
        }
        let events: Vec<Event> = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| Event::Submitted { id: first + i as u64, at_s: now, job: Box::new(job.clone()) })
            .collect();
        self.store.append(&events)?;
        let ids: Vec<u64> = (first..first + jobs.len() as u64).collect();
        tracing::info!(token = %who.name, jobs = ids.len(), first, "submitted");
        let mut admissions = Vec::new();
        for (id, job) in ids.iter().zip(&jobs) {
            admissions.push((*id, self.admit(*id, job, now)?));
        }
        self.settle(admissions, now)?;
        Ok(ids)
    }

    /// The device UUIDs and MPS settings a task's grants give it.
    fn devices(&self, task: &TaskPlacement) -> (Vec<String>, Option<(u32, u64)>) {
        let mut devices = Vec::new();
        let mut mps = None;
        for grant in &task.gpus {
            let uuid = self.uuids.get(&(task.node.clone(), grant.gpu())).cloned().unwrap_or_default();
            match grant {
                GpuGrant::Whole { .. } | GpuGrant::TimeSlice { .. } => devices.push(uuid),
                GpuGrant::Mig { profile, start, .. } => {
                    devices.push(format!("MIG-{}-{profile}-{start}", uuid.trim_start_matches("GPU-")));
                }
                GpuGrant::Mps { active_thread_percentage, memory, .. } => {
                    devices.push(uuid);
                    mps = Some((*active_thread_percentage, memory.0));
                }
            }
        }
        (devices, mps)
    }

    /// Run a scheduling cycle: commit each start to the store, then hand its tasks to the
    /// runner (the applier: a start is re-checked against the store's state by the commit).
    pub fn cycle(&mut self, now: u64) -> Result<Effects, ApiError> {
        let mut effects = Effects::default();
        for decision in self.scheduler.cycle(now) {
            match decision {
                Decision::Start { job, alloc, .. } => {
                    let placement = self
                        .scheduler
                        .placement(alloc)
                        .ok_or_else(|| ApiError::Internal("placed job vanished".into()))?;
                    let row = self
                        .store
                        .job(job)?
                        .ok_or_else(|| ApiError::Internal(format!("job {job} not in the store")))?;
                    let world = placement.len() as u32;
                    let mut launches = Vec::new();
                    let mut starts = Vec::new();
                    for (rank, task) in placement.iter().enumerate() {
                        let (devices, mps) = self.devices(task);
                        starts.push(TaskStart {
                            group: task.group.clone(),
                            replica: task.replica,
                            node: task.node.clone(),
                            devices: devices.clone(),
                            placement: Some(task.clone()),
                        });
                        launches.push(Launch {
                            job,
                            job_name: row.name.clone(),
                            group: task.group.clone(),
                            replica: task.replica,
                            rank: rank as u32,
                            world_size: world,
                            node: task.node.clone(),
                            devices,
                            mps,
                            command: row.job.run.command.clone(),
                            env: row.job.run.env.clone(),
                            workdir: row.job.run.workdir.clone(),
                            time_limit_s: row.job.control.time_limit_s,
                            grace_s: row.job.lifecycle.grace_s,
                            attempt: row.requeues,
                        });
                    }
                    if let Err(e) = self.store.append(&[Event::Started { id: job, at_s: now, tasks: starts }]) {
                        // The store says no (cancelled meanwhile): give the capacity back.
                        self.scheduler.ended(alloc, false, now);
                        tracing::warn!(job, error = %e, "start refused by the store");
                        continue;
                    }
                    self.running.insert(job, Runs::new(alloc, row.requeues, world));
                    tracing::info!(job, name = %row.name, tasks = world, "started");
                    effects.launch.extend(launches);
                }
                Decision::Stop { job, cause, .. } => {
                    let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
                    if let Some(runs) = self.running.get_mut(&job) {
                        runs.preempted = Some(cause);
                        effects.stop.push((job, runs.attempt, grace));
                    }
                }
            }
        }
        Ok(effects)
    }

    /// A task of `job` exited (`code`: its exit code, `None` if killed by a signal; `lost`: it
    /// vanished without an exit recorded).
    pub fn task_exited(
        &mut self,
        job: u64,
        code: Option<i32>,
        timed_out: bool,
        lost: bool,
        now: u64,
    ) -> Result<(), ApiError> {
        let Some(runs) = self.running.get_mut(&job) else { return Ok(()) };
        runs.tasks_left -= 1;
        runs.timed_out |= timed_out;
        runs.lost |= lost;
        if !lost && code != Some(0) && runs.failed.is_none() {
            runs.failed = Some(code.unwrap_or(-1));
        }
        if runs.tasks_left > 0 {
            return Ok(());
        }
        let runs = self.running.remove(&job).expect("present");
        if let (Some(cause), false) = (runs.preempted, runs.cancelled) {
            // Stopped for another: it waits again, in its queue, with its original place.
            self.store.append(&[Event::Requeued { id: job, at_s: now, why: format!("preempted ({cause})") }])?;
            self.scheduler.killed(runs.alloc, now);
            return Ok(());
        }
        let ending = if runs.cancelled {
            Ending::Cancelled
        } else if runs.lost && runs.failed.is_none() {
            Ending::Lost
        } else if runs.timed_out {
            Ending::TimedOut
        } else if runs.failed.is_some() {
            Ending::Failed
        } else {
            Ending::Completed
        };
        self.store.append(&[Event::Ended { id: job, at_s: now, ending, exit_code: runs.failed }])?;
        tracing::info!(job, ending = ?ending, exit_code = ?runs.failed, "ended");
        let woken = self.scheduler.ended(runs.alloc, ending == Ending::Completed, now).unwrap_or_default();
        self.settle(woken, now)
    }

    /// Cancel a job: a waiting one ends now; a running one is stopped (the runner signals its
    /// tasks; it ends when they have exited). Returns the run the runner must stop and its
    /// grace period (seconds), if any.
    pub fn cancel(&mut self, who: &Principal, id: u64, now: u64) -> Result<Option<(u32, u64)>, ApiError> {
        let row = self.store.job(id)?.ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?;
        who.acts_on(&row.queue)?;
        match row.state {
            JobState::Pending => {
                let woken = self.scheduler.cancel_waiting(id as JobId, now).map_err(ApiError::Conflict)?;
                self.store.append(&[Event::Ended { id, at_s: now, ending: Ending::Cancelled, exit_code: None }])?;
                self.settle(woken, now)?;
                Ok(None)
            }
            JobState::Running => {
                if let Some(runs) = self.running.get_mut(&id) {
                    runs.cancelled = true;
                }
                Ok(Some((row.requeues, row.job.lifecycle.grace_s)))
            }
            state => Err(ApiError::Conflict(format!("job {id} has already ended ({})", state.name()))),
        }
    }

    pub fn job(&self, who: &Principal, id: u64) -> Result<JobView, ApiError> {
        let row = self.store.job(id)?.ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?;
        if !who.sees(&row.queue) {
            return Err(ApiError::Forbidden(format!(
                "job {id} is in queue {:?}, not one of token {:?}'s",
                row.queue, who.name
            )));
        }
        let pending = self.scheduler.why(id);
        Ok(JobView { row, pending })
    }

    pub fn jobs(&self, who: &Principal, states: &[JobState]) -> Result<Vec<JobView>, ApiError> {
        // Reasons only for the pending jobs listed (explaining one costs a pass over the GPUs).
        Ok(self
            .store
            .jobs(states)?
            .into_iter()
            .filter(|row| who.sees(&row.queue))
            .map(|row| {
                let pending = if row.state == JobState::Pending { self.scheduler.why(row.id) } else { None };
                JobView { row, pending }
            })
            .collect())
    }
}
