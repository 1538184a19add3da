//! The queue file's Slurm tables: `[[partition]]` (a node set with its own time and size
//! limits, apart from the queue a job is charged to) and `[[qos]]` (a name for a priority).
//! Checked whole: duplicate names, two defaults, a queue the file does not define, a default
//! time above the maximum — each an error naming the table and the field.

use crate::error::SpecError;
use crate::quantity::{Duration, seconds};
use crate::workload::{PRIORITY_RANGE, check_name};
use gantry_types::{Partition, Qos, QueueSpec};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Most partitions one file may define (Slurm sites have tens).
pub const PARTITIONS_MAX: usize = 1_000;
/// Most QOS names one file may define.
pub const QOS_MAX: usize = 1_000;
/// Most labels a partition's node selector may name.
const PARTITION_LABELS_MAX: usize = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartitionEntry {
    name: String,
    #[serde(default)]
    default: bool,
    node_selector: Option<BTreeMap<String, String>>,
    queue: Option<String>,
    max_time: Option<Duration>,
    default_time: Option<Duration>,
    max_nodes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QosEntry {
    name: String,
    priority: i64,
}

/// `[[partition]]` tables checked against the file's queues.
pub(crate) fn partitions(entries: &[PartitionEntry], queues: &[QueueSpec]) -> Result<Vec<Partition>, SpecError> {
    if entries.len() > PARTITIONS_MAX {
        return Err(SpecError::new(
            "partition",
            format!("{} partitions, the limit is {PARTITIONS_MAX}", entries.len()),
        ));
    }
    let mut names = BTreeSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let at = format!("partition {:?}", entry.name);
        check_name(&format!("{at} / name"), &entry.name)?;
        if !names.insert(entry.name.as_str()) {
            return Err(SpecError::new(at, "defined twice"));
        }
        out.push(partition(&at, entry, queues)?);
    }
    let defaults: Vec<&str> = out.iter().filter(|p| p.default).map(|p| p.name.as_str()).collect();
    if defaults.len() > 1 {
        return Err(SpecError::new("partition", format!("{} are all marked default", defaults.join(", ")))
            .hint("at most one partition has default = true: jobs that name none go there"));
    }
    Ok(out)
}

fn partition(at: &str, entry: &PartitionEntry, queues: &[QueueSpec]) -> Result<Partition, SpecError> {
    if let Some(queue) = &entry.queue
        && !queues.iter().any(|q| &q.name == queue)
    {
        return Err(SpecError::new(format!("{at} / queue"), format!("no queue {queue:?} in this file")).hint(
            "a partition's queue is the account charged for its jobs that name none: one of the [[queue]] names",
        ));
    }
    let time =
        |field: &str, d: &Option<Duration>| d.as_ref().map(|d| seconds(&format!("{at} / {field}"), d, 1)).transpose();
    let (max_time_s, default_time_s) = (time("max_time", &entry.max_time)?, time("default_time", &entry.default_time)?);
    if let (Some(max), Some(default)) = (max_time_s, default_time_s)
        && default > max
    {
        return Err(SpecError::new(
            format!("{at} / default_time"),
            format!("{default} s is above the partition's max_time ({max} s)"),
        ));
    }
    let max_nodes = entry
        .max_nodes
        .map(|n| crate::quantity::count(&format!("{at} / max_nodes"), n, 1, 1_000_000, "nodes one job may use"))
        .transpose()?;
    let node_selector = entry.node_selector.clone().unwrap_or_default();
    if node_selector.len() > PARTITION_LABELS_MAX {
        return Err(SpecError::new(
            format!("{at} / node_selector"),
            format!("{} labels, at most {PARTITION_LABELS_MAX}", node_selector.len()),
        ));
    }
    if let Some((k, _)) =
        node_selector.iter().find(|(k, v)| k.is_empty() || v.is_empty() || k.len() > 253 || v.len() > 253)
    {
        return Err(SpecError::new(
            format!("{at} / node_selector"),
            format!("label {k:?}: a key and a value of 1 to 253 bytes"),
        )
        .hint("node_selector = { \"slurm.partition/gpu\" = \"true\" }"));
    }
    Ok(Partition {
        name: entry.name.clone(),
        default: entry.default,
        node_selector,
        queue: entry.queue.clone(),
        max_time_s,
        default_time_s,
        max_nodes,
    })
}

