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
//! preemptor moves (it cannot move the preemptor back, so moves do not chain into a cycle); a
//! moved job that fits nowhere may take the place of a borrower of its own queue the
//! preemptor's right may stop, or move smaller jobs in turn ([`MOVE_DEPTH_MAX`]). A plan whose
//! moved jobs find no place is no plan: without that, each moved job reclaimed a borrower of
//! its own a cycle later, whatever that cost (in one workload a 7-GPU job for each 1-GPU job
//! moved).

use super::preemption_plan::{Move, Plan, Room, within_room};
use super::{JobId, Scheduler};
use crate::preempt::{Cause, Right, Spare, Team, Victim};
use crate::{AllocId, CompiledJob, Engine};

/// Most plans one consolidation makes: after a try whose moved job finds no place, the plan is
/// made again without that job (another node's victims, most often). Each try runs over every
/// running job.
pub const CONSOLIDATION_TRIES_MAX: usize = 3;

/// Levels of moves one consolidation chains: a job moved for the preemptor that fits nowhere
/// may move smaller jobs out of its way (each level strictly smaller, so no chain cycles).
/// Two: the diurnal weeks of `tests/sim/diurnal_weeks.rs` needed one link (an 8-GPU job
/// whose node held a 4-GPU job, the 4-GPU job onto a node whose one 1-GPU job moved to a GPU
/// free elsewhere); each level plans over the running jobs again.
pub const MOVE_DEPTH_MAX: usize = 2;

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
            let mut rest: Vec<Victim> = candidates.iter().filter(|v| !chosen.contains(&v.alloc)).cloned().collect();
            let mut moves = Vec::new();
            let mut left = spare.clone();
            let moved =
                self.stop_or_move(after, &right, &chosen, candidates, &mut rest, &mut left, &mut moves, MOVE_DEPTH_MAX);
            match moved {
                Ok(after) => return Some((Plan { victims: chosen, right, tasks, demand, moves }, after)),
                Err(stuck) => {
                    without = self.without_shape_of(candidates, stuck, &right, spare);
                    candidates = &without;
                }
            }
        }
        None
    }

    /// `candidates` without `stuck` and every other job of its shape that would move too (not
    /// one a reclaim stops): a moved job that found no place is most often one of several
    /// alike (a team's 2-GPU jobs where no node has two GPUs free), and dropping one a try
    /// left the next plan to choose its twin.
    fn without_shape_of(&self, candidates: &[Victim], stuck: AllocId, right: &Right, spare: &Spare) -> Vec<Victim> {
        let shape = |alloc: &AllocId| super::pass::shape_of(&self.jobs[&self.running[alloc].job].job.compiled);
        let milli = candidates.iter().find(|v| v.alloc == stuck).map_or(0, |v| v.milli);
        let stuck_shape = shape(&stuck);
        let plain = plain(right);
        let stopped = |v: &Victim| v.cause(right) != Some(Cause::Consolidation) && spare.allows(v, &plain);
        candidates
            .iter()
            .filter(|v| v.alloc != stuck && (v.milli != milli || stopped(v) || shape(&v.alloc) != stuck_shape))
            .cloned()
            .collect()
    }

    /// Each of the `chosen` victims (taken from `victims`) is stopped where a plain reclaim
    /// may take it and moved where it may not (its team's job, or a borrower beyond what its
    /// queue borrows), each moved job placed again on `after` — the largest first, as a bin
    /// is packed — its new place's victims taken from `rest` and `left`, and the moves added
    /// to `moves`. A moved job that fits nowhere may move smaller jobs in turn (`depth` more
    /// levels: [`MOVE_DEPTH_MAX`]). The fleet after, or the chosen victim that had to move and
    /// found no place.
    #[allow(clippy::too_many_arguments)]
    fn stop_or_move(
        &self,
        mut after: Engine,
        right: &Right,
        chosen: &[AllocId],
        victims: &[Victim],
        rest: &mut Vec<Victim>,
        left: &mut Spare,
        moves: &mut Vec<Move>,
        depth: usize,
    ) -> Result<Engine, AllocId> {
        let plain = plain(right);
        let mut moving = Vec::new();
        for v in victims.iter().filter(|v| chosen.contains(&v.alloc)) {
            if v.cause(right) != Some(Cause::Consolidation) && left.allows(v, &plain) {
                left.take(v);
            } else {
                moving.push(v);
            }
        }
        moving.sort_by_key(|v| std::cmp::Reverse(v.milli));
        for v in moving {
            let moved = self.running[&v.alloc].job;
            after = self.place_moved(after, moved, v, right, rest, left, moves, depth).ok_or(v.alloc)?;
        }
        Ok(after)
    }

    /// Place `moved` (running as `v`, moved for a preemptor with `right`) again on `after`,
    /// reclaiming borrowed capacity from `rest` if it must, or taking the place of a borrower
    /// of its own queue that `right` may stop, or else (with `depth` left) moving smaller jobs
    /// of `right`'s team out of its way; the victims it takes leave `rest`
    /// and `left`. Its move, and those it makes, go to `moves`.
    #[allow(clippy::too_many_arguments)]
    fn place_moved(
        &self,
        after: Engine,
        moved: JobId,
        v: &Victim,
        right: &Right,
        rest: &mut Vec<Victim>,
        left: &mut Spare,
        moves: &mut Vec<Move>,
        depth: usize,
    ) -> Option<Engine> {
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
        if let Some(taken) = self.engine.plan_on(&after, compiled, &own, rest, left) {
            return self.place_over(after, moved, taken, own, rest, left, moves);
        }
        // A swap: a borrower moved because the preemptor's right may not stop it (a reclaim
        // started it moments ago) takes the place of another borrower of its own queue that
        // the right may stop — its queue gives back what the reclaim takes either way.
        let plain = plain(right);
        let mates: Vec<Victim> = rest
            .iter()
            .filter(|r| r.queue == v.queue && r.cause(&plain) == Some(Cause::Guarantee) && left.allows(r, &plain))
            .cloned()
            .collect();
        if !mates.is_empty()
            && let Some(taken) = self.engine.plan_on(&after, compiled, &plain, &mates, left)
        {
            return self.place_over(after, moved, taken, plain, rest, left, moves);
        }
        // A chain: the moved job takes the place of smaller jobs that move in turn (a 4-GPU
        // job onto a node whose one small job moves to a GPU free elsewhere).
        let depth = depth.checked_sub(1)?;
        let chaining = Right { consolidate: true, team: right.team.clone(), ..own };
        let (chosen, after, tasks, demand) = self.plan_placed(&after, compiled, &chaining, rest, left)?;
        let candidates: Vec<Victim> = rest.iter().filter(|r| chosen.contains(&r.alloc)).cloned().collect();
        rest.retain(|r| !chosen.contains(&r.alloc));
        moves.push(Move { job: moved, victims: chosen.clone(), right: chaining.clone(), tasks, demand });
        self.stop_or_move(after, &chaining, &chosen, &candidates, rest, left, moves, depth).ok()
    }

    /// Place `moved` on `after` in the place its victims `taken` (from `rest`, with `right`)
    /// leave, and add its move to `moves`.
    #[allow(clippy::too_many_arguments)]
    fn place_over(
        &self,
        mut after: Engine,
        moved: JobId,
        taken: Vec<AllocId>,
        right: Right,
        rest: &mut Vec<Victim>,
        left: &mut Spare,
        moves: &mut Vec<Move>,
    ) -> Option<Engine> {
        for &alloc in &taken {
            self.engine.release_on(&mut after, alloc);
            left.take(rest.iter().find(|r| r.alloc == alloc).expect("chosen among the rest"));
        }
        rest.retain(|r| !taken.contains(&r.alloc));
        // (Fits: `plan_on` made room, or — with no victims — there is none to make.)
        let compiled = &self.jobs[&moved].job.compiled;
        let alloc = after.place(compiled).ok()?;
        let tasks = after.allocations()[&alloc].tasks.clone();
        let demand = after.quota_demand(alloc).expect("just placed");
        moves.push(Move { job: moved, victims: taken, right, tasks, demand });
        Some(after)
    }
}

/// `right` as a plain reclaim has it: no moves, its own queue only — what decides whether a
/// chosen victim is stopped rather than moved.
fn plain(right: &Right) -> Right {
    Right { consolidate: false, team: Team::Own, ..right.clone() }
}
