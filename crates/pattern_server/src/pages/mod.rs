//! The console's pages that work without JavaScript (decision 0022): read-only HTML rendered on
//! the server under `/console/*`, behind a login form that opens a console session.
//!
//! `POST /console/login` takes an organization API key from a plain form and opens a session in
//! the database (`pattern_db::console`); the browser gets only the session's token, in a cookie
//! that is `HttpOnly`, `SameSite=Strict`, `Path=/console` (and `Secure` when the request came
//! over HTTPS through a proxy that says so). The cookie authorises the `GET` pages of this module
//! only: the `/v1` API never reads cookies (its [`Caller`] takes the `Authorization` header), so a
//! cookie can never act on the API, and there is no page that writes, so there is nothing for a
//! cross-site request to forge; login and logout refuse requests another site sent (`Origin`,
//! `Sec-Fetch-Site`). Each page calls the same route handlers as `/v1` with the session's
//! organization, so it shows exactly what the API shows to that organization's key: another
//! organization's id is "not found". Every datum is written as text ([`html`]). This module must
//! never accept the cookie for a write, never render a datum as markup, and never put a key or
//! token in a page or a URL.

mod diff;
mod html;
mod read;

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, HeaderName, LOCATION, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;
use html::Html;

/// The cookie holding a console session's token.
pub(crate) const COOKIE_NAME: &str = "pattern_console";
/// Where the login form is.
const LOGIN: &str = "/console/login";
/// Where a login lands.
const HOME: &str = "/console/agents";

/// The pages' routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(LOGIN, get(login_form).post(login))
        .route("/console/logout", axum::routing::post(logout))
        .route(HOME, get(read::agents))
        .route("/console/agents/{agent_id}", get(read::agent))
        .route("/console/agents/{agent_id}/batches", get(read::batches))
        .route(
            "/console/agents/{agent_id}/batches/{batch_id}",
            get(read::batch),
        )
        .route("/console/agents/{agent_id}/blocks", get(read::blocks))
        .route(
            "/console/agents/{agent_id}/blocks/{label}",
            get(read::block),
        )
        .route("/console/agents/{agent_id}/archival", get(read::archival))
        .route("/console/agents/{agent_id}/context", get(read::context))
        .route("/console/meetings", get(read::meetings))
        .route("/console/meetings/{meeting_id}", get(read::meeting))
        .route("/console/sessions", get(read::sessions))
        .route("/console/sessions/{session_id}", get(read::session))
        .route("/console/approvals", get(read::approvals))
}

/// The caller of a page: the organization of a live console session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageCaller(pub(crate) Caller);

impl FromRequestParts<AppState> for PageCaller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(token) = session_cookie(&parts.headers) else {
            return Err(to_login(Note::None, false));
        };
        match state.pattern().db().console_session(token).await {
            Ok(Some(session)) => Ok(PageCaller(Caller {
                org: session.key.organization,
                key: session.key.id,
            })),
            // Expired, ended, revoked or made up: forget it and say so.
            Ok(None) => Err(to_login(Note::Ended, true)),
            Err(e) => Err(error_page(&ApiError::from(e))),
        }
    }
}

/// The value of this console's cookie in a request.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim())
}

/// Whether the request came over HTTPS, as a proxy in front says (`X-Forwarded-Proto`,
/// `Forwarded: proto=https`): the cookie is then `Secure`.
fn over_https(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get("forwarded")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split([';', ','])
                .any(|p| p.trim().eq_ignore_ascii_case("proto=https"))
        });
    forwarded_proto || forwarded
}

fn cookie(value: &str, max_age: u64, secure: bool) -> Option<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={value}; Path=/console; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .ok()
}

/// Whether a form post came from another site (refused: login and logout are this site's own).
/// A browser's `Sec-Fetch-Site` (which no page can set) decides when present; otherwise an
/// `Origin` must name this host. (Pages are sent with `Referrer-Policy: no-referrer`, under
/// which browsers send `Origin: null` even for this site's own forms.)
fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.to_str(), Ok("same-origin" | "none"));
    }
    let host = headers.get("host").and_then(|v| v.to_str().ok());
    match headers.get("origin").map(|v| v.to_str().ok()) {
        None => false,
        Some(Some(origin)) => {
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            authority.is_none() || authority != host
        }
        Some(None) => true,
    }
}

