//! Slurm in: `slurm.conf` (and `gres.conf`) as a fleet file and a queue file, and `sacct`'s
//! history as a native trace, so a Slurm site can replay its own cluster and last month.
//!
//! `slurm.conf`: `NodeName` lines (hostlists like `gpu[01-16]`, `NodeName=DEFAULT`), `CPUs`,
//! `RealMemory` (MiB), `Gres=gpu[:type]:count` (a type that is a MIG profile, `1g.10gb`, is
//! a MIG instance, laid onto the node's MIG GPUs by the catalog's rules), `Features` and
//! `Weight` (kept as labels); the GPU model of a gres type from the catalog, or `--map
//! TYPE=MODEL` (a type the catalog does not know, or an ambiguous one like `a100`, is an error
//! naming the flag). `PartitionName` lines become queues.

use crate::error::SpecError;
use crate::import_k8s::quote;
use gantry_catalog::Catalog;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A fleet and a queue file made from `slurm.conf`, and what did not map.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedSlurm {
    pub fleet: String,
    pub queues: String,
    pub nodes: usize,
    pub notes: Vec<String>,
}

/// Most nodes one hostlist may expand to.
const HOSTLIST_MAX: usize = 100_000;

/// `gpu[01-04,08]-ib` → gpu01-ib … gpu04-ib, gpu08-ib (several bracket groups multiply; the
/// zero padding of a range's first number is kept). Commas outside brackets separate names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for part in split_outside(list, '[', ']') {
        let mut expanded = vec![String::new()];
        let mut rest = part.as_str();
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    expanded.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..].find(']').ok_or_else(|| format!("{part:?}: a '[' without ']'"))? + open;
                    let prefix = &rest[..open];
                    let values = range_values(&rest[open + 1..close]).map_err(|e| format!("{part:?}: {e}"))?;
                    let mut next = Vec::with_capacity(expanded.len() * values.len());
                    for n in &expanded {
                        for v in &values {
                            next.push(format!("{n}{prefix}{v}"));
                        }
                    }
                    if next.len() > HOSTLIST_MAX {
                        return Err(format!("{part:?} expands to more than {HOSTLIST_MAX} names"));
                    }
                    expanded = next;
                    rest = &rest[close + 1..];
                }
            }
        }
        names.extend(expanded);
    }
    Ok(names)
}

/// `list` split at commas that are not inside `open`…`close` (`gpu[01-02],login`;
/// `gpu:a100:8(S:0-1),shard:16`).
fn split_outside(list: &str, open: char, close: char) -> Vec<String> {
    let (mut parts, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in list.chars() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
        } else if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
    }
    parts.push(current);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// `01-04,08` → ["01", "02", "03", "04", "08"].
fn range_values(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in spec.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let width = a.len();
                let (a, b): (u64, u64) = (
                    a.parse().map_err(|_| format!("{a:?} is not a number"))?,
                    b.parse().map_err(|_| format!("{b:?} is not a number"))?,
                );
                if b < a || b - a >= HOSTLIST_MAX as u64 {
                    return Err(format!("range {item:?} is backwards or too long"));
                }
                out.extend((a..=b).map(|v| format!("{v:0width$}")));
            }
            None => out.push(item.to_string()),
        }
    }
    Ok(out)
}

/// The logical lines of a Slurm config: comments dropped, `\` continuations joined, each as
/// (line number, `key=value` pairs as written; keys are matched case-insensitively).
fn config_lines(text: &str) -> Vec<(usize, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim_end();
        if pending.is_empty() {
            start = i + 1;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let pairs: Vec<(String, String)> = pending
            .split_whitespace()
            .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        if !pairs.is_empty() {
            out.push((start, pairs));
        }
        pending.clear();
    }
    out
}

/// One `Gres=` entry: (type, count) for `gpu`; other names are reported.
fn gres_gpus(gres: &str) -> (Vec<(Option<String>, u32)>, Vec<String>) {
    let (mut gpus, mut other) = (Vec::new(), Vec::new());
    for entry in split_outside(gres, '(', ')') {
        let entry = entry.split('(').next().unwrap_or_default();
        let parts: Vec<&str> = entry.split(':').collect();
        match parts.as_slice() {
            ["gpu", n] => gpus.push((None, n.parse().unwrap_or(0))),
            ["gpu", t, n] => gpus.push((Some(t.to_string()), n.parse().unwrap_or(0))),
            _ => other.push(entry.to_string()),
        }
    }
    (gpus, other)
}

