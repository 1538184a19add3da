//! The replay loop: events on a virtual clock drive the engine's [`Scheduler`] — jobs are
//! submitted at their arrival, reported ended at their departure (or at their time limit)
//! and killed when a stop's grace period is over; after the events of each instant one
//! scheduling cycle runs
//! and its decisions are carried out on the clock. A job with a patience that has not
//! started within it gives up (is cancelled). An [`Operator`] (the MIG planner) may change
//! the fleet at the instants it asks for, before that instant's cycle. This module only keeps
//! the clock and measures: allocation and utilization over time, waits, fairness,
//! preemptions.

use super::SimJob;
use super::operator::{Moment, Operator, Run};
use super::options::ReplayOptions;
use super::result::{BrokenPromise, JAIN_WINDOWS, JobEvent, ReplayResult, SAMPLES, Sample, Waits, jain, percentile};
use gantry_engine::rng::mix;
use gantry_engine::sched::{Admission, Decision, JobId, SchedJob, Scheduler, SchedulerConfig};
use gantry_engine::{AllocId, Engine};
use gantry_types::DependencyKind;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
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
    /// A job's patience is over: if it has not started, it gives up.
    GiveUp {
        job: usize,
    },
    /// A pending job reaches the starvation bound (with preemption on): a cycle runs then, so
    /// the guard acts on time even when nothing else happens.
    Starving {
        job: usize,
    },
    /// A running job becomes eligible as a victim again (`Scheduler::next_wake`).
    Wake,
    /// The operator acts (`Operator::next_at`).
    Operate,
}

/// Simulated utilization of a job's allocation where the trace gives none: a seeded draw in
/// [0.2, 1.0), stable per job.
fn drawn_utilization(seed: u64, job: usize) -> f64 {
    0.2 + 0.8 * (mix(seed ^ (job as u64).wrapping_mul(0x9E37_79B9)) >> 11) as f64 / (1u64 << 53) as f64
}

/// What a job is, minus the compiled request (handed to the scheduler at arrival).
struct Meta {
    name: String,
    tenant: String,
    duration_s: Option<u64>,
    utilization: Option<f64>,
    time_limit_s: Option<u64>,
    patience_s: Option<u64>,
    /// Milli-GPU the job asks for (a MIG instance or a memory size counts as a whole GPU).
    demand_milli: u64,
}

/// The clock, the scheduler and the measurements.
struct Replay<'a> {
    scheduler: Scheduler,
    options: &'a ReplayOptions,
    seed: u64,
    meta: Vec<Meta>,
    /// Submitted at arrival (taken out then), with its spec to compile it again if an
    /// operator reconfigured the fleet before it arrived.
    submissions: Vec<Option<(SchedJob, gantry_types::Job)>>,
    start: u64,
    last_arrival: u64,
    end: u64,
    step: u64,
    capacity: f64,
    events: BinaryHeap<Reverse<(u64, Event)>>,
    running: BTreeMap<AllocId, Run>,
    ever_started: BTreeSet<usize>,
    /// Jobs in a queue now, and jobs that can never start (a dependency never met).
    waiting: BTreeSet<usize>,
    dropped: BTreeSet<usize>,
    gave_up: u64,
    /// Wake-ups and operator instants already scheduled.
    wakes: BTreeSet<u64>,
    operate_at: BTreeSet<u64>,
    operator: Option<&'a mut dyn Operator>,

    // Measurements.
    delays: Vec<u64>,
    delay_max_by_queue: BTreeMap<String, u64>,
    delays_by_queue: BTreeMap<String, Vec<u64>>,
    job_events: Vec<JobEvent>,
    preempted: BTreeMap<usize, u64>,
    /// Per tenant: its entitlement, the product of its weight shares down the queue tree.
    tenant_entitlement: Vec<f64>,
    preemptions_by_right: BTreeMap<String, u64>,
    lost_gpu_s: f64,
    time_limit_ended: u64,
    dependency_never: u64,
    running_util: f64,
    tenants: Vec<String>,
    tenant_of: Vec<usize>,
    tenant_gpu_s: BTreeMap<String, f64>,
    tenant_running: Vec<u64>,
    tenant_pending: Vec<usize>,
    /// Per tenant: since when it has held no GPU while jobs of its waited, and the longest
    /// such stretch.
    idle_waiting_since: Vec<Option<u64>>,
    idle_waiting_max: Vec<u64>,
    /// Milli-GPU the waiting jobs of each tenant ask for.
    tenant_pending_milli: Vec<u64>,
    /// Per Jain window and tenant: the GPU-seconds it asked for (running and waiting).
    window_demand_gpu_s: Vec<Vec<f64>>,
    /// How much of each Jain window the replay has covered, seconds.
    window_len_s: Vec<f64>,
    window_s: f64,
    window_gpu_s: Vec<Vec<f64>>,
    window_active: Vec<Vec<bool>>,
    waiting_now: BTreeMap<String, u64>,
    /// What `waiting_now` was counted from.
    waiting_key: Option<(u64, usize, usize, usize)>,
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
    engine: Engine,
    jobs: Vec<SimJob>,
    seed: u64,
    options: &ReplayOptions,
) -> Result<ReplayResult, crate::SimError> {
    replay_with(engine, jobs, seed, options, None)
}

