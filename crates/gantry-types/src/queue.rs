//! The queue tree (org → team → project): who shares the fleet, with what weight and what
//! quota. Validated by `gantry-spec`; ordered and charged by the engine's `queue` module.

use serde::{Deserialize, Serialize};

/// What a quota counts: GPUs of one catalog model (by canonical id), or milli-GPU of shares on
/// any model (the milli-GPU pool).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    Model(String),
    MilliPool,
}

/// A queue's quota for one flavor, in milli-GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub flavor: Flavor,
    /// Always available to the queue (reclaimed from borrowers when it asks).
    pub guaranteed_milli: u64,
    /// Never more than this, borrowing included.
    pub limit_milli: u64,
    /// May idle guaranteed capacity be lent to other queues of the cohort?
    pub lend: bool,
    /// Most it may borrow beyond its guarantee.
    pub borrow_milli: u64,
}

/// One queue of the tree. `parent` indexes `QueueTree::queues` (parents come first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSpec {
    pub name: String,
    pub parent: Option<usize>,
    /// Fair-share weight among its siblings, ≥ 1.
    pub weight: u32,
    pub quotas: Vec<Quota>,
    /// The priorities the queue grants its members' jobs.
    #[serde(default)]
    pub priority: PriorityRange,
}

/// The priorities a queue grants: a job that names none gets `default`; a member may name
/// any priority up to `max` (a higher one is capped there, and the job says so); an admin any.
/// Priority is a right the operator gives a queue, not a number a member types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityRange {
    pub default: i32,
    pub max: i32,
}

/// A partition: the nodes a job that names it may use, and the limits it has there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub name: String,
    /// Jobs that name no partition get this one (at most one partition is the default).
    pub default: bool,
    /// Its nodes: those carrying every one of these labels (empty: every node). `gantry
    /// import slurm` labels each node `slurm.partition/NAME = "true"` for the partitions
    /// slurm.conf puts it in.
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// The queue (account) charged for a job in this partition that names no queue.
    pub queue: Option<String>,
    /// Slurm's `MaxTime`: a job asking longer is refused; one asking nothing gets
    /// `default_time_s`, or this.
    pub max_time_s: Option<u64>,
    /// Slurm's `DefaultTime`: the limit of a job that asks none.
    pub default_time_s: Option<u64>,
    /// Slurm's `MaxNodes`: a job asking for more nodes is refused.
    pub max_nodes: Option<u32>,
}

/// A QOS name and the priority it stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qos {
    pub name: String,
    pub priority: i32,
}

/// The whole tree with its fair-share settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTree {
    /// Queues, every parent before its children.
    pub queues: Vec<QueueSpec>,
    /// Usage halves every this many seconds.
    pub half_life_s: u64,
    /// A job pending this long goes before fair-share order (the starvation guard).
    pub starvation_s: u64,
    /// A job started by reclaiming a guarantee is not reclaimed (by guarantee or starvation)
    /// for this long: the hysteresis that keeps two queues from preempting each other back and
    /// forth (priority may still stop it). A job a reclaim stopped is, once it restarts, a
    /// victim of last resort for as long.
    #[serde(default = "reclaim_protect_default")]
    pub reclaim_protect_s: u64,
    /// Under greedy backfill, the first job of a cycle blocked for lack of resources that has
    /// waited this long gets a reserved start (as with `reserve` at depth 1): without one, a
    /// queue whose waiting work is wider than the others' gets less than its weight, since
    /// every GPU that frees goes to someone's narrower job.
    #[serde(default = "greedy_reserve_after_default")]
    pub greedy_reserve_after_s: u64,
    /// Bounds on what preemption may cost one job and one promise (`[preemption]`).
    #[serde(default)]
    pub preemption: crate::preemption::PreemptionRules,
    /// Weight of one GPU-hour per catalog model id, in thousandths (an H100-hour worth two
    /// A100-hours: 2000 against 1000); models not listed weigh 1000.
    pub billing_milli: Vec<(String, u32)>,
    /// Limits every user has, and per-user overrides (each replaces the default whole).
    #[serde(default)]
    pub user_default: UserLimit,
    #[serde(default)]
    pub users: Vec<(String, UserLimit)>,
    /// Slurm's partitions: node sets with their own limits (`partition.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// QOS names and their priorities (empty: gantry's four, `partition::QOS_DEFAULT`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qos: Vec<Qos>,
}

/// What one user may hold at once, across all queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLimit {
    pub max_running_jobs: Option<u32>,
    /// Milli-GPU (whole GPUs, MIG instances and shares alike).
    pub max_gpus_milli: Option<u64>,
}

/// Default of [`QueueTree::reclaim_protect_s`]: ten minutes, long enough that a reclaimed job
/// does useful work before anyone may take its GPUs back, short against a training run.
pub const RECLAIM_PROTECT_DEFAULT_S: u64 = 600;

fn reclaim_protect_default() -> u64 {
    RECLAIM_PROTECT_DEFAULT_S
}

/// Default of [`QueueTree::greedy_reserve_after_s`]: half an hour, so short waits backfill
/// greedily and only a job left behind for a long time holds capacity back (like Slurm's
/// `bf_min_age_reserve`); on backlogged traces it lifts greedy's weighted Jain from 0.949 to
/// 0.995 at worst (docs/PERFORMANCE.md).
pub const GREEDY_RESERVE_AFTER_DEFAULT_S: u64 = 1800;

fn greedy_reserve_after_default() -> u64 {
    GREEDY_RESERVE_AFTER_DEFAULT_S
}

impl QueueTree {
    /// Index of the queue with this name.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.queues.iter().position(|q| q.name == name)
    }

    /// The limits that apply to `user`.
    pub fn user_limit(&self, user: &str) -> UserLimit {
        self.users.iter().find(|(u, _)| u == user).map_or(self.user_default, |(_, l)| *l)
    }

    /// A flat tree: one queue per name, weight 1, no quotas (what a trace without a queue file
    /// gets: each tenant its own queue).
    pub fn flat<'a>(names: impl IntoIterator<Item = &'a str>, half_life_s: u64, starvation_s: u64) -> QueueTree {
        let mut queues: Vec<QueueSpec> = Vec::new();
        for name in names {
            if !queues.iter().any(|q| q.name == name) {
                queues.push(QueueSpec {
                    name: name.to_string(),
                    parent: None,
                    weight: 1,
                    quotas: Vec::new(),
                    priority: PriorityRange::default(),
                });
            }
        }
        QueueTree {
            queues,
            half_life_s,
            starvation_s,
            reclaim_protect_s: RECLAIM_PROTECT_DEFAULT_S,
            greedy_reserve_after_s: GREEDY_RESERVE_AFTER_DEFAULT_S,
            preemption: Default::default(),
            billing_milli: Vec::new(),
            user_default: UserLimit::default(),
            users: Vec::new(),
            partitions: Vec::new(),
            qos: Vec::new(),
        }
    }
}
