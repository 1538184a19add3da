//! The replay loop: events on a virtual clock, scheduling passes, and the measurements.
//!
//! [`replay`] drives a [`Replay`]: each event (an arrival, a departure, the kill at the end of
//! a grace period) changes the state, then one scheduling pass (`pass.rs`) starts what it can
//! and, with preemption on, plans stops for jobs with a right to capacity (`rights.rs`).

use super::SimJob;
use super::options::{Order, ReplayOptions};
use super::result::{JAIN_WINDOWS, ReplayResult, SAMPLES, Sample, jain, percentile};
use gantry_engine::backfill::Reservation;
use gantry_engine::fairshare::{FairShare, Resources};
use gantry_engine::quota::QuotaBook;
use gantry_engine::rng::mix;
use gantry_engine::{AllocId, Engine};
use gantry_types::{DependencyKind, Flavor, PendingJob, PendingReason};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// A running pod ends (ordered before arrivals at the same second: capacity first).
    Depart {
        job: usize,
        alloc: AllocId,
    },
    /// The grace period of a preempted job is over: it is killed and waits again.
    Kill {
        job: usize,
        alloc: AllocId,
    },
    Arrive {
        job: usize,
    },
    /// A pending job reaches the starvation bound (with preemption on): a pass runs then, so
    /// the guard acts on time even when nothing else happens.
    Starving {
        job: usize,
    },
}

/// Simulated utilization of a job's allocation where the trace gives none: a seeded draw in
/// [0.2, 1.0), stable per job.
fn drawn_utilization(seed: u64, job: usize) -> f64 {
    0.2 + 0.8 * (mix(seed ^ (job as u64).wrapping_mul(0x9E37_79B9)) >> 11) as f64 / (1u64 << 53) as f64
}

/// A running allocation: whose, since when, until when, and what it holds.
pub(super) struct RunningJob {
    pub(super) job: usize,
    pub(super) started_at: u64,
    /// When its departure is scheduled.
    pub(super) planned_end: u64,
    /// Its end as planning may count on: its time limit, else (an oracle) its duration;
    /// `None`: neither, it runs to the end.
    pub(super) limit_end: Option<u64>,
    /// It is stopped at its time limit (before its work was done).
    pub(super) hits_limit: bool,
    /// It had waited past the starvation bound when it started.
    pub(super) started_starved: bool,
    /// Milli-GPU granted, fair share's units, and quota demand.
    pub(super) milli: u64,
    pub(super) held: Resources,
    pub(super) demand: Vec<(Flavor, u64)>,
}