/// [`replay`], with `operator` changing the fleet as it runs.
pub(crate) fn replay_with<'a>(
    engine: Engine,
    jobs: Vec<SimJob>,
    seed: u64,
    options: &'a ReplayOptions,
    operator: Option<&'a mut dyn Operator>,
) -> Result<ReplayResult, crate::SimError> {
    check_options(&jobs, options)?;
    let mut sim = Replay::new(engine, jobs, seed, options, operator);
    sim.schedule_operator(sim.start);
    let mut stopped_at = None;
    while let Some(Reverse((t, event))) = sim.events.pop() {
        if options.until_s.is_some_and(|until| t > until) {
            stopped_at = options.until_s;
            break;
        }
        sim.integrate(t);
        // Everything that happens at one instant is seen by one cycle (as the live
        // controller's tick sees it): two victims of one preemptor killed at the same second
        // must both be gone before anything else may restart on what they freed.
        let (happened, operate) = sim.handle_instant(t, event)?;
        // An instant with nothing but the patience of jobs that started long ago runs no cycle.
        if !happened {
            continue;
        }
        sim.run_cycle(t, operate)?;
    }
    if let Some(until) = stopped_at {
        sim.integrate(until);
    }
    Ok(sim.finish(stopped_at))
}

/// Reject options the replay cannot honour: preemption under FIFO, or a job whose queue is
/// not in the fair-share tree.
fn check_options(jobs: &[SimJob], options: &ReplayOptions) -> Result<(), crate::SimError> {
    if options.preempt && options.order == super::Order::Fifo {
        return Err("preemption needs fair-share order (FIFO ignores priority)".into());
    }
    if let super::Order::FairShare(tree) = &options.order
        && let Some(j) = jobs.iter().find(|j| tree.find(&j.spec.queue).is_none())
    {
        return Err(format!("job {:?}: unknown queue {:?}", j.spec.name, j.spec.queue).into());
    }
    Ok(())
}

/// When each job arrives on the compressed clock, and the window the means are taken over.
struct Timeline {
    arrival: Vec<u64>,
    start: u64,
    /// The last arrival (or `until`): means are taken over the arrival window, since
    /// long-running jobs are censored at the trace's end and averaging over their tail would
    /// dilute the busy period to nothing.
    last_arrival: u64,
    /// When the last job would end, ran at once.
    end: u64,
}

fn timeline(jobs: &[SimJob], options: &ReplayOptions) -> Timeline {
    let compress = options.compress.max(1);
    let origin = jobs.iter().map(|j| j.arrival_s).min().unwrap_or(0);
    let arrival: Vec<u64> = jobs.iter().map(|j| origin + (j.arrival_s - origin) / compress).collect();
    let start = origin;
    let mut last_arrival = arrival.iter().copied().max().unwrap_or(start).max(start + 1);
    if let Some(until) = options.until_s {
        last_arrival = last_arrival.min(until.max(start + 1));
    }
    let end =
        jobs.iter().zip(&arrival).map(|(j, &a)| a + j.duration_s.unwrap_or(0)).max().unwrap_or(start).max(start + 1);
    Timeline { arrival, start, last_arrival, end }
}

/// The trace's tenants (its queues), sorted, and each job's.
fn tenants(jobs: &[SimJob]) -> (Vec<String>, Vec<usize>) {
    let mut tenants: Vec<String> = jobs.iter().map(|j| j.spec.queue.clone()).collect();
    tenants.sort();
    tenants.dedup();
    let tenant_of =
        jobs.iter().map(|j| tenants.binary_search(&j.spec.queue).expect("every tenant is listed")).collect();
    (tenants, tenant_of)
}

/// Dependencies by index: a name stands for a job, or for every element of an array; a job
/// naming one that is not in the replay can never start (`None`).
fn dependencies(jobs: &[SimJob]) -> Vec<Option<Vec<(DependencyKind, JobId)>>> {
    let mut index: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        index.entry(j.spec.name.as_str()).or_default().push(i);
        if let Some(a) = &j.spec.control.array {
            index.entry(a.array.as_str()).or_default().push(i);
        }
    }
    jobs.iter()
        .map(|j| {
            let mut list = Vec::new();
            for d in &j.spec.after {
                list.extend(index.get(d.job.as_str())?.iter().map(|&k| (d.kind, k as JobId)));
            }
            Some(list)
        })
        .collect()
}

