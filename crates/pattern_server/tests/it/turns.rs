//! The incremental-save flow through HTTP: final responses, SSE streams resumed by event id,
//! cancellation, a client that goes away, and failure scenarios A (the model dies mid-turn, also
//! after a committed tool step) and B (storage refuses a step, also one with a tool call and its
//! result), each followed by a retry, answered as JSON and over a stream.

use std::time::Duration;

use futures::StreamExt;
use pattern::ContentBlock;
use pattern::core::provider::ProviderError;
use pattern::core::testkit::Turn;
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Server, until_end};

async fn a_turn_answers_after_its_message_is_stored(backend: Backend) {
    let s = Server::start(
        backend,
        vec![
            Turn::call("c1", "archival_insert", json!({"content": "Ada likes tea"})),
            Turn::text("I will remember that."),
        ],
    )
    .await;
    let a = s.agent(&s.key_a, "rememberer").await;
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "I like tea"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["text"], "I will remember that.");
    assert_eq!(body["reason"], "completed");
    assert_eq!(body["tool_calls"][0]["name"], "archival_insert");
    assert_eq!(body["tool_results"][0]["is_error"], false);
    let batch = body["batch_id"].as_str().unwrap();
    let detail = batch_detail(&s, &a, batch).await;
    assert_eq!(detail["state"], "complete");
    assert_eq!(detail["messages"][0]["role"], "user");
    assert_eq!(detail["messages"][0]["text"], "I like tea");
    assert_eq!(detail["tool_pairs"][0]["result_sequence"], 2);
    // The turn stays readable by id for the replay window.
    let turn = body["turn_id"].as_str().unwrap();
    let (_, status_body) = s
        .get(&s.key_a, &format!("/v1/agents/{a}/turns/{turn}"))
        .await;
    assert_eq!(status_body["finished"], true);
    assert_eq!(status_body["result"]["text"], "I will remember that.");
    s.stop().await;
}

async fn a_broken_stream_resumes_from_the_last_event_id(backend: Backend) {
    let s = Server::start(
        backend,
        vec![
            Turn::call("c1", "archival_insert", json!({"content": "fact"})),
            Turn::Slow(
                Duration::from_millis(300),
                vec![ContentBlock::text("done now")],
            ),
        ],
    )
    .await;
    let a = s.agent(&s.key_a, "streamer").await;
    let (turn, mut events) = s.stream_message(&a, "go").await;
    let first = events.next().await.unwrap();
    assert_eq!(first.event, "received");
    assert_eq!(first.id, "1");
    let second = events.next().await.unwrap();
    let seen: usize = second.id.parse().unwrap();
    drop(events); // the connection breaks

    let resume = s
        .http
        .get(s.url(&format!("/v1/agents/{a}/turns/{turn}/events")))
        .bearer_auth(&s.key_a)
        .header("last-event-id", seen.to_string());
    let (_, mut rest) = s.stream(resume).await;
    let rest = until_end(&mut rest).await;
    assert_eq!(rest.last().unwrap().event, "done");
    let ids: Vec<usize> = rest.iter().map(|e| e.id.parse().unwrap()).collect();
    let expected: Vec<usize> = (seen + 1..=seen + rest.len()).collect();
    assert_eq!(ids, expected, "no gap, no repeat");

    // A full replay equals what the two connections saw together.
    let replay = s
        .http
        .get(s.url(&format!("/v1/agents/{a}/turns/{turn}/events?after=0")))
        .bearer_auth(&s.key_a);
    let (_, mut all) = s.stream(replay).await;
    let all = until_end(&mut all).await;
    assert_eq!(all.len(), seen + rest.len());
    assert_eq!(all[1].data, second.data);
    let text: String = all
        .iter()
        .filter(|e| e.event == "text_delta")
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(text, "done now");
    s.stop().await;
}

