//! The REST API (JSON): submit a workload, list and show jobs with why they wait, cancel,
//! read a job's task logs. Every error is a 4xx/5xx with `{"error": "..."}`; a refused
//! request changes nothing.

mod agents;
mod body;
mod checkpoint;
mod logs;
mod signal;
pub mod status;
pub mod usage;

pub use status::status_of;
pub use usage::usage_lines;

use crate::auth::{Principal, bearer};
use crate::control::{Command, Reply};
use crate::error::ControlError;
use crate::views::{self, JobView, NodeView};
use crate::wire::{Heartbeat, LogChunk, Orders, Register, Registered};
use crate::{Shared, now_s};
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use body::Text;
use gantry_api::queries::{CancelQuery, ListQuery, UsageQuery};
pub use gantry_api::replies::{
    Cancelled, Drained, ErrorBody, Held, NewToken, NodeLost, Requeued, Submitted, TokenSecret,
};
use gantry_store::TokenRecord;
use gantry_types::JobState;
use serde::{Deserialize, Serialize};

/// A refused or failed request as the API answers it: the status code and `{"error": ...}`.
#[derive(Debug)]
pub struct ApiError(pub ControlError);

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (limit, value) = match &self.0 {
            ControlError::TooLarge { limit, value, .. } | ControlError::TooMany { limit, value, .. } => {
                (Some(limit.to_string()), Some(*value))
            }
            _ => (None, None),
        };
        let (field, hint) = (self.0.field(), self.0.hint());
        let status = status_of(&self.0);
        let mut response =
            (status, Json(ErrorBody { error: self.0.to_string(), field, hint, limit, value })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110: a 401 names the scheme that would be accepted.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"gantry\""),
            );
        }
        response
    }
}

fn bad(field: &'static str, message: String) -> ApiError {
    ApiError(ControlError::request(field, message))
}

/// A query string as `T`, or the API's JSON error naming what was wrong (axum's own rejection
/// is `text/plain`).
fn query<T>(query: Result<Query<T>, QueryRejection>, what: &str) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(|e| bad("query", format!("{what}: {}", e.body_text())))
}

/// A reply of the wrong kind for its command: a bug.
fn unexpected(reply: Reply) -> ApiError {
    ApiError(ControlError::Internal(format!("unexpected reply {reply:?}")))
}

fn who(shared: &Shared, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let header = headers.get(axum::http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let secret = bearer(header)?;
    Ok(shared.read(|c| c.authenticate(secret, now_s()))?)
}

/// `GET /healthz`: no token needed.
#[utoipa::path(get, path = "/healthz", tag = "service", security(()),
    responses((status = 200, description = "The controller is up", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The API's OpenAPI document, generated from the handlers and the types they exchange (served
/// at `/openapi.json`; the committed copy, docs/openapi.json, is checked against it by a test).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "gantry", description = "The gantry controller's REST API: jobs, nodes, tokens and the node agents' protocol (docs/formats.md)."),
    paths(healthz, submit, list, show, cancel, hold, release, requeue, estimate, signal::signal, logs::logs, nodes, partitions, drain, resume, node_lost, create_token, list_tokens, revoke_token, usage, series, idle, plan, reconfigurations, metrics, agents::register_agent, agents::heartbeat, agents::answer_log_read, checkpoint::checkpoint),
    components(schemas(crate::meter::UsageBy)),
    security(("bearer" = [])),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The OpenAPI document (version fixed at 0.1.0 so the committed copy does not churn with
/// every release; `info.version` is the API's, not the binary's).
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    let mut doc = ApiDoc::openapi();
    doc.info.version = "0.1.0".into();
    doc.info.license = None;
    doc
}

pub fn router(shared: Shared) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(show).delete(cancel))
        .route("/v1/jobs/{id}/logs", get(logs::logs))
        .route("/v1/jobs/{id}/signal", post(signal::signal))
        .route("/v1/jobs/{id}/requeue", post(requeue))
        .route("/v1/jobs/estimate", post(estimate))
        .route("/v1/jobs/{id}/hold", post(hold))
        .route("/v1/jobs/{id}/release", post(release))
        .route("/v1/nodes", get(nodes))
        .route("/v1/partitions", get(partitions))
        .route("/v1/nodes/{name}/drain", post(drain))
        .route("/v1/nodes/{name}/resume", post(resume))
        .route("/v1/nodes/{name}/lost", post(node_lost))
        .route("/v1/tokens", post(create_token).get(list_tokens))
        .route("/v1/tokens/{name}", axum::routing::delete(revoke_token))
        .route("/v1/usage", get(usage))
        .route("/metrics", get(metrics))
        .route("/v1/series", get(series))
        .route("/v1/idle", get(idle))
        .route("/v1/plan", get(plan))
        .route("/v1/reconfigurations", get(reconfigurations))
        .route("/v1/checkpoint", post(checkpoint::checkpoint))
        .route("/v1/agents/register", post(agents::register_agent))
        .route("/v1/agents/{node}/heartbeat", post(agents::heartbeat))
        .route(
            "/v1/agents/{node}/logs",
            post(agents::answer_log_read).layer(DefaultBodyLimit::max(agents::LOG_CHUNK_BODY_MAX)),
        )
        .merge(crate::ui::router())
        .fallback(body::not_found)
        .method_not_allowed_fallback(body::method_not_allowed)
        .layer(DefaultBodyLimit::max(shared.admission.body_bytes))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), crate::standby::lease_guard))
        .layer(axum::middleware::from_fn_with_state(shared.http.clone(), crate::metrics::http::record))
        .with_state(shared)
}

