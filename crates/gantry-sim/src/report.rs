//! Reports: the allocation curves as CSV, one SVG chart per pod list (allocation against
//! arrived load, one line per policy, as the FGD paper draws it) and one self-contained HTML
//! page embedding the charts and the summary table; for time replays, the series as CSV and
//! allocation and utilization over time.
//!
//! SVG is written by hand: a line chart is a few dozen lines of markup, and a plotting crate
//! would bring a font stack into the binary (see STACK.md).

use crate::protocol_a::RunResult;
use crate::protocol_b::ReplayResult;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Results of one pod list: policy name → runs (one per seed).
pub type ListResults<'a> = BTreeMap<String, Vec<&'a RunResult>>;

/// Line colours, one per policy in order (colour-blind-safe palette).
const COLORS: [&str; 9] =
    ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442", "#999999"];

/// Mean allocation per load point over the runs of one policy.
pub fn mean_curve(runs: &[&RunResult]) -> Vec<(u32, f64)> {
    let mut sums: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    for run in runs {
        for p in &run.curve {
            let e = sums.entry(p.load_pct).or_default();
            e.0 += p.alloc_pct;
            e.1 += 1;
        }
    }
    sums.into_iter().map(|(load, (sum, n))| (load, sum / n as f64)).collect()
}

/// `pod_list,policy,seed,load_pct,alloc_pct,failed,frag_pct` for every curve point.
pub fn curves_csv(lists: &[(String, ListResults<'_>)]) -> String {
    let mut out = String::from("pod_list,policy,seed,load_pct,alloc_pct,failed,frag_pct\n");
    for (list, policies) in lists {
        for (policy, runs) in policies {
            for run in runs {
                for p in &run.curve {
                    let frag = p.frag_pct.map(|f| format!("{f:.4}")).unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "{list},{policy},{},{},{:.2},{},{frag}",
                        run.seed, p.load_pct, p.alloc_pct, p.failed
                    );
                }
            }
        }
    }
    out
}

use gantry_chart::escape;
pub use gantry_chart::{Line, nice_step};

/// An SVG line chart, y in % (0..100), x from 0 to `x_max` with a grid line every `x_step`;
/// the legend on the right shows each line's label (the dashboard draws with the same chart).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, x_max: f64, x_step: f64, lines: &[Line]) -> String {
    let chart = gantry_chart::Chart { title, x_label, y_label, x_max, x_step, ..gantry_chart::Chart::default() };
    chart.svg(lines)
}

/// An SVG line chart of mean allocation (%) against arrived load (%), one line per policy.
pub fn allocation_svg(title: &str, policies: &ListResults<'_>) -> String {
    let x_max =
        policies.values().flatten().flat_map(|r| r.curve.iter().map(|p| p.load_pct)).max().unwrap_or(130).max(1) as f64;
    let lines: Vec<Line> = policies
        .iter()
        .enumerate()
        .map(|(i, (policy, runs))| {
            let curve = mean_curve(runs);
            let final_alloc = curve.last().map(|&(_, a)| a).unwrap_or(0.0);
            Line {
                label: format!("{policy} {final_alloc:.2}%"),
                color: COLORS[i % COLORS.len()],
                dashed: false,
                filled: false,
                points: curve.into_iter().map(|(l, a)| (l as f64, a)).collect(),
            }
        })
        .collect();
    line_chart(title, "arrived GPU load (% of capacity)", "GPU allocation (%)", x_max, 10.0, &lines)
}

