//! [`ApiError`]: every failure of a handler, rendered as the Agent Server renders it: a status code
//! and `{"detail": "…"}`. A request the server cannot accept is always a 4xx; 5xx is kept for
//! failures of the server's own storage or of the agent's assembly.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed request: its status and the message clients show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The message (`detail` in the body).
    pub detail: String,
}

impl ApiError {
    /// An error with this status and message.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
    }

    /// 401: no API key, or one the server does not know.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, detail)
    }

    /// 404: no such thing, or one that belongs to another user (the two look the same).
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    /// 409: the thread already exists, or is running a task.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }

    /// 422: the request is well-formed JSON but asks for something invalid or not built.
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }

    /// 500: the server's storage or the agent's assembly failed. The cause is logged; the client
    /// gets only a short message.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!("{context}: {error}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{context}: internal error"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "detail": self.detail }))).into_response()
    }
}

/// What a handler returns.
pub type ApiResult<T> = Result<T, ApiError>;
