//! Fragmentation, as defined by FGD (Weng et al., USENIX ATC'23) and its authors' simulator.
//!
//! The workload is a distribution over task *types*: CPU, compute per GPU, GPU count and
//! which GPU classes the type may use. For a node and a type, the *fragment* is the node's
//! free GPU compute that a task of that type cannot use:
//! - all of it if the type needs no GPU (a CPU-only task never uses free GPU compute);
//! - all of it if the node has no GPU class the type accepts;
//! - all of it if the type does not fit the node now (too few GPUs with enough free compute,
//!   or not enough free CPU);
//! - otherwise the free compute on GPUs whose free share is below the type's per-GPU request.
//!
//! A node's fragmentation is the expectation of that over the distribution; FGD places a task
//! where it grows least. Only GPUs that hand out compute in milli-GPU take part (whole, MPS,
//! time-slice); MIG GPUs hand out fixed instances and are left out of the measure.
//!
//! FGD looks one task ahead, so it does not see a node's CPU running out before its GPUs do:
//! a node with 96 cores and 8 free GPUs fits every type now, yet the workload's GPU tasks ask
//! 14 cores per GPU on average and will leave GPUs behind. [`CpuPerGpu`] and [`cpu_stranded`]
//! measure that. Nor does it see past the next task on a GPU: 530 milli-GPU left free are no
//! fragment for a 470 task, yet after one the GPU keeps 60 nobody can use. [`Outlook`] keeps
//! each free amount's *eventual waste* over the distribution. gantry's `default` policy adds
//! both to FGD's measure.

use crate::limits::FGD_TASK_SHAPES_MAX;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// A task type as FGD sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// Compute per GPU, 0..=1000 (0 = CPU-only, 1000 = whole GPUs).
    pub milli: u32,
    pub count: u32,
    /// CPU the type needs, in milli-CPU.
    pub cpu: u32,
    /// Device classes (bit = class index) the type may use; `u64::MAX` = any.
    pub classes: u64,
}

/// The workload's type distribution, with integer weights (counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragModel {
    counts: BTreeMap<Shape, u64>,
    top: Vec<(Shape, u64)>,
    outlook: Outlook,
    dirty: bool,
    learn: bool,
}

impl FragModel {
    /// Learn the distribution from the tasks the engine is asked to place.
    pub fn learning() -> FragModel {
        FragModel { learn: true, ..FragModel::default() }
    }

    /// A fixed distribution (e.g. the typical tasks of the trace about to be replayed), used
    /// as given: no truncation.
    pub fn given(shapes: &[(Shape, u64)]) -> FragModel {
        let mut counts = BTreeMap::new();
        for &(shape, weight) in shapes {
            *counts.entry(shape).or_default() += weight;
        }
        let mut top: Vec<(Shape, u64)> = counts.iter().map(|(s, c)| (*s, *c)).collect();
        top.sort_by_key(|&(s, _)| s.milli);
        let outlook = Outlook::of(&top);
        FragModel { counts, top, outlook, dirty: false, learn: false }
    }

    pub fn observe(&mut self, shape: Shape) {
        if self.learn {
            *self.counts.entry(shape).or_default() += 1;
            self.dirty = true;
        }
    }

    /// Types in use, ordered by compute per GPU (what [`node_fragmentation`] wants; learned
    /// models keep the `FGD_TASK_SHAPES_MAX` most frequent).
    pub fn shapes(&mut self) -> &[(Shape, u64)] {
        self.refresh();
        &self.top
    }

    /// The types in use and what `default` derives from them (see [`Outlook`]), together, so a
    /// decision can borrow both.
    pub fn shapes_and_outlook(&mut self) -> (&[(Shape, u64)], &Outlook) {
        self.refresh();
        (&self.top, &self.outlook)
    }

    fn refresh(&mut self) {
        if self.dirty {
            let mut all: Vec<(Shape, u64)> = self.counts.iter().map(|(s, c)| (*s, *c)).collect();
            all.sort_by_key(|&(s, c)| (std::cmp::Reverse(c), s));
            all.truncate(FGD_TASK_SHAPES_MAX);
            all.sort_by_key(|&(s, _)| s.milli);
            self.outlook = Outlook::of(&all);
            self.top = all;
            self.dirty = false;
        }
    }
}