/// One HTML page: the summary table (mean allocation at the last load point) and every chart.
pub fn html(title: &str, lists: &[(String, ListResults<'_>)]) -> String {
    let mut page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th:first-child,td:first-child{{text-align:left}}figure{{margin:1.5em 0}}</style></head><body><h1>{0}</h1>",
        escape(title)
    );
    let policies: Vec<&String> = lists.first().map(|(_, p)| p.keys().collect()).unwrap_or_default();
    page.push_str("<h2>Mean GPU allocation at the end of the run (%)</h2><table><tr><th>pod list</th>");
    for p in &policies {
        let _ = write!(page, "<th>{}</th>", escape(p));
    }
    page.push_str("</tr>");
    for (list, results) in lists {
        let _ = write!(page, "<tr><td>{}</td>", escape(list));
        for p in &policies {
            let value = results.get(*p).and_then(|runs| mean_curve(runs).last().map(|&(_, a)| a));
            let _ = write!(page, "<td>{}</td>", value.map(|v| format!("{v:.2}")).unwrap_or_default());
        }
        page.push_str("</tr>");
    }
    page.push_str("</table>");
    for (list, results) in lists {
        let _ = write!(page, "<figure>{}</figure>", allocation_svg(list, results));
    }
    page.push_str("</body></html>");
    page
}

/// Time-replay results of one trace, one per (policy, seed).
pub type ReplayRuns<'a> = Vec<&'a ReplayResult>;

/// `trace,policy,seed,time_s,alloc_pct,util_pct,running,queued` for every sample.
pub fn replay_csv(traces: &[(String, ReplayRuns<'_>)]) -> String {
    let mut out = String::from("trace,policy,seed,time_s,alloc_pct,util_pct,running,queued\n");
    for (trace, runs) in traces {
        for run in runs {
            for s in &run.series {
                let _ = writeln!(
                    out,
                    "{trace},{},{},{},{:.3},{:.3},{},{}",
                    run.policy, run.seed, s.time_s, s.alloc_pct, s.util_pct, s.running, s.queued
                );
            }
        }
    }
    out
}

/// The unit a time axis spanning `span_s` is drawn in, and seconds per unit.
fn time_unit(span_s: u64) -> (&'static str, f64) {
    if span_s >= 2 * 86_400 {
        ("days", 86_400.0)
    } else if span_s >= 2 * 3_600 {
        ("hours", 3_600.0)
    } else {
        ("minutes", 60.0)
    }
}

/// Allocation (solid) and simulated utilization (dashed) over time, one colour per policy
/// (its first seed: series of different seeds are not averaged point by point).
pub fn replay_svg(title: &str, runs: &[&ReplayResult]) -> String {
    let mut lines = Vec::new();
    let origin = runs.iter().filter_map(|r| r.series.first()).map(|s| s.time_s).min().unwrap_or(0);
    let span_s = runs.iter().filter_map(|r| r.series.last()).map(|s| s.time_s - origin).max().unwrap_or(0);
    let (unit, div) = time_unit(span_s);
    // One colour per (policy, order, backfill) variant, its first seed; what all runs share
    // goes in the title, so legends stay short.
    let vary_order = runs.iter().any(|r| r.order != runs[0].order);
    let vary_backfill = runs.iter().any(|r| r.backfill != runs[0].backfill);
    let label = |run: &ReplayResult| {
        let mut l = run.policy.clone();
        if vary_order {
            l += &format!(" {}", run.order);
        }
        if vary_backfill {
            l += &format!(" bf:{}", run.backfill);
        }
        l
    };
    let title = match runs.first() {
        Some(r) if !vary_order && !vary_backfill => format!("{title} (order {}, backfill {})", r.order, r.backfill),
        _ => title.to_string(),
    };
    let mut seen: Vec<String> = Vec::new();
    for run in runs {
        if seen.contains(&label(run)) {
            continue;
        }
        seen.push(label(run));
        let color = COLORS[(seen.len() - 1) % COLORS.len()];
        let at = |s: &crate::protocol_b::Sample| (s.time_s - origin) as f64 / div;
        lines.push(Line {
            label: format!("{} allocated {:.1}%", label(run), run.mean_alloc_pct),
            color,
            dashed: false,
            filled: false,
            points: run.series.iter().map(|s| (at(s), s.alloc_pct)).collect(),
        });
        lines.push(Line {
            label: format!("{} used {:.1}%", label(run), run.mean_util_pct),
            color,
            dashed: true,
            filled: false,
            points: run.series.iter().map(|s| (at(s), s.util_pct)).collect(),
        });
    }
    let x_max = span_s as f64 / div;
    let step = nice_step(x_max);
    line_chart(&title, &format!("time since the first arrival ({unit})"), "% of GPU capacity", x_max, step, &lines)
}

/// Each queue's share of the fleet's GPUs over time in one replay, one line per queue.
pub fn queue_svg(title: &str, run: &ReplayResult) -> String {
    let origin = run.series.first().map_or(0, |s| s.time_s);
    let span_s = run.series.last().map_or(0, |s| s.time_s - origin);
    let (unit, div) = time_unit(span_s);
    let gpus = run.fleet_gpus.max(1) as f64;
    let lines: Vec<Line> = run
        .queues
        .iter()
        .enumerate()
        .map(|(k, queue)| Line {
            label: format!("{queue} {:.1}%", run.tenant_gpu_share_pct.get(queue).copied().unwrap_or(0.0)),
            color: COLORS[k % COLORS.len()],
            dashed: false,
            filled: false,
            points: run
                .series
                .iter()
                .map(|s| {
                    let held = s.held_gpus_by_queue.get(k).copied().unwrap_or(0.0);
                    ((s.time_s - origin) as f64 / div, held / gpus * 100.0)
                })
                .collect(),
        })
        .collect();
    let x_max = span_s as f64 / div;
    line_chart(
        title,
        &format!("time since the first arrival ({unit})"),
        "% of the fleet's GPUs held",
        x_max,
        nice_step(x_max),
        &lines,
    )
}

/// Per queue of every run: waits, share of GPU time; per run: preemptions and promises.
fn queue_tables(page: &mut String, traces: &[(String, ReplayRuns<'_>)]) {
    page.push_str(
        "<h2>Queues</h2><table><tr><th>trace</th><th>policy</th><th>seed</th><th>queue</th><th>jobs started</th>\
         <th>wait p50 (s)</th><th>wait p90 (s)</th><th>wait p99 (s)</th><th>longest wait (s)</th>\
         <th>GPU time %</th></tr>",
    );
    for (trace, runs) in traces {
        for r in runs {
            for (queue, w) in &r.waits_by_queue {
                let share = r.tenant_gpu_share_pct.get(queue).copied().unwrap_or(0.0);
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{share:.1}</td></tr>",
                    escape(trace),
                    escape(&r.policy),
                    r.seed,
                    escape(queue),
                    w.jobs,
                    w.p50_s,
                    w.p90_s,
                    w.p99_s,
                    w.max_s
                );
            }
        }
    }
    page.push_str("</table>");
    page.push_str(
        "<h2>Preemption and promises</h2><table><tr><th>trace</th><th>policy</th><th>seed</th><th>preemptions</th>\
         <th>by right</th><th>GPU-hours lost</th><th>most per job</th><th>promised</th><th>late</th>\
         <th>pushed back (by right)</th><th>late with no right on record</th><th>weighted Jain</th><th>Jain against entitlement</th></tr>",
    );
    for (trace, runs) in traces {
        for r in runs {
            let rights: Vec<String> = r.preemptions_by_right.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let mut broken: BTreeMap<&str, usize> = BTreeMap::new();
            for b in &r.promises_broken {
                *broken.entry(b.right).or_default() += 1;
            }
            let broken: Vec<String> = broken.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(trace),
                escape(&r.policy),
                r.seed,
                r.preemptions,
                rights.join(", "),
                r.preempted_gpu_s_lost / 3600.0,
                r.preemptions_per_job_max,
                r.reserved,
                r.reserved_late,
                broken.join(", "),
                r.reserved_late_without_cause.len(),
                r.jain_weighted_mean.map(|j| format!("{j:.3}")).unwrap_or_default(),
                r.jain_entitled_mean.map(|j| format!("{j:.3}")).unwrap_or_default()
            );
        }
    }
    page.push_str("</table>");
}

/// One HTML page for time replays: the summary table and one chart per trace.
pub fn replay_html(title: &str, traces: &[(String, ReplayRuns<'_>)]) -> String {
    let mut page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th:first-child,td:first-child,td:nth-child(2){{text-align:left}}figure{{margin:1.5em 0}}</style></head><body><h1>{0}</h1>",
        escape(title)
    );
    page.push_str(
        "<h2>Summary</h2><table><tr><th>trace</th><th>policy</th><th>order</th><th>backfill</th><th>seed</th>\
         <th>started</th><th>never started</th><th>wait p50 (s)</th><th>wait p90 (s)</th><th>wait p99 (s)</th>\
         <th>longest wait (s)</th><th>mean allocated %</th><th>mean used %</th><th>peak allocated %</th>\
         <th>Jain (mean of windows)</th><th>GPU time by tenant</th></tr>",
    );
    for (trace, runs) in traces {
        for r in runs {
            let tenants: Vec<String> =
                r.tenant_gpu_share_pct.iter().map(|(t, s)| format!("{} {s:.1}%", escape(t))).collect();
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                escape(trace),
                escape(&r.policy),
                escape(&r.order),
                escape(&r.backfill),
                r.seed,
                r.started,
                r.pods,
                r.never_started,
                r.delay_p50_s,
                r.delay_p90_s,
                r.delay_p99_s,
                r.delay_max_s,
                r.mean_alloc_pct,
                r.mean_util_pct,
                r.peak_alloc_pct,
                r.jain_mean.map(|j| format!("{j:.3}")).unwrap_or_default(),
                tenants.join(", ")
            );
        }
    }
    page.push_str("</table>");
    queue_tables(&mut page, traces);
    for (trace, runs) in traces {
        let _ =
            write!(page, "<figure>{}</figure>", replay_svg(&format!("{trace}: allocated and used over time"), runs));
        if let Some(first) = runs.first().filter(|r| r.queues.len() > 1) {
            let title = format!("{trace}: GPUs held by queue ({}, seed {})", first.policy, first.seed);
            let _ = write!(page, "<figure>{}</figure>", queue_svg(&title, first));
        }
    }
    page.push_str("</body></html>");
    page
}
