//! The queue processor: messages between agents and scheduled wakeups are delivered through
//! `Agent::process`, exactly once (cron schedules included), also with two processors (two
//! processes) watching one database.

use std::sync::Arc;
use std::time::Duration;

use memory_v2::DbMemoryStore;
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{Agent, QueueProcessor};
use pattern_db::{Backend, BatchState, BatchType, ContentBlock};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{Harness, batches_of, config, wait_for};

async fn agents_message_each_other_through_the_queue(kind: Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "send_message",
                json!({"target": "agent:bob", "content": "meeting at noon"}),
            ),
            Turn::text("told bob"),
        ],
    )
    .await;
    let bob_model = ScriptedProvider::new(vec![Turn::text("noted, thanks ada")]);
    let bob = Harness::agent(&h.db, &h.memory, &bob_model, "bob", config(), None).await;
    let processor = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(50),
    );
    processor.register(h.agent.clone()).await;
    processor.register(bob.clone()).await;
    let task = processor.clone().spawn();

    let events = h.turn("tell bob about the meeting").await;
    assert!(matches!(
        crate::support::last(&events),
        pattern_core::ResponseEvent::Done { .. }
    ));
    let db = h.db.clone();
    let bob_id = bob.id();
    wait_for("bob's turn", Duration::from_secs(20), async || {
        batches_of(&db, bob_id)
            .await
            .iter()
            .any(|b| b.info.state == BatchState::Complete)
    })
    .await;
    let batches = batches_of(&h.db, bob.id()).await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.batch_type, BatchType::AgentToAgent);
    // One channel (decision 0020): the message went through the protocol's async session of
    // the pair, became bob's trigger, and was marked read when bob's batch completed.
    let trigger = batches[0].messages[0].text();
    assert!(
        trigger.starts_with("[message from agent ada in async session")
            && trigger.ends_with("\nmeeting at noon"),
        "{trigger}"
    );
    let sessions = pattern_protocol::store::Store::new(&h.db)
        .active_conversations()
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1);
    let said = pattern_protocol::store::Store::new(&h.db)
        .session_messages(sessions[0].session.id)
        .await
        .unwrap();
    assert_eq!(said.len(), 1);
    assert_eq!(said[0].sender, h.agent.id());
    assert!(said[0].read_at.is_some());
    assert!(h.db.pending_queue(bob.id()).await.unwrap().is_empty());
    processor.stop();
    task.await.unwrap();
    drop(bob);
    h.cleanup().await;
}

