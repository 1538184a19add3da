//! What the API served: requests by route, method and status code, and how long each route
//! took to answer. Labels are the router's route templates (`/v1/jobs/{id}`), never the path
//! a client typed, so a scanner probing random paths adds one `unmatched` series, not one per
//! path.

use super::Histogram;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// Answer times: a millisecond to a minute (a held heartbeat waits up to its poll time).
pub const DURATION_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0];

/// The route label of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// Counts since the controller started.
#[derive(Debug, Default)]
pub struct HttpStats {
    inner: Mutex<HttpCounts>,
}

/// Per route: requests by (method, code), and answer times.
#[derive(Clone, Debug, Default)]
pub struct HttpCounts {
    pub routes: BTreeMap<String, RouteCounts>,
}

#[derive(Clone, Debug)]
pub struct RouteCounts {
    pub requests: BTreeMap<(&'static str, u16), u64>,
    pub durations: Histogram,
}

impl HttpStats {
    /// Count one answer (a route is named in memory once, at its first request).
    pub fn record(&self, route: &str, method: &'static str, code: u16, seconds: f64) {
        let mut counts = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !counts.routes.contains_key(route) {
            let fresh = RouteCounts { requests: BTreeMap::new(), durations: Histogram::new(DURATION_BUCKETS) };
            counts.routes.insert(route.to_string(), fresh);
        }
        if let Some(r) = counts.routes.get_mut(route) {
            *r.requests.entry((method, code)).or_default() += 1;
            r.durations.observe(seconds);
        }
    }

    pub fn snapshot(&self) -> HttpCounts {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

/// Middleware: time each request and count its answer under its route.
pub async fn record(State(stats): State<std::sync::Arc<HttpStats>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = known_method(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let route = route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    stats.record(route, method, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}

/// The method as a label: the standard ones by name, anything else as `other` (a client may
/// send any token there).
fn known_method(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}