/// What the replay keeps of each job, and what it submits to the scheduler at its arrival
/// (`None`: a dependency can never be met).
type Submission = Option<(SchedJob, gantry_types::Job)>;

fn submissions(jobs: Vec<SimJob>) -> (Vec<Meta>, Vec<Submission>) {
    let deps = dependencies(&jobs);
    let mut meta = Vec::with_capacity(jobs.len());
    let mut submissions = Vec::with_capacity(jobs.len());
    for (j, after) in jobs.into_iter().zip(deps) {
        let SimJob { spec, duration_s, utilization, job, patience_s, .. } = j;
        meta.push(Meta {
            name: spec.name.clone(),
            tenant: spec.queue.clone(),
            duration_s,
            utilization,
            time_limit_s: spec.control.time_limit_s,
            patience_s,
            demand_milli: job.milli_at_most(),
        });
        submissions.push(after.map(|after| {
            let mut submission = SchedJob::of(&spec, job, after);
            // The replay knows each job's duration: planning may count on it where the job
            // has no time limit (the live controller cannot: see `gantry sim --live`).
            submission.planned_length_s = spec.control.time_limit_s.or(duration_s);
            (submission, spec)
        }));
    }
    (meta, submissions)
}

/// The scheduler's configuration for these replay options.
fn scheduler_config(options: &ReplayOptions) -> SchedulerConfig {
    SchedulerConfig {
        order: options.order.clone(),
        backfill: options.backfill,
        reserve_depth: options.reserve_depth,
        preempt: options.preempt,
        keep_unsatisfiable: false,
    }
}

/// The event queue at the start: each job's arrival.
fn arrival_events(arrival: &[u64]) -> BinaryHeap<Reverse<(u64, Event)>> {
    let mut events = BinaryHeap::new();
    for (i, &a) in arrival.iter().enumerate() {
        events.push(Reverse((a, Event::Arrive { job: i })));
    }
    events
}

impl<'a> Replay<'a> {
    fn new(
        engine: Engine,
        jobs: Vec<SimJob>,
        seed: u64,
        options: &'a ReplayOptions,
        operator: Option<&'a mut dyn Operator>,
    ) -> Self {
        let Timeline { arrival, start, last_arrival, end } = timeline(&jobs, options);
        let (tenants, tenant_of) = tenants(&jobs);
        let (meta, submissions) = submissions(jobs);
        Replay {
            capacity: (engine.state().gpus.len() as f64 * 1000.0).max(1.0),
            scheduler: Scheduler::new(engine, scheduler_config(options)),
            options,
            seed,
            submissions,
            start,
            last_arrival,
            end,
            step: ((last_arrival - start) / SAMPLES as u64).max(1),
            events: arrival_events(&arrival),
            running: BTreeMap::new(),
            ever_started: BTreeSet::new(),
            waiting: BTreeSet::new(),
            dropped: BTreeSet::new(),
            gave_up: 0,
            wakes: BTreeSet::new(),
            operate_at: BTreeSet::new(),
            operator,
            delays: Vec::new(),
            delay_max_by_queue: BTreeMap::new(),
            delays_by_queue: BTreeMap::new(),
            job_events: Vec::new(),
            preempted: BTreeMap::new(),
            tenant_entitlement: entitlements(&options.order, &tenants),
            preemptions_by_right: BTreeMap::new(),
            lost_gpu_s: 0.0,
            time_limit_ended: 0,
            dependency_never: 0,
            running_util: 0.0,
            tenant_running: vec![0; tenants.len()],
            tenant_pending: vec![0; tenants.len()],
            idle_waiting_since: vec![None; tenants.len()],
            idle_waiting_max: vec![0; tenants.len()],
            tenant_pending_milli: vec![0; tenants.len()],
            window_demand_gpu_s: vec![vec![0.0; tenants.len()]; JAIN_WINDOWS],
            window_len_s: vec![0.0; JAIN_WINDOWS],
            window_gpu_s: vec![vec![0.0; tenants.len()]; JAIN_WINDOWS],
            window_active: vec![vec![false; tenants.len()]; JAIN_WINDOWS],
            tenants,
            tenant_of,
            meta,
            tenant_gpu_s: BTreeMap::new(),
            window_s: ((last_arrival - start) as f64 / JAIN_WINDOWS as f64).max(1.0),
            waiting_now: BTreeMap::new(),
            waiting_key: None,
            wait_job_s: BTreeMap::new(),
            series: Vec::with_capacity(SAMPLES + 1),
            area_alloc: 0.0,
            area_util: 0.0,
            last_t: start,
            peak_alloc: 0.0,
            next_sample: start,
        }
    }

