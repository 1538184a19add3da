//! Slurm's accounting history (`sacct --parsable2 --allocations`) as a native trace, so a
//! Slurm site can replay its own last month under gantry's policy.
//!
//! Two kinds of rows are left out, and kept apart: rows that are real accounting but cannot be
//! replayed (a step, a job cancelled while pending: counted by reason, always), and rows that
//! are not valid accounting (a field that does not parse, a job that ends before it starts, an
//! over-long line, a GPU type without a model: an error naming `file:line`, or with `lenient`
//! counted and skipped). Nothing is written unless the whole file was read.

use crate::error::SpecError;
use crate::import_slurm::SlurmSource;
use std::collections::BTreeMap;

/// The `sacct` fields the importer reads, in the order `docs/formats.md` gives the command.
pub const SACCT_FIELDS: &str =
    "JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,ReqTRES,AllocTRES,NNodes,Priority,QOS,ExitCode";

/// Longest sacct line read. A real row is a few hundred bytes (an `AllocTRES` naming many gres
/// types stays under a few KiB); a longer line is not sacct's output, and refusing it keeps one
/// bad line from holding a large buffer per field.
pub const SACCT_LINE_BYTES_MAX: usize = 64 << 10;

/// What the queue of an imported job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFrom {
    Partition,
    Account,
}

/// Why a row is not in the trace.
enum Left {
    /// Real accounting that cannot be replayed: counted under this reason.
    Unreplayable(String),
    /// Not valid accounting: the reason counted under `lenient`, the detail in the error.
    Malformed { reason: &'static str, detail: String },
}

fn malformed(reason: &'static str, detail: impl Into<String>) -> Left {
    Left::Malformed { reason, detail: detail.into() }
}

/// `2026-11-02T10:00:00` (sacct's default format; taken as UTC) → Unix seconds.
fn sacct_time(text: &str) -> Option<i64> {
    crate::import_k8s::rfc3339_s(&format!("{text}Z"))
}

/// A time cell: `Ok(None)` for sacct's "no time" spellings, an error for anything else that
/// is not a time.
fn time_cell(name: &'static str, text: &str) -> Result<Option<i64>, Left> {
    match text {
        "" | "None" | "Unknown" => Ok(None),
        t => sacct_time(t).map(Some).ok_or_else(|| malformed("a time that does not parse", format!("{name} {t:?}"))),
    }
}

/// `1-02:03:04`, `02:03:04`, `03:04`, `5` (minutes) → seconds; `UNLIMITED` and the like: none.
pub(crate) fn sacct_duration(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, text),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let seconds = match parts.as_slice() {
        [m] => m * 60,
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(days * 86_400 + seconds)
}

/// `billing=8,cpu=8,gres/gpu=2,gres/gpu:a100=2,mem=64G,node=1` as key → value.
fn tres(text: &str) -> BTreeMap<String, String> {
    text.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// sacct memory (`64G`, `500M`, `1T`; binary units, as Slurm means them) in MiB.
fn sacct_mem_mib(text: &str) -> Option<u64> {
    let (num, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len()));
    let value: f64 = num.parse().ok().filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let scale = match unit {
        "" | "M" => 1.0,
        "K" => 1.0 / 1024.0,
        "G" => 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((value * scale).ceil() as u64)
}

/// A whole-number cell of `AllocTRES` or `NNodes`; absent is `default`.
fn count(name: &str, value: Option<&String>, default: u32) -> Result<u32, Left> {
    match value {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) => v.parse().map_err(|_| malformed("a count that is not a whole number", format!("{name}={v:?}"))),
    }
}

/// `sacct` accounting read straight into a trace (what `gantry whatif --sacct` replays): the
/// rows left out join the trace's own skipped lines, by reason.
pub fn sacct_trace(text: &str, source: &SlurmSource, queue_from: QueueFrom) -> Result<crate::Trace, SpecError> {
    let imported = import_sacct(text, source, queue_from)?;
    let mut trace = crate::read_trace(std::io::Cursor::new(imported.jsonl), source.catalog, source.lenient)
        .map_err(|e| SpecError::new(format!("{} (imported)", source.name), e.to_string()))?;
    for (why, n) in imported.skipped {
        *trace.skipped.entry(why).or_default() += n;
    }
    Ok(trace)
}

/// `sacct --parsable2 --allocations --format=…` (the fields of [`SACCT_FIELDS`], any order, a
/// header line) → a native trace, arrivals in submit order.
pub fn import_sacct(
    text: &str,
    source: &SlurmSource,
    queue_from: QueueFrom,
) -> Result<crate::ImportedTrace, SpecError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| SpecError::new(&source.name, "empty: no header line"))?;
    let columns = header_columns(header, source)?;
    let width = header.split('|').count();
    let mut rows = Vec::new();
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for (i, line) in lines {
        let at = format!("{}:{}", source.name, i + 1);
        match read_row(line, &columns, width, source, queue_from) {
            Ok(row) => rows.push(row),
            Err(Left::Unreplayable(why)) => *skipped.entry(why).or_default() += 1,
            Err(Left::Malformed { reason, .. }) if source.lenient => {
                *skipped.entry(format!("not valid accounting: {reason}")).or_default() += 1;
            }
            Err(Left::Malformed { detail, .. }) => {
                return Err(SpecError::new(at, detail).hint("fix the row, or --lenient to skip and count rows like it"));
            }
        }
    }
    let (jsonl, jobs) = trace_lines(rows, source, &mut skipped);
    Ok(crate::ImportedTrace { jsonl, jobs, skipped })
}

