//! The REST API (JSON): submit a workload, list and show jobs with why they wait, cancel,
//! read a job's task logs. Every error is a 4xx/5xx with `{"error": "..."}`; a refused
//! request changes nothing.

use crate::controller::{ApiError, JobView};
use crate::{Shared, now_s};
use axum::Json;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gantry_types::JobState;
use serde::{Deserialize, Serialize};

/// Largest request body: a workload file is a few KiB; 1 MiB is a mistake or an attack.
pub const BODY_BYTES_MAX: usize = 1 << 20;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, Json(ErrorBody { error: self.to_string() })).into_response()
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Submitted {
    pub ids: Vec<u64>,
}

#[derive(Deserialize)]
struct ListQuery {
    /// Comma-separated states (`pending,running`); all when absent.
    state: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Cancelled {
    pub id: u64,
    /// `cancelled` (it was waiting) or `stopping` (its tasks are being signalled).
    pub status: String,
}

pub fn router(shared: Shared) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(show).delete(cancel))
        .route("/v1/jobs/{id}/logs", get(logs))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(shared)
}

/// `POST /v1/jobs`: the body is a workload file (TOML, docs/formats.md).
async fn submit(State(shared): State<Shared>, body: String) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    let ids = shared.controller.lock().expect("not poisoned").submit(&body, now_s())?;
    shared.wake.notify_one();
    Ok((StatusCode::CREATED, Json(Submitted { ids })))
}

async fn list(State(shared): State<Shared>, Query(q): Query<ListQuery>) -> Result<Json<Vec<JobView>>, ApiError> {
    let mut states = Vec::new();
    for name in q.state.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        let state: JobState = serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
            ApiError::BadRequest(format!(
                "unknown state {name:?}: use pending, running, completed, failed, cancelled or lost"
            ))
        })?;
        states.push(state);
    }
    Ok(Json(shared.controller.lock().expect("not poisoned").jobs(&states)?))
}

fn job_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| ApiError::BadRequest(format!("{text:?} is not a job id")))
}

async fn show(State(shared): State<Shared>, Path(id): Path<String>) -> Result<Json<JobView>, ApiError> {
    Ok(Json(shared.controller.lock().expect("not poisoned").job(job_id(&id)?)?))
}

async fn cancel(State(shared): State<Shared>, Path(id): Path<String>) -> Result<Json<Cancelled>, ApiError> {
    let id = job_id(&id)?;
    let (stop, grace) = {
        let mut controller = shared.controller.lock().expect("not poisoned");
        let stop = controller.cancel(id, now_s())?;
        (stop, controller.job(id)?.row.job.lifecycle.grace_s)
    };
    if stop {
        shared.runner.stop(id, std::time::Duration::from_secs(grace));
    }
    shared.wake.notify_one();
    Ok(Json(Cancelled { id, status: if stop { "stopping" } else { "cancelled" }.into() }))
}

/// `GET /v1/jobs/{id}/logs`: every task's stdout then stderr, each under a header line.
async fn logs(State(shared): State<Shared>, Path(id): Path<String>) -> Result<String, ApiError> {
    let id = job_id(&id)?;
    let view = shared.controller.lock().expect("not poisoned").job(id)?;
    let dir = crate::runner::job_dir(&shared.data_dir, id);
    let mut text = String::new();
    for task in &view.row.tasks {
        for stream in ["out", "err"] {
            let path = dir.join(format!("{}-{}.{stream}", task.group, task.replica));
            let content = std::fs::read_to_string(&path).unwrap_or_default();
            if !content.is_empty() {
                text += &format!("==> {} {}/{} ({stream}) <==\n{content}", view.row.name, task.group, task.replica);
            }
        }
    }
    Ok(text)
}
