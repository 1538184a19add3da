//! Idle hoarding: a running job whose GPUs stay under a utilization threshold for a while is
//! flagged once per idle stretch — an event in the log, in `GET /v1/idle` and in metrics — and,
//! where its queue's policy says `reclaim` and the job is preemptible or interactive, stopped (signal, grace,
//! kill) and ended as cancelled, so its GPUs go to work that uses them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What to do about an idle job, per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IdleAction {
    /// Nothing, not even the event.
    Off,
    /// The event only.
    #[default]
    Notify,
    /// The event, and a preemptible or interactive job is stopped and ends cancelled.
    Reclaim,
}

/// The `[idle]` table of the controller's config file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdlePolicy {
    /// Under this utilization (percent, allocation-weighted over the job's GPUs) a job is idle.
    pub threshold_pct: u32,
    /// Idle this long (minutes) before it is flagged (0: at the first idle sample).
    pub after_minutes: u64,
    /// For queues not listed below.
    pub action: IdleAction,
    /// Per queue.
    pub queues: BTreeMap<String, IdleAction>,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        IdlePolicy { threshold_pct: 5, after_minutes: 30, action: IdleAction::Notify, queues: BTreeMap::new() }
    }
}

impl IdlePolicy {
    pub fn check(&self) -> Result<(), crate::error::ServeError> {
        if self.threshold_pct > 100 {
            return Err(crate::error::ServeError::Config(format!(
                "idle.threshold_pct = {}: a percentage, 0 to 100",
                self.threshold_pct
            )));
        }
        if self.after_minutes > 7 * 24 * 60 {
            return Err(crate::error::ServeError::Config(format!(
                "idle.after_minutes = {}: 0 (at once) to 10080 (a week)",
                self.after_minutes
            )));
        }
        Ok(())
    }

    fn action(&self, queue: &str) -> IdleAction {
        self.queues.get(queue).copied().unwrap_or(self.action)
    }
}

/// One idle job, flagged.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct IdleEvent {
    pub job: u64,
    pub queue: String,
    pub user: String,
    /// Idle since (Unix seconds).
    pub since_s: u64,
    pub flagged_at_s: u64,
    /// Its utilization when flagged, percent.
    pub utilization_pct: u32,
    /// What was done: `notify`, or `reclaim` (stopped, ends cancelled).
    pub action: IdleAction,
}

/// A running job as the watch sees it at one sample.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobUse {
    pub job: u64,
    pub queue: String,
    pub user: String,
    /// May be reclaimed: preemptible, or an interactive session.
    pub reclaimable: bool,
    pub utilization_pct: u32,
}

/// The most events kept for `GET /v1/idle`.
const EVENTS_MAX: usize = 1000;

/// Tracks idle stretches. It is told when a running job's utilization changes and when it
/// ends, never shown every job at every tick: a stretch comes due at a known time.
///
/// A checkpoint carries what decides (the stretches under way); the policy comes from the
/// setup, and the events and counts only the views show stay with the live controller.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct IdleWatch {
    #[serde(skip)]
    pub policy: IdlePolicy,
    /// Jobs idle now: since when, and their last use.
    idle: BTreeMap<u64, (u64, JobUse)>,
    /// Idle stretches not yet flagged: (when they come due, job).
    due: BTreeSet<(u64, u64)>,
    flagged: BTreeSet<u64>,
    #[serde(skip)]
    events: VecDeque<IdleEvent>,
    #[serde(skip)]
    pub counts: BTreeMap<&'static str, u64>,
}

impl IdleWatch {
    pub fn new(policy: IdlePolicy) -> IdleWatch {
        IdleWatch { policy, ..IdleWatch::default() }
    }

    /// Take over `old`'s events and counts (what the views show), at a checkpoint.
    pub fn take_history(&mut self, old: &mut IdleWatch) {
        self.events = std::mem::take(&mut old.events);
        self.counts = std::mem::take(&mut old.counts);
    }

    /// A running job's utilization now (when it starts, and whenever it changes).
    pub fn observe(&mut self, now: u64, job: JobUse) {
        let busy = job.utilization_pct >= self.policy.threshold_pct;
        if busy || self.policy.action(&job.queue) == IdleAction::Off {
            // Busy again: a later idle stretch is a new one.
            self.forget(job.job);
            return;
        }
        match self.idle.get_mut(&job.job) {
            Some((_, last)) => *last = job,
            None => {
                self.due.insert((now + self.policy.after_minutes * 60, job.job));
                self.idle.insert(job.job, (now, job));
            }
        }
    }

    /// `job` is not running any more (or is busy): its stretch, if any, is over.
    pub fn forget(&mut self, job: u64) {
        if let Some((since, _)) = self.idle.remove(&job) {
            self.due.remove(&(since + self.policy.after_minutes * 60, job));
        }
        self.flagged.remove(&job);
    }