/// The header's columns by name, refusing a header without the columns gantry needs.
fn header_columns<'h>(header: &'h str, source: &SlurmSource) -> Result<BTreeMap<&'h str, usize>, SpecError> {
    if header.len() > SACCT_LINE_BYTES_MAX {
        return Err(SpecError::new(format!("{}:1", source.name), "the header line is not sacct's"));
    }
    let columns: BTreeMap<&str, usize> = header.split('|').enumerate().map(|(i, c)| (c.trim(), i)).collect();
    for needed in ["JobID", "Submit", "Start", "End", "State", "AllocTRES"] {
        if !columns.contains_key(needed) {
            return Err(SpecError::new(&source.name, format!("no {needed} column (header: {header})"))
                .hint(format!("run sacct --parsable2 --allocations --format={SACCT_FIELDS}")));
        }
    }
    Ok(columns)
}

/// One data line split into its `width` cells and read as [`sacct_row`] does.
fn read_row(
    line: &str,
    columns: &BTreeMap<&str, usize>,
    width: usize,
    source: &SlurmSource,
    queue_from: QueueFrom,
) -> Result<(i64, i64, serde_json::Value), Left> {
    if line.len() > SACCT_LINE_BYTES_MAX {
        return Err(malformed("an over-long line", format!("{} bytes, more than {SACCT_LINE_BYTES_MAX}", line.len())));
    }
    let cells: Vec<&str> = line.split('|').collect();
    if cells.len() == width {
        let get = |name: &str| columns.get(name).map_or_else(String::new, |&c| cells[c].to_string());
        sacct_row(&get, source, queue_from)
    } else {
        Err(malformed(
            "a row with the wrong number of fields",
            format!("{} fields, the header has {width}", cells.len()),
        ))
    }
}

/// The rows as trace lines (JSON lines) in submit order, arrivals from the earliest submit and
/// repeated names suffixed; a row that does not make a valid job is counted in `skipped`.
/// Returns the text and its number of jobs.
fn trace_lines(
    mut rows: Vec<(i64, i64, serde_json::Value)>,
    source: &SlurmSource,
    skipped: &mut BTreeMap<String, u64>,
) -> (String, usize) {
    rows.sort_by_key(|(submit, _, _)| *submit);
    let origin = rows.first().map_or(0, |(submit, _, _)| *submit);
    let mut jsonl = String::new();
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    let mut jobs = 0;
    for (submit, start, mut line) in rows {
        let name = line["job"]["name"].as_str().unwrap_or_default().to_string();
        let n = names.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            line["job"]["name"] = serde_json::json!(format!("{name}-{n}"));
        }
        line["arrival_s"] = serde_json::json!(submit - origin);
        line["started_s"] = serde_json::json!(start - origin);
        let text = line.to_string();
        match crate::parse_trace_line(1, &text, source.catalog) {
            Ok(_) => {
                jsonl.push_str(&text);
                jsonl.push('\n');
                jobs += 1;
            }
            Err(e) => *skipped.entry(format!("does not make a valid job ({})", e.message)).or_default() += 1,
        }
    }
    (jsonl, jobs)
}

/// One allocation row as (submit time, start time, trace line without either), or why not.
fn sacct_row(
    get: &dyn Fn(&str) -> String,
    source: &SlurmSource,
    queue_from: QueueFrom,
) -> Result<(i64, i64, serde_json::Value), Left> {
    let id = get("JobID");
    if id.is_empty() {
        return Err(malformed("a row without a JobID", "no JobID"));
    }
    if id.contains('.') {
        return Err(Left::Unreplayable("a job step (run with --allocations)".into()));
    }
    let state_text = get("State");
    let state = state_text.split_whitespace().next().unwrap_or_default();
    let (submit, start, duration) = row_times(get, &id, state)?;
    let group = task_group(get, &id, source)?;
    let mut line = serde_json::json!({ "job": job(get, &id, queue_from, group) });
    match duration {
        Some(d) => line["duration_s"] = serde_json::json!(d),
        None if state == "RUNNING" => {}
        None => return Err(Left::Unreplayable(format!("no end time ({state})"))),
    }
    Ok((submit, start, line))
}

