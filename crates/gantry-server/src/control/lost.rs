//! Lost nodes. A remote node whose agent has been silent past `node_lost_after_s` (or that an
//! admin declares lost) no longer holds anything: every run with a task there ends — its tasks
//! there count as lost at once, its tasks elsewhere are stopped — and then waits again (a job
//! with `requeue`, the default) or ends `lost`; the GPUs are freed. When the agent comes back,
//! the tasks it still runs belong to runs that have ended, so its heartbeat's orphan check
//! stops them; they are never adopted.

use super::{Agents, Controller, Effects, Reply};
use crate::auth::Principal;
use crate::error::ControlError;
use crate::wire::TaskKey;
use std::collections::BTreeMap;

impl Controller {
    /// Nodes silent past the loss threshold, not yet lost (checked at each tick, from the
    /// silences it records).
    pub(crate) fn silent_past_loss(&self, silent: &BTreeMap<String, u64>) -> Vec<String> {
        let Agents::Remote { node_lost_after_s, .. } = self.agents else { return Vec::new() };
        silent
            .iter()
            .filter(|(node, silent_s)| **silent_s > node_lost_after_s && !self.lost_nodes.contains(*node))
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// `node` is lost (`why`: silent so long, or an admin said so): end what runs there.
    pub(crate) fn lose_node(
        &mut self,
        node: &str,
        why: &str,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        if !self.lost_nodes.insert(node.to_string()) {
            return Ok(());
        }
        let _ = self.scheduler.set_ready(node, false);
        tracing::warn!(node, why, "node lost: its jobs end or wait again, their GPUs are freed");
        let jobs: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.tasks.iter().any(|(task, n)| n == node && !r.exited.contains(task)))
            .map(|(&job, _)| job)
            .collect();
        for job in jobs {
            self.end_tasks_on(job, node, now, effects)?;
        }
        effects.schedule = true;
        Ok(())
    }

    /// Job `job`'s tasks on `node` are gone: count them lost; stop its tasks elsewhere (a gang
    /// ends as a whole). The run ends when the last has exited (`task_exited`).
    fn end_tasks_on(&mut self, job: u64, node: &str, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        let grace_s = self.jobs.get(&job).map_or(0, |row| row.job.lifecycle.grace_s);
        let Some(runs) = self.running.get_mut(&job) else { return Ok(()) };
        runs.node_lost = Some(node.to_string());
        let attempt = runs.attempt;
        let here: Vec<TaskKey> = runs
            .tasks
            .iter()
            .filter(|(task, n)| *n == node && !runs.exited.contains(*task))
            .map(|((group, replica), _)| TaskKey { job, group: group.clone(), replica: *replica, attempt })
            .collect();
        let elsewhere = runs.tasks.iter().any(|(task, n)| n != node && !runs.exited.contains(task));
        if elsewhere && runs.stopping.is_none() {
            self.send_stop(job, grace_s, effects);
        }
        if let Some(offers) = self.outbox.get_mut(node) {
            offers.retain(|key, _| key.job != job);
        }
        for key in here {
            self.task_exited(&key, None, false, true, now, effects)?;
        }
        Ok(())
    }

    /// An admin declares `node` lost now (`gantry node lost NAME`): its agent is known dead.
    pub(crate) fn declare_lost(&mut self, who: &Principal, node: &str, now: u64) -> Result<Effects, ControlError> {
        who.admin_only("declaring a node lost")?;
        if !self.knows_node(node) {
            return Err(ControlError::UnknownNode(format!("no node {node:?}")));
        }
        let mut effects =
            Effects { reply: Reply::Lost { changed: !self.lost_nodes.contains(node) }, ..Default::default() };
        self.lose_node(node, "declared lost by an admin", now, &mut effects)?;
        Ok(effects)
    }

    /// `gantry cancel --force`: the cancelled run's tasks on nodes that are not ready (their
    /// agent silent, or lost) count as ended now, instead of waiting for an agent that may
    /// never report.
    pub(crate) fn force_end(&mut self, job: u64, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        let Some(runs) = self.running.get(&job) else { return Ok(()) };
        let attempt = runs.attempt;
        let unreachable: Vec<TaskKey> = runs
            .tasks
            .iter()
            .filter(|(task, n)| !runs.exited.contains(*task) && !self.node_reachable(n))
            .map(|((group, replica), _)| TaskKey { job, group: group.clone(), replica: *replica, attempt })
            .collect();
        for key in unreachable {
            self.task_exited(&key, None, false, true, now, effects)?;
        }
        Ok(())
    }

    /// Is `node`'s agent reachable (registered, not found silent past the heartbeat timeout
    /// at the last tick, not lost)? On a controller running its own agents, always.
    pub(crate) fn node_reachable(&self, node: &str) -> bool {
        let Agents::Remote { .. } = self.agents else { return true };
        !self.lost_nodes.contains(node)
            && self.links.contains_key(node)
            && !self.scheduler.engine().has_mark(node, gantry_engine::NOT_READY_TAINT)
    }

    /// The agent of `node` was heard from: the node is no longer lost. Whether it was.
    pub(crate) fn found(&mut self, node: &str) -> bool {
        let was = self.lost_nodes.remove(node);
        if was {
            tracing::info!(node, "a lost node's agent is back");
        }
        was
    }
}
