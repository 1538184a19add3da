//! `POST /v1/checkpoint` (admin): take a checkpoint now rather than at the next due time (see
//! [`crate::retention`]) — before an upgrade, or to let retention delete the log at once.

use super::*;

/// What a checkpoint request did.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpointed {
    /// Whether it was taken (it is not while a run is being stopped or moved, a launch is
    /// unacknowledged or a GPU is being reconfigured: try again shortly).
    pub taken: bool,
    /// Why not, when it was not.
    pub why: Option<String>,
    /// The command log kept before now, seconds (`[log] keep_days`; `None`: all of it).
    pub keep_log_s: Option<u64>,
}

#[utoipa::path(post, path = "/v1/checkpoint", tag = "log",
    responses((status = 200, description = "Taken, or not and why", body = Checkpointed), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody)))]
pub(super) async fn checkpoint(
    State(shared): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<Checkpointed>, ApiError> {
    who(&shared, &headers)?.admin_only("taking a checkpoint")?;
    let keep_log_s = shared.log.keep_s;
    match shared.execute(Command::Checkpoint { keep_log_s }).await? {
        Reply::Checkpoint { taken, why } => Ok(Json(Checkpointed { taken, why, keep_log_s })),
        other => Err(unexpected(other)),
    }
}
