//! The controller's reconfiguration steps (see `reconfig.rs` for the phases and guards):
//! each tick moves the changes under way along and, every period in `auto`, plans and starts
//! new ones; agents' outcomes (in heartbeats, or `Command::LayoutDone` from a caller running
//! its own tasks) finish them.

use super::benefit::benefit;
use super::plan::Planned;
use super::{Phase, Reconfiguration, ReconfigureMode};
use crate::control::{Agents, Controller, Effects};
use crate::error::ControlError;
use crate::wire::{LayoutOrder, LayoutReport, PROTOCOL_LAYOUTS};
use gantry_engine::online::{OnlineConfig, choose_empty};
use gantry_types::{GpuMode, Job};
use std::collections::{BTreeMap, BTreeSet};

/// A restartable replica planned to end within this long is let finish rather than moved: a
/// move (its stop, its restart elsewhere, its model loaded again) costs about as much.
const MOVE_MIN_LEFT_S: u64 = 120;

/// A change the planner wants for one GPU.
struct Candidate {
    node: String,
    gpu: u32,
    to: GpuMode,
    /// Restartable jobs to move off it first.
    movers: Vec<u64>,
}

/// Two modes the hardware cannot tell apart are the same (MIG layouts in any order).
fn same_hardware(a: &GpuMode, b: &GpuMode) -> bool {
    let norm = |m: &GpuMode| match m {
        GpuMode::Mig { instances } => {
            let mut v: Vec<(u8, String)> = instances.iter().map(|i| (i.start, i.profile.clone())).collect();
            v.sort();
            Some(v)
        }
        _ => None,
    };
    norm(a) == norm(b)
}

impl Controller {
    /// The online planner's settings from the policy.
    pub(crate) fn online_config(&self) -> OnlineConfig {
        let p = &self.reconfigs.policy;
        OnlineConfig {
            cooldown_s: p.cooldown_s,
            drain_horizon_s: p.drain_horizon_s,
            move_work: p.max_moves_per_hour > 0,
            period_s: p.period_s,
            ..OnlineConfig::default()
        }
    }

    /// The engine's slot of GPU `index` on `node`.
    pub(super) fn gpu_slot(&self, node: &str, index: u32) -> Option<usize> {
        self.scheduler.engine().gpu_by_name(node, index).ok().map(|g| g as usize)
    }

    /// The mode the controller has for a GPU now.
    pub(crate) fn mode_now(&self, node: &str, index: u32) -> Option<GpuMode> {
        let slot = self.gpu_slot(node, index)?;
        Some(self.scheduler.engine().gpu_mode(slot))
    }

    /// Write a record's current phase with the command.
    fn persist(&mut self, r: &Reconfiguration) -> Result<(), ControlError> {
        let json = serde_json::to_string(r).map_err(|e| ControlError::Internal(e.to_string()))?;
        self.pending.reconfigurations.push((r.id, json, r.phase.is_final()));
        Ok(())
    }

    /// A job was submitted at `now` (the forecast counts it; a MIG job may bring the next
    /// step forward).
    pub(crate) fn note_arrival(&mut self, id: u64, now: u64) {
        let p = &self.reconfigs.policy;
        if p.mode != ReconfigureMode::Off && (p.window_s > 0 || p.replan_after_s > 0) {
            self.reconfigs.arrivals.push_back((now, id));
        }
    }

    /// Each tick: move the changes under way along; every period in `auto`, plan new ones.
    pub(crate) fn reconfigure_tick(&mut self, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        self.observe_cordoned(now);
        // Whatever the mode: under `advise` the forecast's arrivals are read too (GET /v1/plan).
        self.reconfigs.prune(now);
        if self.reconfigs.policy.mode != ReconfigureMode::Auto && self.reconfigs.active.is_empty() {
            return Ok(());
        }
        self.progress(now, effects)?;
        if self.reconfigs.policy.mode == ReconfigureMode::Auto
            && (self.reconfigs.next_plan_s.is_none_or(|t| t <= now) || self.replan_now(now))
        {
            self.reconfigs.next_plan_s = Some(now + self.reconfigs.policy.period_s);
            self.reconfigs.planned_s = Some(now);
            self.plan_and_start(now, effects)?;
            self.progress(now, effects)?;
        }
        Ok(())
    }

