//! The scheduling cycle: which waiting jobs start now, which running jobs are stopped for
//! others, and why every other job waits — on top of the placement engine, pure and
//! deterministic like it. The live controller and the simulator both drive a [`Scheduler`]:
//! they submit jobs, report ends and kills, and call [`Scheduler::cycle`] with the time; the
//! scheduler answers with [`Decision`]s (start this job on this allocation; stop that one,
//! killing it when its grace period ends) and never carries anything out itself.
//!
//! What it composes: the queue order (one FIFO, or hierarchical fair share with priority and
//! a starvation guard — `fairshare`), admission (array throttles, per-user limits, quotas with
//! borrowing and lending — `quota`), backfill with reservations (`backfill`; one pass is
//! `pass.rs`) and preemption by right (priority, guarantee, starvation — `preempt`; the
//! scheduler's side is `rights.rs`). Every job that does not start carries a typed
//! [`PendingReason`] and, where one was reserved, an estimated start.

mod admit;
mod consolidation;
mod digest;
mod entitled;
mod lending;
mod moves;
mod pass;
mod preemption_plan;
mod reasons;
mod rights;
mod shares;
mod waiting;
mod way_back;

use crate::backfill::Reservation;
use crate::fairshare::{FairShare, Resources};
use crate::quota::QuotaBook;
use crate::{AllocId, CompiledJob, Engine};
use gantry_types::{DependencyKind, Flavor, JobControl, Lifecycle, PendingJob, PendingReason, QueueTree};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

pub use crate::limits::{
    BACKFILL_VISITS_MAX, BACKFILL_WORK_MAX, CYCLE_VISITS_MAX, RESERVATION_CHECKS_MAX, SHAPES_JUMP_MAX,
};
pub use lending::UsageLevels;
pub use rights::PREEMPTORS_MAX;

/// The caller's name for a job (a trace index, a database id).
pub type JobId = u64;

/// A waiting job's place in its queue: (priority, high first; eligible since; id).
type Key = (Reverse<i32>, u64, JobId);

/// How a job that has not started waits (see [`Scheduler::why`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    Held,
    OnDependencies,
    NeverSatisfiable,
    /// In its queue's order, tried by each cycle.
    Queued,
}

/// Most reservations per cycle.
pub const RESERVE_DEPTH_MAX: usize = 64;

/// How the waiting queue is ordered. (One per scheduler or replay: the tree's size in the
/// enum costs nothing worth a box.)
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Order {
    /// One FIFO queue (priority ignored), bounded backfill past a blocked head.
    Fifo,
    /// The engine's fair share over this queue tree: the starvation guard, priority, then the
    /// lowest weighted dominant share down the tree, then age; within a queue, priority then
    /// age, with the same bounded backfill per queue. Every job's queue must be in the tree.
    FairShare(QueueTree),
}

impl Order {
    pub fn name(&self) -> &'static str {
        match self {
            Order::Fifo => "fifo",
            Order::FairShare(_) => "fair-share",
        }
    }
}

/// What may start past a blocked job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backfill {
    /// Nothing: a queue waits behind its blocked head.
    Off,
    /// Later jobs of the queue, up to `BACKFILL_WORK_MAX` of placement work, whatever that does
    /// to the blocked one — except, under fair share, to a blocked job that has waited the queue
    /// tree's `greedy_reserve_after`: it gets a reserved start, as with `Reserve` at depth 1.
    /// (Under FIFO there is no reservation: big jobs can starve.)
    Greedy,
    /// Backfill with reservations: the first `reserve_depth` jobs of a cycle blocked for lack
    /// of resources get reserved starts (from running jobs' planned ends, each planned around
    /// the ones before it); a later job starts only if it fits and moves no reserved start
    /// later; at most `BACKFILL_WORK_MAX` of placement work per queue is spent. Depth 1 is EASY
    /// backfill.
    Reserve,
}

impl Backfill {
    /// The mode [`Backfill::name`] names: `off`, `greedy` or `reserve`.
    pub fn parse(name: &str) -> Option<Backfill> {
        match name {
            "off" => Some(Backfill::Off),
            "greedy" => Some(Backfill::Greedy),
            "reserve" => Some(Backfill::Reserve),
            _ => None,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Backfill::Off => "off".into(),
            Backfill::Greedy => "greedy".into(),
            Backfill::Reserve => "reserve".into(),
        }
    }
}

/// What a scheduler refuses, as data (callers map these to their own errors).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SchedError {
    #[error("no job {0}")]
    UnknownJob(JobId),
    #[error("job id {0} submitted twice")]
    Duplicate(JobId),
    #[error("job {job:?}: unknown queue {queue:?}")]
    UnknownQueue { job: String, queue: String },
    /// A hold, release or cancel of a job in the wrong state (`is`: what it is instead).
    #[error("job {job:?} is {is}")]
    NotWaiting { job: String, is: &'static str },
    #[error("job {job:?}: its recorded placement is not free on this fleet")]
    PlacementTaken { job: String },
    #[error("job {0}: no spec to compile it again")]
    NoSpec(JobId),
    /// A move of an allocation in its grace period (it is about to end, not to move).
    #[error("allocation {0} is being stopped; it cannot move")]
    Stopping(AllocId),
    /// The engine refused (an unknown node or GPU, a mode the GPU cannot take, a spec that no
    /// longer compiles).
    #[error("{0}")]
    Engine(#[from] crate::EngineError),
}

/// How a scheduler decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub order: Order,
    pub backfill: Backfill,
    /// Blocked jobs given a reserved start per cycle (`Backfill::Reserve`), 1..=64.
    pub reserve_depth: usize,
    /// Let jobs a cycle cannot start stop work they have a right to (needs fair share).
    pub preempt: bool,
    /// A job whose dependency can never be met stays pending with that reason (Slurm's
    /// default) instead of being dropped (Slurm's `kill_invalid_depend`).
    pub keep_unsatisfiable: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            order: Order::Fifo,
            backfill: Backfill::Greedy,
            reserve_depth: 1,
            preempt: false,
            keep_unsatisfiable: false,
        }
    }
}