    /// Carry out `event` and every other event at `t`; returns whether anything happened that
    /// needs a cycle, and whether the operator acts.
    fn handle_instant(&mut self, t: u64, event: Event) -> Result<(bool, bool), crate::SimError> {
        let mut event = event;
        let mut operate = false;
        let mut happened = false;
        loop {
            happened |= match event {
                Event::Arrive { job } => {
                    self.arrive(job, t)?;
                    true
                }
                Event::GiveUp { job } => self.give_up(job, t)?,
                Event::Depart { alloc, .. } => {
                    self.depart(alloc, t);
                    true
                }
                Event::Kill { alloc, .. } => {
                    self.kill(alloc, t);
                    true
                }
                Event::Operate => {
                    operate = true;
                    true
                }
                Event::Starving { .. } | Event::Wake => true,
            };
            match self.events.peek() {
                Some(Reverse((next, _))) if *next == t => {
                    event = self.events.pop().expect("peeked").0.1;
                }
                _ => break,
            }
        }
        Ok((happened, operate))
    }

    /// The scheduling cycle at `t` (after the operator's turn, if it acts), and the wake-ups
    /// it leads to.
    fn run_cycle(&mut self, t: u64, operate: bool) -> Result<(), crate::SimError> {
        if operate {
            // The operator plans for what this instant's events leave waiting.
            let decisions = self.scheduler.cycle(t);
            self.carry_out(decisions, t);
            self.operate(t)?;
        }
        let decisions = self.scheduler.cycle(t);
        self.carry_out(decisions, t);
        self.record_waiting(t);
        if let Some(at) = self.scheduler.next_wake(t)
            && self.wakes.insert(at)
        {
            self.events.push(Reverse((at, Event::Wake)));
        }
        self.schedule_operator(t + 1);
        Ok(())
    }

    /// Schedule the operator's next instant, if it wants one at or after `earliest`.
    fn schedule_operator(&mut self, earliest: u64) {
        let Some(at) = self.operator.as_deref().and_then(|op| op.next_at()) else { return };
        let at = at.max(earliest);
        if self.operate_at.insert(at) {
            self.events.push(Reverse((at, Event::Operate)));
        }
    }

    /// Let the operator act at `t`; the allocations it moved keep running where they went.
    fn operate(&mut self, t: u64) -> Result<(), crate::SimError> {
        let Some(op) = self.operator.as_deref_mut() else { return Ok(()) };
        let moment = Moment { scheduler: &mut self.scheduler, running: &self.running, waiting: &self.waiting };
        let moved = op.act(t, moment)?;
        for (old, new) in moved {
            let run = self.running.remove(&old).expect("the operator moves running allocations");
            self.events.push(Reverse((run.planned_end, Event::Depart { job: run.job, alloc: new })));
            self.event(t, "move", run.job, run.milli, None);
            self.running.insert(new, run);
        }
        Ok(())
    }

