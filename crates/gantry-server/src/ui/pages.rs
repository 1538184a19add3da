//! The queue (each pending job with its reason), usage (chargeback and per-queue use against
//! quota over the week) and job (its tasks, why it waits, its log tail) pages.

use super::fleet::{chart, clock, job_link, legend};
use super::*;

pub(super) async fn queue(State(shared): State<Shared>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let now = crate::now_s();
    let (jobs, queues, idle, nodes) = shared.read(|c| {
        let jobs = views::jobs::jobs(c, &who, &[JobState::Pending, JobState::Running], now);
        let idle: std::collections::BTreeSet<u64> =
            jobs.iter().map(|j| j.row.id).filter(|&id| views::is_idle(c, id)).collect();
        (jobs, views::queues::queues(c, &who), idle, views::nodes::nodes(c, now))
    });
    let pending: Vec<&JobView> = jobs.iter().filter(|j| j.row.state == JobState::Pending).collect();
    let running: Vec<&JobView> = jobs.iter().filter(|j| j.row.state == JobState::Running).collect();
    let sort = uri.query().and_then(|q| super::form_field(q, "sort")).unwrap_or_else(|| "started".into());
    let body = format!(
        "<h1>Queue</h1>{}<h2>Pending — why each waits</h2>{}<table><tr><th>Job</th><th>Name</th><th>Queue</th><th>Position</th><th>Reason</th><th>Expected start</th></tr>{}</table>\
         <h2>Running</h2>{}",
        queue_table(&queues),
        reason_groups(&pending),
        pending_rows(&pending),
        super::running::table(&running, &nodes, &idle, &sort, now)
    );
    page("Queue", "Queue", Some(&who), &body).into_response()
}

/// Waiting jobs grouped by what keeps them (the kind of reason, the engine's first for those
/// short of resources), largest group first.
fn reason_groups(pending: &[&JobView]) -> String {
    let mut groups: BTreeMap<String, (u32, String)> = BTreeMap::new();
    for j in pending {
        let Some(p) = &j.pending else { continue };
        let entry = groups.entry(p.reason.kind()).or_insert_with(|| (0, p.reason.to_string()));
        entry.0 += 1;
    }
    let mut groups: Vec<(String, (u32, String))> = groups.into_iter().collect();
    groups.sort_by_key(|(kind, (n, _))| (std::cmp::Reverse(*n), kind.clone()));
    let mut out = String::from("<div class=groups>");
    for (kind, (n, example)) in groups {
        let jobs = if n == 1 { "job waits" } else { "jobs wait" };
        let _ = write!(
            out,
            "<div class=group title=\"for example: {}\"><b>{n}</b> {jobs}: {}</div>",
            esc(&example),
            esc(&kind)
        );
    }
    out + "</div>"
}

/// Each waiting job with its place in its queue's order (priority, then how long it has
/// been eligible), its reason, and its expected start or why there is none.
fn pending_rows(pending: &[&JobView]) -> String {
    let mut order: Vec<&&JobView> =
        pending.iter().filter(|j| j.pending.as_ref().is_some_and(|p| p.reason.category() != "held")).collect();
    order.sort_by_key(|j| {
        (
            j.row.queue.clone(),
            std::cmp::Reverse(j.row.job.priority),
            j.pending.as_ref().map_or(0, |p| p.since_s),
            j.row.id,
        )
    });
    let mut in_queue: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for j in &order {
        in_queue.entry(j.row.queue.as_str()).or_default().push(j.row.id);
    }
    let position: BTreeMap<u64, (usize, usize)> = in_queue
        .values()
        .flat_map(|ids| ids.iter().enumerate().map(move |(rank, id)| (*id, (rank + 1, ids.len()))))
        .collect();
    let mut rows = String::new();
    for j in pending {
        let dot = format!("<i class=dot style=\"background:{}\"></i>", queue_color(&j.row.queue));
        let (reason, start) = match &j.pending {
            Some(p) => (p.reason.to_string(), expected_start(p)),
            None => (String::new(), "<span class=muted>not yet looked at by a scheduling cycle</span>".into()),
        };
        let place = position.get(&j.row.id).map_or("–".to_string(), |(rank, of)| format!("{rank} of {of}"));
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{dot}{}</td><td class=n>{place}</td><td class=reason>{}</td><td class=wrap>{start}</td></tr>",
            job_link(j),
            esc(&j.row.name),
            esc(&j.row.queue),
            esc(&reason)
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=6 class=muted>No pending jobs.</td></tr>".into();
    }
    rows
}

/// A waiting job's expected start, or in words why none is given.
fn expected_start(p: &gantry_types::PendingJob) -> String {
    if let Some(t) = p.estimate_s {
        return clock(t);
    }
    let why = match p.reason.category() {
        "held" => "none: held until released",
        "dependency" => "after the jobs it depends on end",
        "dependency-never-satisfied" => "never: its dependency failed (cancel it)",
        "quota" | "user-limit" | "array-throttle" => "when its queue or user is under the limit again",
        "preempting" => "as soon as the jobs being stopped for it are gone",
        _ => "no reserved start yet: reservations go to the first blocked jobs (`--backfill reserve`)",
    };
    format!("<span class=muted>{why}</span>")
}

