//! Request bodies read as text, every refusal a JSON error like the rest of the API: a body
//! over `admission.body_bytes` is 413 naming the limit, one that is not UTF-8 is 400 — never
//! axum's plain-text rejections. Also the JSON answers for unknown paths and methods.

use super::{ApiError, ErrorBody};
use crate::Shared;
use crate::error::ControlError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{Method, StatusCode, Uri};

/// How long a client may take to send a request's body (1 MiB at 35 KB/s): a connection that
/// trickles its body is answered 408 and closed, instead of holding a worker and a
/// connection for as long as it likes.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A request body as UTF-8 text.
pub struct Text(pub String);

impl FromRequest<Shared> for Text {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Shared) -> Result<Self, Self::Rejection> {
        let read = tokio::time::timeout(BODY_READ_TIMEOUT, Bytes::from_request(req, state)).await.map_err(|_| {
            ApiError(ControlError::TooSlow(format!(
                "the request body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            )))
        })?;
        let bytes = read.map_err(|e| {
            ApiError(if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ControlError::TooLarge {
                    limit: "body_bytes",
                    value: state.admission.body_bytes as u64,
                    message: "the request body is too large".into(),
                }
            } else {
                ControlError::request("body", format!("cannot read the request body: {}", e.body_text()))
            })
        })?;
        String::from_utf8(bytes.into()).map(Text).map_err(|e| {
            ApiError(ControlError::request(
                "body",
                format!(
                    "the request body is not UTF-8 text (an invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            ))
        })
    }
}

/// No route here.
pub async fn not_found(method: Method, uri: Uri) -> (StatusCode, Json<ErrorBody>) {
    let error = format!("no endpoint {method} {} (the API is described at /openapi.json)", uri.path());
    (StatusCode::NOT_FOUND, Json(ErrorBody { error, ..ErrorBody::default() }))
}

/// A route that does not take this method.
pub async fn method_not_allowed(method: Method, uri: Uri) -> (StatusCode, Json<ErrorBody>) {
    let error = format!("{} does not take {method} (see /openapi.json)", uri.path());
    (StatusCode::METHOD_NOT_ALLOWED, Json(ErrorBody { error, ..ErrorBody::default() }))
}