    /// Record an event of `job`; `by`: the preemptor, its right and the kill time of a stop.
    fn event(&mut self, t: u64, event: &'static str, job: usize, milli: u64, by: Option<(usize, &'static str, u64)>) {
        self.job_events.push(JobEvent {
            time_s: t,
            event,
            index: job,
            job: self.meta[job].name.clone(),
            queue: self.meta[job].tenant.clone(),
            milli,
            preemptor: by.map(|(k, _, _)| self.meta[k].name.clone()),
            cause: by.map(|(_, c, _)| c),
            kill_at_s: by.map(|(_, _, at)| at),
        });
    }

    fn utilization(&self, job: usize) -> f64 {
        self.meta[job].utilization.unwrap_or_else(|| drawn_utilization(self.seed, job))
    }

    /// Integrate the state that held until `t`, and sample the series.
    fn integrate(&mut self, t: u64) {
        let (start, last_arrival) = (self.start, self.last_arrival);
        let alloc_now = self.scheduler.engine().state().used_milli() as f64;
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
                let wanted = milli + self.tenant_pending_milli[k];
                self.window_demand_gpu_s[w][k] += wanted as f64 / 1000.0 * (until - from);
            }
            self.window_len_s[w] += until - from;
            from = if until > from { until } else { to };
        }
        while self.next_sample <= t && self.series.len() <= SAMPLES {
            self.series.push(Sample {
                time_s: self.next_sample,
                alloc_pct: alloc_now / self.capacity * 100.0,
                util_pct: self.running_util / self.capacity * 100.0,
                running: self.running.len() as u64,
                queued: self.scheduler.queued() as u64,
                held_gpus_by_queue: self.tenant_running.iter().map(|&m| m as f64 / 1000.0).collect(),
            });
            self.next_sample += self.step;
        }
        for k in 0..self.tenants.len() {
            if self.tenant_running[k] == 0 && self.tenant_pending[k] > 0 {
                let since = *self.idle_waiting_since[k].get_or_insert(self.last_t);
                self.idle_waiting_max[k] = self.idle_waiting_max[k].max(t - since);
            } else {
                self.idle_waiting_since[k] = None;
            }
        }
        for (reason, &n) in &self.waiting_now {
            *self.wait_job_s.entry(reason.clone()).or_default() += n * (t - self.last_t);
        }
        if let Some(op) = self.operator.as_deref_mut() {
            op.observe(self.last_t, t, &self.scheduler);
        }
        self.last_t = t;
    }

    /// Account for what became of a job handed to the scheduler at `now`.
    fn admitted(&mut self, job: usize, admission: Admission, now: u64) {
        match admission {
            Admission::Queued { starving_at } => {
                self.tenant_pending[self.tenant_of[job]] += 1;
                self.tenant_pending_milli[self.tenant_of[job]] += self.meta[job].demand_milli;
                self.waiting.insert(job);
                // A job killed by preemption waits again from its first submission: it may
                // be past the bound already, and then it starves now, not in the past.
                if let Some(at) = starving_at {
                    self.events.push(Reverse((at.max(now), Event::Starving { job })));
                }
            }
            Admission::Never => {
                self.dependency_never += 1;
                self.dropped.insert(job);
            }
            Admission::Held | Admission::Dependencies => {}
        }
    }

    fn arrive(&mut self, job: usize, t: u64) -> Result<(), crate::SimError> {
        match self.submissions[job].take() {
            // A dependency on a job not in the replay can never be met.
            None => self.admitted(job, Admission::Never, t),
            Some((mut submission, spec)) => {
                if !self.scheduler.engine().is_current(&submission.compiled) {
                    submission.compiled = self.scheduler.engine().compile(&spec)?;
                }
                let admission = self.scheduler.submit(job as JobId, submission, t)?;
                self.admitted(job, admission, t);
            }
        }
        if let Some(patience) = self.meta[job].patience_s {
            // It may still start at the last second of its patience.
            self.events.push(Reverse((t + patience + 1, Event::GiveUp { job })));
        }
        Ok(())
    }

    /// A job's patience is over: one that never started gives up (cancelled; its dependents
    /// see it as failed). Patience is for a first start only.
    /// Returns whether it gave up.
    fn give_up(&mut self, job: usize, t: u64) -> Result<bool, crate::SimError> {
        if self.ever_started.contains(&job) || self.dropped.contains(&job) {
            return Ok(false);
        }
        let woken = self.scheduler.cancel_waiting(job as JobId, t)?;
        if self.waiting.remove(&job) {
            self.tenant_pending[self.tenant_of[job]] -= 1;
            self.tenant_pending_milli[self.tenant_of[job]] -= self.meta[job].demand_milli;
        }
        self.dropped.insert(job);
        self.gave_up += 1;
        self.event(t, "give-up", job, 0, None);
        for (w, admission) in woken {
            self.admitted(w as usize, admission, t);
        }
        Ok(true)
    }

    /// Stop measuring a running allocation; `None` if it is no longer running (a job killed
    /// earlier still has its planned departure queued).
    fn stop_measuring(&mut self, alloc: AllocId) -> Option<Run> {
        let run = self.running.remove(&alloc)?;
        self.running_util -= run.milli as f64 * self.utilization(run.job);
        self.tenant_running[self.tenant_of[run.job]] -= run.milli;
        Some(run)
    }

    /// A job ends: done, or stopped at its time limit (a failure, as Slurm's TIMEOUT).
    fn depart(&mut self, alloc: AllocId, t: u64) {
        let Some(run) = self.stop_measuring(alloc) else { return };
        if run.hits_limit {
            self.time_limit_ended += 1;
        }
        let event = if run.hits_limit { "time-limit" } else { "end" };
        self.event(t, event, run.job, run.milli, None);
        let woken = self.scheduler.ended(alloc, !run.hits_limit, t).expect("a running job's allocation");
        for (w, admission) in woken {
            self.admitted(w as usize, admission, t);
        }
    }

    /// A stopped job's grace period is over: its work is lost (no checkpoints modelled) and it
    /// waits again; the GPU time it was credited past now is taken back.
    fn kill(&mut self, alloc: AllocId, t: u64) {
        let Some(run) = self.stop_measuring(alloc) else { return };
        let (job, cause, admission) = self.scheduler.killed(alloc, t).expect("a running job's allocation");
        *self.preemptions_by_right.entry(cause.to_string()).or_default() += 1;
        *self.preempted.entry(run.job).or_default() += 1;
        self.event(t, "kill", run.job, run.milli, None);
        self.lost_gpu_s += run.milli as f64 / 1000.0 * (t - run.started_at) as f64;
        *self.tenant_gpu_s.entry(self.meta[run.job].tenant.clone()).or_default() -=
            run.milli as f64 / 1000.0 * run.planned_end.saturating_sub(t) as f64;
        self.admitted(job as usize, admission, t);
    }

    /// Carry out a cycle's decisions on the clock.
    fn carry_out(&mut self, decisions: Vec<Decision>, t: u64) {
        for decision in decisions {
            match decision {
                Decision::Start { job, alloc, milli, eligible_since } => {
                    self.start(job as usize, alloc, milli, eligible_since, t)
                }
                Decision::Stop { job, alloc, kill_at, cause, for_job } => {
                    self.events.push(Reverse((kill_at, Event::Kill { job: job as usize, alloc })));
                    let milli = self.running.get(&alloc).map_or(0, |r| r.milli);
                    let by = Some((for_job as usize, cause, kill_at));
                    self.event(t, "stop", job as usize, milli, by);
                }
            }
        }
    }

    fn start(&mut self, job: usize, alloc: AllocId, milli: u64, eligible_since: u64, t: u64) {
        let m = &self.meta[job];
        self.tenant_pending[self.tenant_of[job]] -= 1;
        self.tenant_pending_milli[self.tenant_of[job]] -= m.demand_milli;
        self.waiting.remove(&job);
        let waited = t - eligible_since;
        // A preempted job that starts again keeps its first wait.
        if self.ever_started.insert(job) {
            self.delays.push(waited);
            let max = self.delay_max_by_queue.entry(m.tenant.clone()).or_default();
            *max = (*max).max(waited);
            self.delays_by_queue.entry(m.tenant.clone()).or_default().push(waited);
        }
        let work = m.duration_s.unwrap_or_else(|| self.end.saturating_sub(t));
        let run = m.time_limit_s.map_or(work, |l| l.min(work));
        let hits_limit = m.time_limit_s.is_some_and(|l| l < work);
        *self.tenant_gpu_s.entry(m.tenant.clone()).or_default() += milli as f64 / 1000.0 * run as f64;
        self.running_util += milli as f64 * self.utilization(job);
        self.tenant_running[self.tenant_of[job]] += milli;
        self.running.insert(alloc, Run { job, started_at: t, planned_end: t + run, hits_limit, milli });
        self.events.push(Reverse((t + run, Event::Depart { job, alloc })));
        self.event(t, "start", job, milli, None);
    }

    /// Why each job still waits, held until the next event; who wanted GPUs in this window.
    fn record_waiting(&mut self, t: u64) {
        // The counts follow from the reasons and how many jobs wait, held or not: recounted
        // only when one of those changed (most instants change neither).
        let s = &self.scheduler;
        let key = (s.reasons_digest(), s.queued(), s.held_count(), s.waiting_on_dependencies());
        if self.waiting_key != Some(key) {
            self.waiting_now = s.waiting_by_kind();
            self.waiting_key = Some(key);
        }
        if t < self.last_arrival {
            let w = (((t - self.start) as f64 / self.window_s) as usize).min(JAIN_WINDOWS - 1);
            for k in 0..self.tenants.len() {
                self.window_active[w][k] |= self.tenant_pending[k] > 0 || self.tenant_running[k] > 0;
            }
        }
    }

    fn finish(mut self, stopped_at: Option<u64>) -> ReplayResult {
        let span = (self.last_arrival - self.start) as f64;
        self.delays.sort_unstable();
        let jains = self.window_jains(|w, k| self.window_gpu_s[w][k]);
        let weighted = self.window_jains(|w, k| self.window_gpu_s[w][k] / self.tenant_entitlement[k]);
        let entitled = self.entitled_jains();
        let s = &self.scheduler;
        let stats = s.stats();
        let delays = &self.delays;
        ReplayResult {
            policy: s.engine().config().policy.name().to_string(),
            order: self.options.order.name().to_string(),
            backfill: self.options.backfill.name(),
            reserve_depth: self.options.reserve_depth as u64,
            stopped_at_s: stopped_at,
            reserved: stats.promised.len() as u64,
            reserved_late: stats.late.len() as u64,
            promises_broken: self.broken_promises(),
            reserved_late_without_cause: stats.broken_without_cause.iter().map(|&j| self.job_name(j)).collect(),
            preemptions_per_job_max: self.preempted.values().copied().max().unwrap_or(0),
            guarantee_wait_max_s: self
                .has_guarantees()
                .then(|| stats.guarantee_waited.values().copied().max().unwrap_or(0)),
            guarantee_wait_max_by_queue_s: self.guarantee_waits_by_queue(),
            zero_gpus_waiting_max_by_queue_s: self
                .tenants
                .iter()
                .zip(&self.idle_waiting_max)
                .map(|(name, &s)| (name.clone(), s))
                .collect(),
            quota_waited: stats.quota_waited.len() as u64,
            user_limit_waited: stats.user_limit_waited.len() as u64,
            preemptions: self.preemptions_by_right.values().sum(),
            preemptions_by_right: self.preemptions_by_right,
            preempted_gpu_s_lost: self.lost_gpu_s,
            time_limit_ended: self.time_limit_ended,
            held: s.held_count() as u64,
            dependency_never: self.dependency_never,
            gave_up: self.gave_up,
            waiting_on_dependencies: s.waiting_on_dependencies() as u64,
            wait_job_s_by_reason: self.wait_job_s,
            seed: self.seed,
            pods: self.meta.len(),
            started: self.ever_started.len() as u64,
            never_started: s.queued() as u64,
            delay_p50_s: percentile(delays, 0.50),
            delay_p90_s: percentile(delays, 0.90),
            delay_p99_s: percentile(delays, 0.99),
            delay_max_s: delays.last().copied().unwrap_or(0),
            delay_max_by_queue_s: self.delay_max_by_queue,
            waits_by_queue: waits_by_queue(self.delays_by_queue),
            queues: self.tenants.clone(),
            fleet_gpus: (self.capacity / 1000.0).round() as u64,
            mean_alloc_pct: self.area_alloc / span / self.capacity * 100.0,
            mean_util_pct: self.area_util / span / self.capacity * 100.0,
            peak_alloc_pct: self.peak_alloc.max(s.engine().state().used_milli() as f64) / self.capacity * 100.0,
            tenant_gpu_share_pct: shares_pct(self.tenant_gpu_s),
            jain_mean: mean(&jains),
            jain_min: jains.iter().copied().reduce(f64::min),
            jain_weighted_mean: mean(&weighted),
            jain_weighted_min: weighted.iter().copied().reduce(f64::min),
            jain_entitled_mean: mean(&entitled),
            jain_entitled_min: entitled.iter().copied().reduce(f64::min),
            events: self.job_events,
            pending: s.pending(),
            series: self.series,
        }
    }

    /// Jain's index of each window over the tenants active in it, of `gpu_s(window, tenant)`;
    /// windows with fewer than two active tenants are left out.
    fn window_jains(&self, gpu_s: impl Fn(usize, usize) -> f64) -> Vec<f64> {
        (0..JAIN_WINDOWS)
            .filter_map(|w| {
                let x: Vec<f64> =
                    (0..self.tenants.len()).filter(|&k| self.window_active[w][k]).map(|k| gpu_s(w, k)).collect();
                if x.len() < 2 { None } else { jain(&x) }
            })
            .collect()
    }

    /// Jain's index of each window over the tenants that wanted GPUs in it, of the GPU time
    /// each got over its max-min entitlement: the fleet's GPU time in the window shared by
    /// weight (the queue tree's shares) among the tenants, none given more than it asked for,
    /// what it leaves going to the others. A split that gives each tenant its entitlement
    /// reads 1, whatever the weights and however little some tenants wanted.
    fn entitled_jains(&self) -> Vec<f64> {
        (0..JAIN_WINDOWS)
            .filter_map(|w| {
                let active: Vec<usize> = (0..self.tenants.len()).filter(|&k| self.window_active[w][k]).collect();
                let capacity = self.capacity / 1000.0 * self.window_len_s[w];
                let demands: Vec<f64> = active.iter().map(|&k| self.window_demand_gpu_s[w][k]).collect();
                let weights: Vec<f64> = active.iter().map(|&k| self.tenant_entitlement[k]).collect();
                let entitled = max_min_shares(capacity, &demands, &weights);
                let x: Vec<f64> = active
                    .iter()
                    .zip(&entitled)
                    .filter(|(_, e)| **e > 0.0)
                    .map(|(&k, e)| self.window_gpu_s[w][k] / e)
                    .collect();
                if x.len() < 2 { None } else { jain(&x) }
            })
            .collect()
    }

    /// Does the queue tree guarantee anything?
    fn has_guarantees(&self) -> bool {
        match &self.options.order {
            super::Order::FairShare(tree) => {
                tree.queues.iter().any(|q| q.quotas.iter().any(|quota| quota.guaranteed_milli > 0))
            }
            super::Order::Fifo => false,
        }
    }

    /// The longest wait within a guarantee, per queue that had one.
    fn guarantee_waits_by_queue(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (&job, &waited) in &self.scheduler.stats().guarantee_waited {
            let queue = out.entry(self.meta[job as usize].tenant.clone()).or_default();
            *queue = (*queue).max(waited);
        }
        out
    }

    fn job_name(&self, job: JobId) -> String {
        self.meta[job as usize].name.clone()
    }

    /// The reservations the scheduler broke, with who broke them.
    fn broken_promises(&self) -> Vec<BrokenPromise> {
        let stats = self.scheduler.stats();
        stats
            .broken
            .iter()
            .map(|(&job, b)| BrokenPromise {
                job: self.job_name(job),
                promised_s: stats.promised.get(&job).copied().unwrap_or(0),
                by: self.job_name(b.by),
                right: b.right,
            })
            .collect()
    }
}

