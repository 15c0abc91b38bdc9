//! `/v1/agents/{id}/schedules` through a real server: create (201), list, delete (204); another
//! organization's agent and schedules are 404; bad input is 400 `invalid_request` naming the
//! field; a one-off schedule fires once (the server runs the queue processor).

use std::time::{Duration, Instant};

use pattern::core::testkit::Turn;
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

async fn schedules_are_created_listed_and_deleted(backend: Backend) {
    let s = Server::start(backend, vec![Turn::text("woken")]).await;
    let a = s.agent(&s.key_a, "helper").await;
    let b = s.agent(&s.key_b, "helper").await;
    let path = format!("/v1/agents/{a}/schedules");

    let (status, daily) = s
        .post(
            &s.key_a,
            &path,
            json!({"message": "daily review", "cron": "30 9 * * 1-5", "tz": "Europe/Berlin", "name": "review"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{daily}");
    assert_eq!(daily["kind"], "cron");
    assert_eq!(daily["tz"], "Europe/Berlin");
    assert_eq!(daily["agent"], "helper");
    assert_eq!(daily["name"], "review");
    let id = daily["id"]
        .as_str()
        .expect("a decimal string id")
        .to_owned();
    assert!(id.parse::<i64>().is_ok());
    assert!(daily["next_at"].as_str().is_some());

    let (status, listed) = s.get(&s.key_a, &path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());

    // Another organization: its own agent's list is empty, A's agent and schedule are 404.
    let (status, theirs) = s.get(&s.key_b, &format!("/v1/agents/{b}/schedules")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(theirs, json!([]));
    let (status, body) = s.get(&s.key_b, &path).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = s
        .post(
            &s.key_b,
            &path,
            json!({"message": "x", "cron": "* * * * *"}),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = s.delete(&s.key_b, &format!("{path}/{id}")).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    // B's agent with A's schedule id: not found either.
    let (status, body) = s
        .delete(&s.key_b, &format!("/v1/agents/{b}/schedules/{id}"))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));

    // Bad input: 400 naming the field, nothing stored.
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    for (body, field) in [
        (json!({"message": "x", "cron": "61 * * * *"}), "cron"),
        (
            json!({"message": "x", "cron": "* * * * *", "tz": "Mars/Olympus"}),
            "tz",
        ),
        (json!({"message": "x", "at": past}), "at"),
        (json!({"message": "x", "at": "tomorrow"}), "at"),
        (json!({"message": "x"}), "at"),
        (json!({"message": "", "cron": "* * * * *"}), "message"),
    ] {
        let (status, answer) = s.post(&s.key_a, &path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {answer}");
        assert_eq!(code(&answer), "invalid_request", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{field}`")),
            "{body} -> {message}"
        );
    }
    let (_, listed) = s.get(&s.key_a, &path).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);

    // A one-off a moment ahead fires once through the server's queue processor.
    let soon = (chrono::Utc::now() + chrono::Duration::milliseconds(500)).to_rfc3339();
    let (status, once) = s
        .post(&s.key_a, &path, json!({"message": "ring", "at": soon}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{once}");
    assert_eq!(once["kind"], "at");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{a}/batches")).await;
        let done: Vec<&Value> = batches
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["batch_type"] == "system_trigger" && b["state"] == "complete")
            .collect();
        if !done.is_empty() {
            assert_eq!(done.len(), 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the schedule never fired: {batches}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, listed) = s.get(&s.key_a, &path).await;
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "the one-off is gone: {listed}"
    );

    let (status, _) = s.delete(&s.key_a, &format!("{path}/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = s.delete(&s.key_a, &format!("{path}/{id}")).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = s.delete(&s.key_a, &format!("{path}/not-a-number")).await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (_, listed) = s.get(&s.key_a, &path).await;
    assert_eq!(listed, json!([]));
    s.stop().await;
}

conformance!(schedules_are_created_listed_and_deleted);
