//! The node agents' side of the API over HTTP: registration and the heartbeat long poll (the
//! protocol's work is in `agent_service.rs`, which `serve --local`'s in-process agents call
//! too), the client certificate check, and the answers to output reads.

use super::*;
use crate::tls::{AgentCerts, PeerCert};
use axum::Extension;

/// `POST /v1/agents/register` (agent or admin token): a remote agent announces its node.
#[utoipa::path(post, path = "/v1/agents/register", tag = "agents", request_body = Register,
    responses((status = 200, description = "Registered: the node gets work while the agent heartbeats", body = Registered), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Agent or admin tokens only", body = ErrorBody), (status = 404, description = "Not a node of the fleet", body = ErrorBody),
        (status = 409, description = "The controller runs its own agent (--local)", body = ErrorBody)))]
pub(super) async fn register_agent(
    State(shared): State<Shared>,
    headers: HeaderMap,
    peer: Option<Extension<PeerCert>>,
    Text(body): Text,
) -> Result<Json<Registered>, ApiError> {
    let who = who(&shared, &headers)?;
    refuse_remote_agents(&shared)?;
    let node =
        serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["node"].as_str().map(str::to_string));
    check_client_cert(&shared, peer, node.as_deref().unwrap_or(""))?;
    Ok(Json(crate::agent_service::register(&shared, who, &body).await?))
}

/// A `--local` controller's nodes are served by its own in-process agents: an agent over the
/// network would take a node from them.
fn refuse_remote_agents(shared: &Shared) -> Result<(), ApiError> {
    if shared.local {
        return Err(ApiError(ControlError::Conflict(
            "this controller runs its own in-process agents (serve --local); remote agents need `gantry serve` without --local".into(),
        )));
    }
    Ok(())
}

/// Mutual TLS: a client certificate, when the connection presented one, must be for the
/// agent's node; with `--agent-certs required`, one must be presented.
fn check_client_cert(shared: &Shared, peer: Option<Extension<PeerCert>>, node: &str) -> Result<(), ApiError> {
    let peer = peer.map(|Extension(p)| p).unwrap_or(PeerCert(None));
    match (&peer.0, shared.agent_certs) {
        (Some(_), _) if !peer.names(node) => Err(ApiError(ControlError::Forbidden(format!(
            "the client certificate this agent presented is not for node {node:?}"
        )))),
        (None, AgentCerts::Required) => Err(ApiError(ControlError::Unauthenticated(format!(
            "this controller requires agents to present a client certificate for their node: \
             `gantry cert agent {node} --fleet FILE` on the controller host, then `gantry agent --tls-cert FILE --tls-key FILE`"
        )))),
        _ => Ok(()),
    }
}

/// `POST /v1/agents/{node}/heartbeat` (agent or admin token): the agent's report in, its
/// orders out; with nothing to order, held up to `wait_ms` for new orders (a long poll).
#[utoipa::path(post, path = "/v1/agents/{node}/heartbeat", tag = "agents", params(("node" = String, Path, description = "The agent's node")),
    request_body = Heartbeat,
    responses((status = 200, description = "The agent's orders", body = Orders), (status = 400, description = "Malformed request", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Agent or admin tokens only", body = ErrorBody),
        (status = 409, description = "Not registered since the controller started: register again", body = ErrorBody)))]
pub(super) async fn heartbeat(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(node): Path<String>,
    peer: Option<Extension<PeerCert>>,
    Text(body): Text,
) -> Result<Json<Orders>, ApiError> {
    let who = who(&shared, &headers)?;
    refuse_remote_agents(&shared)?;
    check_client_cert(&shared, peer, &node)?;
    Ok(Json(crate::agent_service::heartbeat(&shared, who, node, &body).await?))
}

/// The most an agent's answer to an output read may weigh: the bytes in base64 and the JSON
/// around them. The route has this limit of its own (the admission limit is for submissions).
pub(super) const LOG_CHUNK_BODY_MAX: usize = (crate::wire::LOG_READ_BYTES_MAX as usize).div_ceil(3) * 4 + 4096;

/// `POST /v1/agents/{node}/logs` (agent or admin token): a node's agent answers one of the
/// controller's output reads ([`Orders::log_reads`]) for one of its own tasks.
#[utoipa::path(post, path = "/v1/agents/{node}/logs", tag = "agents", params(("node" = String, Path, description = "The agent's node")),
    request_body = LogChunk,
    responses((status = 200, description = "Taken (`delivered`: a reader was waiting for it)", body = LogChunkTaken), (status = 400, description = "Malformed, or more than was asked", body = ErrorBody), (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 403, description = "Not this node's agent, or a read for another node", body = ErrorBody),
        (status = 409, description = "The controller runs its own agent (--local)", body = ErrorBody),
        (status = 413, description = "Larger than any answer can be", body = ErrorBody)))]
pub(super) async fn answer_log_read(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(node): Path<String>,
    peer: Option<Extension<PeerCert>>,
    Text(body): Text,
) -> Result<Json<LogChunkTaken>, ApiError> {
    let who = who(&shared, &headers)?;
    refuse_remote_agents(&shared)?;
    check_client_cert(&shared, peer, &node)?;
    who.serves(&node)?;
    let chunk: LogChunk = serde_json::from_str(&body).map_err(|e| bad("body", format!("output chunk: {e}")))?;
    let answered = shared.output.answer(&node, chunk)?;
    Ok(Json(LogChunkTaken { delivered: answered == crate::output::Answered::Delivered }))
}

/// What became of an agent's answer to an output read.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogChunkTaken {
    /// A reader was waiting for it (else it came too late, or twice, and was dropped).
    pub delivered: bool,
}
