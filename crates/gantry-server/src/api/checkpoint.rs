//! `POST /v1/checkpoint` (admin): take a checkpoint now rather than at the next due time (see
//! [`crate::retention`]) — before an upgrade, or to let retention delete the log at once.

use super::*;
pub use gantry_api::replies::Checkpointed;

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