async fn a_client_going_away_does_not_cancel_the_turn(backend: Backend) {
    let s = Server::start(
        backend,
        vec![Turn::Slow(
            Duration::from_millis(500),
            vec![ContentBlock::text("still here")],
        )],
    )
    .await;
    let a = s.agent(&s.key_a, "patient").await;
    let (turn, mut events) = s.stream_message(&a, "wait for it").await;
    assert_eq!(events.next().await.unwrap().event, "received");
    drop(events);
    let finished = poll(&s, &format!("/v1/agents/{a}/turns/{turn}"), |b| {
        b["finished"] == true
    })
    .await;
    assert_eq!(finished["result"]["text"], "still here", "{finished}");
    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(batches[0]["state"], "complete");
    s.stop().await;
}

async fn cancelling_a_turn_abandons_its_batch_and_keeps_the_message(backend: Backend) {
    let s = Server::start(
        backend,
        vec![Turn::Slow(
            Duration::from_secs(30),
            vec![ContentBlock::text("too late")],
        )],
    )
    .await;
    let a = s.agent(&s.key_a, "interruptible").await;
    let (turn, mut events) = s.stream_message(&a, "never mind").await;
    assert_eq!(events.next().await.unwrap().event, "received");
    let (status, _) = s
        .delete(&s.key_a, &format!("/v1/agents/{a}/turns/{turn}"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let rest = until_end(&mut events).await;
    let last = rest.last().unwrap();
    assert_eq!(last.event, "error");
    assert!(last.data.contains("cancelled"), "{}", last.data);
    let batches = poll(&s, &format!("/v1/agents/{a}/batches"), |b| {
        b[0]["state"] == "abandoned"
    })
    .await;
    assert_eq!(batches[0]["state"], "abandoned");
    assert_eq!(batches[0]["message_count"], 1, "the user message stays");
    s.stop().await;
}

/// `GET .../batches/{batch}` of `agent` with organization A's key.
async fn batch_detail(s: &Server, agent: &str, batch: &str) -> Value {
    s.get(&s.key_a, &format!("/v1/agents/{agent}/batches/{batch}"))
        .await
        .1
}

/// `POST .../batches/{batch}/retry` of `agent` with organization A's key, for a JSON answer.
async fn retry(s: &Server, agent: &str, batch: &str) -> (StatusCode, Value) {
    s.post(
        &s.key_a,
        &format!("/v1/agents/{agent}/batches/{batch}/retry"),
        json!({}),
    )
    .await
}

/// A model call that fails (after the provider's retries).
fn overloaded() -> Turn {
    Turn::Fail(ProviderError::Server {
        provider: "scripted".into(),
        status: 503,
        attempts: 3,
        message: "overloaded".into(),
    })
}

/// Sends `content` to `agent` for a JSON answer that must be the failure `status`/`code` of a
/// turn whose message was stored; returns the error body and the batch it names.
async fn failed_turn(
    s: &Server,
    agent: &str,
    content: &str,
    status: StatusCode,
    code: &str,
) -> (Value, String) {
    let (got, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{agent}/messages"),
            json!({"content": content}),
        )
        .await;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["details"]["message_saved"], true, "{body}");
    let batch = body["error"]["details"]["batch_id"]
        .as_str()
        .unwrap()
        .to_owned();
    (body, batch)
}

async fn scenario_a_the_model_fails_mid_turn_and_a_retry_works(backend: Backend) {
    let s = Server::start(backend, vec![overloaded()]).await;
    let a = s.agent(&s.key_a, "fragile").await;
    let (body, batch) = failed_turn(
        &s,
        &a,
        "analyze video X",
        StatusCode::BAD_GATEWAY,
        "provider_failed",
    )
    .await;
    // The model provider's own message reaches the client (docs/server.md).
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{body}"
    );
    // User message: saved and visible; nothing else of the turn is.
    let detail = batch_detail(&s, &a, &batch).await;
    assert_eq!(detail["state"], "abandoned");
    assert_eq!(detail["messages"].as_array().unwrap().len(), 1);
    assert_eq!(detail["messages"][0]["text"], "analyze video X");
    // Retrying the batch runs the same message again.
    s.provider.push(Turn::text("here is the analysis"));
    let (status, retried) = retry(&s, &a, &batch).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["text"], "here is the analysis");
    // A complete batch cannot be retried.
    let done = retried["batch_id"].as_str().unwrap();
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/batches/{done}/retry"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Nor can the abandoned one twice: its message is not stored, nor the turn run, again.
    let (_, before) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    let (status, body) = retry(&s, &a, &batch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let (_, after) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(before, after);
    let detail = batch_detail(&s, &a, &batch).await;
    assert!(detail["retried_at"].is_string(), "{detail}");
    s.stop().await;
}