/// `POST /v1/jobs`: the body is a workload file (TOML, docs/formats.md).
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: a submission with a key this token used before is answered with the jobs that one made, and makes none (1 to 128 visible ASCII characters)")),
    request_body(content = String, content_type = "text/plain", description = "A workload file (TOML, docs/formats.md): all of its jobs are accepted, or none"),
    responses((status = 201, description = "Accepted", body = Submitted), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not a member of the job's queue", body = ErrorBody)))]
async fn submit(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Text(body): Text,
) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    let who = who(&shared, &headers)?;
    let jobs = workload(&shared, &body)?;
    let key = idempotency_key(&headers)?;
    match shared.execute(Command::Submit { who, jobs, key }).await? {
        Reply::Submitted { ids } => Ok((StatusCode::CREATED, Json(Submitted { ids }))),
        other => Err(unexpected(other)),
    }
}

/// A request's workload file as jobs (`POST /v1/jobs`, `POST /v1/jobs/estimate`): a file past
/// the admission limits is 413, one that does not read is 422 naming the field.
fn workload(shared: &Shared, body: &str) -> Result<Vec<gantry_types::Job>, ApiError> {
    let jobs_max = shared.admission.jobs_per_request;
    gantry_spec::parse_submission(body, gantry_catalog::Catalog::embedded(), jobs_max).map_err(|e| {
        ApiError(match e.limit {
            Some((limit, value)) => ControlError::TooLarge { limit, value, message: e.message },
            None => ControlError::Workload(e),
        })
    })
}

/// Longest idempotency key taken.
pub const IDEMPOTENCY_KEY_MAX: usize = 128;

/// The `Idempotency-Key` header of a submission: 1 to [`IDEMPOTENCY_KEY_MAX`] visible ASCII
/// characters (a UUID, say), or none.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let bad = || {
        ApiError(ControlError::request(
            "Idempotency-Key",
            format!("Idempotency-Key: 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters (a UUID, say)"),
        ))
    };
    let key = value.to_str().map_err(|_| bad())?;
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(key.to_string()))
}

#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, description = "Jobs the token may see", body = [JobView]), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody)))]
async fn list(
    State(shared): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<JobView>>, ApiError> {
    let who = who(&shared, &headers)?;
    let q = query(q, "jobs")?;
    let mut states = Vec::new();
    for name in q.state.iter().flat_map(|s| s.split(',')) {
        let state: JobState = serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
            bad("state", format!("unknown state {name:?}: use pending, running, completed, failed, cancelled or lost"))
        })?;
        states.push(state);
    }
    Ok(Json(shared.read(|c| views::jobs::jobs(c, &who, &states, now_s()))))
}

