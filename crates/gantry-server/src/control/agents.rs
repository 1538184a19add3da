//! The remote agents' side of the state machine: registration (the node's GPUs checked
//! against the fleet, MIG layouts the hardware has adopted), heartbeats (task reports in,
//! orders out), and silence (a node whose agent stops heartbeating gets no new work).

use super::{AgentLink, Agents, Controller, Effects, Reply};
use crate::auth::Principal;
use crate::error::ControlError;
use crate::wire::{self, AgentGpu, Heartbeat, Launch, Orders, Register, Registered, StopOrder, TaskKey};
use gantry_types::{GpuMode, Job};
use std::collections::{BTreeMap, BTreeSet};

/// A node's refused reports are logged at most once per this many seconds (the count goes on).
pub const REFUSED_LOG_EVERY_S: u64 = 60;

/// How often the controller takes a node's GPU samples and its runs' usage in: the meter,
/// the idle watch and the runs' figures move at this pace, so a heartbeat whose only news is
/// a utilization figure changes nothing — and is not logged — in between. A minute is finer
/// than any idle window or ledger hour; an exit or any other change is taken at once, with
/// the usage it carries.
pub const SAMPLES_EVERY_S: u64 = 60;

/// Reports a node made about tasks that are not its own, refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refused {
    pub count: u64,
    /// When one was last logged (`None`: never).
    pub logged_s: Option<u64>,
}

impl Controller {
    /// A remote agent registers node `reg.node`: the node must be in the fleet, with the same
    /// GPUs (count and models); the agent's UUIDs replace the fleet file's. The node gets work
    /// from now on, while the agent heartbeats.
    pub(crate) fn register_agent(
        &mut self,
        who: &Principal,
        reg: &Register,
        now: u64,
    ) -> Result<Effects, ControlError> {
        who.serves(&reg.node)?;
        let heartbeat_timeout_s = self.remote_heartbeat_timeout()?;
        check_protocol(reg)?;
        self.check_not_taken(who, reg, now, heartbeat_timeout_s)?;
        let (node_idx, found) = self.check_inventory(reg)?;
        let adopt = self.layouts_to_adopt(reg, node_idx, &found)?;
        self.adopt_layouts(&reg.node, &adopt)?;
        for g in &found {
            self.uuids.insert((reg.node.clone(), g.index), g.uuid.clone());
        }
        let back = self.links.insert(reg.node.clone(), new_link(reg, now));
        // Its samples start again from none.
        self.remeter_node(&reg.node, now);
        self.found(&reg.node);
        self.scheduler.set_ready(&reg.node, true)?;
        tracing::info!(node = %reg.node, gpus = found.len(), again = back.is_some(), "agent registered");
        let mut effects = Effects::default();
        self.reconcile_registration(&reg.node, &found, now, &mut effects)?;
        let registered = Registered { node: reg.node.clone(), heartbeat_timeout_s, protocol: wire::PROTOCOL_VERSION };
        effects.reply = Reply::Registered(registered);
        effects.schedule = true;
        Ok(effects)
    }

    /// The agents' heartbeat timeout; an error if this controller runs tasks itself.
    fn remote_heartbeat_timeout(&self) -> Result<u64, ControlError> {
        let Agents::Remote { heartbeat_timeout_s, .. } = self.agents else {
            return Err(ControlError::Conflict(
                "this controller runs tasks itself (Agents::Local); agents need a controller that waits for them"
                    .into(),
            ));
        };
        Ok(heartbeat_timeout_s)
    }