async fn scenario_b_storage_refuses_the_step_and_the_message_survives(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("this answer cannot be saved")]).await;
    let a = s.agent(&s.key_a, "unlucky").await;
    pattern_db::testkit::refuse_inserts(&s.db, "messages", "role", "assistant")
        .await
        .unwrap();
    let (body, batch) = failed_turn(
        &s,
        &a,
        "please remember me",
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_failed",
    )
    .await;
    assert_hides_the_cause(&body);
    let detail = batch_detail(&s, &a, &batch).await;
    assert_eq!(
        detail["messages"].as_array().unwrap().len(),
        1,
        "the step rolled back whole"
    );
    assert_eq!(detail["messages"][0]["text"], "please remember me");
    assert_eq!(detail["state"], "abandoned");
    pattern_db::testkit::allow_inserts(&s.db, "messages")
        .await
        .unwrap();
    s.provider.push(Turn::text("saved now"));
    let (status, retried) = retry(&s, &a, &batch).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["text"], "saved now");
    s.stop().await;
}

/// A storage failure's message names no database detail (the injected trigger's text).
fn assert_hides_the_cause(body: &Value) {
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("injected"), "{message}");
    assert!(message.contains("could not be stored"), "{message}");
}

/// Streams `content` to `agent` until the stream ends; asserts it ends with an `error` event
/// carrying `code`, the turn id and `message_saved`, and that a replay of the finished turn
/// (from the start, and from just before the error) sends the same events. Returns the error
/// event's data.
async fn streamed_failure(s: &Server, agent: &str, content: &str, code: &str) -> Value {
    let (turn, mut events) = s.stream_message(agent, content).await;
    let seen = until_end(&mut events).await;
    assert!(
        events.next().await.is_none(),
        "the stream ends after the error"
    );
    assert_eq!(seen[0].event, "received");
    let last = seen.last().unwrap();
    assert_eq!(last.event, "error");
    let data: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(data["type"], "error", "{data}");
    assert_eq!(data["error"]["code"], code, "{data}");
    assert!(data["error"]["message"].as_str().is_some(), "{data}");
    let details = &data["error"]["details"];
    assert_eq!(details["turn_id"], turn.as_str(), "{data}");
    assert_eq!(details["message_saved"], true, "{data}");
    let received: Value = serde_json::from_str(&seen[0].data).unwrap();
    // Ids are decimal strings in turn events as in error details and every view.
    assert!(received["batch_id"].is_string(), "{received}");
    assert_eq!(details["batch_id"], received["batch_id"], "{data}");

    // Resuming the finished turn replays the error, unchanged.
    let events_url = s.url(&format!("/v1/agents/{agent}/turns/{turn}/events"));
    let replay = s.http.get(&events_url).bearer_auth(&s.key_a);
    let (_, mut all) = s.stream(replay).await;
    let all = until_end(&mut all).await;
    assert_eq!(
        all.iter()
            .map(|e| (&e.id, &e.event, &e.data))
            .collect::<Vec<_>>(),
        seen.iter()
            .map(|e| (&e.id, &e.event, &e.data))
            .collect::<Vec<_>>(),
    );
    let before_error: usize = last.id.parse::<usize>().unwrap() - 1;
    let resume = s
        .http
        .get(&events_url)
        .bearer_auth(&s.key_a)
        .header("last-event-id", before_error.to_string());
    let (_, mut rest) = s.stream(resume).await;
    let rest = until_end(&mut rest).await;
    assert_eq!(rest.len(), 1);
    assert_eq!((&rest[0].id, &rest[0].data), (&last.id, &last.data));
    data
}