/// What a scheduler remembers across cycles beyond its jobs and allocations: fair share's
/// decayed usage per queue, how often each job was preempted and which were reclaimed (the
/// starvation guard and reclaim protection read them), the promised starts and their order.
/// A controller re-opening from its jobs at a checkpoint takes it back
/// ([`Scheduler::memory`], [`Scheduler::remember`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerMemory {
    pub fair_share: Option<Vec<([u128; crate::fairshare::RESOURCES], u64)>>,
    pub preempted_times: Vec<(JobId, u32)>,
    /// Milli-GPU-seconds of work each job lost to its stops (its preemption budget).
    pub preempted_lost: Vec<(JobId, u64)>,
    pub reclaimed: Vec<JobId>,
    pub promises: Vec<JobId>,
    pub promise_at: Vec<(JobId, u64)>,
    pub last_reservation: Option<(JobId, u64)>,
    /// Running jobs' flags: started by the starvation guard, protected from reclaim since.
    pub running: Vec<(JobId, bool, Option<u64>)>,
    /// Since when each job not ended has been eligible (a released job since then, not since
    /// its submission; a running one keeps it for when it waits again): its place in its queue.
    pub eligible_at: Vec<(JobId, u64)>,
    /// Since when each waiting job has been within its queue's guarantee (`entitled.rs`:
    /// its wait toward `overshoot_after` and the guarantee's bound).
    pub entitled_since: Vec<(JobId, u64)>,
    /// Since when queues' usage has been recorded, and per (queue by name, flavor) its recent
    /// levels (`lending.rs`: a loan is judged by the holders' recent use).
    pub usage_since: Option<u64>,
    pub usage: Vec<(String, Flavor, UsageLevels)>,
}

/// A job as the scheduler needs it.
#[derive(Clone, Debug)]
pub struct SchedJob {
    pub name: String,
    pub queue: String,
    pub priority: i32,
    pub lifecycle: Lifecycle,
    pub control: JobControl,
    /// How long planning may count on it holding its GPUs once started: its time limit, else
    /// an estimate; `None` = for ever as far as planning knows.
    pub planned_length_s: Option<u64>,
    /// Jobs (by id) that must have ended in the given way first.
    pub after: Vec<(DependencyKind, JobId)>,
    pub compiled: CompiledJob,
}

impl SchedJob {
    /// The one conversion from a submitted job (`spec`, compiled once into `compiled`) to the
    /// scheduler's, used by the live controller and the simulator alike: `after` are its
    /// dependencies resolved to ids (each caller resolves names its own way); planning counts
    /// on its time limit (a simulator that knows the trace's durations may set more).
    pub fn of(spec: &gantry_types::Job, compiled: CompiledJob, after: Vec<(DependencyKind, JobId)>) -> SchedJob {
        SchedJob {
            name: spec.name.clone(),
            queue: spec.queue.clone(),
            priority: spec.priority,
            lifecycle: spec.lifecycle,
            control: spec.control.clone(),
            planned_length_s: spec.control.time_limit_s,
            after,
            compiled,
        }
    }
}

/// What became of a submitted (or requeued) job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Waiting in its queue; with preemption on, when it will reach the starvation bound (a
    /// cycle should run then).
    Queued { starving_at: Option<u64> },
    /// Held: waits until released.
    Held,
    /// Waits for its dependencies.
    Dependencies,
    /// A dependency can never be met: dropped.
    Never,
}

/// What a cycle decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `job` starts now on allocation `alloc` (already taken in the engine), holding `milli`
    /// milli-GPU; it had been eligible since `eligible_since`.
    Start { job: JobId, alloc: AllocId, milli: u64, eligible_since: u64 },
    /// Signal `job` (running on `alloc`) to stop now and kill it at `kill_at`, for job
    /// `for_job` (the preemptor, which starts once its victims are gone); `cause` is the
    /// preemptor's right: `priority`, `guarantee` or `starvation`.
    Stop { job: JobId, alloc: AllocId, kill_at: u64, cause: &'static str, for_job: JobId },
}

/// A running job as the scheduler tracks it.
#[derive(Clone, Debug)]
struct RunningJob {
    job: JobId,
    started_at: u64,
    /// Its end as planning counts on it (`None`: for ever).
    limit_end: Option<u64>,
    started_starved: bool,
    /// When it started on capacity its own preemption freed: protected from reclaim for
    /// `QueueTree::reclaim_protect_s`.
    protected_since: Option<u64>,
    /// When it started again after a reclaim stopped it: a victim of last resort for as long.
    restarted_since: Option<u64>,
    milli: u64,
    held: Resources,
    demand: Vec<(Flavor, u64)>,
}

/// A preemptor waiting for its victims.
#[derive(Clone, Debug)]
struct Awaiting {
    victims: Vec<AllocId>,
    /// When the last victim's grace period ends.
    until: u64,
    /// Its strongest right over the victims (`priority`, `guarantee`, `starvation`).
    right: &'static str,
    /// Flavors it reclaims by its guarantee: no other queue may borrow them meanwhile.
    owed: Vec<Flavor>,
    /// Where its plan puts it once the victims are gone (kept for it), and what that counts
    /// against its queue's quotas.
    tasks: Vec<crate::ledger::TaskGrant>,
    demand: Vec<(Flavor, u64)>,
}

/// Why a promised start was pushed back: the job that took the capacity, and its right
/// (`priority`, `guarantee`, `starvation`, `queue-order` for an earlier promise of the same
/// queue, or `own-limit` when the job's own quota or per-user limit held it back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromiseBreak {
    pub by: JobId,
    pub right: &'static str,
    pub at_s: u64,
}

/// One submitted job and where it stands.
#[derive(Clone, Debug)]
struct Entry {
    job: SchedJob,
    /// Its request's shape (`pass::shape_of`), computed once: a pass asks for it per visit.
    shape: u64,
    queue: usize,
    /// Since when it has been eligible (submitted, dependencies met).
    eligible_at: u64,
}