fn job_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| bad("id", format!("{text:?} is not a job id")))
}

#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = u64, Path, description = "Job id")),
    responses((status = 200, description = "The job, with why it waits", body = JobView), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token", body = ErrorBody), (status = 404, description = "No such job", body = ErrorBody)))]
async fn show(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let who = who(&shared, &headers)?;
    let id = job_id(&id)?;
    Ok(Json(shared.read(|c| views::jobs::job(c, &who, id, crate::now_s()))?))
}

#[utoipa::path(delete, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = u64, Path, description = "Job id"), CancelQuery),
    responses((status = 200, description = "Cancelled, or being stopped", body = Cancelled), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody), (status = 409, description = "Already ended", body = ErrorBody)))]
async fn cancel(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<CancelQuery>, QueryRejection>,
) -> Result<Json<Cancelled>, ApiError> {
    let who = who(&shared, &headers)?;
    let query = query(q, "cancel")?;
    let id = job_id(&id)?;
    match shared.execute(Command::Cancel { who, job: id, force: query.force }).await? {
        Reply::Cancelled { stopping } => {
            Ok(Json(Cancelled { id, status: if stopping { "stopping" } else { "cancelled" }.into() }))
        }
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/jobs/estimate`: when the workload's first job would start if submitted now
/// (`sbatch --test-only`); nothing is submitted.
#[utoipa::path(post, path = "/v1/jobs/estimate", tag = "jobs", request_body(content = String, description = "A workload file (TOML), as for POST /v1/jobs", content_type = "text/plain"),
    responses((status = 200, description = "When and where it would start, or why it would wait", body = gantry_api::replies::Estimate), (status = 400, description = "Malformed workload, or a job that can never run on this fleet", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody), (status = 403, description = "Not a member of the job's queue", body = ErrorBody),
        (status = 413, description = "Past an admission limit", body = ErrorBody), (status = 429, description = "Estimates asked for faster than one token may", body = ErrorBody)))]
async fn estimate(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Text(body): Text,
) -> Result<Json<gantry_api::replies::Estimate>, ApiError> {
    let who = who(&shared, &headers)?;
    if !shared.estimate_rates.allow(&who.name, std::time::Instant::now()) {
        return Err(ApiError(ControlError::TooMany {
            limit: "estimates_per_second",
            value: u64::from(crate::rate::HEARTBEATS_PER_S),
            message: format!("token {:?} asks for estimates faster than the controller answers them", who.name),
        }));
    }
    let jobs = workload(&shared, &body)?;
    match shared.execute(Command::Estimate { who, jobs }).await? {
        Reply::Estimated(estimate) => Ok(Json(estimate)),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/jobs/{id}/requeue`: a running job is stopped and waits again (`scontrol requeue`).
#[utoipa::path(post, path = "/v1/jobs/{id}/requeue", tag = "jobs", params(("id" = u64, Path, description = "Job id")),
    responses((status = 202, description = "Being stopped; it waits again once its tasks have exited", body = Requeued), (status = 400, description = "Malformed request", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody), (status = 403, description = "Not allowed for this token", body = ErrorBody),
        (status = 404, description = "Not found", body = ErrorBody), (status = 409, description = "Not running, or being stopped already", body = ErrorBody)))]