    /// Flag the stretches due by `now`; returns the jobs flagged now that are to be reclaimed.
    pub fn flag_due(&mut self, now: u64) -> Vec<u64> {
        let mut reclaim = Vec::new();
        while let Some(&(at, job)) = self.due.first().filter(|(at, _)| *at <= now) {
            self.due.remove(&(at, job));
            let Some((since, j)) = self.idle.get(&job) else { continue };
            self.flagged.insert(job);
            let action = self.policy.action(&j.queue);
            let action = if action == IdleAction::Reclaim && !j.reclaimable { IdleAction::Notify } else { action };
            let event = IdleEvent {
                job,
                queue: j.queue.clone(),
                user: j.user.clone(),
                since_s: *since,
                flagged_at_s: now,
                utilization_pct: j.utilization_pct,
                action,
            };
            tracing::warn!(job, queue = %j.queue, user = %j.user, idle_s = now - since, utilization_pct = j.utilization_pct, action = ?action, "idle GPUs");
            *self.counts.entry(if action == IdleAction::Reclaim { "reclaim" } else { "notify" }).or_default() += 1;
            if self.events.len() == EVENTS_MAX {
                self.events.pop_front();
            }
            self.events.push_back(event);
            if action == IdleAction::Reclaim {
                reclaim.push(job);
            }
        }
        reclaim
    }

    /// Flagged jobs still running and idle.
    pub fn flagged(&self) -> usize {
        self.flagged.len()
    }

    /// Is this job flagged now?
    pub fn is_flagged(&self, job: u64) -> bool {
        self.flagged.contains(&job)
    }

    /// The events, newest last.
    pub fn events(&self) -> Vec<IdleEvent> {
        self.events.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job: u64, queue: &str, pct: u32, reclaimable: bool) -> JobUse {
        JobUse { job, queue: queue.into(), user: "ada".into(), reclaimable, utilization_pct: pct }
    }

    #[test]
    fn idle_jobs_are_flagged_once_per_stretch_and_reclaimed_where_the_queue_says() {
        let policy = IdlePolicy {
            threshold_pct: 10,
            after_minutes: 2,
            action: IdleAction::Notify,
            queues: [("dev".to_string(), IdleAction::Reclaim), ("quiet".to_string(), IdleAction::Off)].into(),
        };
        let mut watch = IdleWatch::new(policy);
        let jobs = |pct| {
            vec![
                job(1, "research", pct, true),
                job(2, "dev", pct, true),
                job(3, "dev", pct, false),
                job(4, "quiet", pct, true),
            ]
        };
        let observe = |watch: &mut IdleWatch, now, pct| {
            for j in jobs(pct) {
                watch.observe(now, j);
            }
            watch.flag_due(now)
        };
        assert!(observe(&mut watch, 0, 3).is_empty());
        assert!(observe(&mut watch, 119, 4).is_empty(), "not yet two minutes");
        assert_eq!(watch.flag_due(120), vec![2], "only the preemptible dev job is reclaimed");
        let events = watch.events();
        let actions: Vec<(u64, IdleAction)> = events.iter().map(|e| (e.job, e.action)).collect();
        assert_eq!(actions, [(1, IdleAction::Notify), (2, IdleAction::Reclaim), (3, IdleAction::Notify)]);
        assert_eq!((events[0].since_s, events[0].utilization_pct), (0, 4), "since the stretch began; use when flagged");
        assert!(observe(&mut watch, 500, 3).is_empty(), "flagged once per stretch");
        assert_eq!(watch.flagged(), 3);
        // Busy again, then idle again: a new stretch.
        observe(&mut watch, 600, 50);
        assert_eq!(watch.flagged(), 0);
        observe(&mut watch, 700, 0);
        assert!(watch.flag_due(819).is_empty());
        assert_eq!(watch.flag_due(820), vec![2]);
        assert_eq!(watch.events().len(), 6);
        // Ended jobs are forgotten, and an ended job's stretch never comes due.
        observe(&mut watch, 900, 0);
        for job in 1..=4 {
            watch.forget(job);
        }
        assert_eq!(watch.flagged(), 0);
        watch.observe(
            1000,
            JobUse { job: 9, queue: "dev".into(), user: "ada".into(), reclaimable: true, utilization_pct: 0 },
        );
        watch.forget(9);
        assert!(watch.flag_due(10_000).is_empty());
        assert_eq!(watch.events().len(), 6);
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(IdlePolicy { threshold_pct: 101, ..IdlePolicy::default() }.check().is_err());
        assert!(IdlePolicy { after_minutes: 10_081, ..IdlePolicy::default() }.check().is_err());
        assert!(IdlePolicy::default().check().is_ok());
    }
}
