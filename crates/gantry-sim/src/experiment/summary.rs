//! A time replay told in a few lines of text (what `gantry sim` prints without `--json`): the
//! headline figures, then only the lines that have something to say — why jobs waited,
//! dependencies, preemptions, reservations, waits by queue, limits — and, when asked, the
//! jobs still waiting and why. A Protocol A sweep told the same way: a line per run, then the
//! means over seeds.

use super::sweep::{Sweep, SweepResult, agreement};
use crate::protocol_b::ReplayResult;
use std::collections::BTreeMap;

/// Most waiting jobs the pending table lists (the JSON has them all).
pub const WHY_ROWS_MAX: usize = 50;

/// The replay's summary: `name` is its trace, `secs` how long it took, `why` adds the table
/// of jobs still waiting (also shown when the replay stopped early).
pub fn replay(name: &str, r: &ReplayResult, secs: f64, why: bool) -> String {
    let mut lines = vec![headline(name, r, secs)];
    lines.extend(waiting_by_reason(r));
    if r.dependency_never + r.waiting_on_dependencies > 0 {
        lines.push(format!(
            "  {} jobs dropped (a dependency can never be met), {} still waiting on dependencies",
            r.dependency_never, r.waiting_on_dependencies
        ));
    }
    if r.preemptions > 0 {
        let by: Vec<String> = r.preemptions_by_right.iter().map(|(why, n)| format!("{n} for {why}")).collect();
        lines.push(format!(
            "  {} preemptions ({}), {:.1} GPU-hours of work lost",
            r.preemptions,
            by.join(", "),
            r.preempted_gpu_s_lost / 3600.0
        ));
    }
    if let Some((queue, waited)) = r.guarantee_wait_max_by_queue_s.iter().max_by_key(|(_, w)| **w) {
        lines.push(format!(
            "  longest wait within a guarantee: {waited}s ({queue}); at most {} stops of one job",
            r.preemptions_per_job_max
        ));
    }
    lines.extend(reservations(r));
    if r.waits_by_queue.len() > 1 {
        let waits: Vec<String> = r
            .waits_by_queue
            .iter()
            .map(|(q, w)| format!("{q} p50 {}s p90 {}s max {}s", w.p50_s, w.p90_s, w.max_s))
            .collect();
        lines.push(format!("  waits by queue: {}", waits.join("; ")));
    }
    if r.time_limit_ended + r.held + r.user_limit_waited > 0 {
        lines.push(format!(
            "  {} jobs stopped at their time limit, {} held, {} waited on a per-user limit",
            r.time_limit_ended, r.held, r.user_limit_waited
        ));
    }
    if why || r.stopped_at_s.is_some() {
        lines.push(pending(r));
    }
    lines.join("\n")
}

fn headline(name: &str, r: &ReplayResult, secs: f64) -> String {
    let tenants: Vec<String> = r.tenant_gpu_share_pct.iter().map(|(t, s)| format!("{t} {s:.1}%")).collect();
    let jain = r.jain_mean.map(|j| {
        let (min, weighted) = (r.jain_min.unwrap_or(j), r.jain_weighted_mean.unwrap_or(j));
        let entitled = r.jain_entitled_mean.unwrap_or(j);
        format!(", Jain {j:.3} (min {min:.3}), weighted {weighted:.3}, against entitlement {entitled:.3}")
    });
    format!(
        "{name} {:<14} {} backfill {} seed {}: started {}/{} (never {}), queueing p50 {}s p90 {}s p99 {}s max {}s, mean alloc {:.1}% (peak {:.1}%) util {:.1}%, GPU time by tenant: {}{}  ({secs:.2}s)",
        r.policy,
        r.order,
        r.backfill,
        r.seed,
        r.started,
        r.pods,
        r.never_started,
        r.delay_p50_s,
        r.delay_p90_s,
        r.delay_p99_s,
        r.delay_max_s,
        r.mean_alloc_pct,
        r.peak_alloc_pct,
        r.mean_util_pct,
        tenants.join(", "),
        jain.unwrap_or_default()
    )
}

