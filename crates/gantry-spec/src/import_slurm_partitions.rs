//! slurm.conf's `PartitionName` lines in: each becomes a `[[partition]]` of the queue file —
//! its nodes as the label `slurm.partition/NAME = "true"` that the import puts on each of
//! them, `Default`, `MaxTime`, `DefaultTime`, `MaxNodes` — and a `[[queue]]` of the same
//! name, charged for its jobs that name no account (so a site whose users only ever say `-p`
//! keeps one fair-share account per partition, as before).

use crate::error::SpecError;
use crate::hostlist::expand_hostlist;
use crate::import_k8s::quote;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The label a node carries for each partition slurm.conf puts it in.
pub fn partition_label(partition: &str) -> String {
    format!("slurm.partition/{partition}")
}

/// Which partitions each node is in (by `Nodes=`; `Nodes=ALL` puts no label: the partition
/// selects every node). Lines that do not read are left to the main pass to report.
pub(crate) fn membership<'a>(lines: impl Iterator<Item = &'a [(String, String)]>) -> BTreeMap<String, Vec<String>> {
    let mut member: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pairs in lines {
        let (key, name) = &pairs[0];
        if !key.eq_ignore_ascii_case("partitionname") || name.eq_ignore_ascii_case("DEFAULT") {
            continue;
        }
        let nodes = pairs[1..].iter().find(|(k, _)| k.eq_ignore_ascii_case("nodes")).map(|(_, v)| v.as_str());
        // `expand_hostlist` reads the whole list (commas outside brackets separate names).
        for node in nodes
            .filter(|n| !n.eq_ignore_ascii_case("ALL"))
            .map(expand_hostlist)
            .and_then(Result::ok)
            .unwrap_or_default()
        {
            member.entry(node).or_default().push(name.clone());
        }
    }
    member
}

/// A `PartitionName=` line as a queue (`queues`) and a partition (`partitions`); fields gantry
/// has no equivalent for are noted.
pub(crate) fn partition_line(
    name: &str,
    fields: &[(String, String)],
    at: &str,
    queues: &mut String,
    partitions: &mut String,
    notes: &mut Vec<String>,
) -> Result<(), SpecError> {
    let mut table = format!("\n[[partition]]\nname = {}\nqueue = {}\n", quote(name), quote(name));
    let mut all_nodes = false;
    for (k, v) in fields {
        let bad = |why: String| SpecError::new(at, format!("partition {name}: {k}={v}: {why}"));
        match k.to_ascii_lowercase().as_str() {
            "nodes" => {
                all_nodes = v.eq_ignore_ascii_case("ALL");
                if !all_nodes {
                    expand_hostlist(v).map_err(bad)?;
                }
            }
            "default" => table += &format!("default = {}\n", v.eq_ignore_ascii_case("YES")),
            "maxtime" | "defaulttime" => {
                if let Some(s) = slurm_time(v).map_err(bad)? {
                    let key = if k.eq_ignore_ascii_case("maxtime") { "max_time" } else { "default_time" };
                    table += &format!("{key} = {s}\n");
                }
            }
            "maxnodes" if v.eq_ignore_ascii_case("UNLIMITED") => {}
            "maxnodes" => {
                let n: u32 = v.parse().map_err(|_| bad("not a whole number".into()))?;
                table += &format!("max_nodes = {n}\n");
            }
            "state" => {}
            _ => notes.push(format!("{at}: partition {name}: {k}={v} (no gantry partition equivalent)")),
        }
    }
    if !all_nodes {
        table += &format!("node_selector = {{ {} = \"true\" }}\n", quote(&partition_label(name)));
    }
    let _ = write!(queues, "\n[[queue]]\nname = {}\n", quote(name));
    partitions.push_str(&table);
    Ok(())
}

/// A partition time (`MaxTime=2-00:00:00`) in seconds; `UNLIMITED`/`INFINITE` is none.
fn slurm_time(value: &str) -> Result<Option<u64>, String> {
    if value.eq_ignore_ascii_case("UNLIMITED") || value.eq_ignore_ascii_case("INFINITE") {
        return Ok(None);
    }
    crate::sbatch::slurm_time_s(value).map(Some)
}

#[cfg(test)]
mod tests {
    use crate::import_slurm::{SlurmSource, import_slurm_conf};
    use gantry_catalog::Catalog;
    use std::collections::BTreeMap;

    fn import(partitions: &str) -> Result<crate::ImportedSlurm, crate::SpecError> {
        let conf = format!("NodeName=gpu[01-02] CPUs=8 Gres=gpu:l4:2\nNodeName=cpu01 CPUs=4\n{partitions}");
        let map = BTreeMap::new();
        let source = SlurmSource { name: "slurm.conf".into(), catalog: Catalog::embedded(), map: &map, lenient: false };
        import_slurm_conf(&conf, None, &source)
    }

    #[test]
    fn partition_lines_become_node_sets_limits_and_a_queue_each() {
        let imported =
            import("PartitionName=all Nodes=ALL MaxNodes=UNLIMITED MaxTime=INFINITE\nPartitionName=mixed Nodes=gpu01,cpu01 MaxNodes=1 DefaultTime=10 MaxTime=30\n")
                .expect("imports");
        let tree = crate::parse_queues(&imported.queues, Catalog::embedded()).expect("reads back");
        let all = tree.partition("all").expect("all");
        assert!(all.node_selector.is_empty() && all.max_time_s.is_none() && all.max_nodes.is_none());
        let mixed = tree.partition("mixed").expect("mixed");
        assert_eq!((mixed.max_nodes, mixed.default_time_s, mixed.max_time_s), (Some(1), Some(600), Some(1800)));
        let fleet = crate::parse_fleet(&imported.fleet, Catalog::embedded()).expect("fleet");
        let in_mixed: Vec<&str> = fleet
            .nodes
            .iter()
            .filter(|n| n.labels.contains_key("slurm.partition/mixed"))
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(in_mixed, ["gpu01", "cpu01"]);
    }

    #[test]
    fn malformed_partition_lines_are_errors_naming_the_line() {
        for (line, expected) in [
            ("PartitionName=p MaxTime=soon", "slurm.conf:3: partition p: MaxTime=soon: use minutes"),
            ("PartitionName=p MaxTime=99999999999999999", "longer than 36500 days"),
            ("PartitionName=p MaxNodes=-1", "MaxNodes=-1: not a whole number"),
            ("PartitionName=p Nodes=gpu[01-", "partition p: Nodes=gpu[01-"),
        ] {
            let err = import(&format!("{line}\n")).expect_err(line).to_string();
            assert!(err.contains(expected), "{line}: {err}");
        }
    }
}
