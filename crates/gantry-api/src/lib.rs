//! The controller's REST contract: every type a request carries or a reply returns, in one
//! crate below both sides. The key decision: the server builds these values and the CLI
//! reads them as the same Rust types (never as loose JSON), and the OpenAPI document is
//! derived from them — so a field renamed on one side is a compile error on the other, and
//! the published schema cannot drift from what either does.

pub mod connection;
pub mod exit;
pub mod follow;
pub mod jobs;
pub mod logs;
pub mod nodes;
pub mod partitions;
pub mod profile;
pub mod queries;
pub mod reconfig;
pub mod replies;
pub mod slurm;
pub mod text;
pub mod usage;

pub use gantry_types::{Role, TokenRecord};
pub use jobs::{JobView, LayoutWait};
pub use logs::{LogPiece, LogsView};
pub use nodes::{GpuView, MigInstanceView, NodeView};
pub use reconfig::{Phase, PlanView, PlannedChange, Reconfiguration, ReconfigurationsView, ReconfigureMode};
pub use replies::{Cancelled, Checkpointed, Drained, ErrorBody, Held, NewToken, NodeLost, Submitted, TokenSecret};
pub use usage::{UsageBy, UsageLine};
