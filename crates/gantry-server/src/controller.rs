//! The controller's synchronous core: the store (source of truth), the engine's scheduler,
//! and the one applier through which every change goes. The async edges (HTTP, processes)
//! call into it under one lock; it never blocks on I/O other than the store's commit.
//!
//! Order of effects, so a crash at any instant loses nothing and runs nothing twice: an event
//! is committed to the store *before* it is acted on (a job is `started` in the log before
//! its processes are launched); on restart, jobs the log says were running are marked `lost`
//! (the in-process agent that ran them is gone), never started again.

use crate::auth::{self, Principal};
use crate::wire::{self, AgentGpu, GpuSample, Heartbeat, Launch, Orders, Register, Registered, StopOrder, TaskKey};
use gantry_catalog::Catalog;
use gantry_engine::sched::{Admission, Decision, JobId, SchedJob, Scheduler, SchedulerConfig};
use gantry_engine::{AllocId, Engine, EngineConfig};
use gantry_store::{JobRow, Role, SqliteStore, Store, StoreError, TokenRecord};
use gantry_types::{Ending, Event, Fleet, GpuGrant, GpuMode, Job, JobState, PendingJob, TaskPlacement, TaskStart};
use std::collections::{BTreeMap, BTreeSet};

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

/// A running job's tasks as the runner tracks them.
#[derive(Debug)]
struct Runs {
    alloc: AllocId,
    /// Which run of the job (its requeues so far).
    attempt: u32,
    tasks_left: u32,
    /// Its tasks: (group, replica) → node.
    tasks: BTreeMap<(String, u32), String>,
    /// The tasks whose exits are counted (each once, however often it is reported).
    exited: BTreeSet<(String, u32)>,
    /// A stop was ordered (cancel, preemption): the grace period, seconds.
    stopping: Option<u64>,
    /// First non-zero exit code seen, if any.
    failed: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    lost: bool,
    /// Being stopped for another job (the preemptor's right): it waits again when its tasks
    /// have exited.
    preempted: Option<&'static str>,
    /// What it holds on each GPU, for the meter.
    grants: Vec<Held>,
}

/// Compute held on one GPU.
#[derive(Debug)]
struct Held {
    node: String,
    gpu: u32,
    model: gantry_catalog::ModelId,
    milli: u64,
}

impl Runs {
    fn new(alloc: AllocId, attempt: u32, tasks: &[TaskPlacement]) -> Runs {
        Runs {
            alloc,
            attempt,
            tasks_left: tasks.len() as u32,
            tasks: tasks.iter().map(|t| ((t.group.clone(), t.replica), t.node.clone())).collect(),
            exited: BTreeSet::new(),
            stopping: None,
            failed: None,
            timed_out: false,
            cancelled: false,
            lost: false,
            preempted: None,
            grants: Vec::new(),
        }
    }
}

/// What the in-process runner should do after a change (with remote agents, launches and
/// stops wait in the controller for the agents' heartbeats instead).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub launch: Vec<Launch>,
    /// Jobs whose processes should be signalled now and killed after the grace period:
    /// (job, attempt, grace seconds).
    pub stop: Vec<(u64, u32, u64)>,
    /// New orders wait for remote agents: wake their held heartbeats.
    pub agents_have_orders: bool,
}

/// Who runs the tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agents {
    /// The in-process agent runs every node's tasks on this machine (`serve --local`).
    Local,
    /// Each node's agent connects over the network (`gantry agent`); a node gets work only
    /// while its agent heartbeats within this many seconds.
    Remote { heartbeat_timeout_s: u64 },
}

/// A connected remote agent.
#[derive(Clone, Debug)]
struct AgentLink {
    last_seen_s: u64,
    version: String,
    samples: Vec<GpuSample>,
}

/// The controller: store + scheduler + the jobs it is running.
#[derive(Debug)]
pub struct Controller {
    store: SqliteStore,
    scheduler: Scheduler,
    catalog: &'static Catalog,
    /// (node, GPU index) → UUID.
    uuids: BTreeMap<(String, u32), String>,
    /// (node, GPU index) → model.
    models: BTreeMap<(String, u32), gantry_catalog::ModelId>,
    meter: crate::meter::Meter,
    billing: crate::meter::Billing,
    stats: crate::metrics::ServiceStats,
    series: crate::series::Series,
    idle: crate::idle::IdleWatch,
    /// What the meter saw last (the idle watch reads it).
    last_holdings: Vec<crate::meter::Holding>,
    idle_checked_s: Option<u64>,
    running: BTreeMap<u64, Runs>,
    /// Tasks re-adopted at open, until the in-process runner takes them.
    recovered: Vec<TaskKey>,
    agents: Agents,
    /// Remote agents that registered, by node.
    links: BTreeMap<String, AgentLink>,
    /// Launches a remote node's agent has not reported yet, by node: repeated in every answer
    /// to its heartbeats until it does.
    outbox: BTreeMap<String, BTreeMap<TaskKey, Launch>>,
    /// The fleet with nothing running: could a submitted job ever run here?
    empty: Engine,
    /// With the in-process agent on this machine's real GPUs: NVML, for utilization.
    local_sampler: Option<gantry_agent::sample::Sampler>,
}

/// A node as `gantry nodes` shows it: its GPUs, what each holds, which jobs run there.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    pub name: String,
    pub drained: bool,
    /// With remote agents: whether this node's agent is connected (it gets work only then).
    pub ready: bool,
    /// With remote agents: seconds since its agent's last heartbeat (`None`: never since the
    /// controller started).
    pub heartbeat_age_s: Option<u64>,
    /// With remote agents: the version its agent registered with.
    pub agent_version: Option<String>,
    pub gpus: Vec<GpuView>,
}

/// What the online planner would change now (`GET /v1/plan`): advice, nothing is applied.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlanView {
    /// Idle GPUs it would reconfigure now.
    pub reconfigure: Vec<PlannedChange>,
    /// Busy GPUs it would drain first (their work ends within the drain horizon).
    pub drain: Vec<PlannedChange>,
    /// Changes it wants that wait: work on the GPU ends later, or it changed recently.
    pub deferred: u32,
    /// Tasks planned for: those of the waiting and the running jobs.
    pub demand_tasks: u32,
}

