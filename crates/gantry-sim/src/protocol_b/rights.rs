//! Preemption in a replay: after each pass, jobs the pass could not start for lack of
//! resources may stop running work they have a right to — lower priority (priority), a
//! borrower's use of their queue's guarantee (reclaim), or, once they have waited past the
//! starvation bound, work of their own priority or lower (starvation). The engine plans the
//! victims for several preemptors at once, each on what the ones before it leave; the
//! victims are signalled now and killed when their grace period ends, and the preemptor starts
//! in the pass that follows.

use super::replay::{Event, Replay};
use gantry_engine::CompiledJob;
use gantry_engine::preempt::{Right, Victim};
use gantry_types::PendingReason;
use std::cmp::Reverse;

/// Most jobs that may start preempting in one pass (bounds the planning per event).
pub const PREEMPTORS_MAX: usize = 8;

impl Replay<'_> {
    /// What entitles `job` to capacity at `t`.
    fn right(&self, job: usize, t: u64) -> Right {
        let milli = self.jobs[job].job.milli_at_most();
        Right {
            priority: self.jobs[job].priority,
            within_guarantee: self.quotas.as_ref().is_some_and(|b| b.within_guarantee(self.queue_of[job], milli)),
            starving: self.starvation_s.is_some_and(|s| t.saturating_sub(self.eligible_at[job]) >= s),
        }
    }

    /// The running jobs not already stopping, as the planner sees them.
    fn victims(&self, t: u64) -> Vec<Victim> {
        self.running_jobs
            .iter()
            .filter(|(alloc, _)| !self.terminating.contains(alloc))
            .map(|(&alloc, r)| {
                let victim = &self.jobs[r.job];
                let ran = t - r.started_at;
                Victim {
                    alloc,
                    priority: victim.priority,
                    preemptible: victim.lifecycle.preemptible,
                    borrower: self.quotas.as_ref().is_some_and(|b| b.borrowing(self.queue_of[r.job], &r.demand)),
                    work_lost_s: ran,
                    min_runtime_left_s: victim.lifecycle.min_runtime_s.saturating_sub(ran),
                    started_starved: r.started_starved,
                }
            })
            .collect()
    }

    /// Plan and signal preemptions for the jobs `short` of resources this pass.
    pub(super) fn preempt(&mut self, t: u64, short: &[usize]) {
        if !self.options.preempt {
            return;
        }
        // A preemptor whose victims are all gone plans again if it still waits.
        let terminating = &self.terminating;
        self.awaiting.retain(|_, (victims, _)| victims.iter().any(|v| terminating.contains(v)));
        let victims = self.victims(t);
        let requests: Vec<(usize, Right)> = short
            .iter()
            .filter(|job| !self.awaiting.contains_key(job))
            .map(|&job| (job, self.right(job, t)))
            .filter(|(_, right)| victims.iter().any(|v| v.eligible(*right)))
            .take(PREEMPTORS_MAX)
            .collect();
        if !requests.is_empty() {
            let gone: Vec<_> = self.terminating.iter().copied().collect();
            let coming: Vec<&CompiledJob> = self.awaiting.keys().map(|&k| &self.jobs[k].job).collect();
            let asks: Vec<(&CompiledJob, Right)> = requests.iter().map(|&(k, r)| (&self.jobs[k].job, r)).collect();
            let plans = self.engine.plan_preemptions(&asks, &victims, &gone, &coming);
            for ((job, right), plan) in requests.into_iter().zip(plans) {
                let Some(chosen) = plan.filter(|c| !c.is_empty()) else { continue };
                let mut until = t;
                for &alloc in &chosen {
                    let v = victims.iter().find(|v| v.alloc == alloc).expect("chosen among the victims");
                    let cause = if v.priority < right.priority {
                        "priority"
                    } else if right.within_guarantee && v.borrower {
                        "guarantee"
                    } else {
                        "starvation"
                    };
                    let victim_job = self.running_jobs[&alloc].job;
                    let kill_at = t + self.jobs[victim_job].lifecycle.grace_s;
                    until = until.max(kill_at);
                    self.terminating.insert(alloc);
                    self.stop_cause.insert(alloc, cause);
                    self.events.push(Reverse((kill_at, Event::Kill { job: victim_job, alloc })));
                }
                self.awaiting.insert(job, (chosen, until));
            }
        }
        for (&job, (chosen, until)) in &self.awaiting {
            if self.reason.contains_key(&job) {
                let victims = chosen.iter().filter(|a| self.terminating.contains(a)).count() as u32;
                self.reason.insert(job, PendingReason::Preempting { victims, until_s: *until });
            }
        }
    }
}
