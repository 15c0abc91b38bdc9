//! `GET /v1/sessions` and `GET /v1/meetings` (organization walls, filters, paging, limits), and
//! the console's pages without JavaScript: login by form, a session cookie that opens only those
//! pages (never `/v1`), logout, expiry, walls, and data written as text.

use std::time::Duration;

use pattern_db::Backend;
use pattern_server::ServerConfig;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use serde_json::{Value, json};

use crate::support::Server;

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn session_and_meeting_lists_are_walled_filtered_and_paged(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let bob = s.agent(&s.key_a, "bob").await;
    let cy = s.agent(&s.key_a, "cy").await;
    let open =
        |from: &str, to: &str, kind: &str| json!({"from": from, "to": to, "session_type": kind});
    let (_, s1) = s
        .post(&s.key_a, "/v1/sessions", open(&ada, &bob, "sync"))
        .await;
    let (_, s2) = s
        .post(&s.key_a, "/v1/sessions", open(&bob, &cy, "async"))
        .await;
    let s1 = s1["id"].as_str().unwrap().to_owned();
    let s2 = s2["id"].as_str().unwrap().to_owned();
    let (status, _) = s
        .post(
            &s.key_a,
            &format!("/v1/sessions/{s1}/end"),
            json!({"agent": ada}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, m1) = s.post(&s.key_a, "/v1/meetings", json!({"host": ada})).await;
    let m1 = m1["id"].as_str().unwrap().to_owned();
    // Organization B's own.
    let dee = s.agent(&s.key_b, "dee").await;
    let eve = s.agent(&s.key_b, "eve").await;
    let (_, theirs) = s
        .post(&s.key_b, "/v1/sessions", open(&dee, &eve, "sync"))
        .await;
    let (_, their_meeting) = s.post(&s.key_b, "/v1/meetings", json!({"host": dee})).await;

    let (status, all) = s.get(&s.key_a, "/v1/sessions").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(
        ids(&all),
        vec![s2.clone(), s1.clone()],
        "newest first, A's only"
    );
    let (_, live) = s.get(&s.key_a, "/v1/sessions?status=live").await;
    assert_eq!(ids(&live), vec![s2.clone()]);
    let (_, ended) = s.get(&s.key_a, "/v1/sessions?status=ended").await;
    assert_eq!(ids(&ended), vec![s1.clone()]);
    assert_eq!(ended[0]["status"], "ended");
    let (_, first) = s.get(&s.key_a, "/v1/sessions?limit=1").await;
    assert_eq!(ids(&first), vec![s2.clone()]);
    let (_, next) = s
        .get(&s.key_a, &format!("/v1/sessions?limit=1&before={s2}"))
        .await;
    assert_eq!(ids(&next), vec![s1.clone()]);
    let (_, b_sessions) = s.get(&s.key_b, "/v1/sessions").await;
    assert_eq!(
        ids(&b_sessions),
        vec![theirs["id"].as_str().unwrap().to_owned()]
    );

    let (status, meetings) = s.get(&s.key_a, "/v1/meetings").await;
    assert_eq!(status, StatusCode::OK, "{meetings}");
    assert_eq!(ids(&meetings), vec![m1.clone()]);
    assert_eq!(meetings[0]["host"], ada.as_str());
    let (_, ended) = s.get(&s.key_a, "/v1/meetings?status=ended").await;
    assert!(ids(&ended).is_empty());
    let (_, b_meetings) = s.get(&s.key_b, "/v1/meetings?status=live").await;
    assert_eq!(
        ids(&b_meetings),
        vec![their_meeting["id"].as_str().unwrap().to_owned()]
    );

    // Limits and filters as the OpenAPI document states them: 1 to 100, live|ended|all.
    for path in ["/v1/sessions", "/v1/meetings"] {
        for bad in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=x",
            "status=open",
            "before=12",
            "what=1",
        ] {
            let (status, body) = s.get(&s.key_a, &format!("{path}?{bad}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}?{bad}: {body}");
            assert_eq!(body["error"]["code"], "invalid_request", "{path}?{bad}");
        }
        let (status, _) = s.get(&s.key_a, &format!("{path}?limit=100")).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = s.send(reqwest::Method::GET, None, path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let document = s.http.get(s.url("/openapi.json")).send().await.unwrap();
    let document: Value = document.json().await.unwrap();
    for path in ["/v1/sessions", "/v1/meetings"] {
        let params = &document["paths"][path]["get"]["parameters"];
        let limit = params
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert!(
            limit["description"].as_str().unwrap().contains("1 to 100"),
            "{limit}"
        );
    }
    s.stop().await;
}

/// Logs in through the form; the session cookie's value.
async fn login(s: &Server, key: &str) -> String {
    let client = no_redirects();
    let response = client
        .post(s.url("/console/login"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("key={}", key))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[LOCATION], "/console/agents");
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=3600",
    ] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    assert!(!set.contains(key), "the cookie is not the key");
    let pair = set.split(';').next().unwrap().to_owned();
    assert!(pair.starts_with("pattern_console=pcs_"), "{pair}");
    pair
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn page(s: &Server, cookie: Option<&str>, path: &str) -> (StatusCode, String, String) {
    let mut request = no_redirects().get(s.url(path));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location, response.text().await.unwrap())
}

async fn pages_read_with_a_session_cookie_that_never_opens_the_api(backend: Backend) {
    let config = ServerConfig {
        console_session: Duration::from_secs(3600),
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![], config).await;
    let evil = s.agent(&s.key_a, "<img src=x onerror=alert(1)>Ada").await;
    let (status, _) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{evil}/blocks"),
            json!({"label": "notes", "value": "<b>bold</b> & <img src=x onerror=alert(2)>"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let theirs = s.agent(&s.key_b, "quill").await;
    let bo = s.agent(&s.key_b, "bo").await;
    let (_, their_session) = s
        .post(
            &s.key_b,
            "/v1/sessions",
            json!({"from": theirs, "to": bo, "session_type": "sync"}),
        )
        .await;
    let (_, their_meeting) = s
        .post(&s.key_b, "/v1/meetings", json!({"host": theirs}))
        .await;
    let their_session = their_session["id"].as_str().unwrap().to_owned();
    let their_meeting = their_meeting["id"].as_str().unwrap().to_owned();
    // Organization A's session with a hostile first message, and a meeting.
    let ben = s.agent(&s.key_a, "ben").await;
    let (_, ours) = s
        .post(
            &s.key_a,
            "/v1/sessions",
            json!({"from": evil, "to": ben, "session_type": "sync",
                "message": "<script>alert(3)</script>hello"}),
        )
        .await;
    let our_session = ours["id"].as_str().unwrap().to_owned();
    let (_, ours) = s.post(&s.key_a, "/v1/meetings", json!({"host": ben})).await;
    let our_meeting = ours["id"].as_str().unwrap().to_owned();

    // Without a cookie: the login form.
    let (status, location, _) = page(&s, None, "/console/agents").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login")
    );
    let (status, _, form) = page(&s, None, "/console/login").await;
    assert_eq!(status, StatusCode::OK);
    assert!(form.contains("<form method=\"post\" action=\"/console/login\">"));
    // A wrong key is refused and opens nothing.
    let refused = no_redirects()
        .post(s.url("/console/login"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("key={}", "pat_wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().get(SET_COOKIE).is_none());
    assert!(refused.text().await.unwrap().contains("unknown or revoked"));
    // A form another site sent is refused.
    let forged = no_redirects()
        .post(s.url("/console/login"))
        .header("origin", "http://evil.example")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("key={}", s.key_a.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.headers().get(SET_COOKIE).is_none());

    let cookie = login(&s, &s.key_a).await;
    let (status, _, agents) = page(&s, Some(&cookie), "/console/agents").await;
    assert_eq!(status, StatusCode::OK, "{agents}");
    assert!(
        agents.contains("&lt;img src=x onerror=alert(1)&gt;Ada"),
        "{agents}"
    );
    assert!(!agents.contains("<img"), "no markup from data");
    assert!(!agents.contains("quill"), "B's agent is not listed");
    let (status, _, block) = page(
        &s,
        Some(&cookie),
        &format!("/console/agents/{evil}/blocks/notes"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{block}");
    assert!(block.contains("&lt;b&gt;bold&lt;/b&gt; &amp; &lt;img src=x onerror=alert(2)&gt;"));
    assert!(!block.contains("<img"));
    for path in [
        format!("/console/agents/{evil}"),
        format!("/console/agents/{evil}/batches"),
        format!("/console/agents/{evil}/blocks"),
        format!("/console/agents/{evil}/archival"),
        "/console/meetings".to_owned(),
        "/console/sessions?status=live".to_owned(),
        "/console/approvals".to_owned(),
    ] {
        let (status, _, body) = page(&s, Some(&cookie), &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert!(
            !body.contains("<img") && !body.contains("<script"),
            "{path}"
        );
    }
    // Another organization's ids: not found, exactly like unknown ones.
    for path in [
        format!("/console/agents/{theirs}"),
        format!("/console/agents/{theirs}/blocks"),
        "/console/agents/not-an-id".to_owned(),
        format!("/console/meetings/{theirs}"),
        format!("/console/sessions/{theirs}"),
        format!("/console/meetings/{their_meeting}"),
        format!("/console/sessions/{their_session}"),
    ] {
        let (status, _, body) = page(&s, Some(&cookie), &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(body.contains("<h1>Not found</h1>"), "{path}: {body}");
        assert!(
            !body.contains("quill"),
            "{path}: another organization's agent named"
        );
    }
    // Archival search by a GET form (a read), hits as text with scores; the context page.
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{evil}/archival"),
            json!({"text": "the <u>walrus</u> sleeps on ice"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, found) = page(
        &s,
        Some(&cookie),
        &format!("/console/agents/{evil}/archival?q=walrus&mode=fts"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert!(found.contains("<h2>Hits</h2>"), "{found}");
    assert!(found.contains("the &lt;u&gt;walrus&lt;/u&gt; sleeps on ice"));
    assert!(!found.contains("<u>"));
    assert!(found.contains("value=\"walrus\""));
    let (status, _, context) = page(
        &s,
        Some(&cookie),
        &format!("/console/agents/{evil}/context"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{context}");
    assert!(context.contains("<h2>Sections</h2>"), "{context}");
    assert!(context.contains("tokens"));
    // A's session: its transcript as text; A's meeting with its event log; lists link to them
    // and never to B's; a full page links to the older one.
    let (status, _, transcript) = page(
        &s,
        Some(&cookie),
        &format!("/console/sessions/{our_session}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{transcript}");
    assert!(transcript.contains("&lt;script&gt;alert(3)&lt;/script&gt;hello"));
    assert!(transcript.contains("ben"), "{transcript}");
    let (status, _, meeting) = page(
        &s,
        Some(&cookie),
        &format!("/console/meetings/{our_meeting}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{meeting}");
    assert!(
        meeting.contains("Event log") && meeting.contains("hosted by ben"),
        "{meeting}"
    );
    let (_, _, sessions) = page(&s, Some(&cookie), "/console/sessions").await;
    assert!(sessions.contains(&our_session) && !sessions.contains(&their_session));
    assert!(!sessions.contains(">Older<"), "one session fills no page");
    let (_, _, meetings) = page(&s, Some(&cookie), "/console/meetings?limit=1").await;
    assert!(meetings.contains(&our_meeting) && !meetings.contains(&their_meeting));
    assert!(
        meetings.contains(&format!(
            "/console/meetings?limit=1&amp;before={our_meeting}"
        )),
        "{meetings}"
    );
    let (status, _, body) = page(&s, Some(&cookie), "/console/sessions?limit=500").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("`limit` must be 1 to 100"), "{body}");

    // The cookie never opens the API, whatever the method.
    for (method, path) in [
        (reqwest::Method::GET, "/v1/agents".to_owned()),
        (reqwest::Method::GET, format!("/v1/agents/{evil}/blocks")),
        (reqwest::Method::DELETE, format!("/v1/agents/{evil}")),
    ] {
        let response = s
            .http
            .request(method.clone(), s.url(&path))
            .header(COOKIE, &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
    }
    let (status, _) = s.get(&s.key_a, &format!("/v1/agents/{evil}")).await;
    assert_eq!(status, StatusCode::OK, "nothing was deleted");

    // A made-up cookie, and the real one after logout: back to the login, told why.
    let made_up = format!("pattern_console=pcs_{}", "0".repeat(64));
    let (status, location, _) = page(&s, Some(&made_up), "/console/agents").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login?ended")
    );
    let (_, _, note) = page(&s, None, "/console/login?ended").await;
    assert!(note.contains("has ended or is not valid"));
    let out = no_redirects()
        .post(s.url("/console/logout"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        out.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, location, _) = page(&s, Some(&cookie), "/console/agents").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login?ended")
    );

    // The cookie lasts what the server is configured for.
    let fresh = login(&s, &s.key_a).await;
    assert!(fresh.starts_with("pattern_console=pcs_"));
    // Expiry: a session of two seconds (opened below the server), refused once it lapsed even
    // though the browser still sends it.
    let issued =
        s.db.open_console_session(&s.key_a, Duration::from_secs(2))
            .await
            .unwrap()
            .unwrap();
    let short = format!("pattern_console={}", issued.token);
    let (status, _, _) = page(&s, Some(&short), "/console/agents").await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, location, _) = page(&s, Some(&short), "/console/agents").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login?ended")
    );
    // Behind a TLS proxy the cookie is Secure.
    let response = no_redirects()
        .post(s.url("/console/login"))
        .header("x-forwarded-proto", "https")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("key={}", s.key_b.as_str()))
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
    s.stop().await;
}

conformance!(
    session_and_meeting_lists_are_walled_filtered_and_paged,
    pages_read_with_a_session_cookie_that_never_opens_the_api,
);
