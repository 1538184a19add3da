//! An API token as the controller keeps it and an admin lists it: its name, role and scope,
//! its secret only as a SHA-256 hash.

use serde::{Deserialize, Serialize};

/// What an API token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Everything, tokens and configuration included.
    Admin,
    /// Submit to, see and cancel the jobs of its queues.
    Member,
    /// See everything, change nothing.
    ReadOnly,
    /// A node agent: registers its node and heartbeats; sees no jobs.
    Agent,
}

/// An API token as stored: its secret only as a SHA-256 hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenRecord {
    pub name: String,
    pub role: Role,
    /// The queues a member may use (empty for other roles).
    pub queues: Vec<String>,
    /// Hex SHA-256 of the secret.
    pub hash: String,
    pub created_at_s: u64,
    /// The one node an agent token may register and heartbeat as (`None`: any, for admin,
    /// member and read-only tokens; an agent token from before node binding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When the token stops working (Unix seconds; `None`: it does not expire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_s: Option<u64>,
}
