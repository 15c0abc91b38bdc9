//! The web console: a small page served at `/` (HTML, one script, one style sheet, all embedded
//! in the binary at build time from `crates/pattern_server/console/`) that drives the `/v1` API
//! from the browser with an organization's API key kept in the tab's `sessionStorage`.
//!
//! The console holds no logic of its own on the server: it is static files, and every datum it
//! shows comes from the same key-checked `/v1` routes any client uses, so it sees exactly what
//! the key's organization sees. Its answers carry a Content-Security-Policy that allows only this
//! origin (scripts, styles, fetches) and no inline script, so the page can make no external
//! request and injected markup could not run. This module must never embed data, a key or
//! anything read at run time into the assets, and never serve a file from the disk.

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/style.css");
const ICON: &str = include_str!("../console/icon.svg");

/// Only this origin, no inline script or style, no frames, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The console's paths (outside `/v1`, without a key: the files hold no data).
pub(crate) const PATHS: [&str; 4] = [
    "/",
    "/console/app.js",
    "/console/style.css",
    "/console/icon.svg",
];

/// The console's routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            PATHS[0],
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            PATHS[1],
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            PATHS[2],
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(PATHS[3], get(|| async { asset(ICON, "image/svg+xml") }))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                HeaderName::from_static("content-security-policy"),
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
            (
                HeaderName::from_static("referrer-policy"),
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::{INDEX, SCRIPT};

    #[test]
    fn the_assets_name_no_other_origin() {
        for (name, text) in [("index.html", INDEX), ("app.js", SCRIPT)] {
            for needle in ["http://", "https://", "//cdn", "fonts.googleapis"] {
                assert!(!text.contains(needle), "{name} contains {needle}");
            }
        }
    }

    #[test]
    fn the_script_never_writes_markup() {
        for needle in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(needle), "app.js uses {needle}");
        }
    }
}
