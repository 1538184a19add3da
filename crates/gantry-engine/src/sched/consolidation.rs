//! Consolidation: a job within its queue's guarantee whose shape no borrower's stop frees —
//! 8 GPUs on one node when every node also runs a small job — may move those small jobs out
//! of the way, as KAI's consolidation does. A move is a stop and a start elsewhere, planned
//! together: each moved job is placed again in the same plan, on free capacity or on borrowed
//! capacity its guarantee reclaims, so its queue keeps what it holds and loses only the work
//! since its start. Planned only when no plan without moves exists, its team's jobs first
//! (its own queue and its siblings in the tree, the projects that share their parent's
//! guarantee), then any queue's: a whole-node guarantee is a promise of a shape, and another
//! team's small job within its own guarantee would otherwise hold it off until that job ends
//! (hours, on the random trees of `tests/sim/stability_trees.rs`). A borrower the plan takes
//! beyond what its queue borrows is moved too, not stopped. Only a job smaller than the
//! preemptor moves (it cannot move the preemptor back, so moves do not chain into a cycle). A
//! plan whose moved jobs find no place is no plan: without that, each moved job reclaimed a
//! borrower of its own a cycle later, whatever that cost (in one workload a 7-GPU job for
//! each 1-GPU job moved).

use super::preemption_plan::{Move, Plan, Room, within_room};
use super::{JobId, Scheduler};
use crate::preempt::{Cause, Right, Spare, Team, Victim};
use crate::{AllocId, CompiledJob, Engine};

/// Most plans one consolidation makes: after a try whose moved job finds no place, the plan is
/// made again without that job (another node's victims, most often). Each try runs over every
/// running job.
pub const CONSOLIDATION_TRIES_MAX: usize = 3;

impl Scheduler {
    /// A plan for `job` (with `right`, consolidating: `Right::team` says whose jobs besides
    /// its own queue's may move; within its queue's `room`) that moves smaller jobs, each
    /// placed again; `None` where consolidation does not apply or finds none.
    pub(super) fn plan_consolidating(
        &self,
        base: &Engine,
        job: &CompiledJob,
        right: Right,
        victims: &[Victim],
        spare: &Spare,
        room: &Room,
    ) -> Option<(Plan, Engine)> {
        if right.guarantee.is_empty() || !right.consolidate {
            return None;
        }
        // A job that finds no place stays where it is: the plan is made again without it,
        // which picks other victims (most often another node's). (Copied only then: the
        // victims are every running job.)
        let mut without: Vec<Victim>;
        let mut candidates = victims;
        for _ in 0..CONSOLIDATION_TRIES_MAX {
            let (chosen, after, tasks, demand) = self.plan_placed(base, job, &right, candidates, spare)?;
            if !within_room(room, right.queue, &demand) {
                return None;
            }
            match self.stop_or_move(after, &right, &chosen, candidates, spare) {
                Ok((after, moves)) => return Some((Plan { victims: chosen, right, tasks, demand, moves }, after)),
                Err(stuck) => {
                    without = candidates.iter().filter(|v| v.alloc != stuck).cloned().collect();
                    candidates = &without;
                }
            }
        }
        None
    }

    /// Cheapest first, each of the `chosen` victims is stopped where a plain reclaim may take
    /// it and moved where it may not (its team's job, or a borrower beyond what its queue
    /// borrows), each moved job placed again on `after`: the fleet and the moves, or the
    /// victim that had to move and found no place.
    fn stop_or_move(
        &self,
        mut after: Engine,
        right: &Right,
        chosen: &[AllocId],
        victims: &[Victim],
        spare: &Spare,
    ) -> Result<(Engine, Vec<Move>), AllocId> {
        let mut left = spare.clone();
        let plain = Right { consolidate: false, team: Team::Own, ..right.clone() };
        let mut moving = Vec::new();
        for v in victims.iter().filter(|v| chosen.contains(&v.alloc)) {
            if v.cause(right) != Some(Cause::Consolidation) && left.allows(v, &plain) {
                left.take(v);
            } else {
                moving.push(v);
            }
        }
        let mut rest: Vec<Victim> = victims.iter().filter(|v| !chosen.contains(&v.alloc)).cloned().collect();
        let mut moves = Vec::new();
        for v in moving {
            let moved = self.running[&v.alloc].job;
            let m = self.place_moved(&mut after, moved, v, right, &mut rest, &mut left).ok_or(v.alloc)?;
            moves.push(m);
        }
        Ok((after, moves))
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
            team: Team::Own,
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
