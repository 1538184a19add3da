//! The controller as a deterministic state machine: [`Controller::apply`] takes the time and
//! a [`Command`] and returns the [`Effects`] that must follow, or a [`ControlError`] with
//! nothing changed. It reads no clock, does no I/O and takes no lock: time arrives in the
//! call, the store is written by the caller from `Effects::commit` (before any launch, stop or
//! reply goes out), processes and agents are the caller's. Read-only views over its state
//! live in [`crate::views`]; tokens in [`crate::auth`].
//!
//! Order of effects, so a crash at any instant loses nothing and runs nothing twice: a change
//! is committed *before* it is acted on (a job is `started` in the log before its processes
//! are launched); on restart ([`open`]), jobs the log says were running are re-adopted on
//! their recorded placement or marked `lost`, never started again.

mod agents;
mod backlog;
mod checkpoint;
pub mod command;
mod estimate;
pub mod image;
mod jobs;
mod lost;
pub mod open;
mod read;
pub mod reconfig;
mod run;
mod tokens;
mod trim;
mod usage;

#[cfg(test)]
mod heartbeat_log_tests;
#[cfg(test)]
mod lost_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod usage_tests;

pub use command::{Command, Effects, Reply, StopRun};
pub use image::Image;
pub use open::Setup;

use crate::auth::Tokens;
use crate::error::ControlError;
use crate::wire::{GpuSample, Launch, TaskKey};
use gantry_catalog::Catalog;
use gantry_engine::sched::Scheduler;
use gantry_engine::{AllocId, Engine};
use gantry_store::{Batch, JobRow};
use gantry_types::{Event, TaskPlacement};
use std::collections::{BTreeMap, BTreeSet};

/// Who runs the tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Agents {
    /// The caller runs every task itself and applies their exits as commands (the simulator's
    /// `gantry sim --live`); launches and stops come back in the effects.
    Local,
    /// Each node's agent connects over the network (`gantry agent`); a node gets work only
    /// while its agent heartbeats within `heartbeat_timeout_s`, and is lost — its jobs end
    /// or wait again, their GPUs freed — once silent for `node_lost_after_s`.
    Remote {
        heartbeat_timeout_s: u64,
        #[serde(default = "node_lost_after_default")]
        node_lost_after_s: u64,
    },
}

/// Default silence after which a remote node is lost: five minutes, well past the heartbeat
/// timeout (an agent restart or a short network cut must not requeue a fleet's jobs).
pub const NODE_LOST_AFTER_DEFAULT_S: u64 = 300;

fn node_lost_after_default() -> u64 {
    NODE_LOST_AFTER_DEFAULT_S
}

