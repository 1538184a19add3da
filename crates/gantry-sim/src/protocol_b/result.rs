//! What a replay measures, and the small statistics behind it.

use serde::Serialize;
use std::collections::BTreeMap;

/// Points of the time series (evenly spaced over the trace's span).
pub const SAMPLES: usize = 200;

/// One point of the time series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub time_s: u64,
    /// GPU compute handed out, % of capacity.
    pub alloc_pct: f64,
    /// GPU compute actually used (simulated), % of capacity.
    pub util_pct: f64,
    pub running: u64,
    pub queued: u64,
    /// GPUs (milli-GPU / 1000) each queue (tenant) holds, in the order of
    /// [`ReplayResult::queues`].
    pub held_gpus_by_queue: Vec<f64>,
}

/// One thing that happened to a job in a time replay (`--decisions-out`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobEvent {
    pub time_s: u64,
    /// `start`, `end` (completed), `time-limit` (stopped at its time limit), `stop` (signalled
    /// for a preemptor; killed at `kill_at_s` unless it ends first), `kill` (its grace period
    /// over: its work is lost and it waits again), `move` (an operator moved it elsewhere; it
    /// keeps running), `give-up` (its patience ran out before it started).
    pub event: &'static str,
    /// The job's position in the replay's list of jobs.
    #[serde(skip)]
    pub index: usize,
    pub job: String,
    pub queue: String,
    /// Milli-GPU it holds (start, end, stop, kill).
    pub milli: u64,
    /// For `stop`: the preemptor and its right (`priority`, `guarantee`, `starvation`).
    pub preemptor: Option<String>,
    pub cause: Option<&'static str>,
    pub kill_at_s: Option<u64>,
}

/// Queueing delay of one queue's started jobs, seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Waits {
    pub jobs: u64,
    pub p50_s: u64,
    pub p90_s: u64,
    pub p99_s: u64,
    pub max_s: u64,
}

impl Waits {
    pub fn of(sorted: &[u64]) -> Waits {
        Waits {
            jobs: sorted.len() as u64,
            p50_s: percentile(sorted, 0.50),
            p90_s: percentile(sorted, 0.90),
            p99_s: percentile(sorted, 0.99),
            max_s: sorted.last().copied().unwrap_or(0),
        }
    }
}

/// A promise of a reserved start that a higher right pushed back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokenPromise {
    pub job: String,
    pub promised_s: u64,
    /// The job that took the capacity, and its right (`priority`, `guarantee`,
    /// `starvation`, `queue-order` for an earlier promise of the same queue, or `own-limit`
    /// for the job's own quota or per-user limit).
    pub by: String,
    pub right: &'static str,
}

