//! The online MIG planner as an operator of the time replay: every period it plans for what
//! runs, waits and arrived lately (`gantry_engine::online::step`); when training waits it
//! moves inference instances off the busy MIG GPUs the plan offers to empty
//! (`Scheduler::relocate`) and plans again; it reconfigures the idle GPUs the plan changes
//! (`Scheduler::set_gpu_mode`, each GPU then out for `reconfigure_s`) and cordons what the
//! plan drains. What that costs is measured here: reconfigurations, moves, their restarts and
//! the GPU time cordoned GPUs leave unused.

use super::{DayConfig, Scenario, is_training, job_spec};
use crate::protocol_b::{Moment, Operator};
use gantry_catalog::Catalog;
use gantry_engine::AllocId;
use gantry_engine::online::{GpuNow, OnlineConfig, choose_empty, step};
use gantry_engine::sched::{JobId, Scheduler};
use gantry_types::{Fleet, Job};
use std::collections::{BTreeMap, BTreeSet};

/// A GPU as (node position, GPU position on the node).
type Gpu = (usize, usize);

/// A running allocation as the planner sees it: the arrival it serves and its planned end.
#[derive(Clone, Copy)]
struct Running {
    alloc: AllocId,
    job: usize,
    end_s: u64,
}

pub(super) struct Planner<'a> {
    s: &'a Scenario,
    config: &'a DayConfig,
    catalog: &'static Catalog,
    /// The fleet with each GPU's mode as it is now.
    fleet: Fleet,
    node_index: BTreeMap<String, usize>,
    last_change: Vec<Vec<Option<u64>>>,
    /// Until when each GPU is out for its reconfiguration.
    out_until: Vec<Vec<u64>>,
    /// GPUs the last plan drains.
    drain: BTreeSet<Gpu>,
    next_plan: Option<u64>,
    /// When it last acted.
    now: u64,
    pub reconfigurations: u64,
    pub moves: u64,
    /// Milli-GPU-seconds moved instances served nothing while they restarted.
    pub restart_milli_s: f64,
    /// Milli-GPU-seconds left unallocated on cordoned GPUs.
    pub drain_idle_milli_s: f64,
}

impl<'a> Planner<'a> {
    pub(super) fn new(s: &'a Scenario, fleet: &Fleet, config: &'a DayConfig, catalog: &'static Catalog) -> Self {
        Planner {
            s,
            config,
            catalog,
            fleet: fleet.clone(),
            node_index: fleet.nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect(),
            last_change: fleet.nodes.iter().map(|n| vec![None; n.gpus.len()]).collect(),
            out_until: fleet.nodes.iter().map(|n| vec![0; n.gpus.len()]).collect(),
            drain: BTreeSet::new(),
            next_plan: Some(0),
            now: 0,
            reconfigurations: 0,
            moves: 0,
            restart_milli_s: 0.0,
            drain_idle_milli_s: 0.0,
        }
    }

    /// (node, position) of the GPU named by node name and NVML index.
    fn locate(&self, node: &str, index: u32) -> Gpu {
        let n = self.node_index[node];
        (n, self.fleet.nodes[n].gpus.iter().position(|x| x.index == index).expect("a GPU the fleet has"))
    }

    /// The GPUs an allocation holds.
    fn held(&self, scheduler: &Scheduler, alloc: AllocId) -> Vec<Gpu> {
        let tasks = scheduler.placement(alloc).expect("a running allocation");
        tasks.iter().flat_map(|t| t.gpus.iter().map(|g| self.locate(&t.node, g.gpu()))).collect()
    }