    /// Take the GPU modes the agent found on `node` (see [`Self::layouts_to_adopt`]).
    fn adopt_layouts(&mut self, node: &str, adopt: &[(u32, GpuMode)]) -> Result<(), ControlError> {
        if adopt.is_empty() {
            return Ok(());
        }
        // Recorded first: a restart then rebuilds the GPU as the hardware has it.
        let specs: BTreeMap<u64, Job> =
            self.jobs.values().filter(|row| !row.state.is_final()).map(|row| (row.id, row.job.clone())).collect();
        for (index, mode) in adopt {
            let text = serde_json::to_string(mode).map_err(|e| ControlError::Internal(e.to_string()))?;
            self.pending.gpu_modes.push((node.to_string(), *index, text));
            self.scheduler.set_gpu_mode(node, *index, mode, |id| specs.get(&id).cloned())?;
            self.empty.set_gpu_mode(node, *index, mode).map_err(|e| ControlError::Internal(e.to_string()))?;
            tracing::info!(node = %node, gpu = index, mode = %mode.text(), "took the GPU mode the agent found");
        }
        Ok(())
    }

    /// A node whose agent is alive (heard from within the timeout) takes no second agent: a
    /// registration from another agent process (another `instance`) is refused until the
    /// live one has been silent for the timeout, unless an admin's token registers it. The
    /// same process registering again (it restarted, or the controller did) is welcome.
    fn check_not_taken(&self, who: &Principal, reg: &Register, now: u64, timeout_s: u64) -> Result<(), ControlError> {
        let Some(link) = self.links.get(&reg.node) else { return Ok(()) };
        // Silent as the last tick found it (what a replay knows too), not as the wall clock has it.
        let silent = !self.node_reachable(&reg.node);
        let silent_s = now.saturating_sub(link.heard_s);
        if link.instance == reg.instance || silent || who.role == gantry_store::Role::Admin {
            return Ok(());
        }
        Err(ControlError::Conflict(format!(
            "node {:?} has a live agent (another process, heard from {silent_s} s ago): a second one is refused \
             until it has been silent for {timeout_s} s; stop the other agent first",
            reg.node
        )))
    }

