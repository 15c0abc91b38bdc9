//! Meetings run by agents (`pattern_core::meeting`) with scripted models, on both backends:
//! turns in join order, each speaker's trigger holding what was said since its last turn, whole
//! batches in every agent's history, a slow speaker timed out, a speaker leaving by its tool, a
//! driver stopped mid-meeting and resumed by another, and bad plans refused with nothing stored.

use std::sync::Arc;
use std::time::Duration;

use memory_v2::DbMemoryStore;
use pattern_core::meeting::{MeetingDriver, MeetingPlan, MeetingProgress, Policy};
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{AgentRuntime, DatabaseAgent};
use pattern_db::testkit::TestDb;
use pattern_db::{
    AgentId, Backend, BatchState, BatchType, ContentBlock, Database, MeetingEventType, NewAgent,
};
use pattern_protocol::Protocol;
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::{batches_of, config};

struct Party {
    tdb: TestDb,
    db: Database,
    protocol: Protocol,
    agents: Vec<Arc<DatabaseAgent>>,
    ids: Vec<AgentId>,
}

/// Agents `names` of organization `acme`, each with its own scripted model (`scripts[i]`, then
/// "I am NAME" for ever) and the meeting tools.
async fn party(kind: Backend, names: &[&str], scripts: Vec<Vec<Turn>>) -> Party {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let db = tdb.open().await.unwrap();
    let org = db.create_organization("acme", "Acme").await.unwrap();
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let tools = Arc::new(pattern_core::tool::meeting::registry().unwrap());
    let mut agents = Vec::new();
    let mut ids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let row = db
            .create_agent(NewAgent::named(*name).in_organization(org.id))
            .await
            .unwrap();
        ids.push(row.id);
        let script = scripts.get(i).cloned().unwrap_or_default();
        let model =
            ScriptedProvider::new(script).with_fallback(Turn::text(&format!("I am {name}")));
        let runtime =
            AgentRuntime::builder(db.clone(), row, memory.clone(), Arc::new(model), config())
                .tools(tools.clone())
                .build()
                .unwrap();
        agents.push(DatabaseAgent::new(runtime));
    }
    let protocol = Protocol::new(db.clone()).await.unwrap();
    Party {
        tdb,
        db,
        protocol,
        agents,
        ids,
    }
}

fn plan(ids: &[AgentId], rounds: u32) -> MeetingPlan {
    MeetingPlan {
        topic: "What should we name the cat?".into(),
        rounds,
        end_phrase: None,
        policy: Policy::RoundRobin,
        agents: ids.to_vec(),
    }
}

fn sink() -> mpsc::Sender<MeetingProgress> {
    let (tx, mut rx) = mpsc::channel(64);
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    tx
}

fn texts(transcript: &[(String, String)]) -> Vec<String> {
    transcript.iter().map(|(who, _)| who.clone()).collect()
}

