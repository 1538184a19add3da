//! `gantry plan --evaluate --live`: the MIG evaluation's week through the live controller's
//! state machine in simulated time — the same controller `gantry serve` runs, its own
//! planning steps and guards (`reconfigure = "auto"`), its layout orders carried out by a
//! simulated agent that takes `reconfigure_s` to apply each — against the same controller on
//! the best static layout (`reconfigure = "off"`). The simulator's own comparison (the
//! engine's time replay with the planner as an operator) is run beside it, so the two gains
//! can be compared.
//!
//! Each arrival is submitted at its time with a time limit equal to its duration (so the
//! controller plans with the ends the simulator knows), inference as `restartable` with no
//! grace period; a job not started within its patience is cancelled (it went elsewhere). A
//! moved replica restarts with its remaining work plus `restart_s`, and the time it served
//! nothing is taken off demand served, as the simulator counts a move.

use super::clock::VirtualClock;
use crate::auth::Principal;
use crate::control::reconfig::{ReconfigureMode, ReconfigurePolicy};
use crate::control::{Agents, Command, Controller, Effects, Image, Reply, Setup};
use crate::error::ControlError;
use crate::wire::{LayoutOrder, LayoutReport, TaskKey};
use gantry_sim::SimError;
use gantry_sim::mig_day::{DayConfig, Scenario, is_training, job_spec};
use gantry_types::Fleet;
use std::collections::BTreeMap;

/// Why a week could not be run.
#[derive(Debug, thiserror::Error)]
pub enum WeekError {
    /// The scenario or the simulator's own evaluation refused.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The controller refused a command the driver gave it.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The simulator's best static layout is not among the layouts it compared.
    #[error("the best static layout {0:?} is not a candidate")]
    NoSuchLayout(String),
}

/// How one week went through the live controller.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LiveWeek {
    pub label: String,
    pub served_pct: f64,
    pub inference_served_pct: f64,
    pub training_served_pct: f64,
    pub started: u64,
    /// Never started: gave up waiting, or refused (the layout can never hold them).
    pub gave_up: u64,
    pub reconfigurations: u64,
    pub reconfigurations_per_gpu_day: f64,
    pub refused_or_abandoned: u64,
    /// GPU-hours left unallocated on GPUs cordoned for reconfiguration.
    pub drain_idle_gpu_h: f64,
    pub moves: u64,
    /// Commands the controller applied.
    pub commands: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Exit(TaskKey),
    Layout(String, u64, u32),
    Arrive(usize),
    GiveUp(usize),
}

struct Driver<'s> {
    s: &'s Scenario,
    config: &'s DayConfig,
    c: Controller,
    clock: VirtualClock<Due>,
    of_id: BTreeMap<u64, usize>,
    id_of: BTreeMap<usize, u64>,
    /// Per arrival: started once (served), its work left when moved and when.
    started: Vec<bool>,
    moved_at: BTreeMap<usize, (u64, u64)>,
    layouts: BTreeMap<u64, LayoutOrder>,
    /// Milli-GPU-seconds moved replicas served nothing.
    lost_milli_s: f64,
    end_of_run: BTreeMap<usize, u64>,
    commands: u64,
    gave_up: u64,
    /// Submissions refused: the layout can never hold them.
    refused: u64,
}

/// The live controller's policy for the evaluation: the simulator's planner settings (period,
/// window, cooldown, drain horizon, moves), steps on the period's grid only, and no cap on
/// GPUs under way (the simulator has none).
pub fn policy(config: &DayConfig, gpus: u32) -> ReconfigurePolicy {
    ReconfigurePolicy {
        mode: ReconfigureMode::Auto,
        period_s: config.period_s,
        max_per_gpu_per_hour: 2,
        max_cordoned: gpus,
        min_benefit_tasks: 1,
        cooldown_s: config.online.cooldown_s,
        drain_horizon_s: config.online.drain_horizon_s,
        drain_deadline_s: config.online.drain_horizon_s.max(3600),
        window_s: config.window_s,
        max_moves_per_hour: if config.online.move_work { 10_000 } else { 0 },
        refused_backoff_s: 86_400,
        // The simulator plans on the period's grid only.
        replan_after_s: 0,
    }
}

/// Run the scenario on `fleet` through a fresh controller with `reconfigure`.
pub fn run(
    s: &Scenario,
    fleet: &Fleet,
    label: &str,
    config: &DayConfig,
    reconfigure: ReconfigurePolicy,
) -> Result<LiveWeek, WeekError> {
    let catalog = gantry_catalog::Catalog::embedded();
    let mut setup = Setup::new(fleet.clone(), &Default::default(), Agents::Local, Default::default());
    setup.backfill = "greedy".into();
    setup.reconfigure = reconfigure;
    setup.meter_flush_s = gantry_store::USAGE_BUCKET_S;
    let (c, _) = Controller::open(setup, Image::default(), catalog, &Default::default(), 0)?;
    let mut d = Driver {
        s,
        config,
        c,
        clock: VirtualClock::new(s.jobs.iter().enumerate().map(|(i, j)| (j.arrival_s, Due::Arrive(i)))),
        of_id: BTreeMap::new(),
        id_of: BTreeMap::new(),
        started: vec![false; s.jobs.len()],
        moved_at: BTreeMap::new(),
        layouts: BTreeMap::new(),
        lost_milli_s: 0.0,
        end_of_run: BTreeMap::new(),
        commands: 0,
        gave_up: 0,
        refused: 0,
    };
    d.clock.wake(0);
    while let Some((t, due)) = d.clock.next_instant(s.end_s) {
        d.instant(t, due)?;
    }
    Ok(d.result(label, fleet))
}