/// Outcome of a time replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayResult {
    pub policy: String,
    /// Queue order: `fifo` or `fair-share`.
    pub order: String,
    /// Backfill: `off`, `greedy` or `reserve`, and reservations per pass.
    pub backfill: String,
    pub reserve_depth: u64,
    /// Where the replay was stopped (`until`), if it was.
    pub stopped_at_s: Option<u64>,
    /// Jobs that were given a reserved start, and those that started after the first start
    /// they were promised (with FIFO order and exact durations, backfill must keep this 0).
    pub reserved: u64,
    pub reserved_late: u64,
    /// Promises pushed back by a higher right (who and which), and jobs that started later
    /// than promised with no such right on record (a scheduler bug: tests hold it at 0).
    pub promises_broken: Vec<BrokenPromise>,
    pub reserved_late_without_cause: Vec<String>,
    /// Jobs that were refused at least once because their queue's quota (or an ancestor's)
    /// would have been exceeded.
    pub quota_waited: u64,
    /// Jobs refused at least once by a per-user limit.
    pub user_limit_waited: u64,
    /// Running jobs stopped for another (`preempt`), in all and by the preemptor's right
    /// (`priority`, `guarantee`, `starvation`), and the GPU time they had run when stopped
    /// (lost: no checkpoints are modelled).
    pub preemptions: u64,
    pub preemptions_by_right: BTreeMap<String, u64>,
    pub preempted_gpu_s_lost: f64,
    /// Most times one job was preempted.
    pub preemptions_per_job_max: u64,
    /// Longest time a job waited while its queue's guarantee had room for it (the number a
    /// guarantee is judged by: within one cycle plus its victims' grace period), seconds; and
    /// per queue. `None` without guarantees.
    pub guarantee_wait_max_s: Option<u64>,
    pub guarantee_wait_max_by_queue_s: BTreeMap<String, u64>,
    /// Per queue, the longest stretch it held no GPU while jobs of its waited (what
    /// fair-share reclaim bounds), seconds.
    pub zero_gpus_waiting_max_by_queue_s: BTreeMap<String, u64>,
    /// Jobs stopped at their time limit before their work was done (they count as failed
    /// for dependencies), and jobs held (never started: nothing releases a hold in a replay).
    pub time_limit_ended: u64,
    pub held: u64,
    /// Jobs dropped because a dependency can never be met (afternotok on a job that ended:
    /// failures are not modelled; or a dependency on a job not in the replay), and jobs still
    /// waiting on dependencies at the end.
    pub dependency_never: u64,
    pub waiting_on_dependencies: u64,
    /// Jobs whose patience ran out before they started (`SimJob::patience_s`; cancelled).
    pub gave_up: u64,
    /// Job-seconds spent waiting, by why (as of each scheduling pass): the kind of the
    /// job's pending reason (`PendingReason::kind`: `resources: <engine reason>`, `quota`,
    /// `user-limit`, `array-throttle`, `reservation`, `queue-order`, `dependency`, `held`,
    /// `preempting`).
    pub wait_job_s_by_reason: BTreeMap<String, u64>,
    pub seed: u64,
    /// Jobs in the trace (pods, for the Alibaba trace).
    pub pods: usize,
    pub started: u64,
    /// Pods still queued when the trace ended.
    pub never_started: u64,
    /// Queueing delay of started pods, seconds.
    pub delay_p50_s: u64,
    pub delay_p90_s: u64,
    pub delay_p99_s: u64,
    /// Longest wait of a started job, seconds; and per queue (tenant).
    pub delay_max_s: u64,
    pub delay_max_by_queue_s: BTreeMap<String, u64>,
    /// Queueing delay percentiles per queue (tenant).
    pub waits_by_queue: BTreeMap<String, Waits>,
    /// The tenants in the order of each sample's `held_gpus_by_queue`.
    pub queues: Vec<String>,
    /// GPUs in the fleet (what `held_gpus_by_queue` is a share of).
    pub fleet_gpus: u64,
    /// Time-averaged allocation and utilization between the first and the last arrival, %.
    pub mean_alloc_pct: f64,
    pub mean_util_pct: f64,
    /// Highest allocation reached, %.
    pub peak_alloc_pct: f64,
    /// Each tenant's share of the GPU time allocated, %.
    pub tenant_gpu_share_pct: BTreeMap<String, f64>,
    /// Jain's fairness index of GPU time among the tenants wanting GPUs, per window of 1/20 of
    /// the arrival span (windows with at least two such tenants): mean and lowest.
    pub jain_mean: Option<f64>,
    pub jain_min: Option<f64>,
    /// The same, with each tenant's GPU time divided by its entitlement (its queue's weight
    /// as a share of its siblings', times its parent's, down the tree): 1 when every tenant
    /// got GPU time in proportion to its weight. FIFO order weighs tenants equally.
    pub jain_weighted_mean: Option<f64>,
    pub jain_weighted_min: Option<f64>,
    /// Jain's index per window of each tenant's GPU time over its max-min entitlement: the
    /// window's GPU time shared by weight, none given more than it asked for (running and
    /// waiting), the rest shared again. 1 when every tenant got what a weighted max-min fair
    /// split would give it; unlike `jain_weighted_*`, a tenant that wanted little is not
    /// counted as short-changed.
    pub jain_entitled_mean: Option<f64>,
    pub jain_entitled_min: Option<f64>,
    /// Every job waiting when the replay ended or was stopped, with its reason and, where a
    /// reservation was made, its estimated start (what `why` shows).
    pub pending: Vec<gantry_types::PendingJob>,
    pub series: Vec<Sample>,
    /// Every start, end, stop and kill (`--decisions-out`; not in `--json`).
    #[serde(skip)]
    pub events: Vec<JobEvent>,
}

/// Windows over the arrival span in which Jain's fairness index of GPU time is taken.
pub const JAIN_WINDOWS: usize = 20;

/// Jain's index of `x`: 1 when all are equal, 1/n when one has everything.
pub(super) fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

pub(super) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
