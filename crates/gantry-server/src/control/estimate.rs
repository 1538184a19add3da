//! `sbatch --test-only` (`POST /v1/jobs/estimate`): when and where a workload's first job
//! would start if it were submitted now, and why not if it would wait. The job passes every
//! check a submission does; then one scheduling cycle runs on a copy of the scheduler with the
//! job added. Nothing is recorded, logged or changed: the copy is dropped.

use super::{Controller, Effects, Reply};
use crate::auth::Principal;
use crate::error::ControlError;
use gantry_api::replies::Estimate;
use gantry_engine::sched::Decision;
use gantry_types::Job;

impl Controller {
    pub(crate) fn estimate(&mut self, who: &Principal, jobs: Vec<Job>, now: u64) -> Result<Effects, ControlError> {
        if jobs.is_empty() {
            return Err(ControlError::request("body", "the workload has no jobs"));
        }
        let (mut jobs, mut compiled, id) = self.checked(who, jobs, None)?;
        let (job, compiled) = (jobs.swap_remove(0), compiled.swap_remove(0));
        let (queue, partition) =
            (job.queue.clone(), job.control.partition.clone().unwrap_or_else(|| job.queue.clone()));
        let mut copy = self.scheduler.clone();
        copy.submit(id, self.sched_job(&job, compiled)?, now)?;
        let started = copy.cycle(now).into_iter().find_map(|d| match d {
            Decision::Start { job, alloc, .. } if job == id => Some(alloc),
            _ => None,
        });
        let estimate = match started.and_then(|alloc| copy.placement(alloc)) {
            Some(tasks) => {
                let mut nodes: Vec<String> = tasks.iter().map(|t| t.node.clone()).collect();
                nodes.dedup();
                let cpus = tasks.iter().map(|t| u64::from(t.cpu.0.div_ceil(1000))).sum();
                Estimate { id, queue, partition, start_s: Some(now), nodes, cpus, reason: None }
            }
            None => {
                let why = copy.why(id);
                let reason = why.as_ref().map(|p| p.reason.to_string());
                let start_s = why.and_then(|p| p.estimate_s);
                Estimate { id, queue, partition, start_s, nodes: Vec::new(), cpus: 0, reason }
            }
        };
        Ok(Effects { reply: Reply::Estimated(estimate), unlogged: true, ..Default::default() })
    }
}