/// One GPU's mode now and the one the planner wants.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedChange {
    pub node: String,
    pub gpu: u32,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// whole, mig, mps or time-slice.
    pub mode: String,
    /// Compute handed out, milli-GPU of 1000.
    pub allocated_milli: u32,
    /// Utilization its agent last sampled, percent (`None`: no sample).
    pub utilization_pct: Option<u32>,
    /// Whether that sample was measured (NVML) rather than simulated.
    pub measured: bool,
    /// Running jobs holding part or all of it.
    pub jobs: Vec<u64>,
    /// A MIG GPU's instances (its layout), each with the job holding it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<MigInstanceView>,
}

/// One MIG instance of a GPU's layout.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct MigInstanceView {
    pub profile: String,
    /// First compute slice.
    pub start: u8,
    /// The running job holding it.
    pub job: Option<u64>,
}

/// A queue as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct QueueView {
    pub name: String,
    pub parent: Option<String>,
    pub weight: Option<u32>,
    /// GPUs' worth guaranteed and at most (all flavors), from the queue file.
    pub guaranteed_gpus: Option<f64>,
    pub limit_gpus: Option<f64>,
    pub allocated_gpus: f64,
    pub used_gpus: f64,
    pub pending: u32,
    pub running: u32,
}

impl QueueView {
    fn named(name: &str) -> QueueView {
        QueueView {
            name: name.to_string(),
            parent: None,
            weight: None,
            guaranteed_gpus: None,
            limit_gpus: None,
            allocated_gpus: 0.0,
            used_gpus: 0.0,
            pending: 0,
            running: 0,
        }
    }
}

