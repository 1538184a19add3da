//! The fleet page: every node a card, every GPU a tile (MIG instances as sub-tiles), colored
//! by queue and filled by utilization; allocation against use over the last hour; the
//! planner's advice. The SVG chart the usage page shares is here too.

use super::*;

/// Allocation (shaded) and use (line) over time, in GPUs up to the fleet's size: the same
/// chart the simulator's reports draw (`gantry-chart`).
pub(super) fn chart(points: &[Point], top: f64, width: u32, height: u32, every: &str) -> String {
    let top = top.max(1.0);
    let (t0, t1) = match (points.first(), points.last()) {
        (Some(a), Some(b)) if points.len() >= 2 => (a.t_s as f64, b.t_s as f64),
        _ => {
            return format!(
                "<svg viewBox=\"0 0 {width} {height}\" style=\"width:100%;height:auto\" role=\"img\"><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#6b7385\" font-family=\"system-ui\" font-size=\"13\">collecting samples (a point every {every})…</text></svg>",
                width / 2,
                height / 2
            );
        }
    };
    let allocated = gantry_chart::Line {
        label: "allocated".into(),
        color: "#4e79a7",
        dashed: false,
        filled: true,
        points: points.iter().map(|p| (p.t_s as f64, p.allocated_gpus)).collect(),
    };
    let used = gantry_chart::Line {
        label: "used".into(),
        color: "#e15759",
        dashed: false,
        filled: false,
        points: points.iter().map(|p| (p.t_s as f64, p.used_gpus)).collect(),
    };
    // Seconds on the ticks when the span is short, dates when it is long.
    let span = t1 - t0;
    let tick = |t: f64| {
        let t = t as u64;
        match span {
            s if s < 900.0 => format!("{:02}:{:02}:{:02}", (t / 3600) % 24, (t / 60) % 60, t % 60),
            s if s < 86_400.0 => format!("{:02}:{:02}", (t / 3600) % 24, (t / 60) % 60),
            _ => {
                let (_, month, day) = gantry_types::time::civil_from_days((t / 86_400) as i64);
                format!("{month:02}-{day:02} {:02}:{:02}", (t / 3600) % 24, (t / 60) % 60)
            }
        }
    };
    let chart = gantry_chart::Chart {
        x_label: "time (UTC)",
        x_min: t0,
        x_max: t1,
        x_step: ((t1 - t0) / 6.0).max(1.0),
        y_max: top,
        y_step: gantry_chart::nice_step(top * 2.0),
        x_tick: Some(&tick),
        width: f64::from(width),
        height: f64::from(height),
        legend_width: 0.0,
        ..gantry_chart::Chart::default()
    };
    chart.svg(&[allocated, used])
}

/// `HH:MM` UTC, or `MM-DD HH:MM` for older than a day.
/// A time as the dashboard shows it: always with its date (`2026-11-26 21:46 UTC`).
pub(super) fn clock(t: u64) -> String {
    date_time(t)
}

pub(super) fn date_time(t: u64) -> String {
    let (h, m) = ((t / 3600) % 24, (t / 60) % 60);
    let (y, month, d) = gantry_types::time::civil_from_days((t / 86_400) as i64);
    format!("{y}-{month:02}-{d:02} {h:02}:{m:02} UTC")
}

pub(super) fn legend() -> &'static str {
    "<div class=legend><span><i class=dot style=\"background:#4e79a7;opacity:.5\"></i>allocated</span><span><i class=dot style=\"background:#e15759\"></i>used (allocation × utilization)</span></div>"
}