/// Each queue's allocation and use now, against its guarantee and limit.
fn queue_table(queues: &[QueueView]) -> String {
    let mut rows = String::new();
    for q in queues {
        let opt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
        let _ = write!(
            rows,
            "<tr><td><i class=dot style=\"background:{}\"></i>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
            queue_color(&q.name),
            esc(&q.name),
            q.pending,
            q.running,
            q.allocated_gpus,
            q.used_gpus,
            opt(q.guaranteed_gpus),
            opt(q.limit_gpus),
            quota_bar(q)
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=8 class=muted>No queues with jobs yet.</td></tr>".into();
    }
    format!(
        "<table><tr><th>Queue</th><th>Pending</th><th>Running</th><th>Allocated GPUs</th><th>Used GPUs</th><th>Guarantee</th><th>Limit</th><th>Use against quota</th></tr>{rows}</table>"
    )
}

/// A queue's allocation and use against its quota, drawn only where it has one.
fn quota_bar(q: &QueueView) -> String {
    if q.guaranteed_gpus.is_none() && q.limit_gpus.is_none() {
        return "<span class=muted>no quota</span>".into();
    }
    let scale = q.limit_gpus.unwrap_or(0.0).max(q.allocated_gpus).max(q.guaranteed_gpus.unwrap_or(0.0)).max(1.0);
    format!(
        "<div class=bar><i style=\"width:{:.1}%;background:{};opacity:.35\"></i><i style=\"width:{:.1}%;background:{}\"></i>{}</div>",
        q.allocated_gpus / scale * 100.0,
        queue_color(&q.name),
        q.used_gpus / scale * 100.0,
        queue_color(&q.name),
        q.guaranteed_gpus.map_or(String::new(), |g| format!(
            "<i style=\"left:{:.1}%;width:2px;background:#1f2430\" title=\"guarantee\"></i>",
            (g / scale * 100.0).min(99.5)
        ))
    )
}

pub(super) async fn usage(State(shared): State<Shared>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let Some(who) = viewer(&shared, &headers) else { return to_login() };
    let hour_range = uri.query().and_then(|q| super::form_field(q, "range")).as_deref() == Some("hour");
    let now = now_s();
    let hour = gantry_store::USAGE_BUCKET_S;
    let from = now.saturating_sub(7 * 86_400);
    let (from, to) = (from - from % hour, now.div_ceil(hour) * hour);
    let lines = |by| crate::api::usage::usage_lines(&shared, &who, from, to, by);
    let (by_queue, by_user, by_model) = match (lines(UsageBy::Queue), lines(UsageBy::User), lines(UsageBy::Model)) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return failure(e),
    };
    let (points, total, queues) = shared.read(|c| {
        let total: usize = views::nodes::nodes(c, now).iter().map(|n| n.gpus.len()).sum();
        (views::series(c, &who, hour_range), total, views::queues::queues(c, &who))
    });
    let (span, every) = if hour_range { ("last hour", "10 seconds") } else { ("last 7 days", "5 minutes") };
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
    let range = format!(
        "<p class=range>Range: <a href=\"/ui/usage?range=hour\"{}>last hour</a><a href=\"/ui/usage?range=week\"{}>last 7 days</a></p>",
        if hour_range { " class=on" } else { "" },
        if hour_range { "" } else { " class=on" }
    );
    let body = format!(
        "<h1>Usage</h1><p class=muted>Chargeback over the last 7 days by allocation and by measured use, side by side (<code>gantry usage</code> prints the same; prices from the controller's <code>[billing]</code>).</p>\
         {range}<h2>Allocation and use, {span} (GPUs, a point every {every})</h2><div class=panel>{}{}</div><h2>Per queue, {span}</h2>{}<h2>Queues against quota, now</h2>{}{}{}{}",
        chart(&points, total as f64, 1300, 200, every),
        legend(),
        queue_charts(&points, every),
        queue_table(&queues),
        table("queue", &by_queue),
        table("user", &by_user),
        table("model", &by_model)
    );
    page("Usage", "Usage", Some(&who), &body).into_response()
}

/// One small chart per queue: its allocation and use over the points' span.
fn queue_charts(points: &[crate::series::Point], every: &str) -> String {
    let names: std::collections::BTreeSet<&String> = points.iter().flat_map(|p| p.queues.keys()).collect();
    if names.is_empty() {
        return "<p class=muted>No queue has held a GPU in this range.</p>".into();
    }
    let mut out = String::from("<div class=nodes>");
    for name in names {
        let own: Vec<crate::series::Point> = points
            .iter()
            .map(|p| {
                let (allocated, used) = p.queues.get(name).copied().unwrap_or((0.0, 0.0));
                crate::series::Point {
                    t_s: p.t_s,
                    allocated_gpus: allocated,
                    used_gpus: used,
                    pending_jobs: 0.0,
                    queues: BTreeMap::new(),
                }
            })
            .collect();
        let top = own.iter().map(|p| p.allocated_gpus).fold(1.0, f64::max);
        let _ = write!(
            out,
            "<div class=panel><h3><i class=dot style=\"background:{}\"></i>{}</h3>{}</div>",
            queue_color(name),
            esc(name),
            chart(&own, top, 640, 140, every)
        );
    }
    out + "</div>"
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
