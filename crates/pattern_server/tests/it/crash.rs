//! Failure scenario A through HTTP with a real process death: a server process is killed with
//! SIGKILL while a turn it acknowledged is running. Afterwards a new server over the same
//! database shows the user's message, its recovery sweep abandons the dead run's batch, and a
//! retry through the API answers.
//!
//! The child is this test binary re-run with `PATTERN_SERVER_CRASH_CHILD` set.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use pattern::Database;
use pattern::core::testkit::Turn;
use pattern_db::Backend;
use pattern_db::testkit::TestDb;
use pattern_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::Server;

/// Entry point of the child; a no-op in a normal test run.
#[test]
fn crash_child() {
    crate::support::doomed_child_main("PATTERN_SERVER_CRASH_CHILD");
}

async fn a_killed_server_loses_no_acknowledged_message(backend: Backend) {
    let tdb = TestDb::fresh(backend).await.unwrap();
    let (mut child, base, key, agent) = crate::support::spawn_doomed_child(
        "crash::crash_child",
        "PATTERN_SERVER_CRASH_CHILD",
        &tdb.url,
    );
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{base}/v1/agents/{agent}/messages"))
        .bearer_auth(&key)
        .json(&json!({"content": "remember my order: two coffees", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Box::pin(response.bytes_stream().eventsource().map(|e| e.unwrap()));
    let received = events.next().await.unwrap();
    assert_eq!(received.event, "received");
    let batch: serde_json::Value = serde_json::from_str(&received.data).unwrap();
    let batch: i64 = batch["batch_id"].as_str().unwrap().parse().unwrap();
    child.kill().unwrap(); // SIGKILL, mid-turn
    child.wait().unwrap();
    drop(events);

    // A new server over the same database.
    let db = Database::open(crate::support::config_for(&tdb))
        .await
        .unwrap();
    let s = Server::over(
        db,
        vec![Turn::text("Two coffees, noted.")],
        ServerConfig {
            recovery_interval: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    )
    .await;
    // The message is stored and visible at once.
    let path = format!("/v1/agents/{agent}/batches/{batch}");
    let (status, detail) = s.get(&s.key_a, &path).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(
        detail["messages"][0]["text"],
        "remember my order: two coffees"
    );
    assert_eq!(detail["messages"].as_array().unwrap().len(), 1);
    // Once the dead run's lease expires, the sweep abandons the batch.
    let mut state = detail["state"].clone();
    for _ in 0..100 {
        if state == "abandoned" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        state = s.get(&s.key_a, &path).await.1["state"].clone();
    }
    assert_eq!(state, "abandoned");
    let (status, retried) = s.post(&s.key_a, &format!("{path}/retry"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["text"], "Two coffees, noted.");
    s.stop().await;
    tdb.cleanup().await.unwrap();
}

conformance!(a_killed_server_loses_no_acknowledged_message);