fn gpu_tile(g: &GpuView, queue_of: &BTreeMap<u64, String>) -> String {
    let color = g.jobs.first().and_then(|j| queue_of.get(j)).map_or("#9aa3b5", |q| queue_color(q));
    let util = g.utilization_pct.unwrap_or(0);
    let allocated = f64::from(g.allocated_milli) / 10.0;
    let mut inner = String::new();
    if !g.instances.is_empty() {
        inner += "<div class=mig>";
        for i in &g.instances {
            let bg = i.job.and_then(|j| queue_of.get(&j)).map_or("#d5d9e2", |q| queue_color(q));
            let who = i.job.map_or("free".to_string(), |j| format!("job {j}"));
            let _ = write!(
                inner,
                "<div style=\"background:{bg}\" title=\"{} @{} — {who}; its own utilization is not measurable through NVML\"></div>",
                esc(&i.profile),
                i.start
            );
        }
        inner += "</div>";
    } else if g.allocated_milli > 0 {
        let _ = write!(inner, "<div class=alloc style=\"background:{color};top:{:.0}%\"></div>", 100.0 - allocated);
    }
    let jobs: Vec<String> = g.jobs.iter().map(|j| format!("job {j}")).collect();
    let memory = g.memory_used_mib.map_or(String::new(), |mib| format!(", memory in use {}", gib(mib)));
    let title = format!(
        "gpu{} {} ({}) — allocated {:.0}%, utilization {}{}{memory} — {}{}",
        g.index,
        g.model,
        g.mode,
        allocated,
        g.utilization_pct.map_or("n/a".into(), |u| format!("{u}%")),
        if g.measured || g.utilization_pct.is_none() { "" } else { " (simulated)" },
        if jobs.is_empty() { "idle".into() } else { jobs.join(", ") },
        g.reconfiguring.as_ref().map_or(String::new(), |r| format!(" — {r}"))
    );
    // A GPU being reconfigured is cordoned: its mode label says so.
    let mode_label = match &g.reconfiguring {
        Some(_) => format!("{} ⟳", g.mode),
        None => g.mode.clone(),
    };
    let (open, close) = match g.jobs.first() {
        Some(j) => (format!("<a class=gpu href=\"/ui/jobs/{j}\""), "</a>"),
        None => ("<div class=gpu".to_string(), "</div>"),
    };
    format!(
        "{open} title=\"{}\">{inner}<div class=fill style=\"height:{}%;background:{color}\"></div><span class=t>gpu{}</span><span class=m>{}</span><span class=s>{:.0}% / {}{}</span>{close}",
        esc(&title),
        if g.instances.is_empty() { util } else { util.min(12) },
        g.index,
        esc(&mode_label),
        allocated,
        g.utilization_pct.map_or("–".into(), |u| format!("{u}%")),
        g.memory_used_mib.map_or(String::new(), |mib| format!(" · {}", gib(mib)))
    )
}

/// MiB as the tiles show them (`2.4 GiB`).
fn gib(mib: u64) -> String {
    format!("{:.1} GiB", mib as f64 / 1024.0)
}

fn node_card(n: &NodeView, queue_of: &BTreeMap<u64, String>) -> String {
    let mut flags = String::new();
    if n.drained {
        flags += "<span class=flag>drained</span>";
    }
    if !n.ready {
        flags += "<span class=flag>not ready</span>";
    }
    if n.refused_reports > 0 {
        let _ = write!(
            flags,
            "<span class=flag title=\"its agent reported {} tasks of other nodes (refused)\">lying agent?</span>",
            n.refused_reports
        );
    }
    if let Some(c) = n.confinement.as_ref().filter(|c| !c.is_confined()) {
        let _ = write!(flags, "<span class=flag title=\"{}\">unconfined</span>", esc(&c.to_string()));
    }
    let model = n.gpus.first().map_or("", |g| g.model.as_str());
    let tiles: String = n.gpus.iter().map(|g| gpu_tile(g, queue_of)).collect();
    format!(
        "<div class=\"panel node\"><h3><span>{}{flags}</span><small>{} × {}</small></h3><div class=gpus>{tiles}</div></div>",
        esc(&n.name),
        n.gpus.len(),
        esc(model)
    )
}

