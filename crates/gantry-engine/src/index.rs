//! Which nodes have room right now, as bitsets over node indices, kept in step by the ledger.
//!
//! The search walks only nodes whose bit is set, so on a packed 10,000-node fleet a one-GPU
//! request visits the few hundred nodes with a free GPU, not the thousands without. A set bit
//! means "may have room" exactly as the node's counters say; the filter still decides.

use crate::ids::NodeIdx;

/// Whole-GPU buckets kept: "at least k wholly free GPUs" for k = 1..=8. Larger requests use
/// the 8 bucket and let the filter check the rest (nodes with more than 8 GPUs are rare).
pub const WHOLE_BUCKETS: usize = 8;

/// MIG profile indices with their own room bitset; the catalog's largest table has 7.
pub const MIG_PROFILES_MAX: usize = 16;

/// A node's room, as the index records it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    pub whole_free: u32,
    pub mps: bool,
    pub time_slice: bool,
    pub mig_free_mask: u32,
}

/// Bitsets of nodes with room, by kind of room.
#[derive(Debug, PartialEq, Eq)]
pub struct FreeIndex {
    /// `whole_at_least[k - 1]`: nodes with at least k wholly free GPUs.
    pub whole_at_least: Vec<Vec<u64>>,
    /// Nodes where one more MPS client or time-slice task could fit on some GPU.
    pub share_room: Vec<u64>,
    /// Nodes where one more MPS client could fit on some GPU.
    pub mps_room: Vec<u64>,
    /// Nodes where one more time-slice task could fit on some GPU.
    pub time_slice_room: Vec<u64>,
    /// Nodes with a free MIG instance.
    pub mig_room: Vec<u64>,
    /// `mig_profile_room[p]`: nodes with a free MIG instance of profile index `p` (indices are
    /// per model; a node's bit is set if any of its GPUs has one).
    pub mig_profile_room: Vec<Vec<u64>>,
    /// Nodes with any GPU room at all (for memory-only requests).
    pub any_room: Vec<u64>,
    nodes: usize,
}

impl Clone for FreeIndex {
    fn clone(&self) -> Self {
        let mut copy = FreeIndex::new(0);
        copy.clone_from(self);
        copy
    }

    /// Field by field, so `self`'s vectors keep their allocations (see
    /// `ClusterState::clone_from`); a field not copied here does not compile.
    fn clone_from(&mut self, source: &Self) {
        let FreeIndex {
            whole_at_least,
            share_room,
            mps_room,
            time_slice_room,
            mig_room,
            mig_profile_room,
            any_room,
            nodes,
        } = source;
        self.whole_at_least.clone_from(whole_at_least);
        self.share_room.clone_from(share_room);
        self.mps_room.clone_from(mps_room);
        self.time_slice_room.clone_from(time_slice_room);
        self.mig_room.clone_from(mig_room);
        self.mig_profile_room.clone_from(mig_profile_room);
        self.any_room.clone_from(any_room);
        self.nodes = *nodes;
    }
}

impl FreeIndex {
    pub fn new(nodes: usize) -> FreeIndex {
        let words = nodes.div_ceil(64);
        FreeIndex {
            whole_at_least: vec![vec![0; words]; WHOLE_BUCKETS],
            share_room: vec![0; words],
            mps_room: vec![0; words],
            time_slice_room: vec![0; words],
            mig_room: vec![0; words],
            mig_profile_room: vec![vec![0; words]; MIG_PROFILES_MAX],
            any_room: vec![0; words],
            nodes,
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn approx_bytes(&self) -> usize {
        (self.whole_at_least.len() + self.mig_profile_room.len() + 5) * self.share_room.len() * 8
    }

    /// Record a node's room (called after every change on the node).
    pub fn update(&mut self, node: NodeIdx, room: Room) {
        for (k, bits) in self.whole_at_least.iter_mut().enumerate() {
            set(bits, node, room.whole_free > k as u32);
        }
        set(&mut self.share_room, node, room.mps || room.time_slice);
        set(&mut self.mps_room, node, room.mps);
        set(&mut self.time_slice_room, node, room.time_slice);
        set(&mut self.mig_room, node, room.mig_free_mask != 0);
        for (p, bits) in self.mig_profile_room.iter_mut().enumerate() {
            set(bits, node, room.mig_free_mask & (1 << p) != 0);
        }
        set(&mut self.any_room, node, room.whole_free > 0 || room.mps || room.time_slice || room.mig_free_mask != 0);
    }

    /// The bitset to walk for `count` whole GPUs.
    pub fn whole(&self, count: u32) -> &[u64] {
        &self.whole_at_least[(count.clamp(1, WHOLE_BUCKETS as u32) - 1) as usize]
    }
}

/// Is `node`'s bit set?
pub fn has(bits: &[u64], node: NodeIdx) -> bool {
    bits[node as usize / 64] & (1 << (node % 64)) != 0
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
            index.update(node, Room { whole_free: 1, ..Room::default() });
        }
        let walked: Vec<NodeIdx> = rotated(index.whole(1), 200, 64).collect();
        assert_eq!(walked, [64, 130, 199, 0, 5, 63]);
        index.update(130, Room::default());
        assert_eq!(rotated(index.whole(1), 200, 100).collect::<Vec<_>>(), [199, 0, 5, 63, 64]);
    }
}
