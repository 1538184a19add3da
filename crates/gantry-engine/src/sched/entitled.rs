//! How long jobs wait while their queue's guarantee has room for them: the number a
//! guarantee is judged by (a guarantee is kept when such a job starts within one cycle plus
//! its victims' grace period). Each cycle, the jobs of each queue with a guarantee are taken
//! in queue order (its promised jobs first) against the room left in it, each claiming its share of the room before
//! the next is judged, up to the first job the room cannot hold (the jobs behind it wait for
//! their own queue's head, not for other queues) and at most [`ENTITLED_SCAN_MAX`]: a job
//! within the room starts its clock, or keeps it running; one no longer within it (its
//! queue's own jobs took the room) stops it. When a job starts, the time since its clock started is recorded
//! ([`SchedStats::guarantee_waited`]).
//!
//! The same list keeps lending honest: while such a job waits, a start that would make
//! another queue borrow in its flavor may take only what the waiting jobs do not need
//! (`lending.rs`) — else the capacity a queue is owed goes to a borrower that the next
//! cycle's reclaim stops again.

use super::{JobId, Scheduler};
use gantry_types::Flavor;
use std::collections::BTreeMap;

/// A waiting job within its queue's guarantee: since when, its queue, the flavor whose room
/// it claims and how much.
#[derive(Clone, Debug)]
pub(super) struct Entitled {
    pub since: u64,
    pub queue: usize,
    pub flavor: Flavor,
    milli: u64,
}

/// Waiting jobs per queue judged against its guarantee each cycle.
pub const ENTITLED_SCAN_MAX: usize = 16;

impl Scheduler {
    /// Start or stop the clocks of jobs waiting within their queue's guarantee, at `now`.
    pub(super) fn track_entitled(&mut self, now: u64) {
        if self.quotas.is_none() {
            return;
        }
        // Per queue with a guarantee: the room left in each of its flavors (one pass over
        // the room, not one per queue: a tree may hold 10,000 queues).
        let mut rooms: BTreeMap<usize, Vec<(Flavor, u64)>> = BTreeMap::new();
        for ((q, f), r) in self.guarantee_room() {
            rooms.entry(q).or_default().push((f, r));
        }
        let mut within: BTreeMap<JobId, (usize, Flavor, u64)> = BTreeMap::new();
        for (q, room) in &mut rooms {
            let q = *q;
            // The queue's promised jobs hold its claim first (the others may not delay them).
            let promised = self.promises.iter().copied().filter(|j| self.jobs[j].queue == q);
            let in_order = self.pending.order(q).iter().map(|&(_, _, job)| job).filter(|j| !self.promises.contains(j));
            for job in promised.chain(in_order).take(ENTITLED_SCAN_MAX) {
                if self.held.contains(&job) {
                    continue;
                }
                let milli = self.jobs[&job].job.compiled.milli_at_most();
                // The queue's own order decides past a job beyond its room: the jobs behind
                // it wait for it, not for other queues (their clocks do not run).
                let Some((f, r)) = room.iter_mut().find(|(_, r)| *r >= milli) else { break };
                *r -= milli;
                within.insert(job, (q, f.clone(), milli));
            }
        }
        self.entitled.retain(|job, _| within.contains_key(job));
        self.entitled_claims.clear();
        let carried = std::mem::take(&mut self.entitled_carried);
        for (job, (queue, flavor, milli)) in within {
            let since = self.entitled.get(&job).map(|e| e.since).or_else(|| carried.get(&job).copied()).unwrap_or(now);
            self.claim_entitled(queue, &flavor, milli, true);
            self.entitled.insert(job, Entitled { since, queue, flavor, milli });
        }
    }

    /// Add (or take back) `milli` of `flavor` to what `queue` and its ancestors' waiting jobs
    /// claim within their guarantees (`entitled_claims`: summed once per cycle, so a lending
    /// check reads a queue's claim without walking every waiting job).
    fn claim_entitled(&mut self, queue: usize, flavor: &Flavor, milli: u64, add: bool) {
        let Some(book) = &self.quotas else { return };
        for q in book.parents(queue) {
            let by_queue = match self.entitled_claims.get_mut(flavor) {
                Some(by_queue) => by_queue,
                None => self.entitled_claims.entry(flavor.clone()).or_default(),
            };
            let claim = by_queue.entry(q).or_default();
            *claim = if add { *claim + milli } else { claim.saturating_sub(milli) };
        }
    }

    /// How long `job` has waited within its guarantee at `now` (`None`: it is not within it —
    /// not the same as having just become so).
    pub(super) fn entitled_for(&self, job: JobId, now: u64) -> Option<u64> {
        self.entitled.get(&job).map(|e| now.saturating_sub(e.since))
    }

    /// `job` starts at `now`: record how long it waited within its guarantee.
    pub(super) fn entitled_started(&mut self, job: JobId, now: u64) {
        if let Some(e) = self.entitled.remove(&job) {
            self.claim_entitled(e.queue, &e.flavor, e.milli, false);
            let waited = self.stats.guarantee_waited.entry(job).or_default();
            *waited = (*waited).max(now - e.since);
        }
    }

    /// Milli-GPU that jobs of `queue` (or below it) waiting within its guarantee need in
    /// `flavor`.
    pub(super) fn entitled_in(&self, queue: usize, flavor: &Flavor) -> u64 {
        self.entitled_claims.get(flavor).and_then(|by_queue| by_queue.get(&queue)).copied().unwrap_or(0)
    }

    /// The queues whose waiting jobs (or whose descendants') claim `flavor` within their
    /// guarantees.
    pub(super) fn entitled_queues<'a>(&'a self, flavor: &'a Flavor) -> impl Iterator<Item = usize> + 'a {
        let claims = self.entitled_claims.get(flavor).into_iter().flatten();
        claims.filter(|(_, c)| **c > 0).map(|(q, _)| *q)
    }
}
