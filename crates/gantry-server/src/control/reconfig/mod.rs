//! Reconfiguration as the controller's own activity (`reconfigure = "auto"`): the online
//! planner's changes carried out on the live fleet, one GPU at a time, as a durable record
//! that moves through its phases —
//!
//! 1. **draining**: the GPU is cordoned (nothing new lands on it); its work ends, or its
//!    restartable replicas are moved; a drain not empty by its deadline is abandoned;
//! 2. **ordered**: the node's agent is ordered to apply the mode (protocol 2), all or
//!    nothing, and the GPU stays cordoned until the agent reports what the hardware has;
//! 3. **applied** (the new mode is recorded and waiting jobs compiled against it), **refused**
//!    (the old layout was put back; the same change is not tried again for a while) or
//!    **abandoned** — each time uncordoned.
//!
//! Every phase is written to the store's `reconfigurations` table with the command that
//! caused it, so a restarted controller (or a new leader) resumes from the record: a draining
//! GPU is cordoned again, an ordered one waits for its agent, whose registration reports the
//! layout the hardware really has. The guards below are what keeps this safe on a real fleet.
//! This module holds the settings and the records; its parts the controller's steps: what a
//! change would serve (`plan.rs`) and gain (`benefit.rs`), carrying changes through their
//! phases (`run.rs`), and moving restartable replicas off a draining GPU (`moves.rs`).

mod benefit;
#[cfg(test)]
mod controller_tests;
mod moves;
mod plan;
mod run;

pub use gantry_api::reconfig::{Phase, Reconfiguration, ReconfigureMode};

use crate::error::FieldError;
use gantry_types::GpuMode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// The guards (`[reconfigure]` in the controller's config). Defaults are meant to be safe on
/// a real fleet: a GPU changes at most twice an hour, at most 8 GPUs are out at once, a
/// busy GPU is drained only for work ending within the hour and never held longer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconfigurePolicy {
    pub mode: ReconfigureMode,
    /// Seconds between planning steps.
    pub period_s: u64,
    /// At most this many reconfigurations of one GPU in any hour.
    pub max_per_gpu_per_hour: u32,
    /// At most this many GPUs cordoned for reconfiguration at once (the drain budget).
    pub max_cordoned: u32,
    /// A change is made only if it serves at least this many tasks of the demand planned for
    /// (waiting jobs first, then what the last `window_s` of arrivals will keep busy).
    pub min_benefit_tasks: u32,
    /// Hysteresis: a GPU is not changed again within this long of its last change.
    pub cooldown_s: u64,
    /// A busy GPU is drained for a change only when its work is planned to end within this
    /// long (by the jobs' time limits); 0: only idle GPUs change.
    pub drain_horizon_s: u64,
    /// A drain not empty after this long is abandoned and the GPU uncordoned.
    pub drain_deadline_s: u64,
    /// Plan for the arrivals of this last window too (Little's law per job shape, lengths by
    /// time limit), not only for what waits and runs; 0: no forecast.
    pub window_s: u64,
    /// At most this many restartable jobs moved per hour to empty GPUs; 0: never move.
    pub max_moves_per_hour: u32,
    /// After an agent refused a change, the same change of that GPU waits this long.
    pub refused_backoff_s: u64,
    /// A MIG job that arrived since the last step and waits brings the next step forward to
    /// this long after the last one (a job only a new layout can start does not wait a whole
    /// period); 0: steps only every `period_s`.
    pub replan_after_s: u64,
}

impl Default for ReconfigurePolicy {
    fn default() -> Self {
        ReconfigurePolicy {
            mode: ReconfigureMode::Advise,
            period_s: 300,
            max_per_gpu_per_hour: 2,
            max_cordoned: 8,
            min_benefit_tasks: 1,
            cooldown_s: 1800,
            drain_horizon_s: 3600,
            drain_deadline_s: 3600,
            window_s: 3600,
            max_moves_per_hour: 20,
            refused_backoff_s: 86_400,
            replan_after_s: 10,
        }
    }
}

/// Bounds on the settings, with why.
pub mod bounds {
    /// A step at most every 10 s: planning costs a pass over the fleet (0.26 s at 10,000 GPUs).
    pub const PERIOD_MIN_S: u64 = 10;
    /// At most a day between steps: longer is `mode = "advise"`.
    pub const PERIOD_MAX_S: u64 = 86_400;
    /// A drain may not hold a GPU longer than a day.
    pub const DRAIN_DEADLINE_MAX_S: u64 = 86_400;
    /// Finished reconfigurations kept in memory for `gantry nodes` and the dashboard (all of
    /// them stay in the store).
    pub const RECENT_KEPT: usize = 200;
    /// Finished reconfigurations read back at open (the unfinished always are): enough to
    /// rebuild the guards' memory — a day of refusals, an hour of changes — on a fleet that
    /// changes up to 10,000 GPUs a day; the older history stays in the store, unread.
    pub const FINISHED_READ_AT_OPEN: usize = 10_000;
}

