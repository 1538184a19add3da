//! A victim's way back: how long a job of its shape would wait to start again if it were
//! stopped now. Stopping a young 8-GPU job to free one GPU loses little work, but the job then
//! waits for a whole node to empty (hours on a busy fleet), while a 1-GPU victim that ran
//! longer restarts in the first gap; counting the way back with the work lost makes the
//! planner choose the small one.
//!
//! The estimate is the earliest start of the shape on the fleet as it is (`backfill`'s
//! bisection over the running jobs' planned ends): the preemptor takes the victim's place, so
//! the victim waits as a new job of its shape would. At most [`WAY_BACK_SHAPES_MAX`] shapes per
//! round, the largest first; the others count none.

use super::{JobId, Scheduler};
use crate::limits::{WAY_BACK_SHAPES_MAX, WAY_BACK_UNKNOWN_S};
use std::collections::BTreeMap;

/// Seconds of expected wait per shape (`Entry::shape`); shapes not listed count none.
pub(super) type WayBacks = BTreeMap<u64, u64>;

impl Scheduler {
    /// The way back of the running jobs' largest shapes at `now`.
    pub(super) fn way_backs(&self, now: u64) -> WayBacks {
        // One running job per shape, the largest (milli-GPU) first.
        let mut shapes: BTreeMap<u64, (u64, JobId)> = BTreeMap::new();
        for r in self.running.values() {
            let entry = &self.jobs[&r.job];
            shapes.entry(entry.shape).or_insert((r.milli, r.job));
        }
        let mut largest: Vec<(u64, u64, JobId)> = shapes.into_iter().map(|(shape, (m, j))| (m, shape, j)).collect();
        largest.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let running = super::admit::running_list(&self.running);
        largest
            .into_iter()
            .take(WAY_BACK_SHAPES_MAX)
            .map(|(_, shape, job)| {
                let start = self.engine.earliest_start(&self.jobs[&job].job.compiled, &running, now);
                (shape, start.map_or(WAY_BACK_UNKNOWN_S, |s| s - now))
            })
            .collect()
    }
}
