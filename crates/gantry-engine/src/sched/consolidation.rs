//! Consolidation: a job within its queue's guarantee whose shape no borrower's stop frees —
//! 8 GPUs on one node when every node also runs one of its team's small jobs — may move those
//! small jobs out of the way (its team: its own queue and its siblings in the tree, the
//! projects that share their parent's guarantee), as KAI's consolidation does. A move is a
//! stop and a start elsewhere, planned together: each moved job is placed again in the same
//! plan, on free capacity or on borrowed capacity its guarantee reclaims, so its queue keeps
//! what it holds. (Other teams' jobs that are not borrowed are not moved: their work would be
//! lost to another team's guarantee; such a job in the way of a whole-node job is the wait
//! docs/policies.md measures.) Planned only when no plan without moves exists, and only a job
//! smaller than the preemptor moves (it cannot move the preemptor back, so moves do not chain
//! into a cycle). A plan whose moved jobs find no place is no plan: without that, each moved
//! job reclaimed a borrower of its own a cycle later, whatever that cost (in one workload a
//! 7-GPU job for each 1-GPU job moved).

use super::preemption_plan::{Move, Plan, Room, within_room};
use super::{JobId, Scheduler};
use crate::preempt::{Cause, Right, Spare, Victim};
use crate::{CompiledJob, Engine};

impl Scheduler {
    /// A plan for `job` (with `right`, within its queue's `room`) that moves its own queue's
    /// smaller jobs, each placed again; `None` where consolidation does not apply or finds
    /// none.
    pub(super) fn plan_consolidating(
        &self,
        base: &Engine,
        job: &CompiledJob,
        right: Right,
        victims: &[Victim],
        spare: &Spare,
        room: &Room,
    ) -> Option<(Plan, Engine)> {
        if right.guarantee.is_empty() {
            return None;
        }
        let right = Right { consolidate: true, team: self.siblings(right.queue), ..right };
        let (chosen, mut after, tasks, demand) = self.plan_placed(base, job, &right, victims, spare)?;
        if !within_room(room, right.queue, &demand) {
            return None;
        }
        let mut left = spare.clone();
        victims.iter().filter(|v| chosen.contains(&v.alloc)).for_each(|v| left.take(v));
        let mut rest: Vec<Victim> = victims.iter().filter(|v| !chosen.contains(&v.alloc)).cloned().collect();
        let mut moves = Vec::new();
        for v in victims.iter().filter(|v| chosen.contains(&v.alloc)) {
            if v.cause(&right) != Some(Cause::Consolidation) {
                continue;
            }
            let moved = self.running[&v.alloc].job;
            let m = self.place_moved(&mut after, moved, v, &right, &mut rest, &mut left)?;
            moves.push(m);
        }
        Some((Plan { victims: chosen, right, tasks, demand, moves }, after))
    }

    /// Place `moved` (running as `v`, moved for a preemptor with `right`) again on `after`,
    /// reclaiming borrowed capacity from `rest` if it must; the victims it takes leave `rest`
    /// and `left`.
    fn place_moved(
        &self,
        after: &mut Engine,
        moved: JobId,
        v: &Victim,
        right: &Right,
        rest: &mut Vec<Victim>,
        left: &mut Spare,
    ) -> Option<Move> {
        let compiled = &self.jobs[&moved].job.compiled;
        let own = Right {
            queue: v.queue,
            priority: v.priority,
            milli: v.milli,
            guarantee: right.guarantee.clone(),
            starving: false,
            fair_share: false,
            consolidate: false,
            team: Vec::new(),
            overshoot: right.overshoot,
        };
        let taken = self.engine.plan_on(after, compiled, &own, rest, left)?;
        for &alloc in &taken {
            self.engine.release_on(after, alloc);
            left.take(rest.iter().find(|r| r.alloc == alloc).expect("chosen among the rest"));
        }
        rest.retain(|r| !taken.contains(&r.alloc));
        // (Fits: `plan_on` made room, or — with no victims — there is none to make.)
        let alloc = after.place(compiled).ok()?;
        let tasks = after.allocations()[&alloc].tasks.clone();
        let demand = after.quota_demand(alloc).expect("just placed");
        Some(Move { job: moved, victims: taken, right: own, tasks, demand })
    }
}
