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

use crate::limits::FGD_TASK_SHAPES_MAX;
use std::collections::BTreeMap;

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
        FragModel { counts, top, dirty: false, learn: false }
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
        if self.dirty {
            let mut all: Vec<(Shape, u64)> = self.counts.iter().map(|(s, c)| (*s, *c)).collect();
            all.sort_by_key(|&(s, c)| (std::cmp::Reverse(c), s));
            all.truncate(FGD_TASK_SHAPES_MAX);
            all.sort_by_key(|&(s, _)| s.milli);
            self.top = all;
            self.dirty = false;
        }
        &self.top
    }
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
}