/// A gres type as a catalog model: `--map` first, then the catalog's names, else an error
/// naming the flag (an ambiguous family name like `a100` included: which memory size?).
fn model_for(ty: &str, catalog: &Catalog, map: &BTreeMap<String, String>, at: &str) -> Result<String, SpecError> {
    if let Some(model) = map.get(ty) {
        return Ok(model.clone());
    }
    if let Some(id) = catalog.lookup(ty) {
        return Ok(catalog.model(id).id.clone());
    }
    let lower = ty.to_ascii_lowercase();
    let candidates: Vec<&str> = catalog
        .models()
        .iter()
        .filter(|m| m.id.to_ascii_lowercase().starts_with(&lower))
        .map(|m| m.id.as_str())
        .collect();
    let hint = match candidates.as_slice() {
        [] => format!("map it to a catalog model: --map {ty}=MODEL (`gantry catalog` lists them)"),
        some => format!("which one? --map {ty}={} (or {})", some[0], some[1..].join(", ")),
    };
    Err(SpecError::new(at, format!("GPU type {ty:?} is not a catalog model")).hint(hint))
}

/// `slurm.conf` → a fleet file and a queue file. `map`: gres type → catalog model.
pub fn import_slurm_conf(
    text: &str,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
) -> Result<ImportedSlurm, SpecError> {
    let mut fleet = String::from("# Written by `gantry import slurm` from slurm.conf.\n");
    let mut queues = String::from("# Written by `gantry import slurm` from slurm.conf's partitions.\n");
    let mut notes = Vec::new();
    let mut defaults: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes = 0;
    let mut partitions = 0;
    for (line, pairs) in config_lines(text) {
        let (key, value) = &pairs[0];
        let at = format!("slurm.conf:{line}");
        let lower = |pairs: &[(String, String)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect()
        };
        match key.to_ascii_lowercase().as_str() {
            "nodename" if value.eq_ignore_ascii_case("DEFAULT") => {
                defaults.extend(lower(&pairs[1..]));
            }
            "nodename" => {
                let mut fields = defaults.clone();
                fields.extend(lower(&pairs[1..]));
                let names = expand_hostlist(value).map_err(|e| SpecError::new(&at, e))?;
                for name in names {
                    node_toml(&name, &fields, &at, catalog, map, &mut fleet, &mut notes)?;
                    nodes += 1;
                }
            }
            "partitionname" if !value.eq_ignore_ascii_case("DEFAULT") => {
                let _ = write!(queues, "\n[[queue]]\nname = {}\n", quote(value));
                for (k, v) in &pairs[1..] {
                    if !matches!(k.to_ascii_lowercase().as_str(), "nodes" | "default" | "state") {
                        notes.push(format!("{at}: partition {value}: {k}={v} (no gantry queue equivalent)"));
                    }
                }
                partitions += 1;
            }
            _ => {}
        }
    }
    if nodes == 0 {
        return Err(SpecError::new("slurm.conf", "no NodeName lines").hint("give the cluster's slurm.conf"));
    }
    crate::parse_fleet(&fleet, catalog)
        .map_err(|e| SpecError::new("", format!("the fleet made from slurm.conf does not read back: {e}")))?;
    if partitions > 0 {
        crate::parse_queues(&queues, catalog)
            .map_err(|e| SpecError::new("", format!("the queues made from slurm.conf do not read back: {e}")))?;
    }
    Ok(ImportedSlurm { fleet, queues: if partitions > 0 { queues } else { String::new() }, nodes, notes })
}

