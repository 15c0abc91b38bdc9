//! `/v1/agents/{agent_id}/retention` on both backends: a policy stored, read back, replaced and
//! cleared; a zero, a policy that keeps everything and an unknown field refused with 400 and
//! nothing stored; another organization's agent not found; the policy is in the OpenAPI
//! document.

use pattern_db::Backend;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::Server;

async fn retention_policies_over_http(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let url = format!("/v1/agents/{ada}/retention");
    let (status, _) = s.send(Method::GET, Some(&s.key_a), &url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let policy = json!({
        "batches_older_than_days": 30,
        "batch_disposal": "archive",
        "keep_block_versions": 10,
    });
    let (status, stored) = s
        .send(Method::PUT, Some(&s.key_a), &url, Some(policy))
        .await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(stored["batches_older_than_days"], 30);
    assert_eq!(stored["batch_disposal"], "archive");
    assert_eq!(stored["activity_older_than_days"], serde_json::Value::Null);
    let (status, shown) = s.send(Method::GET, Some(&s.key_a), &url, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown, stored);
    for bad in [
        json!({"batches_older_than_days": 0}),
        json!({"keep_block_versions": 0}),
        json!({}),
        json!({"batch_disposal": "archive", "activity_older_than_days": 3}),
        json!({"activity_older_than_days": 3, "color": "red"}),
    ] {
        let (status, answer) = s
            .send(Method::PUT, Some(&s.key_a), &url, Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
    }
    let (_, shown) = s.send(Method::GET, Some(&s.key_a), &url, None).await;
    assert_eq!(shown, stored, "a refused policy changed nothing");
    // Another organization sees no such agent.
    for m in [Method::GET, Method::DELETE] {
        let (status, _) = s.send(m, Some(&s.key_b), &url, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = s
        .send(
            Method::PUT,
            Some(&s.key_b),
            &url,
            Some(json!({"activity_older_than_days": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.send(Method::DELETE, Some(&s.key_a), &url, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = s.send(Method::DELETE, Some(&s.key_a), &url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let doc = serde_json::to_value(pattern_server::openapi()).unwrap();
    let item = &doc["paths"]["/v1/agents/{agent_id}/retention"];
    for m in ["get", "put", "delete"] {
        assert!(item[m].is_object(), "{m} is documented");
    }
    s.stop().await;
}

conformance!(retention_policies_over_http);
