//! The one place a domain error becomes an HTTP status: the API's answers, the dashboard's
//! pages and the in-process agents' link all ask here.

use crate::error::ControlError;
use axum::http::StatusCode;

/// The one place a domain error becomes an HTTP status.
pub fn status_of(e: &ControlError) -> StatusCode {
    match e {
        ControlError::Workload(_)
        | ControlError::Job { .. }
        | ControlError::Request { .. }
        | ControlError::TokenField { .. }
        | ControlError::Agent { .. }
        | ControlError::Log { .. }
        | ControlError::Setup { .. } => StatusCode::BAD_REQUEST,
        ControlError::UnknownJob(_)
        | ControlError::UnknownTask(_)
        | ControlError::UnknownNode(_)
        | ControlError::UnknownToken(_) => StatusCode::NOT_FOUND,
        ControlError::TokenExists(_) | ControlError::JobEnded { .. } | ControlError::Conflict(_) => {
            StatusCode::CONFLICT
        }
        ControlError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ControlError::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
        ControlError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        ControlError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
        ControlError::Forbidden(_) => StatusCode::FORBIDDEN,
        ControlError::StoreFailed(_) | ControlError::StoreFull(_) => StatusCode::SERVICE_UNAVAILABLE,
        ControlError::Sched(e) => {
            use gantry_engine::sched::SchedError;
            match e {
                SchedError::UnknownJob(_) => StatusCode::NOT_FOUND,
                SchedError::UnknownQueue { .. } => StatusCode::BAD_REQUEST,
                SchedError::NotWaiting { .. } => StatusCode::CONFLICT,
                SchedError::Engine(gantry_engine::EngineError::Fleet(_)) => StatusCode::NOT_FOUND,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            }
        }
        ControlError::Store(_) | ControlError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