/// Everything a replay tracks. Fields are grouped: the jobs and their clock, the queues,
/// what runs, what waits and why, and the measurements.
pub(super) struct Replay<'a> {
    pub(super) engine: &'a mut Engine,
    pub(super) jobs: &'a [SimJob],
    pub(super) options: &'a ReplayOptions,
    pub(super) seed: u64,
    /// The replay clock's landmarks.
    start: u64,
    last_arrival: u64,
    pub(super) end: u64,
    step: u64,
    capacity: f64,

    // Queues: fair share (or one FIFO), each job's queue, quotas, per-user limits.
    pub(super) fair: Option<FairShare>,
    pub(super) queue_of: Vec<usize>,
    pub(super) queue_count: usize,
    pub(super) billing: Vec<(String, u32)>,
    pub(super) quotas: Option<QuotaBook>,
    pub(super) starvation_s: Option<u64>,
    /// Per user: running jobs and milli-GPU held.
    pub(super) user_running: BTreeMap<String, (u32, u64)>,
    pub(super) array_running: BTreeMap<String, u32>,

    // Waiting: per queue, pending jobs by (priority high first, eligible since, file order).
    pub(super) pending: Vec<BTreeSet<(Reverse<i32>, u64, usize)>>,
    pub(super) pending_count: usize,
    pub(super) held_jobs: BTreeSet<usize>,
    pub(super) eligible_at: Vec<u64>,
    pub(super) deps: Vec<Vec<(DependencyKind, usize)>>,
    /// How each job ended: `Some(true)` completed, `Some(false)` failed (its time limit).
    pub(super) ended_ok: Vec<Option<bool>>,
    pub(super) waiting_on_deps: BTreeSet<usize>,
    pub(super) unknown_dependency: BTreeSet<usize>,
    /// Why each pending job waits (as of the last pass) and its estimated start.
    pub(super) reason: BTreeMap<usize, PendingReason>,
    pub(super) estimate: BTreeMap<usize, u64>,

    // Running.
    pub(super) events: BinaryHeap<Reverse<(u64, Event)>>,
    pub(super) running_jobs: BTreeMap<AllocId, RunningJob>,
    pub(super) ever_started: BTreeSet<usize>,
    /// Preemption: allocations in their grace period, and the jobs waiting for them (with
    /// the victims they wait for and when the last grace period ends).
    pub(super) terminating: BTreeSet<AllocId>,
    pub(super) awaiting: BTreeMap<usize, (Vec<AllocId>, u64)>,
    /// The depth-1 reservation of the previous pass (reused while it still holds).
    pub(super) last_reservation: Option<(usize, u64)>,
    /// Depth > 1: the last pass's reservations.
    pub(super) plans: Vec<(usize, Reservation)>,

    // Measurements.
    pub(super) started: u64,
    pub(super) delays: Vec<u64>,
    pub(super) delay_max_by_queue: BTreeMap<String, u64>,
    pub(super) promised: BTreeMap<usize, u64>,
    pub(super) late: u64,
    pub(super) quota_waited: BTreeSet<usize>,
    pub(super) user_limit_waited: BTreeSet<usize>,
    pub(super) preemptions_by_right: BTreeMap<String, u64>,
    /// Why each terminating allocation is being stopped.
    pub(super) stop_cause: BTreeMap<AllocId, &'static str>,
    lost_gpu_s: f64,
    time_limit_ended: u64,
    dependency_never: u64,
    pub(super) running_util: f64,
    tenants: Vec<String>,
    tenant_of: Vec<usize>,
    pub(super) tenant_gpu_s: BTreeMap<String, f64>,
    pub(super) tenant_running: Vec<u64>,
    pub(super) tenant_pending: Vec<usize>,
    window_s: f64,
    window_gpu_s: Vec<Vec<f64>>,
    window_active: Vec<Vec<bool>>,
    waiting_now: BTreeMap<String, u64>,
    wait_job_s: BTreeMap<String, u64>,
    series: Vec<Sample>,
    area_alloc: f64,
    area_util: f64,
    last_t: u64,
    peak_alloc: f64,
    next_sample: u64,
}

/// The replay loop over `engine` (empty at the start). Same jobs, engine, order and seed ⇒
/// same result. Fails only if a job's queue is not in the fair-share tree.
pub fn replay(
    engine: &mut Engine,
    jobs: &[SimJob],
    seed: u64,
    options: &ReplayOptions,
) -> Result<ReplayResult, String> {
    if options.preempt && options.order == Order::Fifo {
        return Err("preemption needs fair-share order (FIFO ignores priority)".into());
    }
    let mut sim = Replay::new(engine, jobs, seed, options)?;
    let mut stopped_at = None;
    while let Some(Reverse((t, event))) = sim.events.pop() {
        if options.until_s.is_some_and(|until| t > until) {
            stopped_at = options.until_s;
            break;
        }
        sim.integrate(t);
        match event {
            Event::Arrive { job } => sim.arrive(job, t),
            Event::Depart { job, alloc } => sim.end(job, alloc, t, false),
            Event::Kill { job, alloc } => sim.end(job, alloc, t, true),
            Event::Starving { .. } => {}
        }
        let refused = sim.pass(t);
        sim.preempt(t, &refused);
        sim.record_waiting(t);
    }
    if let Some(until) = stopped_at {
        sim.integrate(until);
    }
    Ok(sim.finish(stopped_at))
}