fn trigger_text(batch: &pattern_db::StoredBatch) -> String {
    batch.messages[0]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

async fn three_agents_hold_two_rounds_in_join_order(kind: Backend) {
    let p = party(kind, &["ada", "bob", "carol"], vec![]).await;
    let driver = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let id = driver.create(&plan(&p.ids, 2), None).await.unwrap();
    let outcome = driver.run(id, sink()).await.unwrap();
    assert_eq!(
        texts(&outcome.transcript),
        ["ada", "bob", "carol", "ada", "bob", "carol"]
    );
    assert_eq!(outcome.transcript[1].1, "I am bob");
    // The event log agrees with the transcript: the same speakers in the same order.
    let events = p.protocol.events_after(id, 0, 1000).await.unwrap();
    let spoke: Vec<AgentId> = events
        .iter()
        .filter(|e| e.event_type == MeetingEventType::AgentSpoke)
        .map(|e| e.agent.unwrap())
        .collect();
    let expected: Vec<AgentId> = [0, 1, 2, 0, 1, 2].iter().map(|i| p.ids[*i]).collect();
    assert_eq!(spoke, expected);
    assert_eq!(
        events.last().unwrap().event_type,
        MeetingEventType::MeetingEnded
    );
    // Every agent's history holds its two turns as whole, complete AgentToAgent batches; the
    // second trigger carries what the others said since.
    for (i, id) in p.ids.iter().enumerate() {
        let batches = batches_of(&p.db, *id).await;
        assert_eq!(batches.len(), 2, "agent {i}");
        for b in &batches {
            assert_eq!(b.info.state, BatchState::Complete);
            assert_eq!(b.info.batch_type, BatchType::AgentToAgent);
        }
        let second = trigger_text(&batches[1]);
        assert!(second.contains("round 2 of 2"), "{second}");
        for (j, other) in ["ada", "bob", "carol"].iter().enumerate() {
            if j != i {
                assert!(
                    second.contains(&format!("- {other}: I am {other}")),
                    "{second}"
                );
            }
        }
    }
    let first = trigger_text(&batches_of(&p.db, p.ids[0]).await[0]);
    assert!(
        first.contains("What should we name the cat?")
            && first.contains("meeting_end ends the meeting")
    );
    p.db.close().await;
    p.tdb.cleanup().await.unwrap();
}

async fn a_slow_speaker_times_out_and_the_next_speaks(kind: Backend) {
    let slow = vec![Turn::Slow(
        Duration::from_secs(20),
        vec![ContentBlock::text("too late")],
    )];
    let p = party(kind, &["ada", "bob", "carol"], vec![vec![], slow]).await;
    let driver = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let id = driver
        .create(&plan(&p.ids, 1), Some(Duration::from_millis(1500)))
        .await
        .unwrap();
    let outcome = driver.run(id, sink()).await.unwrap();
    assert_eq!(texts(&outcome.transcript), ["ada", "carol"]);
    let events = p.protocol.events_after(id, 0, 1000).await.unwrap();
    assert!(
        events.iter().any(|e| {
            e.event_type == MeetingEventType::AgentTimedOut && e.agent == Some(p.ids[1])
        })
    );
    // Bob's run was cancelled: its batch abandoned, nothing of "too late" stored anywhere.
    let bob = batches_of(&p.db, p.ids[1]).await;
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0].info.state, BatchState::Abandoned);
    assert_eq!(bob[0].messages.len(), 1, "only the trigger");
    p.db.close().await;
    p.tdb.cleanup().await.unwrap();
}

async fn a_speaker_leaves_by_its_tool(kind: Backend) {
    let leave = vec![
        Turn::call("l1", "meeting_leave", json!({})),
        Turn::text("goodbye"),
    ];
    let p = party(kind, &["ada", "bob", "carol"], vec![vec![], leave]).await;
    let driver = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let id = driver.create(&plan(&p.ids, 2), None).await.unwrap();
    let outcome = driver.run(id, sink()).await.unwrap();
    assert_eq!(texts(&outcome.transcript), ["ada", "carol", "ada", "carol"]);
    let events = p.protocol.events_after(id, 0, 1000).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| { e.event_type == MeetingEventType::AgentLeft && e.agent == Some(p.ids[1]) })
    );
    // Bob's turn is one whole batch: the call, its result, the goodbye.
    let bob = batches_of(&p.db, p.ids[1]).await;
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0].info.state, BatchState::Complete);
    p.db.close().await;
    p.tdb.cleanup().await.unwrap();
}

async fn a_stopped_driver_is_resumed_with_every_turn_once(kind: Backend) {
    let p = party(kind, &["ada", "bob", "carol"], vec![]).await;
    let first = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let id = first.create(&plan(&p.ids, 3), None).await.unwrap();
    // Stop the first driver as soon as the second speech is stored (mid-meeting, possibly with
    // the third turn's run already submitted).
    let (tx, mut rx) = mpsc::channel(64);
    let running = tokio::spawn(async move { first.run(id, tx).await });
    let mut spoke = 0;
    while let Some(progress) = rx.recv().await {
        if matches!(progress, MeetingProgress::Spoke { .. }) {
            spoke += 1;
            if spoke == 2 {
                break;
            }
        }
    }
    running.abort();
    let _ = running.await;
    let second = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let outcome = second.run(id, sink()).await.unwrap();
    assert_eq!(
        texts(&outcome.transcript),
        [
            "ada", "bob", "carol", "ada", "bob", "carol", "ada", "bob", "carol"
        ]
    );
    for id in &p.ids {
        let batches = batches_of(&p.db, *id).await;
        let complete = batches
            .iter()
            .filter(|b| b.info.state == BatchState::Complete)
            .count();
        assert_eq!(complete, 3, "one completed run per turn");
        assert!(batches.iter().all(|b| b.info.state != BatchState::Open));
    }
    p.db.close().await;
    p.tdb.cleanup().await.unwrap();
}

