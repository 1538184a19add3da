//! Preemption in a cycle: after the starting pass, jobs it could not start for lack of
//! resources may stop running work they have a right to — lower priority (priority), a
//! borrower's use of their queue's guarantee (reclaim), or, once they have waited past the
//! starvation bound, work of their own priority or lower (starvation). The engine plans the
//! victims for several preemptors at once, each on what the ones before it leave; the
//! decisions say to signal the victims now and kill them when their grace period ends; the
//! preemptor starts in a cycle after that, on capacity kept for it.

use super::{Decision, JobId, Scheduler};
use crate::CompiledJob;
use crate::preempt::{Right, Victim};
use gantry_types::PendingReason;

/// Most jobs that may start preempting in one cycle (bounds the planning per cycle).
pub const PREEMPTORS_MAX: usize = 8;

impl Scheduler {
    /// What entitles `job` to capacity at `now`.
    fn right(&self, job: JobId, now: u64) -> Right {
        let entry = &self.jobs[&job];
        let milli = entry.job.compiled.milli_at_most();
        Right {
            priority: entry.job.priority,
            within_guarantee: self.quotas.as_ref().is_some_and(|b| b.within_guarantee(entry.queue, milli)),
            starving: self.starvation_s.is_some_and(|s| now.saturating_sub(entry.eligible_at) >= s),
        }
    }

    /// The running jobs not already stopping, as the planner sees them.
    fn victims(&self, now: u64) -> Vec<Victim> {
        self.running
            .iter()
            .filter(|(alloc, _)| !self.terminating.contains_key(alloc))
            .map(|(&alloc, r)| {
                let entry = &self.jobs[&r.job];
                let ran = now - r.started_at;
                Victim {
                    alloc,
                    priority: entry.job.priority,
                    preemptible: entry.job.lifecycle.preemptible,
                    borrower: self.quotas.as_ref().is_some_and(|b| b.borrowing(entry.queue, &r.demand)),
                    work_lost_s: ran,
                    min_runtime_left_s: entry.job.lifecycle.min_runtime_s.saturating_sub(ran),
                    started_starved: r.started_starved,
                }
            })
            .collect()
    }

    /// Plan and decide preemptions for the jobs `short` of resources this cycle.
    pub(super) fn preempt(&mut self, now: u64, short: &[JobId], decisions: &mut Vec<Decision>) {
        if !self.config.preempt {
            return;
        }
        // A preemptor whose victims are all gone plans again if it still waits.
        let terminating = &self.terminating;
        self.awaiting.retain(|_, (victims, _)| victims.iter().any(|v| terminating.contains_key(v)));
        let victims = self.victims(now);
        let requests: Vec<(JobId, Right)> = short
            .iter()
            .filter(|job| !self.awaiting.contains_key(job))
            .map(|&job| (job, self.right(job, now)))
            .filter(|(_, right)| victims.iter().any(|v| v.eligible(*right)))
            .take(PREEMPTORS_MAX)
            .collect();
        if !requests.is_empty() {
            let gone: Vec<_> = self.terminating.keys().copied().collect();
            let coming: Vec<&CompiledJob> = self.awaiting.keys().map(|k| &self.jobs[k].job.compiled).collect();
            let asks: Vec<(&CompiledJob, Right)> =
                requests.iter().map(|&(k, r)| (&self.jobs[&k].job.compiled, r)).collect();
            let plans = self.engine.plan_preemptions(&asks, &victims, &gone, &coming);
            for ((job, right), plan) in requests.into_iter().zip(plans) {
                let Some(chosen) = plan.filter(|c| !c.is_empty()) else { continue };
                let mut until = now;
                for &alloc in &chosen {
                    let v = victims.iter().find(|v| v.alloc == alloc).expect("chosen among the victims");
                    let cause = if v.priority < right.priority {
                        "priority"
                    } else if right.within_guarantee && v.borrower {
                        "guarantee"
                    } else {
                        "starvation"
                    };
                    let victim = self.running[&alloc].job;
                    let kill_at = now + self.jobs[&victim].job.lifecycle.grace_s;
                    until = until.max(kill_at);
                    self.terminating.insert(alloc, cause);
                    decisions.push(Decision::Stop { job: victim, alloc, kill_at, cause });
                }
                self.awaiting.insert(job, (chosen, until));
            }
        }
        for (&job, (chosen, until)) in &self.awaiting {
            if self.reason.contains_key(&job) {
                let victims = chosen.iter().filter(|a| self.terminating.contains_key(a)).count() as u32;
                self.reason.insert(job, PendingReason::Preempting { victims, until_s: *until });
            }
        }
    }
}
