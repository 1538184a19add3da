//! Emptying a GPU for a reconfiguration: which running jobs hold it, when their work ends,
//! whether restartable replicas would all find room elsewhere now (tried on a copy of the
//! engine), and moving them — a stop, then a requeue recorded as a move, never a failure.

use super::Reconfiguration;
use crate::control::{Controller, Effects};
use crate::error::ControlError;
use gantry_types::Event;
use std::collections::BTreeSet;

impl Controller {
    /// Is `job` planned (by its time limit) to run past `t`? (Without a limit: yes.)
    pub(super) fn ends_after(&self, job: u64, t: u64) -> bool {
        let Some(alloc) = self.scheduler.allocation_of(job) else { return false };
        let Some((_, started)) = self.scheduler.running(alloc) else { return false };
        self.scheduler.job(job).and_then(|j| j.planned_length_s).is_none_or(|len| started.saturating_add(len) > t)
    }

    /// Would `jobs` all find room off the GPUs of `group` now? (Tried on a copy of the
    /// engine: their allocations released, the group cordoned, each placed again.)
    pub(super) fn fit_elsewhere(&self, jobs: &BTreeSet<u64>, group: &[(String, u32)]) -> bool {
        let mut engine = self.scheduler.engine().clone();
        for (node, gpu) in group {
            if engine.set_gpu_cordoned(node, *gpu, true).is_err() {
                return false;
            }
        }
        let mut compiled = Vec::new();
        for &job in jobs {
            let (Some(alloc), Some(spec)) = (self.scheduler.allocation_of(job), self.scheduler.job(job)) else {
                return false;
            };
            if engine.release(alloc).is_err() {
                return false;
            }
            compiled.push(spec.compiled.clone());
        }
        compiled.iter().all(|c| engine.place(c).is_ok())
    }

    /// The running jobs holding part of a GPU.
    pub(super) fn jobs_on(&self, node: &str, index: u32) -> Vec<u64> {
        let Some(slot) = self.gpu_slot(node, index) else { return Vec::new() };
        let engine = self.scheduler.engine();
        let mut jobs: Vec<u64> = engine
            .allocations()
            .iter()
            .filter(|(_, a)| a.tasks.iter().flat_map(|t| t.grants.iter()).any(|g| g.gpu() as usize == slot))
            .filter_map(|(alloc, _)| self.scheduler.running(*alloc).map(|(job, _)| job))
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs
    }

    /// When the work on a GPU is planned to end (by time limits); `None` when unknown.
    pub(super) fn busy_until(&self, node: &str, index: u32) -> Option<u64> {
        let mut until = 0;
        for job in self.jobs_on(node, index) {
            let alloc = self.scheduler.allocation_of(job)?;
            let (_, started) = self.scheduler.running(alloc)?;
            let length = self.scheduler.job(job)?.planned_length_s?;
            until = until.max(started.saturating_add(length));
        }
        Some(until)
    }

    /// Stop a restartable job so that it starts again elsewhere: a move, not a failure.
    pub(super) fn move_job(&mut self, job: u64, r: &Reconfiguration, now: u64, effects: &mut Effects) {
        let Some(runs) = self.running.get_mut(&job) else { return };
        if runs.stopping.is_some() {
            return;
        }
        runs.moved = Some(format!("moved: GPU {} on {} is reconfigured (reconfiguration {})", r.gpu, r.node, r.id));
        self.reconfigs.moves.push_back(now);
        self.reconfigs.totals.moves += 1;
        let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
        tracing::info!(job, node = %r.node, gpu = r.gpu, "moving a restartable job to empty a GPU");
        self.send_stop(job, grace, effects);
    }

    /// A moved job's last task exited: it waits again, in its place, recorded as a move.
    pub(crate) fn moved_exit(
        &mut self,
        job: u64,
        why: String,
        alloc: gantry_engine::AllocId,
        used: Vec<gantry_types::NodeUse>,
        now: u64,
    ) -> Result<(), ControlError> {
        self.record(Event::Requeued { id: job, at_s: now, why, used })?;
        self.scheduler.killed(alloc, now);
        Ok(())
    }
}