/// Submitted, started, and how long it ran (`None`: no end yet); a job that never started is
/// left out, one whose times are out of order is malformed.
fn row_times(get: &dyn Fn(&str) -> String, id: &str, state: &str) -> Result<(i64, i64, Option<i64>), Left> {
    let submit = time_cell("Submit", &get("Submit"))?
        .ok_or_else(|| malformed("a row without a submit time", "no Submit time"))?;
    let (start, end) = (time_cell("Start", &get("Start"))?, time_cell("End", &get("End"))?);
    let Some(start) = start else {
        return Err(Left::Unreplayable(if state == "CANCELLED" {
            "cancelled while pending".into()
        } else {
            format!("never started ({state})")
        }));
    };
    if start < submit {
        return Err(malformed(
            "a job that starts before it was submitted",
            format!("job {id}: Start {} is before Submit {}", get("Start"), get("Submit")),
        ));
    }
    if end.is_some_and(|e| e < start) {
        return Err(malformed(
            "a job that ends before it starts",
            format!("job {id}: End {} is before Start {}", get("End"), get("Start")),
        ));
    }
    Ok((submit, start, end.map(|e| e - start)))
}

/// The job's one task group from what it was allocated: a task per node, CPUs and memory
/// shared out, its GPUs (a MIG instance, or whole GPUs of one model).
fn task_group(get: &dyn Fn(&str) -> String, id: &str, source: &SlurmSource) -> Result<serde_json::Value, Left> {
    let alloc = tres(&get("AllocTRES"));
    let nodes = count("NNodes", Some(&get("NNodes")), 1)?;
    if nodes == 0 {
        return Err(malformed("a count that is not a whole number", format!("job {id}: NNodes=0")));
    }
    let gpus = count("gres/gpu", alloc.get("gres/gpu"), 0)?;
    let mut typed: Vec<(&str, u32)> = Vec::new();
    for (k, v) in &alloc {
        if let Some(ty) = k.strip_prefix("gres/gpu:") {
            typed.push((ty, count(k, Some(v), 0)?));
        }
    }
    let cpu = count("cpu", alloc.get("cpu"), 1)?;
    let mem = match alloc.get("mem") {
        None => 0,
        Some(m) => sacct_mem_mib(m)
            .ok_or_else(|| malformed("a memory size that does not parse", format!("job {id}: mem={m:?}")))?,
    };
    let mut group = serde_json::json!({
        "name": "main",
        "replicas": nodes,
        "cpu": (cpu / nodes).max(1),
    });
    if mem > 0 {
        group["memory"] = serde_json::json!(format!("{}MiB", (mem / u64::from(nodes)).max(1)));
    }
    gpu_fields(&mut group, id, source, nodes, gpus, &typed)?;
    Ok(group)
}

/// The group's GPUs: a MIG instance by its Slurm type, or whole GPUs spread evenly over its
/// nodes, of the model its one GPU type names.
fn gpu_fields(
    group: &mut serde_json::Value,
    id: &str,
    source: &SlurmSource,
    nodes: u32,
    gpus: u32,
    typed: &[(&str, u32)],
) -> Result<(), Left> {
    match typed {
        [] if gpus == 0 => {}
        [(ty, n)] if source.catalog.profile_for_slurm_type(ty).is_some() => {
            if *n != 1 || nodes != 1 {
                return Err(Left::Unreplayable("several MIG instances in one job".into()));
            }
            group["gpu"] = serde_json::json!({ "mig": source.catalog.profile_for_slurm_type(ty) });
        }
        typed => {
            if !gpus.is_multiple_of(nodes) {
                return Err(Left::Unreplayable("GPUs not spread evenly over its nodes".into()));
            }
            group["gpu"] = serde_json::json!({ "count": gpus / nodes });
            if let [(ty, _)] = typed {
                let catalog = source.catalog;
                let model =
                    source.map.get(*ty).cloned().or_else(|| catalog.lookup(ty).map(|id| catalog.model(id).id.clone()));
                let Some(m) = model else {
                    return Err(malformed(
                        "a GPU type without a catalog model",
                        format!("job {id}: GPU type {ty:?} is not a catalog model (--map {ty}=MODEL names it)"),
                    ));
                };
                group["model"] = serde_json::json!(m);
            }
        }
    }
    Ok(())
}