    /// The node must be in the fleet with the same GPUs (indices and models) and usable UUIDs:
    /// its index in the engine and the agent's GPUs, sorted.
    fn check_inventory(&self, reg: &Register) -> Result<(usize, Vec<AgentGpu>), ControlError> {
        let state = self.scheduler.engine().state();
        let Some(node_idx) = state.node_by_name(&reg.node).map(|n| n as usize) else {
            let names: Vec<&str> = state.info.iter().map(|n| n.name.as_str()).take(20).collect();
            return Err(ControlError::UnknownNode(format!(
                "node {:?} is not in the controller's fleet (it has: {})",
                reg.node,
                names.join(", ")
            )));
        };
        let mut expected: Vec<AgentGpu> = state
            .node_gpus(node_idx as gantry_engine::state::NodeIdx)
            .iter()
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
            return Err(agent_refused(
                &reg.node,
                "gpus",
                format!(
                    "node {:?}: the agent found GPUs [{}] but the fleet file says [{}]; fix the fleet file (or the agent's inventory)",
                    reg.node,
                    shape(&found).join(", "),
                    shape(&expected).join(", ")
                ),
            ));
        }
        if let Some(g) = found.iter().find(|g| g.uuid.is_empty() || g.uuid.len() > 128 || g.uuid.contains([',', '\n']))
        {
            return Err(agent_refused(
                &reg.node,
                "gpus",
                format!("node {:?}: GPU {} has no usable UUID", reg.node, g.index),
            ));
        }
        Ok((node_idx, found))
    }

    /// MIG as the hardware has it is MIG as the controller places it: where they differ, an
    /// idle GPU takes the agent's layout (someone ran `gantry mig apply` or nvidia-smi on the
    /// node); a busy one refuses the registration — its tasks hold instances or a card the
    /// hardware no longer has as recorded. The GPUs whose mode is to change, and to what.
    fn layouts_to_adopt(
        &self,
        reg: &Register,
        node_idx: usize,
        found: &[AgentGpu],
    ) -> Result<Vec<(u32, GpuMode)>, ControlError> {
        let engine = self.scheduler.engine();
        let state = engine.state();
        let node = node_idx as gantry_engine::state::NodeIdx;
        let ours = &engine.node_now(node).gpus;
        let mut adopt: Vec<(u32, GpuMode)> = Vec::new();
        for g in found.iter().filter(|g| g.mig_mode.is_some()) {
            let Some(have) = ours.iter().find(|m| m.index == g.index) else { continue };
            let expected = AgentGpu { mig_mode: None, mig: Vec::new(), ..g.clone() }.with_mode(&have.mode);
            let Some(hardware) = g.mode() else { continue };
            if (expected.mig_mode, &expected.mig) == (g.mig_mode, &g.mig) {
                continue;
            }
            let gpu = state.node_gpus(node).iter().find(|x| x.index == g.index).expect("checked above");
            if !gpu.idle() {
                return Err(agent_refused(
                    &reg.node,
                    "gpus.mode",
                    format!(
                        "node {:?} GPU {}: the agent found it {} but the controller has it {} with work on it; \
                     put the layout back (`gantry mig apply` on the node) or let the work end first",
                        reg.node,
                        g.index,
                        hardware.text(),
                        have.mode.text()
                    ),
                ));
            }
            if let GpuMode::Mig { instances } = &hardware {
                let model = self.catalog.model(gpu.model);
                let legal = match model.mig.as_ref() {
                    Some(geometry) => geometry.validate_layout(&model.id, instances).map_err(|e| e.to_string()),
                    None => Err(format!("{} does not support MIG", model.id)),
                };
                if let Err(why) = legal {
                    return Err(agent_refused(
                        &reg.node,
                        "gpus.mode",
                        format!(
                            "node {:?} GPU {}: the agent reports {} that the catalog does not allow: {why}",
                            reg.node,
                            g.index,
                            hardware.text()
                        ),
                    ));
                }
            }
            adopt.push((g.index, hardware));
        }
        Ok(adopt)
    }

    /// A remote agent's heartbeat: record what it reports (tasks running, exited, lost;
    /// utilization), then answer with its orders.
    pub(crate) fn agent_heartbeat(
        &mut self,
        who: &Principal,
        node: &str,
        beat: &Heartbeat,
        now: u64,
    ) -> Result<Effects, ControlError> {
        who.serves(node)?;
        super::trim::check_heartbeat_size(beat)?;
        self.hear_agent(node, beat, now)?;
        // Samples and usage are taken in when due: a minute after the last, with an exit, or
        // once a run started or ended there. What else the heartbeat changes is noted as it
        // happens: a heartbeat that changed nothing is not logged.
        let runs: Vec<(u64, u32)> = self.runs_on(node).map(|(job, r)| (job, r.attempt)).collect();
        let (due, resampled) = self.take_samples_if_due(node, beat, now, &runs)?;
        let mut changed = self.found(node);
        let mut effects = Effects::default();
        if self.scheduler.set_ready(node, true)? {
            tracing::info!(node, "agent is back: the node gets work again");
            changed = true;
        }
        let stopping: Vec<TaskKey> = beat.tasks.iter().filter(|r| r.stopping).map(|r| r.key.clone()).collect();
        let reported: BTreeSet<TaskKey> = beat.tasks.iter().map(|r| r.key.clone()).collect();
        changed |= self.absorb_figures(node, beat, now, (due, resampled), runs);
        let (forget, orphans, counted) = self.absorb_reports(node, beat, now, &mut effects)?;
        changed |= counted;
        changed |= self.reoffer_missing(node, &reported, now, &mut effects)?;
        for report in beat.layouts.iter().take(crate::wire::LAYOUT_REPORTS_MAX) {
            self.layout_outcome(node, report, now, &mut effects)?;
        }
        // Whatever went to the store (events, ledger rows, layout records) or to a caller.
        changed |= super::batch_size(&self.pending) > 0 || !effects.launch.is_empty() || !effects.stop.is_empty();
        effects.unlogged = !changed;
        if changed {
            self.stats.heartbeats.0 += 1;
        } else {
            self.stats.heartbeats.1 += 1;
        }
        effects.reply = Reply::Orders(self.heartbeat_orders(node, beat, &stopping, forget, orphans));
        Ok(effects)
    }

    /// Note that `node`'s registered agent was heard at `now`; an error if `beat` comes from
    /// another agent process.
    fn hear_agent(&mut self, node: &str, beat: &Heartbeat, now: u64) -> Result<(), ControlError> {
        let Some(link) = self.links.get_mut(node).filter(|l| l.instance == beat.instance) else {
            return Err(ControlError::Conflict(format!(
                "this agent is not the one registered for node {node:?} (since the controller started): register first"
            )));
        };
        link.heard_s = now;
        if link.recent_samples != beat.samples {
            link.recent_samples = beat.samples.clone();
        }
        Ok(())
    }

    /// Whether `node`'s figures are due (given its `runs` now), and whether its GPU samples
    /// were taken in from `beat` (they are when due and changed).
    fn take_samples_if_due(
        &mut self,
        node: &str,
        beat: &Heartbeat,
        now: u64,
        runs: &[(u64, u32)],
    ) -> Result<(bool, bool), ControlError> {
        // An exit counts only for a task of this node not counted yet (junk about other
        // tasks must not make every heartbeat's figures due).
        let ends = beat.tasks.iter().any(|r| r.state != wire::TaskState::Running && self.ends_here(node, &r.key));
        let Some(link) = self.links.get_mut(node) else { return Err(ControlError::Internal("the link went".into())) };
        let due = link.absorbed_s.is_none_or(|at| now >= at + SAMPLES_EVERY_S) || ends || link.absorbed_runs != runs;
        let resampled = due && link.samples != beat.samples;
        if resampled {
            link.samples = beat.samples.clone();
        }
        Ok((due, resampled))
    }

    /// Take in the new samples (`resampled`) and, when `due`, the runs' usage; note when
    /// figures were last taken in. Returns whether anything changed.
    fn absorb_figures(
        &mut self,
        node: &str,
        beat: &Heartbeat,
        now: u64,
        (due, resampled): (bool, bool),
        runs: Vec<(u64, u32)>,
    ) -> bool {
        if resampled {
            self.remeter_node(node, now);
        }
        let used = due && self.absorb_usage(node, beat);
        if (resampled || used)
            && let Some(link) = self.links.get_mut(node)
        {
            link.absorbed_s = Some(now);
            link.absorbed_runs = runs;
        }
        resampled || used
    }

    /// The orders answering `beat`: the node's outbox, tasks to forget, orphans to stop (and
    /// no launches while a stale task is still alive there).
    fn heartbeat_orders(
        &self,
        node: &str,
        beat: &Heartbeat,
        stopping: &[TaskKey],
        forget: Vec<TaskKey>,
        orphans: Vec<TaskKey>,
    ) -> Orders {
        let mut orders = self.agent_orders(node, stopping);
        orders.forget = forget;
        orders.forget_layouts = beat.layouts.iter().take(crate::wire::LAYOUT_REPORTS_MAX).map(|r| r.id).collect();
        for key in orphans {
            tracing::warn!(node, job = key.job, attempt = key.attempt, "stopping a task this controller does not run");
            orders.stop.push(StopOrder { job: key.job, attempt: key.attempt, grace_s: gantry_types::GRACE_DEFAULT_S });
        }
        orders.stop.sort();
        orders.stop.dedup();
        if !orders.launch.is_empty() && self.stale_alive(beat) {
            // A run this controller no longer has is still alive there (a lost node come back,
            // an orphan being stopped): nothing new starts on the node until it is gone, so a
            // GPU never holds two runs' processes at once. The launches wait in the outbox.
            tracing::info!(node, held = orders.launch.len(), "launches held until the node's stale tasks are gone");
            orders.launch.clear();
        }
        orders
    }

    /// Does `beat` report as still running a task of a run this controller no longer has
    /// (an ended run, or an earlier attempt)?
    fn stale_alive(&self, beat: &Heartbeat) -> bool {
        beat.tasks.iter().any(|r| {
            r.state == wire::TaskState::Running
                && self.running.get(&r.key.job).is_none_or(|runs| runs.attempt != r.key.attempt)
        })
    }

    /// Count the exits a heartbeat reports and withdraw the launches it confirms. Returns the
    /// reports the agent may forget (their exits are counted), the tasks it runs that this
    /// controller does not (their job ended, or an older run): they must not hold the GPUs —
    /// and whether anything was counted or withdrawn.
    fn absorb_reports(
        &mut self,
        node: &str,
        beat: &Heartbeat,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(Vec<TaskKey>, Vec<TaskKey>, bool), ControlError> {
        let mut forget = Vec::new();
        let mut orphans = Vec::new();
        let mut changed = false;
        for report in beat.tasks.iter().cloned() {
            if let Some(offers) = self.outbox.get_mut(node) {
                changed |= offers.remove(&report.key).is_some();
            }
            let job = report.key.job;
            let counted = |c: &Controller| c.running.get(&job).map(|r| (r.attempt, r.exited.len(), r.oom.is_some()));
            let before = counted(self);
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
                _ if !self.may_report(node, &report.key) => self.refuse_report(node, &report.key, now),
                wire::TaskState::Exited { code, timed_out, oom } => {
                    if oom {
                        self.note_oom(node, &report.key);
                    }
                    self.note_steps(&report);
                    self.task_exited(&report.key, code, timed_out, false, now, effects)?;
                    forget.push(report.key);
                }
                wire::TaskState::Lost => {
                    self.task_exited(&report.key, None, false, true, now, effects)?;
                    forget.push(report.key);
                }
            }
            changed |= counted(self) != before;
        }
        Ok((forget, orphans, changed))
    }

    /// Is `key` a task of a run this controller has on `node`, not yet counted as ended?
    fn ends_here(&self, node: &str, key: &TaskKey) -> bool {
        self.running.get(&key.job).is_some_and(|runs| {
            let which = (key.group.clone(), key.replica);
            runs.attempt == key.attempt
                && runs.tasks.get(&which).is_some_and(|n| n == node)
                && !runs.exited.contains(&which)
        })
    }

    /// May `node` say how task `key` ended? Not for a task of a run this controller has that
    /// runs on another node: a node speaks for its own tasks only. (A report of a run the
    /// controller no longer has changes nothing either way.)
    fn may_report(&self, node: &str, key: &TaskKey) -> bool {
        match self.running.get(&key.job) {
            Some(runs) if runs.attempt == key.attempt => {
                runs.tasks.get(&(key.group.clone(), key.replica)).is_some_and(|n| n == node)
            }
            _ => true,
        }
    }

    /// A report about another node's task: counted against the reporting node, logged at
    /// most once per [`REFUSED_LOG_EVERY_S`], and nothing else.
    fn refuse_report(&mut self, node: &str, key: &TaskKey, now: u64) {
        let refused = self.refused.entry(node.to_string()).or_default();
        refused.count += 1;
        if refused.logged_s.is_none_or(|at| now >= at + REFUSED_LOG_EVERY_S) {
            refused.logged_s = Some(now);
            tracing::warn!(
                node,
                job = key.job,
                refused = refused.count,
                "refused a report about a task this node does not run (is its agent compromised?)"
            );
        }
    }

    /// Record what the node's cgroups measured of the runs it reports, for the runs this
    /// controller has there (another run's, or another node's job's, changes nothing).
    /// Take in what each of the node's runs has used; whether any figure changed.
    fn absorb_usage(&mut self, node: &str, beat: &Heartbeat) -> bool {
        let mut changed = false;
        for u in beat.usage.iter().take(wire::USAGE_REPORTS_MAX) {
            let Some(runs) = self.running.get_mut(&u.job) else { continue };
            if runs.attempt != u.attempt || !runs.tasks.values().any(|n| n == node) {
                continue;
            }
            let used = gantry_types::NodeUse { node: node.to_string(), used: u.used.clone() };
            changed |= runs.used.insert(node.to_string(), used.clone()).as_ref() != Some(&used);
        }
        changed
    }

    /// The OOM killer ended a task of a run this controller has on `node`: the run ends `oom`
    /// (the first such task is the one named).
    fn note_oom(&mut self, node: &str, key: &TaskKey) {
        let Some(runs) = self.running.get_mut(&key.job) else { return };
        let which = (key.group.clone(), key.replica);
        if runs.attempt != key.attempt || runs.tasks.get(&which).is_none_or(|n| n != node) || runs.oom.is_some() {
            return;
        }
        runs.oom = Some(gantry_types::OomKill {
            group: key.group.clone(),
            replica: key.replica,
            node: node.to_string(),
            memory_limit_bytes: runs.used.get(node).and_then(|u| u.used.memory_limit_bytes),
        });
    }

    /// Anti-entropy: a task of a run this controller has on this node that the agent neither
    /// reports (`reported`) nor has on offer, and whose exit is not counted, is not there (the
    /// agent stopped between claiming and starting it): offer its launch again — or, if the
    /// run is being stopped, count it as stopped. Whether any task was missing.
    fn reoffer_missing(
        &mut self,
        node: &str,
        reported: &BTreeSet<TaskKey>,
        now: u64,
        effects: &mut Effects,
    ) -> Result<bool, ControlError> {
        let missing: Vec<(u64, String, u32)> = self
            .runs_on(node)
            .flat_map(|(job, r)| {
                r.tasks
                    .iter()
                    .filter(|((group, replica), n)| *n == node && !r.exited.contains(&(group.clone(), *replica)))
                    .map(move |((group, replica), _)| (job, group.clone(), *replica))
            })
            .filter(|(job, group, replica)| {
                let attempt = self.running[job].attempt;
                let key = TaskKey { job: *job, group: group.clone(), replica: *replica, attempt };
                !reported.contains(&key)
                    && !self.outbox.get(node).is_some_and(|o| o.contains_key(&key))
                    && self.reoffered.get(&key).is_none_or(|at| now >= at + super::trim::REOFFER_EVERY_S)
            })
            .collect();
        self.reoffered.retain(|_, at| now < *at + super::trim::REOFFER_EVERY_S);
        let any = !missing.is_empty();
        for (job, group, replica) in missing {
            let attempt = self.running[&job].attempt;
            if self.running[&job].stopping.is_some() {
                // Being stopped, and not there: it has stopped.
                let key = TaskKey { job, group, replica, attempt };
                self.task_exited(&key, None, false, true, now, effects)?;
                continue;
            }
            let Some(row) = self.jobs.get(&job) else { continue };
            let Some(placement) = self.scheduler.allocation_of(job).and_then(|a| self.scheduler.placement(a)) else {
                continue;
            };
            let (_, launches) = self.launches(job, row, &placement);
            for launch in launches.into_iter().filter(|l| l.group == group && l.replica == replica) {
                tracing::warn!(node, job, task = %format!("{group}/{replica}"), "the agent does not have this task: offering its launch again");
                self.reoffered.insert(launch.key(), now);
                self.outbox.entry(node.to_string()).or_default().insert(launch.key(), launch);
            }
        }
        Ok(any)
    }

    /// The longest a heartbeat may be held for new orders: what the agent asked, at most
    /// [`wire::WAIT_MS_MAX`] and half the heartbeat timeout (a held agent is silent to the
    /// timeout: held longer, a live node would read as gone).
    pub fn hold_limit(&self, asked_ms: u64) -> std::time::Duration {
        let timeout_ms = match self.agents {
            Agents::Remote { heartbeat_timeout_s, .. } => heartbeat_timeout_s.saturating_mul(500),
            Agents::Local => u64::MAX,
        };
        std::time::Duration::from_millis(asked_ms.min(wire::WAIT_MS_MAX).min(timeout_ms))
    }

    /// Why `node`'s agent cannot be asked for its tasks' output now (`None`: it can).
    pub fn output_unavailable(&self, node: &str, now: u64) -> Option<String> {
        self.agent_unavailable(node, now, (wire::PROTOCOL_LOGS, "output reads"), "its output can be read")
    }

    /// Why `node`'s agent cannot be asked something that needs protocol `needed.0` (named
    /// `needed.1`) now: none registered (`then`: what becomes possible once one does), down,
    /// or too old; `None`: it can (and always with agents run by the caller).
    fn agent_unavailable(&self, node: &str, now: u64, needed: (u32, &str), then: &str) -> Option<String> {
        let Agents::Remote { heartbeat_timeout_s, .. } = self.agents else { return None };
        let Some(link) = self.links.get(node) else {
            return Some(format!(
                "node {node} has no agent registered since the controller started: {then} once one does"
            ));
        };
        let silent_s = now.saturating_sub(link.heard_s);
        if silent_s > heartbeat_timeout_s || self.lost_nodes.contains(node) {
            return Some(format!("node {node} is down: its agent was last heard {silent_s} s ago"));
        }
        let (protocol, what) = needed;
        (link.protocol < protocol).then(|| {
            format!("node {node}'s agent speaks protocol {}, older than {what} ({protocol}): upgrade it", link.protocol)
        })
    }

    /// The job steps an exited task's log recorded (a batch job's script task), kept with its
    /// run until the run ends: only that run's, only sane ones, at most `STEPS_MAX`. They are
    /// the job's own statement about itself, shown as it made it.
    fn note_steps(&mut self, report: &wire::TaskReport) {
        if report.steps.is_empty() {
            return;
        }
        let Some(runs) = self.running.get_mut(&report.key.job).filter(|r| r.attempt == report.key.attempt) else {
            return;
        };
        runs.steps = report.steps.iter().filter(|s| s.is_sane()).take(gantry_types::STEPS_MAX).cloned().collect();
    }

    /// Why node `node`'s agent cannot take a user's signal now (down, or older than signals);
    /// `None`: it can.
    pub fn signal_unavailable(&self, node: &str, now: u64) -> Option<String> {
        if self.agents == Agents::Local {
            return Some(
                "this controller runs its tasks itself (a simulation): there are no processes to signal".into(),
            );
        }
        self.agent_unavailable(node, now, (wire::PROTOCOL_SIGNALS, "users' signals"), "it can be signalled")
    }

    /// What node `node`'s agent must do now: launch what it has not reported, stop the
    /// stopping jobs' tasks there (`stopping`: those it already stops).
    pub fn agent_orders(&self, node: &str, stopping: &[TaskKey]) -> Orders {
        // An agent older than confinement would refuse a launch with limits it does not know.
        let limits = self.links.get(node).is_none_or(|l| l.protocol >= wire::PROTOCOL_CONFINEMENT);
        let steps = self.links.get(node).is_none_or(|l| l.protocol >= wire::PROTOCOL_STEPS);
        let launch = self
            .outbox
            .get(node)
            .map(|o| {
                o.values()
                    .cloned()
                    .map(|l| if limits { l } else { Launch { cpu_milli: None, memory_bytes: None, ..l } })
                    .map(|l| {
                        if steps {
                            l
                        } else {
                            Launch { step_key: None, array_job: None, array_span: None, queue: String::new(), ..l }
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let stop = self
            .runs_on(node)
            .filter(|(_, r)| r.stopping.is_some())
            .filter(|(job, r)| !stopping.iter().any(|k| k.job == *job && k.attempt == r.attempt))
            .map(|(job, r)| StopOrder { job, attempt: r.attempt, grace_s: r.stopping.unwrap_or_default() })
            .collect();
        Orders {
            launch,
            stop,
            forget: Vec::new(),
            layouts: self.layout_orders(node),
            forget_layouts: Vec::new(),
            log_reads: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Registered nodes whose agent has not been heard from past the heartbeat timeout, and
    /// for how long: what a tick records and decides from.
    ///
    /// A node with work on it whose agent has not spoken to this controller since it opened
    /// (a restart, a failover) is silent since the open: it is lost like any other if its
    /// agent never comes back.
    pub(crate) fn silences(&self, now: u64) -> BTreeMap<String, u64> {
        let Agents::Remote { heartbeat_timeout_s, .. } = self.agents else { return BTreeMap::new() };
        let never_heard = self
            .on_node
            .iter()
            .filter(|(node, jobs)| {
                !jobs.is_empty() && !self.links.contains_key(*node) && !self.lost_nodes.contains(*node)
            })
            .map(|(node, _)| (node, now.saturating_sub(self.opened_s)));
        self.links
            .iter()
            .map(|(node, link)| (node, now.saturating_sub(link.heard_s)))
            .chain(never_heard)
            .filter(|(_, age)| *age > heartbeat_timeout_s)
            .map(|(node, age)| (node.clone(), age))
            .collect()
    }

    /// Nodes whose agent has been silent past the timeout (`silent`, as the tick recorded)
    /// get no new work (what runs there keeps its place: the agent may come back and report
    /// it). Returns the nodes marked.
    pub(crate) fn check_agents(&mut self, silent: &BTreeMap<String, u64>) -> Vec<String> {
        let Agents::Remote { .. } = self.agents else { return Vec::new() };
        let mut marked = Vec::new();
        for (node, age) in silent {
            if self.links.contains_key(node) && self.scheduler.set_ready(node, false).unwrap_or(false) {
                tracing::warn!(node, silent_s = age, "agent silent past the heartbeat timeout: no new work goes there");
                marked.push(node.clone());
            }
        }
        marked
    }
}

/// The agent must speak a protocol this controller knows.
fn check_protocol(reg: &Register) -> Result<(), ControlError> {
    if reg.protocol == 0 || reg.protocol > wire::PROTOCOL_VERSION {
        return Err(agent_refused(
            &reg.node,
            "protocol",
            format!(
                "node {:?}: the agent speaks protocol {}, this controller {} (upgrade the controller before its agents)",
                reg.node,
                reg.protocol,
                wire::PROTOCOL_VERSION
            ),
        ));
    }
    Ok(())
}

/// The link to an agent registering at `now`: heard now, no samples yet.
fn new_link(reg: &Register, now: u64) -> AgentLink {
    let version = reg.version.chars().take(64).collect();
    let confinement = reg.confinement.as_ref().map_or_else(wire::Confinement::unknown, wire::Confinement::bounded);
    if !confinement.is_confined() {
        tracing::warn!(node = %reg.node, confinement = %confinement, "this node's tasks run unconfined");
    }
    AgentLink {
        heard_s: now,
        absorbed_s: None,
        absorbed_runs: Vec::new(),
        recent_samples: Vec::new(),
        instance: reg.instance.clone(),
        version,
        protocol: reg.protocol,
        samples: Vec::new(),
        confinement,
        gpu_instance_ids: gpu_instance_ids(&reg.gpus),
    }
}

/// The MIG instances' driver ids an agent reported, by (GPU, start), bounded by what a GPU
/// can hold (the registration's GPUs are checked against the fleet before this is kept).
pub(crate) fn gpu_instance_ids(gpus: &[wire::AgentGpu]) -> BTreeMap<(u32, u8), u32> {
    gpus.iter()
        .flat_map(|g| g.mig.iter().take(8).filter_map(move |i| Some(((g.index, i.start), i.gpu_instance_id?))))
        .collect()
}

/// What `node`'s agent said, refused by its field.
fn agent_refused(node: &str, field: &'static str, message: String) -> ControlError {
    ControlError::Agent { node: node.to_string(), field, message }
}
