//! `GET /v1/partitions`: the queue file's partitions with the nodes their selectors hold now,
//! and its QOS names (gantry's defaults where it names none).

use crate::control::Controller;
use gantry_api::partitions::{PartitionView, Partitions, QosView};

/// Every partition and QOS name the controller resolves jobs with.
pub fn partitions(c: &Controller) -> Partitions {
    let empty = gantry_types::QueueTree::flat([], 1, 1);
    let tree = c.scheduler().queue_tree().unwrap_or(&empty);
    let info = &c.scheduler().engine().state().info;
    let partitions = tree
        .partitions
        .iter()
        .map(|p| PartitionView {
            name: p.name.clone(),
            default: p.default,
            nodes: info
                .iter()
                .filter(|n| p.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
                .map(|n| n.name.clone())
                .collect(),
            node_selector: p.node_selector.clone(),
            queue: p.queue.clone(),
            max_time_s: p.max_time_s,
            default_time_s: p.default_time_s,
            max_nodes: p.max_nodes,
        })
        .collect();
    let qos = tree.qos_table().into_iter().map(|q| QosView { name: q.name, priority: q.priority }).collect();
    Partitions { partitions, qos }
}
