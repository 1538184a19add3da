//! Weighted shares, for fair-share reclaim (`PreemptionRules::fair_share_reclaim`): without
//! it, weights only order the waiting jobs, so a team whose jobs are wider than the others'
//! can sit at 0 GPUs while narrower jobs of teams far above their weight fill every gap.
//!
//! Each queue's share is its entitlement (its weight over its siblings', times its parent's,
//! down the tree) of the fleet's milli-GPU, filled max-min: no queue gets more than it wants
//! (running and waiting), what it leaves is shared again by weight. A waiting job whose queue
//! stays within its share with it may stop work of queues above theirs, but never more than
//! keeps each at or above its share after the stop — the hysteresis of Kueue's
//! `LessThanOrEqualToFinalShare`: the victim's queue does not drop below its share and
//! reclaim back.

use super::Scheduler;
use std::collections::BTreeMap;

/// Per queue with work: milli-GPU it holds and its weighted share.
#[derive(Clone, Debug, Default)]
pub(super) struct Shares {
    pub held: BTreeMap<usize, u64>,
    pub share: BTreeMap<usize, u64>,
}

impl Shares {
    /// Milli-GPU `queue` holds above its share (0: at or below).
    pub fn above(&self, queue: usize) -> u64 {
        self.held.get(&queue).copied().unwrap_or(0).saturating_sub(self.share.get(&queue).copied().unwrap_or(0))
    }

    /// A preemptor of `queue` takes `milli`; its victims (queue, milli) give theirs back.
    pub fn claim(&mut self, queue: usize, milli: u64, victims: impl Iterator<Item = (usize, u64)>) {
        *self.held.entry(queue).or_default() += milli;
        for (q, m) in victims {
            let held = self.held.entry(q).or_default();
            *held = held.saturating_sub(m);
        }
    }

    /// Does `queue` stay within its share with `milli` more?
    pub fn room_for(&self, queue: usize, milli: u64) -> bool {
        let held = self.held.get(&queue).copied().unwrap_or(0);
        held.saturating_add(milli) <= self.share.get(&queue).copied().unwrap_or(0)
    }
}

impl Scheduler {
    /// The queues' weighted shares now, when the tree reclaims toward them.
    pub(super) fn weighted_shares(&self) -> Option<Shares> {
        if !self.rules.fair_share_reclaim || !self.config.preempt {
            return None;
        }
        let tree = self.fair.as_ref()?.tree();
        let mut held: BTreeMap<usize, u64> = BTreeMap::new();
        for r in self.running.values() {
            *held.entry(self.jobs[&r.job].queue).or_default() += r.milli;
        }
        let capacity = self.engine.state().gpus.len() as u64 * 1000;
        let mut wanted = held.clone();
        for (q, pending) in self.pending.orders().enumerate() {
            // No queue is given more than the fleet: its waiting jobs past that change nothing.
            for &(_, _, job) in pending.iter().filter(|(_, _, j)| !self.held.contains(j)) {
                let w = wanted.entry(q).or_default();
                if *w >= capacity {
                    break;
                }
                *w += self.jobs[&job].job.compiled.milli_at_most();
            }
        }
        let siblings = sibling_weights(tree);
        let queues: Vec<usize> = wanted.keys().copied().collect();
        let demand: Vec<u64> = queues.iter().map(|q| wanted[q]).collect();
        let weight: Vec<f64> = queues.iter().map(|&q| entitlement(tree, &siblings, q)).collect();
        let filled = max_min(capacity, &demand, &weight);
        Some(Shares { held, share: queues.into_iter().zip(filled).collect() })
    }
}

/// Per parent (`None`: the roots), the sum of its children's weights: one pass over the tree.
fn sibling_weights(tree: &gantry_types::QueueTree) -> BTreeMap<Option<usize>, u64> {
    let mut sums: BTreeMap<Option<usize>, u64> = BTreeMap::new();
    for q in &tree.queues {
        *sums.entry(q.parent).or_default() += u64::from(q.weight.max(1));
    }
    sums
}

/// A queue's weight over its siblings', times its parent's, up to the root.
fn entitlement(tree: &gantry_types::QueueTree, siblings: &BTreeMap<Option<usize>, u64>, queue: usize) -> f64 {
    let mut e = 1.0;
    let mut at = Some(queue);
    while let Some(q) = at {
        let parent = tree.queues[q].parent;
        e *= tree.queues[q].weight.max(1) as f64 / siblings[&parent].max(1) as f64;
        at = parent;
    }
    e
}

/// Max-min fair filling of `capacity` by `weight`, none above its `demand`.
fn max_min(capacity: u64, demand: &[u64], weight: &[f64]) -> Vec<u64> {
    let mut share = vec![0u64; demand.len()];
    let mut open: Vec<usize> = (0..demand.len()).filter(|&i| demand[i] > 0).collect();
    let mut left = capacity;
    while !open.is_empty() && left > 0 {
        let total: f64 = open.iter().map(|&i| weight[i]).sum();
        let per = |i: usize| (left as f64 * weight[i] / total).floor() as u64;
        let capped: Vec<usize> = open.iter().copied().filter(|&i| demand[i] - share[i] <= per(i)).collect();
        if capped.is_empty() {
            let each: Vec<u64> = open.iter().map(|&i| per(i)).collect();
            open.iter().zip(each).for_each(|(&i, p)| share[i] += p);
            break;
        }
        for &i in &capped {
            left -= demand[i] - share[i];
            share[i] = demand[i];
        }
        open.retain(|i| !capped.contains(i));
    }
    share
}

#[cfg(test)]
mod tests {
    use super::max_min;

    #[test]
    fn shares_fill_by_weight_up_to_demand() {
        assert_eq!(max_min(64_000, &[100_000, 8_000], &[1.0, 1.0]), vec![56_000, 8_000]);
        assert_eq!(max_min(64_000, &[100_000, 100_000], &[3.0, 1.0]), vec![48_000, 16_000]);
        assert_eq!(max_min(64_000, &[10_000, 10_000], &[1.0, 1.0]), vec![10_000, 10_000]);
        assert_eq!(max_min(60_000, &[100_000, 100_000, 5_000], &[1.0, 1.0, 1.0]), vec![27_500, 27_500, 5_000]);
        assert_eq!(max_min(64_000, &[0, 100_000], &[1.0, 1.0]), vec![0, 64_000]);
    }
}