async fn wakeups_run_once_each_even_with_two_processors(kind: Backend) {
    let h = Harness::new(kind, vec![]).await;
    // A second process: its own agent object and processor over the same database.
    let other_model = ScriptedProvider::new(vec![]);
    let other_runtime = pattern_core::AgentRuntime::builder(
        h.db.clone(),
        h.db.agent(h.agent.id()).await.unwrap(),
        Arc::new(DbMemoryStore::new(h.db.clone())),
        Arc::new(other_model.clone()),
        config(),
    )
    .build()
    .unwrap();
    let other = pattern_core::DatabaseAgent::new(other_runtime);
    let p1 = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(20),
    );
    let p2 = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(20),
    );
    p1.register(h.agent.clone()).await;
    p2.register(other.clone()).await;
    let (t1, t2) = (p1.clone().spawn(), p2.clone().spawn());

    let runtime = h.agent.runtime();
    let soon = chrono::Utc::now() + chrono::Duration::milliseconds(200);
    let once = runtime
        .schedule_wakeup(soon, None, "check the oven")
        .await
        .unwrap();
    let recurring = runtime
        .schedule_wakeup(soon, Some(Duration::from_secs(1)), "hourly review")
        .await
        .unwrap();
    // A cron schedule (every second) goes through the same claim: each firing once.
    let cron = runtime
        .add_schedule(pattern_db::schedule::NewSchedule {
            message: "cron tick".into(),
            when: pattern_db::schedule::When::Cron {
                expr: "* * * * * *".into(),
                tz: None,
            },
            name: None,
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    p1.stop();
    p2.stop();
    t1.await.unwrap();
    t2.await.unwrap();
    assert!(pattern_core::db_agent::wait_idle(&h.agent, Duration::from_secs(10)).await);
    assert!(pattern_core::db_agent::wait_idle(&other, Duration::from_secs(10)).await);

    let batches = batches_of(&h.db, h.agent.id()).await;
    let texts: Vec<String> = batches
        .iter()
        .map(|b| match &b.messages[0].content[0] {
            ContentBlock::Text { text } => text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        texts.iter().filter(|t| *t == "check the oven").count(),
        1,
        "{texts:?}"
    );
    let reviews = texts.iter().filter(|t| *t == "hourly review").count();
    assert!(reviews >= 2, "{texts:?}");
    let ticks = texts.iter().filter(|t| *t == "cron tick").count();
    assert!(ticks >= 2, "{texts:?}");
    let cron_now = h.db.schedule(cron.id).await.unwrap();
    assert_eq!(
        cron_now.deliveries as usize, ticks,
        "every cron firing began exactly one batch"
    );
    let pending = h.db.pending_queue(h.agent.id()).await.unwrap();
    assert!(
        pending.iter().all(|q| q.id != once.id),
        "the one-off is delivered"
    );
    let rec = pending.iter().find(|q| q.id == recurring.id).unwrap();
    assert_eq!(
        rec.deliveries as usize, reviews,
        "every delivery began exactly one batch"
    );
    assert!(
        batches
            .iter()
            .all(|b| b.info.batch_type == BatchType::SystemTrigger)
    );
    assert_eq!(h.provider.calls() + other_model.calls(), batches.len());
    drop(other);
    h.cleanup().await;
}

/// An agent no longer registered gets nothing delivered; its entries wait for the next
/// registration, and are delivered once then.
async fn an_unregistered_agent_keeps_its_entries_queued(kind: Backend) {
    let h = Harness::new(kind, vec![Turn::text("woken")]).await;
    let processor = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(50),
    );
    processor.register(h.agent.clone()).await;
    processor.unregister(h.agent.id()).await;
    let entry = h
        .agent
        .runtime()
        .schedule_wakeup(chrono::Utc::now(), None, "wake up")
        .await
        .unwrap();
    assert_eq!(processor.run_once().await.unwrap(), 0);
    assert_eq!(h.db.pending_queue(h.agent.id()).await.unwrap(), vec![entry]);
    processor.register(h.agent.clone()).await;
    assert_eq!(processor.run_once().await.unwrap(), 1);
    let db = h.db.clone();
    let id = h.agent.id();
    wait_for("the wakeup's turn", Duration::from_secs(20), async || {
        batches_of(&db, id)
            .await
            .iter()
            .any(|b| b.info.state == BatchState::Complete)
    })
    .await;
    assert!(h.db.pending_queue(id).await.unwrap().is_empty());
    h.cleanup().await;
}

/// `send_message` to `agent:NAME` looks only inside the sender's organization (local agents only
/// among local agents): another organization's agent, addressed by any form of its name
/// (including the old `{organization id}/name`), and a local agent addressed from an
/// organization are refused with the same error result as an unknown name, and nothing is
/// queued for them.
async fn agent_messages_stay_inside_the_organization(kind: Backend) {
    use pattern_core::{AgentRuntime, DatabaseAgent, ResponseEvent};
    use pattern_db::NewAgent;

    let tdb = pattern_db::testkit::TestDb::fresh(kind).await.unwrap();
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap().id;
    let other = db.create_organization("other", "Other").await.unwrap().id;
    let ada = db
        .create_org_agent(acme, NewAgent::named("ada"))
        .await
        .unwrap();
    let bob = db
        .create_org_agent(acme, NewAgent::named("bob"))
        .await
        .unwrap();
    let their_bob = db
        .create_org_agent(other, NewAgent::named("bob"))
        .await
        .unwrap();
    let local = db.create_agent(NewAgent::named("carol")).await.unwrap();
    let local_bob = db.create_agent(NewAgent::named("bob")).await.unwrap();

    let refused = [
        format!("agent:{other}/bob"),
        "agent:carol".to_owned(),
        format!("agent:{acme}/bob"),
        "agent:nobody".to_owned(),
    ];
    let accepted = ["agent:bob".to_owned(), "agent:bob".to_owned()];
    let mut script = Vec::new();
    for (i, target) in refused.iter().chain(&accepted).enumerate() {
        script.push(Turn::call(
            &format!("c{i}"),
            "send_message",
            json!({"target": target, "content": "psst"}),
        ));
    }
    script.push(Turn::text("done"));
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let model = ScriptedProvider::new(script);
    let runtime = AgentRuntime::builder(db.clone(), ada, memory.clone(), Arc::new(model), config())
        .build()
        .unwrap();
    let agent = DatabaseAgent::new(runtime);
    let events = crate::support::run(&agent, pattern_core::IncomingMessage::user("go")).await;
    let results: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            ResponseEvent::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), refused.len() + accepted.len(), "{events:?}");
    for ((content, is_error), target) in results.iter().zip(&refused) {
        assert!(*is_error, "{target} was not refused: {content}");
        let name = target.trim_start_matches("agent:");
        assert!(
            content.contains(&format!("unknown agent `{name}`")),
            "{target}: {content}"
        );
        assert!(
            !content.contains("organization"),
            "reveals nothing: {content}"
        );
    }
    for (content, is_error) in &results[refused.len()..] {
        assert!(!is_error, "{content}");
    }
    assert_eq!(db.pending_queue(bob.id).await.unwrap().len(), 2);
    for nobody in [their_bob.id, local.id, local_bob.id] {
        assert!(db.pending_queue(nobody).await.unwrap().is_empty());
    }

    // A local agent reaches local agents only.
    let model = ScriptedProvider::new(vec![
        Turn::call(
            "l1",
            "send_message",
            json!({"target": format!("agent:{acme}/bob"), "content": "hi"}),
        ),
        Turn::call(
            "l2",
            "send_message",
            json!({"target": "agent:bob", "content": "hi"}),
        ),
        Turn::text("done"),
    ]);
    let runtime = AgentRuntime::builder(db.clone(), local, memory, Arc::new(model), config())
        .build()
        .unwrap();
    let carol = DatabaseAgent::new(runtime);
    let events = crate::support::run(&carol, pattern_core::IncomingMessage::user("go")).await;
    let errors: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            ResponseEvent::ToolResult { is_error, .. } => Some(*is_error),
            _ => None,
        })
        .collect();
    assert_eq!(errors, [true, false]);
    assert_eq!(db.pending_queue(bob.id).await.unwrap().len(), 2);
    assert_eq!(db.pending_queue(local_bob.id).await.unwrap().len(), 1);
    drop((agent, carol));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    agent_messages_stay_inside_the_organization,
    an_unregistered_agent_keeps_its_entries_queued,
    agents_message_each_other_through_the_queue,
    wakeups_run_once_each_even_with_two_processors,
);
