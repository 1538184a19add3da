//! Checkpoints: the controller re-opens itself from its own memory, as a restart re-opens from
//! the store, and the `open` entry it writes holds everything a replay starting there needs —
//! the side tables (tokens, drained nodes, GPU modes, reconfigurations) and the state a restart
//! would forget that decisions read ([`Carried`]: agents' links, readiness and GPU UUIDs, lost
//! nodes, the scheduler's memory, the reconfiguration guards, idle stretches). The jobs table at that
//! point is the store's events up to the entry (`gantry_store::OpenRecord::events_through`),
//! which are never deleted. So the command log before a checkpoint can go: retention keeps the
//! newest checkpoint at or before the window's start and everything after it.
//!
//! A checkpoint is taken only at a quiet moment ([`Controller::unquiet`]): no run is being
//! stopped, preempted or moved and no GPU is being reconfigured — transitions that span the
//! scheduler's and the agents' state and are seconds long. Unacknowledged launches and runs
//! with some tasks ended are carried.

use super::image::{Carried, Image, PartlyEnded};
use super::{Agents, Controller, Effects, Reply};
use crate::error::ControlError;
use std::collections::BTreeSet;

impl Controller {
    /// Re-open now from memory, writing an `open` entry a replay can start from, and let the
    /// store delete the command log before the newest such entry at or before `now -
    /// keep_log_s` (`None`: delete nothing). Not quiet: nothing changes and the reply says why.
    pub(crate) fn checkpoint(&mut self, now: u64, keep_log_s: Option<u64>) -> Result<Effects, ControlError> {
        if let Some(why) = self.unquiet() {
            return Ok(Effects {
                reply: Reply::Checkpoint { taken: false, why: Some(why) },
                unlogged: true,
                ..Default::default()
            });
        }
        // What ran until now is metered by the old meter; the new one starts from now.
        self.meter(now, true);
        let metered = std::mem::take(&mut self.pending);
        let image = self.image_of_memory();
        let carried = self.carried();
        let launched: BTreeSet<u64> = self.running.keys().copied().collect();
        let (mut fresh, mut batch) =
            Controller::open_carrying(self.setup.clone(), image, Some(carried), self.catalog, &launched, now)?;
        // What only the views show goes on as it was.
        fresh.billing = std::mem::take(&mut self.billing);
        fresh.stats = std::mem::take(&mut self.stats);
        fresh.series = std::mem::take(&mut self.series);
        fresh.refused = std::mem::take(&mut self.refused);
        fresh.idle.take_history(&mut self.idle);
        *self = fresh;
        batch.usage.splice(0..0, metered.usage);
        batch.series.splice(0..0, metered.series);
        batch.compact_before_s = keep_log_s.map(|keep| now.saturating_sub(keep));
        Ok(Effects { commit: batch, reply: Reply::Checkpoint { taken: true, why: None }, ..Default::default() })
    }

    /// Why this is not a moment to checkpoint (`None`: it is).
    pub(crate) fn unquiet(&self) -> Option<String> {
        if let Some((id, _)) = self.running.iter().find(|(_, r)| {
            r.stopping.is_some()
                || r.preempted.is_some()
                || r.node_lost.is_some()
                || r.moved.is_some()
                || r.lost
                || r.cancelled
                || r.timed_out
        }) {
            return Some(format!("job {id} is being stopped"));
        }
        if let Some((node, gpu)) = self.reconfigs.active.keys().next() {
            return Some(format!("GPU {gpu} of node {node} is being reconfigured"));
        }
        None
    }

    /// What the store holds besides the jobs, as this controller's memory has it (the same
    /// tables a restart reads).
    fn image_of_memory(&self) -> Image {
        let engine = self.scheduler.engine();
        let state = engine.state();
        let drained =
            state.info.iter().map(|n| n.name.clone()).filter(|name| engine.is_drained(name)).collect::<Vec<_>>();
        let mut gpu_modes = Vec::new();
        for (slot, gpu) in state.gpus.iter().enumerate() {
            let node = &state.info[gpu.node as usize].name;
            let mode = engine.gpu_mode(slot);
            let as_filed = self
                .setup
                .fleet
                .nodes
                .iter()
                .find(|n| &n.name == node)
                .and_then(|n| n.gpus.iter().find(|g| g.index == gpu.index))
                .map(|g| &g.mode);
            if as_filed != Some(&mode) {
                gpu_modes.push((node.clone(), gpu.index, serde_json::to_string(&mode).unwrap_or_default()));
            }
        }
        let reconfigurations = self
            .reconfigs
            .active
            .values()
            .chain(self.reconfigs.recent.iter())
            .map(|r| (r.id, serde_json::to_string(r).unwrap_or_default()))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect();
        Image {
            jobs: self.jobs.values().cloned().collect(),
            tokens: self.tokens.records(),
            drained,
            gpu_modes,
            series: Vec::new(),
            reconfigurations,
        }
    }

    /// The state a restart forgets and decisions read.
    fn carried(&self) -> Carried {
        let ready = match self.agents {
            Agents::Local => Vec::new(),
            Agents::Remote { .. } => self
                .links
                .keys()
                .filter(|n| !self.scheduler.engine().has_mark(n, gantry_engine::NOT_READY_TAINT))
                .cloned()
                .collect(),
        };
        Carried {
            links: self.links.clone(),
            ready,
            uuids: self.uuids.clone(),
            lost_nodes: self.lost_nodes.iter().cloned().collect(),
            scheduler: self.scheduler.memory().into(),
            reconfigs: self.reconfigs.clone(),
            idle: self.idle.clone(),
            used: self
                .running
                .iter()
                .filter(|(_, r)| !r.used.is_empty())
                .map(|(job, r)| (*job, r.used.values().cloned().collect()))
                .collect(),
            reoffered: self.reoffered.iter().map(|(k, at)| (k.clone(), *at)).collect(),
            opened_s: Some(self.opened_s),
            outbox: self
                .outbox
                .iter()
                .filter(|(_, l)| !l.is_empty())
                .map(|(node, l)| (node.clone(), l.values().cloned().collect()))
                .collect(),
            partly_ended: self
                .running
                .iter()
                .filter(|(_, r)| !r.exited.is_empty() || r.failed.is_some() || r.oom.is_some())
                .map(|(job, r)| PartlyEnded {
                    job: *job,
                    exited: r.exited.iter().cloned().collect(),
                    failed: r.failed,
                    oom: r.oom.clone(),
                })
                .collect(),
        }
    }

    /// Take back what a checkpoint carried, before recovery (the scheduler's memory is taken
    /// after it: see [`Controller::open_carrying`]).
    pub(crate) fn take_carried(&mut self, carried: Carried) -> Result<(), ControlError> {
        for node in &carried.ready {
            self.scheduler.set_ready(node, true)?;
        }
        self.links = carried.links;
        self.uuids = carried.uuids;
        self.reoffered = carried.reoffered.into_iter().collect();
        if let Some(opened_s) = carried.opened_s {
            self.opened_s = opened_s;
        }
        self.lost_nodes = carried.lost_nodes.into_iter().collect();
        let policy = std::mem::take(&mut self.reconfigs.policy);
        self.reconfigs = carried.reconfigs;
        self.reconfigs.policy = policy;
        let idle_policy = self.idle.policy.clone();
        self.idle = carried.idle;
        self.idle.policy = idle_policy;
        Ok(())
    }
}
