//! Quota admission: may a queue take what a placement would give it?
//!
//! A placement's demand is counted per flavor — GPUs of a catalog model (whole GPUs and MIG
//! instances, in milli-GPU) or the milli-GPU pool (MPS and time-slice shares) — and checked
//! against the queue's quota and every ancestor's: usage after the job must stay within the
//! `limit`, and what exceeds the `guaranteed` amount (borrowed from the cohort) within
//! `borrow`. Flavors a queue declares no quota for are not limited at that queue. Usage of a
//! queue includes its descendants'.
//!
//! Reclaim — an owner asking for its guarantee stops borrowers — is the preemption planner's
//! job (`preempt`): [`QuotaBook::within_guarantee`] gives the owner its right,
//! [`QuotaBook::borrowing`] marks the victims. A queue with `lend = false` keeps its idle
//! guarantee: given the fleet's capacity (`with_capacity`), no other queue may take a flavor
//! past capacity minus the idle guarantees held back.

use crate::{AllocId, Engine};
use gantry_types::{Flavor, QueueTree};
use std::collections::BTreeMap;

/// Why a queue may not take a placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// The queue whose quota would be broken (the job's or an ancestor).
    pub queue: String,
    pub flavor: Flavor,
    /// In milli-GPU: in use, asked, and the bound.
    pub used: u64,
    pub asked: u64,
    pub bound: u64,
    /// `limit` or `borrow`.
    pub rule: &'static str,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flavor = match &self.flavor {
            Flavor::Model(m) => m.clone(),
            Flavor::MilliPool => "shared milli-GPU".into(),
        };
        let gpus = |m: u64| m as f64 / 1000.0;
        write!(
            f,
            "queue {} would exceed its {} for {flavor}: {} in use + {} asked > {}",
            self.queue,
            self.rule,
            gpus(self.used),
            gpus(self.asked),
            gpus(self.bound)
        )
    }
}

/// Per-queue usage by flavor, against the tree's quotas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaBook {
    tree: QueueTree,
    usage: Vec<BTreeMap<Flavor, u64>>,
    /// The fleet's milli-GPU per flavor, where known (`with_capacity`): what `lend = false`
    /// is checked against.
    capacity: BTreeMap<Flavor, u64>,
    /// Per flavor, the queues with a guarantee in it, in tree order (fixed with the tree).
    holders: BTreeMap<Flavor, Vec<usize>>,
}

impl QuotaBook {
    pub fn new(tree: QueueTree) -> QuotaBook {
        let usage = vec![BTreeMap::new(); tree.queues.len()];
        let mut holders: BTreeMap<Flavor, Vec<usize>> = BTreeMap::new();
        for (i, q) in tree.queues.iter().enumerate() {
            for quota in q.quotas.iter().filter(|quota| quota.guaranteed_milli > 0) {
                holders.entry(quota.flavor.clone()).or_default().push(i);
            }
        }
        QuotaBook { tree, usage, capacity: BTreeMap::new(), holders }
    }

    /// The queues with a guarantee in `flavor`.
    pub(crate) fn holders(&self, flavor: &Flavor) -> &[usize] {
        self.holders.get(flavor).map_or(&[], Vec::as_slice)
    }

    /// Know the fleet's capacity per flavor (`Engine::flavor_capacity`), so that idle
    /// guaranteed capacity a queue does not lend (`lend = false`) is kept from the others.
    pub fn with_capacity(mut self, capacity: Vec<(Flavor, u64)>) -> QuotaBook {
        self.capacity = capacity.into_iter().collect();
        self
    }

    /// Is `a` an ancestor of `b`, or `b` itself?
    pub(crate) fn encloses(&self, a: usize, b: usize) -> bool {
        self.parents(b).any(|q| q == a)
    }

    /// Are `a` and `b` on one line of the tree (one encloses the other)? Queues on other lines
    /// lend to each other; a queue never borrows from its own line.
    pub(crate) fn same_line(&self, a: usize, b: usize) -> bool {
        self.encloses(a, b) || self.encloses(b, a)
    }

