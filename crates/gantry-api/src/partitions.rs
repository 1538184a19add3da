//! `GET /v1/partitions`: the queue file's Slurm partitions, each with the nodes it holds and
//! its limits, and the QOS names it defines — what `sinfo` and `scontrol show partition` list.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One partition as the controller resolves it now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartitionView {
    pub name: String,
    /// Jobs that name no partition run here.
    pub default: bool,
    /// The nodes it holds now (those with every label of `node_selector`).
    pub nodes: Vec<String>,
    pub node_selector: BTreeMap<String, String>,
    /// The queue charged for its jobs that name none.
    pub queue: Option<String>,
    pub max_time_s: Option<u64>,
    pub default_time_s: Option<u64>,
    pub max_nodes: Option<u32>,
}

/// A QOS name and the priority it grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QosView {
    pub name: String,
    pub priority: i32,
}

/// The reply of `GET /v1/partitions`: no partitions where the queue file defines none (every
/// node is then in one partition, and a queue name stands for a partition).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Partitions {
    pub partitions: Vec<PartitionView>,
    pub qos: Vec<QosView>,
}