    /// Each GPU's situation for the online planner: when its work ends, its last change, its
    /// tasks, and whether they can all move (inference instances can; training cannot).
    fn gpus_now(&self, scheduler: &Scheduler, running: &[Running]) -> Vec<Vec<GpuNow>> {
        let mut now: Vec<Vec<GpuNow>> = self
            .last_change
            .iter()
            .map(|node| {
                node.iter().map(|&last| GpuNow { last_change_s: last, movable: true, ..GpuNow::default() }).collect()
            })
            .collect();
        for r in running {
            let movable = !is_training(&self.s.jobs[r.job]);
            for (n, g) in self.held(scheduler, r.alloc) {
                let gpu = &mut now[n][g];
                gpu.busy_until_s = Some(gpu.busy_until_s.map_or(r.end_s, |e| e.max(r.end_s)));
                gpu.tasks += 1;
                gpu.movable &= movable;
            }
        }
        now
    }

    /// What to plan for: what waits, plus what the recent arrivals will keep busy — per
    /// shape, arrivals in the window × their length ÷ the window (Little's law), so the plan
    /// follows the mix as it shifts instead of what happens to run now.
    fn demand(&self, t: u64, waiting: &BTreeSet<usize>) -> Vec<Job> {
        let jobs = &self.s.jobs;
        let since = t.saturating_sub(self.config.window_s);
        let (from, to) = (jobs.partition_point(|j| j.arrival_s < since), jobs.partition_point(|j| j.arrival_s <= t));
        let mut busy_s: BTreeMap<usize, u64> = BTreeMap::new();
        for j in &jobs[from..to] {
            *busy_s.entry(j.shape).or_default() += j.duration_s;
        }
        let window = (t - since).max(1) as f64;
        let mut demand = Vec::new();
        for (shape, busy) in busy_s {
            for k in 0..(busy as f64 / window).round() as usize {
                let mut job = self.s.shapes[shape].clone();
                job.name = format!("forecast-{shape}-{k}");
                demand.push(job);
            }
        }
        demand.extend(waiting.iter().map(|&i| job_spec(self.s, i)));
        demand
    }

    /// One planning step at `t`: moves (returned as (old, new)), reconfigurations, drains.
    fn plan(
        &mut self,
        t: u64,
        scheduler: &mut Scheduler,
        mut running: Vec<Running>,
        waiting: &BTreeSet<usize>,
    ) -> Result<Vec<(AllocId, AllocId)>, crate::SimError> {
        let (config, catalog) = (self.config, self.catalog);
        let online = OnlineConfig { period_s: config.period_s, ..config.online.clone() };
        let demand = self.demand(t, waiting);
        let now = self.gpus_now(scheduler, &running);
        let mut decided = step(&self.fleet, &now, &demand, t, &online, catalog)?;
        // Training waits: empty the GPUs the planner picks for it, then plan again.
        let training: Vec<u32> = waiting
            .iter()
            .map(|&i| &self.s.jobs[i])
            .filter(|j| is_training(j))
            .map(|j| u32::try_from(j.milli / 1000).unwrap_or(u32::MAX))
            .collect();
        let mut moved = Vec::new();
        if !training.is_empty() && !decided.empty.is_empty() {
            let groups: Vec<Vec<Gpu>> = choose_empty(&self.fleet, &now, &decided, &training)
                .iter()
                .map(|group| group.iter().map(|(name, index)| self.locate(name, *index)).collect())
                .collect();
            moved = self.empty(&groups, scheduler, &mut running, t)?;
            if !moved.is_empty() {
                let now = self.gpus_now(scheduler, &running);
                decided = step(&self.fleet, &now, &demand, t, &online, catalog)?;
            }
        }
        let s = self.s;
        for (node, index, mode) in &decided.reconfigure {
            let (n, g) = self.locate(node, *index);
            if scheduler.set_gpu_mode(node, *index, mode, |id: JobId| Some(job_spec(s, id as usize)))? {
                self.fleet.nodes[n].gpus[g].mode = mode.clone();
                self.last_change[n][g] = Some(t);
                self.reconfigurations += 1;
                self.out_until[n][g] = t + config.reconfigure_s;
            }
        }
        // Drains on nodes this step did not plan (a large fleet, planned a slice at a time)
        // stay until their slice's turn.
        self.drain.retain(|&(n, _)| !decided.planned(n));
        let named: Vec<Gpu> = decided.drain.keys().map(|(name, index)| self.locate(name, *index)).collect();
        self.drain.extend(named);
        Ok(moved)
    }