async fn bad_meetings_are_refused_with_nothing_stored(kind: Backend) {
    let outside = vec![
        Turn::call("p1", "meeting_pass", json!({})),
        Turn::call("e1", "meeting_end", json!({})),
        Turn::text("ok"),
    ];
    let p = party(kind, &["ada", "bob"], vec![outside]).await;
    let driver = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let mut bad = vec![
        plan(&p.ids[..1], 1),
        plan(&[p.ids[0], p.ids[0]], 1),
        plan(&p.ids, 0),
        plan(&p.ids, 101),
        plan(&[p.ids[0], AgentId::new()], 1),
    ];
    let mut empty = plan(&p.ids, 1);
    empty.topic = "   ".into();
    bad.push(empty);
    for b in &bad {
        let refused = driver.create(b, None).await;
        assert!(
            matches!(
                refused.as_ref().map_err(|e| e.class()),
                Err(pattern_db::ErrorClass::Invalid)
            ),
            "{b:?}: {refused:?}"
        );
    }
    assert!(matches!(
        driver.create(&plan(&p.ids, 1), Some(Duration::ZERO)).await,
        Err(pattern_core::Error::InvalidMeeting(_))
    ));
    // An agent of another organization.
    let other = p.db.create_organization("other", "Other").await.unwrap();
    let stranger =
        p.db.create_agent(NewAgent::named("eve").in_organization(other.id))
            .await
            .unwrap();
    let memory = Arc::new(DbMemoryStore::new(p.db.clone()));
    let runtime = AgentRuntime::builder(
        p.db.clone(),
        stranger.clone(),
        memory,
        Arc::new(ScriptedProvider::new([])),
        config(),
    )
    .build()
    .unwrap();
    let mut all = p.agents.clone();
    all.push(DatabaseAgent::new(runtime));
    let walled = MeetingDriver::new(p.protocol.clone(), all);
    let refused = walled
        .create(&plan(&[p.ids[0], stranger.id], 1), None)
        .await;
    assert!(
        matches!(
            refused,
            Err(pattern_core::Error::Db(
                pattern_db::Error::OtherOrganization { .. }
            ))
        ),
        "{refused:?}"
    );
    assert!(p.protocol.active_meetings().await.unwrap().is_empty());
    // The meeting tools refuse an agent whose turn it is not: error results the model sees.
    let events = crate::support::run(
        &p.agents[0],
        pattern_core::IncomingMessage::user("pass, then end the meeting"),
    )
    .await;
    let results: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            pattern_core::ResponseEvent::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{events:?}");
    for (content, is_error) in &results {
        assert!(*is_error && content.contains("not your turn"), "{content}");
    }
    p.db.close().await;
    p.tdb.cleanup().await.unwrap();
}

conformance!(
    three_agents_hold_two_rounds_in_join_order,
    a_slow_speaker_times_out_and_the_next_speaks,
    a_speaker_leaves_by_its_tool,
    a_stopped_driver_is_resumed_with_every_turn_once,
    bad_meetings_are_refused_with_nothing_stored,
);

/// The meeting registry's definitions fit the tools budget of a local model's 8k window, as the
/// built-in set does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meeting_tools_fit_a_small_local_window() {
    let config = pattern_core::RuntimeConfig::new("You are a test agent.", 8192);
    let tools = Arc::new(pattern_core::tool::meeting::registry().unwrap());
    let h = crate::support::Harness::with(
        Backend::Sqlite,
        vec![Turn::text("fits")],
        config,
        Some(tools),
    )
    .await;
    let events = h.turn("hello").await;
    assert!(
        matches!(
            crate::support::last(&events),
            pattern_core::ResponseEvent::Done { .. }
        ),
        "{events:?}"
    );
    h.cleanup().await;
}