impl Driver<'_> {
    fn instant(&mut self, t: u64, due: Vec<Due>) -> Result<(), ControlError> {
        for item in due {
            match item {
                Due::Exit(task) => {
                    let command = Command::TaskExited { task, code: Some(0), timed_out: false, lost: false };
                    self.apply(t, command)?;
                }
                Due::Layout(node, id, _) => {
                    let Some(order) = self.layouts.remove(&id) else { continue };
                    self.apply(t, Command::LayoutDone { node, report: LayoutReport::applied_as_ordered(&order) })?;
                }
                Due::Arrive(i) => self.arrive(t, i)?,
                Due::GiveUp(i) => {
                    if !self.started[i]
                        && let Some(&id) = self.id_of.get(&i)
                    {
                        self.gave_up += 1;
                        self.apply(t, Command::Cancel { who: Principal::controller(), job: id, force: false })?;
                    }
                }
            }
        }
        self.apply(t, Command::tick())?;
        self.clock.wake_for(&self.c, t);
        Ok(())
    }

    fn arrive(&mut self, t: u64, i: usize) -> Result<(), ControlError> {
        let j = &self.s.jobs[i];
        let mut job = job_spec(self.s, i);
        job.queue = "default".into();
        job.control.time_limit_s = Some(j.duration_s);
        job.lifecycle.restartable = !is_training(j);
        job.lifecycle.grace_s = 0;
        let effects =
            match self.c.apply(t, Command::Submit { who: Principal::controller(), jobs: vec![job], key: None }) {
                Ok(effects) => effects,
                // A job this layout can never hold is refused, as the API refuses it: it is never
                // served (the simulator counts it as never started).
                Err(ControlError::Job { .. } | ControlError::Workload(_) | ControlError::Request { .. }) => {
                    self.refused += 1;
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
        self.commands += 1;
        if let Reply::Submitted { ids } = &effects.reply {
            self.of_id.insert(ids[0], i);
            self.id_of.insert(i, ids[0]);
        }
        self.clock.at(t + j.patience_s, Due::GiveUp(i));
        self.effects(t, effects);
        Ok(())
    }

    fn apply(&mut self, t: u64, command: Command) -> Result<(), ControlError> {
        let effects = self.c.apply(t, command)?;
        self.commands += 1;
        self.effects(t, effects);
        Ok(())
    }

    /// Put a command's launches, stops and layout orders on the clock.
    fn effects(&mut self, t: u64, effects: Effects) {
        for launch in &effects.launch {
            let i = self.of_id[&launch.job];
            let j = &self.s.jobs[i];
            let run = match self.moved_at.remove(&i) {
                // A moved replica: what it had left, plus its restart; it served nothing from
                // its stop to its restart's end.
                Some((stopped, left)) => {
                    self.lost_milli_s += j.milli as f64 * ((t - stopped) + self.config.restart_s) as f64;
                    (left + self.config.restart_s).min(j.duration_s)
                }
                None => {
                    self.started[i] = true;
                    j.duration_s
                }
            };
            self.end_of_run.insert(i, t + run);
            self.clock.at(t + run, Due::Exit(launch.key()));
        }
        for stop in &effects.stop {
            let i = self.of_id[&stop.job];
            let end = self.end_of_run.get(&i).copied().unwrap_or(t);
            self.moved_at.insert(i, (t, end.saturating_sub(t)));
            for task in self.c.tasks_of(stop.job) {
                self.clock.at(t + stop.grace_s, Due::Exit(task));
            }
        }
        for (node, order) in effects.layouts {
            let at = t + self.config.reconfigure_s;
            self.clock.at(at, Due::Layout(node, order.id, order.gpu));
            self.layouts.insert(order.id, order);
        }
    }

    fn result(&self, label: &str, fleet: &Fleet) -> LiveWeek {
        // Per kind (0 = inference, 1 = training): served and demanded milli-GPU-seconds.
        let mut by_kind = [[0f64; 2]; 2];
        for (i, j) in self.s.jobs.iter().enumerate() {
            let kind = usize::from(is_training(j));
            let work = j.milli as f64 * j.duration_s as f64;
            by_kind[kind][1] += work;
            if self.started[i] {
                by_kind[kind][0] += work;
            }
        }
        // Moved replicas that never restarted served nothing of what they had left.
        let never_back: f64 =
            self.moved_at.iter().map(|(&i, &(_, left))| self.s.jobs[i].milli as f64 * left as f64).sum();
        by_kind[0][0] -= self.lost_milli_s + never_back;
        let served = by_kind[0][0] + by_kind[1][0];
        let demanded = by_kind[0][1] + by_kind[1][1];
        let view = crate::views::reconfig::reconfigurations(&self.c, &Principal::controller());
        let gpus = fleet.nodes.iter().map(|n| n.gpus.len()).sum::<usize>().max(1) as f64;
        let days = self.s.end_s as f64 / 86_400.0;
        LiveWeek {
            label: label.to_string(),
            served_pct: served / demanded.max(1.0) * 100.0,
            inference_served_pct: by_kind[0][0] / by_kind[0][1].max(1.0) * 100.0,
            training_served_pct: by_kind[1][0] / by_kind[1][1].max(1.0) * 100.0,
            started: self.started.iter().filter(|s| **s).count() as u64,
            gave_up: self.gave_up + self.refused,
            reconfigurations: view.applied,
            reconfigurations_per_gpu_day: view.applied as f64 / gpus / days,
            refused_or_abandoned: view.refused + view.abandoned,
            drain_idle_gpu_h: view.cordoned_idle_gpu_hours,
            moves: view.moves,
            commands: self.commands,
        }
    }
}

/// One week three ways: the simulator's comparison, and the same best static layout and the
/// online planner through the live controller.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Compared {
    pub seed: u64,
    pub best_static: String,
    pub sim_static_pct: f64,
    pub sim_dynamic_pct: f64,
    pub sim_gain_pct: f64,
    pub live_static: LiveWeek,
    pub live_dynamic: LiveWeek,
    pub live_gain_pct: f64,
    /// The simulator's reconfigurations per GPU per day, drain GPU-hours and moves, beside the
    /// live controller's.
    pub sim_reconfigurations_per_gpu_day: f64,
    pub sim_drain_idle_gpu_h: f64,
    pub sim_moves: u64,
}

