//! Sessions, inboxes and meetings through HTTP, with the meeting event stream resumed by cursor,
//! and another organization kept out.

use futures::StreamExt;
use pattern_db::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

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

async fn another_organization_cannot_act_in_sessions_inboxes_or_meetings(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let bob = s.agent(&s.key_a, "bob").await;
    let carol = s.agent(&s.key_b, "carol").await;
    let (status, session) = s
        .post(
            &s.key_a,
            "/v1/sessions",
            json!({"from": ada, "to": bob, "session_type": "async"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{session}");
    let sid = session["id"].as_str().unwrap().to_owned();
    let (status, sent) = s
        .post(
            &s.key_a,
            &format!("/v1/sessions/{sid}/messages"),
            json!({"from": ada, "content": "for bob only"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{sent}");

    // B cannot mark Bob's inbox read; through its own agent it changes nothing.
    let read = json!({"messages": [sent["id"]]});
    let (status, body) = s
        .post(
            &s.key_b,
            &format!("/v1/agents/{bob}/inbox/read"),
            read.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (status, changed) = s
        .post(&s.key_b, &format!("/v1/agents/{carol}/inbox/read"), read)
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed, 0);
    // B cannot end A's session, as its own agent or as A's.
    for agent in [&carol, &bob] {
        let (status, body) = s
            .post(
                &s.key_b,
                &format!("/v1/sessions/{sid}/end"),
                json!({ "agent": agent }),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(code(&body), "not_found");
    }
    let (_, inbox) = s.get(&s.key_a, &format!("/v1/agents/{bob}/inbox")).await;
    assert_eq!(inbox[0]["content"], "for bob only", "{inbox}");
    let (_, still) = s.get(&s.key_a, &format!("/v1/sessions/{sid}")).await;
    let mut expected = session.clone();
    expected["messages_sent"] = json!(1);
    assert_eq!(
        still, expected,
        "the session holds A's one message, nothing of B"
    );

    // B cannot host a meeting with A's agent.
    let (status, body) = s.post(&s.key_b, "/v1/meetings", json!({"host": ada})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    assert_eq!(
        pattern::protocol::store::Store::new(&s.db)
            .active_meetings()
            .await
            .unwrap()
            .len(),
        0
    );

    let (status, meeting) = s.post(&s.key_a, "/v1/meetings", json!({"host": ada})).await;
    assert_eq!(status, StatusCode::CREATED, "{meeting}");
    let mid = meeting["id"].as_str().unwrap().to_owned();
    let (status, meeting) = s
        .post(
            &s.key_a,
            &format!("/v1/meetings/{mid}/invite"),
            json!({"agent": ada, "invitee": bob}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{meeting}");
    // Neither organization can invite the other's agent.
    let (status, body) = s
        .post(
            &s.key_a,
            &format!("/v1/meetings/{mid}/invite"),
            json!({"agent": ada, "invitee": carol}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (status, theirs) = s
        .post(&s.key_b, "/v1/meetings", json!({"host": carol}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{theirs}");
    let theirs_id = theirs["id"].as_str().unwrap();
    let (status, body) = s
        .post(
            &s.key_b,
            &format!("/v1/meetings/{theirs_id}/invite"),
            json!({"agent": carol, "invitee": ada}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (_, theirs_after) = s.get(&s.key_b, &format!("/v1/meetings/{theirs_id}")).await;
    assert_eq!(theirs_after, theirs, "B's meeting holds only B's agent");

    // B can take no action in A's meeting, nor read what was said.
    for (action, body) in [
        ("join", json!({"agent": carol})),
        ("join", json!({"agent": bob})),
        ("invite", json!({"agent": carol, "invitee": carol})),
        ("start", json!({"agent": ada})),
        ("speak", json!({"agent": ada, "content": "intrusion"})),
        ("pass", json!({"agent": ada})),
        ("leave", json!({"agent": ada})),
        ("end", json!({"agent": ada})),
    ] {
        let (status, answer) = s
            .post(&s.key_b, &format!("/v1/meetings/{mid}/{action}"), body)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action}: {answer}");
        assert_eq!(code(&answer), "not_found", "{action}");
    }
    let (status, body) = s
        .get(&s.key_b, &format!("/v1/meetings/{mid}/messages"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(code(&body), "not_found");
    let (_, after) = s.get(&s.key_a, &format!("/v1/meetings/{mid}")).await;
    assert_eq!(after, meeting, "A's meeting is unchanged");
    let (_, said) = s
        .get(&s.key_a, &format!("/v1/meetings/{mid}/messages"))
        .await;
    assert_eq!(said.as_array().unwrap().len(), 0);
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

/// `POST /v1/meetings/run`: the server drives a meeting of the organization's agents to its
/// end (each turn a run of the speaker; the scripted model answers `done`), the event stream
/// shows it turn by turn, and bad requests store nothing.
async fn meetings_run_by_agents_over_http(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let bob = s.agent(&s.key_a, "bob").await;
    let carol = s.agent(&s.key_b, "carol").await;
    let bad = [
        (
            json!({"topic": "t", "agents": [ada]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"topic": "t", "agents": [ada, ada]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"topic": " ", "agents": [ada, bob]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"topic": "t", "agents": [ada, bob], "rounds": 0}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"topic": "t", "agents": [ada, bob], "turn_duration_ms": 0}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"topic": "t", "agents": [ada, bob], "policy": "chaos"}),
            StatusCode::BAD_REQUEST,
        ),
        // Another organization's agent is unknown here.
        (
            json!({"topic": "t", "agents": [ada, carol]}),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (body, expected) in bad {
        let (status, answer) = s.post(&s.key_a, "/v1/meetings/run", body.clone()).await;
        assert_eq!(status, expected, "{body}: {answer}");
    }
    let (status, _) = s
        .post(
            &s.key_b,
            "/v1/meetings/run",
            json!({"topic": "t", "agents": [ada, bob]}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        pattern::protocol::store::Store::new(&s.db)
            .active_meetings()
            .await
            .unwrap()
            .is_empty(),
        "nothing stored"
    );

    let (status, meeting) = s
        .post(
            &s.key_a,
            "/v1/meetings/run",
            json!({"topic": "Name the cat", "agents": [ada, bob], "rounds": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{meeting}");
    let id = meeting["id"].as_str().unwrap().to_owned();
    let follow = s
        .http
        .get(s.url(&format!("/v1/meetings/{id}/events")))
        .bearer_auth(&s.key_a);
    let (_, mut events) = s.stream(follow).await;
    let mut spoke = Vec::new();
    let mut seen = Vec::new();
    let done = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(e) = events.next().await {
            if e.event == "agent_spoke" {
                let data: Value = serde_json::from_str(&e.data).unwrap();
                spoke.push(data["agent"].as_str().unwrap().to_owned());
            }
            seen.push(e);
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "the meeting ended by itself and the stream closed"
    );
    assert_eq!(seen.last().unwrap().event, "meeting_ended");
    assert_eq!(spoke, [ada.clone(), bob.clone(), ada.clone(), bob.clone()]);
    // The speakers' output arrives between each turn_passed and the speech: the run's text,
    // ending with its `done`, each event with a resumable cursor.
    let mut speaker: Option<String> = None;
    let mut text = String::new();
    let mut outputs = 0;
    for e in &seen {
        let data: Value = serde_json::from_str(&e.data).unwrap();
        match e.event.as_str() {
            "turn_passed" => {
                speaker = data["agent"].as_str().map(str::to_owned);
                text.clear();
            }
            "output" => {
                outputs += 1;
                assert_eq!(data["speaker"].as_str(), speaker.as_deref(), "{}", e.data);
                assert_eq!(e.id.split(':').count(), 3, "{}", e.id);
                if data["event"]["type"] == "text_delta" {
                    text.push_str(data["event"]["text"].as_str().unwrap());
                }
            }
            "agent_spoke" => assert_eq!(text, "done", "the speech is the run's answer"),
            _ => {}
        }
    }
    assert!(outputs >= 8, "{seen:?}");
    // Resuming from inside a turn's output gives exactly what followed it.
    let at = seen.iter().position(|e| e.event == "output").unwrap();
    let resume = s
        .http
        .get(s.url(&format!("/v1/meetings/{id}/events")))
        .bearer_auth(&s.key_a)
        .header("Last-Event-ID", seen[at].id.clone());
    let (_, rest) = s.stream(resume).await;
    let rest: Vec<String> = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        rest.map(|e| e.id).collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let expected: Vec<String> = seen[at + 1..].iter().map(|e| e.id.clone()).collect();
    assert_eq!(rest, expected);
    let (_, said) = s
        .get(&s.key_a, &format!("/v1/meetings/{id}/messages"))
        .await;
    assert_eq!(said.as_array().unwrap().len(), 4);
    assert_eq!(said[0]["content"]["text"], "done");
    // Each turn is a whole batch of the speaker's history.
    let (_, batches) = s.get(&s.key_a, &format!("/v1/agents/{ada}/batches")).await;
    let batches = batches.as_array().unwrap();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert!(batches.iter().all(|b| b["state"] == "complete"));
    s.stop().await;
}

/// A session the served agents answer themselves, opened over HTTP with its first message: bob's
/// answer comes back as his reply, the limit ends the session, and both messages are read.
async fn agents_answer_a_session_opened_over_http(backend: Backend) {
    let s = Server::start(backend, vec![]).await;
    let ada = s.agent(&s.key_a, "ada").await;
    let bob = s.agent(&s.key_a, "bob").await;
    let carol = s.agent(&s.key_b, "carol").await;
    let (status, body) = s
        .post(
            &s.key_a,
            "/v1/sessions",
            json!({"from": ada, "to": bob, "session_type": "sync", "delivery": "bots"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .post(
            &s.key_b,
            "/v1/sessions",
            json!({"from": carol, "to": bob, "session_type": "sync", "delivery": "agents",
                   "message": "hi from another org"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        s.db.pending_queue(bob.parse().map(pattern::db::AgentId).unwrap())
            .await
            .unwrap()
            .is_empty()
    );
    let (status, session) = s
        .post(
            &s.key_a,
            "/v1/sessions",
            json!({"from": ada, "to": bob, "session_type": "sync", "delivery": "agents",
                   "message_limit": 2, "message": "what is the plan?"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{session}");
    assert_eq!(session["delivery"], "agents");
    assert_eq!(session["turn"], bob.as_str());
    let sid = session["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, now) = s.get(&s.key_a, &format!("/v1/sessions/{sid}")).await;
        if now["status"] == "ended" {
            assert_eq!(now["messages_sent"], 2);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agents never answered: {now}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, said) = s
        .get(&s.key_a, &format!("/v1/sessions/{sid}/messages"))
        .await;
    let said = said.as_array().unwrap();
    assert_eq!(said.len(), 2, "{said:?}");
    assert_eq!(said[1]["from"], bob.as_str());
    assert_eq!(
        said[1]["content"]["text"], "done",
        "bob's final answer is his reply"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while s.get(&s.key_a, &format!("/v1/agents/{ada}/inbox")).await.1 != json!([]) {
        assert!(
            std::time::Instant::now() < deadline,
            "ada's message stays unread"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, inbox) = s.get(&s.key_a, &format!("/v1/agents/{bob}/inbox")).await;
    assert_eq!(inbox, json!([]), "read once answered");
    s.stop().await;
}

conformance!(
    agents_answer_a_session_opened_over_http,
    meetings_run_by_agents_over_http,
    sessions_keep_turns_and_inboxes,
    another_organization_cannot_act_in_sessions_inboxes_or_meetings,
    meeting_events_stream_and_resume_by_cursor,
);
