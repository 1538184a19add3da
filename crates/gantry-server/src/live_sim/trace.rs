//! A native trace through the live controller in simulated time (`gantry sim --trace T
//! --live`). A trace job arrives as a `Submit` at its arrival time;
//! each launch becomes a task exit at its start plus the job's duration (or its time limit,
//! timed out); a stop becomes an exit after the grace period; at every instant with something
//! to do — an arrival, an exit, or the scheduler's next wake-up — exits and arrivals are
//! applied, then one `Tick`. Nothing here decides: it only feeds commands and reads events.
//!
//! Differences from the engine-only time replay (`gantry_sim::protocol_b`), by design: the
//! controller plans a running job's end from its time limit only (the replay also knows the
//! trace's durations), resolves `after` to the latest job of that name submitted before (the
//! replay to any job of the trace), and numbers jobs from 1 in arrival order.

use super::clock::VirtualClock;
use crate::auth::Principal;
use crate::control::{Agents, Command, Controller, Image, Setup};
use crate::error::ControlError;
use crate::wire::TaskKey;
use gantry_catalog::Catalog;
use gantry_engine::sched::SchedulerConfig;
use gantry_spec::TraceJob;
use gantry_types::{Event, Fleet};
use std::collections::BTreeMap;

/// One job event, as the time replay's `--events` CSV has them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LiveEvent {
    pub time_s: u64,
    /// `start`, `end`, `time-limit`, `failed`, `stop` (preemption ordered) or `kill` (a stopped
    /// job's tasks gone: it waits again).
    pub event: &'static str,
    pub job: String,
    pub queue: String,
}

/// What a live run did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LiveResult {
    pub jobs: u64,
    pub started: u64,
    pub completed: u64,
    pub time_limit_ended: u64,
    pub preemptions: u64,
    /// Seconds from submission to first start, per job that started, sorted.
    pub waits_s: Vec<u64>,
    /// Commands applied (what the command log would hold).
    pub commands: u64,
    pub end_s: u64,
    pub events: Vec<LiveEvent>,
}

/// Something the clock brings. Exits come first at an instant, then arrivals, as the time
/// replay takes them; the tick follows all of them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Exit { task: TaskKey, code: Option<i32>, timed_out: bool },
    Arrive(usize),
}

struct Driver<'t> {
    controller: Controller,
    trace: &'t [TraceJob],
    clock: VirtualClock<Due>,
    /// Job id → trace index.
    of_id: BTreeMap<u64, usize>,
    submitted_at: BTreeMap<u64, u64>,
    result: LiveResult,
}

/// Run `trace` (in arrival order) through a fresh controller on `fleet`.
pub fn run(
    fleet: Fleet,
    trace: &[TraceJob],
    scheduling: &SchedulerConfig,
    catalog: &'static Catalog,
) -> Result<LiveResult, ControlError> {
    let mut setup = Setup::new(fleet, scheduling, Agents::Local, crate::idle::IdlePolicy::default());
    setup.meter_flush_s = gantry_store::USAGE_BUCKET_S;
    let start = trace.iter().map(|t| t.arrival_s).min().unwrap_or(0);
    let (controller, _) = Controller::open(setup, Image::default(), catalog, &Default::default(), start)?;
    let mut driver = Driver {
        controller,
        trace,
        clock: VirtualClock::new(trace.iter().enumerate().map(|(i, t)| (t.arrival_s, Due::Arrive(i)))),
        of_id: BTreeMap::new(),
        submitted_at: BTreeMap::new(),
        result: LiveResult { jobs: trace.len() as u64, ..Default::default() },
    };
    while let Some((t, due)) = driver.clock.next_instant(u64::MAX) {
        driver.instant(t, due)?;
    }
    driver.result.waits_s.sort_unstable();
    Ok(driver.result)
}