/// Each queue's wait summary (its delays sorted).
fn waits_by_queue(delays_by_queue: BTreeMap<String, Vec<u64>>) -> BTreeMap<String, Waits> {
    delays_by_queue
        .into_iter()
        .map(|(q, mut d)| {
            d.sort_unstable();
            (q, Waits::of(&d))
        })
        .collect()
}

/// Each tenant's share (%) of all the GPU time (0 where there was none).
fn shares_pct(tenant_gpu_s: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let total_gpu_s: f64 = tenant_gpu_s.values().sum();
    tenant_gpu_s.into_iter().map(|(k, v)| (k, if total_gpu_s > 0.0 { v / total_gpu_s * 100.0 } else { 0.0 })).collect()
}

/// The mean, `None` for no values.
fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Each tenant's entitlement as a fraction of the fleet: its queue's weight over the sum of
/// its siblings' weights, times its parent's entitlement (1 per tenant under FIFO).
/// Weighted max-min fair shares of `capacity` (water-filling): each claimant gets capacity in
/// proportion to its weight, none more than its demand, and what a capped one leaves is shared
/// again among the rest.
pub(super) fn max_min_shares(capacity: f64, demands: &[f64], weights: &[f64]) -> Vec<f64> {
    let mut share = vec![0.0; demands.len()];
    let mut open: Vec<usize> = (0..demands.len()).filter(|&i| demands[i] > 0.0 && weights[i] > 0.0).collect();
    let mut left = capacity;
    while !open.is_empty() && left > 1e-9 {
        let weight: f64 = open.iter().map(|&i| weights[i]).sum();
        let per_weight = left / weight;
        let capped: Vec<usize> =
            open.iter().copied().filter(|&i| demands[i] - share[i] <= per_weight * weights[i]).collect();
        if capped.is_empty() {
            open.iter().for_each(|&i| share[i] += per_weight * weights[i]);
            break;
        }
        for &i in &capped {
            left -= demands[i] - share[i];
            share[i] = demands[i];
        }
        open.retain(|i| !capped.contains(i));
    }
    share
}

