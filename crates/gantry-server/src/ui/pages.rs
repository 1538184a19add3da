//! The queue (each pending job with its reason), usage (chargeback and per-queue use against
//! quota over the week) and job (its tasks, why it waits, its log tail) pages.

use super::fleet::{chart, clock, job_link, legend};
use super::*;

pub(super) async fn queue(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let (jobs, queues, idle) = shared.read(|c| {
        let jobs = views::jobs::jobs(c, &who, &[JobState::Pending, JobState::Running], crate::now_s());
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

pub(super) async fn usage(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let now = now_s();
    let hour = gantry_store::USAGE_BUCKET_S;
    let from = now.saturating_sub(7 * 86_400);
    let (from, to) = (from - from % hour, now.div_ceil(hour) * hour);
    let lines = |by| crate::api::usage::usage_lines(&shared, &who, from, to, by);
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

pub(super) async fn job(State(shared): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let Ok(id) = id.parse::<u64>() else {
        return failure(ControlError::request("id", format!("{id:?} is not a job id")));
    };
    let now = crate::now_s();
    let read = shared.read(|c| views::jobs::job(c, &who, id, now).map(|v| (v, views::nodes::nodes(c, now))));
    let (view, nodes) = match read {
        Ok(v) => v,
        Err(e) => return failure(e),
    };
    let row = &view.row;
    let facts = job_facts(&view);
    let tasks = task_rows(row);
    let measured = measured_rows(&view, &nodes);
    let logs = match who.reads_logs_of(row.job.control.user.as_deref().unwrap_or_default()) {
        Ok(()) => log_tails(&shared, row).await,
        Err(_) => "<p>Task output: only the job's user and admins may read it.</p>".to_string(),
    };
    let body = format!(
        "<h1>Job {id} — {}</h1><table class=facts>{facts}</table><h2>Tasks</h2><table><tr><th>Task</th><th>Node</th><th>Grants</th><th>Devices</th><th>Confinement</th></tr>{tasks}</table>{measured}{logs}",
        esc(&row.name)
    );
    page(&format!("Job {id}"), "Queue", Some(&who), &body).into_response()
}

/// A job's facts table: state, queue, user, times, exit code, why it waits.
fn job_facts(view: &JobView) -> String {
    let row = &view.row;
    let ending = match row.outcome.ending {
        Some(ending) if ending.name() != row.state.name() => format!(" ({})", ending.name()),
        _ => String::new(),
    };
    let mut facts = format!(
        "<tr><th>State</th><td>{}{ending}</td></tr><tr><th>Queue</th><td><i class=dot style=\"background:{}\"></i>{}</td></tr><tr><th>Submitted</th><td>{}</td></tr>",
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
    let _ = write!(facts, "<tr><th>Priority</th><td>{}</td></tr>", row.job.priority);
    if let Some(capped) = &view.priority_capped {
        let _ = write!(facts, "<tr><th>Priority capped</th><td class=reason>{}</td></tr>", esc(capped));
    }
    if let Some(oom) = &row.outcome.oom {
        let _ = write!(facts, "<tr><th>Why it ended</th><td class=reason>{}</td></tr>", esc(&oom.reason()));
    }
    if let Some(p) = &view.pending {
        let _ = write!(facts, "<tr><th>Why it waits</th><td class=reason>{}</td></tr>", esc(&p.reason.to_string()));
        if let Some(e) = p.estimate_s {
            let _ = write!(facts, "<tr><th>Expected start</th><td>{}</td></tr>", clock(e));
        }
    }
    facts
}

/// What the job used on each node (its cgroups' measure: ended runs, then the run in
/// progress) beside its GPUs' utilization there.
fn measured_rows(view: &JobView, nodes: &[views::NodeView]) -> String {
    let id = view.row.id;
    let mut rows = String::new();
    let all = view
        .row
        .outcome
        .used
        .iter()
        .map(|u| ("ended runs", u))
        .chain(view.running_used.iter().map(|u| ("this run", u)));
    for (which, u) in all {
        let gpus: Vec<u32> = nodes
            .iter()
            .filter(|n| n.name == u.node)
            .flat_map(|n| n.gpus.iter())
            .filter(|g| g.jobs.contains(&id))
            .filter_map(|g| g.utilization_pct)
            .collect();
        let gpu = if gpus.is_empty() || which != "this run" {
            "—".to_string()
        } else {
            format!("{}%", gpus.iter().sum::<u32>() / gpus.len() as u32)
        };
        let bytes =
            |b: Option<u64>, none: &str| b.map_or_else(|| none.to_string(), |b| gantry_types::Bytes(b).to_string());
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{which}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{gpu}</td></tr>",
            esc(&u.node),
            u.used.cpu_ms.map_or_else(|| "—".to_string(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
            u.used
                .cpu_limit_milli
                .map_or_else(|| "not limited".to_string(), |m| format!("{} cores", m as f64 / 1000.0)),
            bytes(u.used.memory_peak_bytes, "—"),
            bytes(u.used.memory_limit_bytes, "not limited"),
        );
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Measured on its nodes</h2><table><tr><th>Node</th><th>Run</th><th>CPU time</th><th>CPU limit</th><th>Peak memory</th><th>Memory limit</th><th>GPU utilization</th></tr>{rows}</table>"
    )
}

/// One row per task: where it runs, what it holds, its devices, how its node confines it.
fn task_rows(row: &gantry_store::JobRow) -> String {
    let mut tasks = String::new();
    for t in &row.tasks {
        let grants: Vec<String> = t.placement.iter().flat_map(|p| p.gpus.iter()).map(|g| g.to_string()).collect();
        let _ = write!(
            tasks,
            "<tr><td>{}/{}</td><td>{}</td><td class=wrap>{}</td><td class=\"muted wrap\">{}</td><td class=wrap>{}</td></tr>",
            esc(&t.group),
            t.replica,
            esc(&t.node),
            esc(&grants.join(", ")),
            esc(&t.devices.join(", ")),
            esc(t.confinement.as_deref().unwrap_or("—"))
        );
    }
    if tasks.is_empty() {
        tasks = "<tr><td colspan=5 class=muted>Not placed yet.</td></tr>".into();
    }
    tasks
}

/// The last 50 lines of each task's stdout and stderr (of the first tasks of a large job),
/// from whichever node runs it; a node that cannot be read says why.
async fn log_tails(shared: &Shared, row: &gantry_store::JobRow) -> String {
    use crate::task_logs::{LOG_TASKS_MAX, Want, last_lines};
    let ranks = (0..row.tasks.len() as u32).take(LOG_TASKS_MAX).collect();
    let want = Want { ranks, streams: vec![gantry_wire::LogStream::Out, gantry_wire::LogStream::Err], offset: None };
    let mut logs = String::new();
    for piece in crate::task_logs::read(shared, row, &want).await {
        if piece.text.is_empty() && piece.note.is_none() {
            continue;
        }
        let note = piece.note.as_deref().map(|n| format!("<p class=muted>{}</p>", esc(n))).unwrap_or_default();
        let _ = write!(
            logs,
            "<h2>{} — std{} (last 50 lines)</h2>{note}<pre>{}</pre>",
            esc(&piece.task),
            piece.stream,
            esc(last_lines(&piece.text, 50))
        );
    }
    if logs.is_empty() {
        logs = "<p class=muted>No output yet.</p>".into();
    }
    logs
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
