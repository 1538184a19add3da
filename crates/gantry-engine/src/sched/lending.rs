//! Reclaim-aware lending: a queue's idle guarantee is lent to other queues' jobs, but a loan
//! its holder takes back soon after throws the borrower's work away (the churn of a daily
//! peak or a periodic burst), and a loan to a job with a minimum runtime cannot be taken back
//! before that runtime is over. So a start that would make its queue borrow in a flavor is
//! refused when what stays free after it could not hold what the guarantee holders claim:
//!
//! - what their jobs waiting within the guarantee need now (`entitled.rs`); and
//! - what they used in the past stretch as long as the borrower's protected run — its
//!   minimum runtime, else its planned length up to the tree's lending horizon
//!   (`PreemptionRules::lend_horizon_s`, default 30 minutes) — at most [`LOOKBACK_MAX_S`]:
//!   the recent past as the forecast of the near future; a team that peaked at 12 GPUs in
//!   the last half hour is expected to want them again in the next.
//!
//! The same check, with a plan's victims counted as free (`owed_after`), holds back a
//! borrower's priority preemption of its own queue's jobs (`rights.rs`, `reclaimed_next`).
//!
//! A borrower no reclaim may stop (not preemptible, or its preemption budget spent) borrows
//! only where no guarantee holder ran, or has jobs waiting within its guarantee, within its
//! whole planned length: nothing could take that loan back, and a loan counted in GPUs does
//! not keep shapes (one such job per node holds off a holder's whole-node job). A past the
//! record does not reach (usage is recorded from the scheduler's first cycle, carried over
//! when a controller takes over) counts as used by every holder: a fresh cluster lends such
//! jobs nothing a guarantee covers until its record is as long as their planned length.
//!
//! The cost is guaranteed capacity left idle while its holder is quiet, and longer waits for
//! the queues that live on borrowed capacity (docs/policies.md, "Preemption", measures the
//! horizon against both). Each guarantee line counts once: the highest queue with a guarantee
//! in the flavor that is not in the borrower's own line.

use super::{JobId, Scheduler};
use gantry_types::{Flavor, PendingReason};
use std::collections::{BTreeMap, VecDeque};

/// One queue's usage levels in one flavor that ended within the lookback: (when each ended,
/// the level), oldest first.
pub type UsageLevels = Vec<(u64, u64)>;

/// Longest past looked at: a day, one period of a diurnal load.
pub const LOOKBACK_MAX_S: u64 = 86_400;

/// Per (queue, flavor): the usage levels that ended in the last [`LOOKBACK_MAX_S`], as
/// (when the level ended, the level), kept decreasing from oldest to newest (a level lower
/// than a later one never decides a maximum over a window reaching back to it).
#[derive(Clone, Debug, Default)]
pub(super) struct UsagePeaks {
    /// By flavor, then queue (a lending check asks one flavor's queues, every start it makes).
    ended: BTreeMap<Flavor, BTreeMap<usize, VecDeque<(u64, u64)>>>,
    /// Since when usage has been recorded (`None`: not yet).
    since: Option<u64>,
}

impl UsagePeaks {
    /// Usage is recorded from `now` on, unless it already was (a record said to start later
    /// than `now` — a hand-edited checkpoint — starts now instead).
    pub fn record_from(&mut self, now: u64) {
        if self.since.is_none_or(|since| since > now) {
            self.since = Some(now);
        }
    }

    /// Does the record reach back `window_s` (at most [`LOOKBACK_MAX_S`]) from `now`?
    pub fn covers(&self, now: u64, window_s: u64) -> bool {
        self.since.is_some_and(|since| now.saturating_sub(since) >= window_s.min(LOOKBACK_MAX_S))
    }

    /// The record as a controller carries it over: since when, and per (queue, flavor) the
    /// levels (when each ended, the level).
    pub fn carried(&self) -> (Option<u64>, Vec<(usize, Flavor, UsageLevels)>) {
        let mut levels: Vec<(usize, Flavor, UsageLevels)> = self
            .ended
            .iter()
            .flat_map(|(f, by_queue)| by_queue.iter().map(move |(q, l)| (*q, f.clone(), l.iter().copied().collect())))
            .collect();
        levels.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        (self.since, levels)
    }

    /// Take back [`UsagePeaks::carried`] (what it says replaces this record).
    pub fn carry(&mut self, since: Option<u64>, levels: Vec<(usize, Flavor, UsageLevels)>) {
        if since.is_none() {
            return;
        }
        self.since = since;
        self.ended.clear();
        for (q, f, l) in levels {
            self.ended.entry(f).or_default().insert(q, l.into_iter().collect());
        }
    }