/// The job around its group: its name, queue (partition or account), user, time limit and
/// priority.
fn job(get: &dyn Fn(&str) -> String, id: &str, queue_from: QueueFrom, group: serde_json::Value) -> serde_json::Value {
    let queue = match queue_from {
        QueueFrom::Partition => get("Partition"),
        QueueFrom::Account => get("Account"),
    };
    let queue: String = queue.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
    let mut job = serde_json::json!({
        "name": format!("slurm-{}", id.replace(['_', '+'], "-")),
        "queue": if queue.is_empty() { "default".to_string() } else { queue },
        "task": [group],
    });
    if let Some(user) = Some(get("User")).filter(|u| !u.is_empty()) {
        job["user"] = serde_json::json!(user);
    }
    if let Some(limit) = sacct_duration(&get("Timelimit")) {
        job["time_limit"] = serde_json::json!(format!("{limit}s"));
    }
    if let Ok(priority) = get("Priority").parse::<i64>() {
        let (lo, hi) = crate::PRIORITY_RANGE;
        job["priority"] = serde_json::json!(priority.clamp(lo, hi));
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_catalog::Catalog;

    const SACCT: &str = include_str!("../fixtures/slurm/sacct.txt");
    const RECORDED: &str = include_str!("../fixtures/slurm/recorded/sacct.txt");
    const RECORDED_STEPS: &str = include_str!("../fixtures/slurm/recorded/sacct-steps.txt");

    fn source(map: &BTreeMap<String, String>, lenient: bool) -> SlurmSource<'_> {
        SlurmSource { name: "sacct.txt".into(), catalog: Catalog::embedded(), map, lenient }
    }

    fn a100() -> BTreeMap<String, String> {
        BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())])
    }

    #[test]
    fn sacct_history_becomes_a_trace_and_odd_rows_are_counted() {
        let catalog = Catalog::embedded();
        let map = a100();
        let imported = import_sacct(SACCT, &source(&map, false), QueueFrom::Partition).expect("imports");
        let trace =
            crate::read_trace(std::io::Cursor::new(imported.jsonl.clone()), catalog, false).expect("reads back");
        let names: Vec<&str> = trace.jobs.iter().map(|j| j.job.name.as_str()).collect();
        assert_eq!(
            names,
            ["slurm-101", "slurm-102", "slurm-103-0", "slurm-103-1", "slurm-104", "slurm-106"],
            "{}",
            imported.jsonl
        );
        let train = &trace.jobs[0];
        assert_eq!((train.arrival_s, train.duration_s), (0, Some(7200)));
        assert_eq!(train.job.groups[0].replicas, 2, "two nodes: a gang of two tasks");
        assert_eq!(train.job.control.time_limit_s, Some(86_400));
        assert_eq!(train.job.control.user.as_deref(), Some("ada"));
        assert!(
            matches!(&trace.jobs[1].job.groups[0].resources.gpu, Some(gantry_types::GpuRequest::Mig { profile }) if profile == "1g.10gb")
        );
        assert_eq!(trace.jobs[5].duration_s, None, "still running");
        for (why, n) in
            [("cancelled while pending", 1), ("a job step (run with --allocations)", 1), ("never started (PENDING)", 1)]
        {
            assert_eq!(imported.skipped.get(why), Some(&n), "{why}: {:?}", imported.skipped);
        }
        // A MIG type as slurmd's AutoDetect names it is the catalog's profile.
        let autodetected = format!(
            "{HEADER}\n1|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:05|COMPLETED|gres/gpu=1,gres/gpu:nvidia_a100_7g.79gb=1|1\n"
        );
        let imported = import_sacct(&autodetected, &source(&map, false), QueueFrom::Partition).expect("imports");
        assert!(imported.jsonl.contains("\"mig\":\"7g.80gb\""), "{}", imported.jsonl);
        let by_account = import_sacct(SACCT, &source(&map, false), QueueFrom::Account).expect("imports");
        assert!(by_account.jsonl.contains("\"queue\":\"vision\""), "{}", by_account.jsonl);
        let err =
            import_sacct("JobID|State\n1|COMPLETED\n", &source(&map, false), QueueFrom::Partition).expect_err("fields");
        assert!(err.to_string().contains("no Submit column") && err.to_string().contains("--format="), "{err}");
        assert_eq!(sacct_duration("1-02:00:00"), Some(93_600));
        assert_eq!(sacct_duration("UNLIMITED"), None);
    }

    #[test]
    fn the_recorded_history_imports_in_submit_order() {
        let map = BTreeMap::from([
            ("a100".to_string(), "A100-SXM4-80GB".to_string()),
            ("h100".to_string(), "H100-SXM5-80GB".to_string()),
        ]);
        let imported = import_sacct(RECORDED, &source(&map, false), QueueFrom::Partition).expect("imports");
        let rows = RECORDED.lines().count() - 1;
        let left: u64 = imported.skipped.values().sum();
        assert_eq!(imported.jobs + left as usize, rows, "every row is a job or counted: {:?}", imported.skipped);
        assert_eq!(imported.skipped.get("cancelled while pending"), Some(&1), "{:?}", imported.skipped);
        let trace = crate::read_trace(std::io::Cursor::new(imported.jsonl.clone()), Catalog::embedded(), false)
            .expect("reads back");
        assert!(trace.jobs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s), "arrivals in order");
        let job = |name: &str| {
            trace.jobs.iter().find(|j| j.job.name == name).unwrap_or_else(|| panic!("{name}: {}", imported.jsonl))
        };
        assert_eq!(job("slurm-1").job.groups[0].replicas, 2, "the two-node gang");
        assert_eq!(job("slurm-3-5").job.control.user.as_deref(), Some("ada"), "an array task");
        assert_eq!(job("slurm-14-1").job.groups[0].resources.gpu.as_ref().map(|_| ()), Some(()), "a het component");
        assert_eq!(job("slurm-18").job.control.time_limit_s, Some(60), "the overrun job's limit");
        // With steps, each step row is counted, none imported twice.
        let steps = import_sacct(RECORDED_STEPS, &source(&map, false), QueueFrom::Partition).expect("imports");
        assert_eq!(steps.jobs, imported.jobs);
        assert!(steps.skipped.get("a job step (run with --allocations)").is_some_and(|n| *n > 0));
    }

    const HEADER: &str = "JobID|User|Partition|Submit|Start|End|State|AllocTRES|NNodes";
    const GOOD: &str = "1|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:05|COMPLETED|cpu=4,gres/gpu=1,gres/gpu:a100=1,mem=16G|1";

    #[test]
    fn malformed_rows_are_refused_with_file_and_line_or_counted_when_lenient() {
        let map = a100();
        let long = format!(
            "3|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:05|COMPLETED|cpu={}|1",
            "9".repeat(10 << 20)
        );
        for (bad, expect, reason) in [
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|COMPLETED|cpu=1|1",
                "8 fields, the header has 9",
                "a row with the wrong number of fields",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T09:00:00|COMPLETED|cpu=1|1",
                "job 2: End 2026-11-02T09:00:00 is before Start",
                "a job that ends before it starts",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-01T10:00:05|2026-11-02T11:00:00|COMPLETED|cpu=1|1",
                "job 2: Start 2026-11-01T10:00:05 is before Submit",
                "a job that starts before it was submitted",
            ),
            (
                "2|ada|gpu|yesterday|2026-11-02T10:00:05|2026-11-02T11:00:00|COMPLETED|cpu=1|1",
                "Submit \"yesterday\"",
                "a time that does not parse",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:00|COMPLETED|cpu=-4|1",
                "cpu=\"-4\"",
                "a count that is not a whole number",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:00|COMPLETED|cpu=1|",
                "",
                "none: an empty NNodes is one node",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:00|COMPLETED|cpu=1,mem=12Q|1",
                "mem=\"12Q\"",
                "a memory size that does not parse",
            ),
            (
                "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:00|COMPLETED|gres/gpu=1,gres/gpu:v9000=1|1",
                "GPU type \"v9000\" is not a catalog model",
                "a GPU type without a catalog model",
            ),
            (long.as_str(), "bytes, more than 65536", "an over-long line"),
        ] {
            let text = format!("{HEADER}\n{GOOD}\n{bad}\n");
            let strict = import_sacct(&text, &source(&map, false), QueueFrom::Partition);
            if reason.starts_with("none") {
                assert_eq!(strict.expect("valid").jobs, 2);
                continue;
            }
            let err = strict.expect_err(reason).to_string();
            assert!(err.starts_with("sacct.txt:3: ") && err.contains(expect) && err.contains("--lenient"), "{err}");
            let lenient = import_sacct(&text, &source(&map, true), QueueFrom::Partition).expect("lenient");
            assert_eq!(lenient.jobs, 1);
            assert_eq!(
                lenient.skipped.get(&format!("not valid accounting: {reason}")),
                Some(&1),
                "{:?}",
                lenient.skipped
            );
        }
    }
}