/// What the login form says when the browser is sent back to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// Nothing (no session yet).
    None,
    /// The session ended, expired or never existed.
    Ended,
    /// The user logged out.
    Out,
}

/// A `303 See Other` to the login form with `note`; `forget` clears the cookie.
fn to_login(note: Note, forget: bool) -> Response {
    let location = match note {
        Note::None => LOGIN,
        Note::Ended => "/console/login?ended",
        Note::Out => "/console/login?out",
    };
    let mut response = (
        StatusCode::SEE_OTHER,
        [(LOCATION, HeaderValue::from_static(location))],
    )
        .into_response();
    if forget && let Some(value) = cookie("", 0, false) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    headers(response)
}

/// The headers of every page: same-origin policy, no caching of data, no sniffing.
fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(crate::console::CONTENT_SECURITY_POLICY),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// A whole page: the layout around `body`, titled `title`; `nav` when logged in.
pub(crate) fn page(status: StatusCode, title: &str, nav: bool, body: Html) -> Response {
    let mut out = Html::default();
    out.raw(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
    )
    .text(title)
    .raw(
        " · Pattern console</title>\n\
         <link rel=\"icon\" href=\"/console/icon.svg\" type=\"image/svg+xml\">\n\
         <link rel=\"stylesheet\" href=\"/console/style.css\">\n</head>\n<body class=\"pages\">\n\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\n<header>\
         <span class=\"brand\">Pattern</span>",
    );
    if nav {
        out.raw(
            "<nav aria-label=\"Main\"><a href=\"/console/agents\">Agents</a>\
             <a href=\"/console/meetings\">Meetings</a><a href=\"/console/sessions\">Sessions</a>\
             <a href=\"/console/approvals\">Approvals</a>\
             <form class=\"inline\" method=\"post\" action=\"/console/logout\">\
             <button type=\"submit\" class=\"secondary\">Log out</button></form></nav>",
        );
    }
    out.raw("</header>\n<main id=\"main\" tabindex=\"-1\">\n<h1>")
        .text(title)
        .raw("</h1>\n");
    let mut text = out.finish();
    text.push_str(&body.finish());
    text.push_str("\n</main>\n</body>\n</html>\n");
    headers(
        (
            status,
            [(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
    )
}

/// An API error as a page: its status, its message as text ("Not found" for 404).
pub(crate) fn error_page(error: &ApiError) -> Response {
    let status = error.code.status();
    let title = match error.code {
        ErrorCode::NotFound => "Not found",
        _ if status.is_server_error() => "Server error",
        _ => "Refused",
    };
    let mut body = Html::default();
    body.el("<p class=\"error\" role=\"alert\">", &error.message, "</p>")
        .raw("<p><a href=\"/console/agents\">Back to the agents</a></p>");
    page(status, title, true, body)
}

async fn login_form(uri: axum::http::Uri) -> Response {
    let note = match uri.query() {
        Some("ended") => Some("Your console session has ended or is not valid: log in again."),
        Some("out") => Some("You are logged out."),
        _ => None,
    };
    login_page(StatusCode::OK, note)
}

fn login_page(status: StatusCode, note: Option<&'static str>) -> Response {
    let mut body = Html::default();
    if let Some(note) = note {
        body.raw("<p class=\"error\" role=\"alert\">")
            .raw(note)
            .raw("</p>");
    }
    body.raw(
        "<p>These pages read your organization's agents, memory, meetings and sessions without \
         JavaScript. Logging in keeps a session cookie for these pages only (not the key); the \
         <a href=\"/\">full console</a> needs JavaScript.</p>\
         <form method=\"post\" action=\"/console/login\">\
         <label>Organization API key <input name=\"key\" type=\"password\" autocomplete=\"off\" \
         required></label><button type=\"submit\">Log in</button></form>",
    );
    page(status, "Log in", false, body)
}

/// The key field of the login form (`application/x-www-form-urlencoded`).
#[derive(Debug, serde::Deserialize)]
struct LoginForm {
    key: String,
}

async fn login(State(state): State<AppState>, request_headers: HeaderMap, body: Bytes) -> Response {
    if cross_site(&request_headers) {
        return login_page(
            StatusCode::FORBIDDEN,
            Some("Refused: the login form must be sent from this site."),
        );
    }
    let Ok(form) = serde_urlencoded::from_bytes::<LoginForm>(&body) else {
        return login_page(
            StatusCode::BAD_REQUEST,
            Some("Send the form with an organization API key."),
        );
    };
    // A configured lifetime outside what the database accepts is brought within it.
    let lifetime = state.config().console_session.clamp(
        Duration::from_secs(1),
        pattern::db::console::MAX_CONSOLE_SESSION,
    );
    match state
        .pattern()
        .db()
        .open_console_session(form.key.trim(), lifetime)
        .await
    {
        Ok(Some(issued)) => {
            // The new session replaces the browser's previous one, if it had one.
            if let Some(token) = session_cookie(&request_headers)
                && let Err(e) = state.pattern().db().end_console_session(token).await
            {
                tracing::warn!(error = %e, "ending the replaced console session failed");
            }
            let mut response = (
                StatusCode::SEE_OTHER,
                [(LOCATION, HeaderValue::from_static(HOME))],
            )
                .into_response();
            if let Some(value) = cookie(
                &issued.token,
                lifetime.as_secs(),
                over_https(&request_headers),
            ) {
                response.headers_mut().insert(SET_COOKIE, value);
            }
            headers(response)
        }
        Ok(None) => login_page(
            StatusCode::UNAUTHORIZED,
            Some("That API key is unknown or revoked."),
        ),
        Err(e) => error_page(&ApiError::from(e)),
    }
}

async fn logout(State(state): State<AppState>, request_headers: HeaderMap) -> Response {
    if cross_site(&request_headers) {
        return login_page(
            StatusCode::FORBIDDEN,
            Some("Refused: logging out must be asked from this site."),
        );
    }
    if let Some(token) = session_cookie(&request_headers)
        && let Err(e) = state.pattern().db().end_console_session(token).await
    {
        return error_page(&ApiError::from(e));
    }
    to_login(Note::Out, true)
}

/// How long a console session lasts by default.
pub(crate) const DEFAULT_SESSION: Duration = Duration::from_secs(8 * 3600);

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::{cross_site, over_https, session_cookie};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; pattern_console=pcs_x ; b=2")]);
        assert_eq!(session_cookie(&h), Some("pcs_x"));
        assert_eq!(session_cookie(&headers(&[("cookie", "a=1")])), None);
        assert_eq!(
            session_cookie(&headers(&[("cookie", "xpattern_console=1")])),
            None
        );
    }

    #[test]
    fn forms_from_other_sites_are_refused() {
        assert!(!cross_site(&headers(&[("host", "h:1")])));
        assert!(!cross_site(&headers(&[
            ("host", "h:1"),
            ("origin", "http://h:1"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(cross_site(&headers(&[
            ("host", "h:1"),
            ("origin", "http://evil.example")
        ])));
        assert!(cross_site(&headers(&[("host", "h:1"), ("origin", "null")])));
        assert!(cross_site(&headers(&[
            ("host", "h:1"),
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(cross_site(&headers(&[
            ("host", "h:1"),
            ("sec-fetch-site", "same-site")
        ])));
        // A browser's own form under `no-referrer`.
        assert!(!cross_site(&headers(&[
            ("host", "h:1"),
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ])));
    }

    #[test]
    fn https_is_what_the_proxy_says() {
        assert!(over_https(&headers(&[("x-forwarded-proto", "https")])));
        assert!(over_https(&headers(&[(
            "forwarded",
            "for=1.2.3.4;proto=https"
        )])));
        assert!(!over_https(&headers(&[("x-forwarded-proto", "http")])));
        assert!(!over_https(&HeaderMap::new()));
    }
}