    /// `queue`'s usage of `flavor` changed at `now` from `before`.
    pub fn changed(&mut self, queue: usize, flavor: &Flavor, before: u64, now: u64) {
        let levels = match self.ended.get_mut(flavor) {
            Some(by_queue) => by_queue.entry(queue).or_default(),
            None => self.ended.entry(flavor.clone()).or_default().entry(queue).or_default(),
        };
        while levels.back().is_some_and(|&(_, level)| level <= before) {
            levels.pop_back();
        }
        levels.push_back((now, before));
        while levels.front().is_some_and(|&(t, _)| t + LOOKBACK_MAX_S < now) {
            levels.pop_front();
        }
    }

    /// The queues with a recorded level of `flavor` (it ran there within the lookback).
    pub fn queues<'a>(&'a self, flavor: &'a Flavor) -> impl Iterator<Item = usize> + 'a {
        self.ended.get(flavor).into_iter().flat_map(|by_queue| by_queue.keys().copied())
    }

    /// The first instant after `now` at which a level stops counting for a window of
    /// `window_s` (a loan it held back may be made then).
    pub fn next_expiry(&self, now: u64, window_s: u64) -> Option<u64> {
        let window_s = window_s.min(LOOKBACK_MAX_S);
        let record = self.since.iter().flat_map(|&s| [s.saturating_add(window_s), s.saturating_add(LOOKBACK_MAX_S)]);
        let ends = self.ended.values().flat_map(|by_queue| by_queue.values().flatten());
        ends.map(|&(t, _)| t.saturating_add(window_s)).chain(record).filter(|&t| t > now).min()
    }

    /// Highest usage of `flavor` by `queue` over the last `window_s` before `now`, given its
    /// usage now.
    pub fn peak(&self, queue: usize, flavor: &Flavor, now_used: u64, window_s: u64, now: u64) -> u64 {
        let Some(levels) = self.ended.get(flavor).and_then(|by_queue| by_queue.get(&queue)) else { return now_used };
        let from = now.saturating_sub(window_s.min(LOOKBACK_MAX_S));
        // A level that ended exactly `window_s` ago no longer counts.
        let first = levels.partition_point(|&(t, _)| t <= from);
        levels.get(first).map_or(now_used, |&(_, level)| level.max(now_used))
    }
}

impl Scheduler {
    /// Record the usage of `queue` and its ancestors before a change of `demand`'s flavors.
    pub(super) fn usage_changing(&mut self, queue: usize, demand: &[(Flavor, u64)], now: u64) {
        let Some(book) = &self.quotas else { return };
        self.peaks.record_from(now);
        for q in book.parents(queue) {
            for (f, _) in demand {
                self.peaks.changed(q, f, book.used(q, f), now);
            }
        }
    }

    /// Refuse a start of `job` at `now` that would borrow (`demand`) what guarantee holders
    /// are owed or expected to claim during its run.
    pub(super) fn owed_to_lenders(&self, job: JobId, demand: &[(Flavor, u64)], now: u64) -> Option<PendingReason> {
        if self.awaiting.contains_key(&job) {
            // A preemptor starts where its plan put it: its victims were stopped for that.
            return None;
        }
        self.owed_after(job, demand, &[], now)
    }

    /// [`Scheduler::owed_to_lenders`] once `freed` (per flavor, milli-GPU: a preemption
    /// plan's victims) is free too.
    pub(super) fn owed_after(
        &self,
        job: JobId,
        demand: &[(Flavor, u64)],
        freed: &[(Flavor, u64)],
        now: u64,
    ) -> Option<PendingReason> {
        let book = self.quotas.as_ref()?;
        let entry = &self.jobs[&job];
        let q = entry.queue;
        let planned = entry.job.planned_length_s.unwrap_or(LOOKBACK_MAX_S);
        let unstoppable = self.unstoppable(job);
        let horizon_s = match entry.job.lifecycle.min_runtime_s {
            // A job no reclaim may stop borrows only where no guarantee holder ran in a
            // stretch as long as its whole run.
            _ if unstoppable => planned,
            0 => planned.min(self.rules.lend_horizon_s),
            m => m,
        };
        // Its queue's preemptors start where their plans put them, whatever starts meanwhile:
        // what they will hold counts as used, so a start that fits the guarantee only until
        // they start borrows (and the holders' claims apply to it).
        // (A moved job still runs where it was, and is counted there.)
        let preempting = |f: &Flavor| -> u64 {
            let own = self.awaiting.iter().filter(|(k, _)| self.jobs[*k].queue == q);
            let preemptors = own.filter(|(k, _)| self.allocation_of(**k).is_none());
            preemptors.flat_map(|(_, a)| a.demand.iter().filter(|(g, _)| g == f).map(|(_, m)| *m)).sum()
        };
        let borrows = |f: &Flavor, d: u64| book.over_guarantee(q, f, d) || book.over_guarantee(q, f, d + preempting(f));
        for (f, d) in demand.iter().filter(|(f, d)| borrows(f, *d)) {
            if unstoppable && book.guaranteed(q, f) > 0 {
                // It starts only within its queue's guarantee there (`admit/budget.rs`, which
                // blocks the queue behind it: refused here, each of its queue's jobs would be
                // placed and refused in turn).
                continue;
            }
            if unstoppable
                && !self.peaks.covers(now, horizon_s)
                && let Some(x) = self.holder_apart(q, f)
            {
                return Some(self.never_stopped_borrows(job, f, *d, x, false));
            }
            let Some(free) = book.free(f) else { continue };
            let free = free + freed.iter().filter(|(g, _)| g == f).map(|(_, m)| m).sum::<u64>();
            let mut claimed = 0u64;
            let mut by: Option<(usize, u64)> = None;
            for x in self.guarantee_lines(q, f) {
                let used = book.used(x, f);
                let expected = self.peaks.peak(x, f, used, horizon_s, now);
                let waiting = self.entitled_in(x, f);
                if unstoppable && (expected > 0 || waiting > 0) {
                    return Some(self.never_stopped_borrows(job, f, *d, x, true));
                }
                let claim = expected.min(book.guaranteed(x, f)).saturating_sub(used).max(waiting);
                if claim > by.map_or(0, |(_, c)| c) {
                    by = Some((x, claim));
                }
                claimed = claimed.saturating_add(claim);
            }
            if let Some((x, _)) = by
                && free < d.saturating_add(claimed)
            {
                // Read as "queue q would exceed its loan …: in use + asked > what may be lent".
                let capacity = book.capacity(f).unwrap_or(free);
                let holder = &book.tree().queues[x].name;
                return Some(PendingReason::Quota {
                    queue: book.tree().queues[q].name.clone(),
                    flavor: f.clone(),
                    rule: format!(
                        "loan ({holder}'s idle guarantee is claimed: owed to its waiting jobs or used lately)"
                    ),
                    used_milli: capacity - free,
                    asked_milli: *d,
                    bound_milli: capacity.saturating_sub(claimed),
                });
            }
        }
        None
    }

