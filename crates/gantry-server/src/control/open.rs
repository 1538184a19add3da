//! Opening the state machine: from its [`Setup`] (fleet, scheduling, agents: what the
//! operator chose) and an [`Image`] of what the store holds (read by the caller), recover —
//! pending jobs wait again, running ones are re-adopted on exactly their recorded placement or
//! marked lost. The changes recovery makes are returned as a batch to commit before serving,
//! headed by an `open` entry in the command log, so a replay re-opens at the same point.

use super::image::{Carried, Image, OpenedImage, opened_image};
use super::{AgentLink, Agents, Controller};
use crate::auth::Tokens;
use crate::error::ControlError;
use gantry_catalog::Catalog;
use gantry_engine::sched::{Backfill, Order, Scheduler, SchedulerConfig};
use gantry_engine::{Engine, EngineConfig};
use gantry_store::{Batch, JobRow};
use gantry_types::{Ending, Event, Fleet, GpuMode, JobState, QueueTree, TaskPlacement};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What the operator chose for this start: recorded in the command log with each open.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub fleet: Fleet,
    /// The queue tree under fair share; `None`: FIFO.
    pub fair_share: Option<QueueTree>,
    pub backfill: String,
    pub reserve_depth: usize,
    pub preempt: bool,
    pub agents: Agents,
    pub idle: crate::idle::IdlePolicy,
    /// Admission limits (logs recorded before they existed replay with the defaults).
    #[serde(default)]
    pub admission: crate::admission::AdmissionLimits,
    /// Which Unix account runs each user's tasks (logs from before it replay with none).
    #[serde(default)]
    pub accounts: crate::users::Accounts,
    /// Whether and how the controller reconfigures GPUs itself (logs from before it replay
    /// with the default: advice only).
    #[serde(default)]
    pub reconfigure: super::reconfig::ReconfigurePolicy,
    /// How often the meter writes the ledger, seconds: [`crate::meter::FLUSH_EVERY_S`] in the
    /// service (a crash loses at most that much metering); an hour in simulated time, where
    /// nothing crashes and a flush costs one pass over the running jobs.
    #[serde(default = "default_meter_flush_s")]
    pub meter_flush_s: u64,
    /// The secret each run's step key is derived from (`None`: runs get no step key, as in
    /// simulated time). Made at each start, never recorded: a run dispatched across a failover
    /// may hold two keys, and its steps to the other half are refused by name.
    #[serde(skip)]
    pub step_secret: Option<String>,
    /// A job whose dependency can never be met stays pending saying so, as in Slurm (logs
    /// from before this was kept replay with what they did: cancelled at once).
    #[serde(default)]
    pub keep_unsatisfiable: bool,
}

fn default_meter_flush_s() -> u64 {
    crate::meter::FLUSH_EVERY_S
}