    /// Is a MIG job that arrived since the last step still waiting, `replan_after_s` after it?
    fn replan_now(&self, now: u64) -> bool {
        let after = self.reconfigs.policy.replan_after_s;
        let Some(last) = self.reconfigs.planned_s else { return false };
        if after == 0 || now < last + after {
            return false;
        }
        // Arrivals in the very second of the last step may have come after it: counted.
        self.reconfigs.arrivals.iter().rev().take_while(|(t, _)| *t >= last).any(|(_, id)| {
            self.jobs.get(id).is_some_and(|row| row.state == gantry_types::JobState::Pending)
                && self.scheduler.job(*id).is_some_and(|j| {
                    j.compiled.groups.iter().any(|g| matches!(g.gpu, gantry_engine::request::GpuNeed::Mig { .. }))
                })
        })
    }

    /// GPU time cordoned GPUs leave unallocated since the last look.
    fn observe_cordoned(&mut self, now: u64) {
        let since = self.reconfigs.observed_s.replace(now).unwrap_or(now);
        if self.reconfigs.active.is_empty() || now <= since {
            return;
        }
        let state = self.scheduler.engine().state();
        let unused: u64 = self
            .reconfigs
            .active
            .keys()
            .filter_map(|(node, gpu)| self.gpu_slot(node, *gpu))
            .map(|slot| u64::from(1000 - state.gpus[slot].used_milli.min(1000)))
            .sum();
        self.reconfigs.totals.cordoned_idle_milli_s += unused as f64 * (now - since) as f64;
    }

