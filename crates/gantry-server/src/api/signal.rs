//! `POST /v1/jobs/{id}/signal`: a user's signal to a running job's processes (`scancel
//! --signal=USR1`, a checkpoint request, say), without stopping it. Only the job's user (a
//! member of its queue) and admins; only a running job; only the signals a user may send
//! (`gantry_wire::USER_SIGNALS`). Each node running the job gets it with its agent's next
//! heartbeat (`crate::signals`); no node that cannot take it is sent anything.

use super::*;
use gantry_api::replies::{SignalRequest, Signalled};
use gantry_wire::SignalOrder;

#[utoipa::path(post, path = "/v1/jobs/{id}/signal", tag = "jobs", params(("id" = u64, Path, description = "Job id")),
    request_body(content = SignalRequest, content_type = "application/json"),
    responses((status = 202, description = "On its way to the job's nodes", body = Signalled), (status = 400, description = "Malformed request", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody), (status = 403, description = "Not the job's user, nor an admin", body = ErrorBody),
        (status = 404, description = "Not found", body = ErrorBody), (status = 409, description = "Not running, or a node of it cannot take signals now", body = ErrorBody),
        (status = 429, description = "Too many signals waiting for a node", body = ErrorBody)))]
pub(super) async fn signal(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Text(body): Text,
) -> Result<(StatusCode, Json<Signalled>), ApiError> {
    let who = who(&shared, &headers)?;
    let id = job_id(&id)?;
    let request: SignalRequest =
        serde_json::from_str(&body).map_err(|e| bad("body", format!("signal: {e} (e.g. {{\"signal\": \"USR1\"}})")))?;
    let number = gantry_wire::exact_signal(&request.signal).ok_or_else(|| {
        let names: Vec<&str> = gantry_wire::USER_SIGNALS.iter().map(|(n, _)| *n).collect();
        bad("signal", format!("{:?} is not a signal a job may be sent: one of {}", request.signal, names.join(" ")))
    })?;
    let now = now_s();
    let view = shared.read(|c| views::jobs::job(c, &who, id, now))?;
    let row = &view.row;
    who.signals_job_of(row.job.control.user.as_deref().unwrap_or_default(), &row.queue)?;
    if row.state != JobState::Running {
        return Err(ApiError(ControlError::Conflict(format!(
            "job {id} is {}: only a running job can be signalled",
            row.state.name()
        ))));
    }
    let mut nodes: Vec<String> = row.tasks.iter().map(|t| t.node.clone()).collect();
    nodes.sort();
    nodes.dedup();
    if let Some(why) = nodes.iter().find_map(|n| shared.read(|c| c.signal_unavailable(n, now))) {
        return Err(ApiError(ControlError::Conflict(format!("job {id} cannot be signalled now: {why}"))));
    }
    // A job with no steps (not a batch job) has nothing but "all".
    let all = request.all || gantry_spec::sbatch::allocation_tasks(&row.job.run.command).is_none();
    for node in &nodes {
        shared.signals.push(node, SignalOrder { job: id, attempt: row.requeues, signal: number, all })?;
        shared.agents_wake.of(node).notify_waiters();
    }
    Ok((StatusCode::ACCEPTED, Json(Signalled { id, signal: number, nodes })))
}