/// Compare one week (`config.seed`).
pub fn compare(config: &DayConfig) -> Result<Compared, WeekError> {
    use gantry_sim::mig_day::{evaluate, scenario, static_candidates};
    let catalog = gantry_catalog::Catalog::embedded();
    let sim = evaluate(config, catalog, |_, _| {})?;
    let s = scenario(config, catalog)?;
    let best = &sim.statics[sim.best_static];
    let candidates = static_candidates(&s, catalog)?;
    let (_, best_fleet) = candidates
        .iter()
        .find(|(label, _)| *label == best.label)
        .ok_or_else(|| WeekError::NoSuchLayout(best.label.clone()))?;
    let gpus = config.nodes * config.gpus_per_node;
    let off = ReconfigurePolicy { mode: ReconfigureMode::Off, ..ReconfigurePolicy::default() };
    let live_static = run(&s, best_fleet, &best.label, config, off)?;
    let live_dynamic = run(&s, &s.fleet, "online planner (live controller)", config, policy(config, gpus))?;
    Ok(Compared {
        seed: config.seed,
        best_static: best.label.clone(),
        sim_static_pct: best.served_pct,
        sim_dynamic_pct: sim.dynamic.served_pct,
        sim_gain_pct: sim.gain_pct,
        live_gain_pct: (live_dynamic.served_pct / live_static.served_pct.max(1e-9) - 1.0) * 100.0,
        live_static,
        live_dynamic,
        sim_reconfigurations_per_gpu_day: sim.dynamic.reconfigurations_per_gpu_day,
        sim_drain_idle_gpu_h: sim.dynamic.drain_idle_gpu_h,
        sim_moves: sim.dynamic.moves,
    })
}

/// Weeks compared, and the mean gains over the best static layout.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Weeks {
    pub live_gain_pct_mean: f64,
    pub sim_gain_pct_mean: f64,
    pub weeks: Vec<Compared>,
}

/// `seeds` weeks from `config.seed` on, each compared, spread over the cores.
pub fn compare_weeks(config: &DayConfig, seeds: u32) -> Result<Weeks, WeekError> {
    let configs: Vec<DayConfig> =
        (0..u64::from(seeds)).map(|i| DayConfig { seed: config.seed.wrapping_add(i), ..config.clone() }).collect();
    let weeks: Vec<Compared> =
        gantry_sim::experiment::parallel::map(&configs, compare).into_iter().collect::<Result<_, _>>()?;
    let mean = |f: &dyn Fn(&Compared) -> f64| weeks.iter().map(f).sum::<f64>() / weeks.len().max(1) as f64;
    let (sim_gain_pct_mean, live_gain_pct_mean) = (mean(&|w| w.sim_gain_pct), mean(&|w| w.live_gain_pct));
    Ok(Weeks { live_gain_pct_mean, sim_gain_pct_mean, weeks })
}
