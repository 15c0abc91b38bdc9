//! The server's errors: [`Error`] for starting and running the server, and [`ApiError`], what a
//! request fails with: an HTTP status and a JSON body `{"error": {"code", "message", "details"}}`
//! whose `code` is one of the stable [`ErrorCode`]s.
//!
//! Lower layers' errors become API errors through their shared [`ErrorClass`]. This module must
//! never put a secret (an API key, a database password) into a message, and never answer a
//! request with a non-JSON error body.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pattern::ErrorClass;
use serde::Serialize;
use utoipa::ToSchema;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can stop the server itself (not one request).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The listening socket failed.
    #[error("server I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A lower layer failed while the server was being set up.
    #[error(transparent)]
    Pattern(#[from] pattern::Error),
}

/// The stable machine-readable codes of error bodies. A code is never renamed or removed;
/// clients branch on it, not on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// No `Authorization: Bearer` header (401).
    MissingApiKey,
    /// The key is unknown, malformed or revoked (401).
    InvalidApiKey,
    /// No such resource visible to the caller's organization (404). Another organization's
    /// resources answer this too: their existence is never revealed.
    NotFound,
    /// No such route (404).
    UnknownRoute,
    /// The method is not allowed on this route (405).
    MethodNotAllowed,
    /// The resource's state forbids this now: a name taken, a stale version, out of turn (409).
    Conflict,
    /// The request is malformed: a bad id, label, parameter or field (400).
    InvalidRequest,
    /// The body is not valid JSON for this endpoint (400).
    InvalidJson,
    /// The body is not `application/json` (415).
    UnsupportedMediaType,
    /// The body is over the server's size limit (413).
    PayloadTooLarge,
    /// Well-formed but refused: over a limit, not permitted (422).
    Refused,
    /// The request took longer than the server's limit (504); a turn it started keeps running.
    Timeout,
    /// A dependency (the database) is not available; retry later (503).
    Unavailable,
    /// The agent's model failed during a turn (502). The user message stays stored.
    ProviderFailed,
    /// Storage failed during a turn (503). The user message stays stored when
    /// `details.message_saved` is true; retry the batch once storage is back.
    StorageFailed,
    /// The turn's context does not fit the model's window (422).
    ContextOverBudget,
    /// The turn was cancelled (409).
    Cancelled,
    /// The agent is suspended; the message waits in its queue (202 semantics, reported as 409).
    Suspended,
    /// The process running the turn stopped (a crash or a shutdown that could not wait), or its
    /// run lost the agent to recovery (503): the batch was abandoned, the message stays stored;
    /// retry the batch.
    Interrupted,
    /// A fault on the server's side (500).
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::MissingApiKey | ErrorCode::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ErrorCode::NotFound | ErrorCode::UnknownRoute => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Conflict | ErrorCode::Cancelled | ErrorCode::Suspended => {
                StatusCode::CONFLICT
            }
            ErrorCode::InvalidRequest | ErrorCode::InvalidJson => StatusCode::BAD_REQUEST,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::Refused | ErrorCode::ContextOverBudget => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorCode::Unavailable | ErrorCode::StorageFailed | ErrorCode::Interrupted => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorCode::ProviderFailed => StatusCode::BAD_GATEWAY,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The code a lower layer's error class maps to.
    pub fn from_class(class: ErrorClass) -> Self {
        match class {
            ErrorClass::NotFound => ErrorCode::NotFound,
            ErrorClass::Conflict => ErrorCode::Conflict,
            ErrorClass::Invalid => ErrorCode::InvalidRequest,
            ErrorClass::Refused => ErrorCode::Refused,
            ErrorClass::Unavailable => ErrorCode::Unavailable,
            _ => ErrorCode::Internal,
        }
    }
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error inside [`ErrorBody`].
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable code.
    pub code: ErrorCode,
    /// One line for humans; may change between releases.
    pub message: String,
    /// Facts for the client (for turns: `turn_id`, `batch_id`, `message_saved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

/// A failed request: a code, a message and optional details.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// Stable code (decides the status).
    pub code: ErrorCode,
    /// One line for humans.
    pub message: String,
    /// Facts for the client.
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The same error with details attached.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// An invalid request (400).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// Nothing by that name for this caller (404).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    fn from_classified(class: ErrorClass, e: &dyn std::error::Error) -> Self {
        let code = ErrorCode::from_class(class);
        match code {
            // The cause goes to the log, not to the client: it is the database's own text.
            ErrorCode::Internal => {
                tracing::error!(error = %one_line(e), "internal error answering a request");
                Self::new(code, "internal error; see the server log")
            }
            ErrorCode::Unavailable => {
                tracing::warn!(error = %one_line(e), "a dependency failed answering a request");
                Self::new(
                    code,
                    "storage is unavailable for the moment; retry shortly (the cause is in the \
                     server log)",
                )
            }
            _ => Self::new(code, one_line(e)),
        }
    }
}

pub use pattern_api::one_line;

impl From<pattern::Error> for ApiError {
    fn from(e: pattern::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<pattern::db::Error> for ApiError {
    fn from(e: pattern::db::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<pattern::memory::Error> for ApiError {
    fn from(e: pattern::memory::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<pattern::search::Error> for ApiError {
    fn from(e: pattern::search::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<pattern::protocol::Error> for ApiError {
    fn from(e: pattern::protocol::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<pattern::core::Error> for ApiError {
    fn from(e: pattern::core::Error) -> Self {
        Self::from_classified(e.class(), &e)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let code = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            _ => ErrorCode::InvalidJson,
        };
        Self::new(code, rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                details: self.details,
            },
        };
        (self.code.status(), Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialise_as_stable_snake_case() {
        let text = serde_json::to_string(&ErrorCode::PayloadTooLarge).unwrap();
        assert_eq!(text, "\"payload_too_large\"");
        assert_eq!(
            ErrorCode::from_class(ErrorClass::NotFound).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            ErrorCode::StorageFailed.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn internal_errors_hide_their_cause() {
        let e = pattern::db::Error::Storage(pattern::db::StorageError::Corrupt(
            "row 7 of secrets".into(),
        ));
        let api = ApiError::from(e);
        assert_eq!(api.code, ErrorCode::Internal);
        assert!(!api.message.contains("secrets"), "{}", api.message);
    }
}