/// What `default` sees beyond FGD's next task, derived from the type distribution.
///
/// `waste[f]` is the expected milli-GPU a GPU with `f` free is left with when tasks drawn from
/// the distribution keep filling it while one fits: the weighted mean of `waste[f − m]` over
/// the per-GPU requests `m` that fit in `f` (`f` itself when none does). A learning model
/// derives a new outlook after every placement that adds a task type's count, so the values
/// are computed when a placement first asks for them, not all 1,001 up front: a fleet's GPUs
/// show a few free amounts, and each reaches back only to amounts a request away (on the
/// scale bench, deriving all of them was a fifth of the live cycle).
#[derive(Debug, Default)]
pub struct Outlook {
    pub cpu_per_gpu: CpuPerGpu,
    /// Per-GPU requests (milli, weight), ascending, merged by request; empty when no type uses
    /// a GPU.
    requests: Vec<(usize, u64)>,
    /// `weights[i]`: the total weight of the first `i` requests.
    weights: Vec<u64>,
    /// `waste[f] + 1` once computed, 0 until then (1,001 entries when `requests` has any).
    /// Atomic so that a shared outlook may fill itself in: every value is a function of
    /// `requests` alone, so which caller computes it first does not matter.
    waste: Vec<AtomicU32>,
}

impl Clone for Outlook {
    fn clone(&self) -> Outlook {
        Outlook {
            cpu_per_gpu: self.cpu_per_gpu,
            requests: self.requests.clone(),
            weights: self.weights.clone(),
            waste: self.waste.iter().map(|w| AtomicU32::new(w.load(Relaxed))).collect(),
        }
    }
}

/// Equal when derived from the same distribution (what has been computed so far does not
/// matter).
impl PartialEq for Outlook {
    fn eq(&self, other: &Outlook) -> bool {
        self.cpu_per_gpu == other.cpu_per_gpu && self.requests == other.requests
    }
}

impl Eq for Outlook {}

impl Outlook {
    pub fn of(shapes: &[(Shape, u64)]) -> Outlook {
        // Per-GPU request of each GPU type (whole-GPU types take 1000 on each of their GPUs),
        // merged by request.
        let mut merged: BTreeMap<u32, u64> = BTreeMap::new();
        for &(shape, weight) in shapes.iter().filter(|(s, _)| s.milli > 0) {
            *merged.entry(shape.milli.min(1000)).or_default() += weight;
        }
        let requests: Vec<(usize, u64)> = merged.into_iter().map(|(m, w)| (m as usize, w)).collect();
        let mut weights = vec![0u64];
        for &(_, w) in &requests {
            weights.push(weights[weights.len() - 1] + w);
        }
        let waste = if requests.is_empty() { Vec::new() } else { (0..=1000).map(|_| AtomicU32::new(0)).collect() };
        Outlook { cpu_per_gpu: CpuPerGpu::of(shapes), requests, weights, waste }
    }

    /// Expected eventual waste of a GPU with `free` milli-GPU free (0 when no type uses GPUs).
    pub fn eventual_waste(&self, free: u32) -> u32 {
        if self.requests.is_empty() {
            return 0;
        }
        let f = free.min(1000) as usize;
        self.known(f).unwrap_or_else(|| self.compute(f))
    }

    fn known(&self, f: usize) -> Option<u32> {
        self.waste[f].load(Relaxed).checked_sub(1)
    }

    /// `waste[f]`, after every smaller amount it reaches back to that is not known yet (depth
    /// first, without recursion: a request of 1 milli reaches back 1,000 times).
    fn compute(&self, f: usize) -> u32 {
        let mut pending = vec![f];
        while let Some(&g) = pending.last() {
            if self.known(g).is_some() {
                pending.pop();
                continue;
            }
            let fitting = self.requests.partition_point(|&(m, _)| m <= g);
            let reach = &self.requests[..fitting];
            if let Some(&(m, _)) = reach.iter().find(|&&(m, _)| self.known(g - m).is_none()) {
                pending.push(g - m);
                continue;
            }
            let sum: u64 = reach.iter().map(|&(m, w)| w * self.known(g - m).expect("computed first") as u64).sum();
            let value = sum.checked_div(self.weights[fitting]).map_or(g as u32, |q| q as u32);
            self.waste[g].store(value + 1, Relaxed);
            pending.pop();
        }
        self.known(f).expect("just computed")
    }
}

/// The CPU the workload's GPU tasks ask per milli-GPU of compute, over the type distribution
/// (each type weighted by its frequency); CPU-only types left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuPerGpu {
    cpu: u64,
    milli: u64,
}

impl CpuPerGpu {
    pub fn of(shapes: &[(Shape, u64)]) -> CpuPerGpu {
        shapes.iter().filter(|(s, _)| s.milli > 0).fold(CpuPerGpu::default(), |acc, &(s, w)| CpuPerGpu {
            cpu: acc.cpu + w * s.cpu as u64,
            milli: acc.milli + w * s.milli as u64 * s.count.max(1) as u64,
        })
    }

