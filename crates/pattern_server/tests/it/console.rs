//! The web console's files: served without a key, embedded, with a policy that keeps the page
//! to this origin; they carry no data (the data comes from `/v1` with the user's key).

use pattern_db::Backend;
use reqwest::StatusCode;

use crate::support::Server;

async fn the_console_is_served_at_the_root_with_a_same_origin_policy(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    for (path, kind, needle) in [
        ("/", "text/html", "/console/app.js"),
        ("/console/app.js", "text/javascript", "sessionStorage"),
        ("/console/style.css", "text/css", "system-ui"),
        ("/console/icon.svg", "image/svg+xml", "<svg"),
    ] {
        let response = s.http.get(s.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}: {:?}",
            headers["content-type"]
        );
        assert_eq!(
            headers["content-security-policy"],
            pattern_server::CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let body = response.text().await.unwrap();
        assert!(body.contains(needle), "{path}");
        assert!(!body.contains(&s.key_a), "{path} holds no key");
    }
    // Other paths are still the API's JSON 404.
    let (status, body) = s
        .send(reqwest::Method::GET, None, "/console/nothing.js", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "unknown_route");
    s.stop().await;
}

conformance!(the_console_is_served_at_the_root_with_a_same_origin_policy);
