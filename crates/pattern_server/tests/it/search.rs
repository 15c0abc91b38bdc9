//! Search over HTTP with the real offline embedding model (all-MiniLM-L6-v2): vector and hybrid
//! modes find a passage by meaning where full text finds nothing, and `auto` is hybrid when the
//! model is there. Runs on both backends.

use std::time::{Duration, Instant};

use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

const PASSAGES: [&str; 3] = [
    "Ada drinks green tea every afternoon at four.",
    "The server room is cooled to eighteen degrees.",
    "Grace keeps three beehives at the bottom of her garden.",
];

/// Shares no word with the beehive passage: only its meaning leads there.
const QUERY: &str = "who raises honey bees";

async fn search(s: &Server, agent: &str, mode: &str) -> Vec<Value> {
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{agent}/search"),
            json!({"query": QUERY, "mode": mode, "limit": 3}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{mode}: {body}");
    body.as_array().unwrap().clone()
}

async fn vector_and_hybrid_search_find_passages_by_meaning(backend: Backend) {
    let s = Server::start_embedded(backend, vec![]).await;
    let a = s.agent(&s.key_a, "librarian").await;
    for text in PASSAGES {
        let (status, body) = s
            .post(
                &s.key_a,
                &format!("/v1/agents/{a}/archival"),
                json!({"text": text, "tags": ["notes"]}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // Embedding runs in the background: writes never wait for it. Wait until every passage is
    // findable by vector, then every mode answers from the same index.
    let deadline = Instant::now() + Duration::from_secs(120);
    let vector = loop {
        let hits = search(&s, &a, "vector").await;
        if hits.len() == PASSAGES.len() {
            break hits;
        }
        assert!(
            Instant::now() < deadline,
            "passages not embedded in time: {hits:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(vector[0]["text"], PASSAGES[2], "{vector:?}");
    assert_eq!(vector[0]["content_type"], "archival");
    let hybrid = search(&s, &a, "hybrid").await;
    assert_eq!(hybrid[0]["text"], PASSAGES[2], "{hybrid:?}");
    assert_eq!(
        hybrid[0]["score"], 1.0,
        "hybrid scores are normalised: {hybrid:?}"
    );
    let auto = search(&s, &a, "auto").await;
    assert_eq!(auto[0]["text"], PASSAGES[2], "{auto:?}");
    // Full text matches words, and no passage has these.
    assert!(search(&s, &a, "fts").await.is_empty());
    // Another organization's key sees nothing of it.
    let (status, _) = s
        .post(
            &s.key_b,
            &format!("/v1/agents/{a}/search"),
            json!({"query": QUERY, "mode": "vector"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await;
}

conformance!(vector_and_hybrid_search_find_passages_by_meaning);