async fn a_streamed_turn_that_fails_ends_with_the_error_contract(backend: Backend) {
    let s = Server::start(backend, vec![overloaded()]).await;
    let a = s.agent(&s.key_a, "fragile").await;
    // Scenario A: the model fails.
    let data = streamed_failure(&s, &a, "analyze video X", "provider_failed").await;
    let batch = data["error"]["details"]["batch_id"].as_str().unwrap();
    let detail = batch_detail(&s, &a, batch).await;
    assert_eq!(detail["state"], "abandoned");
    assert_eq!(detail["messages"][0]["text"], "analyze video X");

    // Scenario B: storage refuses the step.
    s.provider.push(Turn::text("this answer cannot be saved"));
    pattern_db::testkit::refuse_inserts(&s.db, "messages", "role", "assistant")
        .await
        .unwrap();
    let data = streamed_failure(&s, &a, "please remember me", "storage_failed").await;
    assert_hides_the_cause(&data);
    let batch = data["error"]["details"]["batch_id"].as_str().unwrap();
    let detail = batch_detail(&s, &a, batch).await;
    assert_eq!(detail["state"], "abandoned");
    assert_eq!(detail["messages"].as_array().unwrap().len(), 1);
    assert_eq!(detail["messages"][0]["text"], "please remember me");
    s.stop().await;
}

async fn scenario_a_the_model_fails_after_a_committed_tool_step(backend: Backend) {
    let s = Server::start(
        backend,
        vec![
            Turn::call("c1", "archival_insert", json!({"content": "Ada likes tea"})),
            overloaded(),
        ],
    )
    .await;
    let a = s.agent(&s.key_a, "halfway").await;
    let (body, batch) = failed_turn(
        &s,
        &a,
        "remember that I like tea",
        StatusCode::BAD_GATEWAY,
        "provider_failed",
    )
    .await;
    // The model provider's own message reaches the client (docs/server.md).
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{body}"
    );
    // The abandoned batch keeps the user message and the committed tool step (call and result).
    let detail = batch_detail(&s, &a, &batch).await;
    assert_eq!(detail["state"], "abandoned", "{detail}");
    let roles: Vec<&str> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{detail}");
    assert_eq!(detail["messages"][0]["text"], "remember that I like tea");
    assert_eq!(detail["tool_pairs"][0]["name"], "archival_insert");
    assert_eq!(detail["tool_pairs"][0]["result_sequence"], 2);
    assert_eq!(detail["tool_pairs"][0]["is_error"], false);
    assert_eq!(detail["pending_tool_calls"].as_array().unwrap().len(), 0);
    let (_, passages) = s.get(&s.key_a, &format!("/v1/agents/{a}/archival")).await;
    assert_eq!(
        passages.as_array().unwrap().len(),
        1,
        "the tool's effect stays"
    );

    // A retry runs the message again as a new turn, which completes.
    s.provider.push(Turn::text("noted: you like tea"));
    let (status, retried) = retry(&s, &a, &batch).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["text"], "noted: you like tea");
    assert_ne!(retried["batch_id"], batch.as_str());
    let again = batch_detail(&s, &a, &batch).await;
    assert_eq!(
        again["messages"].as_array().unwrap().len(),
        3,
        "the abandoned batch is kept as it was"
    );
    s.stop().await;
}

async fn scenario_b_storage_refuses_a_tool_step_whole(backend: Backend) {
    let s = Server::start(
        backend,
        vec![Turn::call("c1", "archival_search", json!({"query": "tea"}))],
    )
    .await;
    let a = s.agent(&s.key_a, "unsaved").await;
    // The tool result cannot be stored: the step (the call and its result) rolls back whole.
    pattern_db::testkit::refuse_inserts(&s.db, "messages", "role", "tool")
        .await
        .unwrap();
    let (body, batch) = failed_turn(
        &s,
        &a,
        "what do I like?",
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_failed",
    )
    .await;
    assert_hides_the_cause(&body);
    let detail = batch_detail(&s, &a, &batch).await;
    assert_eq!(detail["state"], "abandoned", "{detail}");
    let messages = detail["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "no half step: {detail}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(detail["tool_pairs"].as_array().unwrap().len(), 0);

    pattern_db::testkit::allow_inserts(&s.db, "messages")
        .await
        .unwrap();
    s.provider
        .push(Turn::call("c1", "archival_search", json!({"query": "tea"})));
    s.provider.push(Turn::text("nothing stored about that yet"));
    let (status, retried) = retry(&s, &a, &batch).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["text"], "nothing stored about that yet");
    assert_eq!(retried["tool_results"][0]["is_error"], false);
    let (_, done) = s
        .get(
            &s.key_a,
            &format!(
                "/v1/agents/{a}/batches/{}",
                retried["batch_id"].as_str().unwrap()
            ),
        )
        .await;
    assert_eq!(done["state"], "complete");
    assert_eq!(done["tool_pairs"][0]["name"], "archival_search");
    s.stop().await;
}