async fn requeue(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Requeued>), ApiError> {
    let who = who(&shared, &headers)?;
    let id = job_id(&id)?;
    match shared.execute(Command::Requeue { who, job: id }).await? {
        Reply::Requeued => Ok((StatusCode::ACCEPTED, Json(Requeued { id }))),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/jobs/{id}/hold`: a waiting job leaves its queue until released.
#[utoipa::path(post, path = "/v1/jobs/{id}/hold", tag = "jobs", params(("id" = u64, Path, description = "Job id")),
    responses((status = 200, description = "Held", body = Held), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody), (status = 409, description = "Not waiting", body = ErrorBody)))]
async fn hold(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Held>, ApiError> {
    set_held(&shared, &headers, &id, true).await
}

/// `POST /v1/jobs/{id}/release`: a held job waits again, from now.
#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs", params(("id" = u64, Path, description = "Job id")),
    responses((status = 200, description = "Released", body = Held), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody), (status = 409, description = "Not waiting", body = ErrorBody)))]
async fn release(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Held>, ApiError> {
    set_held(&shared, &headers, &id, false).await
}

async fn set_held(shared: &Shared, headers: &HeaderMap, id: &str, held: bool) -> Result<Json<Held>, ApiError> {
    let who = who(shared, headers)?;
    let id = job_id(id)?;
    match shared.execute(Command::Hold { who, job: id, held }).await? {
        Reply::Held { changed } => Ok(Json(Held { id, held, changed })),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/tokens` (admin): `{"name", "role": "admin|member|read-only", "queues": [...]}`.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens", request_body = NewToken,
    responses((status = 201, description = "Created; the only time the secret is shown", body = TokenSecret), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody), (status = 404, description = "An agent token's node is not in the fleet", body = ErrorBody),
        (status = 409, description = "The name exists", body = ErrorBody)))]
async fn create_token(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Text(body): Text,
) -> Result<(StatusCode, Json<TokenSecret>), ApiError> {
    let who = who(&shared, &headers)?;
    who.admin_only("creating tokens")?;
    let new: NewToken = serde_json::from_str(&body).map_err(|e| bad("body", format!("token request: {e}")))?;
    let secret = crate::auth::new_secret().map_err(|e| ApiError(ControlError::Internal(e.to_string())))?;
    let hash = crate::auth::hash(&secret);
    shared
        .execute(Command::CreateToken {
            who,
            name: new.name.clone(),
            role: new.role,
            queues: new.queues,
            hash,
            node: new.node,
            lifetime_s: new.expires_in_s,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(TokenSecret { name: new.name, secret })))
}

#[utoipa::path(get, path = "/v1/tokens", tag = "tokens",
    responses((status = 200, description = "Every token, without secrets or hashes", body = [TokenRecord]), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody)))]
async fn list_tokens(State(shared): State<Shared>, headers: HeaderMap) -> Result<Json<Vec<TokenRecord>>, ApiError> {
    let who = who(&shared, &headers)?;
    Ok(Json(shared.read(|c| views::tokens(c, &who))?))
}

#[utoipa::path(delete, path = "/v1/tokens/{name}", tag = "tokens", params(("name" = String, Path, description = "Token name")),
    responses((status = 204, description = "Revoked; it stops working at once"), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody),
        (status = 409, description = "The token making the request: revoke it with another admin token", body = ErrorBody)))]
async fn revoke_token(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let who = who(&shared, &headers)?;
    who.admin_only("revoking tokens")?;
    shared.execute(Command::RevokeToken { who, name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/nodes", tag = "nodes",
    responses((status = 200, description = "Every node: readiness, GPUs, allocation, utilization, jobs", body = [NodeView]), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody)))]
async fn nodes(State(shared): State<Shared>, headers: HeaderMap) -> Result<Json<Vec<NodeView>>, ApiError> {
    let who = who(&shared, &headers)?;
    Ok(Json(shared.read(|c| views::nodes::seen_by(views::nodes::nodes(c, now_s()), c, &who))))
}

#[utoipa::path(get, path = "/v1/partitions", tag = "nodes",
    responses((status = 200, description = "The queue file's Slurm partitions with their nodes and limits, and its QOS names", body = gantry_api::partitions::Partitions), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody)))]
async fn partitions(
    State(shared): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<gantry_api::partitions::Partitions>, ApiError> {
    who(&shared, &headers)?;
    Ok(Json(shared.read(views::partitions::partitions)))
}

#[utoipa::path(post, path = "/v1/nodes/{name}/drain", tag = "nodes", params(("name" = String, Path, description = "Node name")),
    responses((status = 200, description = "Drained: nothing new starts there", body = Drained), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody)))]