/// A running job's tasks as the controller tracks them.
#[derive(Debug)]
pub(crate) struct Runs {
    pub alloc: AllocId,
    /// Which run of the job (its requeues so far).
    pub attempt: u32,
    pub tasks_left: u32,
    /// Its tasks: (group, replica) → node.
    pub tasks: BTreeMap<(String, u32), String>,
    /// The tasks whose exits are counted (each once, however often it is reported).
    pub exited: BTreeSet<(String, u32)>,
    /// A stop was ordered (cancel, preemption): the grace period, seconds.
    pub stopping: Option<u64>,
    /// First non-zero exit code seen, if any.
    pub failed: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Who cancelled it (a token's name, or the controller).
    pub cancelled_by: Option<String>,
    /// The job steps its batch host recorded, as the task that ran the script reported them.
    pub steps: Vec<gantry_types::StepRecord>,
    pub lost: bool,
    /// Being stopped for another job (the preemptor's right): it waits again when its tasks
    /// have exited.
    pub preempted: Option<&'static str>,
    /// A node it ran on was lost: it waits again (requeue) or ends lost.
    pub node_lost: Option<String>,
    /// Being stopped to wait again — moved off a GPU the controller reconfigures (a
    /// restartable job), or requeued by a user: it waits again when its tasks have exited,
    /// recorded with this reason.
    pub moved: Option<String>,
    /// What it holds on each GPU, for the meter.
    pub grants: Vec<Held>,
    /// What this run has used on each node so far, as its agents last measured it.
    pub used: BTreeMap<String, gantry_types::NodeUse>,
    /// The task the OOM killer ended, if one was: the run ends `oom`.
    pub oom: Option<gantry_types::OomKill>,
}

/// Compute held on one GPU.
#[derive(Debug)]
pub(crate) struct Held {
    pub node: String,
    pub gpu: u32,
    pub model: gantry_catalog::ModelId,
    pub milli: u64,
}

/// A connected remote agent.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct AgentLink {
    /// When its agent was last heard from (registration or any heartbeat, logged or not).
    /// Decisions never read it directly: a tick records the silences it decides from
    /// (`Command::Tick::silent`).
    pub heard_s: u64,
    /// When the controller last took its samples and usage in (the meter's, the idle watch's
    /// and the runs' figures change at most this often: [`agents::SAMPLES_EVERY_S`]).
    pub absorbed_s: Option<u64>,
    /// The runs on the node (job, attempt) when it last did: a run started or ended there
    /// makes the next samples due at once (a short job is metered from its first figures).
    pub absorbed_runs: Vec<(u64, u32)>,
    /// The samples of its latest heartbeat, taken in or not (what the views show).
    pub recent_samples: Vec<GpuSample>,
    /// The agent process's lasting identity (`Register::instance`): a restart keeps it.
    pub instance: String,
    pub version: String,
    /// The protocol it speaks (layout orders need 2, confinement 3).
    pub protocol: u32,
    pub samples: Vec<GpuSample>,
    /// How the node confines its tasks, as its agent said.
    pub confinement: crate::wire::Confinement,
    /// The driver's id of each MIG instance, by (GPU index, start), as its agent last said
    /// (registration, layout reports): labels for metrics only.
    pub gpu_instance_ids: BTreeMap<(u32, u8), u32>,
}

/// The controller's state: the scheduler and everything the live service knows beside it.
#[derive(Debug)]
pub struct Controller {
    /// What the operator chose at the open (a checkpoint re-opens with it).
    setup: Setup,
    scheduler: Scheduler,
    catalog: &'static Catalog,
    agents: Agents,
    /// The jobs table, as the store derives it from the same events.
    jobs: BTreeMap<u64, JobRow>,
    tokens: Tokens,
    /// (node, GPU index) → UUID.
    uuids: BTreeMap<(String, u32), String>,
    /// (node, GPU index) → model.
    models: BTreeMap<(String, u32), gantry_catalog::ModelId>,
    meter: crate::meter::Meter,
    billing: crate::meter::Billing,
    stats: crate::metrics::ServiceStats,
    series: crate::series::Series,
    idle: crate::idle::IdleWatch,
    /// Running jobs by the nodes their tasks run on: a heartbeat reads only its node's jobs
    /// (a scan of every running job per heartbeat grows with the fleet twice over), and a
    /// node's new samples re-meter them.
    on_node: BTreeMap<String, BTreeSet<u64>>,
    running: BTreeMap<u64, Runs>,
    /// Remote agents that registered, by node.
    links: BTreeMap<String, AgentLink>,
    /// Reports each node made about tasks that are not its own, refused.
    refused: BTreeMap<String, agents::Refused>,
    /// Nodes lost (silent past `node_lost_after_s`, or declared): nothing runs there until
    /// their agent is heard from again.
    lost_nodes: BTreeSet<String>,
    /// Launches a remote node's agent has not reported yet, by node: repeated in every answer
    /// to its heartbeats until it does.
    outbox: BTreeMap<String, BTreeMap<TaskKey, Launch>>,
    /// The fleet with nothing running: could a submitted job ever run here?
    empty: Engine,
    /// Jobs waiting per user and queue, and the limits on them and on submissions.
    backlog: backlog::Backlog,
    admission: crate::admission::AdmissionLimits,
    /// Which Unix account runs each user's tasks.
    accounts: crate::users::Accounts,
    /// (submitting token, idempotency key) → the jobs that submission made.
    submissions: BTreeMap<(String, String), Vec<u64>>,
    /// GPU reconfigurations: the policy, what is under way, what the guards remember.
    reconfigs: reconfig::Reconfigs,
    /// When this controller opened from the store (a checkpoint keeps it): the silence of a
    /// node whose agent has not spoken since counts from here.
    opened_s: u64,
    /// When each task left out of its agent's heartbeats was last offered again
    /// ([`trim::REOFFER_EVERY_S`]).
    reoffered: BTreeMap<TaskKey, u64>,
    /// What the command being applied changes, for the caller to commit.
    pending: Batch,
}

