//! The jobs waiting in each queue, in the queue's order and grouped by request shape
//! (`pass::shape_of`).
//!
//! Why the groups: a pass refuses a request for resources once and every later job of the same
//! shape with the same answer (nothing is released during a pass). With the jobs in one order
//! only, a pass still stepped over each of them — a lookup and a reason each — so a cycle cost
//! what the waiting list held, and a replay, a cycle per event, grew with its square (issue 39:
//! 50,000 waiting jobs took minutes). With the groups a pass jumps from a refused shape's job
//! to the next job of another shape, and the jobs it jumped over get the refusal as their
//! reason when the pass ends, per group ([`Waiting::settle`]): a group holds one reason that
//! its *followers* read, and only the jobs whose reason was written one by one since (arrivals,
//! jobs tried in a pass) hold their own. Settling costs those, not the group — refusals change
//! from cycle to cycle (what is free, when the reserved job starts), so copying the reason
//! into every member would cost the whole group each time. The counts by kind and the
//! fingerprint of every job's reason are kept as groups and jobs change, never recounted.

use super::digest::entry_hash;
use super::reasons::{Kind, Reasons, count, uncount};
use super::{JobId, Key};
use crate::rng::mix;
use gantry_types::PendingReason;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The waiting jobs of every queue, and why each waits.
#[derive(Clone, Debug)]
pub(super) struct Waiting {
    queues: Vec<QueueJobs>,
    /// Per request shape, the queues that have a job of it waiting.
    queues_with: BTreeMap<u64, BTreeSet<usize>>,
    count: usize,
    /// Reasons written one job at a time: only jobs in their group's `unsettled`.
    own: Reasons,
    /// Per kind of reason, the groups' followers.
    followers: BTreeMap<Kind, u64>,
    /// XOR of every group's [`Group::digest`].
    groups_digest: u64,
}

#[derive(Clone, Debug, Default)]
struct QueueJobs {
    order: BTreeSet<Key>,
    groups: BTreeMap<u64, Group>,
}

/// One queue's waiting jobs of one request shape.
#[derive(Clone, Debug, Default)]
struct Group {
    keys: BTreeSet<Key>,
    /// Its jobs' planned lengths, counted (not known: `u64::MAX`): whether any of them could
    /// end before a reserved start.
    lengths: BTreeMap<u64, usize>,
    /// The reason its followers (members not in `unsettled`) have, and its hash.
    settled: Option<(Arc<PendingReason>, u64)>,
    /// Members whose reason is their own (in `Waiting::own`, or none yet).
    unsettled: BTreeSet<JobId>,
    /// XOR of the followers' hashes ([`job_hash`]).
    followers_xor: u64,
}

impl Group {
    fn followers(&self) -> u64 {
        (self.keys.len() - self.unsettled.len()) as u64
    }

    /// A fingerprint of its followers and their reason (0 with none).
    fn digest(&self) -> u64 {
        match &self.settled {
            Some((_, hash)) if self.followers() > 0 => mix(self.followers_xor ^ hash.rotate_left(17)),
            _ => 0,
        }
    }

    /// `job` (a member) follows the group's reason from now on, or stops following it.
    fn set_following(&mut self, job: JobId, follows: bool) {
        let was = !self.unsettled.contains(&job);
        if was == follows {
            return;
        }
        self.followers_xor ^= job_hash(job);
        if follows {
            self.unsettled.remove(&job);
        } else {
            self.unsettled.insert(job);
        }
    }
}