#[allow(clippy::too_many_arguments)]
fn node_toml(
    name: &str,
    fields: &BTreeMap<String, String>,
    at: &str,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
    out: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let cpus: u64 = fields.get("cpus").or_else(|| fields.get("procs")).and_then(|c| c.parse().ok()).unwrap_or(1);
    let memory_mib: u64 = fields.get("realmemory").and_then(|m| m.parse().ok()).unwrap_or(1);
    let _ = write!(out, "\n[[node]]\nname = {}\ncpu = {cpus}\nmemory = \"{memory_mib}MiB\"\n", quote(name));
    let mut labels: Vec<String> = Vec::new();
    for feature in fields.get("features").or_else(|| fields.get("feature")).into_iter().flat_map(|f| f.split(',')) {
        labels.push(format!("{} = \"true\"", quote(&format!("slurm.feature/{feature}"))));
    }
    if let Some(w) = fields.get("weight") {
        labels.push(format!("\"slurm.weight\" = {}", quote(w)));
    }
    if !labels.is_empty() {
        let _ = writeln!(out, "labels = {{ {} }}", labels.join(", "));
    }
    let Some(gres) = fields.get("gres") else { return Ok(()) };
    let (gpus, other) = gres_gpus(gres);
    for o in other {
        notes.push(format!(
            "{at}: node {name}: gres {o} (not a GPU count gantry maps; shards and MPS follow the GPUs' modes)"
        ));
    }
    let (mut whole, mut mig): (Vec<(String, u32)>, BTreeMap<String, u32>) = (Vec::new(), BTreeMap::new());
    for (ty, n) in gpus {
        match ty {
            Some(t) if catalog.any_model_has_profile(&t) => {
                *mig.entry(t).or_default() += n;
            }
            Some(t) => whole.push((model_for(&t, catalog, map, at)?, n)),
            None => match map.get("gpu").or_else(|| map.get("")) {
                Some(model) => whole.push((model.clone(), n)),
                None => {
                    return Err(SpecError::new(at, format!("node {name}: Gres=gpu:{n} has no type, so no GPU model"))
                        .hint("say which: --map gpu=MODEL"));
                }
            },
        }
    }
    let models: std::collections::BTreeSet<&String> = whole.iter().map(|(m, _)| m).collect();
    if models.len() > 1 {
        return Err(SpecError::new(
            at,
            format!(
                "node {name}: GPUs of several models ({}); gantry's nodes have one",
                models.into_iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let model = match (models.into_iter().next(), mig.is_empty()) {
        (Some(m), _) => m.clone(),
        (None, true) => return Ok(()),
        (None, false) => match fields
            .get("features")
            .and_then(|f| f.split(',').find_map(|f| catalog.lookup(f).map(|id| catalog.model(id).id.clone())))
            .or_else(|| map.get(name).cloned())
        {
            Some(m) => m,
            None => {
                return Err(SpecError::new(
                    at,
                    format!("node {name}: only MIG instances in its Gres, so no GPU model"),
                )
                .hint(format!("give one: a Features= entry naming the model, or --map {name}=MODEL")));
            }
        },
    };
    let whole_count: u32 = whole.iter().map(|(_, n)| n).sum();
    let (layouts, left) = distribute_minimal(catalog, &model, &mig);
    if !left.is_empty() {
        notes.push(format!("{at}: node {name}: MIG instances that fit no GPU of {model}: {left:?}"));
    }
    let total = whole_count + layouts.len() as u32;
    let _ = write!(out, "[node.gpus]\nmodel = {}\ncount = {total}\n", quote(&model));
    for (offset, layout) in layouts.iter().enumerate() {
        let counts: Vec<String> = layout.iter().map(|(p, n)| format!("{} = {n}", quote(p))).collect();
        let _ =
            write!(out, "[[node.gpu]]\nindex = {}\nmig = {{ {} }}\n", whole_count + offset as u32, counts.join(", "));
    }
    Ok(())
}

/// MIG instances onto as few GPUs as the placement rules allow (first fit, largest first).
fn distribute_minimal(
    catalog: &Catalog,
    model: &str,
    wanted: &BTreeMap<String, u32>,
) -> (Vec<BTreeMap<String, u32>>, BTreeMap<String, u32>) {
    let total: u32 = wanted.values().sum();
    if total == 0 {
        return (Vec::new(), BTreeMap::new());
    }
    // At most one GPU per instance: distribute onto that many, then drop the empty ones.
    let (layouts, left) = crate::import_k8s::distribute(catalog, model, wanted, total as usize);
    (layouts.into_iter().filter(|l| !l.is_empty()).collect(), left)
}

/// The `sacct` fields the importer reads, in the order `docs/formats.md` gives the command.
pub const SACCT_FIELDS: &str =
    "JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,ReqTRES,AllocTRES,NNodes,Priority,QOS,ExitCode";

/// `2026-11-02T10:00:00` (sacct's default format; taken as UTC) → Unix seconds.
fn sacct_time(text: &str) -> Option<i64> {
    crate::import_k8s::rfc3339_s(&format!("{text}Z"))
}

/// `1-02:03:04`, `02:03:04`, `03:04`, `5` (minutes) → seconds; `UNLIMITED` and the like: none.
fn sacct_duration(text: &str) -> Option<u64> {
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
    let value: f64 = num.parse().ok()?;
    let scale = match unit {
        "" | "M" => 1.0,
        "K" => 1.0 / 1024.0,
        "G" => 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((value * scale).ceil() as u64)
}

/// What the queue of an imported job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFrom {
    Partition,
    Account,
}

/// `sacct --parsable2 --allocations --format=…` (the fields of [`SACCT_FIELDS`], any order, a
/// header line) → a native trace; rows that cannot be replayed are counted by reason.
pub fn import_sacct(
    text: &str,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
    queue_from: QueueFrom,
) -> Result<crate::ImportedTrace, SpecError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| SpecError::new("sacct", "empty: no header line"))?;
    let columns: BTreeMap<&str, usize> = header.split('|').enumerate().map(|(i, c)| (c.trim(), i)).collect();
    for needed in ["JobID", "Submit", "Start", "End", "State", "AllocTRES"] {
        if !columns.contains_key(needed) {
            return Err(SpecError::new("sacct", format!("no {needed} column (header: {header})"))
                .hint(format!("run sacct --parsable2 --allocations --format={SACCT_FIELDS}")));
        }
    }
    let mut rows = Vec::new();
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for (_, line) in lines {
        let cells: Vec<&str> = line.split('|').collect();
        let get =
            |name: &str| columns.get(name).and_then(|&c| cells.get(c)).map_or_else(String::new, |c| c.to_string());
        match sacct_row(&get, catalog, map, queue_from) {
            Ok(row) => rows.push(row),
            Err(why) => *skipped.entry(why).or_default() += 1,
        }
    }
    let origin = rows.iter().map(|(submit, _)| *submit).min().unwrap_or(0);
    let mut jsonl = String::new();
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    let mut jobs = 0;
    for (submit, mut line) in rows {
        let name = line["job"]["name"].as_str().unwrap_or_default().to_string();
        let n = names.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            line["job"]["name"] = serde_json::json!(format!("{name}-{n}"));
        }
        line["arrival_s"] = serde_json::json!(submit - origin);
        let text = line.to_string();
        match crate::parse_trace_line(1, &text, catalog) {
            Ok(_) => {
                jsonl.push_str(&text);
                jsonl.push('\n');
                jobs += 1;
            }
            Err(e) => *skipped.entry(format!("does not make a valid job ({})", e.message)).or_default() += 1,
        }
    }
    Ok(crate::ImportedTrace { jsonl, jobs, skipped })
}

/// One allocation row as (submit time, trace line without its arrival), or why not.
fn sacct_row(
    get: &dyn Fn(&str) -> String,
    catalog: &Catalog,
    map: &BTreeMap<String, String>,
    queue_from: QueueFrom,
) -> Result<(i64, serde_json::Value), String> {
    let id = get("JobID");
    if id.contains('.') {
        return Err("a job step (run with --allocations)".into());
    }
    let state_text = get("State");
    let state = state_text.split_whitespace().next().unwrap_or_default();
    let submit = sacct_time(&get("Submit")).ok_or("no submit time")?;
    let (start, end) = (sacct_time(&get("Start")), sacct_time(&get("End")));
    let Some(start) = start else {
        return Err(if state == "CANCELLED" {
            "cancelled while pending".into()
        } else {
            format!("never started ({state})")
        });
    };
    let duration = end.filter(|e| *e >= start).map(|e| e - start);
    let alloc = tres(&get("AllocTRES"));
    let nodes: u32 = get("NNodes").parse().unwrap_or(1).max(1);
    let gpus: u32 = alloc.get("gres/gpu").and_then(|g| g.parse().ok()).unwrap_or(0);
    let typed: Vec<(&str, u32)> =
        alloc.iter().filter_map(|(k, v)| Some((k.strip_prefix("gres/gpu:")?, v.parse().ok()?))).collect();
    let cpu: u32 = alloc.get("cpu").and_then(|c| c.parse().ok()).unwrap_or(1);
    let mem = alloc.get("mem").and_then(|m| sacct_mem_mib(m)).unwrap_or(0);
    let mut group = serde_json::json!({
        "name": "main",
        "replicas": nodes,
        "cpu": (cpu / nodes).max(1),
    });
    if mem > 0 {
        group["memory"] = serde_json::json!(format!("{}MiB", (mem / u64::from(nodes)).max(1)));
    }
    match typed.as_slice() {
        [] if gpus == 0 => {}
        [(ty, n)] if catalog.any_model_has_profile(ty) => {
            if *n != 1 || nodes != 1 {
                return Err("several MIG instances in one job".into());
            }
            group["gpu"] = serde_json::json!({ "mig": ty });
        }
        typed => {
            if !gpus.is_multiple_of(nodes) {
                return Err("GPUs not spread evenly over its nodes".into());
            }
            group["gpu"] = serde_json::json!({ "count": gpus / nodes });
            if let [(ty, _)] = typed {
                let model = map.get(*ty).cloned().or_else(|| catalog.lookup(ty).map(|id| catalog.model(id).id.clone()));
                match model {
                    Some(m) => group["model"] = serde_json::json!(m),
                    None => return Err(format!("GPU type {ty} is not a catalog model (--map {ty}=MODEL)")),
                }
            }
        }
    }
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
    let mut line = serde_json::json!({ "job": job });
    match duration {
        Some(d) => line["duration_s"] = serde_json::json!(d),
        None if state == "RUNNING" => {}
        None => return Err(format!("no end time ({state})")),
    }
    Ok((submit, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        assert_eq!(expand_hostlist("gpu[01-03]").expect("ok"), ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(expand_hostlist("n[1-2,5]-ib,login").expect("ok"), ["n1-ib", "n2-ib", "n5-ib", "login"]);
        assert_eq!(expand_hostlist("r[1-2]n[1-2]").expect("ok"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert!(expand_hostlist("gpu[01-03").expect_err("open").contains("without ']'"));
        assert!(expand_hostlist("gpu[9-1]").expect_err("backwards").contains("backwards"));
        assert!(expand_hostlist("n[1-99999999]").is_err());
    }

    const CONF: &str = include_str!("../fixtures/slurm/slurm.conf");
    const SACCT: &str = include_str!("../fixtures/slurm/sacct.txt");

    #[test]
    fn sacct_history_becomes_a_trace_and_odd_rows_are_counted() {
        let catalog = Catalog::embedded();
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let imported = import_sacct(SACCT, catalog, &map, QueueFrom::Partition).expect("imports");
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
        let by_account = import_sacct(SACCT, catalog, &map, QueueFrom::Account).expect("imports");
        assert!(by_account.jsonl.contains("\"queue\":\"vision\""), "{}", by_account.jsonl);
        let err = import_sacct("JobID|State\n1|COMPLETED\n", catalog, &map, QueueFrom::Partition).expect_err("fields");
        assert!(err.to_string().contains("no Submit column") && err.to_string().contains("--format="), "{err}");
        assert_eq!(sacct_duration("1-02:00:00"), Some(93_600));
        assert_eq!(sacct_duration("UNLIMITED"), None);
    }

    #[test]
    fn slurm_conf_becomes_a_fleet_and_queues() {
        let catalog = Catalog::embedded();
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let imported = import_slurm_conf(CONF, catalog, &map).expect("imports");
        let fleet = crate::parse_fleet(&imported.fleet, catalog).expect("reads back");
        assert_eq!(imported.nodes, 6);
        let node = |n: &str| fleet.nodes.iter().find(|x| x.name == n).expect(n);
        assert_eq!((node("gpu01").gpus.len(), node("gpu01").gpus[0].model.as_str()), (8, "A100-SXM4-80GB"));
        assert_eq!(node("gpu01").cpu.0, 128_000);
        assert_eq!(node("gpu01").memory.0, 1_024_000 << 20);
        assert!(node("gpu01").labels.contains_key("slurm.feature/ib"));
        assert_eq!(node("h100-1").gpus[0].model, "H100-SXM5-80GB");
        // 4 whole + the 7 × 1g.10gb and 2 × 3g.40gb on as few GPUs as hold them.
        let mig = node("mig01");
        assert_eq!(mig.gpus.len(), 6, "{}", imported.fleet);
        assert!(matches!(mig.gpus[4].mode, gantry_types::GpuMode::Mig { .. }));
        assert!(node("cpu01").gpus.is_empty());
        let tree = crate::parse_queues(&imported.queues, catalog).expect("queues read back");
        assert_eq!(tree.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["gpu", "debug"]);
        assert!(imported.notes.iter().any(|n| n.contains("MaxTime")), "{:?}", imported.notes);
        // Without the map, the ambiguous type is named with the flag that settles it.
        let err = import_slurm_conf(CONF, catalog, &BTreeMap::new()).expect_err("ambiguous").to_string();
        assert!(err.contains("GPU type \"a100\" is not a catalog model") && err.contains("--map a100=A100-"), "{err}");
    }
}
