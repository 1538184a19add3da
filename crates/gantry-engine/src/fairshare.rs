//! Queue order: the starvation guard, then priority, then hierarchical fair share, then age.
//!
//! Fair share is weighted dominant-resource share: for each queue, usage of GPU (milli-GPU
//! weighted by each model's billing weight, so an H100-hour counts w A100-hours), CPU and
//! memory is integrated over time and decayed with a half-life; a queue's share is its largest
//! resource share (decayed usage plus its running allocation projected over one decay time
//! constant, against the fleet's capacity over the same time) divided by its weight. Running
//! allocation counts at once, so one pass that starts a job raises its queue's share before the
//! next pick. In the tree, siblings are compared: the path from the root to each candidate's
//! queue is walked and the first differing siblings decide (lower share first).
//!
//! All arithmetic is integer: decay is applied in ticks of 1/32 half-life with a Q32 factor
//! and exponentiation by squaring, so the same events give the same order on every platform.

use gantry_types::QueueTree;

/// Resource dimensions of dominant-resource share.
pub const RESOURCES: usize = 3;
/// Ticks per half-life (decay granularity).
const TICKS_PER_HALF_LIFE: u64 = 32;
/// 2^(−1/32) in Q32.
const DECAY_PER_TICK_Q32: u128 = 4_202_935_003;
const ONE_Q32: u128 = 1 << 32;
/// Shares are compared in parts per 10^12.
const SHARE_SCALE: u128 = 1_000_000_000_000;

/// An amount of each resource: billing-weighted milli-GPU, milli-CPU, MiB of memory.
pub type Resources = [u64; RESOURCES];

#[derive(Clone, Debug, Default)]
struct Usage {
    /// Decayed integral of allocation, resource × seconds, as of tick `tick`.
    decayed: [u128; RESOURCES],
    running: Resources,
    tick: u64,
    /// The share last computed: a pick compares the same few queues' shares again for every
    /// candidate and every visit of a cycle, and each is four 128-bit divisions. A function of
    /// the usage alone, so forgotten whenever it changes (`advance`, `start`, `stop`,
    /// `remember`).
    memo: Option<u128>,
}

/// One pending job as the order sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub queue: usize,
    pub priority: i32,
    pub submitted_s: u64,
}

/// Fair-share state of a queue tree over a fleet.
#[derive(Clone, Debug)]
pub struct FairShare {
    tree: QueueTree,
    /// Per queue: the path of queue indices from the root to it.
    paths: Vec<Vec<usize>>,
    capacity: Resources,
    tick_s: u64,
    usage: Vec<Usage>,
}

fn pow_q32(mut base: u128, mut exp: u64) -> u128 {
    let mut acc = ONE_Q32;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = (acc * base) >> 32;
        }
        base = (base * base) >> 32;
        exp >>= 1;
    }
    acc
}

impl FairShare {
    /// `capacity`: the fleet's totals in the same units (zeros are treated as 1).
    pub fn new(tree: QueueTree, capacity: Resources) -> FairShare {
        let paths = (0..tree.queues.len())
            .map(|q| {
                let mut path = vec![q];
                while let Some(p) = tree.queues[*path.last().expect("non-empty")].parent {
                    path.push(p);
                }
                path.reverse();
                path
            })
            .collect();
        let tick_s = (tree.half_life_s / TICKS_PER_HALF_LIFE).max(1);
        let usage = vec![Usage::default(); tree.queues.len()];
        FairShare { tree, paths, capacity: capacity.map(|c| c.max(1)), tick_s, usage }
    }

    pub fn tree(&self) -> &QueueTree {
        &self.tree
    }

    /// What it remembers of each queue's past use, by queue: the decayed usage and the tick it
    /// was last brought to. (What runs now is not memory: a controller re-adopting its running
    /// jobs charges them again.)
    pub fn memory(&self) -> Vec<([u128; RESOURCES], u64)> {
        self.usage.iter().map(|u| (u.decayed, u.tick)).collect()
    }

    /// Take back [`FairShare::memory`] of the same tree; false (and nothing changed) for
    /// another number of queues.
    pub fn remember(&mut self, memory: &[([u128; RESOURCES], u64)]) -> bool {
        if memory.len() != self.usage.len() {
            return false;
        }
        for (u, (decayed, tick)) in self.usage.iter_mut().zip(memory) {
            u.decayed = *decayed;
            u.tick = *tick;
            u.memo = None;
        }
        true
    }

    /// Bring a queue's decayed usage to `now` (whole ticks; the running allocation is charged
    /// for each tick it spans).
    fn advance(&mut self, queue: usize, now: u64) {
        let tick_s = self.tick_s as u128;
        let u = &mut self.usage[queue];
        let target = now / self.tick_s;
        if target <= u.tick {
            return;
        }
        u.memo = None;
        let k = target - u.tick;
        let fk = pow_q32(DECAY_PER_TICK_Q32, k);
        // Σ_{i<k} f^i = (1 − f^k) / (1 − f), in Q32.
        let series = ((ONE_Q32 - fk) << 32) / (ONE_Q32 - DECAY_PER_TICK_Q32);
        for r in 0..RESOURCES {
            let added = (u.running[r] as u128 * tick_s * series) >> 32;
            u.decayed[r] = ((u.decayed[r] * fk) >> 32) + added;
        }
        u.tick = target;
    }