    /// Why `job`, which no reclaim may stop, may not borrow `asked` of `flavor`: `holder`
    /// used its guarantee there within the job's planned length, or has jobs waiting within it
    /// (`known`), or the usage record does not reach back that far.
    fn never_stopped_borrows(
        &self,
        job: JobId,
        flavor: &Flavor,
        asked: u64,
        holder: usize,
        known: bool,
    ) -> PendingReason {
        let book = self.quotas.as_ref().expect("called with quotas");
        let q = self.jobs[&job].queue;
        let why = if self.jobs[&job].job.lifecycle.preemptible {
            "its preemption budget is spent"
        } else {
            "it is not preemptible"
        };
        let capacity = book.capacity(flavor).unwrap_or(0);
        let holder = &book.tree().queues[holder].name;
        let seen = if known {
            format!("{holder} did")
        } else {
            let since = self.peaks.since.unwrap_or(0);
            format!("usage is known only since {since} s, so {holder} counts as having run")
        };
        PendingReason::Quota {
            queue: book.tree().queues[q].name.clone(),
            flavor: flavor.clone(),
            rule: format!(
                "loan ({why}, so it borrows only where no guarantee holder ran within its planned length; {seen})"
            ),
            used_milli: capacity - book.free(flavor).unwrap_or(capacity),
            asked_milli: asked,
            bound_milli: 0,
        }
    }

    /// Some queue with a guarantee in `flavor` that is not on `queue`'s line (neither encloses
    /// the other), if any (asked only before the usage record covers a borrower's planned
    /// length; the holders on `queue`'s own line are its ancestors and descendants, so the walk
    /// ends early).
    fn holder_apart(&self, queue: usize, flavor: &Flavor) -> Option<usize> {
        let book = self.quotas.as_ref()?;
        book.holders(flavor).iter().copied().find(|&x| !book.same_line(x, queue))
    }

    /// The highest queue with a guarantee in `flavor` on each line of the tree that is not
    /// `queue`'s own (neither encloses the other), among the queues that may claim anything:
    /// those that used `flavor` within the lookback, and those with jobs waiting within their
    /// guarantee, with their ancestors. (Not every queue of the tree: a borrowing start is
    /// checked against this, and a tree may hold 10,000 queues.)
    fn guarantee_lines(&self, queue: usize, flavor: &Flavor) -> Vec<usize> {
        let Some(book) = &self.quotas else { return Vec::new() };
        let apart = |x: usize| !book.same_line(x, queue);
        // Both lists are ascending and short: sorted and deduplicated in place, not gathered
        // in a set (this runs for every start that would borrow).
        let mut active: Vec<usize> = self.peaks.queues(flavor).chain(self.entitled_queues(flavor)).collect();
        active.sort_unstable();
        active.dedup();
        active
            .into_iter()
            .filter(|&x| apart(x) && book.guaranteed(x, flavor) > 0)
            .filter(|&x| book.parents(x).skip(1).all(|a| !apart(a) || book.guaranteed(a, flavor) == 0))
            .collect()
    }
}
