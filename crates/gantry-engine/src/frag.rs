//! Fragmentation, as defined by FGD (Weng et al., USENIX ATC'23), in our words.
//!
//! For a node and a task shape, the *fragment* is the node's free GPU compute that a task of
//! that shape cannot use: all of it if such a task cannot fit on the node at all; otherwise, for
//! a fractional task, the free compute on GPUs whose free share is below the task's request; for
//! a k-GPU task, the free compute on partially used GPUs. A node's fragmentation is the expected
//! fragment over the workload's shape distribution. FGD places a task where fragmentation grows
//! least.
//!
//! Only GPUs that hand out compute in milli-GPU take part (whole, MPS, time-slice); MIG GPUs
//! hand out fixed instances and are left out of the measure. The distribution is learned from
//! arrivals (bounded to the most frequent shapes) or given by the caller.

use crate::limits::FGD_TASK_SHAPES_MAX;
use crate::state::{GpuState, Units};
use std::collections::BTreeMap;

/// A task shape as FGD sees it: compute per GPU and number of GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// Compute per GPU, 1..=1000 (1000 = whole GPUs).
    pub milli: u32,
    pub count: u32,
}

/// The workload's shape distribution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragModel {
    counts: BTreeMap<Shape, u64>,
    /// Most frequent shapes with their weights; rebuilt when counts change.
    top: Vec<(Shape, u64)>,
    dirty: bool,
    learn: bool,
}

impl FragModel {
    /// Learn the distribution from the tasks the engine is asked to place.
    pub fn learning() -> FragModel {
        FragModel { learn: true, ..FragModel::default() }
    }

    /// A fixed distribution (e.g. from the trace about to be replayed).
    pub fn given(shapes: &[(Shape, u64)]) -> FragModel {
        let mut model = FragModel::default();
        for &(shape, weight) in shapes {
            *model.counts.entry(shape).or_default() += weight;
        }
        model.dirty = true;
        model
    }

    pub fn observe(&mut self, shape: Shape) {
        if self.learn && shape.milli > 0 {
            *self.counts.entry(shape).or_default() += 1;
            self.dirty = true;
        }
    }

    fn refresh(&mut self) {
        if self.dirty {
            let mut all: Vec<(Shape, u64)> = self.counts.iter().map(|(s, c)| (*s, *c)).collect();
            all.sort_by_key(|&(s, c)| (std::cmp::Reverse(c), s));
            all.truncate(FGD_TASK_SHAPES_MAX);
            self.top = all;
            self.dirty = false;
        }
    }

    /// Shapes in use, most frequent first.
    pub fn shapes(&mut self) -> &[(Shape, u64)] {
        self.refresh();
        &self.top
    }
}

/// Free compute of a GPU as FGD counts it, or `None` for GPUs outside the measure (MIG).
pub fn gpu_free(g: &GpuState) -> Option<u32> {
    match g.units {
        Units::Mig { .. } => None,
        _ if g.exclusive => Some(0),
        Units::Whole => Some(1000),
        _ => Some(1000 - g.used_milli),
    }
}

/// Expected fragment (weighted sum, not divided by the total weight) of a node whose GPUs have
/// these free amounts.
pub fn node_fragmentation(free: &[u32], shapes: &[(Shape, u64)]) -> u64 {
    let total: u64 = free.iter().map(|&f| f as u64).sum();
    if total == 0 {
        return 0;
    }
    shapes.iter().map(|&(shape, weight)| weight * fragment(free, total, shape)).sum()
}

fn fragment(free: &[u32], total: u64, shape: Shape) -> u64 {
    if shape.milli >= 1000 {
        let whole = free.iter().filter(|&&f| f == 1000).count() as u32;
        if whole < shape.count {
            return total;
        }
        free.iter().filter(|&&f| f < 1000).map(|&f| f as u64).sum()
    } else {
        if !free.iter().any(|&f| f >= shape.milli) {
            return total;
        }
        free.iter().filter(|&&f| f < shape.milli).map(|&f| f as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_matches_the_definition() {
        let half = Shape { milli: 500, count: 1 };
        let two = Shape { milli: 1000, count: 2 };
        // Free: one idle GPU, one with 300 left, one with 600 left.
        let free = [1000, 300, 600];
        assert_eq!(fragment(&free, 1900, half), 300, "only the 300 cannot host a half");
        assert_eq!(fragment(&free, 1900, two), 1900, "two whole GPUs do not fit: all is fragment");
        assert_eq!(fragment(&[1000, 1000, 600], 2600, two), 600, "fits; partial GPUs are fragment");
        assert_eq!(node_fragmentation(&free, &[(half, 3), (two, 1)]), 3 * 300 + 1900);
    }
}