    /// `queue`, then its parent, up to its root (without building a list).
    pub(crate) fn parents(&self, queue: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(queue), |&q| self.tree.queues[q].parent)
    }

    /// Check that `demand` by `queue` leaves every non-lending queue's idle guarantee free:
    /// in use by all roots + asked + what non-lending queues outside `queue`'s line hold back
    /// must stay within the fleet's capacity of that flavor.
    fn check_lending(&self, queue: usize, demand: &[(Flavor, u64)]) -> Result<(), QuotaExceeded> {
        for (flavor, asked) in demand {
            let Some(&capacity) = self.capacity.get(flavor) else { continue };
            let mut held_back = 0u64;
            let mut holder = None;
            for (q, spec) in self.tree.queues.iter().enumerate() {
                if self.same_line(q, queue) {
                    continue;
                }
                if let Some(quota) = spec.quotas.iter().find(|x| &x.flavor == flavor && !x.lend) {
                    let idle = quota.guaranteed_milli.saturating_sub(self.used(q, flavor));
                    if idle > 0 {
                        held_back += idle;
                        holder.get_or_insert(q);
                    }
                }
            }
            let in_use = capacity - self.free(flavor).expect("capacity known");
            if let Some(h) = holder
                && in_use + asked + held_back > capacity
            {
                return Err(QuotaExceeded {
                    queue: self.tree.queues[h].name.clone(),
                    flavor: flavor.clone(),
                    used: in_use,
                    asked: *asked,
                    bound: capacity.saturating_sub(held_back),
                    rule: "unlent guarantee",
                });
            }
        }
        Ok(())
    }

    /// The fleet's milli-GPU of `flavor`, where known.
    pub fn capacity(&self, flavor: &Flavor) -> Option<u64> {
        self.capacity.get(flavor).copied()
    }

    /// Milli-GPU of `flavor` no queue holds, where the fleet's capacity is known.
    pub fn free(&self, flavor: &Flavor) -> Option<u64> {
        let capacity = *self.capacity.get(flavor)?;
        let in_use: u64 = (0..self.tree.queues.len())
            .filter(|&q| self.tree.queues[q].parent.is_none())
            .map(|q| self.used(q, flavor))
            .sum();
        Some(capacity.saturating_sub(in_use))
    }

    pub fn tree(&self) -> &QueueTree {
        &self.tree
    }

    /// Does any queue declare a quota? (If not, admission never refuses.)
    pub fn has_quotas(&self) -> bool {
        self.tree.queues.iter().any(|q| !q.quotas.is_empty())
    }

    pub(crate) fn ancestry(&self, queue: usize) -> Vec<usize> {
        let mut path = vec![queue];
        while let Some(p) = self.tree.queues[*path.last().expect("non-empty")].parent {
            path.push(p);
        }
        path
    }

    /// Check `demand` for `queue` and its ancestors, and against guarantees others keep.
    pub fn check(&self, queue: usize, demand: &[(Flavor, u64)]) -> Result<(), QuotaExceeded> {
        self.check_lending(queue, demand)?;
        for q in self.ancestry(queue) {
            let spec = &self.tree.queues[q];
            for (flavor, asked) in demand {
                let Some(quota) = spec.quotas.iter().find(|x| &x.flavor == flavor) else { continue };
                let used = self.usage[q].get(flavor).copied().unwrap_or(0);
                let after = used + asked;
                let exceeded = |rule, bound| QuotaExceeded {
                    queue: spec.name.clone(),
                    flavor: flavor.clone(),
                    used,
                    asked: *asked,
                    bound,
                    rule,
                };
                if after > quota.limit_milli {
                    return Err(exceeded("limit", quota.limit_milli));
                }
                if after.saturating_sub(quota.guaranteed_milli) > quota.borrow_milli {
                    return Err(exceeded("borrow", quota.guaranteed_milli.saturating_add(quota.borrow_milli)));
                }
            }
        }
        Ok(())
    }

    /// Record (or, `sign` false, return) `demand` for `queue` and its ancestors.
    fn book(&mut self, queue: usize, demand: &[(Flavor, u64)], charge: bool) {
        for q in self.ancestry(queue) {
            for (flavor, amount) in demand {
                let used = self.usage[q].entry(flavor.clone()).or_default();
                *used = if charge { *used + amount } else { used.saturating_sub(*amount) };
            }
        }
    }

    pub fn charge(&mut self, queue: usize, demand: &[(Flavor, u64)]) {
        self.book(queue, demand, true);
    }

    pub fn refund(&mut self, queue: usize, demand: &[(Flavor, u64)]) {
        self.book(queue, demand, false);
    }

    /// Guaranteed to `queue` for `flavor` (0 where it declares no quota for it).
    pub fn guaranteed(&self, queue: usize, flavor: &Flavor) -> u64 {
        self.tree.queues[queue].quotas.iter().find(|q| &q.flavor == flavor).map_or(0, |q| q.guaranteed_milli)
    }

    /// Would `milli` more stay within `queue`'s guarantee for some flavor it has one for?
    /// (Before placement the flavor is not known; reclaim then plans on the real fleet.)
    pub fn within_guarantee(&self, queue: usize, milli: u64) -> bool {
        self.tree.queues[queue]
            .quotas
            .iter()
            .any(|q| q.guaranteed_milli > 0 && self.used(queue, &q.flavor) + milli <= q.guaranteed_milli)
    }

    /// Does `queue` run above its guarantee in a flavor of `demand` (is that capacity
    /// borrowed)?
    pub fn borrowing(&self, queue: usize, demand: &[(Flavor, u64)]) -> bool {
        demand.iter().any(|(flavor, _)| self.over_guarantee(queue, flavor, 0))
    }

    /// Would `queue` run above its guarantee for `flavor` with `extra` milli-GPU more (0: does
    /// it now)? A flavor it has no guarantee for is borrowed from the first milli-GPU.
    pub fn over_guarantee(&self, queue: usize, flavor: &Flavor, extra: u64) -> bool {
        self.used(queue, flavor) + extra > self.guaranteed(queue, flavor)
    }

    /// In use by `queue` (descendants included), milli-GPU of `flavor`.
    pub fn used(&self, queue: usize, flavor: &Flavor) -> u64 {
        self.usage[queue].get(flavor).copied().unwrap_or(0)
    }
}