impl ReconfigurePolicy {
    /// Refuse settings that could not work or would be unsafe, with the field and why.
    pub fn check(&self) -> Result<(), FieldError> {
        use bounds::*;
        let refuse = |field: &str, message: String| Err(FieldError::new(format!("reconfigure.{field}"), message));
        if !(PERIOD_MIN_S..=PERIOD_MAX_S).contains(&self.period_s) {
            let message =
                format!("reconfigure.period: {} s is outside {PERIOD_MIN_S}..={PERIOD_MAX_S} s", self.period_s);
            return refuse("period", message);
        }
        if self.max_per_gpu_per_hour == 0 {
            let message = "reconfigure.max_per_gpu_per_hour: 0 would never change a GPU (say mode = \"advise\")";
            return refuse("max_per_gpu_per_hour", message.into());
        }
        if self.replan_after_s != 0 && self.replan_after_s < PERIOD_MIN_S {
            let message = format!(
                "reconfigure.replan_after: {} s is under {PERIOD_MIN_S} s (0 turns it off)",
                self.replan_after_s
            );
            return refuse("replan_after", message);
        }
        if self.max_cordoned == 0 {
            let message = "reconfigure.max_cordoned: 0 would never change a GPU (say mode = \"advise\")";
            return refuse("max_cordoned", message.into());
        }
        if self.drain_deadline_s == 0 || self.drain_deadline_s > DRAIN_DEADLINE_MAX_S {
            let message = format!(
                "reconfigure.drain_deadline: {} s is outside 1..={DRAIN_DEADLINE_MAX_S} s",
                self.drain_deadline_s
            );
            return refuse("drain_deadline", message);
        }
        if self.drain_horizon_s > self.drain_deadline_s {
            let message = format!(
                "reconfigure.drain_horizon ({} s) is longer than drain_deadline ({} s): drains would be abandoned before the work they wait for ends",
                self.drain_horizon_s, self.drain_deadline_s
            );
            return refuse("drain_horizon", message);
        }
        Ok(())
    }
}

/// The controller's reconfiguration state: the policy, what is under way, and what the
/// guards remember.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Reconfigs {
    /// From the setup, not carried by a checkpoint.
    #[serde(skip)]
    pub policy: ReconfigurePolicy,
    /// Under way, by GPU.
    #[serde(with = "super::image::pairs")]
    pub active: BTreeMap<(String, u32), Reconfiguration>,
    /// Finished, newest last (at most [`bounds::RECENT_KEPT`]).
    pub recent: VecDeque<Reconfiguration>,
    pub next_id: u64,
    pub next_plan_s: Option<u64>,
    /// When each GPU was last changed (applied), for the per-hour limit and the cooldown.
    #[serde(with = "super::image::pairs")]
    pub changed_at: BTreeMap<(String, u32), VecDeque<u64>>,
    /// (GPU, mode refused) → not tried again before.
    #[serde(with = "super::image::pairs")]
    pub refused: BTreeMap<(String, u32), (GpuMode, u64)>,
    /// When restartable jobs were moved, within the last hour.
    pub moves: VecDeque<u64>,
    /// Orders not yet handed to an in-process caller (`Agents::Local`) since the open.
    pub unsent: std::collections::BTreeSet<u64>,
    /// Submissions of the last window: (time, job id), for the forecast.
    pub arrivals: VecDeque<(u64, u64)>,
    pub totals: Totals,
    /// When cordoned GPUs' unused time was last counted.
    pub observed_s: Option<u64>,
    /// When the last planning step ran.
    pub planned_s: Option<u64>,
}

/// Counters for the metrics.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    pub applied: u64,
    pub refused: u64,
    pub abandoned: u64,
    pub moves: u64,
    /// Milli-GPU-seconds left unallocated on GPUs cordoned for reconfiguration.
    pub cordoned_idle_milli_s: f64,
}

impl Reconfigs {
    pub fn new(policy: ReconfigurePolicy) -> Reconfigs {
        Reconfigs { policy, next_id: 1, ..Default::default() }
    }

