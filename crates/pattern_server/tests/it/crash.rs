//! Failure scenario A through HTTP with a real process death: a server process is killed with
//! SIGKILL while a turn it acknowledged is running. Afterwards a new server over the same
//! database shows the user's message, its recovery sweep abandons the dead run's batch, and a
//! retry through the API answers.
//!
//! The child is this test binary re-run with `PATTERN_SERVER_CRASH_CHILD` set.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use pattern::ContentBlock;
use pattern::core::testkit::Turn;
use pattern::{Database, DbConfig};
use pattern_db::Backend;
use pattern_db::testkit::TestDb;
use pattern_server::ServerConfig;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::Server;

/// Entry point of the child; a no-op in a normal test run.
#[test]
fn crash_child() {
    let Ok(url) = std::env::var("PATTERN_SERVER_CRASH_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut config = DbConfig::new(url);
        config.batch_lease = Duration::from_secs(1);
        let db = Database::open(config).await.unwrap();
        let s = Server::over(
            db,
            vec![Turn::Slow(
                Duration::from_secs(120),
                vec![ContentBlock::text("never")],
            )],
            ServerConfig::default(),
        )
        .await;
        let agent = s.agent(&s.key_a, "doomed").await;
        let mut out = std::io::stdout().lock();
        writeln!(out, "@@SERVER {} {} {agent}", s.base, s.key_a).unwrap();
        out.flush().unwrap();
        drop(out);
        // Serve until killed.
        tokio::time::sleep(Duration::from_secs(300)).await;
    });
}

async fn a_killed_server_loses_no_acknowledged_message(backend: Backend) {
    let tdb = TestDb::fresh(backend).await.unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PATTERN_SERVER_CRASH_CHILD", &tdb.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut server = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("@@SERVER ") {
            let parts: Vec<String> = rest.split_whitespace().map(str::to_owned).collect();
            server = Some((parts[0].clone(), parts[1].clone(), parts[2].clone()));
            break;
        }
    }
    let (base, key, agent) = server.expect("the child server started");
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
