//! A job as `GET /v1/jobs` and `GET /v1/jobs/{id}` show it: the row the controller keeps, and
//! why it waits while it is pending.

use gantry_types::{JobRow, PendingJob};
use serde::Serialize;

/// A job as `queue` and `show` list it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub row: JobRow,
    /// Why it waits and when it may start, while it is pending.
    pub pending: Option<PendingJob>,
    /// A MIG job no GPU is carved for yet: the GPU the planner would change for it (one job's
    /// view only: it costs a planning step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutWait>,
    /// While it runs: what this run has used so far on each node, as its agents' cgroups
    /// measured it (`used` has its ended runs').
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running_used: Vec<gantry_types::NodeUse>,
    /// The job named a higher priority than its queue grants a member's job: in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_capped: Option<String>,
}

/// Which GPU a waiting MIG job waits to have reconfigured, and who does it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LayoutWait {
    pub node: String,
    pub gpu: u32,
    pub from: String,
    pub to: String,
    /// The GPU still runs work (it changes once that ends).
    pub busy: bool,
    /// The controller is carrying the change out (`reconfigure = "auto"`): its
    /// reconfiguration's id; `None`: advice an admin applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfiguration: Option<u64>,
    /// When the GPU should be ready, Unix seconds (a change under way only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_s: Option<u64>,
    /// In words, with who applies the change.
    pub message: String,
}
