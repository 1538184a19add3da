//! Preemption planning: which running jobs to stop so a job with a right to capacity fits.
//!
//! The preemptor's right is its priority (it may stop lower-priority work) or its guarantee
//! (a queue within its guaranteed quota may stop borrowers). Never chosen: non-preemptible
//! jobs and jobs still inside their minimum runtime. Among eligible victims the cheapest go
//! first — borrowers before owners, lower priority first, less work lost since the last
//! checkpoint first — added one by one on a planning copy until the job fits (placement
//! re-run, gangs and topology included); then every chosen victim whose return would still
//! leave room is given back, most expensive first. What remains is minimal: removing any one
//! victim from the set makes the job not fit (fitting is monotone in what is freed, so a
//! victim found necessary stays necessary as others are given back).
//!
//! The plan is a decision for the controller (or the simulator) to carry out: signal, grace
//! period, kill; the job is placed once the victims are gone.

use crate::{AllocId, CompiledJob, Engine};

/// A running job that might be stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    pub alloc: AllocId,
    pub priority: i32,
    pub preemptible: bool,
    /// Its queue runs above its guarantee (the capacity is borrowed).
    pub borrower: bool,
    /// Seconds of work lost if stopped now (since its last checkpoint).
    pub work_lost_s: u64,
    /// Seconds until it has run its minimum runtime (0 = it may be stopped).
    pub min_runtime_left_s: u64,
    /// It had waited past the starvation bound when it started.
    pub started_starved: bool,
}

/// What entitles the preemptor to capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Right {
    pub priority: i32,
    /// Its queue is within its guaranteed quota (it may reclaim from borrowers).
    pub within_guarantee: bool,
    /// It has waited past the starvation bound: it may stop work of its own priority or lower
    /// that did not itself start starved (so starved jobs never stop each other).
    pub starving: bool,
}

impl Victim {
    /// May a preemptor with `right` stop this job?
    pub fn eligible(&self, right: Right) -> bool {
        self.preemptible
            && self.min_runtime_left_s == 0
            && (self.priority < right.priority
                || (right.within_guarantee && self.borrower)
                || (right.starving && self.priority <= right.priority && !self.started_starved))
    }

    /// Cheaper victims sort first.
    fn cost(&self) -> (bool, i32, u64, AllocId) {
        (!self.borrower, self.priority, self.work_lost_s, self.alloc)
    }
}

impl Engine {
    /// Would `job` fit on `base` (a planning copy of this engine) with these allocations gone?
    fn fits_without(&self, base: &Engine, job: &CompiledJob, gone: &[AllocId]) -> bool {
        let mut copy = base.planning_copy();
        for &alloc in gone {
            self.release_on(&mut copy, alloc);
        }
        copy.place(job).is_ok()
    }

    /// The fewest, cheapest victims to stop so `job` fits, or `None` if no eligible set makes
    /// room (or it fits already: then nothing needs stopping, `Some(vec![])`).
    pub fn plan_preemption(&self, job: &CompiledJob, right: Right, victims: &[Victim]) -> Option<Vec<AllocId>> {
        self.plan_on(&self.planning_copy(), job, right, victims)
    }

    /// Plan for several preemptors in turn, each on the fleet the ones before it leave: the
    /// allocations in `gone` already stopping (their capacity promised to the `coming` jobs,
    /// placed first), every earlier preemptor placed and its victims gone. A victim is chosen
    /// at most once. One answer per request, as [`Engine::plan_preemption`]'s; a request that
    /// fits without stopping anything gets `Some(vec![])` and is placed on the plan too.
    pub fn plan_preemptions(
        &self,
        requests: &[(&CompiledJob, Right)],
        victims: &[Victim],
        gone: &[AllocId],
        coming: &[&CompiledJob],
    ) -> Vec<Option<Vec<AllocId>>> {
        let mut base = self.planning_copy();
        for &alloc in gone {
            if self.allocations.contains_key(&alloc) {
                self.release_on(&mut base, alloc);
            }
        }
        for job in coming {
            let _ = base.place(job);
        }
        let mut taken: Vec<AllocId> = gone.to_vec();
        requests
            .iter()
            .map(|&(job, right)| {
                let free: Vec<Victim> = victims.iter().filter(|v| !taken.contains(&v.alloc)).copied().collect();
                let chosen = self.plan_on(&base, job, right, &free)?;
                for &alloc in &chosen {
                    self.release_on(&mut base, alloc);
                }
                taken.extend(&chosen);
                let _ = base.place(job);
                Some(chosen)
            })
            .collect()
    }

    fn plan_on(&self, base: &Engine, job: &CompiledJob, right: Right, victims: &[Victim]) -> Option<Vec<AllocId>> {
        if self.fits_without(base, job, &[]) {
            return Some(Vec::new());
        }
        let mut eligible: Vec<&Victim> =
            victims.iter().filter(|v| v.eligible(right) && self.allocations.contains_key(&v.alloc)).collect();
        eligible.sort_by_key(|v| v.cost());
        let mut chosen: Vec<AllocId> = Vec::new();
        let mut copy = base.planning_copy();
        let mut fits = false;
        for v in &eligible {
            self.release_on(&mut copy, v.alloc);
            chosen.push(v.alloc);
            if copy.planning_copy().place(job).is_ok() {
                fits = true;
                break;
            }
        }
        if !fits {
            return None;
        }
        // Give back what is not needed, most expensive first.
        for i in (0..chosen.len()).rev() {
            let without: Vec<AllocId> = chosen.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &a)| a).collect();
            if self.fits_without(base, job, &without) {
                chosen.remove(i);
            }
        }
        Some(chosen)
    }
}