impl Controller {
    /// Apply `command` at `now` (Unix seconds). On success, the effects to carry out — the
    /// commit first. On error nothing changed and nothing is to be committed.
    pub fn apply(&mut self, now: u64, mut command: Command) -> Result<Effects, ControlError> {
        if let Command::Tick { silent: silent @ None } = &mut command {
            *silent = Some(self.silences(now));
        }
        if let Command::Heartbeat { node, beat, .. } = &mut command {
            self.trim_heartbeat(node, beat);
        }
        if let Command::Checkpoint { keep_log_s } = command {
            // Logged as the `open` entry it writes, not as a command.
            return self.checkpoint(now, keep_log_s);
        }
        let before = batch_size(&self.pending);
        let result = self.dispatch(now, &command);
        let changed = batch_size(&self.pending) > before;
        let mut effects = match result {
            Ok(effects) => effects,
            Err(e) if !changed => return Err(e),
            Err(e) => {
                // A broken invariant after a change (a bug): what changed in memory stays
                // queued, with the command, and is committed with the next one, so the store
                // and the memory never disagree and a replay fails the same way.
                tracing::error!(command = command.kind(), error = %e, "a command failed after changing state");
                self.log(now, command, &Effects::default());
                return Err(e);
            }
        };
        // A command that changed nothing a replay needs stays out of the log; one that wrote
        // anything is always logged (the store and the log never disagree).
        if !effects.unlogged || batch_size(&self.pending) > 0 {
            self.log(now, command, &effects);
        }
        effects.commit = std::mem::take(&mut self.pending);
        Ok(effects)
    }

    /// Put `command` in the command log, with the fingerprint of its decisions.
    fn log(&mut self, now: u64, command: Command, effects: &Effects) {
        let reasons =
            matches!(command, Command::Tick { .. }).then(|| format!("{:016x}", self.scheduler.reasons_digest()));
        let decisions = command::Decisions {
            events: &self.pending.events,
            launch: &effects.launch,
            stop: &effects.stop,
            reply: &effects.reply,
            reasons,
        };
        // A run's step key is made from this controller's secret, which a replay has not: it
        // is no decision, and stays out of the fingerprint.
        let decisions = serde_json::to_string(&decisions).unwrap_or_default();
        let decisions = command::fingerprint(&command::forget_step_keys(&decisions));
        let body = serde_json::to_string(&command::Logged { command, decisions }).unwrap_or_default();
        self.pending.commands.push((now, body));
    }

