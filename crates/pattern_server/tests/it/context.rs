//! `GET /v1/agents/{id}/context`: the request the next turn would send, read-only, walled by
//! organization.

use pattern::core::testkit::Turn;
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::Server;

async fn the_context_shows_sections_against_the_window_and_changes_nothing(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("Hello.")]).await;
    let agent = s.agent(&s.key_a, "inspected").await;
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{agent}/blocks"),
            json!({"label": "persona", "value": "I am helpful."}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{agent}/messages"),
            json!({"content": "hi"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let path = format!("/v1/agents/{agent}/context");
    let (status, context) = s.get(&s.key_a, &path).await;
    assert_eq!(status, StatusCode::OK, "{context}");
    assert_eq!(context["window"], 200_000);
    assert_eq!(context["model"], "scripted");
    let names: Vec<&str> = context["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["system", "tools", "summaries", "history"]);
    let history = &context["sections"][3]["tokens"];
    assert!(history.as_u64().unwrap() > 0, "{context}");
    assert_eq!(context["messages"], 2, "the turn's question and answer");
    assert_eq!(context["would_compress"], false);
    assert!(
        context["system"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["label"] == "persona"
                && p["text"].as_str().unwrap().contains("I am helpful."))
    );
    assert!(
        context["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "archival_insert")
    );
    // The body as the scripted model's provider format (Anthropic) would send it.
    assert_eq!(context["request"]["model"], "scripted");
    assert_eq!(context["request"]["stream"], true);
    let sent = context["request"]["messages"].as_array().unwrap();
    assert_eq!(sent.len(), 2, "{sent:?}");
    // Read-only: asking again answers the same.
    let (_, again) = s.get(&s.key_a, &path).await;
    assert_eq!(again, context);
    // Another organization: not found.
    let (status, body) = s.get(&s.key_b, &path).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    s.stop().await;
}

conformance!(the_context_shows_sections_against_the_window_and_changes_nothing);