fn job_hash(job: JobId) -> u64 {
    mix(job.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

impl Waiting {
    pub fn new(queues: usize) -> Waiting {
        Waiting {
            queues: vec![QueueJobs::default(); queues],
            queues_with: BTreeMap::new(),
            count: 0,
            own: Reasons::default(),
            followers: BTreeMap::new(),
            groups_digest: 0,
        }
    }

    /// Jobs waiting in all queues.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Queue `q`'s jobs in its order.
    pub fn order(&self, q: usize) -> &BTreeSet<Key> {
        &self.queues[q].order
    }

    /// Every queue's jobs in its order, by queue index.
    pub fn orders(&self) -> impl Iterator<Item = &BTreeSet<Key>> {
        self.queues.iter().map(|q| &q.order)
    }

    pub fn contains(&self, q: usize, key: &Key) -> bool {
        self.queues[q].order.contains(key)
    }

    /// Request shapes with a job waiting in queue `q`.
    pub fn shape_count(&self, q: usize) -> usize {
        self.queues[q].groups.len()
    }

    /// Queue `q`'s jobs by request shape, each in the queue's order.
    pub fn groups(&self, q: usize) -> impl Iterator<Item = (u64, &BTreeSet<Key>)> {
        self.queues[q].groups.iter().map(|(&shape, g)| (shape, &g.keys))
    }

    /// The shortest planned length among queue `q`'s jobs of request `shape` (`u64::MAX`: none
    /// known, or no such job).
    pub fn shortest(&self, q: usize, shape: u64) -> u64 {
        self.queues[q].groups.get(&shape).and_then(|g| g.lengths.keys().next().copied()).unwrap_or(u64::MAX)
    }

    /// Does queue `q`'s group of request `shape` hold any of `jobs`?
    pub fn holds_any(&self, q: usize, shape: u64, jobs: impl IntoIterator<Item = Key>) -> bool {
        self.queues[q].groups.get(&shape).is_some_and(|g| jobs.into_iter().any(|k| g.keys.contains(&k)))
    }

    /// Change queue `q`'s group of `shape` with `f`, keeping the counts by kind and the
    /// fingerprint true.
    fn change<T>(&mut self, q: usize, shape: u64, f: impl FnOnce(&mut Group, &mut Reasons) -> T) -> Option<T> {
        let group = self.queues[q].groups.get_mut(&shape)?;
        let before = (group.digest(), group.followers(), group.settled.as_ref().map(|(r, _)| r.clone()));
        let out = f(group, &mut self.own);
        let after = (group.digest(), group.followers(), group.settled.as_ref().map(|(r, _)| r.clone()));
        self.groups_digest ^= before.0 ^ after.0;
        if (before.1, &before.2) != (after.1, &after.2) {
            if let Some(r) = &before.2 {
                uncount(&mut self.followers, r.kind_parts(), before.1);
            }
            if let Some(r) = &after.2 {
                count(&mut self.followers, r.kind_parts(), after.1);
            }
        }
        Some(out)
    }

    /// Put `key` (of request `shape`, planned to run `length` seconds) in queue `q`; it has no
    /// reason yet.
    pub fn insert(&mut self, q: usize, key: Key, shape: u64, length: Option<u64>) {
        let queue = &mut self.queues[q];
        if !queue.order.insert(key) {
            return;
        }
        let group = queue.groups.entry(shape).or_default();
        group.keys.insert(key);
        group.unsettled.insert(key.2);
        *group.lengths.entry(length.unwrap_or(u64::MAX)).or_default() += 1;
        self.queues_with.entry(shape).or_default().insert(q);
        self.count += 1;
    }

    /// Take `key` (as inserted) out of queue `q`, with its reason; false if it was not there.
    pub fn remove(&mut self, q: usize, key: &Key, shape: u64, length: Option<u64>) -> bool {
        if !self.queues[q].order.remove(key) {
            return false;
        }
        let job = key.2;
        self.change(q, shape, |group, own| {
            group.set_following(job, false);
            group.unsettled.remove(&job);
            group.keys.remove(key);
            own.remove(&job);
            let length = length.unwrap_or(u64::MAX);
            let n = group.lengths.get_mut(&length).expect("counted when inserted");
            *n -= 1;
            if *n == 0 {
                group.lengths.remove(&length);
            }
        })
        .expect("a waiting job is in its shape's group");
        let queue = &mut self.queues[q];
        if queue.groups[&shape].keys.is_empty() {
            queue.groups.remove(&shape);
            let with = self.queues_with.get_mut(&shape).expect("indexed with its group");
            with.remove(&q);
            if with.is_empty() {
                self.queues_with.remove(&shape);
            }
        }
        self.count -= 1;
        true
    }

    /// Why the job at `key` (of request `shape`, in queue `q`) waits, as the last cycle left
    /// it; `None` if it has no reason yet or does not wait there.
    pub fn reason(&self, q: usize, shape: u64, key: &Key) -> Option<&Arc<PendingReason>> {
        let group = self.queues[q].groups.get(&shape).filter(|g| g.keys.contains(key))?;
        if group.unsettled.contains(&key.2) {
            return self.own.get(&key.2);
        }
        group.settled.as_ref().map(|(r, _)| r)
    }

    /// Record why the job at `key` (waiting in queue `q`, of request `shape`) waits, on its own.
    pub fn set_reason(&mut self, q: usize, shape: u64, key: &Key, reason: Arc<PendingReason>) {
        let job = key.2;
        let Some(group) = self.queues[q].groups.get(&shape).filter(|g| g.keys.contains(key)) else { return };
        let has_own = group.unsettled.contains(&job);
        let current = if has_own { self.own.get(&job) } else { group.settled.as_ref().map(|(r, _)| r) };
        if current.is_some_and(|r| **r == *reason) {
            return;
        }
        if has_own {
            // The group's followers and reason stay as they are.
            self.own.insert(job, reason);
            return;
        }
        self.change(q, shape, |group, own| {
            group.set_following(job, false);
            own.insert(job, reason);
        });
    }

    /// Give every job of request shape `shape`, in every queue, `reason` — except the jobs in
    /// `tried`, which keep what their try gave them.
    pub fn settle(&mut self, shape: u64, reason: &Arc<PendingReason>, tried: &BTreeSet<JobId>) {
        let Some(queues) = self.queues_with.get(&shape) else { return };
        let unsettled: Vec<usize> = queues.iter().copied().filter(|&q| !self.settled_for(q, shape, tried)).collect();
        for q in unsettled {
            self.settle_in(q, shape, reason, tried);
        }
    }

    /// [`Waiting::settle`] in queue `q` only: the group's reason becomes `reason`, for its
    /// followers at once; of the rest, each not tried, or tried and given the same reason,
    /// follows it from now on.
    pub fn settle_in(&mut self, q: usize, shape: u64, reason: &Arc<PendingReason>, tried: &BTreeSet<JobId>) {
        if self.settled_for(q, shape, tried) {
            return;
        }
        self.change(q, shape, |group, own| {
            let followers_xor = &mut group.followers_xor;
            group.unsettled.retain(|job| {
                let follows = !tried.contains(job) || own.get(job).is_some_and(|r| **r == **reason);
                if follows {
                    own.remove(job);
                    *followers_xor ^= job_hash(*job);
                }
                !follows
            });
            // A group nobody follows keeps no reason (and costs no hash: a queue of distinct
            // requests settles one such group per refusal).
            if group.followers() == 0 {
                group.settled = None;
            } else if group.settled.as_ref().is_none_or(|(r, _)| **r != **reason) {
                group.settled = Some((reason.clone(), entry_hash(&(), &**reason)));
            }
        });
    }

    /// Nothing to settle in queue `q`'s group of `shape`: every member was tried on its own and
    /// nobody follows (a queue of distinct requests has one such group per refusal, each pass).
    fn settled_for(&self, q: usize, shape: u64, tried: &BTreeSet<JobId>) -> bool {
        let group = self.queues[q].groups.get(&shape);
        group.is_none_or(|g| g.followers() == 0 && g.unsettled.iter().all(|j| tried.contains(j)))
    }

    /// Jobs with a reason, per kind.
    pub fn kinds(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (&kind, n) in self.own.kinds().iter().chain(&self.followers) {
            *out.entry(PendingReason::kind_text(kind)).or_default() += n;
        }
        out
    }

    /// Jobs with a reason.
    pub fn explained(&self) -> usize {
        self.own.len() + self.followers.values().sum::<u64>() as usize
    }

    /// A fingerprint of every waiting job's reason, kept as they change.
    pub fn reasons_digest(&self) -> u64 {
        self.own.digest() ^ self.groups_digest
    }

    /// Every job with a reason, and the reason.
    pub fn reasons(&self) -> impl Iterator<Item = (JobId, &Arc<PendingReason>)> + '_ {
        let own = self.own.iter().map(|(&j, r)| (j, r));
        let followed = self.queues.iter().flat_map(|queue| queue.groups.values()).flat_map(|g| {
            g.settled
                .iter()
                .flat_map(move |(r, _)| g.keys.iter().filter(|k| !g.unsettled.contains(&k.2)).map(move |k| (k.2, r)))
        });
        own.chain(followed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;

    fn key(job: JobId) -> Key {
        (Reverse(0), job, job)
    }

    fn kind_of(w: &Waiting, q: usize, shape: u64, job: JobId) -> Option<String> {
        w.reason(q, shape, &key(job)).map(|r| r.kind())
    }

    /// What the counts and the iterator say must be what each job's lookup says.
    fn consistent(w: &Waiting, members: &[(usize, u64, JobId)]) {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for &(q, shape, job) in members {
            if let Some(k) = kind_of(w, q, shape, job) {
                *kinds.entry(k).or_default() += 1;
            }
        }
        assert_eq!(w.kinds(), kinds);
        assert_eq!(w.explained(), w.reasons().count());
    }

    #[test]
    fn settling_gives_a_shape_its_reason_in_every_queue_but_spares_jobs_tried_on_their_own() {
        let mut w = Waiting::new(2);
        let members: Vec<(usize, u64, JobId)> =
            (1..=4).map(|job| ((job % 2) as usize, 7, job)).chain([(0, 8, 5)]).collect();
        for &(q, shape, job) in &members {
            w.insert(q, key(job), shape, Some(job));
        }
        assert_eq!((w.len(), w.shape_count(0), w.shape_count(1)), (5, 2, 1));
        let held = Arc::new(PendingReason::Held);
        let order = Arc::new(PendingReason::QueueOrder);
        w.set_reason(0, 7, &key(2), order.clone());
        let digest = w.reasons_digest();
        w.settle(7, &held, &BTreeSet::from([2]));
        assert_ne!(w.reasons_digest(), digest);
        let kinds: Vec<Option<String>> = members.iter().map(|&(q, s, j)| kind_of(&w, q, s, j)).collect();
        assert_eq!(
            kinds,
            [Some("held".into()), Some("queue-order".into()), Some("held".into()), Some("held".into()), None]
        );
        consistent(&w, &members);
        // Again, not tried: job 2 follows too.
        w.settle(7, &held, &BTreeSet::new());
        assert_eq!(w.kinds().get("held"), Some(&4));
        consistent(&w, &members);
        // One by one, then the group's new reason reaches every follower at once.
        w.set_reason(1, 7, &key(3), order.clone());
        assert_eq!(kind_of(&w, 1, 7, 3).as_deref(), Some("queue-order"));
        consistent(&w, &members);
        w.settle(7, &order, &BTreeSet::new());
        assert_eq!(w.kinds().get("queue-order"), Some(&4));
        consistent(&w, &members);
        // The same contents reached another way have the same fingerprint.
        let mut v = Waiting::new(2);
        for &(q, shape, job) in &members {
            v.insert(q, key(job), shape, Some(job));
        }
        v.settle(7, &order, &BTreeSet::new());
        assert_eq!(v.reasons_digest(), w.reasons_digest());
        assert!(w.remove(0, &key(2), 7, Some(2)));
        assert_eq!(w.kinds().get("queue-order"), Some(&3));
        consistent(&w, &[members[0], members[2], members[3], members[4]]);
        assert_eq!(kind_of(&w, 0, 7, 2), None, "gone");
    }

    #[test]
    fn removing_the_last_job_of_a_shape_forgets_the_shape_and_its_lengths() {
        let mut w = Waiting::new(1);
        w.insert(0, key(1), 7, Some(60));
        w.insert(0, key(3), 7, None);
        assert_eq!(w.shortest(0, 7), 60);
        assert!(!w.remove(0, &key(2), 7, None), "not waiting");
        assert!(w.remove(0, &key(1), 7, Some(60)));
        assert_eq!(w.shortest(0, 7), u64::MAX, "only a job of no known length left");
        assert!(w.holds_any(0, 7, [key(2), key(3)]));
        w.settle(7, &Arc::new(PendingReason::Held), &BTreeSet::new());
        assert!(w.remove(0, &key(3), 7, None));
        assert_eq!((w.len(), w.shape_count(0), w.queues_with.len(), w.explained()), (0, 0, 0, 0));
        assert_eq!(w.reasons_digest(), 0);
    }
}
