//! The layers around the routes, from `tower-http`: request timeout, body limit, request
//! tracing and (when configured) CORS; plus [`json_errors`], which gives the bare error answers
//! those layers make (504 on timeout, 413 over the body limit) this API's JSON error body.
//!
//! This module must never let a non-JSON error body out, and never allow a cross-origin caller
//! that [`CorsOrigins`] does not name.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::error::{ApiError, ErrorCode};
use crate::routes::turns::{IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER, TURN_ID_HEADER};
use crate::state::AppState;

/// Origins allowed to call the API from a browser. Empty (the default): no CORS headers, so
/// browsers allow same-origin calls only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsOrigins(Option<Vec<HeaderValue>>);

/// A CORS origin that is not `*` or `scheme://host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CORS origin `{origin}` refused: {reason}")]
pub struct BadOrigin {
    /// The origin as given.
    pub origin: String,
    /// Why.
    pub reason: &'static str,
}

impl CorsOrigins {
    /// No cross-origin access.
    pub fn none() -> Self {
        Self(None)
    }

    /// Any origin (`*`): only sensible when the API keys are not browser secrets.
    pub fn any() -> Self {
        Self(Some(Vec::new()))
    }

    /// These origins (`https://app.example.com`, `http://localhost:3000`), or `*` alone for any.
    pub fn parse<S: AsRef<str>>(origins: &[S]) -> Result<Self, BadOrigin> {
        if origins.is_empty() {
            return Ok(Self::none());
        }
        if origins.iter().any(|o| o.as_ref() == "*") {
            if origins.len() > 1 {
                return Err(BadOrigin {
                    origin: "*".into(),
                    reason: "`*` allows every origin and cannot be combined with others",
                });
            }
            return Ok(Self::any());
        }
        let mut parsed = Vec::with_capacity(origins.len());
        for origin in origins {
            let origin = origin.as_ref();
            let bad = |reason| BadOrigin {
                origin: origin.to_owned(),
                reason,
            };
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
                .ok_or_else(|| bad("an origin starts with http:// or https://"))?;
            if rest.is_empty() || rest.contains(['/', '?', '#', ' ']) {
                return Err(bad(
                    "an origin is scheme://host[:port], without a path, query or spaces",
                ));
            }
            parsed.push(HeaderValue::from_str(origin).map_err(|_| bad("not a header value"))?);
        }
        Ok(Self(Some(parsed)))
    }

    fn layer(&self) -> Option<CorsLayer> {
        let origins = self.0.as_ref()?;
        let allow = if origins.is_empty() {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(origins.iter().cloned())
        };
        Some(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
                .allow_headers([
                    AUTHORIZATION,
                    CONTENT_TYPE,
                    HeaderName::from_static(IDEMPOTENCY_KEY_HEADER),
                    HeaderName::from_static("last-event-id"),
                ])
                .expose_headers([
                    HeaderName::from_static(TURN_ID_HEADER),
                    HeaderName::from_static(REPLAYED_HEADER),
                ])
                .max_age(Duration::from_secs(600)),
        )
    }
}

/// Cuts `timed` routes at the request timeout.
pub(crate) fn timed(router: Router<AppState>, limit: Duration) -> Router<AppState> {
    router.layer(TimeoutLayer::with_status_code(
        StatusCode::GATEWAY_TIMEOUT,
        limit,
    ))
}

/// The layers every route gets, outermost last: body limit, JSON error bodies, tracing, CORS.
pub(crate) fn around(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let config = state.config();
    let router = router
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(config.max_body_bytes))
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            json_errors,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                .on_failure(DefaultOnFailure::new().level(Level::WARN)),
        );
    match config.cors.layer() {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Gives an error answer without a JSON body (made by a layer, not a handler) this API's JSON
/// error body.
async fn json_errors(State(state): State<AppState>, response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        // The console's pages answer their errors as pages (`crate::pages`).
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if json {
        return response;
    }
    let error = match status {
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => ApiError::new(
            ErrorCode::Timeout,
            format!(
                "the request took longer than {} ms",
                state.config().request_timeout.as_millis()
            ),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the body is over the limit of {} bytes",
                state.config().max_body_bytes
            ),
        ),
        s if s.is_server_error() => {
            tracing::error!(status = %s, "a layer answered a server error without a body");
            ApiError::new(ErrorCode::Internal, "internal error; see the server log")
        }
        s => ApiError::invalid(format!("request refused ({s})")),
    };
    error.into_response()
}

#[cfg(test)]
mod tests {
    //! Origin parsing.

    use super::*;

    #[test]
    fn origins() {
        assert_eq!(CorsOrigins::parse::<&str>(&[]), Ok(CorsOrigins::none()));
        assert_eq!(CorsOrigins::parse(&["*"]), Ok(CorsOrigins::any()));
        assert!(CorsOrigins::parse(&["https://a.example", "http://localhost:3000"]).is_ok());
        for bad in [
            "a.example",
            "https://a.example/path",
            "https://",
            "ftp://a.example",
            "https://a b",
        ] {
            assert!(CorsOrigins::parse(&[bad]).is_err(), "{bad}");
        }
        assert!(CorsOrigins::parse(&["*", "https://a.example"]).is_err());
    }
}
