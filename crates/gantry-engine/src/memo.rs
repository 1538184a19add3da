//! Per-node verdict memo: what a node's filter and scoring concluded for one kind of task,
//! reused while the node is unchanged.
//!
//! A node's verdict for a single task — "cannot, because …" or "can; its best option and that
//! option's score" — depends only on the node's state, the task's requirements and fixed
//! context (the fleet's static maxima, a fixed FGD type distribution). In a replay, one
//! decision changes one node, and the same task kinds come back again and again, so nearly
//! every other node would be re-evaluated to the same verdict. The memo keys verdicts by
//! (node, task fingerprint) and checks the node's version (bumped by every ledger change),
//! so a stale verdict is never used. It is only consulted where the verdict cannot depend on
//! anything else: a single task searched fleet-wide on any GPU, no gang affinity, a policy that
//! does not draw GPUs at random, and a fixed (not learned) type distribution for FGD policies.
//! Decisions are identical with and without it (tested); only the work differs.

use crate::fit::TaskOption;
use crate::policy::Score;
use crate::state::NodeIdx;
use gantry_types::Reason;

/// Most slots in all (bounds memory: about 160 bytes each, ~20 MiB).
const SLOTS_TOTAL_MAX: usize = 1 << 17;
/// Ways (slots per node), at least and at most; a task kind maps to one way by fingerprint.
const WAYS: (usize, usize) = (4, 64);

/// A node's verdict for one task kind.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// The filter's reason.
    Unfit(Reason),
    /// The node's best option (first of the highest score) and its score.
    Best(Score, TaskOption),
    /// For policies that draw the GPU at random per decision: the node's highest node keys
    /// and every option reaching them, with its index among the node's options.
    Tied([i64; 5], Vec<(u32, TaskOption)>),
}

/// Direct-mapped verdict slots, laid out way-major: a search walks the nodes in order for one
/// task kind, so the slots it reads are consecutive (keys in two dense arrays, verdicts read
/// only on a hit).
#[derive(Clone, Debug)]
pub struct VerdictMemo {
    nodes: usize,
    ways: usize,
    /// Node version + 1 when filled (0 = empty).
    versions: Vec<u32>,
    fingerprints: Vec<u64>,
    verdicts: Vec<Option<Verdict>>,
}

impl VerdictMemo {
    pub fn new(nodes: usize) -> VerdictMemo {
        let ways = (SLOTS_TOTAL_MAX / nodes.max(1)).clamp(WAYS.0, WAYS.1);
        let ways = if ways.is_power_of_two() { ways } else { ways.next_power_of_two() / 2 };
        let slots = nodes * ways;
        VerdictMemo { nodes, ways, versions: vec![0; slots], fingerprints: vec![0; slots], verdicts: vec![None; slots] }
    }

    fn index(&self, node: NodeIdx, fingerprint: u64) -> usize {
        (fingerprint as usize & (self.ways - 1)) * self.nodes + node as usize
    }

    /// The verdict recorded for this node at this version, if any.
    pub fn get(&self, node: NodeIdx, version: u32, fingerprint: u64) -> Option<&Verdict> {
        let i = self.index(node, fingerprint);
        if self.versions[i] == version.wrapping_add(1) && self.fingerprints[i] == fingerprint {
            self.verdicts[i].as_ref()
        } else {
            None
        }
    }

    pub fn put(&mut self, node: NodeIdx, version: u32, fingerprint: u64, verdict: Verdict) {
        let i = self.index(node, fingerprint);
        self.versions[i] = version.wrapping_add(1);
        self.fingerprints[i] = fingerprint;
        self.verdicts[i] = Some(verdict);
    }
}