    /// Take back the stored records: the unfinished ones are under way again; the others
    /// feed the guards and the recent list.
    pub fn restore(&mut self, records: Vec<Reconfiguration>) {
        for r in records {
            self.next_id = self.next_id.max(r.id + 1);
            if r.phase.is_final() {
                if r.phase == Phase::Applied {
                    let at = r.ended_s.unwrap_or(r.started_s);
                    self.changed_at.entry((r.node.clone(), r.gpu)).or_default().push_back(at);
                }
                let backoff = match r.phase {
                    Phase::Refused => Some(self.policy.refused_backoff_s),
                    // A drain abandoned at its deadline is not tried again before the cooldown.
                    Phase::Abandoned if r.moved.is_empty() => Some(self.policy.cooldown_s),
                    _ => None,
                };
                if let Some(backoff) = backoff {
                    let until = r.ended_s.unwrap_or(r.started_s) + backoff;
                    self.refused.insert((r.node.clone(), r.gpu), (r.to.clone(), until));
                }
                self.finish(r);
            } else {
                if r.phase == Phase::Ordered {
                    self.unsent.insert(r.id);
                }
                self.active.insert((r.node.clone(), r.gpu), r);
            }
        }
    }

    /// Keep a finished record in the recent list.
    pub fn finish(&mut self, r: Reconfiguration) {
        self.recent.push_back(r);
        while self.recent.len() > bounds::RECENT_KEPT {
            self.recent.pop_front();
        }
    }

    /// May GPU `key` change again at `now` (per-hour limit and cooldown)?
    pub fn may_change(&self, key: &(String, u32), now: u64) -> bool {
        let Some(times) = self.changed_at.get(key) else { return true };
        let last_hour = times.iter().filter(|&&t| t + 3600 > now).count() as u32;
        let cooled = times.back().is_none_or(|&t| now >= t + self.policy.cooldown_s);
        last_hour < self.policy.max_per_gpu_per_hour && cooled
    }

    /// Was changing `key` to `to` refused lately?
    pub fn refused_lately(&self, key: &(String, u32), to: &GpuMode, now: u64) -> bool {
        self.refused.get(key).is_some_and(|(mode, until)| mode == to && now < *until)
    }

    /// Moves left this hour.
    pub fn moves_left(&mut self, now: u64) -> u32 {
        while self.moves.front().is_some_and(|&t| t + 3600 <= now) {
            self.moves.pop_front();
        }
        self.policy.max_moves_per_hour.saturating_sub(self.moves.len() as u32)
    }

    /// Forget arrivals older than the window, and change times older than needed.
    pub fn prune(&mut self, now: u64) {
        // The forecast reads a window of arrivals; bringing a step forward, those since the last.
        let window = self.policy.window_s.max(self.policy.period_s);
        while self.arrivals.front().is_some_and(|&(t, _)| t + window < now) {
            self.arrivals.pop_front();
        }
        // The per-hour limit and the cooldown read no further back than this.
        let keep = self.policy.cooldown_s.max(3600);
        self.changed_at.retain(|_, times| {
            times.retain(|&t| t + keep > now);
            !times.is_empty()
        });
        self.refused.retain(|_, (_, until)| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_changes_at_most_n_times_an_hour_and_not_within_its_cooldown() {
        let policy = ReconfigurePolicy { max_per_gpu_per_hour: 2, cooldown_s: 600, ..ReconfigurePolicy::default() };
        let mut r = Reconfigs::new(policy);
        let key = ("n".to_string(), 0);
        assert!(r.may_change(&key, 0));
        r.changed_at.entry(key.clone()).or_default().push_back(0);
        assert!(!r.may_change(&key, 599), "cooling down");
        assert!(r.may_change(&key, 600));
        r.changed_at.entry(key.clone()).or_default().push_back(600);
        assert!(!r.may_change(&key, 1300), "two in the last hour");
        assert!(r.may_change(&key, 3601), "the first one is an hour old");
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_the_field() {
        assert_eq!(ReconfigurePolicy::default().check(), Ok(()));
        for (policy, says) in [
            (ReconfigurePolicy { period_s: 1, ..Default::default() }, "reconfigure.period"),
            (ReconfigurePolicy { max_per_gpu_per_hour: 0, ..Default::default() }, "max_per_gpu_per_hour"),
            (ReconfigurePolicy { max_cordoned: 0, ..Default::default() }, "max_cordoned"),
            (ReconfigurePolicy { drain_deadline_s: 0, ..Default::default() }, "drain_deadline"),
            (
                ReconfigurePolicy { drain_horizon_s: 7200, drain_deadline_s: 3600, ..Default::default() },
                "drain_horizon",
            ),
        ] {
            let err = policy.check().expect_err(says);
            assert!(err.field.ends_with(says) && err.message.contains(says), "{err:?}");
        }
        let unknown = serde_json::from_str::<ReconfigurePolicy>(r#"{"mode": "auto", "max_drains": 3}"#);
        assert!(unknown.is_err(), "an unknown key is an error, not ignored");
        let auto: ReconfigurePolicy = serde_json::from_str(r#"{"mode": "auto"}"#).expect("parses");
        assert_eq!(auto, ReconfigurePolicy { mode: ReconfigureMode::Auto, ..Default::default() });
    }
}