    fn dispatch(&mut self, now: u64, command: &Command) -> Result<Effects, ControlError> {
        match command {
            Command::Submit { who, jobs, key } => self.submit(who, jobs.clone(), key.as_deref(), now),
            Command::Cancel { who, job, force } => self.cancel_command(who, *job, *force, now),
            Command::NodeLost { who, node } => self.declare_lost(who, node, now),
            Command::Hold { who, job, held } => self.set_held(who, *job, *held, now),
            Command::Requeue { who, job } => self.requeue(who, *job),
            Command::Estimate { who, jobs } => self.estimate(who, jobs.clone(), now),
            Command::Drain { who, node, drained } => self.set_drained(who, node, *drained),
            Command::CreateToken { who, name, role, queues, hash, node, lifetime_s } => {
                let record = gantry_store::TokenRecord {
                    name: name.clone(),
                    role: *role,
                    queues: queues.clone(),
                    hash: hash.clone(),
                    created_at_s: now,
                    node: node.clone(),
                    expires_at_s: None,
                };
                self.create_token(who, record, *lifetime_s)
            }
            Command::RevokeToken { who, name } => self.revoke_token(who, name),
            Command::Register { who, registration } => self.register_agent(who, registration, now),
            Command::Heartbeat { who, node, beat } => self.agent_heartbeat(who, node, beat, now),
            Command::LayoutDone { node, report } => {
                with_effects(|effects| self.layout_outcome(node, report, now, effects))
            }
            Command::TaskExited { task, code, timed_out, lost } => {
                with_effects(|effects| self.task_exited(task, *code, *timed_out, *lost, now, effects))
            }
            Command::Tick { silent } => self.tick(now, silent.as_ref().cloned().unwrap_or_default()),
            Command::Checkpoint { keep_log_s } => self.checkpoint(now, *keep_log_s),
        }
    }

    /// Remember the idempotency key `row` was submitted with (by the token that submitted it).
    pub(crate) fn index_submission(&mut self, row: &JobRow) {
        let control = &row.job.control;
        if let Some(key) = &control.submission_key {
            let token = control.submitted_by.clone().or_else(|| control.user.clone()).unwrap_or_default();
            self.submissions.entry((token, key.clone())).or_default().push(row.id);
        }
    }

    /// Record `event`: applied to the jobs table now, committed with the command.
    pub(crate) fn record(&mut self, event: Event) -> Result<(), ControlError> {
        let before = self.jobs.get(&event.job_id());
        let row = gantry_store::apply_event(before, &event)?;
        self.backlog.change(before, Some(&row));
        if before.is_none() {
            self.index_submission(&row);
        }
        if let Event::Ended { ending, .. } = &event {
            // Every ending counts: a run's, a waiting job cancelled, a dependency never met.
            *self.stats.ended.entry(ending.name()).or_default() += 1;
        }
        if let Event::Ended { used, .. } | Event::Requeued { used, .. } = &event {
            let cpu_ms: u64 = used.iter().filter_map(|u| u.used.cpu_ms).sum();
            *self.stats.cpu_ms_by_queue.entry(row.queue.clone()).or_default() += cpu_ms;
        }
        self.jobs.insert(row.id, row);
        self.pending.events.push(event);
        Ok(())
    }

    /// Time passes: silent agents lose their nodes' new work, the meter and the idle watch
    /// look, reconfigurations move along, then a scheduling cycle runs.
    fn tick(&mut self, now: u64, silent: BTreeMap<String, u64>) -> Result<Effects, ControlError> {
        self.check_agents(&silent);
        self.meter(now, false);
        let mut effects = self.check_idle(now);
        for node in self.silent_past_loss(&silent) {
            self.lose_node(&node, "its agent was silent past node_lost_after", now, &mut effects)?;
        }
        self.reconfigure_tick(now, &mut effects)?;
        self.cycle(now, &mut effects)?;
        Ok(effects)
    }

    /// When the scheduler next needs a cycle with nothing else happening (a starvation bound
    /// or a reserved start coming due), if it does.
    pub fn next_wake(&self, now: u64) -> Option<u64> {
        let r = &self.reconfigs;
        let plan = match r.policy.mode {
            reconfig::ReconfigureMode::Auto => {
                // A step brought forward by a MIG job that arrived since the last one.
                let soon = r
                    .planned_s
                    .filter(|&last| r.policy.replan_after_s > 0 && r.arrivals.back().is_some_and(|&(t, _)| t >= last));
                let soon = soon.map(|last| last + r.policy.replan_after_s);
                [r.next_plan_s, soon].into_iter().flatten().filter(|&t| t > now).min()
            }
            _ => None,
        };
        let deadline = self.reconfigs.active.values().map(|r| r.deadline_s).filter(|&t| t > now).min();
        [self.scheduler.next_wake(now), plan, deadline].into_iter().flatten().min()
    }