impl<'a> Replay<'a> {
    fn new(engine: &'a mut Engine, jobs: &'a [SimJob], seed: u64, options: &'a ReplayOptions) -> Result<Self, String> {
        let compress = options.compress.max(1);
        let capacity = (engine.state().gpus.len() as f64 * 1000.0).max(1.0);
        let origin = jobs.iter().map(|j| j.arrival_s).min().unwrap_or(0);
        let arrival: Vec<u64> = jobs.iter().map(|j| origin + (j.arrival_s - origin) / compress).collect();
        let start = origin;
        // Means are taken over the arrival window (or up to `until`): long-running jobs are
        // censored at the trace's end, and averaging over their tail would dilute the busy
        // period to nothing.
        let mut last_arrival = arrival.iter().copied().max().unwrap_or(start).max(start + 1);
        if let Some(until) = options.until_s {
            last_arrival = last_arrival.min(until.max(start + 1));
        }
        let end = jobs
            .iter()
            .zip(&arrival)
            .map(|(j, &a)| a + j.duration_s.unwrap_or(0))
            .max()
            .unwrap_or(start)
            .max(start + 1);
        let step = ((last_arrival - start) / SAMPLES as u64).max(1);

        let fair = match &options.order {
            Order::Fifo => None,
            Order::FairShare(tree) => Some(FairShare::new(tree.clone(), engine.capacity(&tree.billing_milli))),
        };
        let queue_of: Vec<usize> = match &fair {
            None => vec![0; jobs.len()],
            Some(fs) => jobs
                .iter()
                .map(|j| {
                    fs.tree().find(&j.tenant).ok_or_else(|| format!("job {:?}: unknown queue {:?}", j.name, j.tenant))
                })
                .collect::<Result<_, _>>()?,
        };
        let queue_count = fair.as_ref().map_or(1, |fs| fs.tree().queues.len());
        let billing = fair.as_ref().map(|fs| fs.tree().billing_milli.clone()).unwrap_or_default();
        let quotas = match &options.order {
            Order::FairShare(tree) => {
                Some(QuotaBook::new(tree.clone()).with_capacity(engine.flavor_capacity())).filter(QuotaBook::has_quotas)
            }
            Order::Fifo => None,
        };
        let starvation_s = match &options.order {
            Order::FairShare(tree) => Some(tree.starvation_s),
            Order::Fifo => None,
        };
        let mut tenants: Vec<String> = jobs.iter().map(|j| j.tenant.clone()).collect();
        tenants.sort();
        tenants.dedup();
        let tenant_of: Vec<usize> =
            jobs.iter().map(|j| tenants.binary_search(&j.tenant).expect("every tenant is listed")).collect();

        // Dependencies by index: a name stands for a job, or for every element of an array.
        let mut index: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, j) in jobs.iter().enumerate() {
            index.entry(j.name.as_str()).or_default().push(i);
            if let Some(a) = &j.control.array {
                index.entry(a.array.as_str()).or_default().push(i);
            }
        }
        let mut unknown_dependency = BTreeSet::new();
        let deps: Vec<Vec<(DependencyKind, usize)>> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let mut list = Vec::new();
                for d in &j.after {
                    match index.get(d.job.as_str()) {
                        Some(targets) => list.extend(targets.iter().map(|&k| (d.kind, k))),
                        None => {
                            unknown_dependency.insert(i);
                        }
                    }
                }
                list
            })
            .collect();

        let mut events = BinaryHeap::new();
        for (i, &a) in arrival.iter().enumerate() {
            events.push(Reverse((a, Event::Arrive { job: i })));
        }
        let window_s = ((last_arrival - start) as f64 / JAIN_WINDOWS as f64).max(1.0);
        Ok(Replay {
            eligible_at: arrival,
            start,
            last_arrival,
            end,
            step,
            capacity,
            fair,
            queue_of,
            queue_count,
            billing,
            quotas,
            starvation_s,
            user_running: BTreeMap::new(),
            array_running: BTreeMap::new(),
            pending: vec![BTreeSet::new(); queue_count],
            pending_count: 0,
            held_jobs: BTreeSet::new(),
            deps,
            ended_ok: vec![None; jobs.len()],
            waiting_on_deps: BTreeSet::new(),
            unknown_dependency,
            reason: BTreeMap::new(),
            estimate: BTreeMap::new(),
            events,
            running_jobs: BTreeMap::new(),
            ever_started: BTreeSet::new(),
            terminating: BTreeSet::new(),
            awaiting: BTreeMap::new(),
            last_reservation: None,
            plans: Vec::new(),
            started: 0,
            delays: Vec::new(),
            delay_max_by_queue: BTreeMap::new(),
            promised: BTreeMap::new(),
            late: 0,
            quota_waited: BTreeSet::new(),
            user_limit_waited: BTreeSet::new(),
            preemptions_by_right: BTreeMap::new(),
            stop_cause: BTreeMap::new(),
            lost_gpu_s: 0.0,
            time_limit_ended: 0,
            dependency_never: 0,
            running_util: 0.0,
            tenant_running: vec![0; tenants.len()],
            tenant_pending: vec![0; tenants.len()],
            window_gpu_s: vec![vec![0.0; tenants.len()]; JAIN_WINDOWS],
            window_active: vec![vec![false; tenants.len()]; JAIN_WINDOWS],
            tenants,
            tenant_of,
            tenant_gpu_s: BTreeMap::new(),
            window_s,
            waiting_now: BTreeMap::new(),
            wait_job_s: BTreeMap::new(),
            series: Vec::with_capacity(SAMPLES + 1),
            area_alloc: 0.0,
            area_util: 0.0,
            last_t: start,
            peak_alloc: 0.0,
            next_sample: start,
            engine,
            jobs,
            options,
            seed,
        })
    }

    pub(super) fn utilization(&self, job: usize) -> f64 {
        self.jobs[job].utilization.unwrap_or_else(|| drawn_utilization(self.seed, job))
    }

    /// A job's priority as the order sees it (FIFO ignores priority).
    pub(super) fn priority(&self, job: usize) -> i32 {
        if self.fair.is_some() { self.jobs[job].priority } else { 0 }
    }

    /// Integrate the state that held until `t`, and sample the series.
    fn integrate(&mut self, t: u64) {
        let (start, last_arrival) = (self.start, self.last_arrival);
        let alloc_now = self.engine.state().used_milli() as f64;
        self.peak_alloc = self.peak_alloc.max(alloc_now);
        let counted = t.min(last_arrival).saturating_sub(self.last_t.min(last_arrival)) as f64;
        self.area_alloc += alloc_now * counted;
        self.area_util += self.running_util * counted;
        // Per-tenant GPU time, window by window.
        let (mut from, to) = ((self.last_t.min(last_arrival) - start) as f64, (t.min(last_arrival) - start) as f64);
        while from < to {
            let w = ((from / self.window_s) as usize).min(JAIN_WINDOWS - 1);
            let until = (((w + 1) as f64) * self.window_s).min(to);
            for (k, &milli) in self.tenant_running.iter().enumerate() {
                self.window_gpu_s[w][k] += milli as f64 / 1000.0 * (until - from);
            }
            from = if until > from { until } else { to };
        }
        while self.next_sample <= t && self.series.len() <= SAMPLES {
            self.series.push(Sample {
                time_s: self.next_sample,
                alloc_pct: alloc_now / self.capacity * 100.0,
                util_pct: self.running_util / self.capacity * 100.0,
                running: self.running_jobs.len() as u64,
                queued: self.pending_count as u64,
            });
            self.next_sample += self.step;
        }
        for (reason, &n) in &self.waiting_now {
            *self.wait_job_s.entry(reason.clone()).or_default() += n * (t - self.last_t);
        }
        self.last_t = t;
    }

    /// Can this dependency list never be met? (A job it names is not in the replay, or ended
    /// the wrong way: afterok on a failure, afternotok on a success.)
    fn never_satisfiable(&self, job: usize) -> bool {
        self.unknown_dependency.contains(&job)
            || self.deps[job].iter().any(|&(kind, k)| {
                matches!(
                    (kind, self.ended_ok[k]),
                    (DependencyKind::AfterOk, Some(false)) | (DependencyKind::AfterNotOk, Some(true))
                )
            })
    }

    fn dependencies_met(&self, job: usize) -> bool {
        self.deps[job].iter().all(|&(_, k)| self.ended_ok[k].is_some())
    }

    /// Put `job` in its queue, eligible since `since`.
    fn enqueue(&mut self, job: usize, since: u64) {
        let key = (Reverse(self.priority(job)), since, job);
        self.pending[self.queue_of[job]].insert(key);
        if self.options.preempt
            && let Some(bound) = self.starvation_s
        {
            self.events.push(Reverse((since + bound, Event::Starving { job })));
        }
        self.pending_count += 1;
        self.tenant_pending[self.tenant_of[job]] += 1;
    }

    pub(super) fn dequeue(&mut self, job: usize, priority: i32, since: u64) {
        self.pending[self.queue_of[job]].remove(&(Reverse(priority), since, job));
        self.pending_count -= 1;
        self.tenant_pending[self.tenant_of[job]] -= 1;
        self.reason.remove(&job);
        self.estimate.remove(&job);
    }

    fn arrive(&mut self, job: usize, t: u64) {
        if self.jobs[job].control.hold {
            // Nothing in a replay releases a hold: the job waits to the end, reported.
            self.held_jobs.insert(job);
        } else if self.never_satisfiable(job) {
            self.dependency_never += 1;
        } else if self.dependencies_met(job) {
            self.eligible_at[job] = t;
            self.enqueue(job, t);
        } else {
            self.waiting_on_deps.insert(job);
        }
    }

    /// A running job ends: departed (done, or stopped at its time limit) or killed after its
    /// grace period (it waits again).
    fn end(&mut self, job: usize, alloc: AllocId, t: u64, killed: bool) {
        // A job killed earlier still has its planned departure queued: nothing to do.
        let Some(ended) = self.running_jobs.remove(&alloc) else { return };
        self.engine.release(alloc).expect("a running job's allocation exists");
        self.terminating.remove(&alloc);
        let milli = ended.milli;
        self.running_util -= milli as f64 * self.utilization(job);
        self.tenant_running[self.tenant_of[job]] -= milli;
        if let Some(fs) = self.fair.as_mut() {
            fs.stop(self.queue_of[job], ended.held, t);
        }
        if let Some(book) = self.quotas.as_mut() {
            book.refund(self.queue_of[job], &ended.demand);
        }
        if let Some(user) = &self.jobs[job].control.user {
            let entry = self.user_running.entry(user.clone()).or_default();
            entry.0 -= 1;
            entry.1 -= milli;
        }
        if let Some(a) = &self.jobs[job].control.array {
            *self.array_running.get_mut(&a.array).expect("counted at start") -= 1;
        }
        if killed {
            // Its work is lost (no checkpoints modelled) and it waits again, with its
            // original eligibility; the GPU time it was credited past now is taken back.
            let cause = self.stop_cause.remove(&alloc).unwrap_or("priority");
            *self.preemptions_by_right.entry(cause.to_string()).or_default() += 1;
            self.lost_gpu_s += milli as f64 / 1000.0 * (t - ended.started_at) as f64;
            *self.tenant_gpu_s.entry(self.jobs[job].tenant.clone()).or_default() -=
                milli as f64 / 1000.0 * ended.planned_end.saturating_sub(t) as f64;
            self.enqueue(job, self.eligible_at[job]);
            return;
        }
        // Done; a job stopped at its time limit failed (Slurm's TIMEOUT).
        if ended.hits_limit {
            self.time_limit_ended += 1;
        }
        self.ended_ok[job] = Some(!ended.hits_limit);
        let woken: Vec<usize> =
            self.waiting_on_deps.iter().copied().filter(|&w| self.deps[w].iter().any(|&(_, d)| d == job)).collect();
        for w in woken {
            if self.never_satisfiable(w) {
                self.waiting_on_deps.remove(&w);
                self.dependency_never += 1;
            } else if self.dependencies_met(w) {
                self.waiting_on_deps.remove(&w);
                self.eligible_at[w] = t;
                self.enqueue(w, t);
            }
        }
    }

    /// Start `job` on `alloc` at `t` (every check passed).
    pub(super) fn start(&mut self, job: usize, alloc: AllocId, milli: u64, demand: Vec<(Flavor, u64)>, t: u64) {
        let q = self.queue_of[job];
        self.awaiting.remove(&job);
        let held = self.engine.held(alloc, &self.billing).expect("just placed");
        if let Some(fs) = self.fair.as_mut() {
            fs.start(q, held, t);
        }
        if let Some(book) = self.quotas.as_mut() {
            book.charge(q, &demand);
        }
        if self.promised.get(&job).is_some_and(|&p| t > p) {
            self.late += 1;
        }
        let j = &self.jobs[job];
        let waited = t - self.eligible_at[job];
        // A preempted job that starts again keeps its first wait.
        if self.ever_started.insert(job) {
            self.delays.push(waited);
            let max = self.delay_max_by_queue.entry(j.tenant.clone()).or_default();
            *max = (*max).max(waited);
            self.started += 1;
        }
        self.running_util += milli as f64 * self.utilization(job);
        self.tenant_running[self.tenant_of[job]] += milli;
        if let Some(user) = &j.control.user {
            let entry = self.user_running.entry(user.clone()).or_default();
            entry.0 += 1;
            entry.1 += milli;
        }
        if let Some(a) = &j.control.array {
            *self.array_running.entry(a.array.clone()).or_default() += 1;
        }
        let limit = j.control.time_limit_s;
        let work = j.duration_s.unwrap_or_else(|| self.end.saturating_sub(t));
        let run = limit.map_or(work, |l| l.min(work));
        self.running_jobs.insert(
            alloc,
            RunningJob {
                job,
                started_at: t,
                planned_end: t + run,
                limit_end: limit.or(j.duration_s).map(|d| t + d),
                hits_limit: limit.is_some_and(|l| l < work),
                started_starved: self.starvation_s.is_some_and(|s| waited >= s),
                milli,
                held,
                demand,
            },
        );
        *self.tenant_gpu_s.entry(j.tenant.clone()).or_default() += milli as f64 / 1000.0 * run as f64;
        self.events.push(Reverse((t + run, Event::Depart { job, alloc })));
    }

    /// Why each job still waits, held until the next event.
    fn record_waiting(&mut self, t: u64) {
        self.waiting_now.clear();
        for set in &self.pending {
            for &(_, _, job) in set {
                let kind = self.reason.get(&job).map_or_else(|| "queue-order".to_string(), PendingReason::kind);
                *self.waiting_now.entry(kind).or_default() += 1;
            }
        }
        if !self.waiting_on_deps.is_empty() {
            self.waiting_now.insert("dependency".into(), self.waiting_on_deps.len() as u64);
        }
        if !self.held_jobs.is_empty() {
            self.waiting_now.insert("held".into(), self.held_jobs.len() as u64);
        }
        // Who wanted GPUs in this window (waiting or holding).
        if t < self.last_arrival {
            let w = (((t - self.start) as f64 / self.window_s) as usize).min(JAIN_WINDOWS - 1);
            for k in 0..self.tenants.len() {
                self.window_active[w][k] |= self.tenant_pending[k] > 0 || self.tenant_running[k] > 0;
            }
        }
    }

    /// Every job not running or done, with its reason and estimate (what `why` shows).
    fn explain(&self) -> Vec<PendingJob> {
        let mut out = Vec::new();
        let entry = |job: usize, reason: PendingReason, estimate_s: Option<u64>| PendingJob {
            job: self.jobs[job].name.clone(),
            queue: self.jobs[job].tenant.clone(),
            since_s: self.eligible_at[job],
            reason,
            estimate_s,
        };
        for set in &self.pending {
            for &(_, _, job) in set {
                let reason = self.reason.get(&job).cloned().unwrap_or(PendingReason::QueueOrder);
                out.push(entry(job, reason, self.estimate.get(&job).copied()));
            }
        }
        for &job in &self.waiting_on_deps {
            let waiting_on: Vec<String> = self.deps[job]
                .iter()
                .filter(|&&(_, k)| self.ended_ok[k].is_none())
                .map(|&(_, k)| self.jobs[k].name.clone())
                .collect();
            out.push(entry(job, PendingReason::Dependency { waiting_on }, None));
        }
        for &job in &self.held_jobs {
            out.push(entry(job, PendingReason::Held, None));
        }
        out.sort_by(|a, b| (a.since_s, &a.job).cmp(&(b.since_s, &b.job)));
        out
    }

    fn finish(mut self, stopped_at: Option<u64>) -> ReplayResult {
        let span = (self.last_arrival - self.start) as f64;
        self.delays.sort_unstable();
        let total_gpu_s: f64 = self.tenant_gpu_s.values().sum();
        let jains: Vec<f64> = (0..JAIN_WINDOWS)
            .filter_map(|w| {
                let x: Vec<f64> = (0..self.tenants.len())
                    .filter(|&k| self.window_active[w][k])
                    .map(|k| self.window_gpu_s[w][k])
                    .collect();
                if x.len() < 2 { None } else { jain(&x) }
            })
            .collect();
        let pending = self.explain();
        let delays = &self.delays;
        ReplayResult {
            policy: self.engine.config().policy.name().to_string(),
            order: self.options.order.name().to_string(),
            backfill: self.options.backfill.name(),
            reserve_depth: self.options.reserve_depth as u64,
            stopped_at_s: stopped_at,
            reserved: self.promised.len() as u64,
            reserved_late: self.late,
            quota_waited: self.quota_waited.len() as u64,
            user_limit_waited: self.user_limit_waited.len() as u64,
            preemptions: self.preemptions_by_right.values().sum(),
            preemptions_by_right: self.preemptions_by_right,
            preempted_gpu_s_lost: self.lost_gpu_s,
            time_limit_ended: self.time_limit_ended,
            held: self.held_jobs.len() as u64,
            dependency_never: self.dependency_never,
            waiting_on_dependencies: self.waiting_on_deps.len() as u64,
            wait_job_s_by_reason: self.wait_job_s,
            seed: self.seed,
            pods: self.jobs.len(),
            started: self.started,
            never_started: self.pending_count as u64,
            delay_p50_s: percentile(delays, 0.50),
            delay_p90_s: percentile(delays, 0.90),
            delay_p99_s: percentile(delays, 0.99),
            delay_max_s: delays.last().copied().unwrap_or(0),
            delay_max_by_queue_s: self.delay_max_by_queue,
            mean_alloc_pct: self.area_alloc / span / self.capacity * 100.0,
            mean_util_pct: self.area_util / span / self.capacity * 100.0,
            peak_alloc_pct: self.peak_alloc.max(self.engine.state().used_milli() as f64) / self.capacity * 100.0,
            tenant_gpu_share_pct: self
                .tenant_gpu_s
                .into_iter()
                .map(|(k, v)| (k, if total_gpu_s > 0.0 { v / total_gpu_s * 100.0 } else { 0.0 }))
                .collect(),
            jain_mean: (!jains.is_empty()).then(|| jains.iter().sum::<f64>() / jains.len() as f64),
            jain_min: jains.iter().copied().reduce(f64::min),
            pending,
            series: self.series,
        }
    }
}
