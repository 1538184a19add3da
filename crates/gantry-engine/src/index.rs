//! Which nodes have room right now, as bitsets over node indices, kept in step by the ledger.
//!
//! The search walks only nodes whose bit is set, so on a packed 10,000-node fleet a one-GPU
//! request visits the few hundred nodes with a free GPU, not the thousands without. A set bit
//! means "may have room" exactly as the node's counters say; the filter still decides.

use crate::state::NodeIdx;

/// Whole-GPU buckets kept: "at least k wholly free GPUs" for k = 1..=8. Larger requests use
/// the 8 bucket and let the filter check the rest (nodes with more than 8 GPUs are rare).
pub const WHOLE_BUCKETS: usize = 8;

/// Bitsets of nodes with room, by kind of room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeIndex {
    /// `whole_at_least[k - 1]`: nodes with at least k wholly free GPUs.
    pub whole_at_least: Vec<Vec<u64>>,
    /// Nodes where one more MPS client or time-slice task could fit on some GPU.
    pub share_room: Vec<u64>,
    /// Nodes with a free MIG instance.
    pub mig_room: Vec<u64>,
    /// Nodes with any GPU room at all (for memory-only requests).
    pub any_room: Vec<u64>,
    nodes: usize,
}

impl FreeIndex {
    pub fn new(nodes: usize) -> FreeIndex {
        let words = nodes.div_ceil(64);
        FreeIndex { whole_at_least: vec![vec![0; words]; WHOLE_BUCKETS], share_room: vec![0; words], mig_room: vec![0; words], any_room: vec![0; words], nodes }
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Record a node's room (called after every change on the node).
    pub fn update(&mut self, node: NodeIdx, whole_free: u32, share_room: bool, mig_room: bool) {
        for (k, bits) in self.whole_at_least.iter_mut().enumerate() {
            set(bits, node, whole_free > k as u32);
        }
        set(&mut self.share_room, node, share_room);
        set(&mut self.mig_room, node, mig_room);
        set(&mut self.any_room, node, whole_free > 0 || share_room || mig_room);
    }

    /// The bitset to walk for `count` whole GPUs.
    pub fn whole(&self, count: u32) -> &[u64] {
        &self.whole_at_least[(count.clamp(1, WHOLE_BUCKETS as u32) - 1) as usize]
    }
}

fn set(bits: &mut [u64], node: NodeIdx, on: bool) {
    let (word, bit) = (node as usize / 64, node % 64);
    if on {
        bits[word] |= 1 << bit;
    } else {
        bits[word] &= !(1 << bit);
    }
}

/// Set bits of `bits` below `limit`, starting at `start` and wrapping around once.
pub fn rotated(bits: &[u64], limit: usize, start: usize) -> impl Iterator<Item = NodeIdx> + '_ {
    ones(bits, start, limit).chain(ones(bits, 0, start.min(limit)))
}

/// Set bits in `from..to`, ascending.
fn ones(bits: &[u64], from: usize, to: usize) -> impl Iterator<Item = NodeIdx> + '_ {
    let mut word = from / 64;
    let mut current = if word < bits.len() { bits[word] & (!0u64 << (from % 64)) } else { 0 };
    std::iter::from_fn(move || {
        loop {
            if current != 0 {
                let bit = current.trailing_zeros() as usize;
                current &= current - 1;
                let node = word * 64 + bit;
                return (node < to).then_some(node as NodeIdx);
            }
            word += 1;
            if word >= bits.len() || word * 64 >= to {
                return None;
            }
            current = bits[word];
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_walk_visits_each_set_bit_once() {
        let mut index = FreeIndex::new(200);
        for node in [0, 5, 63, 64, 130, 199] {
            index.update(node, 1, false, false);
        }
        let walked: Vec<NodeIdx> = rotated(index.whole(1), 200, 64).collect();
        assert_eq!(walked, [64, 130, 199, 0, 5, 63]);
        index.update(130, 0, false, false);
        assert_eq!(rotated(index.whole(1), 200, 100).collect::<Vec<_>>(), [199, 0, 5, 63, 64]);
    }
}