/// Counters over a scheduler's life, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Jobs promised a reserved start (their first promise), and those that started later
    /// than the first promise of the wait they started from.
    pub promised: BTreeMap<JobId, u64>,
    pub late: BTreeSet<JobId>,
    /// Promises pushed back by a higher right, with who and which (the first record).
    pub broken: BTreeMap<JobId, PromiseBreak>,
    /// Promises found later than first promised (in the same wait) with no higher right on
    /// record for that wait: a scheduler bug, which the tests hold at zero.
    pub broken_without_cause: BTreeSet<JobId>,
    /// Jobs refused at least once by a quota, by a per-user limit.
    pub quota_waited: BTreeSet<JobId>,
    pub user_limit_waited: BTreeSet<JobId>,
    /// Backfill candidates refused because their cycle had spent its checks against the
    /// reservations ([`RESERVATION_CHECKS_MAX`]): each waited for a later cycle.
    pub reservation_checks_spent: u64,
    /// Per started job that waited while its queue's guarantee had room for it: the longest
    /// such wait, seconds (`entitled.rs`).
    pub guarantee_waited: BTreeMap<JobId, u64>,
}

/// The scheduling cycle's state: the engine, the queues, what runs, what waits and why.
#[derive(Clone, Debug)]
pub struct Scheduler {
    engine: Engine,
    config: SchedulerConfig,
    /// Boxed: an entry is some 350 bytes, and a B-tree's half-filled nodes of them cost a
    /// waiting job 650 bytes (the scale bench, 100,000 waiting); a box costs its size.
    jobs: BTreeMap<JobId, Box<Entry>>,
    fair: Option<FairShare>,
    quotas: Option<QuotaBook>,
    starvation_s: Option<u64>,
    queue_count: usize,
    billing: Vec<(String, u32)>,
    /// Per user: running jobs and milli-GPU held; per array: running elements.
    user_running: BTreeMap<String, (u32, u64)>,
    array_running: BTreeMap<String, u32>,
    /// Per queue: pending jobs by (priority high first, eligible since, id), and by shape.
    pending: waiting::Waiting,
    held: BTreeSet<JobId>,
    waiting_on_deps: BTreeSet<JobId>,
    /// How each ended job ended: true = completed.
    ended: BTreeMap<JobId, bool>,
    estimate: digest::DigestMap<JobId, u64>,
    running: BTreeMap<AllocId, RunningJob>,
    /// Preemption: allocations in their grace period (and why), and the jobs waiting for
    /// them (their victims and when the last grace period ends).
    terminating: BTreeMap<AllocId, &'static str>,
    awaiting: BTreeMap<JobId, Awaiting>,
    /// How long a job started by reclaim is protected from reclaim (`QueueTree`).
    reclaim_protect_s: u64,
    /// How long a blocked job waits under greedy backfill before it is promised a start
    /// (`QueueTree`; never without fair share).
    greedy_reserve_after_s: u64,
    /// Per waiting job: the first start promised in its current wait, and whether a higher
    /// right has pushed it back during that wait.
    promise_at: BTreeMap<JobId, u64>,
    broken_now: BTreeMap<JobId, PromiseBreak>,
    /// How often each job was preempted (killed for a preemptor), and the waiting jobs a
    /// reclaim or the starvation guard stopped (protected when they start again).
    preempted_times: BTreeMap<JobId, u32>,
    /// Milli-GPU-seconds of work each job lost to its stops, and the bounds on both
    /// (`QueueTree::preemption`; defaults without fair share).
    preempted_lost: BTreeMap<JobId, u64>,
    rules: gantry_types::PreemptionRules,
    reclaimed: BTreeSet<JobId>,
    /// Waiting jobs within their queue's guarantee, since when (`entitled.rs`).
    entitled: BTreeMap<JobId, entitled::Entitled>,
    /// Since when jobs were within their guarantee under the controller this one took over
    /// from (read by the first cycle, then empty).
    entitled_carried: BTreeMap<JobId, u64>,
    /// Per flavor, then queue: what its and its descendants' entitled jobs claim.
    entitled_claims: BTreeMap<Flavor, BTreeMap<usize, u64>>,
    /// Each queue's recent usage peaks (`lending.rs`).
    peaks: lending::UsagePeaks,
    /// The next tick after a cycle that started a job, or planned as many preemptors as one
    /// cycle may (`rights::PREEMPTORS_MAX`), while a job within its guarantee was left
    /// waiting: what refused that job (a promise that then started, a preemptor's kept place,
    /// the bound) may be gone, and only a new cycle reads it again (`Scheduler::next_wake`).
    recheck_at: Option<u64>,
    /// Jobs holding a promised start, in reservation order (kept across cycles).
    promises: Vec<JobId>,
    /// The depth-1 reservation of the previous cycle (reused while it still holds).
    last_reservation: Option<(JobId, u64)>,
    /// During a pass only: the promises (depth > 1) counted in fair share as if they already
    /// ran, with what each counts, so the next promise goes to the queue the order puts next.
    promise_charges: BTreeMap<JobId, (usize, Resources)>,
    plans: Vec<(JobId, Reservation)>,
    stats: SchedStats,
}

