//! How many jobs wait (not yet started: pending, held, on dependencies), per user and per
//! queue: what the admission limits `pending_per_user` and `pending_per_queue` bound. Kept
//! up to date as events change job states, so a submission checks it without a scan.

use gantry_store::JobRow;
use gantry_types::JobState;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(crate) struct Backlog {
    by_user: BTreeMap<String, usize>,
    by_queue: BTreeMap<String, usize>,
}

/// The user a waiting job counts against (`""`: none recorded).
fn user_of(row: &JobRow) -> &str {
    row.job.control.user.as_deref().unwrap_or_default()
}

impl Backlog {
    /// Counted from a jobs table.
    pub(crate) fn of<'a>(rows: impl Iterator<Item = &'a JobRow>) -> Backlog {
        let mut backlog = Backlog::default();
        for row in rows {
            backlog.change(None, Some(row));
        }
        backlog
    }

    /// A row went from `before` to `after` (either may be absent).
    pub(crate) fn change(&mut self, before: Option<&JobRow>, after: Option<&JobRow>) {
        for (row, delta) in [(before, -1i64), (after, 1)] {
            let Some(row) = row.filter(|r| r.state == JobState::Pending) else { continue };
            for (map, key) in [(&mut self.by_user, user_of(row)), (&mut self.by_queue, row.queue.as_str())] {
                let n = map.entry(key.to_string()).or_default();
                *n = n.checked_add_signed(delta as isize).expect("a waiting job is counted once");
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }

    pub(crate) fn of_user(&self, user: &str) -> usize {
        self.by_user.get(user).copied().unwrap_or(0)
    }

    pub(crate) fn of_queue(&self, queue: &str) -> usize {
        self.by_queue.get(queue).copied().unwrap_or(0)
    }
}
