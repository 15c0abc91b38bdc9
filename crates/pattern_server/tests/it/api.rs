//! Authentication, organization isolation, bad input, and the memory/archival/search/batch
//! routes, through a real server on loopback.

use std::time::Duration;

use futures::StreamExt;
use pattern::ContentBlock;
use pattern::core::testkit::Turn;
use pattern_db::Backend;
use pattern_server::ServerConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Server, until_end};

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

async fn keys_are_required_checked_and_revocable(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let (status, body) = s.send(Method::GET, None, "/v1/agents", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "missing_api_key");
    let (status, body) = s.get("pat_0000", "/v1/agents").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "invalid_api_key");
    let response = s
        .http
        .get(s.url("/v1/agents"))
        .header("authorization", format!("Basic {}", s.key_a))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // The scheme is case-insensitive (RFC 9110).
    for scheme in ["bearer", "BEARER"] {
        let response = s
            .http
            .get(s.url("/v1/agents"))
            .header("authorization", format!("{scheme} {}", s.key_a))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
    }

    // A revoked key stops working at once.
    let org = s
        .state
        .pattern()
        .protocol()
        .organization("org-a")
        .await
        .unwrap();
    let issued = s.db.create_api_key(org.id, "short-lived").await.unwrap();
    assert_eq!(s.get(&issued.secret, "/v1/agents").await.0, StatusCode::OK);
    s.db.revoke_api_key(org.id, issued.key.id).await.unwrap();
    let (status, body) = s.get(&issued.secret, "/v1/agents").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "invalid_api_key");

    // Open routes.
    for path in ["/health", "/ready", "/openapi.json"] {
        let (status, _) = s.send(Method::GET, None, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    s.stop().await;
}

async fn readiness_hides_the_database_error(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    assert_eq!(
        s.send(Method::GET, None, "/ready", None).await.0,
        StatusCode::OK
    );
    s.db.clone().close().await;
    let (status, body) = s.send(Method::GET, None, "/ready", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(code(&body), "unavailable");
    assert_eq!(
        body["error"]["message"], "the database does not answer",
        "the cause stays in the log"
    );
    s.stop().await;
}

async fn organizations_never_see_each_others_data(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("hello from A")]).await;
    let a = s.agent(&s.key_a, "helper").await;
    // The same name in another organization is another agent.
    let b = s.agent(&s.key_b, "helper").await;
    assert_ne!(a, b);
    let (_, listed) = s.get(&s.key_a, "/v1/agents").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["name"], "helper");

    // A's agent gets a block, a passage and a turn.
    let (status, _) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/blocks"),
            json!({"label": "human", "value": "likes tea"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, passage) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/archival"),
            json!({"text": "the secret recipe uses cardamom"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, turn) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "hi"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{turn}");
    let batch = turn["batch_id"].as_str().unwrap().to_owned();
    let pid = passage["id"].as_str().unwrap().to_owned();

    // B sees none of it, through any route, and cannot change it.
    let reads = [
        format!("/v1/agents/{a}"),
        format!("/v1/agents/{a}/blocks"),
        format!("/v1/agents/{a}/blocks/human"),
        format!("/v1/agents/{a}/blocks/human/history"),
        format!("/v1/agents/{a}/archival"),
        format!("/v1/agents/{a}/archival/{pid}"),
        format!("/v1/agents/{a}/batches"),
        format!("/v1/agents/{a}/batches/{batch}"),
        format!("/v1/agents/{a}/inbox"),
    ];
    for path in &reads {
        let (status, body) = s.get(&s.key_b, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(code(&body), "not_found", "{path}");
    }
    let writes = [
        (
            format!("/v1/agents/{a}/messages"),
            json!({"content": "steal"}),
        ),
        (format!("/v1/agents/{a}/blocks"), json!({"label": "x"})),
        (
            format!("/v1/agents/{a}/blocks/human/append"),
            json!({"text": "hacked", "expected_version": 1}),
        ),
        (
            format!("/v1/agents/{a}/archival"),
            json!({"text": "planted"}),
        ),
        (
            format!("/v1/agents/{a}/search"),
            json!({"query": "cardamom"}),
        ),
        (format!("/v1/agents/{a}/batches/{batch}/retry"), json!({})),
        (
            "/v1/sessions".to_owned(),
            json!({"from": b, "to": a, "session_type": "async"}),
        ),
    ];
    for (path, body) in &writes {
        let (status, answer) = s.post(&s.key_b, path, body.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {answer}");
    }
    // B's own agent's batch id namespace does not reach A's batch either.
    let (status, _) = s
        .get(&s.key_b, &format!("/v1/agents/{b}/batches/{batch}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for path in [
        format!("/v1/agents/{a}/archival/{pid}"),
        format!("/v1/agents/{a}"),
    ] {
        let (status, _) = s.delete(&s.key_b, &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    // B's search sees only B's agent's content.
    let (status, hits) = s
        .post(
            &s.key_b,
            &format!("/v1/agents/{b}/search"),
            json!({"query": "cardamom", "mode": "fts"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{hits}");
    assert_eq!(hits.as_array().unwrap().len(), 0);

    // A's data is untouched.
    let (_, block) = s
        .get(&s.key_a, &format!("/v1/agents/{a}/blocks/human"))
        .await;
    assert_eq!(block["value"], "likes tea");
    assert_eq!(block["version"], 1);
    let (_, passages) = s.get(&s.key_a, &format!("/v1/agents/{a}/archival")).await;
    assert_eq!(passages.as_array().unwrap().len(), 1);
    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(batches.as_array().unwrap().len(), 1);
    assert_eq!(s.provider.calls(), 1, "B's message never reached the model");
    s.stop().await;
}

async fn bad_input_gets_json_errors_with_stable_codes(backend: Backend) {
    let config = ServerConfig {
        max_body_bytes: 2048,
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![], config).await;
    let a = s.agent(&s.key_a, "strict").await;
    let url = s.url(&format!("/v1/agents/{a}/archival"));
    let raw = |body: &'static str, content_type: Option<&'static str>| {
        let mut r = s.http.post(&url).bearer_auth(&s.key_a).body(body);
        if let Some(t) = content_type {
            r = r.header("content-type", t);
        }
        r
    };
    let cases = [
        (
            raw("{not json", Some("application/json")),
            400,
            "invalid_json",
        ),
        (
            raw("{\"text\": 5}", Some("application/json")),
            400,
            "invalid_json",
        ),
        (
            raw(
                "{\"text\": \"x\", \"surprise\": 1}",
                Some("application/json"),
            ),
            400,
            "invalid_json",
        ),
        (
            raw("{\"text\": \"x\"}", None),
            415,
            "unsupported_media_type",
        ),
    ];
    for (request, status, expected) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(code(&body), expected, "{body}");
    }
    // Over the size limit: refused whole, nothing stored.
    let big = "x".repeat(4096);
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/archival"),
            json!({"text": big}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&body), "payload_too_large");
    let (_, passages) = s.get(&s.key_a, &format!("/v1/agents/{a}/archival")).await;
    assert_eq!(passages.as_array().unwrap().len(), 0);

    let (status, body) = s.get(&s.key_a, "/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "unknown_route");
    let (status, body) = s
        .send(Method::PATCH, Some(&s.key_a), "/v1/agents", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(code(&body), "method_not_allowed");
    let (status, body) = s.get(&s.key_a, "/v1/agents/not-a-uuid").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "not_found");
    // Path segments that are not percent-encoded UTF-8: JSON errors too (`Server::send` fails
    // on a body that is not JSON).
    for (method, path) in [
        (Method::GET, "/v1/agents/%FF".to_owned()),
        (Method::GET, format!("/v1/agents/{a}/blocks/%C3%28")),
        (Method::DELETE, format!("/v1/agents/{a}/turns/%FF%FE")),
        (Method::GET, "/v1/meetings/%FF/messages".to_owned()),
    ] {
        let (status, body) = s.send(method, Some(&s.key_a), &path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(code(&body), "invalid_request", "{path}");
    }
    let (status, body) = s
        .get(&s.key_a, &format!("/v1/agents/{a}/batches?limit=0"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "invalid_request");
    let (status, body) = s.post(&s.key_a, "/v1/agents", json!({"name": "a/b"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "invalid_request");
    let (status, body) = s
        .post(&s.key_a, "/v1/agents", json!({"name": "strict"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(code(&body), "conflict");
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "  "}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/search"),
            json!({"query": "x", "mode": "psychic"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Blocks: over the limit is refused (nothing cut), a stale version is a conflict.
    let blocks = format!("/v1/agents/{a}/blocks");
    let (status, _) = s
        .post(
            &s.key_a,
            &blocks,
            json!({"label": "notes", "value": "v1", "char_limit": 10}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = s
        .send(
            Method::PUT,
            Some(&s.key_a),
            &format!("{blocks}/notes"),
            Some(json!({"value": "far too long for ten", "expected_version": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(code(&body), "refused");
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("{blocks}/notes/append"),
            json!({"text": "v2", "expected_version": 7}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, block) = s.get(&s.key_a, &format!("{blocks}/notes")).await;
    assert_eq!(block["value"], "v1");
    s.stop().await;
}

async fn another_organization_cannot_change_blocks_or_turns(backend: Backend) {
    let s = Server::start(
        backend,
        vec![Turn::Slow(
            Duration::from_millis(1500),
            vec![ContentBlock::text("finished anyway")],
        )],
    )
    .await;
    let a = s.agent(&s.key_a, "owner").await;
    let b = s.agent(&s.key_b, "intruder").await;
    let blocks = format!("/v1/agents/{a}/blocks");
    let (status, _) = s
        .post(&s.key_a, &blocks, json!({"label": "human", "value": "v1"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = s
        .send(
            Method::PUT,
            Some(&s.key_a),
            &format!("{blocks}/human"),
            Some(json!({"value": "v2", "expected_version": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // B can neither set nor undo A's block, even with the right version.
    let (status, body) = s
        .send(
            Method::PUT,
            Some(&s.key_b),
            &format!("{blocks}/human"),
            Some(json!({"value": "hacked", "expected_version": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (status, body) = s
        .post(
            &s.key_b,
            &format!("{blocks}/human/undo"),
            json!({"expected_version": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (_, block) = s.get(&s.key_a, &format!("{blocks}/human")).await;
    assert_eq!(
        (&block["value"], &block["version"]),
        (&json!("v2"), &json!(2))
    );
    let (_, history) = s.get(&s.key_a, &format!("{blocks}/human/history")).await;
    assert_eq!(history.as_array().unwrap().len(), 2);

    // A turn of A's, still running: B can neither read, follow nor cancel it, through A's
    // agent id or its own.
    let (turn, mut events) = s.stream_message(&a, "take your time").await;
    assert_eq!(events.next().await.unwrap().event, "received");
    for agent in [&a, &b] {
        for path in [
            format!("/v1/agents/{agent}/turns/{turn}"),
            format!("/v1/agents/{agent}/turns/{turn}/events"),
        ] {
            let (status, body) = s.get(&s.key_b, &path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
            assert_eq!(code(&body), "not_found", "{path}");
        }
        let path = format!("/v1/agents/{agent}/turns/{turn}");
        let (status, body) = s.delete(&s.key_b, &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(code(&body), "not_found", "{path}");
    }
    let rest = until_end(&mut events).await;
    assert_eq!(rest.last().unwrap().event, "done", "not cancelled");
    let (_, finished) = s
        .get(&s.key_a, &format!("/v1/agents/{a}/turns/{turn}"))
        .await;
    assert_eq!(finished["result"]["text"], "finished anyway", "{finished}");
    s.stop().await;
}

async fn bad_input_to_a_turn_is_refused_and_stores_nothing(backend: Backend) {
    let config = ServerConfig {
        max_body_bytes: 2048,
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![], config).await;
    let a = s.agent(&s.key_a, "guarded").await;
    let url = s.url(&format!("/v1/agents/{a}/messages"));
    let big = format!("{{\"content\": \"{}\"}}", "x".repeat(4096));
    let cases: [(String, Option<&str>, bool, u16, &str); 8] = [
        (
            "{not json".into(),
            Some("application/json"),
            false,
            400,
            "invalid_json",
        ),
        (
            "{not json".into(),
            Some("application/json"),
            true,
            400,
            "invalid_json",
        ),
        (
            "{\"content\": \"hi\", \"surprise\": 1}".into(),
            Some("application/json"),
            false,
            400,
            "invalid_json",
        ),
        (
            "{\"content\": 5}".into(),
            Some("application/json"),
            false,
            400,
            "invalid_json",
        ),
        (
            "{}".into(),
            Some("application/json"),
            false,
            400,
            "invalid_json",
        ),
        (
            "{\"content\": \"hi\"}".into(),
            None,
            false,
            415,
            "unsupported_media_type",
        ),
        (
            big.clone(),
            Some("application/json"),
            false,
            413,
            "payload_too_large",
        ),
        (
            big,
            Some("application/json"),
            true,
            413,
            "payload_too_large",
        ),
    ];
    for (body, content_type, stream, status, expected) in cases {
        let mut request = s.http.post(&url).bearer_auth(&s.key_a).body(body.clone());
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        if stream {
            request = request.header("accept", "text/event-stream");
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{body:.60}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{body:.60}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(code(&answer), expected, "{body:.60}: {answer}");
    }
    // A well-formed agent id that names no agent.
    let (status, body) = s
        .post(
            &s.key_a,
            "/v1/agents/0191d2b3-4c5d-7e6f-8a9b-0c1d2e3f4a5b/messages",
            json!({"content": "anyone there?"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");

    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(
        batches.as_array().unwrap().len(),
        0,
        "nothing stored: {batches}"
    );
    assert_eq!(s.provider.calls(), 0);
    s.stop().await;
}

async fn memory_archival_search_and_batches_round_trip(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("noted")]).await;
    let a = s.agent(&s.key_a, "scribe").await;
    let blocks = format!("/v1/agents/{a}/blocks");
    let (status, created) = s
        .post(
            &s.key_a,
            &blocks,
            json!({"label": "human", "description": "the user", "value": "Ada"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["version"], 1);
    let (status, set) = s
        .send(
            Method::PUT,
            Some(&s.key_a),
            &format!("{blocks}/human"),
            Some(json!({"value": "Ada Lovelace", "expected_version": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let (_, appended) = s
        .post(
            &s.key_a,
            &format!("{blocks}/human/append"),
            json!({"text": "likes engines", "expected_version": 2}),
        )
        .await;
    assert_eq!(appended["value"], "Ada Lovelace\nlikes engines");
    let (_, undone) = s
        .post(
            &s.key_a,
            &format!("{blocks}/human/undo"),
            json!({"expected_version": 3}),
        )
        .await;
    assert_eq!(undone["value"], "Ada Lovelace");
    let (_, history) = s.get(&s.key_a, &format!("{blocks}/human/history")).await;
    assert_eq!(history.as_array().unwrap().len(), 4);
    let (_, listed) = s.get(&s.key_a, &blocks).await;
    assert_eq!(listed[0]["label"], "human");

    let archival = format!("/v1/agents/{a}/archival");
    let (_, first) = s
        .post(
            &s.key_a,
            &archival,
            json!({"text": "Ada wrote the first program", "tags": ["history"], "key": "k1"}),
        )
        .await;
    // The same key again returns the stored passage and stores nothing.
    let (_, again) = s
        .post(
            &s.key_a,
            &archival,
            json!({"text": "Ada wrote the first program", "key": "k1"}),
        )
        .await;
    assert_eq!(first["id"], again["id"]);
    let (_, page) = s
        .get(&s.key_a, &format!("{archival}?tag=history&limit=10"))
        .await;
    assert_eq!(page.as_array().unwrap().len(), 1);
    s.state
        .pattern()
        .search_db()
        .wait_idle(Duration::from_secs(10))
        .await
        .unwrap();
    let (status, hits) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/search"),
            json!({"query": "program", "mode": "fts"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{hits}");
    assert_eq!(hits[0]["content_type"], "archival");
    assert_eq!(hits[0]["text"], "Ada wrote the first program");
    let pid = first["id"].as_str().unwrap();
    assert_eq!(
        s.delete(&s.key_a, &format!("{archival}/{pid}")).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.delete(&s.key_a, &format!("{archival}/{pid}")).await.0,
        StatusCode::NOT_FOUND
    );

    let (_, turn) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "remember me"}),
        )
        .await;
    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(batches[0]["id"], turn["batch_id"]);
    assert_eq!(batches[0]["state"], "complete");
    let (_, detail) = s
        .get(
            &s.key_a,
            &format!(
                "/v1/agents/{a}/batches/{}",
                turn["batch_id"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(detail["messages"][0]["text"], "remember me");
    assert_eq!(detail["messages"][1]["text"], "noted");

    // Deleting the agent removes it and its data.
    assert_eq!(
        s.delete(&s.key_a, &format!("/v1/agents/{a}")).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.get(&s.key_a, &format!("/v1/agents/{a}")).await.0,
        StatusCode::NOT_FOUND
    );
    s.stop().await;
}

async fn the_openapi_document_describes_every_route(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let (status, doc) = s.send(Method::GET, None, "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    // The document describes exactly the routes the router serves, methods included.
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in [
            "get", "put", "post", "delete", "patch", "head", "options", "trace",
        ] {
            if item.get(method).is_some() {
                documented.insert((method.to_owned(), path.clone()));
            }
        }
    }
    let served: std::collections::BTreeSet<(String, String)> = pattern_server::routes()
        .into_iter()
        .map(|(method, path)| (method.as_str().to_lowercase(), path.to_owned()))
        .collect();
    assert_eq!(documented, served);
    assert!(served.contains(&("get".into(), "/openapi.json".into())));
    assert!(served.len() >= 38, "{served:?}");

    // Every route the table names is one the router answers (not `unknown_route`, not
    // `method_not_allowed`), whatever its ids.
    for (method, path) in &served {
        if path == "/metrics" {
            // Prometheus text, not JSON: answered, with its own content type.
            let response = s.http.get(s.url(path)).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert!(
                response.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/plain")
            );
            continue;
        }
        let path = path
            .replace("{action}", "join")
            .replace("{label}", "human")
            .replace('{', "x")
            .replace('}', "");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let body = (method == Method::POST || method == Method::PUT).then(|| json!({}));
        let (_, answer) = s.send(method.clone(), Some(&s.key_a), &path, body).await;
        let answered = answer["error"]["code"].as_str().unwrap_or("ok");
        assert!(
            !["unknown_route", "method_not_allowed"].contains(&answered),
            "{method} {path}: {answer}"
        );
    }

    // What routes share: 401 on keyed routes, 413/415 with a body, 504 under the timeout.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let responses = &op["responses"];
            let keyed = path.starts_with("/v1/");
            assert_eq!(op["security"].is_array(), keyed, "{method} {path}");
            // `/metrics` takes a token of its own when one is configured.
            let refusable = keyed || path == "/metrics";
            assert_eq!(responses["401"].is_object(), refusable, "{method} {path}");
            let has_body = op["requestBody"].is_object();
            for status in ["413", "415"] {
                assert_eq!(
                    responses[status].is_object(),
                    has_body,
                    "{method} {path} {status}"
                );
            }
            let streaming = path.ends_with("/events")
                || path.ends_with("/retry")
                || path == "/v1/agents/{agent_id}/messages";
            assert_eq!(
                responses["504"].is_object(),
                keyed && !streaming,
                "{method} {path}"
            );
        }
    }
    assert!(doc["components"]["responses"]["Unauthorized"].is_object());
    // The headers of turns.
    for path in [
        "/v1/agents/{agent_id}/messages",
        "/v1/agents/{agent_id}/batches/{batch_id}/retry",
    ] {
        let op = &doc["paths"][path]["post"];
        let params: Vec<&str> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(params.contains(&"Idempotency-Key"), "{path}: {params:?}");
        assert!(params.contains(&"Accept"), "{path}: {params:?}");
        let ok = &op["responses"]["200"];
        for header in ["x-pattern-turn-id", "Location", "x-pattern-replayed"] {
            assert!(ok["headers"][header].is_object(), "{path}: {header}");
        }
        assert!(ok["content"]["text/event-stream"].is_object(), "{path}");
    }
    assert!(doc["components"]["schemas"]["ErrorCode"].is_object());
    assert!(doc["components"]["securitySchemes"]["api_key"].is_object());
    s.stop().await;
}

async fn slow_requests_time_out_but_turns_are_exempt(backend: Backend) {
    // A zero limit: a request that has to wait for the database times out. (A request whose
    // queries all finish within its first poll beats even a zero limit, which a fast SQLite
    // worker thread often allows: ask until one has to wait.)
    let config = ServerConfig {
        request_timeout: Duration::ZERO,
        ..ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![Turn::text("in time")], config).await;
    let mut timed_out = 0;
    for _ in 0..200 {
        let (status, body) = s.get(&s.key_a, "/v1/agents").await;
        if status == StatusCode::GATEWAY_TIMEOUT {
            assert_eq!(code(&body), "timeout");
            timed_out += 1;
            if timed_out == 3 {
                break;
            }
        } else {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    assert_eq!(
        timed_out, 3,
        "requests that waited for the database timed out"
    );
    // Turns are exempt: the message route still answers (agent created below the API, since
    // every other route times out).
    let agent = s
        .state
        .pattern()
        .db()
        .create_org_agent(
            s.state
                .pattern()
                .protocol()
                .organization("org-a")
                .await
                .unwrap()
                .id,
            pattern::NewAgent::named("slowpoke"),
        )
        .await
        .unwrap();
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{}/messages", agent.id),
            json!({"content": "hi"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["text"], "in time");
    s.stop().await;
}

conformance!(
    slow_requests_time_out_but_turns_are_exempt,
    keys_are_required_checked_and_revocable,
    readiness_hides_the_database_error,
    organizations_never_see_each_others_data,
    another_organization_cannot_change_blocks_or_turns,
    bad_input_to_a_turn_is_refused_and_stores_nothing,
    bad_input_gets_json_errors_with_stable_codes,
    memory_archival_search_and_batches_round_trip,
    the_openapi_document_describes_every_route,
);