    /// The running jobs with a task on `node`.
    pub(crate) fn runs_on(&self, node: &str) -> impl Iterator<Item = (u64, &Runs)> + '_ {
        self.on_node.get(node).into_iter().flatten().filter_map(|job| self.running.get(job).map(|r| (*job, r)))
    }

    /// Is `node` a node of the fleet?
    pub fn knows_node(&self, node: &str) -> bool {
        self.scheduler.engine().state().node_by_name(node).is_some()
    }

    /// The tasks of `job`'s current run (none if it is not running).
    pub fn tasks_of(&self, job: u64) -> Vec<TaskKey> {
        self.running
            .get(&job)
            .map(|r| {
                r.tasks
                    .keys()
                    .map(|(group, replica)| TaskKey {
                        job,
                        group: group.clone(),
                        replica: *replica,
                        attempt: r.attempt,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether agents run the tasks (else the caller does).
    pub fn agents(&self) -> Agents {
        self.agents
    }

    /// Is there no token yet (the first start: an admin token is made)?
    pub fn has_no_tokens(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Who holds this secret, at `now_s`?
    pub fn authenticate(&self, secret: &str, now_s: u64) -> Result<crate::auth::Principal, ControlError> {
        self.tokens.authenticate(secret, now_s)
    }

    /// A scheduling cycle took this long (measured by the caller: the state machine has no
    /// clock).
    pub fn observe_cycle(&mut self, took: std::time::Duration) {
        self.stats.cycle_seconds.observe(took.as_secs_f64());
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

    /// Drain (nothing new starts there; what runs keeps running) or resume a node; remembered
    /// across restarts.
    fn set_drained(
        &mut self,
        who: &crate::auth::Principal,
        node: &str,
        drained: bool,
    ) -> Result<Effects, ControlError> {
        who.admin_only(if drained { "draining a node" } else { "resuming a node" })?;
        let changed = self.scheduler.set_drained(node, drained)?;
        self.pending.drained.push((node.to_string(), drained));
        Ok(Effects { reply: Reply::Drained { changed }, schedule: !drained, ..Default::default() })
    }

    /// Track a run that started (or was re-adopted) on `placement`.
    /// Metered from `now`.
    pub(crate) fn track(&mut self, job: u64, alloc: AllocId, attempt: u32, placement: &[TaskPlacement], now: u64) {
        let runs = Runs {
            alloc,
            attempt,
            tasks_left: placement.len() as u32,
            tasks: placement.iter().map(|t| ((t.group.clone(), t.replica), t.node.clone())).collect(),
            exited: BTreeSet::new(),
            stopping: None,
            failed: None,
            timed_out: false,
            cancelled: false,
            cancelled_by: None,
            steps: Vec::new(),
            lost: false,
            preempted: None,
            node_lost: None,
            moved: None,
            grants: self.grants(placement),
            used: BTreeMap::new(),
            oom: None,
        };
        for node in runs.tasks.values() {
            self.on_node.entry(node.clone()).or_default().insert(job);
        }
        self.running.insert(job, runs);
        self.remeter(job, now);
    }
}

/// How many changes a batch holds.
pub(crate) fn batch_size(b: &Batch) -> usize {
    b.commands.len()
        + b.events.len()
        + b.tokens_added.len()
        + b.tokens_revoked.len()
        + b.drained.len()
        + b.gpu_modes.len()
        + b.reconfigurations.len()
        + b.usage.len()
        + b.series.len()
}

/// The effects a command handler that adds to them leaves.
fn with_effects(handle: impl FnOnce(&mut Effects) -> Result<(), ControlError>) -> Result<Effects, ControlError> {
    let mut effects = Effects::default();
    handle(&mut effects)?;
    Ok(effects)
}
