//! Agents in sessions by tool (decision 0020), on both backends with scripted models and a real
//! queue processor: a sync session opened by `session_send` runs itself (each message the other
//! agent's trigger, each final answer the reply) until its message limit; every batch whole;
//! every message read once answered. Refusals (another organization's agent, oneself, a bad
//! session id, out of turn) are error results the model sees, with nothing stored.

use std::sync::Arc;
use std::time::Duration;

use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{Agent, QueueProcessor};
use pattern_db::{Backend, BatchState, BatchType, NewAgent, SessionStatus};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{Harness, batches_of, config, tool_results, wait_for};

async fn two_agents_hold_a_sync_session_opened_by_tool(kind: Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "session_send",
                json!({"agent": "bob", "message": "ping 1", "sync": true}),
            ),
            Turn::text("asked bob"),
            Turn::text("ping 2"),
            Turn::text("ping 3"),
            Turn::text("ping 4"),
            Turn::text("ping 5"),
            Turn::text("bye"),
        ],
    )
    .await;
    let bob_model = ScriptedProvider::new(
        (1..=5)
            .map(|i| Turn::text(&format!("pong {i}")))
            .collect::<Vec<_>>(),
    );
    let bob = Harness::agent(&h.db, &h.memory, &bob_model, "bob", config(), None).await;
    let processor = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(50),
    );
    processor.register(h.agent.clone()).await;
    processor.register(bob.clone()).await;
    let task = processor.clone().spawn();

    let events = h.turn("talk to bob").await;
    assert_eq!(tool_results(&events).len(), 1);
    assert!(!tool_results(&events)[0].1, "{events:?}");
    let db = h.db.clone();
    let (ada_id, bob_id) = (h.agent.id(), bob.id());
    // The session runs itself: ten messages (the tool's sync limit), then it ends; ada's last
    // trigger is answered too.
    wait_for("the session to end", Duration::from_secs(60), async || {
        let batches = batches_of(&db, ada_id).await;
        batches.len() == 6
            && batches.iter().all(|b| b.info.state == BatchState::Complete)
            && db.pending_queue(ada_id).await.unwrap().is_empty()
            && db.pending_queue(bob_id).await.unwrap().is_empty()
    })
    .await;
    let conversations = pattern_protocol::store::Store::new(&h.db)
        .active_conversations()
        .await
        .unwrap();
    assert!(conversations.is_empty(), "ended at its limit");
    let ada_batches = batches_of(&h.db, ada_id).await;
    let session_id = ada_batches[1].messages[0]
        .text()
        .split("session ")
        .nth(1)
        .and_then(|s| s.split(&[',', ']'][..]).next())
        .and_then(|s| s.parse::<uuid::Uuid>().ok())
        .map(pattern_db::SessionId)
        .expect("the trigger names its session");
    let session = pattern_protocol::store::Store::new(&h.db)
        .session(session_id)
        .await
        .unwrap();
    assert_eq!(session.status, SessionStatus::Ended);
    let said: Vec<(String, String, bool)> = pattern_protocol::store::Store::new(&h.db)
        .session_messages(session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| {
            let who = if m.sender == ada_id { "ada" } else { "bob" };
            (
                who.to_owned(),
                m.content["text"].as_str().unwrap().to_owned(),
                m.read_at.is_some(),
            )
        })
        .collect();
    let expected: Vec<(String, String, bool)> = (1..=5)
        .flat_map(|i| {
            [
                ("ada".to_owned(), format!("ping {i}"), true),
                ("bob".to_owned(), format!("pong {i}"), true),
            ]
        })
        .collect();
    assert_eq!(said, expected);
    // Whole batches: ada's request and five agent_to_agent turns; bob's five.
    let types: Vec<BatchType> = ada_batches.iter().map(|b| b.info.batch_type).collect();
    assert_eq!(types[0], BatchType::UserRequest);
    assert!(types[1..].iter().all(|t| *t == BatchType::AgentToAgent));
    let bob_batches = batches_of(&h.db, bob_id).await;
    assert_eq!(bob_batches.len(), 5);
    assert!(
        bob_batches
            .iter()
            .all(|b| b.info.state == BatchState::Complete
                && b.info.batch_type == BatchType::AgentToAgent)
    );
    processor.stop();
    task.await.unwrap();
    drop(bob);
    h.cleanup().await;
}

async fn session_tools_refuse_with_error_results_and_store_nothing(kind: Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "session_send",
                json!({"agent": "eve", "message": "hello", "sync": true}),
            ),
            Turn::call(
                "c2",
                "session_send",
                json!({"agent": "ada", "message": "hello me"}),
            ),
            Turn::call(
                "c3",
                "session_send",
                json!({"session": "not-an-id", "message": "x"}),
            ),
            Turn::call(
                "c4",
                "session_send",
                json!({"agent": "nobody", "message": "x"}),
            ),
            Turn::call("c5", "session_send", json!({"agent": "bob"})),
            Turn::text("done"),
        ],
    )
    .await;
    let other = h.db.create_organization("globex", "Globex").await.unwrap();
    let eve =
        h.db.create_agent(NewAgent::named("eve").in_organization(other.id))
            .await
            .unwrap();
    let bob_model = ScriptedProvider::new(vec![]);
    let bob = Harness::agent(&h.db, &h.memory, &bob_model, "bob", config(), None).await;
    let events = h.turn("try things").await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 5, "{events:?}");
    for (content, is_error) in &results {
        assert!(*is_error, "{content}");
    }
    // Another organization's agent is as unknown as a name that exists nowhere.
    assert!(results[0].0.contains("eve"), "{}", results[0].0);
    assert!(results[1].0.contains("itself"), "{}", results[1].0);
    assert!(
        results[2].0.contains("not a session id"),
        "{}",
        results[2].0
    );
    assert!(
        pattern_protocol::store::Store::new(&h.db)
            .active_conversations()
            .await
            .unwrap()
            .is_empty()
    );
    for id in [h.agent.id(), bob.id(), eve.id] {
        assert!(h.db.pending_queue(id).await.unwrap().is_empty());
        assert!(
            pattern_protocol::store::Store::new(&h.db)
                .unread(id)
                .await
                .unwrap()
                .is_empty()
        );
    }
    let batches = h.batches().await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.state, BatchState::Complete);
    drop(bob);
    h.cleanup().await;
}

conformance!(
    two_agents_hold_a_sync_session_opened_by_tool,
    session_tools_refuse_with_error_results_and_store_nothing,
);