pub(super) async fn fleet(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let (nodes, running, series, advice, changes) = shared.read(|c| {
        (
            views::nodes::seen_by(views::nodes::nodes(c, now_s()), c, &who),
            views::jobs::jobs(c, &who, &[JobState::Running], now_s()),
            views::series(c, &who, true),
            views::plan::plan_advice(c, now_s()).ok(),
            views::reconfig::reconfigurations(c, &who),
        )
    });
    let queue_of: BTreeMap<u64, String> = running.iter().map(|j| (j.row.id, j.row.queue.clone())).collect();
    let gpus: Vec<&GpuView> = nodes.iter().flat_map(|n| &n.gpus).collect();
    let total = gpus.len() as f64;
    let allocated: f64 = gpus.iter().map(|g| f64::from(g.allocated_milli) / 1000.0).sum();
    let used: f64 = gpus
        .iter()
        .map(|g| f64::from(g.allocated_milli) / 1000.0 * f64::from(g.utilization_pct.unwrap_or(0)) / 100.0)
        .sum();
    let pct = |v: f64| if total > 0.0 { v / total * 100.0 } else { 0.0 };
    let mut queues: Vec<&String> = queue_of.values().collect();
    queues.sort();
    queues.dedup();
    let key: String = queues
        .iter()
        .map(|q| format!("<span><i class=dot style=\"background:{}\"></i>{}</span>", queue_color(q), esc(q)))
        .collect();
    let cards: String = nodes.iter().map(|n| node_card(n, &queue_of)).collect();
    let body = format!(
        "<h1>Fleet</h1><div class=cards>\
         <div class=card><div class=l>GPUs</div><div class=v>{total}</div></div>\
         <div class=card><div class=l>Allocated</div><div class=v>{:.1} <small class=muted>{:.0}%</small></div></div>\
         <div class=card><div class=l>Used</div><div class=v>{:.1} <small class=muted>{:.0}%</small></div></div>\
         <div class=card><div class=l>Running jobs</div><div class=v>{}</div></div></div>\
         <h2>Allocation and use, last hour (GPUs)</h2><div class=panel>{}{}</div>\
         <h2>GPUs <small class=muted>— color: queue; fill: utilization; label: allocated % / utilization %; ⟳ being reconfigured</small></h2><div class=legend>{key}</div><div class=nodes>{cards}</div>{}{}",
        allocated,
        pct(allocated),
        used,
        pct(used),
        running.len(),
        chart(&series, total, 1300, 200, "10 s"),
        legend(),
        advice.map_or_else(String::new, |a| planner_panel(&a)),
        reconfigurations_panel(&changes)
    );
    page("Fleet", "Fleet", Some(&who), &body).into_response()
}

/// The online MIG planner's advice for the fleet as it is (`GET /v1/plan`), under the map.
fn planner_panel(advice: &crate::views::PlanView) -> String {
    let mut rows = String::new();
    for (what, list) in [("reconfigure now", &advice.reconfigure), ("drain first", &advice.drain)] {
        for c in list {
            let _ = write!(
                rows,
                "<tr><td>{what}</td><td>{} gpu{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.node),
                c.gpu,
                esc(&c.from),
                esc(&c.to)
            );
        }
    }
    let waiting = if advice.deferred > 0 {
        format!(" {} more wait for their GPUs' work to end or for a cooldown.", advice.deferred)
    } else {
        String::new()
    };
    let table = if rows.is_empty() {
        "<p class=muted>For the waiting and running jobs, the planner would change nothing now.</p>".to_string()
    } else {
        format!("<table><tr><th></th><th>GPU</th><th>now</th><th>planned</th></tr>{rows}</table>")
    };
    let applied = match advice.mode {
        crate::control::reconfig::ReconfigureMode::Auto => "the controller carries these out within its guards",
        _ => "advice, not applied (reconfigure = advise)",
    };
    format!(
        "<h2>Planner <small class=muted>— what the online MIG planner would change now, for {} task(s); {applied}</small></h2>\
         <div class=panel>{table}<p class=muted>{waiting}</p></div>",
        advice.demand_tasks
    )
}

/// The reconfigurations under way and the latest finished (`GET /v1/reconfigurations`).
fn reconfigurations_panel(v: &crate::views::ReconfigurationsView) -> String {
    if v.under_way.is_empty() && v.recent.is_empty() {
        return String::new();
    }
    let mut rows = String::new();
    for r in v.under_way.iter().chain(v.recent.iter().rev().take(10)) {
        let phase = serde_json::to_value(r.phase).ok().and_then(|p| p.as_str().map(String::from)).unwrap_or_default();
        let _ = write!(
            rows,
            "<tr><td>#{}</td><td>{}</td><td>{} gpu{}</td><td>{} → {}</td><td>{}{}</td></tr>",
            r.id,
            esc(&phase),
            esc(&r.node),
            r.gpu,
            esc(&r.from.text()),
            esc(&r.to.text()),
            esc(&r.reason),
            r.outcome.as_deref().map_or(String::new(), |o| format!(" — {}", esc(o)))
        );
    }
    format!(
        "<h2>Reconfigurations <small class=muted>— {} applied, {} refused, {} abandoned, {} replica(s) moved</small></h2>\
         <div class=panel><table><tr><th></th><th>phase</th><th>GPU</th><th>change</th><th>why</th></tr>{rows}</table></div>",
        v.applied, v.refused, v.abandoned, v.moves
    )
}

pub(super) fn job_link(j: &JobView) -> String {
    format!("<a href=\"/ui/jobs/{0}\">{0}</a>", j.row.id)
}