impl Scheduler {
    /// A scheduler over `engine` (its allocations, if any, are not the scheduler's).
    pub fn new(engine: Engine, config: SchedulerConfig) -> Scheduler {
        let fair = match &config.order {
            Order::Fifo => None,
            Order::FairShare(tree) => Some(FairShare::new(tree.clone(), engine.capacity(&tree.billing_milli))),
        };
        let quotas = match &config.order {
            Order::FairShare(tree) => {
                Some(QuotaBook::new(tree.clone()).with_capacity(engine.flavor_capacity())).filter(QuotaBook::has_quotas)
            }
            Order::Fifo => None,
        };
        let starvation_s = match &config.order {
            Order::FairShare(tree) => Some(tree.starvation_s),
            Order::Fifo => None,
        };
        let queue_count = fair.as_ref().map_or(1, |fs| fs.tree().queues.len());
        let reclaim_protect_s = fair.as_ref().map_or(0, |fs| fs.tree().reclaim_protect_s);
        let greedy_reserve_after_s = fair.as_ref().map_or(u64::MAX, |fs| fs.tree().greedy_reserve_after_s);
        let rules = fair.as_ref().map(|fs| fs.tree().preemption).unwrap_or_default();
        let billing = fair.as_ref().map(|fs| fs.tree().billing_milli.clone()).unwrap_or_default();
        Scheduler {
            engine,
            config,
            jobs: BTreeMap::new(),
            fair,
            quotas,
            starvation_s,
            queue_count,
            billing,
            user_running: BTreeMap::new(),
            array_running: BTreeMap::new(),
            pending: waiting::Waiting::new(queue_count),
            held: BTreeSet::new(),
            waiting_on_deps: BTreeSet::new(),
            ended: BTreeMap::new(),
            estimate: Default::default(),
            running: BTreeMap::new(),
            terminating: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            reclaim_protect_s,
            greedy_reserve_after_s,
            promises: Vec::new(),
            preempted_times: BTreeMap::new(),
            preempted_lost: BTreeMap::new(),
            rules,
            reclaimed: BTreeSet::new(),
            entitled: BTreeMap::new(),
            entitled_carried: BTreeMap::new(),
            entitled_claims: BTreeMap::new(),
            peaks: Default::default(),
            recheck_at: None,
            promise_at: BTreeMap::new(),
            broken_now: BTreeMap::new(),
            last_reservation: None,
            promise_charges: BTreeMap::new(),
            plans: Vec::new(),
            stats: SchedStats::default(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn stats(&self) -> &SchedStats {
        &self.stats
    }

    /// Tell the scheduler how a job it never ran ended (a restarted controller seeding the
    /// outcomes that later jobs' dependencies look at).
    pub fn record_ended(&mut self, id: JobId, ok: bool) {
        self.ended.entry(id).or_insert(ok);
    }

    /// Drain or resume a node (see [`Engine::set_drained`]).
    pub fn set_drained(&mut self, node: &str, drained: bool) -> Result<bool, SchedError> {
        let changed = self.engine.set_drained(node, drained)?;
        if changed {
            self.last_reservation = None;
        }
        Ok(changed)
    }

    /// Reconfigure an idle GPU ([`Engine::set_gpu_mode`]) and compile every job the scheduler
    /// holds that has not ended again against the new device classes, from its spec
    /// (`spec_of`, by id). Every
    /// spec is looked up first: a job without one is the error and nothing changes. Returns
    /// whether the mode changed.
    pub fn set_gpu_mode(
        &mut self,
        node: &str,
        index: u32,
        mode: &gantry_types::GpuMode,
        spec_of: impl Fn(JobId) -> Option<gantry_types::Job>,
    ) -> Result<bool, SchedError> {
        // Jobs that ended are never placed again: only the others are compiled again.
        let specs: Vec<(JobId, gantry_types::Job)> = self
            .jobs
            .keys()
            .filter(|id| !self.ended.contains_key(id))
            .map(|&id| spec_of(id).map(|spec| (id, spec)).ok_or(SchedError::NoSpec(id)))
            .collect::<Result<_, _>>()?;
        if !self.engine.set_gpu_mode(node, index, mode)? {
            return Ok(false);
        }
        self.last_reservation = None;
        for (id, spec) in specs {
            let priority = Reverse(self.priority(id));
            let entry = self.jobs.get_mut(&id).expect("looked up above");
            if self.engine.is_current(&entry.job.compiled) {
                continue;
            }
            // A spec that compiled before compiles again: compiling reads the catalog and the
            // fleet's models, which a mode change leaves as they were.
            entry.job.compiled = self.engine.compile(&spec)?;
            let before = std::mem::replace(&mut entry.shape, pass::shape_of(&entry.job.compiled));
            // A waiting job moves to its new shape's group.
            let (queue, key, shape) = (entry.queue, (priority, entry.eligible_at, id), entry.shape);
            let length = entry.job.planned_length_s;
            if self.pending.remove(queue, &key, before, length) {
                self.pending.insert(queue, key, shape, length);
            }
        }
        Ok(true)
    }

    /// What this scheduler remembers across cycles that its jobs do not say: what a
    /// controller re-opening itself from its jobs carries over ([`SchedulerMemory`]).
    pub fn memory(&self) -> SchedulerMemory {
        let (usage_since, levels) = self.peaks.carried();
        let usage = match &self.quotas {
            Some(book) => levels.into_iter().map(|(q, f, l)| (book.tree().queues[q].name.clone(), f, l)).collect(),
            None => Vec::new(),
        };
        SchedulerMemory {
            fair_share: self.fair.as_ref().map(FairShare::memory),
            preempted_times: self.preempted_times.iter().map(|(j, n)| (*j, *n)).collect(),
            preempted_lost: self.preempted_lost.iter().map(|(j, n)| (*j, *n)).collect(),
            reclaimed: self.reclaimed.iter().copied().collect(),
            promises: self.promises.clone(),
            promise_at: self.promise_at.iter().map(|(j, t)| (*j, *t)).collect(),
            last_reservation: self.last_reservation,
            running: self
                .running
                .values()
                .filter(|r| r.started_starved || r.protected_since.is_some())
                .map(|r| (r.job, r.started_starved, r.protected_since))
                .collect(),
            eligible_at: self
                .jobs
                .iter()
                .filter(|(id, _)| !self.ended.contains_key(id))
                .map(|(id, e)| (*id, e.eligible_at))
                .collect(),
            entitled_since: self.entitled.iter().map(|(j, e)| (*j, e.since)).collect(),
            usage_since,
            usage,
        }
    }

    /// Take back [`Scheduler::memory`] after the jobs were admitted and adopted again (what
    /// names a job this scheduler no longer knows is dropped). False, and nothing changed,
    /// when the fair-share memory does not fit this scheduler's queue tree.
    pub fn remember(&mut self, memory: &SchedulerMemory) -> bool {
        let fits = match (&mut self.fair, &memory.fair_share) {
            (Some(fair), Some(m)) => fair.remember(m),
            (None, None) => true,
            _ => false,
        };
        if !fits {
            return false;
        }
        let known = |j: &JobId| self.jobs.contains_key(j) || self.running.values().any(|r| r.job == *j);
        let waiting = |j: &JobId| self.jobs.contains_key(j);
        self.preempted_times = memory.preempted_times.iter().filter(|(j, _)| known(j)).copied().collect();
        self.preempted_lost = memory.preempted_lost.iter().filter(|(j, _)| known(j)).copied().collect();
        self.reclaimed = memory.reclaimed.iter().filter(|j| known(j)).copied().collect();
        self.promises = memory.promises.iter().filter(|j| waiting(j)).copied().collect();
        self.promise_at = memory.promise_at.iter().filter(|(j, _)| waiting(j)).copied().collect();
        self.last_reservation = memory.last_reservation.filter(|(j, _)| waiting(j));
        self.entitled_carried = memory.entitled_since.iter().filter(|(j, _)| waiting(j)).copied().collect();
        let flags: BTreeMap<JobId, (bool, Option<u64>)> =
            memory.running.iter().map(|(j, starved, since)| (*j, (*starved, *since))).collect();
        for r in self.running.values_mut() {
            if let Some((starved, since)) = flags.get(&r.job) {
                (r.started_starved, r.protected_since) = (*starved, *since);
            }
        }
        for (id, at) in &memory.eligible_at {
            let Some(entry) = self.jobs.get(id) else { continue };
            let (queue, before) = (entry.queue, entry.eligible_at);
            let priority = Reverse(self.priority(*id));
            let (shape, length) = (entry.shape, entry.job.planned_length_s);
            if before != *at && self.pending.remove(queue, &(priority, before, *id), shape, length) {
                self.pending.insert(queue, (priority, *at, *id), shape, length);
            }
            if let Some(entry) = self.jobs.get_mut(id) {
                entry.eligible_at = *at;
            }
        }
        if let Some(book) = &self.quotas {
            let levels = memory
                .usage
                .iter()
                .filter_map(|(name, f, l)| Some((book.tree().find(name)?, f.clone(), l.clone())))
                .collect();
            self.peaks.carry(memory.usage_since, levels);
        }
        true
    }

    /// Mark a node ready (its agent is connected) or not: nothing new starts on a node that
    /// is not ready; what runs there keeps running.
    pub fn set_ready(&mut self, node: &str, ready: bool) -> Result<bool, SchedError> {
        // Every heartbeat says "ready": only a change may move a reserved start.
        let changed = self.engine.set_mark(node, crate::NOT_READY_TAINT, !ready)?;
        if changed {
            self.last_reservation = None;
        }
        Ok(changed)
    }

    /// Each queue's use of its quotas (`None` when the queue file sets none).
    pub fn quota_book(&self) -> Option<&QuotaBook> {
        self.quotas.as_ref()
    }

    /// The queue file this scheduler orders by (`None` under FIFO).
    pub fn queue_tree(&self) -> Option<&gantry_types::QueueTree> {
        self.fair.as_ref().map(|fs| fs.tree())
    }

    /// Does the queue order know queue `name` (FIFO knows every name)?
    pub fn knows_queue(&self, name: &str) -> bool {
        self.fair.as_ref().is_none_or(|fs| fs.tree().find(name).is_some())
    }

    /// The priorities queue `name` grants (without a queue file, the default range: 0 for
    /// everyone's jobs).
    pub fn priority_range(&self, name: &str) -> gantry_types::PriorityRange {
        self.fair.as_ref().and_then(|fs| fs.tree().find(name).map(|i| fs.tree().queues[i].priority)).unwrap_or_default()
    }

    /// Jobs waiting in queues (not held, not waiting on dependencies).
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// Jobs held, and jobs waiting on dependencies.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    pub fn waiting_on_dependencies(&self) -> usize {
        self.waiting_on_deps.len()
    }

    /// The next moment after `now` when a cycle may decide something no event announces, if a
    /// job waits: a reserved start (it can fall between events: a start planned at another
    /// reservation's planned end), with preemption on, a running job becoming eligible as a
    /// victim again (its reclaim protection or minimum runtime ends), and the next tick after
    /// a cycle that started a job, or planned `PREEMPTORS_MAX` preemptors, while one within
    /// its guarantee stayed waiting (what refused it may have started since, in the same
    /// cycle; or it was past the bound). A caller driven by
    /// events (the simulator) runs a cycle then, as the live controller's tick does anyway.
    pub fn next_wake(&self, now: u64) -> Option<u64> {
        if self.pending.is_empty() {
            return None;
        }
        let victims_again = self.running.values().filter(|_| self.config.preempt).flat_map(|r| {
            let protect = r.protected_since.map(|t| t.saturating_add(self.reclaim_protect_s));
            let min_runtime = r.started_at.saturating_add(self.jobs[&r.job].job.lifecycle.min_runtime_s);
            [protect, Some(min_runtime)]
        });
        // A job within its guarantee may take a borrower larger than what its queue borrows
        // once it has waited `PreemptionRules::overshoot_after_s` (`preempt::Right::overshoot`).
        let overshoot = self
            .entitled
            .values()
            .filter(|_| self.config.preempt)
            .map(|e| Some(e.since.saturating_add(self.rules.overshoot_after_s)));
        // A loan held back for a guarantee holder's recent use may be made once that use is
        // past the lending horizon, or once the usage record covers the horizon or a day
        // (`lending.rs`; other windows are woken by later events).
        let lend = self.config.preempt.then(|| self.peaks.next_expiry(now, self.rules.lend_horizon_s)).flatten();
        self.estimate
            .values()
            .map(|&t| Some(t))
            .chain(victims_again)
            .chain(overshoot)
            .chain([lend, self.recheck_at])
            .flatten()
            .filter(|&t| t > now)
            .min()
    }

    /// The running job on `alloc`, and when it started.
    pub fn running(&self, alloc: AllocId) -> Option<(JobId, u64)> {
        self.running.get(&alloc).map(|r| (r.job, r.started_at))
    }

    /// A job's priority as the order sees it (FIFO ignores priority).
    fn priority(&self, job: JobId) -> i32 {
        if self.fair.is_some() { self.jobs[&job].job.priority } else { 0 }
    }

    fn never_satisfiable(&self, job: JobId) -> bool {
        self.jobs[&job].job.after.iter().any(|&(kind, k)| {
            matches!(
                (kind, self.ended.get(&k)),
                (DependencyKind::AfterOk, Some(false)) | (DependencyKind::AfterNotOk, Some(true))
            )
        })
    }

    fn dependencies_met(&self, job: JobId) -> bool {
        self.jobs[&job].job.after.iter().all(|(_, k)| self.ended.contains_key(k))
    }

    /// Put `job` in its queue, eligible since `since`.
    fn enqueue(&mut self, job: JobId, since: u64) -> Admission {
        let key = (Reverse(self.priority(job)), since, job);
        let e = &self.jobs[&job];
        self.pending.insert(e.queue, key, e.shape, e.job.planned_length_s);
        let starving_at = match (self.config.preempt, self.starvation_s) {
            (true, Some(bound)) => Some(since + bound),
            _ => None,
        };
        Admission::Queued { starving_at }
    }

    /// Record why `job` waits, one job at a time (`waiting::Waiting::settle` gives a whole
    /// request's jobs their reason).
    fn set_reason(&mut self, job: JobId, reason: std::sync::Arc<PendingReason>) {
        let e = &self.jobs[&job];
        let key = (Reverse(self.priority(job)), e.eligible_at, job);
        self.pending.set_reason(e.queue, e.shape, &key, reason);
    }

    /// Why `job` waits, as the last cycle left it (`None`: not waiting, or no reason yet).
    fn reason_of(&self, job: JobId) -> Option<&std::sync::Arc<PendingReason>> {
        let e = self.jobs.get(&job)?;
        self.pending.reason(e.queue, e.shape, &(Reverse(self.priority(job)), e.eligible_at, job))
    }

    fn dequeue(&mut self, job: JobId, priority: i32, since: u64) {
        let e = &self.jobs[&job];
        self.pending.remove(e.queue, &(Reverse(priority), since, job), e.shape, e.job.planned_length_s);
        self.estimate.remove(&job);
    }

    /// The queue index for a new job `id`, or why it cannot be taken: an id used before, or a
    /// queue the tree lacks.
    fn admissible(&self, id: JobId, job: &SchedJob) -> Result<usize, SchedError> {
        if self.jobs.contains_key(&id) {
            return Err(SchedError::Duplicate(id));
        }
        match &self.fair {
            None => Ok(0),
            Some(fs) => fs
                .tree()
                .find(&job.queue)
                .ok_or_else(|| SchedError::UnknownQueue { job: job.name.clone(), queue: job.queue.clone() }),
        }
    }

    /// Submit `job` as `id` at `now`. Fails on an id used before or a queue the tree lacks.
    pub fn submit(&mut self, id: JobId, job: SchedJob, now: u64) -> Result<Admission, SchedError> {
        let queue = self.admissible(id, &job)?;
        let hold = job.control.hold;
        self.jobs.insert(id, Box::new(Entry { shape: pass::shape_of(&job.compiled), job, queue, eligible_at: now }));
        Ok(if hold {
            self.held.insert(id);
            Admission::Held
        } else {
            self.admit(id, now)
        })
    }

    /// A job free to go (not held) at `now`: dropped if a dependency can never be met,
    /// queued if all are met, else waiting for them.
    fn admit(&mut self, id: JobId, now: u64) -> Admission {
        if self.never_satisfiable(id) && !self.config.keep_unsatisfiable {
            Admission::Never
        } else if self.never_satisfiable(id) {
            self.waiting_on_deps.insert(id);
            Admission::Dependencies
        } else if self.dependencies_met(id) {
            self.enqueue(id, now)
        } else {
            self.waiting_on_deps.insert(id);
            Admission::Dependencies
        }
    }

    /// Hold a waiting job: it leaves its queue and never starts until released.
    pub fn hold(&mut self, id: JobId) -> Result<(), SchedError> {
        let Some(entry) = self.jobs.get(&id) else { return Err(SchedError::UnknownJob(id)) };
        if self.held.contains(&id) {
            return Ok(());
        }
        let key = (Reverse(self.priority(id)), entry.eligible_at, id);
        if self.pending.contains(entry.queue, &key) {
            self.dequeue(id, key.0.0, key.1);
        } else if !self.waiting_on_deps.remove(&id) {
            return Err(SchedError::NotWaiting { job: entry.job.name.clone(), is: "not waiting (running or done)" });
        }
        self.held.insert(id);
        Ok(())
    }

    /// Release a held job at `now`: it becomes eligible then (or waits for its dependencies).
    pub fn release(&mut self, id: JobId, now: u64) -> Result<Admission, SchedError> {
        let Some(entry) = self.jobs.get_mut(&id) else { return Err(SchedError::UnknownJob(id)) };
        if !self.held.remove(&id) {
            return Err(SchedError::NotWaiting { job: entry.job.name.clone(), is: "not held" });
        }
        entry.eligible_at = now;
        Ok(self.admit(id, now))
    }

    /// Cancel a job that is not running: it leaves its queue, hold or dependency wait for good
    /// and counts as failed for its dependents (returned as [`Scheduler::ended`] returns
    /// them). A running job is stopped by its runner instead, then reported with `ended`.
    pub fn cancel_waiting(&mut self, id: JobId, now: u64) -> Result<Vec<(JobId, Admission)>, SchedError> {
        let Some(entry) = self.jobs.get(&id) else { return Err(SchedError::UnknownJob(id)) };
        if self.ended.contains_key(&id) {
            return Err(SchedError::NotWaiting { job: entry.job.name.clone(), is: "ended" });
        }
        if self.running.values().any(|r| r.job == id) {
            return Err(SchedError::NotWaiting { job: entry.job.name.clone(), is: "running" });
        }
        let key = (Reverse(self.priority(id)), entry.eligible_at, id);
        if self.pending.contains(entry.queue, &key) {
            self.dequeue(id, key.0.0, key.1);
        }
        self.held.remove(&id);
        self.waiting_on_deps.remove(&id);
        self.awaiting.remove(&id);
        self.ended.insert(id, false);
        Ok(self.wake_dependents(id, now))
    }

    /// The allocation `job` runs on, if it runs.
    pub fn allocation_of(&self, job: JobId) -> Option<AllocId> {
        self.running.iter().find(|(_, r)| r.job == job).map(|(&alloc, _)| alloc)
    }

    /// Where a running allocation's tasks are, in the public form.
    pub fn placement(&self, alloc: AllocId) -> Option<Vec<gantry_types::TaskPlacement>> {
        let r = self.running.get(&alloc)?;
        self.engine.placement(alloc, &self.jobs[&r.job].job.compiled)
    }

    /// The spec-level facts about a submitted job: its name, queue and planned length.
    pub fn job(&self, id: JobId) -> Option<&SchedJob> {
        self.jobs.get(&id).map(|e| &e.job)
    }

    /// Stop tracking a running allocation: release it and give back what it held.
    fn stop_running(&mut self, alloc: AllocId, now: u64) -> Option<RunningJob> {
        let ended = self.running.remove(&alloc)?;
        self.engine.release(alloc).expect("a running job's allocation exists");
        self.usage_changing(self.jobs[&ended.job].queue, &ended.demand, now);
        let entry = &self.jobs[&ended.job];
        if let Some(fs) = self.fair.as_mut() {
            fs.stop(entry.queue, ended.held, now);
        }
        if let Some(book) = self.quotas.as_mut() {
            book.refund(entry.queue, &ended.demand);
        }
        if let Some(user) = &entry.job.control.user {
            let used = self.user_running.entry(user.clone()).or_default();
            used.0 -= 1;
            used.1 -= ended.milli;
        }
        if let Some(a) = &entry.job.control.array {
            *self.array_running.get_mut(&a.array).expect("counted at start") -= 1;
        }
        Some(ended)
    }

    /// The job on `alloc` ended at `now`: completed (`ok`) or failed (e.g. stopped at its time
    /// limit). Returns the dependents that became eligible (with their admission) and those
    /// that can now never run; `None` if `alloc` is not running.
    pub fn ended(&mut self, alloc: AllocId, ok: bool, now: u64) -> Option<Vec<(JobId, Admission)>> {
        let ended = self.stop_running(alloc, now)?;
        self.terminating.remove(&alloc);
        let job = ended.job;
        // A job a consolidation was moving that ends in its grace period never restarts: the
        // place its plan kept for it is free for others at once.
        self.awaiting.remove(&job);
        self.ended.insert(job, ok);
        Some(self.wake_dependents(job, now))
    }

    /// Dependents of `job` (just ended) that became eligible, or can now never run.
    fn wake_dependents(&mut self, job: JobId, now: u64) -> Vec<(JobId, Admission)> {
        let woken: Vec<JobId> = self
            .waiting_on_deps
            .iter()
            .copied()
            .filter(|w| self.jobs[w].job.after.iter().any(|&(_, d)| d == job))
            .collect();
        let mut out = Vec::new();
        for w in woken {
            if self.never_satisfiable(w) && self.config.keep_unsatisfiable {
                // It stays waiting, saying why it never can start, until cancelled.
            } else if self.never_satisfiable(w) {
                self.waiting_on_deps.remove(&w);
                out.push((w, Admission::Never));
            } else if self.dependencies_met(w) {
                self.waiting_on_deps.remove(&w);
                self.jobs.get_mut(&w).expect("submitted").eligible_at = now;
                let admission = self.enqueue(w, now);
                out.push((w, admission));
            }
        }
        out
    }

    /// The job on `alloc` was killed (its grace period over): it waits again with its original
    /// eligibility. Returns it, why it was stopped and its admission; `None` if not running.
    pub fn killed(&mut self, alloc: AllocId, now: u64) -> Option<(JobId, &'static str, Admission)> {
        let ended = self.stop_running(alloc, now)?;
        let cause = self.terminating.remove(&alloc).unwrap_or("priority");
        *self.preempted_times.entry(ended.job).or_default() += 1;
        let lost = ended.milli.saturating_mul(now.saturating_sub(ended.started_at));
        let total = self.preempted_lost.entry(ended.job).or_default();
        *total = total.saturating_add(lost);
        if cause != "priority" {
            self.reclaimed.insert(ended.job);
        }
        let since = self.jobs[&ended.job].eligible_at;
        let admission = self.enqueue(ended.job, since);
        Some((ended.job, cause, admission))
    }

    /// Take over a job that was already running when this scheduler was built (a restarted
    /// controller re-adopting it): it takes exactly its recorded `placement` again (refused if
    /// that is not free) and holds it since `started_at`, counted in fair share, quotas and
    /// limits as if this scheduler had started it. Returns its allocation.
    pub fn adopt(
        &mut self,
        id: JobId,
        job: SchedJob,
        placement: &[gantry_types::TaskPlacement],
        started_at: u64,
        now: u64,
    ) -> Result<AllocId, SchedError> {
        let queue = self.admissible(id, &job)?;
        let alloc = self
            .engine
            .place_recorded(&job.compiled, placement)
            .ok_or_else(|| SchedError::PlacementTaken { job: job.name.clone() })?;
        self.jobs
            .insert(id, Box::new(Entry { shape: pass::shape_of(&job.compiled), job, queue, eligible_at: started_at }));
        let milli: u64 = self
            .engine
            .allocations()
            .get(&alloc)
            .map(|a| a.tasks.iter().map(|t| t.milli(self.engine.state()) as u64).sum())
            .ok_or(SchedError::Engine(crate::EngineError::UnknownAllocation(alloc)))?;
        let demand = self.engine.quota_demand(alloc).unwrap_or_default();
        // Counted from now (fair share's clock only moves forward); planning knows its real start.
        self.start(id, alloc, milli, demand, now);
        let planned = self.jobs[&id].job.planned_length_s;
        let running = self.running.get_mut(&alloc).expect("just started");
        running.started_at = started_at.min(now);
        running.limit_end = planned.map(|d| running.started_at + d);
        Ok(alloc)
    }

    /// Record `job` started on `alloc` at `now` (every check passed).
    fn start(&mut self, job: JobId, alloc: AllocId, milli: u64, demand: Vec<(Flavor, u64)>, now: u64) {
        self.entitled_started(job, now);
        let preemptor = self.awaiting.remove(&job).is_some();
        let protected_since = preemptor.then_some(now);
        let restarted_since = self.reclaimed.remove(&job).then_some(now);
        self.promises.retain(|&p| p != job);
        self.usage_changing(self.jobs[&job].queue, &demand, now);
        let entry = &self.jobs[&job];
        let q = entry.queue;
        let held = self.engine.held(alloc, &self.billing).expect("just placed");
        let charged = self.promise_charges.remove(&job);
        if let Some(fs) = self.fair.as_mut() {
            if let Some((_, amount)) = charged {
                fs.stop(q, amount, now);
            }
            fs.start(q, held, now);
        }
        if let Some(book) = self.quotas.as_mut() {
            book.charge(q, &demand);
        }
        let broken = self.broken_now.remove(&job).is_some();
        if let Some(p) = self.promise_at.remove(&job)
            && now > p
        {
            self.stats.late.insert(job);
            if !broken {
                self.stats.broken_without_cause.insert(job);
            }
        }
        if let Some(user) = &entry.job.control.user {
            let used = self.user_running.entry(user.clone()).or_default();
            used.0 += 1;
            used.1 += milli;
        }
        if let Some(a) = &entry.job.control.array {
            *self.array_running.entry(a.array.clone()).or_default() += 1;
        }
        let waited = now - entry.eligible_at;
        self.running.insert(
            alloc,
            RunningJob {
                job,
                started_at: now,
                limit_end: entry.job.planned_length_s.map(|d| now + d),
                started_starved: self.starvation_s.is_some_and(|s| waited >= s),
                protected_since,
                restarted_since,
                milli,
                held,
                demand,
            },
        );
    }

    /// Job counts by the kind of their pending reason (`PendingReason::kind`), as the last
    /// cycle left them; held jobs and jobs waiting on dependencies included.
    pub fn waiting_by_kind(&self) -> BTreeMap<String, u64> {
        // Every job with a reason waits in a queue (`dequeue` forgets it): the rest of the
        // queued jobs have none yet.
        let mut out = self.pending.kinds();
        let unexplained = (self.pending.len() - self.pending.explained()) as u64;
        if unexplained > 0 {
            *out.entry("queue-order".into()).or_default() += unexplained;
        }
        if !self.waiting_on_deps.is_empty() {
            out.insert("dependency".into(), self.waiting_on_deps.len() as u64);
        }
        if !self.held.is_empty() {
            out.insert("held".into(), self.held.len() as u64);
        }
        out
    }

    /// Every job not running or done, with its reason and estimate (what `why` shows),
    /// oldest first. A job short of resources also gets what each node class has free now.
    pub fn pending(&self) -> Vec<PendingJob> {
        self.pending_by_id().into_iter().map(|(_, p)| p).collect()
    }

    /// [`Scheduler::pending`] with each job's id.
    pub fn pending_by_id(&self) -> Vec<(JobId, PendingJob)> {
        let mut ids: Vec<JobId> = self.pending.orders().flat_map(|set| set.iter().map(|&(_, _, job)| job)).collect();
        ids.extend(&self.waiting_on_deps);
        ids.extend(&self.held);
        let mut out: Vec<(JobId, PendingJob)> =
            ids.into_iter().filter_map(|id| self.why(id).map(|p| (id, p))).collect();
        out.sort_by(|a, b| (a.1.since_s, &a.1.job, a.0).cmp(&(b.1.since_s, &b.1.job, b.0)));
        out
    }

    /// Why job `id` waits, and its estimate; `None` if it is not waiting.
    /// Each waiting job's reason and estimated start as the last cycle left them, by id.
    pub fn reasons(&self) -> impl Iterator<Item = (JobId, &PendingReason, Option<u64>)> + '_ {
        self.pending.reasons().map(|(id, reason)| (id, &**reason, self.estimate.get(&id).copied()))
    }

    /// A fingerprint of every waiting job's reason and estimated start, kept up to date as
    /// they change (reading it costs nothing): what a replay of the live log compares after
    /// each cycle.
    pub fn reasons_digest(&self) -> u64 {
        self.pending.reasons_digest() ^ self.estimate.digest().rotate_left(1)
    }

    /// How job `id` waits, if it does: what [`Scheduler::why`] explains and
    /// [`Scheduler::why_category`] counts, decided once for both.
    fn waiting(&self, id: JobId) -> Option<Waiting> {
        let e = self.jobs.get(&id)?;
        if self.held.contains(&id) {
            return Some(Waiting::Held);
        }
        if self.waiting_on_deps.contains(&id) {
            return Some(if self.never_satisfiable(id) { Waiting::NeverSatisfiable } else { Waiting::OnDependencies });
        }
        let key = (Reverse(self.priority(id)), e.eligible_at, id);
        self.pending.contains(e.queue, &key).then_some(Waiting::Queued)
    }

    /// The category of [`Scheduler::why`]'s reason for job `id` ([`PendingReason::category`]),
    /// without building the reason: what metrics count waiting jobs by.
    pub fn why_category(&self, id: JobId) -> Option<&'static str> {
        Some(match self.waiting(id)? {
            Waiting::Held => "held",
            Waiting::NeverSatisfiable => "dependency-never-satisfied",
            Waiting::OnDependencies => "dependency",
            Waiting::Queued => self.reason_of(id).map_or("queue-order", |r| r.category()),
        })
    }

