//! Metering from the state machine's side: what each running job holds on each GPU and how
//! much of it it uses (agents' samples, NVML's, or simulated), the usage ledger and the time
//! series it feeds (committed with the command), and the idle watch that reads the same.

use super::{Agents, Controller, Effects};
use crate::wire::GpuSample;
use std::collections::BTreeMap;

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

    /// What each running job holds on each GPU now, with that GPU's utilization.
    pub(crate) fn holdings(&self) -> Vec<crate::meter::Holding> {
        let mut holdings = Vec::new();
        for (&job, runs) in &self.running {
            let spec = self.scheduler.job(job);
            let queue = spec.map(|j| j.queue.as_str()).unwrap_or_default();
            let user = spec.and_then(|j| j.control.user.as_deref()).unwrap_or_default();
            for g in &runs.grants {
                let sample = self.gpu_sample(&g.node, g.gpu, Some(job));
                // The job's own processes where NVML reports them (a share of a shared GPU);
                // else the whole GPU's utilization.
                let pct = match sample.as_ref().and_then(|s| s.jobs.iter().find(|j| j.job == job)) {
                    Some(share) if g.milli > 0 => (u64::from(share.utilization_pct) * 1000 / g.milli).min(100) as u32,
                    _ => sample.map_or(0, |s| s.utilization_pct),
                };
                holdings.push(crate::meter::Holding {
                    job,
                    queue: queue.to_string(),
                    user: user.to_string(),
                    model: self.catalog.model(g.model).id.clone(),
                    milli: g.milli,
                    utilization_pct: pct,
                });
            }
        }
        holdings
    }

    /// Meter what runs since the last call; write the ledger every few seconds (`force`: now).
    pub(crate) fn meter(&mut self, now: u64, force: bool) {
        // At most once a second (the clock's grain): the loop wakes on every submit.
        if !force && self.meter.last_s() == Some(now) {
            return;
        }
        let holdings = self.holdings();
        self.meter.record(now, &holdings);
        let mut point =
            crate::series::Point { t_s: now, pending_jobs: self.scheduler.queued() as f64, ..Default::default() };
        for h in &holdings {
            let (allocated, used) =
                (h.milli as f64 / 1000.0, h.milli as f64 / 1000.0 * f64::from(h.utilization_pct) / 100.0);
            point.allocated_gpus += allocated;
            point.used_gpus += used;
            let queue = point.queues.entry(h.queue.clone()).or_default();
            queue.0 += allocated;
            queue.1 += used;
        }
        if let Some(done) = self.series.record(point) {
            let keep_from = now.saturating_sub(crate::series::COARSE_POINTS as u64 * crate::series::COARSE_STEP_S);
            match serde_json::to_string(&done) {
                Ok(json) => self.pending.series.push((done.t_s, json, keep_from)),
                Err(e) => tracing::warn!(error = %e, "a series point does not serialize"),
            }
        }
        self.last_holdings = holdings;
        let rows = self.meter.take(now, force);
        self.pending.usage.extend(rows);
    }

    /// Flag jobs idle past the policy's time; stop those their queue reclaims (they end
    /// cancelled). Reads what the meter last saw.
    pub(crate) fn check_idle(&mut self, now: u64) -> Effects {
        if self.idle_checked_s == Some(now) {
            return Effects::default();
        }
        self.idle_checked_s = Some(now);
        let mut by_job: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for h in &self.last_holdings {
            let entry = by_job.entry(h.job).or_default();
            entry.0 += h.milli;
            entry.1 += h.milli * u64::from(h.utilization_pct);
        }
        let uses: Vec<crate::idle::JobUse> = by_job
            .into_iter()
            .filter(|(job, (milli, _))| *milli > 0 && self.running.contains_key(job))
            .map(|(job, (milli, weighted))| {
                let spec = self.scheduler.job(job);
                crate::idle::JobUse {
                    job,
                    queue: spec.map(|j| j.queue.clone()).unwrap_or_default(),
                    user: spec.and_then(|j| j.control.user.clone()).unwrap_or_default(),
                    reclaimable: spec.is_some_and(|j| j.lifecycle.preemptible || j.lifecycle.interactive),
                    utilization_pct: (weighted / milli) as u32,
                }
            })
            .collect();
        let mut effects = Effects::default();
        for job in self.idle.observe(now, &uses) {
            let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
            if let Some(runs) = self.running.get_mut(&job) {
                runs.cancelled = true;
                self.send_stop(job, grace, &mut effects);
            }
        }
        effects
    }
}