/// The four reasons jobs waited longest on, as shares of all job-time spent waiting.
fn waiting_by_reason(r: &ReplayResult) -> Option<String> {
    let waited: u64 = r.wait_job_s_by_reason.values().sum();
    if waited == 0 {
        return None;
    }
    let mut by: Vec<(&String, &u64)> = r.wait_job_s_by_reason.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let top: Vec<String> =
        by.iter().take(4).map(|(why, s)| format!("{why} {:.0}%", **s as f64 / waited as f64 * 100.0)).collect();
    Some(format!("  waiting, by why (share of job-time): {}", top.join(", ")))
}

/// Reserved starts, the promises pushed back and by which right.
fn reservations(r: &ReplayResult) -> Option<String> {
    if r.reserved == 0 {
        return None;
    }
    let rights: BTreeMap<&str, usize> = r.promises_broken.iter().fold(BTreeMap::new(), |mut m, b| {
        *m.entry(b.right).or_default() += 1;
        m
    });
    let rights: Vec<String> = rights.iter().map(|(why, n)| format!("{n} by {why}")).collect();
    let without = &r.reserved_late_without_cause;
    let without = if without.is_empty() {
        String::new()
    } else {
        format!(" ({} with no higher right: {})", without.len(), without.join(", "))
    };
    Some(format!(
        "  {} jobs got a reserved start; {} started later than first promised; promises pushed back: {}{without}",
        r.reserved,
        r.reserved_late,
        if rights.is_empty() { "none".to_string() } else { rights.join(", ") },
    ))
}

/// The jobs still waiting (at the end, or where the replay stopped), why, and their estimates.
pub fn pending(r: &ReplayResult) -> String {
    let at = r.stopped_at_s.map_or_else(|| "at the end".to_string(), |t| format!("at t={t}s"));
    if r.pending.is_empty() {
        return format!("  nothing waiting {at}");
    }
    let mut lines = vec![
        format!("  {} jobs waiting {at}:", r.pending.len()),
        format!("    {:<24} {:<12} {:>10} {:>10}  why", "job", "queue", "since", "estimate"),
    ];
    for p in r.pending.iter().take(WHY_ROWS_MAX) {
        let estimate = p.estimate_s.map_or_else(|| "-".to_string(), |e| format!("{e}s"));
        let since = format!("{}s", p.since_s);
        lines.push(format!("    {:<24} {:<12} {since:>10} {estimate:>10}  {}", p.job, p.queue, p.reason));
    }
    if r.pending.len() > WHY_ROWS_MAX {
        lines.push(format!("    ... {} more (--json lists them all)", r.pending.len() - WHY_ROWS_MAX));
    }
    lines.join("\n")
}

/// A sweep's runs, a line each (with the agreement with a reference run's decisions when one
/// is given), then with several seeds the mean allocation per pod list and policy (beside the
/// FGD authors' figure when known).
pub fn sweep(
    sweep: &Sweep<'_>,
    result: &SweepResult,
    reference: Option<&[(String, Option<String>)]>,
    authors: Option<&BTreeMap<(String, String), f64>>,
) -> String {
    let several = sweep.lists.len() > 1;
    let mut lines = Vec::new();
    for run in &result.runs {
        let r = &run.result;
        let list = if several { format!("{:<26} ", sweep.lists[run.list].0) } else { String::new() };
        let agreement = reference.map(|refs| format!("  agreement {:.1}%", agreement(&r.decisions, refs)));
        lines.push(format!(
            "{list}{:<14} seed {:<4} arrivals {:>6}  failed {:>5}  alloc@130% {:>6.2}%  final {:>6.2}%{}  ({:.2}s)",
            r.policy,
            run.seed,
            r.arrivals,
            r.failed,
            r.alloc_at(130).unwrap_or(f64::NAN),
            r.final_alloc_pct,
            agreement.unwrap_or_default(),
            run.secs
        ));
    }
    if sweep.seeds > 1 {
        for (l, (name, _)) in sweep.lists.iter().enumerate() {
            lines.push(format!("\n{name}: mean allocation at 130 % over {} seeds", sweep.seeds));
            for &policy in sweep.policies {
                let theirs = authors.and_then(|a| a.get(&(name.clone(), policy.name().to_string())));
                let theirs = theirs.map(|t| format!("  (authors {t:.2}%)")).unwrap_or_default();
                lines.push(format!("  {:<14} {:.2}%{theirs}", policy.name(), result.mean_at_130(l, policy)));
            }
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}
