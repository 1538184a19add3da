//! A preemption plan as the scheduler's planners pass it around: the victims, where the
//! preemptor lands, what that counts against quotas, and the jobs a consolidation moves with
//! it; and the one planning step every planner starts from (`rights.rs` plans directly,
//! `consolidation.rs` with moves).

use super::{JobId, Scheduler};
use crate::preempt::{Right, Spare, Victim};
use crate::{AllocId, CompiledJob, Engine};
use gantry_types::Flavor;
use std::collections::BTreeMap;

/// Per (queue, flavor): milli-GPU its guarantee still has room for.
pub(super) type Room = BTreeMap<(usize, Flavor), u64>;

/// A plan's victims, the planning copy they leave with the preemptor placed, its tasks there
/// and what they count against quotas.
pub(super) type PlacedPlan = (Vec<AllocId>, Engine, Vec<crate::ledger::TaskGrant>, Vec<(Flavor, u64)>);

/// A preemption plan checked against the room of the preemptor's queue.
pub(super) struct Plan {
    pub victims: Vec<AllocId>,
    pub right: Right,
    /// Where the plan placed the preemptor, and what that counts against quotas.
    pub tasks: Vec<crate::ledger::TaskGrant>,
    pub demand: Vec<(Flavor, u64)>,
    /// The preemptor's own queue's jobs it moves, each placed again by the same plan.
    pub moves: Vec<Move>,
}

/// One of the preemptor's own queue's jobs that a consolidation moves: the victims its new
/// place needs (none when it fits on free capacity), its right to them, and the new place.
pub(super) struct Move {
    pub job: JobId,
    pub victims: Vec<AllocId>,
    pub right: Right,
    pub tasks: Vec<crate::ledger::TaskGrant>,
    pub demand: Vec<(Flavor, u64)>,
}

/// Does `demand` fit in `queue`'s room, flavor by flavor?
pub(super) fn within_room(room: &Room, queue: usize, demand: &[(Flavor, u64)]) -> bool {
    demand.iter().all(|(f, d)| room.get(&(queue, f.clone())).is_some_and(|r| r >= d))
}

impl Scheduler {
    /// The cheapest victims for `job` with `right` on `base`, and the planning copy they
    /// leave with `job` placed: its tasks and what they count against quotas.
    pub(super) fn plan_placed(
        &self,
        base: &Engine,
        job: &CompiledJob,
        right: &Right,
        victims: &[Victim],
        spare: &Spare,
    ) -> Option<PlacedPlan> {
        let chosen = self.engine.plan_on(base, job, right, victims, spare)?;
        let mut after = base.planning_copy();
        for &alloc in &chosen {
            self.engine.release_on(&mut after, alloc);
        }
        let alloc = after.place(job).expect("the plan makes room");
        let demand = after.quota_demand(alloc).expect("just placed");
        let tasks = after.allocations()[&alloc].tasks.clone();
        Some((chosen, after, tasks, demand))
    }
}
