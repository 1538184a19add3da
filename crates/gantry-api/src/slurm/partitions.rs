//! Partitions as `sinfo` and `scontrol` show them: the queue file's (`GET /v1/partitions`),
//! or, where it defines none, one partition `all` holding every node.

use crate::NodeView;
use crate::partitions::{PartitionView, Partitions};

/// The partition shown where the queue file defines none (every node; the default).
pub const ALL: &str = "all";

/// A partition with its nodes, as Slurm's tools list it.
#[derive(Debug)]
pub struct Shown<'a> {
    pub view: PartitionView,
    pub nodes: Vec<&'a NodeView>,
}

impl Shown<'_> {
    /// Its name as `sinfo` prints it: the default partition marked `*`.
    pub fn marked(&self) -> String {
        format!("{}{}", self.view.name, if self.view.default { "*" } else { "" })
    }

    /// Its `MaxTime` as `sinfo`'s `TIMELIMIT` column and `scontrol` print it.
    pub fn time_limit(&self, unlimited: &str) -> String {
        self.view.max_time_s.map_or_else(|| unlimited.to_string(), super::elapsed)
    }
}

/// Each partition with its nodes, in the queue file's order.
pub fn shown<'a>(nodes: &'a [NodeView], partitions: &Partitions) -> Vec<Shown<'a>> {
    if partitions.partitions.is_empty() {
        let view = PartitionView {
            name: ALL.into(),
            default: true,
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
            node_selector: Default::default(),
            queue: None,
            max_time_s: None,
            default_time_s: None,
            max_nodes: None,
        };
        return vec![Shown { view, nodes: nodes.iter().collect() }];
    }
    partitions
        .partitions
        .iter()
        .map(|p| Shown { view: p.clone(), nodes: nodes.iter().filter(|n| p.nodes.contains(&n.name)).collect() })
        .collect()
}

/// The partitions `node` is in, as `scontrol show node`'s `Partitions=`.
pub fn of_node(node: &NodeView, partitions: &Partitions) -> String {
    if partitions.partitions.is_empty() {
        return ALL.into();
    }
    let names: Vec<&str> =
        partitions.partitions.iter().filter(|p| p.nodes.contains(&node.name)).map(|p| p.name.as_str()).collect();
    if names.is_empty() { "(null)".into() } else { names.join(",") }
}
