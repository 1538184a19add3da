//! `GET /v1/jobs/{id}/logs`: a job's task output — every task's or one's, stdout, stderr or
//! both, the end of each or from an offset (a follower's next read) — as text under a header
//! line per stream, or as JSON pieces. Only the job's user and admins may read it; the bytes
//! come from this machine's agents or through the remote node's agent (`task_logs`).

use super::*;
use crate::task_logs::{LOG_TASKS_MAX, LogPiece, Want, last_lines};
pub use gantry_api::logs::LogsView;
use gantry_api::queries::LogsQuery;
use gantry_wire::LogStream;

/// `GET /v1/jobs/{id}/logs`: what the tasks printed, from whichever node runs them.
#[utoipa::path(get, path = "/v1/jobs/{id}/logs", tag = "jobs", params(("id" = u64, Path, description = "Job id"), LogsQuery),
    responses((status = 200, description = "Each task's stdout and stderr under a header line (text), or `LogsView` (json); a node that is down or does not answer is said so in place of its output", body = String, content_type = "text/plain"),
        (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not the job's user, nor an admin", body = ErrorBody), (status = 404, description = "No such job or task", body = ErrorBody),
        (status = 429, description = "Too many reads waiting for the node", body = ErrorBody)))]
pub(super) async fn logs(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let who = who(&shared, &headers)?;
    let id = job_id(&id)?;
    let Query(q) = query.map_err(|e| {
        bad(
            "query",
            format!(
                "logs: {e} (task: GROUP/REPLICA; stream: out or err; tail: lines; offset: bytes; format: text or json)"
            ),
        )
    })?;
    let json = match q.format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => return Err(bad("format", format!("logs: format {other:?}: use text or json"))),
    };
    let view = shared.read(|c| views::jobs::job(c, &who, id, crate::now_s()))?;
    who.reads_logs_of(view.row.job.control.user.as_deref().unwrap_or_default())?;
    let row = &view.row;
    let ranks: Vec<u32> = match &q.task {
        Some(task) => vec![rank_of(row, task)?],
        None => (0..row.tasks.len() as u32).collect(),
    };
    let streams = q.stream.map_or_else(|| vec![LogStream::Out, LogStream::Err], |s| vec![s]);
    if q.offset.is_some() && (ranks.len() != 1 || streams.len() != 1) {
        return Err(bad("offset", "logs: offset reads one stream: name a task and a stream too".into()));
    }
    if q.offset.is_some_and(|o| o > i64::MAX as u64) {
        return Err(bad("offset", format!("logs: offset past the largest the API takes ({})", i64::MAX)));
    }
    if q.offset.is_some() && q.tail.is_some() {
        return Err(bad("offset", "logs: offset and tail do not go together".into()));
    }
    let tasks_left_out = ranks.len().saturating_sub(LOG_TASKS_MAX);
    let want = Want { ranks: ranks.into_iter().take(LOG_TASKS_MAX).collect(), streams, offset: q.offset };
    let mut pieces = crate::task_logs::read(&shared, row, &want).await;
    if let Some(lines) = q.tail {
        for piece in &mut pieces {
            let tail = last_lines(&piece.text, lines as usize);
            if tail.len() < piece.text.len() {
                // The lines asked for are all there: what was left out before them is not news.
                piece.note = None;
            }
            piece.text = tail.to_string();
        }
    }
    if json {
        return Ok(Json(LogsView { pieces, tasks_left_out }).into_response());
    }
    Ok(as_text(&row.name, &pieces, tasks_left_out).into_response())
}

/// The rank of task `GROUP/REPLICA` in `row`'s shown run.
fn rank_of(row: &gantry_store::JobRow, task: &str) -> Result<u32, ApiError> {
    let found = row.tasks.iter().position(|t| format!("{}/{}", t.group, t.replica) == task);
    found.map(|rank| rank as u32).ok_or_else(|| {
        let names: Vec<String> = row.tasks.iter().take(8).map(|t| format!("{}/{}", t.group, t.replica)).collect();
        let known = if names.is_empty() {
            "it has not been placed yet".to_string()
        } else {
            format!("its tasks: {}", names.join(", "))
        };
        ApiError(ControlError::UnknownTask(format!("job {} has no task {task:?} ({known})", row.id)))
    })
}

/// Each stream with something to say under `==> NAME TASK (STREAM) <==`.
fn as_text(name: &str, pieces: &[LogPiece], tasks_left_out: usize) -> String {
    let mut text = String::new();
    for piece in pieces {
        if piece.text.is_empty() && piece.note.is_none() {
            continue;
        }
        text += &format!("==> {name} {} ({}) <==\n", piece.task, piece.stream);
        if let Some(note) = &piece.note {
            text += &format!("gantry: {note}\n");
        }
        text += &piece.text;
        if !piece.text.is_empty() && !piece.text.ends_with('\n') {
            text.push('\n');
        }
    }
    if tasks_left_out > 0 {
        text += &format!(
            "gantry: {tasks_left_out} more tasks are not shown (at most {LOG_TASKS_MAX} at once): name one with --task GROUP/REPLICA\n"
        );
    }
    text
}