/// `[[qos]]` tables: unique names, priorities in the jobs' range.
pub(crate) fn qos(entries: &[QosEntry]) -> Result<Vec<Qos>, SpecError> {
    if entries.len() > QOS_MAX {
        return Err(SpecError::new("qos", format!("{} QOS names, the limit is {QOS_MAX}", entries.len())));
    }
    let mut out: Vec<Qos> = Vec::with_capacity(entries.len());
    for entry in entries {
        let at = format!("qos {:?}", entry.name);
        check_name(&format!("{at} / name"), &entry.name)?;
        if out.iter().any(|q| q.name == entry.name) {
            return Err(SpecError::new(at, "defined twice"));
        }
        if !(PRIORITY_RANGE.0..=PRIORITY_RANGE.1).contains(&entry.priority) {
            return Err(SpecError::new(
                format!("{at} / priority"),
                format!("{} is out of range {}..={}", entry.priority, PRIORITY_RANGE.0, PRIORITY_RANGE.1),
            ));
        }
        out.push(Qos { name: entry.name.clone(), priority: entry.priority as i32 });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::{parse_queues, parse_workload};
    use gantry_catalog::Catalog;
    use gantry_types::{Job, PlaceRefusal, QueueTree};

    const QUEUES: &str = r#"
[[queue]]
name = "default"
[[queue]]
name = "physics"
[[queue]]
name = "gpu-pool"

[[partition]]
name = "gpu"
default = true
node_selector = { "slurm.partition/gpu" = "true" }
queue = "gpu-pool"
max_time = "2d"
default_time = "1h"
max_nodes = 2

[[partition]]
name = "debug"
max_time = "30m"

[[qos]]
name = "interactive"
priority = 500
[[qos]]
name = "scavenger"
priority = -1000
"#;

    fn tree() -> QueueTree {
        parse_queues(QUEUES, Catalog::embedded()).expect("a valid queue file")
    }

    /// A job with `extra` job fields, and `task` fields for its one task group.
    fn job(extra: &str) -> Job {
        let (job, task) = extra.split_once("[task]").unwrap_or((extra, ""));
        let text = format!("[[job]]\nname = \"j\"\n{job}\n[[job.task]]\nname = \"t\"\ncpu = 1\n{task}\n");
        parse_workload(&text, Catalog::embedded()).expect("a valid job").remove(0)
    }

    #[test]
    fn a_partition_is_a_node_set_with_limits_and_the_account_stays_the_queue() {
        let tree = tree();
        // Named partition and account: the account is charged, the partition's nodes used.
        let mut j = job("queue = \"physics\"\npartition = \"gpu\"");
        tree.place(&mut j).expect("placed");
        assert_eq!(j.queue, "physics");
        assert_eq!(j.groups[0].node_selector.get("slurm.partition/gpu").map(String::as_str), Some("true"));
        assert_eq!((j.control.partition.as_deref(), j.control.time_limit_s), (Some("gpu"), Some(3600)));
        // No partition named: the default one; no account named: the partition's queue.
        let mut j = job("");
        tree.place(&mut j).expect("placed");
        assert_eq!((j.queue.as_str(), j.control.partition.as_deref()), ("gpu-pool", Some("gpu")));
        // A partition with no default time: its MaxTime is the limit of a job asking none.
        let mut j = job("partition = \"debug\"");
        tree.place(&mut j).expect("placed");
        assert_eq!((j.queue.as_str(), j.control.time_limit_s), ("default", Some(1800)));
        assert!(j.groups[0].node_selector.is_empty(), "debug holds every node");
    }

    #[test]
    fn partition_limits_and_unknown_names_refuse_the_job_with_a_reason() {
        let tree = tree();
        let refusal = |extra: &str| tree.place(&mut job(extra)).expect_err("refused");
        assert!(matches!(
            refusal("partition = \"debug\"\ntime_limit = \"1h\""),
            PlaceRefusal::TimeLimit { asked_s: 3600, max_s: 1800, .. }
        ));
        let r = refusal("[task]replicas = 3\ndistinct_nodes = true");
        assert_eq!(r.to_string(), "3 nodes asked, partition gpu's MaxNodes is 2");
        let r = refusal("partition = \"gpu,debug\"");
        assert_eq!(r.to_string(), "invalid partition name \"gpu,debug\" (partitions: gpu, debug)");
        assert_eq!(r.field(), "partition");
        let r = refusal("[task]node_selector = { \"slurm.partition/gpu\" = \"false\" }");
        assert!(r.to_string().contains("holds only nodes with slurm.partition/gpu=true"), "{r}");
        let r = refusal("qos = \"high\"");
        assert_eq!(r.to_string(), "invalid QOS \"high\" (QOS names: interactive, scavenger)");
    }

    #[test]
    fn a_qos_is_the_queue_files_priority_added_to_what_the_job_asked() {
        let tree = tree();
        let mut j = job("qos = \"scavenger\"\npriority = 5");
        tree.place(&mut j).expect("placed");
        assert_eq!(j.control.priority_asked, Some(-995));
        // Without [[qos]] tables, gantry's four names.
        let flat = QueueTree::flat(["default"], 1, 1);
        let mut j = job("qos = \"high\"");
        flat.place(&mut j).expect("placed");
        assert_eq!(j.control.priority_asked, Some(100));
        // Without [[partition]] tables, a partition naming a queue is that queue.
        let mut j = job("partition = \"default\"");
        let mut two = QueueTree::flat(["default", "research"], 1, 1);
        flat.place(&mut j).expect("placed");
        assert_eq!(j.queue, "default");
        let mut j = job("partition = \"research\"");
        two.place(&mut j).expect("placed");
        assert_eq!((j.queue.as_str(), j.control.partition.as_deref()), ("research", Some("research")));
        two.qos.push(gantry_types::Qos { name: "only".into(), priority: 1 });
        assert!(two.place(&mut job("qos = \"high\"")).is_err(), "a file's own QOS names replace gantry's");
    }

    #[test]
    fn malformed_partition_and_qos_tables_name_the_field() {
        for (extra, expected) in [
            ("[[partition]]\nname = \"a\"\n[[partition]]\nname = \"a\"\n", "partition \"a\": defined twice"),
            (
                "[[partition]]\nname = \"a\"\ndefault = true\n[[partition]]\nname = \"b\"\ndefault = true\n",
                "a, b are all marked default",
            ),
            ("[[partition]]\nname = \"a\"\nqueue = \"nope\"\n", "partition \"a\" / queue: no queue \"nope\""),
            (
                "[[partition]]\nname = \"a\"\nmax_time = \"1h\"\ndefault_time = \"2h\"\n",
                "above the partition's max_time",
            ),
            ("[[partition]]\nname = \"a\"\nmax_nodes = 0\n", "partition \"a\" / max_nodes"),
            ("[[partition]]\nname = \"a\"\nmax_time = \"-1h\"\n", "is negative"),
            ("[[partition]]\nname = \"a\"\nnode_selector = { \"\" = \"x\" }\n", "a key and a value of 1 to 253 bytes"),
            ("[[partition]]\nname = \"a\"\nnodes = \"gpu-[1-4]\"\n", "unknown field"),
            ("[[qos]]\nname = \"a\"\npriority = 1\n[[qos]]\nname = \"a\"\npriority = 2\n", "qos \"a\": defined twice"),
            ("[[qos]]\nname = \"a\"\npriority = 99999999\n", "out of range"),
            ("[[qos]]\nname = \"\"\npriority = 1\n", "empty name"),
        ] {
            let text = format!("[[queue]]\nname = \"default\"\n{extra}");
            let err = parse_queues(&text, Catalog::embedded()).expect_err(extra).to_string();
            assert!(err.contains(expected), "{extra}: {err}");
        }
    }
}
