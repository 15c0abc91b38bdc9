//! Sessions, inboxes and meetings through HTTP, with the meeting event stream resumed by cursor,
//! and another organization kept out.

use futures::StreamExt;
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

async fn sessions_keep_turns_and_inboxes(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let bob = s.agent(&s.key_a, "bob").await;
    let (status, session) = s
        .post(
            &s.key_a,
            "/v1/sessions",
            json!({"from": ada, "to": bob, "session_type": "sync"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{session}");
    assert_eq!(session["turn"], ada.as_str());
    let id = session["id"].as_str().unwrap().to_owned();
    let messages = format!("/v1/sessions/{id}/messages");
    let (status, sent) = s
        .post(
            &s.key_a,
            &messages,
            json!({"from": ada, "content": "hello bob"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{sent}");
    assert_eq!(sent["to"], bob.as_str());
    // Out of turn: refused, nothing stored.
    let (status, body) = s
        .post(
            &s.key_a,
            &messages,
            json!({"from": ada, "content": "again?"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, listed) = s.get(&s.key_a, &messages).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // Bob's inbox holds it until read.
    let (_, inbox) = s.get(&s.key_a, &format!("/v1/agents/{bob}/inbox")).await;
    assert_eq!(inbox[0]["content"], "hello bob");
    let (_, changed) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{bob}/inbox/read"),
            json!({"messages": [sent["id"]]}),
        )
        .await;
    assert_eq!(changed, 1);
    let (_, inbox) = s.get(&s.key_a, &format!("/v1/agents/{bob}/inbox")).await;
    assert_eq!(inbox.as_array().unwrap().len(), 0);

    // Another organization sees nothing and cannot act.
    let carol = s.agent(&s.key_b, "carol").await;
    let (status, _) = s.get(&s.key_b, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.get(&s.key_b, &messages).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .post(
            &s.key_b,
            &messages,
            json!({"from": carol, "content": "intrusion"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .post(
            &s.key_b,
            "/v1/sessions",
            json!({"from": carol, "to": ada, "session_type": "async"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, ended) = s
        .post(
            &s.key_a,
            &format!("/v1/sessions/{id}/end"),
            json!({"agent": bob}),
        )
        .await;
    assert_eq!(ended["status"], "ended");
    s.stop().await;
}

fn data(event: &eventsource_stream::Event) -> Value {
    serde_json::from_str(&event.data).unwrap()
}

async fn meeting_events_stream_and_resume_by_cursor(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let host = s.agent(&s.key_a, "host").await;
    let guest = s.agent(&s.key_a, "guest").await;
    let (status, meeting) = s
        .post(&s.key_a, "/v1/meetings", json!({"host": host}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{meeting}");
    let id = meeting["id"].as_str().unwrap().to_owned();
    let act = |action: &str| format!("/v1/meetings/{id}/{action}");
    let (status, body) = s
        .post(
            &s.key_a,
            &act("invite"),
            json!({"agent": host, "invitee": guest}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    s.post(&s.key_a, &act("join"), json!({"agent": host})).await;
    s.post(&s.key_a, &act("join"), json!({"agent": guest}))
        .await;
    let (status, started) = s
        .post(&s.key_a, &act("start"), json!({"agent": host}))
        .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let speaker = started["speaker"].as_str().unwrap().to_owned();
    let other = if speaker == host { &guest } else { &host };
    // Only the speaker may speak.
    let (status, _) = s
        .post(
            &s.key_a,
            &act("speak"),
            json!({"agent": other, "content": "me first"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = s
        .post(
            &s.key_a,
            &act("speak"),
            json!({"agent": speaker, "content": "welcome"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Follow from the start, then break off after two events.
    let follow = s
        .http
        .get(s.url(&format!("/v1/meetings/{id}/events")))
        .bearer_auth(&s.key_a);
    let (_, mut events) = s.stream(follow).await;
    let first = events.next().await.unwrap();
    let second = events.next().await.unwrap();
    assert_eq!(data(&first)["seq"], 1);
    assert_eq!(second.id, "2");
    drop(events);
    // Resume after cursor 2; end the meeting while following: the stream ends after it.
    let resume = s
        .http
        .get(s.url(&format!("/v1/meetings/{id}/events")))
        .bearer_auth(&s.key_a)
        .header("last-event-id", "2");
    let (_, mut rest) = s.stream(resume).await;
    let third = rest.next().await.unwrap();
    assert_eq!(third.id, "3");
    let (status, ended) = s.post(&s.key_a, &act("end"), json!({"agent": host})).await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["status"], "ended");
    let mut tail = vec![third];
    while let Some(e) = rest.next().await {
        tail.push(e);
    }
    let seqs: Vec<u64> = tail.iter().map(|e| e.id.parse().unwrap()).collect();
    let expected: Vec<u64> = (3..3 + tail.len() as u64).collect();
    assert_eq!(seqs, expected, "dense, no repeats");
    assert_eq!(tail.last().unwrap().event, "meeting_ended");
    let (_, said) = s
        .get(&s.key_a, &format!("/v1/meetings/{id}/messages"))
        .await;
    assert_eq!(said[0]["content"], "welcome");

    // Another organization: not found, everywhere.
    let (status, _) = s.get(&s.key_b, &format!("/v1/meetings/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let response = s
        .http
        .get(s.url(&format!("/v1/meetings/{id}/events")))
        .bearer_auth(&s.key_b)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    s.stop().await;
}

conformance!(
    sessions_keep_turns_and_inboxes,
    meeting_events_stream_and_resume_by_cursor,
);
