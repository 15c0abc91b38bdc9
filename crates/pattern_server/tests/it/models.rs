//! Agents of different models served by one server: two OpenAI-compatible endpoints on loopback
//! (tiny axum servers that record the model each request names and answer `from MODEL`), one
//! agent on each, each turn going to its own endpoint with its own model; a model the endpoint
//! does not know fails the turn with the provider's message, the message kept and the batch
//! abandoned, and the agent runs again once its model is set right; malformed models are 400.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode as AxumStatus, header};
use axum::response::{IntoResponse, Response};
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

/// An OpenAI-compatible endpoint that records the `model` of every request.
struct Endpoint {
    base_url: String,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

async fn completions(
    State(seen): State<Arc<Mutex<Vec<String>>>>,
    Json(body): Json<Value>,
) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_owned();
    seen.lock().unwrap().push(model.clone());
    if model.starts_with("missing") {
        let error = json!({"error": {
            "message": format!("The model `{model}` does not exist"),
            "type": "invalid_request_error", "code": "model_not_found",
        }});
        return (AxumStatus::NOT_FOUND, Json(error)).into_response();
    }
    let sse = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": format!("from {model}")}), None),
        chunk(json!({}), Some("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    ([(header::CONTENT_TYPE, "text/event-stream")], sse).into_response()
}

impl Endpoint {
    async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(completions))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base_url,
            seen,
            task,
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn model(name: &str, endpoint: &Endpoint) -> Value {
    json!({"provider": "openai_compatible", "model": name, "base_url": endpoint.base_url})
}

async fn say(s: &Server, agent: &str, content: &str) -> (StatusCode, Value) {
    s.post(
        &s.key_a,
        &format!("/v1/agents/{agent}/messages"),
        json!({"content": content}),
    )
    .await
}

async fn put_model(s: &Server, agent: &str, body: Value) -> (StatusCode, Value) {
    s.send(
        reqwest::Method::PUT,
        Some(&s.key_a),
        &format!("/v1/agents/{agent}/model"),
        Some(body),
    )
    .await
}

async fn one_server_serves_agents_of_different_models(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let (a, b) = (Endpoint::start().await, Endpoint::start().await);
    let mut ids = Vec::new();
    for (name, m) in [("ann", model("model-a", &a)), ("bob", model("model-b", &b))] {
        let (status, body) = s
            .post(&s.key_a, "/v1/agents", json!({"name": name, "model": m}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["metadata"]["model"], m, "stored with the agent");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let (ann, bob) = (&ids[0], &ids[1]);
    for round in 0..2 {
        let (status, body) = say(&s, ann, "hello").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["text"], "from model-a");
        let (status, body) = say(&s, bob, "hello").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["text"], "from model-b");
        assert_eq!(
            a.seen(),
            vec!["model-a"; round + 1],
            "only ann's turns reach A"
        );
        assert_eq!(
            b.seen(),
            vec!["model-b"; round + 1],
            "only bob's turns reach B"
        );
    }
    // The scripted default model was never asked.
    assert_eq!(s.provider.calls(), 0);
    s.stop().await;
}

async fn a_model_the_provider_refuses_fails_the_turn_and_nothing_is_lost(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let a = Endpoint::start().await;
    let (status, body) = s
        .post(
            &s.key_a,
            "/v1/agents",
            json!({"name": "cat", "model": model("missing-model", &a)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let cat = body["id"].as_str().unwrap().to_owned();
    let (status, body) = say(&s, &cat, "remember the milk").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["error"]["code"], "provider_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("missing-model"),
        "the provider's reason: {body}"
    );
    assert_eq!(body["error"]["details"]["message_saved"], true, "{body}");
    let batch = body["error"]["details"]["batch_id"].as_str().unwrap();
    let (_, detail) = s
        .get(&s.key_a, &format!("/v1/agents/{cat}/batches/{batch}"))
        .await;
    assert_eq!(detail["state"], "abandoned");
    assert_eq!(detail["messages"][0]["text"], "remember the milk");

    // Set right, the same agent runs at once, and the earlier message is still there.
    let (status, body) = put_model(&s, &cat, json!({"model": model("model-a", &a)})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["model"]["model"], "model-a");
    let (status, body) = say(&s, &cat, "hello again").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["text"], "from model-a");
    assert_eq!(a.seen(), ["missing-model", "model-a"]);
    let (_, detail) = s
        .get(&s.key_a, &format!("/v1/agents/{cat}/batches/{batch}"))
        .await;
    assert_eq!(detail["messages"][0]["text"], "remember the milk");

    // Malformed models are refused before anything is stored.
    for bad in [
        json!({"model": {"provider": "nope", "model": "x"}}),
        json!({"model": {"provider": "openai_compatible", "model": "x"}}),
        json!({"model": {"provider": "openai", "model": ""}}),
        json!({"model": {"provider": "local", "model": "x", "base_url": "http://h/v1"}}),
        json!({"model": {"provider": "openai", "model": "x", "base_url": "ftp://h"}}),
    ] {
        let (status, body) = put_model(&s, &cat, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    }
    let (_, shown) = s.get(&s.key_a, &format!("/v1/agents/{cat}")).await;
    assert_eq!(shown["metadata"]["model"]["model"], "model-a");

    // `null` returns it to the server's default (the scripted model here).
    s.provider
        .push(pattern::core::testkit::Turn::text("from the default"));
    let (status, body) = put_model(&s, &cat, json!({"model": null})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["metadata"].get("model").is_none(), "{body}");
    let (status, body) = say(&s, &cat, "and now?").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["text"], "from the default");
    // Another organization cannot see or change it.
    let (status, _) = s
        .send(
            reqwest::Method::PUT,
            Some(&s.key_b),
            &format!("/v1/agents/{cat}/model"),
            Some(json!({"model": model("model-a", &a)})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await;
}

conformance!(
    one_server_serves_agents_of_different_models,
    a_model_the_provider_refuses_fails_the_turn_and_nothing_is_lost
);