    /// For each group of GPUs, move every instance on them that runs longer than its restart
    /// to free instances elsewhere (every group's GPUs cordoned meanwhile, so nothing moves
    /// onto a GPU being emptied) — a group entirely or not at all. `running` is updated.
    fn empty(
        &mut self,
        groups: &[Vec<Gpu>],
        scheduler: &mut Scheduler,
        running: &mut [Running],
        t: u64,
    ) -> Result<Vec<(AllocId, AllocId)>, crate::SimError> {
        let all: BTreeSet<Gpu> = groups.iter().flatten().copied().collect();
        self.cordon(scheduler, &all, true)?;
        let mut moved = Vec::new();
        for group in groups {
            let on_group: Vec<usize> = (0..running.len())
                .filter(|&k| running[k].end_s > t + self.config.restart_s)
                .filter(|&k| self.held(scheduler, running[k].alloc).iter().any(|gpu| group.contains(gpu)))
                .collect();
            let allocs: Vec<AllocId> = on_group.iter().map(|&k| running[k].alloc).collect();
            let Some(placed) = scheduler.relocate(&allocs, t)? else { continue };
            for (&k, new) in on_group.iter().zip(placed) {
                moved.push((running[k].alloc, new));
                running[k].alloc = new;
                self.restart_milli_s += self.s.jobs[running[k].job].milli as f64 * self.config.restart_s as f64;
            }
        }
        self.cordon(scheduler, &all, false)?;
        self.moves += moved.len() as u64;
        Ok(moved)
    }

    fn cordon(&self, scheduler: &mut Scheduler, gpus: &BTreeSet<Gpu>, on: bool) -> Result<(), crate::SimError> {
        for &(n, g) in gpus {
            let node = &self.fleet.nodes[n];
            scheduler.set_gpu_cordoned(&node.name, node.gpus[g].index, on)?;
        }
        Ok(())
    }

    /// Cordons as of `t`: out for reconfiguration, or drained by the last plan.
    fn cordon_as_planned(&self, scheduler: &mut Scheduler, t: u64) -> Result<(), crate::SimError> {
        for (n, node) in self.fleet.nodes.iter().enumerate() {
            for (g, gpu) in node.gpus.iter().enumerate() {
                let want = self.out_until[n][g] > t || self.drain.contains(&(n, g));
                scheduler.set_gpu_cordoned(&node.name, gpu.index, want)?;
            }
        }
        Ok(())
    }
}

impl Operator for Planner<'_> {
    fn next_at(&self) -> Option<u64> {
        let resume = self.out_until.iter().flatten().copied().filter(|&t| t > self.now).min();
        self.next_plan.into_iter().chain(resume).min()
    }

    fn act(&mut self, t: u64, moment: Moment<'_>) -> Result<Vec<(AllocId, AllocId)>, crate::SimError> {
        self.now = t;
        let mut moved = Vec::new();
        if self.next_plan.is_some_and(|at| at <= t) {
            let running: Vec<Running> =
                moment.running.iter().map(|(&alloc, r)| Running { alloc, job: r.job, end_s: r.planned_end }).collect();
            moved = self.plan(t, moment.scheduler, running, moment.waiting)?;
            // Steps stay on the period's grid from 0 (the replay's clock may start later).
            let mut next = self.next_plan.unwrap_or(t);
            while next <= t {
                next += self.config.period_s.max(1);
            }
            self.next_plan = Some(next).filter(|&next| next < self.s.end_s);
        }
        self.cordon_as_planned(moment.scheduler, t)?;
        Ok(moved)
    }

    fn observe(&mut self, from: u64, to: u64, scheduler: &Scheduler) {
        let gpus = &scheduler.engine().state().gpus;
        let unused: u64 = gpus.iter().filter(|g| g.cordoned).map(|g| u64::from(1000 - g.used_milli)).sum();
        self.drain_idle_milli_s += unused as f64 * (to - from) as f64;
    }
}
