//! What of a heartbeat is applied and logged: a node's reports about its own current tasks,
//! its own GPUs' samples and its own runs' usage, and at most [`FOREIGN_REPORTS_MAX`] reports
//! about anything else (orphans after a restart, a run already ended, another node's tasks).
//! The heartbeat is trimmed before it is applied, so the command log keeps exactly what was
//! applied and a logged heartbeat is as large as the node's real work, not as large as a
//! hostile agent can make it. Trimming reads only the state before the command, so a replay
//! of the trimmed heartbeat trims nothing more.

use super::Controller;
use crate::wire::Heartbeat;
use std::collections::BTreeSet;

/// Reports about tasks that are not a current task of this node, per heartbeat: an agent that
/// really holds orphans (after a controller restart) is told to stop or forget this many a
/// heartbeat, a few seconds apart, which clears hundreds in a minute; junk past it is dropped
/// unread.
pub const FOREIGN_REPORTS_MAX: usize = 64;

/// Task reports one heartbeat may carry: a node runs a few hundred tasks at most (48 MPS
/// clients on each of 8 GPUs is 384); 10,000 leaves room for many small CPU tasks and bounds
/// what one message can make the controller do. Over it, the heartbeat is refused whole.
pub const TASK_REPORTS_MAX: usize = 10_000;

/// GPU samples one heartbeat may carry: no node has more GPUs than this.
pub const GPU_SAMPLES_MAX: usize = 256;

/// A task an agent leaves out of its heartbeats is offered again at most this often (seconds):
/// an agent that drops and reports a task in turn would otherwise make every heartbeat a change
/// worth logging.
pub const REOFFER_EVERY_S: u64 = 60;

impl Controller {
    /// Keep what of `beat` this node may say (see the module's doc). A heartbeat over its
    /// bounds is left whole, to be refused whole.
    pub(crate) fn trim_heartbeat(&self, node: &str, beat: &mut Heartbeat) {
        if check_heartbeat_size(beat).is_err() {
            return;
        }
        let mut foreign = 0usize;
        beat.tasks.retain(|r| {
            let own = self.running.get(&r.key.job).is_some_and(|runs| {
                runs.attempt == r.key.attempt
                    && runs.tasks.get(&(r.key.group.clone(), r.key.replica)).is_some_and(|n| n == node)
            });
            foreign += usize::from(!own);
            own || foreign <= FOREIGN_REPORTS_MAX
        });
        // The node's own GPUs: a range of the (node, index) map, not a scan of the fleet's.
        let gpus: BTreeSet<u32> = self
            .uuids
            .range((node.to_string(), 0)..=(node.to_string(), u32::MAX))
            .map(|((_, index), _)| *index)
            .collect();
        let mut seen = BTreeSet::new();
        beat.samples.retain(|s| gpus.contains(&s.index) && seen.insert(s.index));
        let runs: BTreeSet<(u64, u32)> = self.runs_on(node).map(|(job, r)| (job, r.attempt)).collect();
        let mut seen = BTreeSet::new();
        beat.usage.retain(|u| runs.contains(&(u.job, u.attempt)) && seen.insert((u.job, u.attempt)));
    }
}

/// A heartbeat over the bounds is refused whole, before anything in it counts.
pub(super) fn check_heartbeat_size(beat: &Heartbeat) -> Result<(), crate::error::ControlError> {
    for (what, count, max) in [
        ("heartbeat_task_reports", beat.tasks.len(), TASK_REPORTS_MAX),
        ("heartbeat_gpu_samples", beat.samples.len(), GPU_SAMPLES_MAX),
    ] {
        if count > max {
            return Err(crate::error::ControlError::TooLarge {
                limit: what,
                value: max as u64,
                message: format!("a heartbeat carries {count} entries of {what}"),
            });
        }
    }
    Ok(())
}
