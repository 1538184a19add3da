//! Reports: the allocation curves as CSV, one SVG chart per pod list (allocation against
//! arrived load, one line per policy, as the FGD paper draws it) and one self-contained HTML
//! page embedding the charts and the summary table.
//!
//! SVG is written by hand: a line chart is a few dozen lines of markup, and a plotting crate
//! would bring a font stack into the binary (see STACK.md).

use crate::protocol_a::RunResult;
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An SVG line chart of mean allocation (%) against arrived load (%), one line per policy.
pub fn allocation_svg(title: &str, policies: &ListResults<'_>) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 60.0, 200.0, 40.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x_max =
        policies.values().flatten().flat_map(|r| r.curve.iter().map(|p| p.load_pct)).max().unwrap_or(130).max(1) as f64;
    let x = |load: f64| left + load / x_max * pw;
    let y = |alloc: f64| top + (1.0 - alloc / 100.0) * ph;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="14" font-weight="bold">{}</text>"#,
        left,
        escape(title)
    );
    for tick in (0..=100).step_by(20) {
        let ty = y(tick as f64);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{ty}" x2="{}" y2="{ty}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{tick}</text>"##,
            left + pw,
            left - 6.0,
            ty + 4.0
        );
    }
    let mut tick = 0;
    while tick as f64 <= x_max {
        let tx = x(tick as f64);
        let _ = write!(
            svg,
            r##"<line x1="{tx}" y1="{top}" x2="{tx}" y2="{}" stroke="#eee"/><text x="{tx}" y="{}" text-anchor="middle">{tick}</text>"##,
            top + ph,
            top + ph + 16.0
        );
        tick += 10;
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">arrived GPU load (% of capacity)</text><text transform="translate(16 {}) rotate(-90)" text-anchor="middle">GPU allocation (%)</text>"##,
        top + ph,
        left + pw,
        top + ph,
        top + ph,
        left + pw / 2.0,
        h - 12.0,
        top + ph / 2.0
    );
    for (i, (policy, runs)) in policies.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> =
            mean_curve(runs).iter().map(|&(l, a)| format!("{:.1},{:.1}", x(l as f64), y(a))).collect();
        let _ =
            write!(svg, r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{}"/>"#, points.join(" "));
        let ly = top + 14.0 + i as f64 * 18.0;
        let final_alloc = mean_curve(runs).last().map(|&(_, a)| a).unwrap_or(0.0);
        let _ = write!(
            svg,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{} {final_alloc:.2}%</text>"#,
            left + pw + 12.0,
            ly - 4.0,
            left + pw + 30.0,
            ly - 4.0,
            left + pw + 36.0,
            ly,
            escape(policy)
        );
    }
    svg.push_str("</svg>");
    svg
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