async fn queued_work_left_behind_is_delivered(backend: Backend) {
    let config = pattern_server::ServerConfig {
        recovery_interval: Duration::from_millis(100),
        ..pattern_server::ServerConfig::default()
    };
    let s = Server::start_with(backend, vec![Turn::text("delivered late")], config).await;
    let a = s.agent(&s.key_a, "sleeper").await;
    // An entry in the agent's durable queue that no request of this server made (a crashed
    // process's, or a scheduled wakeup): the server loads the agent and delivers it.
    s.db.enqueue(
        pattern::AgentId(a.parse().unwrap()),
        pattern::db::queue::NewQueued::now(
            pattern::BatchType::SystemTrigger,
            pattern::Role::System,
            vec![ContentBlock::text("wake up")],
        ),
    )
    .await
    .unwrap();
    let batches = poll(&s, &format!("/v1/agents/{a}/batches"), |b| {
        b[0]["state"] == "complete"
    })
    .await;
    assert_eq!(batches[0]["state"], "complete", "{batches}");
    assert_eq!(batches[0]["batch_type"], "system_trigger");
    s.stop().await;
}

async fn a_repeated_request_with_its_idempotency_key_is_not_stored_twice(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("once"), Turn::text("twice")]).await;
    let a = s.agent(&s.key_a, "careful").await;
    let url = s.url(&format!("/v1/agents/{a}/messages"));
    let send = |key: &'static str, content: &'static str| {
        s.http
            .post(&url)
            .bearer_auth(&s.key_a)
            .header("idempotency-key", key)
            .json(&json!({ "content": content }))
            .send()
    };
    let first = send("attempt-1", "book a table").await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("x-pattern-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    // The client lost the answer and sends the same request again.
    let again = send("attempt-1", "book a table").await.unwrap();
    assert_eq!(again.headers()["x-pattern-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["turn_id"], first["turn_id"]);
    assert_eq!(again["batch_id"], first["batch_id"]);
    assert_eq!(again["text"], "once");
    // The same key for another request is a conflict; another key is another turn.
    let status = send("attempt-1", "cancel the table")
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::CONFLICT);
    let other: Value = send("attempt-2", "book a table")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(other["text"], "twice");
    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
    assert_eq!(batches.as_array().unwrap().len(), 2, "stored once per key");
    assert_eq!(s.provider.calls(), 2);
    s.stop().await;
}

/// GETs `path` until `done` holds (at most 5 s); returns the last answer.
async fn poll(s: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut body = Value::Null;
    for _ in 0..100 {
        body = s.get(&s.key_a, path).await.1;
        if done(&body) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    body
}

conformance!(
    a_streamed_turn_that_fails_ends_with_the_error_contract,
    a_repeated_request_with_its_idempotency_key_is_not_stored_twice,
    queued_work_left_behind_is_delivered,
    a_turn_answers_after_its_message_is_stored,
    a_broken_stream_resumes_from_the_last_event_id,
    a_client_going_away_does_not_cancel_the_turn,
    cancelling_a_turn_abandons_its_batch_and_keeps_the_message,
    scenario_a_the_model_fails_mid_turn_and_a_retry_works,
    scenario_b_storage_refuses_the_step_and_the_message_survives,
    scenario_a_the_model_fails_after_a_committed_tool_step,
    scenario_b_storage_refuses_a_tool_step_whole,
);