    pub fn why(&self, id: JobId) -> Option<PendingJob> {
        let waiting = self.waiting(id)?;
        let e = self.jobs.get(&id)?;
        let entry = |reason: PendingReason, estimate_s: Option<u64>| PendingJob {
            job: e.job.name.clone(),
            queue: e.job.queue.clone(),
            since_s: e.eligible_at,
            reason,
            estimate_s,
        };
        if waiting == Waiting::Held {
            return Some(entry(PendingReason::Held, None));
        }
        if waiting == Waiting::NeverSatisfiable {
            let failed: Vec<String> = e
                .job
                .after
                .iter()
                .filter(|&&(kind, k)| {
                    matches!(
                        (kind, self.ended.get(&k)),
                        (DependencyKind::AfterOk, Some(false)) | (DependencyKind::AfterNotOk, Some(true))
                    )
                })
                .map(|(_, k)| self.jobs.get(k).map_or_else(|| format!("#{k}"), |d| d.job.name.clone()))
                .collect();
            return Some(entry(PendingReason::DependencyNeverSatisfied { failed }, None));
        }
        if waiting == Waiting::OnDependencies {
            let waiting_on: Vec<String> = e
                .job
                .after
                .iter()
                .filter(|(_, k)| !self.ended.contains_key(k))
                .map(|(_, k)| self.jobs.get(k).map_or_else(|| format!("#{k}"), |d| d.job.name.clone()))
                .collect();
            return Some(entry(PendingReason::Dependency { waiting_on }, None));
        }
        let mut reason = self.reason_of(id).map_or(PendingReason::QueueOrder, |r| (**r).clone());
        if let PendingReason::Resources { by_class, .. } = &mut reason {
            *by_class = self.engine.free_by_class(&e.job.compiled);
        }
        Some(entry(reason, self.estimate.get(&id).copied()))
    }
}