async fn drain(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Drained>, ApiError> {
    set_drained(&shared, &headers, name, true).await
}

#[utoipa::path(post, path = "/v1/nodes/{name}/resume", tag = "nodes", params(("name" = String, Path, description = "Node name")),
    responses((status = 200, description = "Resumed", body = Drained), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody), (status = 404, description = "Not found", body = ErrorBody)))]
async fn resume(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Drained>, ApiError> {
    set_drained(&shared, &headers, name, false).await
}

/// `POST /v1/nodes/{name}/lost` (admin): the node's agent is known dead — its jobs end now
/// (requeued unless they say `requeue = false`), their GPUs are freed; tasks it still runs
/// are killed if its agent comes back.
#[utoipa::path(post, path = "/v1/nodes/{name}/lost", tag = "nodes", params(("name" = String, Path, description = "Node name")),
    responses((status = 200, description = "Lost", body = NodeLost), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Admins only", body = ErrorBody), (status = 404, description = "No such node", body = ErrorBody)))]
async fn node_lost(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> Result<Json<NodeLost>, ApiError> {
    let who = who(&shared, &headers)?;
    match shared.execute(Command::NodeLost { who, node: node.clone() }).await? {
        Reply::Lost { changed } => Ok(Json(NodeLost { node, changed })),
        other => Err(unexpected(other)),
    }
}

async fn set_drained(
    shared: &Shared,
    headers: &HeaderMap,
    node: String,
    drained: bool,
) -> Result<Json<Drained>, ApiError> {
    let who = who(shared, headers)?;
    // A resumed node has room: the command asks for a cycle now rather than at the next tick.
    match shared.execute(Command::Drain { who, node: node.clone(), drained }).await? {
        Reply::Drained { changed } => Ok(Json(Drained { node, drained, changed })),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/usage`: chargeback from the accounting ledger — allocation and measured use side
/// by side, waste, in GPU-hours and money (prices from the controller's `[billing]`).
#[utoipa::path(get, path = "/v1/usage", tag = "usage", params(UsageQuery),
    responses((status = 200, description = "One line per user, queue, model or job", body = [crate::meter::UsageLine]),
        (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token", body = ErrorBody)))]
async fn usage(
    State(shared): State<Shared>,
    headers: HeaderMap,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<Vec<crate::meter::UsageLine>>, ApiError> {
    let who = who(&shared, &headers)?;
    let Query(q) = query
        .map_err(|e| bad("query", format!("usage: {e} (from/to: Unix seconds; by: user, queue, model or job)")))?;
    if let Some(past) =
        [("from", q.from), ("to", q.to)].into_iter().find(|(_, t)| t.is_some_and(|t| t > i64::MAX as u64))
    {
        return Err(bad(
            past.0,
            format!("usage: {} is past the largest time the API takes ({})", past.1.unwrap_or_default(), i64::MAX),
        ));
    }
    let now = now_s();
    let hour = gantry_store::USAGE_BUCKET_S;
    let from = q.from.unwrap_or(now.saturating_sub(30 * 24 * 3600));
    let to = q.to.unwrap_or(now);
    if from > to {
        return Err(bad("from", format!("usage: from ({from}) is after to ({to})")));
    }
    // The store keeps times as SQLite integers: anything past year 10^11 is "the end".
    let (from, to) = (from.min(1 << 60), to.min(1 << 60));
    let (from, to) = (from - from % hour, to.div_ceil(hour) * hour);
    let by = q.by.unwrap_or(crate::meter::UsageBy::Queue);
    Ok(Json(usage_lines(&shared, &who, from, to, by)?))
}

/// `GET /metrics`: the controller's state for Prometheus (any token but an agent's; a
/// read-only token is the one to give a scraper), in the format the `Accept` header asks for.
#[utoipa::path(get, path = "/metrics", tag = "service",
    params(("Accept" = Option<String>, Header, description = "`application/openmetrics-text` for OpenMetrics 1.0.0 (what Prometheus asks for first); anything else, or none, for the classic text format 0.0.4")),
    responses((status = 200, description = "The controller's state (names in docs/formats.md)", content(
            (String = "text/plain"),
            (String = "application/openmetrics-text"))),
        (status = 401, description = "Missing or unknown token", body = ErrorBody), (status = 403, description = "Not allowed for this token", body = ErrorBody)))]
async fn metrics(State(shared): State<Shared>, headers: HeaderMap) -> Result<Response, ApiError> {
    let who = who(&shared, &headers)?;
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = crate::metrics::Format::negotiate(accept);
    let process = crate::metrics::process::ProcessStats::read();
    let http = shared.http.snapshot();
    let scrape = crate::metrics::Scrape { process: &process, http: &http, format };
    let text = shared.read(|c| views::metrics::metrics(c, &who, now_s(), &scrape))?;
    Ok(([(axum::http::header::CONTENT_TYPE, format.content_type())], text).into_response())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SeriesQuery {
    /// `hour` (a point every 10 s, the default) or `week` (5-minute averages).
    #[param(pattern = "^(hour|week)$")]
    range: Option<String>,
}

/// `GET /v1/series`: allocation next to utilization over time, fleet-wide and per queue.
#[utoipa::path(get, path = "/v1/series", tag = "usage", params(SeriesQuery),
    responses((status = 200, description = "Points, oldest first", body = [crate::series::Point]),
        (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody)))]
async fn series(
    State(shared): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<SeriesQuery>, QueryRejection>,
) -> Result<Json<Vec<crate::series::Point>>, ApiError> {
    let who = who(&shared, &headers)?;
    let q = query(q, "series")?;
    let fine = match q.range.as_deref() {
        None | Some("hour") => true,
        Some("week") => false,
        Some(other) => return Err(bad("range", format!("range {other:?}: use hour or week"))),
    };
    Ok(Json(shared.read(|c| views::series(c, &who, fine))))
}

/// `GET /v1/plan`: what the online MIG planner would change now, for the waiting and running
/// jobs (with `reconfigure = "auto"` the controller's own changes are in
/// `/v1/reconfigurations`).
#[utoipa::path(get, path = "/v1/plan", tag = "nodes",
    responses((status = 200, description = "Reconfigurations and drains the online planner would make now", body = crate::views::PlanView),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "An agent token", body = ErrorBody)))]
async fn plan(State(shared): State<Shared>, headers: HeaderMap) -> Result<Json<crate::views::PlanView>, ApiError> {
    who(&shared, &headers)?.not_agent()?;
    Ok(Json(shared.read(|c| views::plan::plan_advice(c, now_s()))?))
}

/// `GET /v1/reconfigurations`: GPU reconfigurations under way and the latest finished.
#[utoipa::path(get, path = "/v1/reconfigurations", tag = "nodes",
    responses((status = 200, description = "Reconfigurations under way and recent, with reasons and totals", body = crate::views::ReconfigurationsView),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "An agent token", body = ErrorBody)))]
async fn reconfigurations(
    State(shared): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<crate::views::ReconfigurationsView>, ApiError> {
    let who = who(&shared, &headers)?;
    who.not_agent()?;
    Ok(Json(shared.read(|c| views::reconfig::reconfigurations(c, &who))))
}

/// `GET /v1/idle`: jobs flagged for holding GPUs they do not use (newest last).
#[utoipa::path(get, path = "/v1/idle", tag = "usage",
    responses((status = 200, description = "Idle events, newest last (at most 1,000)", body = [crate::idle::IdleEvent]),
        (status = 401, description = "Missing or unknown token", body = ErrorBody)))]
async fn idle(State(shared): State<Shared>, headers: HeaderMap) -> Result<Json<Vec<crate::idle::IdleEvent>>, ApiError> {
    let who = who(&shared, &headers)?;
    Ok(Json(shared.read(|c| views::idle_events(c, &who))))
}
