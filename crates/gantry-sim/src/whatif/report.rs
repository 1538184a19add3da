//! The what-if report laid out: one column per run, one row per figure, as aligned text, as
//! JSON (schema `gantry.whatif/v1`) and as a self-contained HTML page.

use super::Column;
use std::fmt::Write as _;

/// A report: which history on which fleet, its columns, and the smallest fleet that sufficed.
#[derive(Clone, Debug)]
pub struct Report {
    pub fleet: String,
    pub history: String,
    pub columns: Vec<Column>,
    pub sufficed: Option<Column>,
}
/// Seconds as a person reads a wait: `45 s`, `12 min`, `3.5 h`.
fn wait(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

impl Report {
    /// Rows of (label, one cell per column).
    fn rows(&self) -> Vec<(String, Vec<String>)> {
        let cols = &self.columns;
        let row = |label: &str, f: &dyn Fn(&Column) -> String| (label.to_string(), cols.iter().map(f).collect());
        let mut rows = vec![
            row("GPUs", &|c| c.fleet_gpus.to_string()),
            row("jobs started", &|c| format!("{} of {}", c.started, c.jobs)),
            row("wait p50", &|c| wait(c.waits.p50_s)),
            row("wait p90", &|c| wait(c.waits.p90_s)),
            row("wait p99", &|c| wait(c.waits.p99_s)),
            row("last job done after", &|c| wait(c.makespan_s)),
            row("GPU-hours held", &|c| format!("{:.1}", c.gpu_hours)),
            row("mean allocation", &|c| format!("{:.1} %", c.mean_alloc_pct)),
            row("peak GPUs held", &|c| format!("{:.1}", c.peak_gpus)),
            row("mean utilization", &|c| {
                c.mean_util_pct.map_or_else(|| "not in the trace".into(), |u| format!("{u:.1} %"))
            }),
        ];
        let queues: std::collections::BTreeSet<&String> = cols.iter().flat_map(|c| c.waits_by_queue.keys()).collect();
        for q in queues {
            let cell = |c: &Column| {
                c.waits_by_queue.get(q).map_or_else(|| "-".into(), |w| format!("{} / {}", wait(w.p50_s), wait(w.p90_s)))
            };
            rows.push((format!("queue {q}: wait p50 / p90"), cols.iter().map(cell).collect()));
        }
        rows
    }

    fn sufficed_line(&self) -> String {
        let against = &self.columns[0].name;
        match &self.sufficed {
            Some(s) => format!(
                "GPUs that would have sufficed: {} of {} ({}: wait p90 {} against {} for \"{against}\", every job started)",
                s.fleet_gpus,
                self.columns[0].fleet_gpus,
                s.name,
                wait(s.waits.p90_s),
                wait(self.columns[0].waits.p90_s)
            ),
            None => format!(
                "GPUs that would have sufficed: none fewer (gantry's replay on the whole fleet does not match \"{against}\")"
            ),
        }
    }

    pub fn text(&self) -> String {
        let mut out = format!("what if: {} on {}\n\n", self.history, self.fleet);
        let rows = self.rows();
        let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| rows.iter().map(|(_, c)| c[i].len()).chain([self.columns[i].name.len()]).max().unwrap_or(0))
            .collect();
        let _ = write!(out, "{:label_width$}", "");
        for (c, w) in self.columns.iter().zip(&widths) {
            let _ = write!(out, "  {:>w$}", c.name);
        }
        out.push('\n');
        for (label, cells) in rows {
            let _ = write!(out, "{label:label_width$}");
            for (cell, w) in cells.iter().zip(&widths) {
                let _ = write!(out, "  {cell:>w$}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "\n{}", self.sufficed_line());
        out
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "gantry.whatif/v1",
            "fleet": self.fleet,
            "history": self.history,
            "columns": self.columns,
            "sufficed": self.sufficed,
        })
    }

    pub fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut out = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>gantry what-if</title>\n<style>\
             body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
             th,td{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child{text-align:left}\
             </style></head><body>\n",
        );
        let _ = writeln!(
            out,
            "<h1>What if gantry had scheduled it</h1>\n<p>{} on {}</p>",
            esc(&self.history),
            esc(&self.fleet)
        );
        out.push_str("<table><tr><th></th>");
        for c in &self.columns {
            let _ = write!(out, "<th>{}</th>", esc(&c.name));
        }
        out.push_str("</tr>\n");
        for (label, cells) in self.rows() {
            let _ = write!(out, "<tr><td>{}</td>", esc(&label));
            for cell in cells {
                let _ = write!(out, "<td>{}</td>", esc(&cell));
            }
            out.push_str("</tr>\n");
        }
        let _ = writeln!(out, "</table>\n<p>{}</p>", esc(&self.sufficed_line()));
        out.push_str(
            "<p>Waits are from arrival to start. GPU figures are over one window, from the first arrival to \
             the last end in any column; MIG instances and shares count as their part of a GPU. Utilization \
             is shown only when the trace records it. Made by <code>gantry whatif</code>.</p>\n</body></html>\n",
        );
        out
    }
}