fn entitlements(order: &super::Order, tenants: &[String]) -> Vec<f64> {
    let super::Order::FairShare(tree) = order else { return vec![1.0; tenants.len()] };
    let share = |q: usize| -> f64 {
        let mut e = 1.0;
        let mut at = Some(q);
        while let Some(i) = at {
            let parent = tree.queues[i].parent;
            let siblings: u64 = tree.queues.iter().filter(|s| s.parent == parent).map(|s| s.weight.max(1) as u64).sum();
            e *= tree.queues[i].weight.max(1) as f64 / siblings.max(1) as f64;
            at = parent;
        }
        e
    };
    tenants.iter().map(|t| tree.find(t).map_or(1.0, share)).collect()
}

#[cfg(test)]
mod tests {
    use super::max_min_shares;

    #[test]
    fn max_min_shares_fill_by_weight_up_to_demand() {
        assert_eq!(max_min_shares(64.0, &[100.0, 8.0], &[1.0, 1.0]), vec![56.0, 8.0]);
        assert_eq!(max_min_shares(64.0, &[100.0, 100.0], &[3.0, 1.0]), vec![48.0, 16.0]);
        assert_eq!(max_min_shares(64.0, &[10.0, 10.0], &[1.0, 1.0]), vec![10.0, 10.0]);
        assert_eq!(max_min_shares(60.0, &[100.0, 100.0, 5.0], &[1.0, 1.0, 1.0]), vec![27.5, 27.5, 5.0]);
        assert_eq!(max_min_shares(64.0, &[0.0, 100.0], &[1.0, 1.0]), vec![0.0, 64.0]);
    }
}
