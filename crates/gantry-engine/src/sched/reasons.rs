//! Why each waiting job waits, with the count of jobs per kind of reason kept as the reasons
//! change. A replay counts waiting jobs by reason after every cycle ("waiting, by why"), and
//! metrics do on every scrape: counting them by walking a queue of 50,000 jobs each time made
//! a replay quadratic in its waiting list. Writing a reason a job already has costs a lookup
//! and counts nothing, so only changes cost anything.

use super::JobId;
use super::digest::DigestMap;
use gantry_types::PendingReason;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A kind of reason in its parts (`PendingReason::kind_parts`): counted without building text.
pub(super) type Kind = (&'static str, Option<&'static str>);

#[derive(Clone, Debug, Default)]
pub(super) struct Reasons {
    map: DigestMap<JobId, Arc<PendingReason>>,
    /// Jobs per kind, over every entry of `map` (never a zero count).
    kinds: BTreeMap<Kind, u64>,
}

/// Add `n` jobs of `kind` to `counts`.
pub(super) fn count(counts: &mut BTreeMap<Kind, u64>, kind: Kind, n: u64) {
    if n > 0 {
        *counts.entry(kind).or_default() += n;
    }
}

/// Take `n` jobs of `kind` from `counts` (a zero count is no entry).
pub(super) fn uncount(counts: &mut BTreeMap<Kind, u64>, kind: Kind, n: u64) {
    if n == 0 {
        return;
    }
    let c = counts.get_mut(&kind).expect("only what was counted is taken back");
    *c -= n;
    if *c == 0 {
        counts.remove(&kind);
    }
}

impl Reasons {
    /// Record `reason` for `job` (the same reason again changes nothing).
    pub fn insert(&mut self, job: JobId, reason: Arc<PendingReason>) {
        if let Some(old) = self.map.get(&job) {
            if **old == *reason {
                return;
            }
            uncount(&mut self.kinds, old.kind_parts(), 1);
        }
        count(&mut self.kinds, reason.kind_parts(), 1);
        self.map.insert(job, reason);
    }

    pub fn remove(&mut self, job: &JobId) {
        if let Some(old) = self.map.remove(job) {
            uncount(&mut self.kinds, old.kind_parts(), 1);
        }
    }

    pub fn get(&self, job: &JobId) -> Option<&Arc<PendingReason>> {
        self.map.get(job)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&JobId, &Arc<PendingReason>)> {
        self.map.iter()
    }

    pub fn len(&self) -> usize {
        self.kinds.values().sum::<u64>() as usize
    }

    /// Jobs per kind of reason.
    pub fn kinds(&self) -> &BTreeMap<Kind, u64> {
        &self.kinds
    }

    /// The fingerprint of every job's reason (`DigestMap::digest`).
    pub fn digest(&self) -> u64 {
        self.map.digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_every_change_and_a_repeated_reason_costs_nothing() {
        let mut r = Reasons::default();
        let order = Arc::new(PendingReason::QueueOrder);
        let held = Arc::new(PendingReason::Held);
        r.insert(1, order.clone());
        r.insert(2, order.clone());
        let digest = r.digest();
        r.insert(2, Arc::new(PendingReason::QueueOrder));
        assert_eq!(r.digest(), digest, "same value, no change");
        assert_eq!(r.kinds().get(&("queue-order", None)), Some(&2));
        r.insert(1, held.clone());
        assert_eq!(r.kinds().get(&("queue-order", None)), Some(&1));
        assert_eq!(r.kinds().get(&("held", None)), Some(&1));
        r.remove(&2);
        r.remove(&2);
        assert_eq!(r.kinds().get(&("queue-order", None)), None, "a zero count is no entry");
        assert_eq!((r.len(), r.iter().count()), (1, 1));
    }
}
