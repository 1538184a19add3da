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

/// Work allowed past a queue's blocked head per cycle, in placement work: one unit per
/// placement tried plus one per node it visited (the engine's `SearchStats::nodes_visited`).
/// Counting work, not jobs, is what keeps a queue's small jobs reachable behind a long run of
/// blocked big ones: a big job no node has room for is refused through the engine's room
/// index after visiting few nodes or none, so hundreds of them cost less than one placement
/// that scans the fleet, while a bound in jobs (32, before) stopped at the 33rd whatever they
/// cost. A job whose request was already refused in the cycle costs nothing (`pass.rs`).
/// 4,096 units are a few milliseconds: about one hundred small placements of 16 feasible
/// nodes each, or a fraction of one search of the largest fleet (10,000 nodes). What it still
/// hides: small jobs behind some 4,000 blocked jobs of distinct requests (docs/PERFORMANCE.md:
/// about 15 ms per cycle at that depth).
pub const BACKFILL_WORK_MAX: u64 = 4096;
/// Jobs looked at per queue per cycle, tried or not: what bounds a pass over a very long
/// queue. A look costs a lookup (no placement), so 10,000 stays within a few milliseconds.
pub const BACKFILL_VISITS_MAX: usize = 10_000;
/// Jobs looked at per cycle in all queues together. The per-queue bound alone let a cycle
/// look at 10,000 jobs in each of 64 queues; a look at a job refused for a request already
/// refused still records its reason and may offer it a reservation, about 4 µs, so a cycle
/// grew with the waiting jobs: 490 ms at 100,000 waiting on 1,000 nodes (the scale bench,
/// docs/PERFORMANCE.md). 20,000 looks are about 80 ms. Jobs past them in the order keep the
/// reason the last cycle that reached them gave (a new job: "jobs ahead go first"), and nothing
/// past them could have started this cycle unless the jobs before it were refused.
pub const CYCLE_VISITS_MAX: usize = 20_000;
/// Request shapes in one queue up to which a pass jumps over the jobs of a refused request by
/// shape (`sched/waiting.rs`): each jump looks up the next job of every other shape in the
/// queue, so with many shapes stepping over the jobs one by one is as cheap. A queue with more
/// is walked job by job, within the visit bounds above, as before the jump existed.
pub const SHAPES_JUMP_MAX: usize = 64;

/// Backfill candidates per cycle checked against the reservations on nodes they share. A
/// candidate on a reservation's nodes may start only if every plan still holds with it running
/// (the fleet planned at each reservation's start: a copy of the fleet's state each), or if
/// planning them all again moves none later (1.9 ms for 8 reservations on 1,000 nodes with
/// 3,500 running). Unbounded, one cycle of the scale bench checked some 2,200 candidates and
/// replanned for each (4.3 s, a handful of starts). A candidate past the bound waits for the
/// next cycle, refused for the reservation whose nodes it shares: the bound breaks no promise.
/// Each check copies the fleet's state, so its cost grows with the fleet; 32 keep them to tens
/// of milliseconds on 1,000 nodes.
pub const RESERVATION_CHECKS_MAX: usize = 32;

/// Nodes whose victims alone are tried as a candidate set, cheapest first. Each candidate costs
/// one placement per victim added; 16 nodes bound a plan to a few hundred placements on a
/// planning copy while covering every node of the small pools where contention happens.
pub const PREEMPT_NODES_MAX: usize = 16;

/// Eligible victims tried one by one (cheapest first) as a set of one: one placement each on a
/// planning copy; 64 covers every job on a few nodes of the pool in contention.
pub const PREEMPT_SINGLES_MAX: usize = 64;

/// Most victim shapes whose way back (the wait before a job of that shape could start again)
/// one preemption round estimates, the largest first: each estimate is a bisection over the
/// running jobs' ends, a placement per step on a planning copy. Smaller shapes count no way
/// back (they restart in the first gap), which errs toward stopping small jobs.
pub const WAY_BACK_SHAPES_MAX: usize = 4;

/// The way back counted for a shape that does not fit even once every running job with a
/// planned end has ended: a day, longer than any wait a cheaper victim could cause.
pub const WAY_BACK_UNKNOWN_S: u64 = 86_400;

/// Planning copies' states kept for reuse per engine. A cycle holds a few copies at once (the
/// reservation's shadow, a plan being checked, a preemption plan and its trial); more spares
/// would only hold memory: on 100,000 nodes a state is about 100 MB.
pub const SPARE_STATES_MAX: usize = 4;

/// GPUs one online planning step plans at most. A larger fleet is planned a slice at a time:
/// every s-th node (s = GPUs ÷ this, rounded up, so each slice has the fleet's mix of
/// hardware), consecutive steps taking consecutive slices, with the demand sampled in the same
/// proportion. At 100,000 GPUs one step took 3.5 s on the 2-vCPU reference VM (`cargo bench -p
/// gantry-engine --bench online`), a third of the shortest planning period the controller
/// accepts (10 s): a step stays shorter than its period whatever the fleet's size.
pub const PLAN_GPUS_PER_STEP_MAX: usize = 100_000;

/// The live controller's scheduling tick, in seconds (`gantry serve` runs a cycle at least
/// this often). The simulator, driven by events, runs one this long after a cycle that
/// started a job, or planned as many preemptors as a cycle may, while a job within its
/// guarantee stayed waiting, as the live loop would: a refusal earlier in a cycle can be
/// undone by a start later in it, the preemptors past the bound plan in the next cycle, and
/// no event may come for a long while (`Scheduler::next_wake`).
pub const CYCLE_TICK_S: u64 = 1;
