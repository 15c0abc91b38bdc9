//! Approvals over HTTP: a scripted model writes a memory block another agent shared with
//! `partner` permission (every change needs a human's approval); the SSE stream announces
//! `approval_requested`, `POST /v1/approvals/{id}` answers it and the turn goes on with the
//! tool's result (or its denial as an error result). Another organization's id is 404, a second
//! answer 409, and listings are organization-scoped, newest first.

use futures::StreamExt;
use pattern::AgentId;
use pattern::core::testkit::Turn;
use pattern::memory::{BlockType, MemoryEditor, MemoryStore, NewMemoryBlock, Permission};
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Server, until_end};

/// A server whose model appends to the shared `family` block; returns it, the writing agent's id
/// and the block owner's id.
async fn setup(backend: Backend) -> (Server, String, AgentId) {
    let s = Server::start(
        backend,
        vec![
            Turn::call(
                "c1",
                "memory_append",
                json!({"label": "family", "content": "likes jazz"}),
            ),
            Turn::text("noted"),
        ],
    )
    .await;
    let writer = s.agent(&s.key_a, "writer").await;
    let owner: AgentId = s.agent(&s.key_a, "owner").await.parse().unwrap();
    let memory = s.state.pattern().memory();
    memory
        .create_block(
            owner,
            NewMemoryBlock {
                label: "family".into(),
                description: "About the family.".into(),
                value: "Ada".into(),
                char_limit: 500,
                block_type: BlockType::Core,
            },
        )
        .await
        .unwrap();
    memory
        .share(
            owner,
            "family",
            writer.parse().unwrap(),
            Permission::Partner,
        )
        .await
        .unwrap();
    (s, writer, owner)
}

/// Reads the stream until its `approval_requested` event; returns the events and the id.
async fn until_requested(
    events: &mut (impl futures::Stream<Item = eventsource_stream::Event> + Unpin),
) -> (Vec<eventsource_stream::Event>, String) {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.next())
            .await
            .expect("an event within 30 s")
            .expect("the stream goes on");
        let is_request = event.event == "approval_requested";
        seen.push(event);
        if is_request {
            let data: Value = serde_json::from_str(&seen.last().unwrap().data).unwrap();
            assert_eq!(data["tool"], "memory_append");
            assert_eq!(data["call_id"], "c1");
            assert!(data["deadline"].is_string());
            let id = data["approval_id"]
                .as_str()
                .expect("the id is a decimal string")
                .to_owned();
            return (seen, id);
        }
        assert!(
            event_is_not_final(seen.last().unwrap()),
            "the turn ended without asking: {seen:?}"
        );
    }
}

fn event_is_not_final(e: &eventsource_stream::Event) -> bool {
    e.event != "done" && e.event != "error"
}

fn tool_result(events: &[eventsource_stream::Event]) -> Value {
    let e = events
        .iter()
        .find(|e| e.event == "tool_result")
        .expect("a tool result");
    serde_json::from_str(&e.data).unwrap()
}

async fn an_approved_call_completes_the_turn(backend: Backend) {
    let (s, writer, owner) = setup(backend).await;
    let (turn, mut events) = s.stream_message(&writer, "remember I like jazz").await;
    let (_, id) = until_requested(&mut events).await;

    // Listed for organization A (pending, newest first), invisible to B.
    let (status, listed) = s.get(&s.key_a, "/v1/approvals?state=pending").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["state"], "pending");
    assert_eq!(listed[0]["agent_id"], writer.as_str());
    assert_eq!(listed[0]["turn_id"], turn.as_str());
    assert_eq!(listed[0]["input"]["content"], "likes jazz");
    let (_, theirs) = s.get(&s.key_b, "/v1/approvals?state=all").await;
    assert_eq!(theirs, json!([]));
    let (status, body) = s.get(&s.key_b, &format!("/v1/approvals/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = s
        .post(
            &s.key_b,
            &format!("/v1/approvals/{id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Bad input is a typed 400.
    for bad in [
        json!({"decision": "maybe"}),
        json!({"decision": "approve", "reason": "x"}),
        json!({"verdict": "approve"}),
    ] {
        let (status, body) = s.post(&s.key_a, &format!("/v1/approvals/{id}"), bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    let (status, _) = s.get(&s.key_a, "/v1/approvals/not-a-number").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = s.get(&s.key_a, "/v1/approvals?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, decided) = s
        .post(
            &s.key_a,
            &format!("/v1/approvals/{id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["state"], "approved");
    assert_eq!(decided["decided_by"], "http");
    // A second answer conflicts.
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/approvals/{id}"),
            json!({"decision": "deny", "reason": "changed my mind"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict");

    let rest = until_end(&mut events).await;
    assert_eq!(rest.last().unwrap().event, "done", "{rest:?}");
    let result = tool_result(&rest);
    assert_eq!(result["is_error"], false, "{result}");
    let block = s
        .state
        .pattern()
        .memory()
        .block(owner, "family")
        .await
        .unwrap();
    assert!(block.value.contains("likes jazz"), "{}", block.value);
    let (_, shown) = s.get(&s.key_a, &format!("/v1/approvals/{id}")).await;
    assert_eq!(shown["state"], "approved");
    let (_, pending) = s.get(&s.key_a, "/v1/approvals").await;
    assert_eq!(pending, json!([]), "nothing pending any more");

    // A resumed stream replays the request from the turn's log.
    let replay = s
        .http
        .get(s.url(&format!("/v1/agents/{writer}/turns/{turn}/events")))
        .bearer_auth(&s.key_a);
    let (_, mut all) = s.stream(replay).await;
    let all = until_end(&mut all).await;
    let kinds: Vec<&str> = all.iter().map(|e| e.event.as_str()).collect();
    let asked = kinds.iter().position(|k| *k == "approval_requested");
    let result = kinds.iter().position(|k| *k == "tool_result");
    assert!(asked.is_some() && asked < result, "{kinds:?}");
    s.stop().await;
}

async fn a_denied_call_is_an_error_result(backend: Backend) {
    let (s, writer, owner) = setup(backend).await;
    let (_, mut events) = s.stream_message(&writer, "remember I like jazz").await;
    let (_, id) = until_requested(&mut events).await;
    let (status, decided) = s
        .post(
            &s.key_a,
            &format!("/v1/approvals/{id}"),
            json!({"decision": "deny", "reason": "ask me first"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["state"], "denied");
    let rest = until_end(&mut events).await;
    assert_eq!(rest.last().unwrap().event, "done", "{rest:?}");
    let result = tool_result(&rest);
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"].as_str().unwrap().contains("ask me first"),
        "{result}"
    );
    let block = s
        .state
        .pattern()
        .memory()
        .block(owner, "family")
        .await
        .unwrap();
    assert_eq!(block.value, "Ada", "nothing was written");
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/approvals/{id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, denied) = s.get(&s.key_a, "/v1/approvals?state=denied").await;
    assert_eq!(denied[0]["denial_reason"], "ask me first");
    s.stop().await;
}

conformance!(
    an_approved_call_completes_the_turn,
    a_denied_call_is_an_error_result,
);
