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
                // Saturating: during recovery rows are loaded before the counts are (they are
                // counted again from the table once recovery is done, `Backlog::of`).
                let n = map.entry(key.to_string()).or_default();
                *n = n.saturating_add_signed(delta as isize);
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

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_types::{Ending, Event};

    fn submitted(id: u64, user: &str, queue: &str) -> JobRow {
        let text = format!("[[job]]\nname = \"j{id}\"\nqueue = \"{queue}\"\nuser = \"{user}\"\n");
        let job = gantry_spec::parse_workload(&text, gantry_catalog::Catalog::embedded()).expect("a job").remove(0);
        gantry_store::apply_event(None, &Event::Submitted { id, at_s: 1, job: Box::new(job) }).expect("submitted")
    }

    #[test]
    fn waiting_jobs_are_counted_per_user_and_queue_and_leave_when_they_end() {
        let rows = [submitted(1, "ann", "a"), submitted(2, "ann", "b"), submitted(3, "bob", "a")];
        let mut backlog = Backlog::of(rows.iter());
        assert_eq!((backlog.of_user("ann"), backlog.of_user("bob"), backlog.of_queue("a")), (2, 1, 2));
        let ended = Event::ended(1, 2, Ending::Cancelled, None);
        let after = gantry_store::apply_event(Some(&rows[0]), &ended).expect("ends");
        backlog.change(Some(&rows[0]), Some(&after));
        assert_eq!((backlog.of_user("ann"), backlog.of_queue("a"), backlog.of_user("carol")), (1, 1, 0));
        // Recovery ends a pending job before the counts exist: nothing to take away, no panic.
        let mut empty = Backlog::default();
        empty.change(Some(&rows[0]), Some(&after));
        assert_eq!(empty.of_user("ann"), 0);
    }
}