    /// Drains that emptied are ordered; drains past their deadline are abandoned; orders an
    /// in-process caller has not been handed since the open are handed again.
    fn progress(&mut self, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        let keys: Vec<(String, u32)> = self.reconfigs.active.keys().cloned().collect();
        for key in keys {
            let r = self.reconfigs.active[&key].clone();
            match r.phase {
                Phase::Draining => {
                    let idle =
                        self.gpu_slot(&r.node, r.gpu).is_some_and(|s| self.scheduler.engine().state().gpus[s].idle());
                    if idle {
                        self.order(&key, now, effects)?;
                    } else if now >= r.deadline_s {
                        let why = format!("its work had not ended {} s after the drain began", now - r.started_s);
                        self.end_change(&key, Phase::Abandoned, Some(why), now, effects)?;
                        // Not drained again for it before the cooldown (no drain-abandon loop).
                        let until = now + self.reconfigs.policy.cooldown_s;
                        self.reconfigs.refused.insert(key.clone(), (r.to.clone(), until));
                    }
                }
                // Agents get theirs in every heartbeat's answer; a caller running tasks itself
                // is handed an order once, so again after a restart.
                Phase::Ordered if self.reconfigs.unsent.remove(&r.id) && self.agents == Agents::Local => {
                    effects.layouts.push((r.node.clone(), LayoutOrder { id: r.id, gpu: r.gpu, mode: r.to.clone() }));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Order the agent to apply the change (the GPU is empty and cordoned).
    fn order(&mut self, key: &(String, u32), now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        if let Agents::Remote { .. } = self.agents {
            let protocol = self.links.get(&key.0).map(|l| l.protocol);
            if protocol.is_some_and(|p| p < PROTOCOL_LAYOUTS) {
                let why = format!(
                    "the agent on {} speaks protocol {}; layout orders need {PROTOCOL_LAYOUTS} (upgrade the agent)",
                    key.0,
                    protocol.unwrap_or_default()
                );
                return self.end_change(key, Phase::Abandoned, Some(why), now, effects);
            }
            effects.wake.insert(key.0.clone());
        }
        let r = self.reconfigs.active.get_mut(key).expect("under way");
        r.phase = Phase::Ordered;
        r.ordered_s = Some(now);
        let r = r.clone();
        tracing::info!(id = r.id, node = %r.node, gpu = r.gpu, to = %r.to.text(), "ordering the agent to reconfigure the GPU");
        if self.agents == Agents::Local {
            effects.layouts.push((r.node.clone(), LayoutOrder { id: r.id, gpu: r.gpu, mode: r.to.clone() }));
        }
        self.persist(&r)
    }

    /// The layout orders node `node`'s agent must carry out now (repeated until it reports).
    pub(crate) fn layout_orders(&self, node: &str) -> Vec<LayoutOrder> {
        if self.links.get(node).is_some_and(|l| l.protocol < PROTOCOL_LAYOUTS) {
            return Vec::new();
        }
        self.reconfigs
            .active
            .values()
            .filter(|r| r.node == node && r.phase == Phase::Ordered)
            .map(|r| LayoutOrder { id: r.id, gpu: r.gpu, mode: r.to.clone() })
            .collect()
    }

    /// An agent reports what became of a layout order: the GPU takes the mode the hardware
    /// has; the change is applied, or refused (and not tried again for a while). A report of
    /// an order already finished changes nothing.
    pub(crate) fn layout_outcome(
        &mut self,
        node: &str,
        report: &LayoutReport,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        let key = (node.to_string(), report.gpu);
        let Some(r) = self.reconfigs.active.get(&key).filter(|r| r.id == report.id && r.phase == Phase::Ordered) else {
            return Ok(());
        };
        let to = r.to.clone();
        let hardware = report.hardware();
        if let Err(why) = self.legal(node, report.gpu, &hardware) {
            // Not what any GPU of this model can have: the agent is wrong or lying. The GPU
            // stays cordoned and the order stands until a report makes sense.
            tracing::warn!(node, gpu = report.gpu, id = report.id, why, "a layout report the catalog forbids: ignored");
            return Ok(());
        }
        // A mode without MIG is the controller's bookkeeping (MPS, time-slicing): to the
        // hardware it is a whole GPU.
        let recorded = if !matches!(hardware, GpuMode::Mig { .. }) && !matches!(to, GpuMode::Mig { .. }) {
            to.clone()
        } else {
            hardware.clone()
        };
        self.take_mode(node, report.gpu, &recorded)?;
        if let Some(link) = self.links.get_mut(node) {
            link.gpu_instance_ids.retain(|(gpu, _), _| *gpu != report.gpu);
            let reported = crate::wire::AgentGpu {
                index: report.gpu,
                uuid: String::new(),
                model: String::new(),
                mig_mode: Some(report.mig_mode),
                mig: report.mig.clone(),
            };
            link.gpu_instance_ids.extend(crate::control::agents::gpu_instance_ids(&[reported]));
        }
        match &report.refused {
            None if same_hardware(&hardware, &to) => self.end_change(&key, Phase::Applied, None, now, effects),
            None => {
                let why = format!("the agent applied it but the GPU has {}", hardware.text());
                self.end_change(&key, Phase::Refused, Some(why), now, effects)
            }
            Some(why) => self.end_change(&key, Phase::Refused, Some(why.chars().take(500).collect()), now, effects),
        }
    }

    /// Can a GPU of this one's model have `mode`?
    fn legal(&self, node: &str, index: u32, mode: &GpuMode) -> Result<(), String> {
        let GpuMode::Mig { instances } = mode else { return Ok(()) };
        let model =
            self.model_of(node, index).map(|m| self.catalog.model(m)).ok_or_else(|| "an unknown GPU".to_string())?;
        let geometry = model.mig.as_ref().ok_or_else(|| format!("{} has no MIG", model.id))?;
        geometry.validate_layout(&model.id, instances).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Record `mode` for an idle GPU (recorded durably; waiting jobs compiled again).
    pub(crate) fn take_mode(&mut self, node: &str, index: u32, mode: &GpuMode) -> Result<(), ControlError> {
        if self.mode_now(node, index).is_some_and(|m| &m == mode) {
            return Ok(());
        }
        let specs: BTreeMap<u64, Job> =
            self.jobs.values().filter(|row| !row.state.is_final()).map(|row| (row.id, row.job.clone())).collect();
        let text = serde_json::to_string(mode).map_err(|e| ControlError::Internal(e.to_string()))?;
        self.scheduler.set_gpu_mode(node, index, mode, |id| specs.get(&id).cloned())?;
        self.empty.set_gpu_mode(node, index, mode).map_err(|e| ControlError::Internal(e.to_string()))?;
        self.pending.gpu_modes.push((node.to_string(), index, text));
        Ok(())
    }

    /// Finish a change: uncordon the GPU, remember it for the guards, keep the record.
    fn end_change(
        &mut self,
        key: &(String, u32),
        phase: Phase,
        why: Option<String>,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        let mut r = self.reconfigs.active.remove(key).expect("under way");
        r.phase = phase;
        r.ended_s = Some(now);
        r.outcome = why;
        self.scheduler.set_gpu_cordoned(&r.node, r.gpu, false)?;
        let totals = &mut self.reconfigs.totals;
        match phase {
            Phase::Applied => {
                totals.applied += 1;
                self.reconfigs.changed_at.entry(key.clone()).or_default().push_back(now);
                tracing::info!(id = r.id, node = %r.node, gpu = r.gpu, to = %r.to.text(), reason = %r.reason, "GPU reconfigured");
            }
            Phase::Refused => {
                totals.refused += 1;
                let until = now + self.reconfigs.policy.refused_backoff_s;
                self.reconfigs.refused.insert(key.clone(), (r.to.clone(), until));
                tracing::warn!(id = r.id, node = %r.node, gpu = r.gpu, to = %r.to.text(), why = ?r.outcome, "reconfiguration refused; not tried again before the backoff");
            }
            _ => {
                totals.abandoned += 1;
                tracing::warn!(id = r.id, node = %r.node, gpu = r.gpu, why = ?r.outcome, "reconfiguration abandoned");
            }
        }
        self.persist(&r)?;
        self.reconfigs.finish(r);
        effects.schedule = true;
        Ok(())
    }

    /// A registering agent reports its GPUs as the hardware has them: an ordered change the
    /// hardware already has is done; one it has not is ordered again (the agent applies it
    /// once more: all or nothing, from whatever it found).
    pub(crate) fn reconcile_registration(
        &mut self,
        node: &str,
        found: &[crate::wire::AgentGpu],
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        let ordered: Vec<(String, u32)> = self
            .reconfigs
            .active
            .iter()
            .filter(|(k, r)| k.0 == node && r.phase == Phase::Ordered)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ordered {
            let Some(hardware) = found.iter().find(|g| g.index == key.1).and_then(|g| g.mode()) else { continue };
            let to = self.reconfigs.active[&key].to.clone();
            let done = same_hardware(&hardware, &to);
            if done {
                let recorded = if matches!(to, GpuMode::Mig { .. }) { hardware } else { to };
                self.take_mode(node, key.1, &recorded)?;
                self.end_change(&key, Phase::Applied, None, now, effects)?;
            } else {
                tracing::info!(node, gpu = key.1, "the agent came back without the new layout: ordering it again");
                effects.wake.insert(node.to_string());
            }
        }
        Ok(())
    }

    /// Plan, then start the changes the guards allow.
    fn plan_and_start(&mut self, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        let planned = self.plan_now(now, &self.online_config())?;
        tracing::debug!(
            reconfigure = ?planned.step.reconfigure.iter().map(|(n, g, m)| format!("{n}/{g} -> {}", m.text())).collect::<Vec<_>>(),
            drain = ?planned.step.drain.iter().map(|((n, g), m)| format!("{n}/{g} -> {}", m.text())).collect::<Vec<_>>(),
            deferred = planned.step.deferred,
            demand_tasks = planned.demand_tasks,
            "planning step"
        );
        let wanted: BTreeSet<(String, u32)> = planned
            .step
            .reconfigure
            .iter()
            .map(|(n, g, _)| (n.clone(), *g))
            .chain(planned.step.drain.keys().cloned())
            .collect();
        // A drain the plan no longer wants frees its GPU (an order under way completes).
        let stale: Vec<(String, u32)> = self
            .reconfigs
            .active
            .iter()
            .filter(|(k, r)| r.phase == Phase::Draining && r.moved.is_empty() && !wanted.contains(*k))
            .filter(|(k, _)| {
                let node = self.scheduler.engine().state().node_by_name(&k.0);
                node.is_none_or(|n| planned.step.planned(n as usize))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.end_change(&key, Phase::Abandoned, Some("the plan no longer wants it".into()), now, effects)?;
        }
        let mut pool = planned.pool.clone();
        for c in self.candidates(&planned, now) {
            let key = (c.node.clone(), c.gpu);
            let p = &self.reconfigs.policy;
            if self.reconfigs.active.contains_key(&key)
                || self.reconfigs.active.len() >= p.max_cordoned as usize
                || !self.reconfigs.may_change(&key, now)
                || self.reconfigs.refused_lately(&key, &c.to, now)
            {
                continue;
            }
            let from = self.mode_now(&c.node, c.gpu).unwrap_or(GpuMode::Whole);
            let Some(model) = self.model_of(&c.node, c.gpu) else { continue };
            let Some((serves, reason)) = benefit(&from, &c.to, model, &mut pool, p.min_benefit_tasks) else {
                continue;
            };
            self.start_change(c, from, serves, reason, now, effects)?;
        }
        Ok(())
    }

    /// The planner's changes: idle GPUs, busy ones whose work ends within the horizon, and —
    /// when whole-GPU work waits and moves are allowed — busy MIG GPUs whose restartable
    /// replicas can move (the fewest moves that let a waiting job start, per node).
    fn candidates(&mut self, planned: &Planned, now: u64) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = planned
            .step
            .reconfigure
            .iter()
            .map(|(node, gpu, to)| Candidate { node: node.clone(), gpu: *gpu, to: to.clone(), movers: Vec::new() })
            .chain(planned.step.drain.iter().map(|((node, gpu), to)| Candidate {
                node: node.clone(),
                gpu: *gpu,
                to: to.clone(),
                movers: Vec::new(),
            }))
            .collect();
        let moves_left = self.reconfigs.moves_left(now);
        if planned.whole_waiting.is_empty() || planned.step.empty.is_empty() || moves_left == 0 {
            return out;
        }
        let groups = choose_empty(&planned.fleet, &planned.now, &planned.step, &planned.whole_waiting);
        let mut budget = moves_left as usize;
        for group in groups {
            // Replicas about to end are let finish; the others move only if all of them fit
            // elsewhere now (a group is emptied entirely or not at all).
            let movers: Vec<Vec<u64>> = group
                .iter()
                .map(|(node, gpu)| {
                    self.jobs_on(node, *gpu)
                        .into_iter()
                        .filter(|&job| self.ends_after(job, now + MOVE_MIN_LEFT_S))
                        .collect()
                })
                .collect();
            let count: BTreeSet<u64> = movers.iter().flatten().copied().collect();
            if count.len() > budget || !self.fit_elsewhere(&count, &group) {
                continue;
            }
            budget -= count.len();
            for ((node, gpu), movers) in group.into_iter().zip(movers) {
                out.retain(|c| !(c.node == node && c.gpu == gpu));
                out.push(Candidate { node, gpu, to: GpuMode::Whole, movers });
            }
        }
        out
    }

    /// A GPU's model.
    fn model_of(&self, node: &str, index: u32) -> Option<gantry_catalog::ModelId> {
        self.models.get(&(node.to_string(), index)).copied()
    }

    /// Cordon the GPU and record the change; move its restartable jobs if it is to be
    /// emptied that way.
    fn start_change(
        &mut self,
        c: Candidate,
        from: GpuMode,
        serves: Vec<u64>,
        reason: String,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        let slot = self.gpu_slot(&c.node, c.gpu).ok_or_else(|| ControlError::UnknownNode(c.node.clone()))?;
        let busy_until_s =
            (!self.scheduler.engine().state().gpus[slot].idle()).then(|| self.busy_until(&c.node, c.gpu));
        self.scheduler.set_gpu_cordoned(&c.node, c.gpu, true)?;
        let id = self.reconfigs.next_id;
        self.reconfigs.next_id += 1;
        let r = Reconfiguration {
            id,
            node: c.node.clone(),
            gpu: c.gpu,
            from,
            to: c.to,
            phase: Phase::Draining,
            reason,
            serves,
            started_s: now,
            ordered_s: None,
            ended_s: None,
            deadline_s: now + self.reconfigs.policy.drain_deadline_s,
            busy_until_s: busy_until_s.flatten(),
            outcome: None,
            moved: c.movers.clone(),
        };
        tracing::info!(id, node = %r.node, gpu = r.gpu, from = %r.from.text(), to = %r.to.text(), reason = %r.reason, moves = r.moved.len(), "reconfiguration begins");
        self.persist(&r)?;
        for &job in &c.movers {
            self.move_job(job, &r, now, effects);
        }
        self.reconfigs.active.insert((c.node, c.gpu), r);
        Ok(())
    }
}
