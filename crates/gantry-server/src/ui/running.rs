//! The queue page's running jobs: what each holds (GPUs), for how long, whose it is and how
//! busy its GPUs are, sortable by any of those with a link on the column (no script).

use super::fleet::{clock, job_link};
use super::*;
use gantry_types::GpuGrant;

/// The columns a table sorts by (`?sort=`), and their headings.
const COLUMNS: [(&str, &str); 9] = [
    ("id", "Job"),
    ("name", "Name"),
    ("user", "User"),
    ("queue", "Queue"),
    ("gpus", "GPUs"),
    ("nodes", "Nodes"),
    ("started", "Started"),
    ("runtime", "Runtime"),
    ("util", "GPU utilization"),
];

/// One running job's row and what it sorts by.
struct Row<'a> {
    job: &'a JobView,
    gpus: f64,
    gpus_text: String,
    nodes: String,
    runtime_s: u64,
    util: Option<f64>,
}

/// What a job holds, as a number of GPUs (a share or a MIG slice as its fraction) and in words.
fn held(job: &JobView) -> (f64, String) {
    let (mut gpus, mut words) = (0.0, Vec::new());
    let mut whole = 0;
    for grant in job.row.tasks.iter().flat_map(|t| t.placement.iter().flat_map(|p| p.gpus.iter())) {
        match grant {
            GpuGrant::Whole { .. } => whole += 1,
            GpuGrant::Mig { profile, .. } => {
                let slices: f64 =
                    profile.split('g').next().and_then(|n| n.rsplit('.').next()?.parse().ok()).unwrap_or(1.0);
                gpus += slices / 7.0;
                words.push(profile.clone());
            }
            GpuGrant::Mps { milli, .. } => {
                gpus += f64::from(milli.0) / 1000.0;
                words.push(format!("{:.2} (MPS)", f64::from(milli.0) / 1000.0));
            }
            GpuGrant::TimeSlice { milli, .. } => {
                gpus += f64::from(milli.0) / 1000.0;
                words.push(format!("{:.2} (time-slice)", f64::from(milli.0) / 1000.0));
            }
        }
    }
    if whole > 0 {
        gpus += f64::from(whole);
        words.insert(0, whole.to_string());
    }
    (gpus, if words.is_empty() { "–".into() } else { words.join(", ") })
}

/// Each running job's mean utilization over the GPUs it holds (whole or shared; a MIG slice
/// is not measured), in one pass over the fleet.
fn utilization_by_job(nodes: &[NodeView]) -> BTreeMap<u64, f64> {
    let mut seen: BTreeMap<u64, (f64, u32)> = BTreeMap::new();
    for g in nodes.iter().flat_map(|n| n.gpus.iter()).filter(|g| g.instances.is_empty()) {
        let Some(pct) = g.utilization_pct else { continue };
        for job in &g.jobs {
            let entry = seen.entry(*job).or_default();
            *entry = (entry.0 + f64::from(pct), entry.1 + 1);
        }
    }
    seen.into_iter().map(|(job, (sum, n))| (job, sum / f64::from(n))).collect()
}

fn duration(s: u64) -> String {
    match s {
        s if s >= 86_400 => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}m {:02}s", s / 60, s % 60),
    }
}

/// The running table, sorted by `sort` (a column name; `-name` descending).
pub(super) fn table(
    running: &[&JobView],
    nodes: &[NodeView],
    idle: &std::collections::BTreeSet<u64>,
    sort: &str,
    now: u64,
) -> String {
    let (key, descending) = match sort.strip_prefix('-') {
        Some(key) => (key, true),
        None => (sort, false),
    };
    let key = COLUMNS.iter().map(|(k, _)| *k).find(|k| *k == key).unwrap_or("started");
    let utilization = utilization_by_job(nodes);
    let mut rows: Vec<Row> = running
        .iter()
        .map(|j| {
            let (gpus, gpus_text) = held(j);
            let mut nodes_of: Vec<&str> = j.row.tasks.iter().map(|t| t.node.as_str()).collect();
            nodes_of.dedup();
            let runtime_s = j.row.started_at_s.map_or(0, |t| now.saturating_sub(t));
            Row {
                job: j,
                gpus,
                gpus_text,
                nodes: nodes_of.join(", "),
                runtime_s,
                util: utilization.get(&j.row.id).copied(),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let ordering = match key {
            "name" => a.job.row.name.cmp(&b.job.row.name),
            "user" => a.job.row.job.control.user.cmp(&b.job.row.job.control.user),
            "queue" => a.job.row.queue.cmp(&b.job.row.queue),
            "gpus" => a.gpus.total_cmp(&b.gpus),
            "nodes" => a.nodes.cmp(&b.nodes),
            "started" => a.job.row.started_at_s.cmp(&b.job.row.started_at_s),
            "runtime" => a.runtime_s.cmp(&b.runtime_s),
            "util" => a.util.unwrap_or(-1.0).total_cmp(&b.util.unwrap_or(-1.0)),
            _ => a.job.row.id.cmp(&b.job.row.id),
        };
        let ordering = ordering.then(a.job.row.id.cmp(&b.job.row.id));
        if descending { ordering.reverse() } else { ordering }
    });
    let mut head = String::from("<tr>");
    for (column, heading) in COLUMNS {
        let (class, next, arrow) = match (column == key, descending) {
            (true, false) => (" class=on", format!("-{column}"), " ▲"),
            (true, true) => (" class=on", column.to_string(), " ▼"),
            _ => ("", column.to_string(), ""),
        };
        let _ = write!(head, "<th><a{class} href=\"/ui/queue?sort={next}\">{heading}{arrow}</a></th>");
    }
    head.push_str("</tr>");
    let mut body = String::new();
    for r in &rows {
        let j = r.job;
        let flag = if idle.contains(&j.row.id) {
            " <span class=flag title=\"under the idle threshold\">idle</span>"
        } else {
            ""
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}{flag}</td><td>{}</td><td><i class=dot style=\"background:{}\"></i>{}</td><td class=n>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            job_link(j),
            esc(&j.row.name),
            esc(j.row.job.control.user.as_deref().unwrap_or("–")),
            queue_color(&j.row.queue),
            esc(&j.row.queue),
            esc(&r.gpus_text),
            esc(&r.nodes),
            j.row.started_at_s.map_or(String::new(), clock),
            duration(r.runtime_s),
            r.util.map_or("–".into(), |u| format!("{u:.0}%"))
        );
    }
    if body.is_empty() {
        body = "<tr><td colspan=9 class=muted>No running jobs.</td></tr>".into();
    }
    format!("<table>{head}{body}</table>")
}