    /// A job of `queue` started holding `amount` at `now`; charged to the queue and its
    /// ancestors.
    pub fn start(&mut self, queue: usize, amount: Resources, now: u64) {
        for i in 0..self.paths[queue].len() {
            let q = self.paths[queue][i];
            self.advance(q, now);
            self.usage[q].memo = None;
            for (running, add) in self.usage[q].running.iter_mut().zip(amount) {
                *running += add;
            }
        }
    }

    /// A job of `queue` that held `amount` ended at `now`.
    pub fn stop(&mut self, queue: usize, amount: Resources, now: u64) {
        for i in 0..self.paths[queue].len() {
            let q = self.paths[queue][i];
            self.advance(q, now);
            self.usage[q].memo = None;
            for (running, sub) in self.usage[q].running.iter_mut().zip(amount) {
                *running = running.saturating_sub(sub);
            }
        }
    }

    /// A queue's weighted dominant share at `now`, in parts per 10^12 of the fleet (before the
    /// weight: a queue using the whole fleet forever has share 10^12 / weight).
    pub fn share(&mut self, queue: usize, now: u64) -> u128 {
        self.advance(queue, now);
        if let Some(share) = self.usage[queue].memo {
            return share;
        }
        let u = &self.usage[queue];
        // One decay time constant, τ = half-life / ln 2, in ticks × tick length: the steady
        // state of a constant allocation A is A·τ.
        let tau_s = (self.tree.half_life_s as u128 * 1_000_000) / 693_147;
        let dominant = (0..RESOURCES)
            .map(|r| {
                let projected = u.decayed[r] + u.running[r] as u128 * tau_s;
                projected * SHARE_SCALE / (self.capacity[r] as u128 * tau_s.max(1))
            })
            .max()
            .unwrap_or(0);
        let share = dominant / self.tree.queues[queue].weight.max(1) as u128;
        self.usage[queue].memo = Some(share);
        share
    }

    /// Has this candidate waited past the starvation bound at `now`?
    pub fn starved(&self, c: &Candidate, now: u64) -> bool {
        now.saturating_sub(c.submitted_s) >= self.tree.starvation_s
    }

