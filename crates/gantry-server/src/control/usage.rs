//! Metering from the state machine's side: what each running job holds on each GPU and how
//! much of it it uses (agents' samples, NVML's, or simulated), the usage ledger and the time
//! series it feeds (committed with the command), and the idle watch that reads the same.

use super::{Agents, Controller, Effects};
use crate::wire::GpuSample;

impl Controller {
    /// GPU `index` of `node`'s utilization: its agent's last sample; with `Agents::Local` (a
    /// caller running tasks itself: the simulator), simulated from the job holding it.
    pub(crate) fn gpu_sample(&self, node: &str, index: u32, holder: Option<u64>) -> Option<GpuSample> {
        match self.agents {
            Agents::Remote { .. } => {
                self.links.get(node).and_then(|l| l.samples.iter().find(|s| s.index == index)).cloned()
            }
            Agents::Local => {
                // Simulated: a steady made-up load while a job holds the GPU, else idle.
                let pct = holder.map_or(0, |job| gantry_agent::sample::simulated_pct(job, index));
                Some(GpuSample { index, utilization_pct: pct, memory_used_mib: 0, measured: false, jobs: Vec::new() })
            }
        }
    }

    /// GPU `index` of `node`'s utilization as the views show it: its agent's latest sample,
    /// taken in by the meter or not (it is at most [`super::agents::SAMPLES_EVERY_S`] newer).
    pub fn shown_sample(&self, node: &str, index: u32, holder: Option<u64>) -> Option<GpuSample> {
        match self.agents {
            Agents::Remote { .. } => {
                self.links.get(node).and_then(|l| l.recent_samples.iter().find(|s| s.index == index)).cloned()
            }
            Agents::Local => self.gpu_sample(node, index, holder),
        }
    }

    /// What running `job` holds on each GPU now, with that GPU's utilization.
    fn lines_of(&self, job: u64) -> Vec<crate::meter::Line> {
        let Some(runs) = self.running.get(&job) else { return Vec::new() };
        runs.grants
            .iter()
            .map(|g| {
                let sample = self.gpu_sample(&g.node, g.gpu, Some(job));
                // The job's own processes where NVML reports them (a share of a shared GPU);
                // else the whole GPU's utilization.
                let pct = match sample.as_ref().and_then(|s| s.jobs.iter().find(|j| j.job == job)) {
                    Some(share) if g.milli > 0 => (u64::from(share.utilization_pct) * 1000 / g.milli).min(100) as u32,
                    _ => sample.map_or(0, |s| s.utilization_pct),
                };
                crate::meter::Line {
                    model: self.catalog.model(g.model).id.clone(),
                    milli: g.milli,
                    utilization_pct: pct,
                }
            })
            .collect()
    }

    /// Meter `job` from now at its rates now (it started, or its GPUs' utilization may have
    /// changed), and show the idle watch.
    pub(crate) fn remeter(&mut self, job: u64, now: u64) {
        let lines = self.lines_of(job);
        let Some(spec) = self.scheduler.job(job) else { return };
        let (queue, user) = (spec.queue.clone(), spec.control.user.clone().unwrap_or_default());
        let reclaimable = spec.lifecycle.preemptible || spec.lifecycle.interactive;
        let milli: u64 = lines.iter().map(|l| l.milli).sum();
        let weighted: u64 = lines.iter().map(crate::meter::Line::used_rate).sum();
        match weighted.checked_div(milli) {
            Some(pct) => {
                let utilization_pct = pct as u32;
                let used =
                    crate::idle::JobUse { job, queue: queue.clone(), user: user.clone(), reclaimable, utilization_pct };
                self.idle.observe(now, used);
            }
            None => self.idle.forget(job),
        }
        self.meter.set(now, job, &queue, &user, lines);
    }

    /// `node`'s utilization samples changed: meter its jobs at their new rates.
    pub(crate) fn remeter_node(&mut self, node: &str, now: u64) {
        let jobs: Vec<u64> = self.on_node.get(node).map(|jobs| jobs.iter().copied().collect()).unwrap_or_default();
        for job in jobs {
            self.remeter(job, now);
        }
    }

    /// `job` holds nothing from now: its complete rows go to the ledger with this command.
    pub(crate) fn unmeter(&mut self, job: u64, now: u64) {
        let rows = self.meter.end(now, job);
        self.pending.usage.extend(rows);
        self.idle.forget(job);
        if let Some(runs) = self.running.get(&job) {
            for node in runs.tasks.values() {
                if let Some(jobs) = self.on_node.get_mut(node) {
                    jobs.remove(&job);
                    if jobs.is_empty() {
                        self.on_node.remove(node);
                    }
                }
            }
        }
    }

    /// Write what is metered when a flush is due (`force`: now), and the series point.
    pub(crate) fn meter(&mut self, now: u64, force: bool) {
        let rows = self.meter.take(now, force);
        self.pending.usage.extend(rows);
        if !self.series.wants(now) {
            return;
        }
        let (allocated_gpus, used_gpus) = self.meter.fleet().gpus();
        let queues = self.meter.queues().iter().map(|(q, held)| (q.clone(), held.gpus())).collect();
        let point = crate::series::Point {
            t_s: now,
            pending_jobs: self.scheduler.queued() as f64,
            allocated_gpus,
            used_gpus,
            queues,
        };
        if let Some(done) = self.series.record(point) {
            let keep_from = now.saturating_sub(crate::series::COARSE_POINTS as u64 * crate::series::COARSE_STEP_S);
            match serde_json::to_string(&done) {
                Ok(json) => self.pending.series.push((done.t_s, json, keep_from)),
                Err(e) => tracing::warn!(error = %e, "a series point does not serialize"),
            }
        }
    }

    /// Flag jobs idle past the policy's time; stop those their queue reclaims (they end
    /// cancelled).
    pub(crate) fn check_idle(&mut self, now: u64) -> Effects {
        let mut effects = Effects::default();
        for job in self.idle.flag_due(now) {
            let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
            if let Some(runs) = self.running.get_mut(&job) {
                runs.cancelled = true;
                runs.cancelled_by = Some(gantry_types::CANCELLED_BY_CONTROLLER.into());
                self.send_stop(job, grace, &mut effects);
            }
        }
        effects
    }
}