/// Something in a queue tree the fleet cannot honour. Warnings, not errors: a queue file may be
/// written for a fleet that is still growing, or shared by several fleets; but a guarantee
/// that cannot all be given at once is a promise reclaim cannot keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaWarning {
    /// The root queues' guarantees for `flavor` add up to more than the fleet has.
    OverCommitted { flavor: Flavor, guaranteed_milli: u64, capacity_milli: u64, queues: Vec<String> },
    /// `queue` has a quota for a GPU model the fleet has none of.
    AbsentModel { queue: String, model: String },
}

impl std::fmt::Display for QuotaWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gpus = |m: u64| m as f64 / 1000.0;
        match self {
            QuotaWarning::OverCommitted { flavor, guaranteed_milli, capacity_milli, queues } => {
                let flavor = match flavor {
                    Flavor::Model(m) => m.clone(),
                    Flavor::MilliPool => "shared milli-GPU".into(),
                };
                write!(
                    f,
                    "guarantees for {flavor} add up to {} GPUs ({}) but the fleet has {}: not every queue can have its \
                     guarantee at once, and reclaim cannot keep what is not there",
                    gpus(*guaranteed_milli),
                    queues.join(", "),
                    gpus(*capacity_milli)
                )
            }
            QuotaWarning::AbsentModel { queue, model } => {
                write!(f, "queue {queue} has a quota for {model}, which this fleet has none of")
            }
        }
    }
}

/// What in `tree` the fleet (its milli-GPU per flavor, `Engine::flavor_capacity` or
/// [`fleet_capacity`]) cannot honour: root guarantees beyond capacity, quotas on absent models.
pub fn quota_warnings(tree: &QueueTree, capacity: &[(Flavor, u64)]) -> Vec<QuotaWarning> {
    let capacity: BTreeMap<&Flavor, u64> = capacity.iter().map(|(f, c)| (f, *c)).collect();
    let mut out = Vec::new();
    let mut roots: BTreeMap<&Flavor, (u64, Vec<String>)> = BTreeMap::new();
    for q in &tree.queues {
        for quota in &q.quotas {
            if let Flavor::Model(model) = &quota.flavor
                && !capacity.contains_key(&quota.flavor)
            {
                out.push(QuotaWarning::AbsentModel { queue: q.name.clone(), model: model.clone() });
            }
            if q.parent.is_none() && quota.guaranteed_milli > 0 {
                let entry = roots.entry(&quota.flavor).or_default();
                entry.0 += quota.guaranteed_milli;
                entry.1.push(q.name.clone());
            }
        }
    }
    for (flavor, (guaranteed_milli, queues)) in roots {
        let capacity_milli = capacity.get(flavor).copied().unwrap_or(0);
        if guaranteed_milli > capacity_milli && capacity_milli > 0 {
            out.push(QuotaWarning::OverCommitted { flavor: flavor.clone(), guaranteed_milli, capacity_milli, queues });
        }
    }
    out
}