    /// Index of the candidate to try first: starved ones (oldest first), then highest
    /// priority, then the lowest fair share down the tree, then the oldest, then the first
    /// given. Deterministic in (state, candidates, now).
    pub fn pick(&mut self, candidates: &[Candidate], now: u64) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, c) in candidates.iter().enumerate() {
            let better = match best {
                None => true,
                Some(b) => self.before(c, &candidates[b], now),
            };
            if better {
                best = Some(i);
            }
        }
        best
    }

    /// Does `a` go strictly before `b`?
    fn before(&mut self, a: &Candidate, b: &Candidate, now: u64) -> bool {
        let (sa, sb) = (self.starved(a, now), self.starved(b, now));
        if sa != sb {
            return sa;
        }
        if sa {
            return a.submitted_s < b.submitted_s;
        }
        if a.priority != b.priority {
            return a.priority > b.priority;
        }
        if a.queue != b.queue {
            let (pa, pb) = (&self.paths[a.queue], &self.paths[b.queue]);
            // The first differing siblings on the two paths, or none if one is an ancestor.
            let siblings = pa.iter().zip(pb).find(|(x, y)| x != y).map(|(&x, &y)| (x, y));
            let (depth_a, depth_b) = (pa.len(), pb.len());
            match siblings {
                Some((x, y)) => {
                    let (share_a, share_b) = (self.share(x, now), self.share(y, now));
                    if share_a != share_b {
                        return share_a < share_b;
                    }
                }
                // One queue is an ancestor of the other: the ancestor's own jobs go first.
                None if depth_a != depth_b => return depth_a < depth_b,
                None => {}
            }
        }
        a.submitted_s < b.submitted_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_types::QueueSpec;

    fn tree(weights: &[(&str, Option<usize>, u32)], half_life_s: u64) -> QueueTree {
        QueueTree {
            queues: weights
                .iter()
                .map(|&(n, p, w)| QueueSpec {
                    name: n.into(),
                    parent: p,
                    weight: w,
                    quotas: Vec::new(),
                    priority: Default::default(),
                })
                .collect(),
            half_life_s,
            starvation_s: 1_000_000,
            reclaim_protect_s: 600,
            greedy_reserve_after_s: 1800,
            preemption: Default::default(),
            billing_milli: Vec::new(),
            user_default: Default::default(),
            users: Vec::new(),
            partitions: Vec::new(),
            qos: Vec::new(),
        }
    }

    #[test]
    fn decay_halves_usage_every_half_life() {
        let mut fs = FairShare::new(tree(&[("a", None, 1)], 3200), [1000, 1000, 1000]);
        fs.start(0, [1000, 0, 0], 0);
        fs.stop(0, [1000, 0, 0], 3200);
        let after_one = fs.usage[0].decayed[0];
        fs.advance(0, 6400);
        let after_two = fs.usage[0].decayed[0];
        let ratio = after_two as f64 / after_one as f64;
        assert!((ratio - 0.5).abs() < 1e-6, "{ratio}");
        // Held 1000 for one half-life: ∫ = 1000 · h · (1 − 1/2) / ln 2 ≈ 0.7213 · 1000 · 3200.
        let expected = 1000.0 * 3200.0 * 0.5 / std::f64::consts::LN_2;
        assert!((after_one as f64 / expected - 1.0).abs() < 0.02, "{after_one} vs {expected}");
    }

    #[test]
    fn the_queue_with_less_weighted_usage_goes_first() {
        let mut fs = FairShare::new(tree(&[("a", None, 1), ("b", None, 1), ("c", None, 3)], 3600), [8000, 1, 1]);
        let cand = |q, t| Candidate { queue: q, priority: 0, submitted_s: t };
        fs.start(0, [4000, 0, 0], 0);
        fs.start(2, [4000, 0, 0], 0);
        // b has used nothing; c used as much as a but weighs 3.
        assert_eq!(fs.pick(&[cand(0, 0), cand(1, 5), cand(2, 1)], 100), Some(1));
        assert_eq!(fs.pick(&[cand(0, 0), cand(2, 1)], 100), Some(1), "c's weight 3 puts it ahead of a");
        // Priority beats fair share; age breaks ties; starvation beats priority.
        let urgent = Candidate { queue: 0, priority: 5, submitted_s: 50 };
        assert_eq!(fs.pick(&[cand(1, 0), urgent], 100), Some(1));
        assert_eq!(fs.pick(&[cand(1, 9), cand(1, 3)], 100), Some(1));
        let old = cand(0, 0);
        assert!(!fs.starved(&old, 999_999) && fs.starved(&old, 1_000_000));
        assert_eq!(fs.pick(&[urgent, old], 1_000_000), Some(1));
    }

    #[test]
    fn siblings_are_compared_level_by_level() {
        // org-a (a1, a2) and org-b (b1): a1 used a lot, so org-a is ahead of nobody, even for
        // a2, which used nothing itself.
        let t = tree(
            &[("org-a", None, 1), ("org-b", None, 1), ("a1", Some(0), 1), ("a2", Some(0), 1), ("b1", Some(1), 1)],
            3600,
        );
        let mut fs = FairShare::new(t, [8000, 1, 1]);
        fs.start(2, [6000, 0, 0], 0);
        fs.start(4, [1000, 0, 0], 0);
        let cand = |q| Candidate { queue: q, priority: 0, submitted_s: 0 };
        assert_eq!(fs.pick(&[cand(3), cand(4)], 10), Some(1), "b1's org has the lower share");
        assert_eq!(fs.pick(&[cand(2), cand(3)], 10), Some(1), "within org-a, a2 first");
        fs.stop(2, [6000, 0, 0], 3600);
        assert!(fs.share(0, 3600) > fs.share(1, 3600), "a1's past usage still counts against org-a");
        assert!(fs.share(0, 41 * 3600) < fs.share(1, 41 * 3600), "until it decays away");
    }

    #[test]
    fn a_fair_share_that_takes_back_its_memory_orders_as_the_one_it_came_from() {
        let t = tree(&[("a", None, 1), ("b", None, 1)], 3_600);
        let mut old = FairShare::new(t.clone(), [1_000, 1_000, 1_000]);
        old.start(0, [500, 0, 0], 0);
        old.stop(0, [500, 0, 0], 7_000);
        old.start(1, [200, 0, 0], 5_000);
        // A controller re-opened at 9,000 re-adopts what runs (b's 200), then takes the memory.
        let mut fresh = FairShare::new(t.clone(), [1_000, 1_000, 1_000]);
        fresh.start(1, [200, 0, 0], 9_000);
        assert_ne!(fresh.share(0, 20_000), old.clone().share(0, 20_000), "without its memory a is new");
        let mut fresh = FairShare::new(t.clone(), [1_000, 1_000, 1_000]);
        fresh.start(1, [200, 0, 0], 9_000);
        assert!(fresh.remember(&old.memory()));
        for now in [9_000, 20_000, 100_000] {
            for q in 0..2 {
                assert_eq!(fresh.share(q, now), old.share(q, now), "queue {q} at {now}");
            }
        }
        let other = FairShare::new(tree(&[("a", None, 1)], 3_600), [1, 1, 1]);
        assert!(!fresh.remember(&other.memory()), "another tree's memory is refused");
    }
}