/// A job as `queue` and `show` list it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
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
        agents: Agents,
        now: u64,
    ) -> Result<Controller, String> {
        // GPUs reconfigured at run time (an agent's layout adopted) keep that mode over the
        // fleet file's: running tasks are re-adopted on the instances they hold.
        let mut fleet = fleet.clone();
        for (node, index, mode) in store.gpu_modes().map_err(|e| e.to_string())? {
            let gpu = fleet
                .nodes
                .iter_mut()
                .filter(|n| n.name == node)
                .flat_map(|n| n.gpus.iter_mut())
                .find(|g| g.index == index);
            match (gpu, serde_json::from_str::<GpuMode>(&mode)) {
                (Some(gpu), Ok(mode)) => {
                    if gpu.mode != mode {
                        // Say so: an admin who edited the fleet file would otherwise wonder.
                        tracing::info!(
                            node,
                            gpu = index,
                            fleet_file = %gpu.mode.text(),
                            recorded = %mode.text(),
                            "using the GPU mode recorded from its agent, not the fleet file's; the agent's next registration updates it"
                        );
                    }
                    gpu.mode = mode;
                }
                (None, _) => tracing::warn!(node, gpu = index, "a stored GPU mode names a GPU the fleet no longer has"),
                (_, Err(e)) => tracing::warn!(node, gpu = index, error = %e, "a stored GPU mode does not read"),
            }
        }
        let fleet = &fleet;
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
            models: BTreeMap::new(),
            meter: crate::meter::Meter::default(),
            billing: crate::meter::Billing::default(),
            stats: crate::metrics::ServiceStats::default(),
            series: crate::series::Series::default(),
            idle: crate::idle::IdleWatch::default(),
            last_holdings: Vec::new(),
            idle_checked_s: None,
            running: BTreeMap::new(),
            recovered: Vec::new(),
            agents,
            links: BTreeMap::new(),
            outbox: BTreeMap::new(),
            local_sampler: None,
            empty,
        };
        if agents != Agents::Local {
            // No agent has connected to this controller yet.
            for node in &fleet.nodes {
                controller.scheduler.set_ready(&node.name, false)?;
            }
        }
        controller.models = {
            let state = controller.scheduler.engine().state();
            state.gpus.iter().map(|g| ((state.info[g.node as usize].name.clone(), g.index), g.model)).collect()
        };
        let week_ago = now.saturating_sub(crate::series::COARSE_POINTS as u64 * crate::series::COARSE_STEP_S);
        let stored: Vec<crate::series::Point> = controller
            .store
            .series_points(week_ago)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter_map(|(_, json)| serde_json::from_str(&json).ok())
            .collect();
        controller.series.restore(stored);
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
                // committing the start and launching): it simply waits again. (A remote
                // agent says for itself which tasks it launched: see `readopt`.)
                let launched = agents != Agents::Local
                    || row.tasks.iter().any(|t| {
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
        self.track(row.id, alloc, row.requeues, &placement);
        match self.agents {
            Agents::Local => self.recovered.extend(row.tasks.iter().map(|t| TaskKey {
                job: row.id,
                group: t.group.clone(),
                replica: t.replica,
                attempt: row.requeues,
            })),
            // Offered again to each agent: one that has the task reports it (and the offer
            // is withdrawn); one that never got it launches it now.
            Agents::Remote { .. } => {
                let (_, launches) = self.launches(row.id, row, &placement);
                for launch in launches {
                    self.outbox.entry(launch.node.clone()).or_default().insert(launch.key(), launch);
                }
            }
        }
        Ok(())
    }

    /// Tasks re-adopted when the controller opened, for the in-process runner to watch (once).
    pub fn take_recovered(&mut self) -> Vec<TaskKey> {
        std::mem::take(&mut self.recovered)
    }

    /// What each task of a start is given: the store's record and the agent's launch.
    fn launches(&self, job: u64, row: &JobRow, placement: &[TaskPlacement]) -> (Vec<TaskStart>, Vec<Launch>) {
        let world = placement.len() as u32;
        let master_node = placement.first().map(|t| t.node.clone()).unwrap_or_default();
        let mut starts = Vec::new();
        let mut launches = Vec::new();
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
                master_node: master_node.clone(),
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
        (starts, launches)
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

    /// Whether remote agents run the tasks (else the in-process runner does).
    pub fn agents(&self) -> Agents {
        self.agents
    }

    /// A remote agent registers node `reg.node`: the node must be in the fleet, with the same
    /// GPUs (count and models); the agent's UUIDs replace the fleet file's. The node gets work
    /// from now on, while the agent heartbeats.
    pub fn register_agent(&mut self, who: &Principal, reg: Register, now: u64) -> Result<Registered, ApiError> {
        who.agent_only("registering an agent")?;
        let Agents::Remote { heartbeat_timeout_s } = self.agents else {
            return Err(ApiError::Conflict(
                "this controller runs its own in-process agent (serve --local); remote agents need `gantry serve` without --local".into(),
            ));
        };
        let engine = self.scheduler.engine();
        let state = engine.state();
        let Some(node_idx) = state.info.iter().position(|n| n.name == reg.node) else {
            let names: Vec<&str> = state.info.iter().map(|n| n.name.as_str()).take(20).collect();
            return Err(ApiError::NotFound(format!(
                "node {:?} is not in the controller's fleet (it has: {})",
                reg.node,
                names.join(", ")
            )));
        };
        let mut expected: Vec<AgentGpu> = state
            .gpus
            .iter()
            .filter(|g| g.node as usize == node_idx)
            .map(|g| AgentGpu {
                index: g.index,
                uuid: String::new(),
                model: self.catalog.model(g.model).id.clone(),
                mig_mode: None,
                mig: Vec::new(),
            })
            .collect();
        expected.sort_by_key(|g| g.index);
        let mut found = reg.gpus.clone();
        found.sort_by_key(|g| g.index);
        for g in &mut found {
            g.mig.sort();
        }
        let shape = |gpus: &[AgentGpu]| gpus.iter().map(|g| format!("{}:{}", g.index, g.model)).collect::<Vec<_>>();
        if shape(&expected) != shape(&found) {
            return Err(ApiError::BadRequest(format!(
                "node {:?}: the agent found GPUs [{}] but the fleet file says [{}]; fix the fleet file (or the agent's inventory)",
                reg.node,
                shape(&found).join(", "),
                shape(&expected).join(", ")
            )));
        }
        if let Some(g) = found.iter().find(|g| g.uuid.is_empty() || g.uuid.len() > 128 || g.uuid.contains([',', '\n']))
        {
            return Err(ApiError::BadRequest(format!("node {:?}: GPU {} has no usable UUID", reg.node, g.index)));
        }
        // MIG as the hardware has it is MIG as the controller places it: where they differ, an
        // idle GPU takes the agent's layout (someone ran `gantry mig apply` or nvidia-smi on
        // the node); a busy one refuses the registration — its tasks hold instances or a card
        // the hardware no longer has as recorded.
        let fleet = engine.fleet_now();
        let ours = &fleet.nodes[node_idx].gpus;
        let mut adopt: Vec<(u32, GpuMode)> = Vec::new();
        for g in found.iter().filter(|g| g.mig_mode.is_some()) {
            let Some(have) = ours.iter().find(|m| m.index == g.index) else { continue };
            let expected = AgentGpu { mig_mode: None, mig: Vec::new(), ..g.clone() }.with_mode(&have.mode);
            let Some(hardware) = g.mode() else { continue };
            if (expected.mig_mode, &expected.mig) == (g.mig_mode, &g.mig) {
                continue;
            }
            let gpu = &state.gpus[state
                .gpus
                .iter()
                .position(|x| x.node as usize == node_idx && x.index == g.index)
                .expect("checked above")];
            if !gpu.idle() {
                return Err(ApiError::BadRequest(format!(
                    "node {:?} GPU {}: the agent found it {} but the controller has it {} with work on it; \
                     put the layout back (`gantry mig apply` on the node) or let the work end first",
                    reg.node,
                    g.index,
                    hardware.text(),
                    have.mode.text()
                )));
            }
            if let GpuMode::Mig { instances } = &hardware {
                let model = self.catalog.model(gpu.model);
                let legal = match model.mig.as_ref() {
                    Some(geometry) => geometry.validate_layout(&model.id, instances).map_err(|e| e.to_string()),
                    None => Err(format!("{} does not support MIG", model.id)),
                };
                if let Err(why) = legal {
                    return Err(ApiError::BadRequest(format!(
                        "node {:?} GPU {}: the agent reports {} that the catalog does not allow: {why}",
                        reg.node,
                        g.index,
                        hardware.text()
                    )));
                }
            }
            adopt.push((g.index, hardware));
        }
        if !adopt.is_empty() {
            // Recorded first: a restart then rebuilds the GPU as the hardware has it.
            let specs: BTreeMap<u64, Job> = self
                .store
                .jobs(&[JobState::Pending, JobState::Running])?
                .into_iter()
                .map(|row| (row.id, row.job))
                .collect();
            for (index, mode) in &adopt {
                let text = serde_json::to_string(mode).map_err(|e| ApiError::Internal(e.to_string()))?;
                self.store.set_gpu_mode(&reg.node, *index, &text)?;
                self.scheduler
                    .set_gpu_mode(&reg.node, *index, mode, |id| specs.get(&id).cloned())
                    .map_err(ApiError::Internal)?;
                self.empty.set_gpu_mode(&reg.node, *index, mode).map_err(|e| ApiError::Internal(e.to_string()))?;
                tracing::info!(node = %reg.node, gpu = index, mode = %mode.text(), "took the GPU mode the agent found");
            }
        }
        for g in &found {
            self.uuids.insert((reg.node.clone(), g.index), g.uuid.clone());
        }
        let version = reg.version.chars().take(64).collect();
        let back = self.links.insert(reg.node.clone(), AgentLink { last_seen_s: now, version, samples: Vec::new() });
        self.scheduler.set_ready(&reg.node, true).map_err(ApiError::Internal)?;
        tracing::info!(node = %reg.node, gpus = found.len(), again = back.is_some(), "agent registered");
        Ok(Registered { node: reg.node, heartbeat_timeout_s })
    }

    /// A remote agent's heartbeat: record what it reports (tasks running, exited, lost;
    /// utilization), then answer with its orders.
    pub fn agent_heartbeat(
        &mut self,
        who: &Principal,
        node: &str,
        beat: Heartbeat,
        now: u64,
    ) -> Result<Orders, ApiError> {
        who.agent_only("heartbeats")?;
        let Some(link) = self.links.get_mut(node) else {
            return Err(ApiError::Conflict(format!(
                "no agent is registered for node {node:?} (since the controller started): register first"
            )));
        };
        link.last_seen_s = now;
        link.samples = beat.samples;
        if self.scheduler.set_ready(node, true).map_err(ApiError::Internal)? {
            tracing::info!(node, "agent is back: the node gets work again");
        }
        let mut forget = Vec::new();
        let mut orphans = Vec::new();
        let stopping: Vec<TaskKey> = beat.tasks.iter().filter(|r| r.stopping).map(|r| r.key.clone()).collect();
        let reported: BTreeSet<TaskKey> = beat.tasks.iter().map(|r| r.key.clone()).collect();
        for report in beat.tasks {
            if let Some(offers) = self.outbox.get_mut(node) {
                offers.remove(&report.key);
            }
            match report.state {
                wire::TaskState::Running => {
                    // Stop orders name a run (job, attempt), so a run this controller has
                    // is never stopped here, whatever task of it is reported.
                    let current = self.running.get(&report.key.job).is_some_and(|r| r.attempt == report.key.attempt);
                    if !current && !report.stopping {
                        // Not a task this controller runs (its job ended, or an older run):
                        // it must not hold the GPUs.
                        orphans.push(report.key);
                    }
                }
                wire::TaskState::Exited { code, timed_out } => {
                    self.task_exited(&report.key, code, timed_out, false, now)?;
                    forget.push(report.key);
                }
                wire::TaskState::Lost => {
                    self.task_exited(&report.key, None, false, true, now)?;
                    forget.push(report.key);
                }
            }
        }
        // Anti-entropy: a task of a run this controller has on this node that the agent neither
        // reports nor has on offer, and whose exit is not counted, is not there (the agent
        // stopped between claiming and starting it): offer its launch again.
        let missing: Vec<(u64, String, u32)> = self
            .running
            .iter()
            .flat_map(|(&job, r)| {
                r.tasks
                    .iter()
                    .filter(|((group, replica), n)| *n == node && !r.exited.contains(&(group.clone(), *replica)))
                    .map(move |((group, replica), _)| (job, group.clone(), *replica))
            })
            .filter(|(job, group, replica)| {
                let attempt = self.running[job].attempt;
                let key = TaskKey { job: *job, group: group.clone(), replica: *replica, attempt };
                !reported.contains(&key) && !self.outbox.get(node).is_some_and(|o| o.contains_key(&key))
            })
            .collect();
        for (job, group, replica) in missing {
            let attempt = self.running[&job].attempt;
            if self.running[&job].stopping.is_some() {
                // Being stopped, and not there: it has stopped.
                let key = TaskKey { job, group, replica, attempt };
                self.task_exited(&key, None, false, true, now)?;
                continue;
            }
            let Some(row) = self.store.job(job)? else { continue };
            let Some(placement) = self.scheduler.allocation_of(job).and_then(|a| self.scheduler.placement(a)) else {
                continue;
            };
            let (_, launches) = self.launches(job, &row, &placement);
            for launch in launches.into_iter().filter(|l| l.group == group && l.replica == replica) {
                tracing::warn!(node, job, task = %format!("{group}/{replica}"), "the agent does not have this task: offering its launch again");
                self.outbox.entry(node.to_string()).or_default().insert(launch.key(), launch);
            }
        }
        let mut orders = self.agent_orders(node, &stopping);
        orders.forget = forget;
        for key in orphans {
            tracing::warn!(node, job = key.job, attempt = key.attempt, "stopping a task this controller does not run");
            orders.stop.push(StopOrder { job: key.job, attempt: key.attempt, grace_s: gantry_types::GRACE_DEFAULT_S });
        }
        orders.stop.sort();
        orders.stop.dedup();
        Ok(orders)
    }

    /// What node `node`'s agent must do now: launch what it has not reported, stop the
    /// stopping jobs' tasks there (`stopping`: those it already stops).
    pub fn agent_orders(&self, node: &str, stopping: &[TaskKey]) -> Orders {
        let launch = self.outbox.get(node).map(|o| o.values().cloned().collect()).unwrap_or_default();
        let stop = self
            .running
            .iter()
            .filter(|(_, r)| r.stopping.is_some() && r.tasks.values().any(|n| n == node))
            .filter(|(job, r)| !stopping.iter().any(|k| k.job == **job && k.attempt == r.attempt))
            .map(|(&job, r)| StopOrder { job, attempt: r.attempt, grace_s: r.stopping.unwrap_or_default() })
            .collect();
        Orders { launch, stop, forget: Vec::new() }
    }

    /// Nodes whose agent has been silent past the timeout get no new work (what runs there
    /// keeps its place: the agent may come back and report it). Returns the nodes marked.
    pub fn check_agents(&mut self, now: u64) -> Vec<String> {
        let Agents::Remote { heartbeat_timeout_s } = self.agents else { return Vec::new() };
        let mut silent = Vec::new();
        for (node, link) in &self.links {
            let age = now.saturating_sub(link.last_seen_s);
            if age > heartbeat_timeout_s && self.scheduler.set_ready(node, false).unwrap_or(false) {
                tracing::warn!(node, silent_s = age, "agent silent past the heartbeat timeout: no new work goes there");
                silent.push(node.clone());
            }
        }
        silent
    }

    /// Every node with its GPUs and the running jobs on them.
    /// The in-process agent runs on this machine's real GPUs: measure their utilization with
    /// NVML (when it answers) instead of simulating it.
    pub fn measure_local_gpus(&mut self) {
        self.local_sampler = gantry_agent::sample::Sampler::open();
    }

    /// NVML's samples of this machine's GPUs (in-process agent on a discovered fleet), by index.
    fn local_samples(&self) -> BTreeMap<u32, GpuSample> {
        self.local_sampler
            .iter()
            .flat_map(|s| s.sample())
            .map(|m| {
                let sample = GpuSample {
                    index: m.index,
                    utilization_pct: m.utilization_pct,
                    memory_used_mib: m.memory_used_mib,
                    measured: true,
                    jobs: Vec::new(),
                };
                (m.index, sample)
            })
            .collect()
    }

    /// GPU `index` of `node`'s utilization: its remote agent's last sample; with the
    /// in-process agent, NVML's (`local`) or else simulated from the job holding it.
    fn gpu_sample(
        &self,
        node: &str,
        index: u32,
        holder: Option<u64>,
        local: &BTreeMap<u32, GpuSample>,
    ) -> Option<GpuSample> {
        match self.agents {
            Agents::Remote { .. } => {
                self.links.get(node).and_then(|l| l.samples.iter().find(|s| s.index == index)).cloned()
            }
            // On real GPUs, what NVML cannot measure (a GPU in MIG mode: its instances have no
            // utilization counters) stays unmeasured rather than made up.
            Agents::Local if self.local_sampler.is_some() => local.get(&index).cloned(),
            Agents::Local => local.get(&index).cloned().or_else(|| {
                // Simulated: a steady made-up load while a job holds the GPU, else idle.
                let pct = holder.map_or(0, |job| gantry_agent::sample::simulated_pct(job, index));
                Some(GpuSample { index, utilization_pct: pct, memory_used_mib: 0, measured: false, jobs: Vec::new() })
            }),
        }
    }

    /// What each running job holds on each GPU now, with that GPU's utilization.
    fn holdings(&self) -> Vec<crate::meter::Holding> {
        let local = self.local_samples();
        let mut holdings = Vec::new();
        for (&job, runs) in &self.running {
            let spec = self.scheduler.job(job);
            let queue = spec.map(|j| j.queue.as_str()).unwrap_or_default();
            let user = spec.and_then(|j| j.control.user.as_deref()).unwrap_or_default();
            for g in &runs.grants {
                let sample = self.gpu_sample(&g.node, g.gpu, Some(job), &local);
                // The job's own processes where NVML reports them (a share of a shared GPU);
                // else the whole GPU's utilization.
                let pct = match sample.as_ref().and_then(|s| s.jobs.iter().find(|j| j.job == job)) {
                    Some(share) if g.milli > 0 => (u64::from(share.utilization_pct) * 1000 / g.milli).min(100) as u32,
                    _ => sample.map_or(0, |s| s.utilization_pct),
                };
                holdings.push(crate::meter::Holding {
                    job,
                    queue: queue.to_string(),
                    user: user.to_string(),
                    model: self.catalog.model(g.model).id.clone(),
                    milli: g.milli,
                    utilization_pct: pct,
                });
            }
        }
        holdings
    }

    /// Track a run that started (or was re-adopted) on `placement`.
    fn track(&mut self, job: u64, alloc: AllocId, attempt: u32, placement: &[TaskPlacement]) {
        let mut runs = Runs::new(alloc, attempt, placement);
        runs.grants = self.grants(placement);
        self.running.insert(job, runs);
    }

    /// What a placement holds on each GPU (computed once, when a job starts or is re-adopted).
    fn grants(&self, placement: &[TaskPlacement]) -> Vec<Held> {
        let mut held = Vec::new();
        for task in placement {
            for grant in &task.gpus {
                let Some(&model) = self.models.get(&(task.node.clone(), grant.gpu())) else { continue };
                let gpu_model = self.catalog.model(model);
                let milli = match grant {
                    GpuGrant::Whole { .. } => 1000,
                    GpuGrant::Mig { profile, .. } => gpu_model
                        .mig
                        .as_ref()
                        .and_then(|g| g.profiles.iter().find(|p| &p.name == profile))
                        .map_or(0, |p| u64::from(gpu_model.mig_milli(p).0)),
                    GpuGrant::Mps { milli, .. } | GpuGrant::TimeSlice { milli, .. } => u64::from(milli.0),
                };
                held.push(Held { node: task.node.clone(), gpu: grant.gpu(), model, milli });
            }
        }
        held
    }

    /// Meter what runs since the last call; write the ledger every few seconds (`force`: now).
    pub fn meter(&mut self, now: u64, force: bool) {
        // At most once a second (the clock's grain): the loop wakes on every submit.
        if !force && self.meter.last_s() == Some(now) {
            return;
        }
        let holdings = self.holdings();
        self.meter.record(now, &holdings);
        let mut point =
            crate::series::Point { t_s: now, pending_jobs: self.scheduler.queued() as f64, ..Default::default() };
        for h in &holdings {
            let (allocated, used) =
                (h.milli as f64 / 1000.0, h.milli as f64 / 1000.0 * f64::from(h.utilization_pct) / 100.0);
            point.allocated_gpus += allocated;
            point.used_gpus += used;
            let queue = point.queues.entry(h.queue.clone()).or_default();
            queue.0 += allocated;
            queue.1 += used;
        }
        if let Some(done) = self.series.record(point) {
            let keep_from = now.saturating_sub(crate::series::COARSE_POINTS as u64 * crate::series::COARSE_STEP_S);
            let stored = serde_json::to_string(&done)
                .map_err(|e| e.to_string())
                .and_then(|json| self.store.put_series_point(done.t_s, &json, keep_from).map_err(|e| e.to_string()));
            if let Err(e) = stored {
                tracing::warn!(error = %e, "storing a series point failed");
            }
        }
        self.last_holdings = holdings;
        let rows = self.meter.take(now, force);
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.store.add_usage(&rows) {
            tracing::error!(error = %e, "writing the usage ledger failed; kept for the next try");
            self.meter.restore(rows);
        }
    }

    /// The chargeback report for `[from_s, to_s)` (whole hours), grouped `by`; a member sees
    /// only its queues'.
    pub fn usage(
        &self,
        who: &Principal,
        from_s: u64,
        to_s: u64,
        by: crate::meter::UsageBy,
    ) -> Result<Vec<crate::meter::UsageLine>, ApiError> {
        who.not_agent()?;
        let rows: Vec<gantry_store::UsageRow> =
            self.store.usage(from_s, to_s)?.into_iter().filter(|r| who.sees(&r.queue)).collect();
        Ok(crate::meter::report(&rows, by, &self.billing))
    }

    /// Allocation and utilization over time: the last hour at 10 s (`fine`), or the last
    /// week at 5 minutes. A member sees only its queues in the per-queue breakdown.
    pub fn series(&self, who: &Principal, fine: bool) -> Vec<crate::series::Point> {
        let mut points = if fine { self.series.fine() } else { self.series.coarse() };
        for p in &mut points {
            p.queues.retain(|q, _| who.sees(q));
        }
        points
    }

    /// Every queue with what it holds and uses now, its jobs, and its quota (from the queue
    /// file; none under FIFO). Members see only their queues.
    pub fn queues(&self, who: &Principal) -> Result<Vec<QueueView>, ApiError> {
        let mut views: BTreeMap<String, QueueView> = BTreeMap::new();
        if let gantry_engine::sched::Order::FairShare(tree) = &self.scheduler.config().order {
            for q in &tree.queues {
                let view = views.entry(q.name.clone()).or_insert_with(|| QueueView::named(&q.name));
                view.weight = Some(q.weight);
                view.parent = q.parent.map(|p| tree.queues[p].name.clone());
                for quota in &q.quotas {
                    view.guaranteed_gpus =
                        Some(view.guaranteed_gpus.unwrap_or(0.0) + quota.guaranteed_milli as f64 / 1000.0);
                    view.limit_gpus = Some(view.limit_gpus.unwrap_or(0.0) + quota.limit_milli as f64 / 1000.0);
                }
            }
        }
        for h in self.holdings() {
            let view = views.entry(h.queue.clone()).or_insert_with(|| QueueView::named(&h.queue));
            view.allocated_gpus += h.milli as f64 / 1000.0;
            view.used_gpus += h.milli as f64 / 1000.0 * f64::from(h.utilization_pct) / 100.0;
        }
        for row in self.store.jobs(&[JobState::Pending, JobState::Running])? {
            let view = views.entry(row.queue.clone()).or_insert_with(|| QueueView::named(&row.queue));
            if row.state == JobState::Pending {
                view.pending += 1;
            } else {
                view.running += 1;
            }
        }
        Ok(views.into_values().filter(|v| who.sees(&v.name)).collect())
    }

    pub fn set_idle_policy(&mut self, policy: crate::idle::IdlePolicy) {
        self.idle = crate::idle::IdleWatch::new(policy);
    }

    /// Flag jobs idle past the policy's time; stop those their queue reclaims (they end
    /// cancelled). Reads what the meter last saw.
    pub fn check_idle(&mut self, now: u64) -> Effects {
        if self.idle_checked_s == Some(now) {
            return Effects::default();
        }
        self.idle_checked_s = Some(now);
        let mut by_job: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for h in &self.last_holdings {
            let entry = by_job.entry(h.job).or_default();
            entry.0 += h.milli;
            entry.1 += h.milli * u64::from(h.utilization_pct);
        }
        let uses: Vec<crate::idle::JobUse> = by_job
            .into_iter()
            .filter(|(job, (milli, _))| *milli > 0 && self.running.contains_key(job))
            .map(|(job, (milli, weighted))| {
                let spec = self.scheduler.job(job);
                crate::idle::JobUse {
                    job,
                    queue: spec.map(|j| j.queue.clone()).unwrap_or_default(),
                    user: spec.and_then(|j| j.control.user.clone()).unwrap_or_default(),
                    reclaimable: spec.is_some_and(|j| j.lifecycle.preemptible || j.lifecycle.interactive),
                    utilization_pct: (weighted / milli) as u32,
                }
            })
            .collect();
        let mut effects = Effects::default();
        for job in self.idle.observe(now, &uses) {
            let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
            if let Some(runs) = self.running.get_mut(&job) {
                runs.cancelled = true;
                runs.stopping = Some(grace);
                match self.agents {
                    Agents::Local => effects.stop.push((job, runs.attempt, grace)),
                    Agents::Remote { .. } => effects.agents_have_orders = true,
                }
            }
        }
        effects
    }

    /// Idle events (newest last); a member sees only its queues'.
    pub fn idle_events(&self, who: &Principal) -> Vec<crate::idle::IdleEvent> {
        self.idle.events().into_iter().filter(|e| who.sees(&e.queue)).collect()
    }

    /// Is this running job flagged idle now?
    pub fn is_idle(&self, job: u64) -> bool {
        self.idle.is_flagged(job)
    }

    /// A scheduling cycle took this long.
    pub fn observe_cycle(&mut self, took: std::time::Duration) {
        self.stats.cycle_seconds.observe(took.as_secs_f64());
    }

    /// `GET /metrics`: the OpenMetrics exposition (names in docs/formats.md).
    pub fn metrics(&self, who: &Principal, now: u64) -> Result<String, ApiError> {
        use crate::metrics::Exposition;
        who.not_agent()?;
        let nodes = self.nodes(now)?;
        let mut out = Exposition::default();
        out.family(
            "gantry_gpu_allocated_ratio",
            "gauge",
            "",
            "Compute handed out on a GPU, 0 to 1 (a whole GPU, a MIG slice's share, MPS and time-slice shares).",
        );
        for n in &nodes {
            for g in &n.gpus {
                let index = g.index.to_string();
                out.sample(
                    "gantry_gpu_allocated_ratio",
                    &[("node", &n.name), ("gpu", &index), ("model", &g.model)],
                    f64::from(g.allocated_milli) / 1000.0,
                );
            }
        }
        out.family("gantry_gpu_utilization_ratio", "gauge", "", "A GPU's utilization, 0 to 1, as its agent last sampled it (DCGM_FI_DEV_GPU_UTIL / 100); simulated on simulated fleets.");
        for n in &nodes {
            for g in &n.gpus {
                if let Some(pct) = g.utilization_pct {
                    let index = g.index.to_string();
                    let simulated = if g.measured { "false" } else { "true" };
                    out.sample(
                        "gantry_gpu_utilization_ratio",
                        &[("node", &n.name), ("gpu", &index), ("model", &g.model), ("simulated", simulated)],
                        f64::from(pct) / 100.0,
                    );
                }
            }
        }
        let mut by_model: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
        for g in nodes.iter().flat_map(|n| &n.gpus) {
            let entry = by_model.entry(g.model.as_str()).or_default();
            let allocated = f64::from(g.allocated_milli) / 1000.0;
            entry.0 += 1.0;
            entry.1 += allocated;
            entry.2 += allocated * f64::from(g.utilization_pct.unwrap_or(0)) / 100.0;
        }
        for (name, help, pick) in [
            ("gantry_fleet_gpus", "GPUs in the fleet.", 0),
            ("gantry_fleet_allocated_gpus", "GPUs' worth of compute handed out.", 1),
            ("gantry_fleet_used_gpus", "GPUs' worth of compute in use: allocation × utilization.", 2),
        ] {
            out.family(name, "gauge", "", help);
            for (model, v) in &by_model {
                out.sample(name, &[("model", model)], [v.0, v.1, v.2][pick]);
            }
        }
        let mut by_queue: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for h in self.holdings() {
            let entry = by_queue.entry(h.queue).or_default();
            entry.0 += h.milli as f64 / 1000.0;
            entry.1 += h.milli as f64 / 1000.0 * f64::from(h.utilization_pct) / 100.0;
        }
        out.family(
            "gantry_queue_allocated_gpus",
            "gauge",
            "",
            "GPUs' worth of compute held by a queue's running jobs.",
        );
        for (queue, (allocated, _)) in &by_queue {
            out.sample("gantry_queue_allocated_gpus", &[("queue", queue)], *allocated);
        }
        out.family(
            "gantry_queue_used_gpus",
            "gauge",
            "",
            "GPUs' worth of compute a queue's running jobs use: allocation × utilization.",
        );
        for (queue, (_, used)) in &by_queue {
            out.sample("gantry_queue_used_gpus", &[("queue", queue)], *used);
        }
        let mut jobs: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
        for row in self.store.jobs(&[JobState::Pending, JobState::Running])? {
            *jobs.entry((row.queue.clone(), row.state.name())).or_default() += 1;
        }
        out.family("gantry_jobs", "gauge", "", "Jobs waiting or running, by queue and state.");
        for ((queue, state), count) in &jobs {
            out.sample("gantry_jobs", &[("queue", queue), ("state", state)], *count as f64);
        }
        out.family("gantry_jobs_ended", "counter", "", "Jobs ended since the controller started, by how.");
        for (ending, count) in &self.stats.ended {
            out.sample("gantry_jobs_ended_total", &[("ending", ending)], *count as f64);
        }
        out.family(
            "gantry_decisions",
            "counter",
            "",
            "Scheduling decisions since the controller started: starts, and stops for preemption.",
        );
        out.sample("gantry_decisions_total", &[("kind", "start")], self.stats.starts as f64);
        out.sample("gantry_decisions_total", &[("kind", "stop")], self.stats.stops as f64);
        out.histogram("gantry_scheduling_cycle_seconds", "Time one scheduling cycle took.", &self.stats.cycle_seconds);
        out.histogram(
            "gantry_job_wait_seconds",
            "Time from a job's eligibility to its start, per start.",
            &self.stats.wait_seconds,
        );
        out.family(
            "gantry_idle_jobs",
            "gauge",
            "",
            "Running jobs flagged idle now (under the idle threshold past the idle time).",
        );
        out.sample("gantry_idle_jobs", &[], self.idle.flagged() as f64);
        out.family(
            "gantry_idle_events",
            "counter",
            "",
            "Idle jobs flagged since the controller started, by what was done.",
        );
        for action in ["notify", "reclaim"] {
            let count = self.idle.counts.get(action).copied().unwrap_or(0);
            out.sample("gantry_idle_events_total", &[("action", action)], count as f64);
        }
        out.family(
            "gantry_node_ready",
            "gauge",
            "",
            "1 while a node takes new work (its agent is connected and it is not drained), else 0.",
        );
        for n in &nodes {
            out.sample("gantry_node_ready", &[("node", &n.name)], if n.ready && !n.drained { 1.0 } else { 0.0 });
        }
        if matches!(self.agents, Agents::Remote { .. }) {
            out.family(
                "gantry_agent_heartbeat_age_seconds",
                "gauge",
                "seconds",
                "Seconds since a node's agent last heartbeat.",
            );
            for n in &nodes {
                if let Some(age) = n.heartbeat_age_s {
                    out.sample("gantry_agent_heartbeat_age_seconds", &[("node", &n.name)], age as f64);
                }
            }
        }
        Ok(out.finish())
    }

    /// Prices and weights for chargeback; weights the config leaves out come from the queue
    /// file's `billing` (GPU-hour weights per model), when there is one.
    pub fn set_billing(&mut self, mut billing: crate::meter::Billing) {
        if let gantry_engine::sched::Order::FairShare(tree) = &self.scheduler.config().order {
            for (model, milli) in &tree.billing_milli {
                billing.weights.entry(model.clone()).or_insert(f64::from(*milli) / 1000.0);
            }
        }
        self.billing = billing;
    }

    /// The online planner's advice for the fleet as it is now: demand = the waiting and the
    /// running jobs; a running job's GPUs are busy until its start plus its time limit (or
    /// for as long as anyone knows, without one). Nothing is applied: the service cannot
    /// reconfigure GPUs yet.
    pub fn plan_advice(&self, now: u64) -> Result<PlanView, ApiError> {
        let engine = self.scheduler.engine();
        let state = engine.state();
        let fleet = engine.fleet_now();
        let mut busy: Vec<Vec<gantry_engine::online::GpuNow>> =
            fleet.nodes.iter().map(|n| vec![gantry_engine::online::GpuNow::default(); n.gpus.len()]).collect();
        let mut demand = Vec::new();
        for (alloc, allocation) in engine.allocations() {
            let Some((job, started_at)) = self.scheduler.running(*alloc) else { continue };
            let spec = self.scheduler.job(job);
            let end = spec.and_then(|j| j.planned_length_s).map_or(u64::MAX, |len| started_at.saturating_add(len));
            for grant in allocation.tasks.iter().flat_map(|t| t.grants.iter()) {
                let g = &state.gpus[grant.gpu() as usize];
                let position = (grant.gpu() - state.nodes[g.node as usize].gpu_first) as usize;
                let slot = &mut busy[g.node as usize][position].busy_until_s;
                *slot = Some(slot.map_or(end, |e| e.max(end)));
            }
            if let Some(spec) = spec {
                demand.push(gantry_engine::online::job_of(&spec.compiled));
            }
        }
        for (id, _) in self.scheduler.pending_by_id() {
            if let Some(spec) = self.scheduler.job(id) {
                demand.push(gantry_engine::online::job_of(&spec.compiled));
            }
        }
        let step = gantry_engine::online::step(
            &fleet,
            &busy,
            &demand,
            now,
            &gantry_engine::online::OnlineConfig::default(),
            self.catalog,
        )
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let mode_of = |node: &str, index: u32| {
            fleet
                .nodes
                .iter()
                .find(|n| n.name == node)
                .and_then(|n| n.gpus.iter().find(|g| g.index == index))
                .map(|g| g.mode.clone())
        };
        let reconfigure = step
            .reconfigure
            .iter()
            .map(|(node, gpu, to)| PlannedChange {
                node: node.clone(),
                gpu: *gpu,
                from: mode_of(node, *gpu).map(|m| m.text()).unwrap_or_default(),
                to: to.text(),
            })
            .collect();
        let drain = step
            .drain
            .iter()
            .map(|((node, gpu), to)| PlannedChange {
                node: node.clone(),
                gpu: *gpu,
                from: mode_of(node, *gpu).map(|m| m.text()).unwrap_or_default(),
                to: to.text(),
            })
            .collect();
        Ok(PlanView {
            reconfigure,
            drain,
            deferred: step.deferred,
            demand_tasks: demand.iter().map(|j| j.task_count()).sum(),
        })
    }

    pub fn nodes(&self, now: u64) -> Result<Vec<NodeView>, ApiError> {
        let local = self.local_samples();
        let engine = self.scheduler.engine();
        let state = engine.state();
        let mut on_gpu: BTreeMap<(String, u32), Vec<u64>> = BTreeMap::new();
        let mut on_instance: BTreeMap<(String, u32, u8), u64> = BTreeMap::new();
        for row in self.store.jobs(&[JobState::Running])? {
            for task in &row.tasks {
                for grant in task.placement.iter().flat_map(|p| p.gpus.iter()) {
                    on_gpu.entry((task.node.clone(), grant.gpu())).or_default().push(row.id);
                    if let GpuGrant::Mig { gpu, start, .. } = grant {
                        on_instance.insert((task.node.clone(), *gpu, *start), row.id);
                    }
                }
            }
        }
        let mut nodes: Vec<NodeView> = state
            .info
            .iter()
            .map(|n| NodeView {
                name: n.name.clone(),
                drained: engine.is_drained(&n.name),
                ready: !engine.has_mark(&n.name, gantry_engine::NOT_READY_TAINT),
                heartbeat_age_s: self.links.get(&n.name).map(|l| now.saturating_sub(l.last_seen_s)),
                agent_version: self.links.get(&n.name).map(|l| l.version.clone()),
                gpus: Vec::new(),
            })
            .collect();
        for gpu in &state.gpus {
            let node = &mut nodes[gpu.node as usize];
            let mut jobs = on_gpu.get(&(node.name.clone(), gpu.index)).cloned().unwrap_or_default();
            jobs.dedup();
            let sample = self.gpu_sample(&node.name, gpu.index, jobs.first().copied(), &local);
            let gpu_model = self.catalog.model(gpu.model);
            let instances = match &gpu.units {
                gantry_engine::state::Units::Mig { slots } => slots
                    .iter()
                    .map(|slot| MigInstanceView {
                        profile: gpu_model
                            .mig
                            .as_ref()
                            .and_then(|g| g.profiles.get(usize::from(slot.profile)))
                            .map_or_else(String::new, |p| p.name.clone()),
                        start: slot.start,
                        job: on_instance.get(&(node.name.clone(), gpu.index, slot.start)).copied(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            node.gpus.push(GpuView {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                model: self.catalog.model(gpu.model).id.clone(),
                mode: format!("{:?}", gpu.units.kind()).to_ascii_lowercase().replace("timeslice", "time-slice"),
                allocated_milli: gpu.used_milli,
                utilization_pct: sample.as_ref().map(|s| s.utilization_pct),
                measured: sample.is_some_and(|s| s.measured),
                jobs,
                instances,
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

    /// Would `job`, which asks for MIG instances, fit the empty fleet once its MIG-capable GPUs
    /// were laid out for it (the offline planner's layout for this job alone, checked by
    /// placing it with the engine)? False for jobs without MIG requests and for profiles no
    /// GPU model here offers.
    fn fits_once_laid_out(&self, job: &Job) -> bool {
        let wants_mig =
            job.groups.iter().any(|g| matches!(g.resources.gpu, Some(gantry_types::GpuRequest::Mig { .. })));
        wants_mig
            && gantry_engine::plan::plan(&self.empty.fleet_now(), std::slice::from_ref(job), self.catalog)
                .is_ok_and(|plan| plan.unplaced.is_empty())
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
        // Could each ever run here? Placed, then released, on the empty fleet — or, for a job
        // asking for MIG instances no GPU is carved into now, on the empty fleet as the planner
        // would lay it out for the job alone (it waits for that layout; `GET /v1/plan`).
        // The layout check plans the whole fleet: once per distinct request, not per element
        // of an array of thousands.
        let mut laid_out: BTreeMap<String, bool> = BTreeMap::new();
        for job in &jobs {
            let compiled =
                self.empty.compile(job).map_err(|e| ApiError::BadRequest(format!("job {:?}: {e}", job.name)))?;
            match self.empty.place(&compiled) {
                Ok(alloc) => {
                    self.empty.release(alloc).map_err(|e| ApiError::Internal(e.to_string()))?;
                }
                Err(_)
                    if *laid_out.entry(format!("{:?}", job.groups)).or_insert_with(|| self.fits_once_laid_out(job)) =>
                {
                    tracing::info!(job = %job.name, "accepted: needs MIG instances no GPU has now (see GET /v1/plan)");
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
                Decision::Start { job, alloc, eligible_since, .. } => {
                    self.stats.starts += 1;
                    self.stats.wait_seconds.observe(now.saturating_sub(eligible_since) as f64);
                    let placement = self
                        .scheduler
                        .placement(alloc)
                        .ok_or_else(|| ApiError::Internal("placed job vanished".into()))?;
                    let row = self
                        .store
                        .job(job)?
                        .ok_or_else(|| ApiError::Internal(format!("job {job} not in the store")))?;
                    let world = placement.len() as u32;
                    let (starts, launches) = self.launches(job, &row, &placement);
                    if let Err(e) = self.store.append(&[Event::Started { id: job, at_s: now, tasks: starts }]) {
                        // The store says no (cancelled meanwhile): give the capacity back.
                        self.scheduler.ended(alloc, false, now);
                        tracing::warn!(job, error = %e, "start refused by the store");
                        continue;
                    }
                    self.track(job, alloc, row.requeues, &placement);
                    let mut nodes: Vec<&str> = placement.iter().map(|t| t.node.as_str()).collect();
                    nodes.dedup();
                    tracing::info!(job, name = %row.name, tasks = world, on = %nodes.join(","), "started");
                    match self.agents {
                        Agents::Local => effects.launch.extend(launches),
                        Agents::Remote { .. } => {
                            for launch in launches {
                                self.outbox.entry(launch.node.clone()).or_default().insert(launch.key(), launch);
                            }
                            effects.agents_have_orders = true;
                        }
                    }
                }
                Decision::Stop { job, cause, .. } => {
                    self.stats.stops += 1;
                    let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
                    if let Some(runs) = self.running.get_mut(&job) {
                        runs.preempted = Some(cause);
                        runs.stopping = Some(grace);
                        match self.agents {
                            Agents::Local => effects.stop.push((job, runs.attempt, grace)),
                            Agents::Remote { .. } => effects.agents_have_orders = true,
                        }
                    }
                }
            }
        }
        Ok(effects)
    }

    /// A task exited (`code`: its exit code, `None` if killed by a signal; `lost`: it vanished
    /// without an exit recorded). Each task of a run counts once, however often it is
    /// reported; a report of another run, or of a job not running, changes nothing.
    pub fn task_exited(
        &mut self,
        task: &TaskKey,
        code: Option<i32>,
        timed_out: bool,
        lost: bool,
        now: u64,
    ) -> Result<(), ApiError> {
        let job = task.job;
        let Some(runs) = self.running.get_mut(&job) else { return Ok(()) };
        let which = (task.group.clone(), task.replica);
        if runs.attempt != task.attempt || !runs.tasks.contains_key(&which) || !runs.exited.insert(which) {
            return Ok(());
        }
        runs.tasks_left -= 1;
        runs.timed_out |= timed_out;
        runs.lost |= lost;
        if !lost && code != Some(0) && runs.failed.is_none() {
            runs.failed = Some(code.unwrap_or(-1));
        }
        if runs.tasks_left > 0 {
            return Ok(());
        }
        // Its last seconds count, and its numbers are in the ledger before it is gone.
        self.meter(now, true);
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
        *self.stats.ended.entry(ending.name()).or_default() += 1;
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
                    runs.stopping = Some(row.job.lifecycle.grace_s);
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