    /// GPU compute (milli) that `cpu_free` milli-CPU can serve at this ratio; unbounded when
    /// the GPU types ask no CPU.
    fn servable(self, cpu_free: u32) -> u64 {
        if self.cpu == 0 { u64::MAX } else { (cpu_free as u128 * self.milli as u128 / self.cpu as u128) as u64 }
    }
}

/// The node's free GPU compute (milli) that its free CPU cannot serve at the workload's CPU per
/// GPU: `max(0, free compute − free CPU / (CPU per milli-GPU))`.
pub fn cpu_stranded(node: NodeView<'_>, ratio: CpuPerGpu) -> u64 {
    let total: u64 = node.free.iter().map(|&f| f as u64).sum();
    total.saturating_sub(ratio.servable(node.cpu_free))
}

/// What fragmentation needs to know about a node: free compute per GPU (MIG GPUs left out),
/// free CPU and which device classes it has.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    pub free: &'a [u32],
    pub cpu_free: u32,
    pub classes: u64,
}

/// Expected fragment of a node, as a weighted sum (not divided by the total weight).
///
/// Free amounts are sorted once with prefix sums, so each type costs a short scan of at most
/// `GPUS_PER_NODE_MAX` sorted values instead of two passes over the GPUs.
pub fn node_fragmentation(node: NodeView<'_>, shapes: &[(Shape, u64)]) -> u64 {
    let mut sorted = [0u32; crate::limits::GPUS_PER_NODE_MAX];
    let len = node.free.len().min(sorted.len());
    sorted[..len].copy_from_slice(&node.free[..len]);
    let sorted = &mut sorted[..len];
    sorted.sort_unstable();
    let mut prefix = [0u64; crate::limits::GPUS_PER_NODE_MAX + 1];
    for (i, &f) in sorted.iter().enumerate() {
        prefix[i + 1] = prefix[i] + f as u64;
    }
    let total = prefix[len];
    if total == 0 {
        return 0;
    }
    // Shapes come ordered by compute per GPU (as `FragModel` keeps them), so the split of the
    // sorted GPUs is searched once per distinct request, not once per shape; any order still
    // gives the right sum.
    let (mut split_for, mut below) = (u32::MAX, 0usize);
    let mut sum = 0u64;
    for &(shape, weight) in shapes {
        if shape.milli == 0 || shape.classes & node.classes == 0 || node.cpu_free < shape.cpu {
            sum += weight * total;
            continue;
        }
        // GPUs below the request: the first `below` of the sorted list.
        if shape.milli != split_for {
            split_for = shape.milli;
            below = sorted.partition_point(|&f| f < shape.milli);
        }
        let fitting = (len - below) as u32;
        sum += if fitting < shape.count.max(1) { weight * total } else { weight * prefix[below] };
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(milli: u32, count: u32, cpu: u32) -> Shape {
        Shape { milli, count, cpu, classes: u64::MAX }
    }

    /// Fragment of one type (weight 1) through the real computation.
    fn fragment(node: NodeView<'_>, shape: Shape) -> u64 {
        node_fragmentation(node, &[(shape, 1)])
    }

    #[test]
    fn fragment_matches_the_definition() {
        let node = NodeView { free: &[1000, 300, 600], cpu_free: 8000, classes: 1 };
        assert_eq!(fragment(node, shape(500, 1, 1000)), 300, "only the 300 cannot host a half");
        assert_eq!(fragment(node, shape(1000, 2, 1000)), 1900, "two whole GPUs do not fit: all is fragment");
        assert_eq!(fragment(node, shape(500, 1, 9000)), 1900, "not enough CPU: all is fragment");
        assert_eq!(fragment(node, shape(0, 0, 1000)), 1900, "CPU-only tasks never use GPU");
        let other_class = Shape { classes: 2, ..shape(500, 1, 1000) };
        assert_eq!(fragment(node, other_class), 1900, "no accepted class: all is fragment");
        let two = NodeView { free: &[1000, 1000, 600], cpu_free: 8000, classes: 1 };
        assert_eq!(fragment(two, shape(1000, 2, 0)), 600, "fits; partial GPUs are fragment");
        assert_eq!(node_fragmentation(node, &[(shape(500, 1, 0), 3), (shape(1000, 2, 0), 1)]), 3 * 300 + 1900);
        let empty = NodeView { free: &[0, 0], cpu_free: 8000, classes: 1 };
        assert_eq!(fragment(empty, shape(500, 1, 0)), 0, "nothing free, nothing fragmented");
    }

    #[test]
    fn eventual_waste_follows_the_tasks_that_fit() {
        // Halves and whole GPUs, equally frequent.
        let outlook = Outlook::of(&[(shape(500, 1, 0), 1), (shape(1000, 2, 0), 1), (shape(0, 0, 0), 9)]);
        assert_eq!(outlook.eventual_waste(300), 300, "nothing fits: all of it stays");
        assert_eq!(outlook.eventual_waste(500), 0, "one half fills it");
        assert_eq!(outlook.eventual_waste(800), 300, "a half fits, 300 stay");
        assert_eq!(outlook.eventual_waste(1000), 0, "a whole task or two halves");
        assert_eq!(outlook.eventual_waste(0), 0);
        // 400s alone: 1000 → 600 → 200.
        assert_eq!(Outlook::of(&[(shape(400, 1, 0), 3)]).eventual_waste(1000), 200);
        assert_eq!(Outlook::of(&[(shape(0, 0, 0), 3)]).eventual_waste(700), 0, "no GPU types: no waste");
        let mut learned = FragModel::learning();
        learned.observe(shape(400, 1, 0));
        assert_eq!(learned.shapes_and_outlook().1.eventual_waste(1000), 200, "learned models refresh it");
    }

    /// The recurrence as first written, a division per free amount: the oracle for `of`.
    fn waste_by_division(requests: &[(usize, u64)]) -> Vec<u32> {
        let mut waste = vec![0u32; 1001];
        for f in 0..=1000usize {
            let (mut sum, mut weight) = (0u64, 0u64);
            for &(m, w) in requests.iter().take_while(|&&(m, _)| m <= f) {
                sum += w * waste[f - m] as u64;
                weight += w;
            }
            waste[f] = sum.checked_div(weight).map_or(f as u32, |w| w as u32);
        }
        waste
    }

    proptest::proptest! {
        /// Computed on demand, in any order, the outlook holds the recurrence's values.
        #[test]
        fn the_outlook_computed_on_demand_is_the_recurrence(
            types in proptest::collection::btree_map(1u32..=1000, 1u64..5_000_000, 1..12),
            asked in proptest::collection::vec(0u32..=1200, 0..20),
        ) {
            let shapes: Vec<(Shape, u64)> = types.iter().map(|(&m, &w)| (shape(m, 1, 0), w)).collect();
            let requests: Vec<(usize, u64)> = types.iter().map(|(&m, &w)| (m as usize, w)).collect();
            let expected = waste_by_division(&requests);
            let outlook = Outlook::of(&shapes);
            for &free in &asked {
                proptest::prop_assert_eq!(outlook.eventual_waste(free), expected[free.min(1000) as usize]);
            }
            let copy = outlook.clone();
            let all: Vec<u32> = (0..=1000).map(|f| copy.eventual_waste(f)).collect();
            proptest::prop_assert_eq!(all, expected);
            proptest::prop_assert_eq!(copy, outlook);
        }
    }

    #[test]
    fn cpu_stranded_is_the_compute_the_free_cpu_cannot_serve() {
        // Two types, equally frequent: a whole GPU with 16 cores, a half GPU with 4 cores: 20
        // cores per 1,500 milli-GPU. CPU-only types do not count.
        let shapes = [(shape(1000, 1, 16_000), 1), (shape(500, 1, 4_000), 1), (shape(0, 0, 64_000), 5)];
        let ratio = CpuPerGpu::of(&shapes);
        let node = |free: &'static [u32], cpu_free| NodeView { free, cpu_free, classes: 1 };
        assert_eq!(cpu_stranded(node(&[1000; 8], 96_000), ratio), 8000 - 7200, "96 cores serve 7.2 GPUs");
        assert_eq!(cpu_stranded(node(&[1000; 2], 96_000), ratio), 0, "CPU to spare");
        assert_eq!(cpu_stranded(node(&[1000, 500], 0), ratio), 1500, "no CPU: all of it");
        assert_eq!(cpu_stranded(node(&[0, 0], 0), ratio), 0, "nothing free");
        let no_cpu = CpuPerGpu::of(&[(shape(1000, 1, 0), 1)]);
        assert_eq!(cpu_stranded(node(&[1000; 8], 0), no_cpu), 0, "GPU types asking no CPU strand nothing");
        let (four, one) = (CpuPerGpu::of(&[(shape(1000, 4, 8_000), 1)]), CpuPerGpu::of(&[(shape(1000, 1, 2_000), 1)]));
        assert_eq!(four.servable(6_000), 3000, "per GPU of a multi-GPU type");
        assert_eq!(one.servable(6_000), 3000);
    }
}