/// A fleet's milli-GPU per flavor, from its description (as [`Engine::flavor_capacity`] counts
/// it once the fleet is built).
pub fn fleet_capacity(fleet: &gantry_types::Fleet) -> Vec<(Flavor, u64)> {
    let mut capacity: BTreeMap<Flavor, u64> = BTreeMap::new();
    for gpu in fleet.nodes.iter().flat_map(|n| &n.gpus) {
        *capacity.entry(Flavor::Model(gpu.model.clone())).or_default() += 1000;
        *capacity.entry(Flavor::MilliPool).or_default() += 1000;
    }
    capacity.into_iter().collect()
}

impl Engine {
    /// The fleet's milli-GPU per flavor: each catalog model's GPUs, and every GPU for the
    /// milli-GPU pool.
    pub fn flavor_capacity(&self) -> Vec<(Flavor, u64)> {
        let mut capacity: BTreeMap<Flavor, u64> = BTreeMap::new();
        for gpu in &self.state.gpus {
            *capacity.entry(Flavor::Model(self.catalog.model(gpu.model).id.clone())).or_default() += 1000;
            *capacity.entry(Flavor::MilliPool).or_default() += 1000;
        }
        capacity.into_iter().collect()
    }

    /// What an allocation counts against quotas, by flavor (milli-GPU).
    pub fn quota_demand(&self, id: AllocId) -> Option<Vec<(Flavor, u64)>> {
        let allocation = self.allocations.get(&id)?;
        let mut demand: BTreeMap<Flavor, u64> = BTreeMap::new();
        for task in &allocation.tasks {
            for grant in &task.grants {
                let flavor = match grant {
                    crate::ledger::Grant::Mps { .. } | crate::ledger::Grant::TimeSlice { .. } => Flavor::MilliPool,
                    _ => Flavor::Model(self.catalog.model(self.state.gpus[grant.gpu() as usize].model).id.clone()),
                };
                *demand.entry(flavor).or_default() += crate::ledger::grant_milli(&self.state, grant) as u64;
            }
        }
        Some(demand.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_types::{QueueSpec, Quota};

    fn tree_of(queues: Vec<QueueSpec>) -> QueueTree {
        QueueTree {
            queues,
            half_life_s: 3600,
            starvation_s: 86_400,
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

    fn quota(flavor: Flavor, guaranteed: u64, limit: u64, borrow: u64) -> Quota {
        Quota { flavor, guaranteed_milli: guaranteed, limit_milli: limit, lend: true, borrow_milli: borrow }
    }

    #[test]
    fn limits_and_borrowing_hold_for_the_queue_and_its_ancestors() {
        let a100 = Flavor::Model("A100-SXM4-80GB".into());
        let tree = tree_of(vec![
            QueueSpec {
                name: "org".into(),
                parent: None,
                weight: 1,
                quotas: vec![quota(a100.clone(), 8000, 10_000, 2000)],
                priority: Default::default(),
            },
            QueueSpec {
                name: "team".into(),
                parent: Some(0),
                weight: 1,
                quotas: vec![quota(a100.clone(), 4000, 16_000, 1000)],
                priority: Default::default(),
            },
            QueueSpec {
                name: "free".into(),
                parent: Some(0),
                weight: 1,
                quotas: Vec::new(),
                priority: Default::default(),
            },
        ]);
        let mut book = QuotaBook::new(tree);
        let gpus = |n: u64| vec![(a100.clone(), n * 1000)];
        assert!(book.check(1, &gpus(5)).is_ok(), "4 guaranteed + 1 borrowed");
        let err = book.check(1, &gpus(6)).expect_err("borrows 2 > 1");
        assert_eq!((err.queue.as_str(), err.rule), ("team", "borrow"));
        assert_eq!(err.to_string(), "queue team would exceed its borrow for A100-SXM4-80GB: 0 in use + 6 asked > 5");
        book.charge(1, &gpus(5));
        assert_eq!(book.used(0, &a100), 5000, "the parent counts its children");
        // "free" has no quota of its own, but the org's limit (10) binds it.
        assert!(book.check(2, &gpus(5)).is_ok());
        let err = book.check(2, &gpus(6)).expect_err("org limit");
        assert_eq!((err.queue.as_str(), err.rule), ("org", "limit"));
        // Other flavors are not limited where no quota names them.
        assert!(book.check(1, &[(Flavor::MilliPool, 50_000)]).is_ok());
        book.refund(1, &gpus(5));
        assert_eq!((book.used(0, &a100), book.used(1, &a100)), (0, 0));
    }

    #[test]
    fn guarantees_the_fleet_cannot_honour_are_warned_about() {
        let h100 = Flavor::Model("H100-SXM5-80GB".into());
        let a100 = Flavor::Model("A100-SXM4-80GB".into());
        let spec = |name: &str, parent, quotas| QueueSpec {
            name: name.into(),
            parent,
            weight: 1,
            quotas,
            priority: Default::default(),
        };
        let tree = tree_of(vec![
            spec("a", None, vec![quota(h100.clone(), 12_000, 16_000, 4000)]),
            spec("b", None, vec![quota(h100.clone(), 8000, 16_000, 8000)]),
            spec("b1", Some(1), vec![quota(h100.clone(), 8000, 8000, 0)]),
            spec("c", None, vec![quota(a100.clone(), 1000, 1000, 0)]),
        ]);
        let capacity = vec![(h100.clone(), 16_000), (Flavor::MilliPool, 16_000)];
        let warnings = quota_warnings(&tree, &capacity);
        assert_eq!(
            warnings,
            [
                QuotaWarning::AbsentModel { queue: "c".into(), model: "A100-SXM4-80GB".into() },
                QuotaWarning::OverCommitted {
                    flavor: h100.clone(),
                    guaranteed_milli: 20_000,
                    capacity_milli: 16_000,
                    queues: vec!["a".into(), "b".into()],
                },
            ],
            "roots only: b1 is inside b's guarantee"
        );
        assert!(warnings[1].to_string().starts_with("guarantees for H100-SXM5-80GB add up to 20 GPUs (a, b)"));
        let fits = vec![(h100, 20_000), (a100, 8000)];
        assert!(quota_warnings(&tree, &fits).is_empty());
    }

    #[test]
    fn a_queue_that_does_not_lend_keeps_its_idle_guarantee() {
        let a100 = Flavor::Model("A100-SXM4-80GB".into());
        let keeper = Quota { lend: false, ..quota(a100.clone(), 4000, 8000, 4000) };
        let tree = tree_of(vec![
            QueueSpec {
                name: "keeper".into(),
                parent: None,
                weight: 1,
                quotas: vec![keeper],
                priority: Default::default(),
            },
            QueueSpec {
                name: "other".into(),
                parent: None,
                weight: 1,
                quotas: Vec::new(),
                priority: Default::default(),
            },
        ]);
        let mut book = QuotaBook::new(tree).with_capacity(vec![(a100.clone(), 8000)]);
        let gpus = |n: u64| vec![(a100.clone(), n * 1000)];
        assert!(book.check(1, &gpus(4)).is_ok(), "the 4 not guaranteed to keeper");
        let err = book.check(1, &gpus(5)).expect_err("would take keeper's idle guarantee");
        assert_eq!((err.queue.as_str(), err.rule), ("keeper", "unlent guarantee"));
        book.charge(0, &gpus(2));
        assert!(book.check(1, &gpus(5)).is_err(), "2 of keeper's 4 still idle: 2 + 2 + 5 > 8");
        assert!(book.check(1, &gpus(4)).is_ok());
        assert!(book.check(0, &gpus(6)).is_ok(), "keeper itself may use everything");
        // Without knowing the fleet, lending is not checked.
        let blind = QuotaBook::new(book.tree.clone());
        assert!(blind.check(1, &gpus(8)).is_ok());
    }
}