impl Setup {
    /// Run `attempt` of `job`'s step key: SHA-256 of the secret, the job and the attempt.
    pub fn step_key(&self, job: u64, attempt: u32) -> Option<String> {
        use sha2::{Digest, Sha256};
        let secret = self.step_secret.as_ref()?;
        let digest = Sha256::digest(format!("gantry-step-key\n{secret}\n{job}\n{attempt}").as_bytes());
        Some(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn new(fleet: Fleet, scheduling: &SchedulerConfig, agents: Agents, idle: crate::idle::IdlePolicy) -> Setup {
        Setup {
            fleet,
            fair_share: match &scheduling.order {
                Order::Fifo => None,
                Order::FairShare(tree) => Some(tree.clone()),
            },
            backfill: scheduling.backfill.name(),
            reserve_depth: scheduling.reserve_depth,
            preempt: scheduling.preempt,
            agents,
            idle,
            admission: Default::default(),
            accounts: Default::default(),
            reconfigure: Default::default(),
            meter_flush_s: crate::meter::FLUSH_EVERY_S,
            step_secret: None,
            keep_unsatisfiable: scheduling.keep_unsatisfiable,
        }
    }

    pub fn scheduling(&self) -> Result<SchedulerConfig, ControlError> {
        let backfill = Backfill::parse(&self.backfill).ok_or_else(|| ControlError::Setup {
            field: "backfill",
            message: format!("backfill {:?}: off, greedy or reserve", self.backfill),
        })?;
        Ok(SchedulerConfig {
            order: self.fair_share.clone().map_or(Order::Fifo, Order::FairShare),
            backfill,
            reserve_depth: self.reserve_depth,
            preempt: self.preempt,
            keep_unsatisfiable: self.keep_unsatisfiable,
        })
    }
}

/// The `open` entry of the command log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "command", rename = "open")]
pub struct Opened {
    pub setup: Setup,
    /// With `Agents::Local`: running jobs whose tasks the caller had launched.
    pub launched: Vec<u64>,
    /// Fingerprint of what recovery recorded (its events), as for any command.
    pub decisions: String,
    /// What it opened from besides the jobs: a replay that starts at this entry (the log
    /// before it deleted by retention) opens from the same. Logs from before it have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<OpenedImage>,
}

/// The fleet with the GPU modes recorded at run time (an agent's layout adopted) over the
/// fleet file's: running tasks are re-adopted on the instances they hold.
fn fleet_as_recorded(fleet: &Fleet, modes: &[(String, u32, String)]) -> Fleet {
    let mut fleet = fleet.clone();
    for (node, index, mode) in modes {
        let gpu = fleet
            .nodes
            .iter_mut()
            .filter(|n| &n.name == node)
            .flat_map(|n| n.gpus.iter_mut())
            .find(|g| g.index == *index);
        match (gpu, serde_json::from_str::<GpuMode>(mode)) {
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
    fleet
}

impl Controller {
    /// Open the controller over `image` at `now`. `launched`: the running jobs whose tasks
    /// the caller had started (with `Agents::Local`; agents say for themselves).
    /// Returns the controller and the batch recovery made, to commit before serving.
    pub fn open(
        setup: Setup,
        image: Image,
        catalog: &'static Catalog,
        launched: &BTreeSet<u64>,
        now: u64,
    ) -> Result<(Controller, Batch), ControlError> {
        Controller::open_carrying(setup, image, None, catalog, launched, now)
    }

    /// [`Controller::open`], taking back what a checkpoint carried (`Some` at a checkpoint,
    /// live or replayed).
    pub(crate) fn open_carrying(
        setup: Setup,
        image: Image,
        carried: Option<Carried>,
        catalog: &'static Catalog,
        launched: &BTreeSet<u64>,
        now: u64,
    ) -> Result<(Controller, Batch), ControlError> {
        let kept = opened_image(&image, carried.clone());
        let fleet = fleet_as_recorded(&setup.fleet, &image.gpu_modes);
        let mut c = Controller::empty(&setup, &fleet, image.tokens, catalog, now)?;
        c.restore_side_tables(&fleet, image.series, &image.drained)?;
        c.restore_reconfigurations(&image.reconfigurations)?;
        c.recover_carrying(carried, image.jobs, launched, now)?;
        c.backlog = super::backlog::Backlog::of(c.jobs.values());
        let events = serde_json::to_string(&c.pending.events).map_err(|e| ControlError::Internal(e.to_string()))?;
        let opened = Opened {
            setup,
            launched: launched.iter().copied().collect(),
            decisions: super::command::fingerprint(&events),
            image: Some(kept),
        };
        let body = serde_json::to_string(&opened).map_err(|e| ControlError::Internal(e.to_string()))?;
        c.pending.commands.insert(0, (now, body));
        c.pending.opened = true;
        let batch = std::mem::take(&mut c.pending);
        Ok((c, batch))
    }

    /// A controller of `fleet` with `tokens` and nothing else yet.
    fn empty(
        setup: &Setup,
        fleet: &Fleet,
        tokens: Vec<gantry_store::TokenRecord>,
        catalog: &'static Catalog,
        now: u64,
    ) -> Result<Controller, ControlError> {
        let engine = Engine::new(fleet, catalog, EngineConfig::default())
            .map_err(|e| ControlError::Setup { field: "fleet", message: e.to_string() })?;
        let uuids = fleet
            .nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(move |g| ((n.name.clone(), g.index), g.uuid.clone())))
            .collect();
        let agents = setup.agents;
        Ok(Controller {
            setup: setup.clone(),
            empty: engine.clone(),
            scheduler: Scheduler::new(engine, setup.scheduling()?),
            catalog,
            agents,
            jobs: BTreeMap::new(),
            tokens: Tokens::new(tokens),
            uuids,
            models: BTreeMap::new(),
            meter: crate::meter::Meter::new(setup.meter_flush_s),
            billing: crate::meter::Billing::default(),
            stats: crate::metrics::ServiceStats::default(),
            series: crate::series::Series::default(),
            idle: crate::idle::IdleWatch::new(setup.idle.clone()),
            on_node: BTreeMap::new(),
            running: BTreeMap::new(),
            links: BTreeMap::<String, AgentLink>::new(),
            refused: BTreeMap::new(),
            lost_nodes: Default::default(),
            outbox: BTreeMap::new(),
            backlog: Default::default(),
            admission: setup.admission.clone(),
            accounts: setup.accounts.clone(),
            submissions: BTreeMap::new(),
            reconfigs: super::reconfig::Reconfigs::new(setup.reconfigure.clone()),
            reoffered: BTreeMap::new(),
            opened_s: now,
            pending: Batch::default(),
        })
    }

    /// Readiness (no remote agent has connected yet), the GPU models, the series and the
    /// drained nodes, as the store had them.
    fn restore_side_tables(
        &mut self,
        fleet: &Fleet,
        series: Vec<crate::series::Point>,
        drained: &[String],
    ) -> Result<(), ControlError> {
        let c = self;
        if c.agents != Agents::Local {
            // No agent has connected to this controller yet.
            for node in &fleet.nodes {
                c.scheduler.set_ready(&node.name, false)?;
            }
        }
        c.models = {
            let state = c.scheduler.engine().state();
            state.gpus.iter().map(|g| ((state.info[g.node as usize].name.clone(), g.index), g.model)).collect()
        };
        c.series.restore(series);
        for node in drained {
            if let Err(e) = c.scheduler.set_drained(node, true) {
                tracing::warn!(node, error = %e, "a drained node is no longer in the fleet");
            }
        }
        Ok(())
    }

    /// Recover the jobs, with what a checkpoint carried (`None` at a restart).
    fn recover_carrying(
        &mut self,
        carried: Option<Carried>,
        jobs: Vec<JobRow>,
        launched: &BTreeSet<u64>,
        now: u64,
    ) -> Result<(), ControlError> {
        let c = self;
        // A checkpoint's links and readiness before recovery (what it offers depends on
        // them); its fair-share memory after (re-adopted runs are charged from now).
        let memory = carried.as_ref().map(|c| gantry_engine::sched::SchedulerMemory::from(c.scheduler.clone()));
        let used = carried.as_ref().map(|c| c.used.clone()).unwrap_or_default();
        let in_flight = carried.as_ref().map(|c| (c.outbox.clone(), c.partly_ended.clone()));
        if let Some(carried) = carried {
            c.take_carried(carried)?;
        }
        c.recover(jobs, launched, now)?;
        if let Some(memory) = memory
            && !c.scheduler.remember(&memory)
        {
            let message = "a checkpoint's fair-share memory does not fit the queue tree".to_string();
            return Err(ControlError::Log { seq: None, message });
        }
        if let Some((outbox, partly_ended)) = in_flight {
            // Offered to the agents what was unacknowledged at the checkpoint, not every task.
            c.outbox =
                outbox.into_iter().map(|(node, l)| (node, l.into_iter().map(|l| (l.key(), l)).collect())).collect();
            for p in partly_ended {
                let Some(runs) = c.running.get_mut(&p.job) else { continue };
                runs.exited = p.exited.into_iter().collect();
                runs.tasks_left = (runs.tasks.len() - runs.exited.len().min(runs.tasks.len())) as u32;
                (runs.failed, runs.oom) = (p.failed, p.oom);
            }
        }
        for (job, uses) in used {
            if let Some(runs) = c.running.get_mut(&job) {
                runs.used = uses.into_iter().map(|u| (u.node.clone(), u)).collect();
            }
        }
        Ok(())
    }

    /// Take back the reconfigurations under way at the last stop: their GPUs are cordoned
    /// again; an ordered one waits for its agent's report (or registration).
    fn restore_reconfigurations(&mut self, records: &[(u64, String)]) -> Result<(), ControlError> {
        let mut restored = Vec::with_capacity(records.len());
        for (id, json) in records {
            match serde_json::from_str::<super::reconfig::Reconfiguration>(json) {
                Ok(r) => restored.push(r),
                Err(e) => tracing::warn!(id, error = %e, "a stored reconfiguration does not read: skipped"),
            }
        }
        self.reconfigs.restore(restored);
        let under_way: Vec<(String, u32)> = self.reconfigs.active.keys().cloned().collect();
        for (node, gpu) in under_way {
            if let Err(e) = self.scheduler.set_gpu_cordoned(&node, gpu, true) {
                tracing::warn!(node, gpu, error = %e, "a reconfiguration under way names a GPU the fleet no longer has");
                self.reconfigs.active.remove(&(node, gpu));
                continue;
            }
            tracing::info!(node, gpu, "a reconfiguration under way at the last stop resumes");
        }
        Ok(())
    }

    /// Take back the jobs of the log: ended ones for dependencies, pending ones to wait again,
    /// running ones re-adopted (or requeued if never launched, lost if they cannot be).
    fn recover(&mut self, rows: Vec<JobRow>, launched: &BTreeSet<u64>, now: u64) -> Result<(), ControlError> {
        let live: Vec<JobRow> = rows.iter().filter(|r| !r.state.is_final()).cloned().collect();
        for row in rows {
            if row.state.is_final() {
                self.scheduler.record_ended(row.id, row.state == JobState::Completed);
            }
            self.index_submission(&row);
            self.jobs.insert(row.id, row);
        }
        for row in live {
            if row.state == JobState::Running {
                self.recover_running(&row, launched, now)?;
                continue;
            }
            // A job the fleet can no longer hold (the fleet file changed) is failed, with why.
            match self.admit(row.id, &row.job, row.submitted_at_s) {
                Ok(admission) => self.settle(vec![(row.id, admission)], now)?,
                Err(e) => {
                    self.record(Event::ended(row.id, now, Ending::Failed, None))?;
                    tracing::warn!(job = row.id, error = %e, "pending job dropped on restart");
                }
            }
        }
        Ok(())
    }

    fn recover_running(&mut self, row: &JobRow, launched: &BTreeSet<u64>, now: u64) -> Result<(), ControlError> {
        // Started in the log, but no task ever ran (the controller stopped between committing
        // the start and launching): it simply waits again. (A remote agent says for itself
        // which tasks it launched: see `readopt`.)
        if self.agents == Agents::Local && !launched.contains(&row.id) {
            self.record(Event::requeued(row.id, now, "never launched before a restart"))?;
            if let Err(e) = self.admit(row.id, &row.job, row.submitted_at_s) {
                tracing::warn!(job = row.id, error = %e, "requeued job dropped on restart");
            }
            return Ok(());
        }
        if let Err(e) = self.readopt(row, now) {
            tracing::warn!(job = row.id, error = %e, "a running job could not be re-adopted: lost");
            self.record(Event::ended(row.id, now, Ending::Lost, None))?;
        }
        Ok(())
    }

    /// Take a job that was running at the last stop back on its recorded placement.
    fn readopt(&mut self, row: &JobRow, now: u64) -> Result<(), ControlError> {
        let placement: Vec<TaskPlacement> = row
            .tasks
            .iter()
            .map(|t| t.placement.clone().ok_or_else(|| ControlError::Internal("no recorded placement".into())))
            .collect::<Result<_, _>>()?;
        let compiled = self.compile(&row.job)?;
        let sched = self.sched_job(&row.job, compiled)?;
        let alloc = self.scheduler.adopt(row.id, sched, &placement, row.started_at_s.unwrap_or(now), now)?;
        self.track(row.id, alloc, row.requeues, &placement, now);
        match self.agents {
            // The caller runs the tasks itself and knows them.
            Agents::Local => {}
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
}
