//! What a standby controller answers while it waits to lead: every request gets a 503 that
//! says so (`X-Gantry-Standby: 1`, `Retry-After`), on the address it will serve from once it
//! leads, so a client given several URLs moves on to the leader and a person who asked this
//! one directly learns why nothing happens. While the store names a leader whose lease holds,
//! the answer names its URL too (`X-Gantry-Leader`): clients given that URL go there next.
//! Connections are closed after each answer: none is kept alive into the time this controller
//! leads.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokio::sync::oneshot;

use gantry_store::LeaderHint;
/// The header that marks a standby's answer (clients move on to the next server).
pub use gantry_wire::client::{LEADER_HEADER, STANDBY_HEADER};

async fn answer(axum::extract::State(seen): axum::extract::State<LeaderHint>) -> Response {
    let leader = seen.get().and_then(|url| HeaderValue::from_str(&url).ok().map(|header| (url, header)));
    let why = match &leader {
        Some((url, _)) => format!(
            "this controller is a standby: it leads (and answers) when the current leader stops; \
             the leader answers at {url}: send requests there, or give clients every controller's URL (--server A,B)"
        ),
        None => "this controller is a standby: it leads (and answers) when the current leader stops; \
                 send requests to the leader, or give clients every controller's URL (--server A,B)"
            .to_string(),
    };
    let mut response = not_leading(&why);
    if let Some((_, header)) = leader {
        response.headers_mut().insert(LEADER_HEADER, header);
    }
    response
}

/// A 503 marked as a standby's, with `why`: clients given several URLs move on.
pub fn not_leading(why: &str) -> Response {
    let body = axum::Json(serde_json::json!({ "error": why }));
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    let headers = response.headers_mut();
    headers.insert(STANDBY_HEADER, HeaderValue::from_static("1"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The standby's responder, until `stop` is sent.
#[derive(Debug)]
pub struct Responder {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Responder {
    /// Answer on `listener` (a clone of the socket the controller will serve from).
    /// `seen`: where the current leader answers, as the store last said.
    pub fn start(
        listener: tokio::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        seen: LeaderHint,
    ) -> Responder {
        let app = Router::new().fallback(answer).with_state(seen);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(crate::tls::serve_either(listener, tls, app, stopped));
        Responder { stop, task }
    }

    /// Stop answering (the controller leads now and serves on the same socket).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// A leader whose lease has lapsed (paused past it, and woken before it learns it was
/// replaced), or whose store failed, answers as a standby would: what it holds in memory may
/// be stale, and clients given several URLs move on to the one that leads now. Each answer
/// closes its connection, so no kept-alive connection outlives a controller that rejoins.
pub async fn lease_guard(
    axum::extract::State(shared): axum::extract::State<crate::Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if shared.fatal.borrow().is_some() {
        return not_leading(
            "this controller lost its store and is stepping down (it rejoins as a standby): another controller may lead now",
        );
    }
    if shared.lease.as_ref().is_some_and(|l| !l.fresh()) {
        return not_leading(
            "this controller's lease to lead has lapsed (it was paused or cut off): another controller may lead now; \
             it answers nothing it might hold stale",
        );
    }
    let answer = next.run(request).await;
    // Stepped down while it answered (a held heartbeat, a commit that failed): what it was
    // about to say may be stale; the client asks the leader instead.
    if shared.fatal.borrow().is_some() {
        return not_leading("this controller stepped down while it answered: another controller may lead now");
    }
    answer
}
