//! The web dashboard (`/ui`), server-rendered: plain HTML with inline CSS and SVG, no
//! JavaScript and no build toolchain. Behind the same tokens as the API: a login form puts the
//! token in an HttpOnly cookie. Pages: the fleet (every GPU a tile, MIG instances as
//! sub-tiles, colored by queue, filled by utilization; allocation and use over the last
//! hour), the queue (each pending job with its reason), usage (chargeback and per-queue use
//! against quota over the week), and a job (its tasks, why it waits, its log tail).

use crate::auth::Principal;
use crate::error::ControlError;
use crate::meter::UsageBy;
use crate::series::Point;
use crate::views::{self, GpuView, JobView, NodeView, QueueView};
use crate::{Shared, now_s};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use gantry_types::JobState;
use std::collections::BTreeMap;
use std::fmt::Write;

const COOKIE: &str = "gantry_token";

/// HTML-escape text.
use gantry_chart::escape as esc;

/// A queue's color: a fixed palette, picked by name (the same queue, the same color).
fn queue_color(queue: &str) -> &'static str {
    const PALETTE: [&str; 10] =
        ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"];
    let hash = queue.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619));
    PALETTE[hash as usize % PALETTE.len()]
}

const STYLE: &str = r#"
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2430;background:#f4f5f7}
header{background:#1f2430;color:#fff;padding:10px 24px;display:flex;align-items:center;gap:28px}
header b{font-size:17px;letter-spacing:.5px}header a{color:#c9d1e0;text-decoration:none;padding:4px 0}header a.on{color:#fff;border-bottom:2px solid #f28e2b}
header .who{margin-left:auto;color:#8c95a8;font-size:12px}main{padding:20px 24px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px}h2{font-size:15px;margin:22px 0 8px;color:#3a4150}
.cards{display:flex;gap:14px;flex-wrap:wrap}.card{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px #0001;min-width:150px}
.card .v{font-size:24px;font-weight:600}.card .l{color:#6b7385;font-size:12px;text-transform:uppercase;letter-spacing:.4px}
.panel{background:#fff;border-radius:8px;padding:14px 16px;box-shadow:0 1px 2px #0001;margin-bottom:14px}
.nodes{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:14px}
.node h3{margin:0 0 8px;font-size:14px;display:flex;justify-content:space-between}.node h3 small{color:#6b7385;font-weight:400}
.flag{background:#e15759;color:#fff;border-radius:4px;padding:0 6px;font-size:11px;margin-left:6px}
.gpus{display:grid;grid-template-columns:repeat(4,1fr);gap:6px}
a.gpu{display:block;text-decoration:none}.gpu{position:relative;height:62px;border-radius:6px;background:#e8eaef;overflow:hidden;border:1px solid #d5d9e2}
.gpu .fill{position:absolute;left:0;right:0;bottom:0;opacity:.9}.gpu .alloc{position:absolute;inset:0;opacity:.28}
.gpu .t{position:absolute;left:5px;top:3px;font-size:11px;font-weight:600;color:#1f2430}.gpu .s{position:absolute;left:5px;bottom:3px;font-size:10px;color:#1f2430}
.gpu .m{position:absolute;right:5px;top:3px;font-size:10px;color:#4a5263}
.mig{position:absolute;left:3px;right:3px;top:18px;bottom:16px;display:flex;gap:2px}.mig div{flex:1;border-radius:3px;background:#d5d9e2}
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #eceef2;vertical-align:top}
th{font-size:12px;color:#6b7385;text-transform:uppercase;letter-spacing:.3px;background:#fafbfc}td.n{text-align:right;font-variant-numeric:tabular-nums}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:6px;vertical-align:-1px}
.reason{color:#8a3b12}.muted{color:#6b7385}.bar{height:8px;background:#eceef2;border-radius:4px;position:relative;min-width:120px}
.bar i{position:absolute;left:0;top:0;bottom:0;border-radius:4px}td{white-space:nowrap}td.wrap,td.reason{white-space:normal}table.facts{max-width:720px}table.facts th{width:170px}
pre{white-space:pre-wrap;word-break:break-all;background:#1f2430;color:#e6e9ef;padding:12px;border-radius:6px;overflow:auto;max-height:420px;font-size:12px}
.legend span{margin-right:16px;font-size:12px;color:#4a5263}form.login{max-width:420px;margin:80px auto}input{width:100%;padding:8px;font:inherit;margin:8px 0}
button{padding:8px 16px;background:#1f2430;color:#fff;border:0;border-radius:6px;font:inherit;cursor:pointer}.err{color:#e15759}
"#;

fn page(title: &str, active: &str, who: Option<&Principal>, body: &str) -> Html<String> {
    let mut nav = String::new();
    for (href, label) in [("/ui/fleet", "Fleet"), ("/ui/queue", "Queue"), ("/ui/usage", "Usage")] {
        let class = if label == active { " class=on" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{class}>{label}</a>");
    }
    let who = who.map_or(String::new(), |w| {
        format!("<span class=who>token {} · <a href=\"/ui/logout\">log out</a></span>", esc(&w.name))
    });
    Html(format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>{} · gantry</title><style>{STYLE}</style></head><body><header><b>gantry</b>{nav}{who}</header><main>{body}</main></body></html>",
        esc(title)
    ))
}

/// The token from the cookie or an `Authorization` header.
fn secret(headers: &HeaderMap) -> Option<String> {
    if let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
        && let Some(token) = auth.strip_prefix("Bearer ")
    {
        return Some(token.trim().to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// Who is looking (`None`: send them to the login page).
fn viewer(shared: &Shared, headers: &HeaderMap) -> Option<Principal> {
    let who = secret(headers).and_then(|s| shared.read(|c| c.authenticate(&s)).ok());
    who.filter(|w| w.not_agent().is_ok())
}

fn to_login() -> Response {
    Redirect::to("/ui/login").into_response()
}

fn failure(e: ControlError) -> Response {
    let status = crate::api::status_of(&e);
    (status, page("Error", "", None, &format!("<h1>{}</h1><p class=err>{}</p>", status, esc(&e.to_string()))))
        .into_response()
}

pub fn router() -> axum::Router<Shared> {
    axum::Router::new()
        .route("/ui", axum::routing::get(|| async { Redirect::to("/ui/fleet") }))
        .route("/ui/login", axum::routing::get(login_form).post(login))
        .route("/ui/logout", axum::routing::get(logout))
        .route("/ui/fleet", axum::routing::get(fleet))
        .route("/ui/queue", axum::routing::get(queue))
        .route("/ui/usage", axum::routing::get(usage))
        .route("/ui/jobs/{id}", axum::routing::get(job))
}

fn login_page(error: &str) -> Html<String> {
    let error = if error.is_empty() { String::new() } else { format!("<p class=err>{}</p>", esc(error)) };
    page(
        "Log in",
        "",
        None,
        &format!(
            "<form class=\"login panel\" method=post action=\"/ui/login\"><h1>gantry</h1><p class=muted>Paste an API token (the admin's is in <code>admin.token</code> in the controller's data directory; <code>gantry token create</code> makes others).</p>{error}<input type=password name=token autofocus placeholder=\"gty_…\"><button>Log in</button></form>"
        ),
    )
}

/// `GET /ui/login`: the form; or, with `?token=…[&next=/ui/…]`, a login link (as Jupyter's
/// `?token=`): it sets the cookie and goes on to `next`.
async fn login_form(State(shared): State<Shared>, uri: axum::http::Uri) -> Response {
    match uri.query() {
        Some(query) if query.contains("token=") => login(State(shared), query.to_string()).await,
        _ => login_page("").into_response(),
    }
}

/// `POST /ui/login` (form) or a login link: check the token, set the cookie, go on.
async fn login(State(shared): State<Shared>, body: String) -> Response {
    let field = |name: &str| {
        body.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| percent_decode(v))
    };
    let token = field("token").unwrap_or_default();
    let next = safe_next(field("next"));
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && shared.read(|c| c.authenticate(&token)).is_ok_and(|w| w.not_agent().is_ok());
    if !valid {
        return (StatusCode::UNAUTHORIZED, login_page("Unknown or revoked token.")).into_response();
    }
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/ui");
    ([(header::SET_COOKIE, cookie)], Redirect::to(&next)).into_response()
}

async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

/// Where a login goes on: a page of the dashboard, never elsewhere (no open redirect).
fn safe_next(next: Option<String>) -> String {
    next.filter(|n| {
        n.starts_with("/ui/") && !n.contains("//") && !n.contains('\\') && n.chars().all(|c| c.is_ascii_graphic())
    })
    .unwrap_or_else(|| "/ui/fleet".into())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Allocation (shaded) and use (line) over time, in GPUs up to the fleet's size: the same
/// chart the simulator's reports draw (`gantry-chart`).
pub fn chart(points: &[Point], top: f64, width: u32, height: u32, every: &str) -> String {
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
fn clock(t: u64) -> String {
    let (h, m) = ((t / 3600) % 24, (t / 60) % 60);
    if now_s().saturating_sub(t) > 86_400 {
        let (_, month, d) = gantry_types::time::civil_from_days((t / 86_400) as i64);
        return format!("{month:02}-{d:02} {h:02}:{m:02}");
    }
    format!("{h:02}:{m:02} UTC")
}

fn legend() -> &'static str {
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
    let title = format!(
        "gpu{} {} ({}) — allocated {:.0}%, utilization {}{} — {}",
        g.index,
        g.model,
        g.mode,
        allocated,
        g.utilization_pct.map_or("n/a".into(), |u| format!("{u}%")),
        if g.measured || g.utilization_pct.is_none() { "" } else { " (simulated)" },
        if jobs.is_empty() { "idle".into() } else { jobs.join(", ") }
    );
    let (open, close) = match g.jobs.first() {
        Some(j) => (format!("<a class=gpu href=\"/ui/jobs/{j}\""), "</a>"),
        None => ("<div class=gpu".to_string(), "</div>"),
    };
    format!(
        "{open} title=\"{}\">{inner}<div class=fill style=\"height:{}%;background:{color}\"></div><span class=t>gpu{}</span><span class=m>{}</span><span class=s>{:.0}% / {}</span>{close}",
        esc(&title),
        if g.instances.is_empty() { util } else { util.min(12) },
        g.index,
        esc(&g.mode),
        allocated,
        g.utilization_pct.map_or("–".into(), |u| format!("{u}%"))
    )
}

fn node_card(n: &NodeView, queue_of: &BTreeMap<u64, String>) -> String {
    let mut flags = String::new();
    if n.drained {
        flags += "<span class=flag>drained</span>";
    }
    if !n.ready {
        flags += "<span class=flag>not ready</span>";
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

async fn fleet(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let (nodes, running, series, advice) = shared.read(|c| {
        (
            views::nodes::nodes(c, now_s()),
            views::jobs::jobs(c, &who, &[JobState::Running]),
            views::series(c, &who, true),
            views::plan::plan_advice(c, now_s()).ok(),
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
         <h2>GPUs <small class=muted>— color: queue; fill: utilization; label: allocated % / utilization %</small></h2><div class=legend>{key}</div><div class=nodes>{cards}</div>{}",
        allocated,
        pct(allocated),
        used,
        pct(used),
        running.len(),
        chart(&series, total, 1300, 200, "10 s"),
        legend(),
        advice.map_or_else(String::new, |a| planner_panel(&a))
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
    format!(
        "<h2>Planner <small class=muted>— what the online MIG planner would change now, for {} task(s); advice, not applied</small></h2>\
         <div class=panel>{table}<p class=muted>{waiting}</p></div>",
        advice.demand_tasks
    )
}

fn job_link(j: &JobView) -> String {
    format!("<a href=\"/ui/jobs/{0}\">{0}</a>", j.row.id)
}

async fn queue(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let (jobs, queues, idle) = shared.read(|c| {
        let jobs = views::jobs::jobs(c, &who, &[JobState::Pending, JobState::Running]);
        let idle: std::collections::BTreeSet<u64> =
            jobs.iter().map(|j| j.row.id).filter(|&id| views::is_idle(c, id)).collect();
        (jobs, views::queues::queues(c, &who), idle)
    });
    let mut pending = String::new();
    let mut running = String::new();
    for j in &jobs {
        let dot = format!("<i class=dot style=\"background:{}\"></i>", queue_color(&j.row.queue));
        if j.row.state == JobState::Pending {
            let (reason, estimate) = j.pending.as_ref().map_or((String::new(), String::new()), |p| {
                (p.reason.to_string(), p.estimate_s.map_or(String::new(), clock))
            });
            let _ = write!(
                pending,
                "<tr><td>{}</td><td>{}</td><td>{dot}{}</td><td class=reason>{}</td><td>{}</td></tr>",
                job_link(j),
                esc(&j.row.name),
                esc(&j.row.queue),
                esc(&reason),
                estimate
            );
        } else {
            let nodes: Vec<&str> = j.row.tasks.iter().map(|t| t.node.as_str()).collect();
            let mut nodes = nodes.clone();
            nodes.dedup();
            let flag = if idle.contains(&j.row.id) {
                " <span class=flag title=\"under the idle threshold\">idle</span>"
            } else {
                ""
            };
            let _ = write!(
                running,
                "<tr><td>{}</td><td>{}{flag}</td><td>{dot}{}</td><td>{}</td><td>{}</td></tr>",
                job_link(j),
                esc(&j.row.name),
                esc(&j.row.queue),
                esc(&nodes.join(", ")),
                j.row.started_at_s.map_or(String::new(), clock)
            );
        }
    }
    let empty = |rows: &str, what: &str| {
        if rows.is_empty() {
            format!("<tr><td colspan=5 class=muted>No {what} jobs.</td></tr>")
        } else {
            rows.to_string()
        }
    };
    let body = format!(
        "<h1>Queue</h1>{}<h2>Pending — why each waits</h2><table><tr><th>Job</th><th>Name</th><th>Queue</th><th>Reason</th><th>Expected start</th></tr>{}</table>\
         <h2>Running</h2><table><tr><th>Job</th><th>Name</th><th>Queue</th><th>Nodes</th><th>Started</th></tr>{}</table>",
        queue_table(&queues),
        empty(&pending, "pending"),
        empty(&running, "running")
    );
    page("Queue", "Queue", Some(&who), &body).into_response()
}

/// Each queue's allocation and use now, against its guarantee and limit.
fn queue_table(queues: &[QueueView]) -> String {
    let mut rows = String::new();
    for q in queues {
        let scale = q.limit_gpus.unwrap_or(0.0).max(q.allocated_gpus).max(q.guaranteed_gpus.unwrap_or(0.0)).max(1.0);
        let bar = format!(
            "<div class=bar><i style=\"width:{:.1}%;background:{};opacity:.35\"></i><i style=\"width:{:.1}%;background:{}\"></i>{}</div>",
            q.allocated_gpus / scale * 100.0,
            queue_color(&q.name),
            q.used_gpus / scale * 100.0,
            queue_color(&q.name),
            q.guaranteed_gpus.map_or(String::new(), |g| format!(
                "<i style=\"left:{:.1}%;width:2px;background:#1f2430\" title=\"guarantee\"></i>",
                (g / scale * 100.0).min(99.5)
            ))
        );
        let opt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
        let _ = write!(
            rows,
            "<tr><td><i class=dot style=\"background:{}\"></i>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{}</td><td class=n>{}</td><td>{bar}</td></tr>",
            queue_color(&q.name),
            esc(&q.name),
            q.pending,
            q.running,
            q.allocated_gpus,
            q.used_gpus,
            opt(q.guaranteed_gpus),
            opt(q.limit_gpus)
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=8 class=muted>No queues with jobs yet.</td></tr>".into();
    }
    format!(
        "<table><tr><th>Queue</th><th>Pending</th><th>Running</th><th>Allocated GPUs</th><th>Used GPUs</th><th>Guarantee</th><th>Limit</th><th>Use against quota</th></tr>{rows}</table>"
    )
}

async fn usage(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let now = now_s();
    let hour = gantry_store::USAGE_BUCKET_S;
    let from = now.saturating_sub(7 * 86_400);
    let (from, to) = (from - from % hour, now.div_ceil(hour) * hour);
    let lines = |by| crate::api::usage_lines(&shared, &who, from, to, by);
    let (by_queue, by_user, by_model) = match (lines(UsageBy::Queue), lines(UsageBy::User), lines(UsageBy::Model)) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return failure(e),
    };
    let (week, total, queues) = shared.read(|c| {
        let total: usize = views::nodes::nodes(c, now).iter().map(|n| n.gpus.len()).sum();
        (views::series(c, &who, false), total, views::queues::queues(c, &who))
    });
    let table = |title: &str, lines: &[crate::meter::UsageLine]| {
        let mut rows = String::new();
        for l in lines {
            let _ = write!(
                rows,
                "<tr><td>{}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{:.0}%</td><td class=n>{:.2}</td><td class=n>${:.2}</td><td class=n>${:.2}</td><td class=n>${:.2}</td></tr>",
                esc(&l.key),
                l.allocated_gpu_hours,
                l.used_gpu_hours,
                l.utilization * 100.0,
                l.waste_gpu_hours,
                l.cost_allocated,
                l.cost_used,
                l.waste_cost
            );
        }
        if rows.is_empty() {
            rows = "<tr><td colspan=8 class=muted>Nothing metered in this period yet.</td></tr>".into();
        }
        format!(
            "<h2>By {title}</h2><table><tr><th>{title}</th><th>Allocated GPU-h</th><th>Used GPU-h</th><th>Utilization</th><th>Waste GPU-h</th><th>Cost by allocation</th><th>Cost by use</th><th>Waste</th></tr>{rows}</table>"
        )
    };
    let body = format!(
        "<h1>Usage — last 7 days</h1><p class=muted>Chargeback by allocation and by measured use, side by side (<code>gantry usage</code> prints the same; prices from the controller's <code>[billing]</code>).</p>\
         <h2>Allocation and use, last 7 days (GPUs, 5-minute averages)</h2><div class=panel>{}{}</div><h2>Queues against quota, now</h2>{}{}{}{}",
        chart(&week, total as f64, 1300, 200, "5 minutes"),
        legend(),
        queue_table(&queues),
        table("queue", &by_queue),
        table("user", &by_user),
        table("model", &by_model)
    );
    page("Usage", "Usage", Some(&who), &body).into_response()
}

async fn job(State(shared): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let Ok(id) = id.parse::<u64>() else {
        return failure(ControlError::Invalid(format!("{id:?} is not a job id")));
    };
    let view = match shared.read(|c| views::jobs::job(c, &who, id)) {
        Ok(v) => v,
        Err(e) => return failure(e),
    };
    let row = &view.row;
    let mut facts = format!(
        "<tr><th>State</th><td>{}</td></tr><tr><th>Queue</th><td><i class=dot style=\"background:{}\"></i>{}</td></tr><tr><th>Submitted</th><td>{}</td></tr>",
        row.state.name(),
        queue_color(&row.queue),
        esc(&row.queue),
        clock(row.submitted_at_s)
    );
    if let Some(user) = &row.job.control.user {
        let _ = write!(facts, "<tr><th>User</th><td>{}</td></tr>", esc(user));
    }
    if let Some(t) = row.started_at_s {
        let _ = write!(facts, "<tr><th>Started</th><td>{}</td></tr>", clock(t));
    }
    if let Some(t) = row.ended_at_s {
        let _ = write!(facts, "<tr><th>Ended</th><td>{}</td></tr>", clock(t));
    }
    if let Some(code) = row.exit_code {
        let _ = write!(facts, "<tr><th>Exit code</th><td>{code}</td></tr>");
    }
    if let Some(p) = &view.pending {
        let _ = write!(facts, "<tr><th>Why it waits</th><td class=reason>{}</td></tr>", esc(&p.reason.to_string()));
        if let Some(e) = p.estimate_s {
            let _ = write!(facts, "<tr><th>Expected start</th><td>{}</td></tr>", clock(e));
        }
    }
    let mut tasks = String::new();
    for t in &row.tasks {
        let grants: Vec<String> = t.placement.iter().flat_map(|p| p.gpus.iter()).map(|g| g.to_string()).collect();
        let _ = write!(
            tasks,
            "<tr><td>{}/{}</td><td>{}</td><td class=wrap>{}</td><td class=\"muted wrap\">{}</td></tr>",
            esc(&t.group),
            t.replica,
            esc(&t.node),
            esc(&grants.join(", ")),
            esc(&t.devices.join(", "))
        );
    }
    if tasks.is_empty() {
        tasks = "<tr><td colspan=4 class=muted>Not placed yet.</td></tr>".into();
    }
    let mut logs = String::new();
    for t in &row.tasks {
        for stream in ["out", "err"] {
            let path = crate::runner::job_dir(&shared.data_dir, id).join(format!("{}-{}.{stream}", t.group, t.replica));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.is_empty() {
                continue;
            }
            let tail: Vec<&str> = text.lines().rev().take(50).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let _ = write!(
                logs,
                "<h2>{}/{} — std{stream} (last 50 lines)</h2><pre>{}</pre>",
                esc(&t.group),
                t.replica,
                esc(&tail.join("\n"))
            );
        }
    }
    if logs.is_empty() {
        logs = if shared.runner.is_none() {
            "<p class=muted>Task output stays on the node's agent (its data directory, <code>jobs/&lt;id&gt;/</code>).</p>".into()
        } else {
            "<p class=muted>No output yet.</p>".into()
        };
    }
    let body = format!(
        "<h1>Job {id} — {}</h1><table class=facts>{facts}</table><h2>Tasks</h2><table><tr><th>Task</th><th>Node</th><th>Grants</th><th>Devices</th></tr>{tasks}</table>{logs}",
        esc(&row.name)
    );
    page(&format!("Job {id}"), "Queue", Some(&who), &body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_forms_are_decoded() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(percent_decode("gty_ab%2Dc+d%"), "gty_ab-c d%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn a_chart_needs_two_points_and_scales_to_the_fleet() {
        assert!(chart(&[], 8.0, 400, 100, "10 s").contains("collecting samples"));
        let points: Vec<Point> = (0..3)
            .map(|i| Point { t_s: 1000 + i * 10, allocated_gpus: 4.0, used_gpus: 2.0, ..Default::default() })
            .collect();
        let svg = chart(&points, 8.0, 400, 100, "10 s");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "allocation and use: {svg}");
        assert!(!svg.contains("/>"), "no self-closing tags an unquoted value could swallow: {svg}");
    }

    #[test]
    fn logins_only_go_on_to_dashboard_pages() {
        assert_eq!(safe_next(Some("/ui/jobs/3".into())), "/ui/jobs/3");
        for bad in ["https://evil.example", "//evil.example", "/ui//evil", "/v1/tokens", "/ui/\\evil", "/ui/a b"] {
            assert_eq!(safe_next(Some(bad.into())), "/ui/fleet", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui/fleet");
    }

    #[test]
    fn queues_keep_their_colors() {
        assert_eq!(queue_color("research"), queue_color("research"));
    }
}