impl Driver<'_> {
    /// Everything due at `t`, then a tick.
    fn instant(&mut self, t: u64, due: Vec<Due>) -> Result<(), ControlError> {
        for item in due {
            match item {
                Due::Exit { task, code, timed_out } => {
                    self.apply(t, Command::TaskExited { task, code, timed_out, lost: false }, None)?;
                }
                Due::Arrive(i) => self.arrive(t, i)?,
            }
        }
        self.apply(t, Command::tick(), None)?;
        self.clock.wake_for(&self.controller, t);
        self.result.end_s = t;
        Ok(())
    }

    fn arrive(&mut self, t: u64, i: usize) -> Result<(), ControlError> {
        let who = Principal::controller();
        let job = self.trace[i].job.clone();
        match self.apply(t, Command::Submit { who, jobs: vec![job], key: None }, Some(i)) {
            // A job this fleet can never hold is refused, as the API would refuse it.
            Err(why @ (ControlError::Job { .. } | ControlError::Workload(_) | ControlError::Request { .. })) => {
                tracing::debug!(job = %self.trace[i].job.name, %why, "refused");
                Ok(())
            }
            other => other,
        }
    }

    /// Apply one command (`arrival`: the trace job a submit carries) and put its consequences
    /// on the clock.
    fn apply(&mut self, t: u64, command: Command, arrival: Option<usize>) -> Result<(), ControlError> {
        let effects = self.controller.apply(t, command)?;
        self.result.commands += 1;
        if let (crate::control::Reply::Submitted { ids }, Some(i)) = (&effects.reply, arrival) {
            for &id in ids {
                self.of_id.insert(id, i);
                self.submitted_at.insert(id, t);
            }
        }
        for event in &effects.commit.events {
            self.record(t, event);
        }
        for launch in &effects.launch {
            let i = self.of_id[&launch.job];
            let work = self.trace[i].duration_s.unwrap_or(u64::MAX / 4);
            let limit = launch.time_limit_s.unwrap_or(u64::MAX / 4);
            let (run, timed_out) = if limit < work { (limit, true) } else { (work, false) };
            let code = if timed_out { None } else { Some(0) };
            self.clock.at(t + run, Due::Exit { task: launch.key(), code, timed_out });
        }
        for stop in &effects.stop {
            self.result.preemptions += 1;
            let (name, queue) = self.name_of(stop.job);
            self.result.events.push(LiveEvent { time_s: t, event: "stop", job: name, queue });
            for task in self.controller.tasks_of(stop.job) {
                let exit = Due::Exit { task, code: None, timed_out: false };
                self.clock.at(t + stop.grace_s, exit);
            }
        }
        Ok(())
    }

    fn name_of(&self, id: u64) -> (String, String) {
        let job = &self.trace[self.of_id[&id]].job;
        (job.name.clone(), job.queue.clone())
    }

    fn record(&mut self, t: u64, event: &Event) {
        let id = event.job_id();
        if matches!(event, Event::Submitted { .. } | Event::Held { .. }) {
            return;
        }
        let (job, queue) = self.name_of(id);
        let kind = match event {
            Event::Started { .. } => {
                if let Some(at) = self.submitted_at.remove(&id) {
                    self.result.waits_s.push(t - at);
                }
                self.result.started += 1;
                "start"
            }
            Event::Ended { ending: gantry_types::Ending::Completed, .. } => {
                self.result.completed += 1;
                "end"
            }
            Event::Ended { ending: gantry_types::Ending::TimedOut, .. } => {
                self.result.time_limit_ended += 1;
                "time-limit"
            }
            Event::Ended { .. } => "failed",
            Event::Requeued { .. } => "kill",
            Event::Submitted { .. } | Event::Held { .. } => return,
        };
        self.result.events.push(LiveEvent { time_s: t, event: kind, job, queue });
    }
}

impl LiveResult {
    /// The run in a line: jobs, starts, ends, waits, commands; `order` and `backfill` as the
    /// run was asked for, `wall_s` how long it took.
    pub fn summary_line(&self, name: &str, order: &str, backfill: &str, wall_s: f64) -> String {
        let waits = &self.waits_s;
        let pct = |p: f64| waits.get(((waits.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(0);
        format!(
            "{name} (live controller, {order} order, {backfill} backfill): {} jobs, {} started, {} completed, {} hit their time limit, {} preemptions; wait p50 {} s, p90 {} s, max {} s; {} commands; ended at {} s; {wall_s:.2} s",
            self.jobs,
            self.started,
            self.completed,
            self.time_limit_ended,
            self.preemptions,
            pct(0.5),
            pct(0.9),
            waits.last().copied().unwrap_or(0),
            self.commands,
            self.end_s
        )
    }

    /// The run's events in the simulator's events CSV (`gantry sim --decisions-out`), the
    /// trace named `name`.
    pub fn events_csv(&self, name: &str) -> String {
        let mut out = String::from(gantry_sim::experiment::output::EVENTS_HEADER);
        for e in &self.events {
            out.push_str(&format!("{name},live,0,{},{},{},{},,,,\n", e.time_s, e.event, e.job, e.queue));
        }
        out
    }
}
