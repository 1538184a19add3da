//! Every loop the engine runs per decision has a named limit here, with the reason for its size
//! (DESIGN §3 rule 5). Callers can tighten or loosen them through [`SearchLimits`]; the
//! simulator lifts the candidate limit to reproduce published policies exactly.

/// Bounds on the work of one placement decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchLimits {
    /// Stop scanning after this many nodes passed the filters; score only those. 16 keeps a
    /// decision near 5 µs on a 10,000-node fleet (benches/placement.rs: 154k decisions/s at
    /// 16, 89k at 32) while leaving the scorer a real choice; packing policies walk the fleet
    /// from node 0, so the 16 are the first nodes with room, where packing wants to go
    /// (Nomad and kube-scheduler bound their search the same way). `u32::MAX` = all.
    pub feasible_nodes_max: u32,
    /// Stop scanning after this many nodes visited, feasible or not: the worst case of a
    /// decision on a full fleet. 10,000 = the largest fleet we target, visited once.
    pub nodes_visited_max: u32,
    /// Scopes (racks, nodes, NVLink domains) tried for one gang before giving up at a level.
    /// Each try is a full placement of the gang, so this bounds gang work by a constant.
    pub gang_scopes_max: u32,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits { feasible_nodes_max: 16, nodes_visited_max: 10_000, gang_scopes_max: 16 }
    }
}

impl SearchLimits {
    /// Visit and score every node: exact policies, for the simulator and small fleets.
    pub fn exhaustive() -> Self {
        SearchLimits { feasible_nodes_max: u32::MAX, nodes_visited_max: u32::MAX, gang_scopes_max: 64 }
    }
}

/// Most GPU options scored on one node for one task (e.g. one per GPU for a share). A node has
/// at most 16 GPUs in practice; 32 leaves room for MIG instances without unbounded work.
pub const OPTIONS_PER_NODE_MAX: usize = 32;

/// Most task shapes the fragmentation model keeps (most frequent first). FGD's own simulator
/// works with the trace's typical shapes; beyond a few dozen the tail adds cost, not accuracy.
pub const FGD_TASK_SHAPES_MAX: usize = 32;

/// Most tasks in one job. A gang of 4,096 tasks is larger than any fleet we target.
pub const TASKS_PER_JOB_MAX: u32 = 4096;

/// Most GPUs on one node the engine accepts (a GPU bitset per node is a u64).
pub const GPUS_PER_NODE_MAX: usize = 64;
