//! The store API, case by case, on both backends. Every case is written once and instantiated for
//! SQLite and PostgreSQL by the macro at the bottom.

use pattern_db::{AgentError, BatchError, BlockError, ProtocolError, StorageError};
use std::time::Duration;

use pattern_db::{
    Backend, BatchState, BatchType, BeginBatch, ContentBlock, Database, DbConfig, Error,
    LegacyMessage, MachineId, NewAgent, NewBlock, NewMessage, OrganizationId, RecoveryScope, Role,
    SnowflakeId, Summary,
};
use serde_json::json;

use crate::{Kind, fresh, open_with};

fn call(id: &str) -> NewMessage {
    NewMessage::new(
        Role::Assistant,
        vec![ContentBlock::tool_use(id, "search", json!({"q": id}))],
    )
}

fn result(id: &str) -> NewMessage {
    NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result(
            id,
            format!("result of {id}"),
            false,
        )],
    )
}

async fn agents(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await;
    let db = db.unwrap();
    let a = db
        .create_agent(NewAgent {
            metadata: json!({"model": "m"}),
            ..NewAgent::named("ada")
        })
        .await
        .unwrap();
    let b = db.create_agent(NewAgent::named("bob")).await.unwrap();
    assert_eq!(db.agent(a.id).await.unwrap(), a);
    assert_eq!(db.agent_by_name("bob").await.unwrap().id, b.id);
    assert_eq!(
        db.agents()
            .await
            .unwrap()
            .iter()
            .map(|x| x.name.as_str())
            .collect::<Vec<_>>(),
        ["ada", "bob"]
    );
    assert!(
        matches!(db.create_agent(NewAgent::named("ada")).await, Err(Error::Agent(AgentError::NameTaken(n))) if n == "ada")
    );
    assert!(matches!(
        db.create_agent(NewAgent::named("")).await,
        Err(Error::Agent(AgentError::InvalidName { field: "name", .. }))
    ));
    assert!(matches!(
        db.agent_by_name("nobody").await,
        Err(Error::Agent(AgentError::NameNotFound(_)))
    ));

    // Metadata is replaced whole and read back; an unknown agent is refused.
    let changed = db
        .set_agent_metadata(a.id, json!({"model": {"provider": "openai", "model": "x"}}))
        .await
        .unwrap();
    assert_eq!(changed.metadata["model"]["model"], "x");
    assert_eq!(db.agent(a.id).await.unwrap(), changed);
    assert_eq!(changed.created_at, a.created_at);

    // Deleting an agent removes its history too.
    let store = db.messages(b.id);
    store
        .begin_batch(NewMessage::user("hi"), BeginBatch::default())
        .await
        .unwrap();
    db.delete_agent(b.id).await.unwrap();
    assert!(matches!(
        db.agent(b.id).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    assert!(store.get_recent(10).await.unwrap().is_empty());
    assert!(matches!(
        db.delete_agent(b.id).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    assert!(matches!(
        db.set_agent_metadata(b.id, json!({})).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn batch_lifecycle(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);

    let received = store
        .begin_batch(NewMessage::user("find the report"), BeginBatch::default())
        .await
        .unwrap();
    let open = store.get_batch(received.batch_id).await.unwrap();
    assert_eq!(open.info.state, BatchState::Open);
    assert_eq!(open.info.batch_type, BatchType::UserRequest);
    assert_eq!(open.info.run_owner.as_deref(), Some(db.run_owner()));
    assert_eq!(open.messages.len(), 1);
    assert_eq!(
        open.messages[0].position, received.batch_id,
        "the batch id is the trigger's position"
    );
    assert_eq!(open.messages[0].sequence_num, 0);
    assert_eq!(
        store.current_batch().await.unwrap().map(|b| b.id),
        Some(received.batch_id)
    );

    // Parallel calls, results stored in the order they finished.
    let step1 = NewMessage::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking {
                text: "two searches".into(),
                signature: None,
            },
            ContentBlock::tool_use("a", "search", json!({})),
            ContentBlock::tool_use("b", "search", json!({})),
        ],
    );
    let r1 = store
        .append_step(received.batch_id, vec![step1])
        .await
        .unwrap();
    assert_eq!(r1.stored.len(), 1);
    assert!(matches!(
        store.complete_batch(received.batch_id).await,
        Err(Error::Batch(BatchError::PendingToolCalls { pending, .. })) if pending == ["a", "b"]
    ));
    let r2 = store
        .append_step(
            received.batch_id,
            vec![result("b"), result("a"), NewMessage::assistant("found it")],
        )
        .await
        .unwrap();
    assert_eq!(r2.stored.iter().map(|s| s.2).collect::<Vec<_>>(), [2, 3, 4]);
    let done = store.complete_batch(received.batch_id).await.unwrap();
    assert_eq!(done.state, BatchState::Complete);
    assert!(done.completed_at.is_some());
    assert_eq!(done.run_owner, None);
    // What completing returns is what is stored (it is not read again).
    assert_eq!(store.batch_info(received.batch_id).await.unwrap(), done);
    // Completing again is a no-op.
    assert_eq!(
        store.complete_batch(received.batch_id).await.unwrap().state,
        BatchState::Complete
    );
    assert_eq!(store.current_batch().await.unwrap(), None);

    let batch = store.get_batch(received.batch_id).await.unwrap();
    assert_eq!(batch.messages.len(), 5);
    assert!(
        batch
            .messages
            .windows(2)
            .all(|w| w[0].position < w[1].position)
    );
    assert_eq!(
        batch
            .messages
            .iter()
            .map(|m| m.sequence_num)
            .collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert!(batch.pending_tool_calls().is_empty());
    assert_eq!(batch.info.message_count, 5);

    // Nothing can be appended to a complete batch, and nothing changes.
    let err = store
        .append_step(received.batch_id, vec![NewMessage::assistant("late")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Batch(BatchError::NotOpen {
                state: BatchState::Complete,
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(
        store
            .get_batch(received.batch_id)
            .await
            .unwrap()
            .messages
            .len(),
        5
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn pairing_is_enforced(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let b = store
        .begin_batch(NewMessage::user("go"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store.append_step(b, vec![call("t1")]).await.unwrap();

    let err = store
        .append_step(b, vec![result("nope")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Batch(BatchError::UnpairedToolResult { tool_use_id, .. }) if tool_use_id == "nope"),
        "{err}"
    );
    let err = store.append_step(b, vec![call("t1")]).await.unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::DuplicateToolUse { .. })),
        "{err}"
    );
    let err = store
        .append_step(b, vec![result("t1"), result("t1")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::DuplicateToolResult { .. })),
        "{err}"
    );
    // A step that fails is not stored in part: the valid first message of it is gone too.
    let err = store
        .append_step(b, vec![NewMessage::assistant("partial"), result("zz")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::UnpairedToolResult { .. })),
        "{err}"
    );
    assert_eq!(store.get_batch(b).await.unwrap().messages.len(), 2);

    // A result for a call of another batch is refused as well.
    let other = store
        .begin_batch(NewMessage::user("other"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert!(matches!(
        store.append_step(other, vec![result("t1")]).await,
        Err(Error::Batch(BatchError::UnpairedToolResult { .. }))
    ));
    // Roles: a user message cannot call tools; triggers cannot be assistant messages.
    let err = store
        .append_step(
            b,
            vec![NewMessage::new(
                Role::User,
                vec![ContentBlock::tool_use("x", "y", json!({}))],
            )],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::InvalidContent(_))),
        "{err}"
    );
    assert!(matches!(
        store
            .begin_batch(NewMessage::assistant("me first"), BeginBatch::default())
            .await,
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    assert!(matches!(
        store.append_step(b, vec![]).await,
        Err(Error::Batch(BatchError::EmptyStep))
    ));
    store
        .append_step(b, vec![result("t1"), NewMessage::assistant("ok")])
        .await
        .unwrap();
    store.complete_batch(b).await.unwrap();
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn continuation_keeps_the_batch(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let b = store
        .begin_batch(NewMessage::system("wake up"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert_eq!(
        store.batch_info(b).await.unwrap().batch_type,
        BatchType::SystemTrigger
    );
    store
        .append_step(b, vec![NewMessage::assistant("thinking, will continue")])
        .await
        .unwrap();
    store.complete_batch(b).await.unwrap();
    // Another batch in between, then the heartbeat continues the first one.
    let b2 = store
        .begin_batch(NewMessage::user("meanwhile"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(b2, vec![NewMessage::assistant("sure")])
        .await
        .unwrap();
    store.complete_batch(b2).await.unwrap();
    let info = store.continue_batch(b).await.unwrap();
    assert_eq!(info.state, BatchState::Open);
    assert_eq!(info.id, b);
    let r = store
        .append_step(b, vec![NewMessage::assistant("continued")])
        .await
        .unwrap();
    assert_eq!(r.stored[0].2, 2);
    store.complete_batch(b).await.unwrap();
    let batch = store.get_batch(b).await.unwrap();
    assert_eq!(
        batch.messages.last().unwrap().batch_type,
        BatchType::Continuation
    );
    assert_eq!(batch.messages[0].batch_type, BatchType::SystemTrigger);
    // The continued message is later in the history than the batch in between.
    let recent = store.get_recent(2).await.unwrap();
    assert_eq!(
        recent.iter().map(|b| b.info.id).collect::<Vec<_>>(),
        [b, b2]
    );
    assert!(recent[0].messages.last().unwrap().position > recent[1].messages[0].position);
    // Every read gives each message its own batch type (SQLite's newest-batches read once gave
    // every message its batch's).
    let types =
        |b: &pattern_db::StoredBatch| b.messages.iter().map(|m| m.batch_type).collect::<Vec<_>>();
    assert_eq!(types(&recent[0]), types(&batch));
    assert!(matches!(
        store
            .begin_batch(
                NewMessage::user("x"),
                BeginBatch {
                    batch_type: Some(BatchType::Continuation),
                    ..Default::default()
                }
            )
            .await,
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn recovery_abandons_expired_open_batches(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.batch_lease = Duration::from_millis(1_000)).await;
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let done = store
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(done, vec![NewMessage::assistant("ok")])
        .await
        .unwrap();
    store.complete_batch(done).await.unwrap();
    let crashed = store
        .begin_batch(NewMessage::user("two"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store.append_step(crashed, vec![call("t")]).await.unwrap();

    // The lease is still valid: nothing to recover.
    assert!(store.recover().await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let abandoned = store.recover().await.unwrap();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].batch.id, crashed);
    assert_eq!(abandoned[0].batch.state, BatchState::Abandoned);
    assert_eq!(abandoned[0].trigger.text(), "two");
    assert!(
        store.recover().await.unwrap().is_empty(),
        "recovery is idempotent"
    );
    assert_eq!(
        store.batch_info(done).await.unwrap().state,
        BatchState::Complete
    );
    let err = store
        .append_step(crashed, vec![result("t")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Batch(BatchError::NotOpen {
                state: BatchState::Abandoned,
                ..
            })
        ),
        "{err}"
    );
    assert!(matches!(
        store.continue_batch(crashed).await,
        Err(Error::Batch(BatchError::InvalidState { .. }))
    ));
    assert!(matches!(
        store.complete_batch(crashed).await,
        Err(Error::Batch(BatchError::InvalidState { .. }))
    ));
    assert_eq!(
        store.recent_activity(10).await.unwrap()[0].kind,
        "batch_abandoned"
    );

    // A renewed lease protects a long run.
    let long = store
        .begin_batch(NewMessage::user("three"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.renew_lease(long).await.unwrap();
    }
    assert!(
        db.recover_all(RecoveryScope::ExpiredLeases)
            .await
            .unwrap()
            .is_empty()
    );
    // The owner of an embedded database knows at start-up that no run is alive.
    let all = store.recover_scope(RecoveryScope::AllOpen).await.unwrap();
    assert_eq!(all.iter().map(|a| a.batch.id).collect::<Vec<_>>(), [long]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn get_recent_returns_whole_batches(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let other = db.create_agent(NewAgent::named("bob")).await.unwrap();
    let store = db.messages(agent.id);
    let noise = db.messages(other.id);
    let mut ids = Vec::new();
    for i in 0..6 {
        let b = store
            .begin_batch(NewMessage::user(format!("q{i}")), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        noise
            .begin_batch(NewMessage::user("noise"), BeginBatch::default())
            .await
            .unwrap();
        store
            .append_step(b, vec![call(&format!("c{i}"))])
            .await
            .unwrap();
        store
            .append_step(
                b,
                vec![
                    result(&format!("c{i}")),
                    NewMessage::assistant(format!("a{i}")),
                ],
            )
            .await
            .unwrap();
        store.complete_batch(b).await.unwrap();
        ids.push(b);
    }
    let recent = store.get_recent(3).await.unwrap();
    assert_eq!(
        recent.iter().map(|b| b.info.id).collect::<Vec<_>>(),
        ids[3..]
    );
    for b in &recent {
        assert_eq!(b.messages.len(), 4, "batch cut");
        assert!(b.messages.iter().all(|m| m.agent_id == agent.id));
        assert_eq!(
            b.messages
                .iter()
                .map(|m| m.sequence_num)
                .collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
    }
    assert_eq!(store.get_recent(100).await.unwrap().len(), 6);
    assert!(store.get_recent(0).await.unwrap().is_empty());
    let all = store.get_all(None, 1000, false).await.unwrap();
    assert_eq!(all.len(), 24);
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    let page = store
        .get_all(Some(all[9].position), 5, false)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|m| m.id).collect::<Vec<_>>(),
        all[10..15].iter().map(|m| m.id).collect::<Vec<_>>()
    );
    assert_eq!(
        store
            .list_batches(None, 2)
            .await
            .unwrap()
            .iter()
            .map(|b| b.id)
            .collect::<Vec<_>>(),
        [ids[5], ids[4]]
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn archive_and_summaries(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let mut ids = Vec::new();
    for i in 0..5 {
        let b = store
            .begin_batch(NewMessage::user(format!("q{i}")), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        store
            .append_step(b, vec![NewMessage::assistant(format!("a{i}"))])
            .await
            .unwrap();
        store.complete_batch(b).await.unwrap();
        ids.push(b);
    }
    // Batch 1 is continued later, so it reaches past batch 3's start and must not be cut.
    store.continue_batch(ids[1]).await.unwrap();
    store
        .append_step(ids[1], vec![NewMessage::assistant("late")])
        .await
        .unwrap();
    store.complete_batch(ids[1]).await.unwrap();
    let archived = store.archive_before(ids[3]).await.unwrap();
    assert_eq!(archived, 4, "batches 0 and 2 (two messages each)");
    let live: Vec<SnowflakeId> = store
        .get_recent(10)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id)
        .collect();
    assert_eq!(live, [ids[1], ids[3], ids[4]]);
    assert!(store.batch_info(ids[0]).await.unwrap().archived);
    assert_eq!(store.count_live().await.unwrap(), 7);
    assert_eq!(store.get_all(None, 100, true).await.unwrap().len(), 11);

    // Archiving chosen batches: an open one is refused and nothing changes.
    let open_one = store
        .begin_batch(NewMessage::user("still running"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert!(matches!(
        store.archive_batches(vec![ids[4], open_one]).await,
        Err(Error::Batch(BatchError::InvalidState { .. }))
    ));
    assert!(!store.batch_info(ids[4]).await.unwrap().archived);
    assert!(matches!(
        store.archive_batches(vec![SnowflakeId(7)]).await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    store.complete_batch(open_one).await.unwrap();
    assert_eq!(store.archive_batches(vec![open_one]).await.unwrap(), 1);
    assert_eq!(
        store.archive_batches(vec![open_one]).await.unwrap(),
        0,
        "archiving twice changes nothing"
    );

    let summary = Summary {
        id: store.new_summary_id().unwrap(),
        agent_id: agent.id,
        content: "the user asked q1, q3".into(),
        from_batch: ids[1],
        through_batch: ids[3],
        message_count: 5,
        depth: 0,
        created_at: chrono::Utc::now(),
    };
    let covered = store.summarize_and_archive(summary.clone()).await.unwrap();
    assert_eq!(covered, [ids[1], ids[3]]);
    assert_eq!(
        store.get_summary().await.unwrap().unwrap().content,
        summary.content
    );
    assert_eq!(
        store
            .get_recent(10)
            .await
            .unwrap()
            .iter()
            .map(|b| b.info.id)
            .collect::<Vec<_>>(),
        [ids[4]]
    );
    store
        .upsert_summary(Summary {
            content: "revised".into(),
            ..summary.clone()
        })
        .await
        .unwrap();
    let all = store.get_summaries().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].content, "revised");

    // An open batch cannot be summarised away, and nothing is written when that is refused.
    let open = store
        .begin_batch(NewMessage::user("open"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    // An open batch inside the range stays live; the closed ones are archived with the summary.
    let wider = Summary {
        id: store.new_summary_id().unwrap(),
        from_batch: ids[4],
        through_batch: open,
        ..summary.clone()
    };
    assert_eq!(store.summarize_and_archive(wider).await.unwrap(), [ids[4]]);
    assert_eq!(store.get_summaries().await.unwrap().len(), 2);
    assert!(store.batch_info(ids[4]).await.unwrap().archived);
    let open_info = store.batch_info(open).await.unwrap();
    assert!(!open_info.archived);
    assert_eq!(open_info.state, BatchState::Open);
    // A summary that covers nothing is refused, and nothing is written.
    let empty = Summary {
        id: store.new_summary_id().unwrap(),
        from_batch: open,
        through_batch: ids[0],
        ..summary
    };
    assert!(matches!(
        store.summarize_and_archive(empty).await,
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    assert_eq!(store.get_summaries().await.unwrap().len(), 2);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn activity_log(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    for i in 0..5 {
        store
            .log_activity("tool_called", json!({"n": i}))
            .await
            .unwrap();
    }
    let events = store.recent_activity(3).await.unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| e.payload["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [4, 3, 2]
    );
    assert!(matches!(
        store.log_activity("", json!(null)).await,
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    let ghost = db.messages(pattern_db::AgentId::new());
    assert!(matches!(
        ghost.log_activity("x", json!(1)).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn legacy_import(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let m = |role, content| LegacyMessage {
        role,
        content,
        created_at: None,
        origin: None,
    };
    let history = vec![
        m(Role::User, vec![ContentBlock::text("u1")]),
        m(
            Role::Assistant,
            vec![ContentBlock::tool_use("t1", "search", json!({}))],
        ),
        m(Role::User, vec![ContentBlock::text("u2")]),
        m(Role::Assistant, vec![ContentBlock::text("a2")]),
        m(
            Role::Tool,
            vec![ContentBlock::tool_result("t1", "r1", false)],
        ),
        m(Role::Assistant, vec![ContentBlock::text("a1")]),
        m(Role::User, vec![ContentBlock::text("u3 never answered")]),
    ];
    let plan = store.import_legacy(history).await.unwrap();
    assert_eq!(plan.batches.len(), 3);
    let batches = store.get_recent(10).await.unwrap();
    let texts: Vec<Vec<String>> = batches
        .iter()
        .map(|b| {
            b.messages
                .iter()
                .map(|m| format!("{}", m.sequence_num))
                .collect()
        })
        .collect();
    assert_eq!(texts, [vec!["0", "1", "2", "3"], vec!["0", "1"], vec!["0"]]);
    assert_eq!(
        batches[0].messages[2].tool_result_ids().collect::<Vec<_>>(),
        ["t1"]
    );
    assert_eq!(batches[0].info.state, BatchState::Complete);
    assert_eq!(batches[2].info.state, BatchState::Abandoned);
    // Positions follow the input order across the interleaving.
    let all = store.get_all(None, 100, false).await.unwrap();
    assert_eq!(
        all.iter()
            .map(|m| m.text())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>(),
        ["u1", "u2", "a2", "a1", "u3 never answered"]
    );
    // New batches go after the imported history.
    let b = store
        .begin_batch(NewMessage::user("now"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert!(b > all.last().unwrap().position);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn many_agents_write_at_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let agent = db
                .create_agent(NewAgent::named(format!("agent-{i}")))
                .await
                .unwrap();
            let store = db.messages(agent.id);
            for j in 0..10 {
                let b = store
                    .begin_batch(NewMessage::user(format!("{j}")), BeginBatch::default())
                    .await
                    .unwrap();
                store
                    .append_step(b.batch_id, vec![NewMessage::assistant("ok")])
                    .await
                    .unwrap();
                store.complete_batch(b.batch_id).await.unwrap();
            }
            let all = store.get_all(None, 1000, false).await.unwrap();
            assert_eq!(all.len(), 20);
            assert!(all.windows(2).all(|w| w[0].position < w[1].position));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// The writer keeps its connection between write groups (SQLite) and gives it back after a
/// failed one: a write failing in one handle leaves no transaction open (another handle of the
/// same database writes at once), the next write succeeds, and closing never waits for the
/// connection the writer keeps.
async fn a_failed_write_leaves_the_writer_usable_and_closable(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    let agent = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let ack = |db: &Database, text: &str| {
        let store = db.messages(agent.id);
        let text = text.to_owned();
        async move {
            tokio::time::timeout(
                Duration::from_secs(5),
                store.begin_batch(NewMessage::user(text), BeginBatch::default()),
            )
            .await
            .expect("an acknowledgement waited for a lock nobody should hold")
        }
    };
    let first = ack(&a, "one").await.unwrap();
    a.messages(agent.id)
        .complete_batch(first.batch_id)
        .await
        .unwrap();
    let ghost = a
        .messages(pattern_db::AgentId::new())
        .begin_batch(NewMessage::user("nobody"), BeginBatch::default())
        .await
        .unwrap_err();
    assert!(
        matches!(ghost, Error::Agent(AgentError::NotFound(_))),
        "{ghost}"
    );
    let second = ack(&b, "two").await.unwrap();
    b.messages(agent.id)
        .complete_batch(second.batch_id)
        .await
        .unwrap();
    let third = ack(&a, "three").await.unwrap();
    assert!(third.batch_id > second.batch_id);
    let texts: Vec<String> = a
        .messages(agent.id)
        .get_all(None, 10, false)
        .await
        .unwrap()
        .iter()
        .map(pattern_db::Message::text)
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    for db in [a, b] {
        tokio::time::timeout(Duration::from_secs(10), db.close())
            .await
            .expect("close waited for the writer's connection");
    }
    tdb.cleanup().await.unwrap();
}

async fn grouped_acknowledgements_fail_one_by_one(kind: Kind) {
    // Concurrent begin_batch calls are committed together; bad ones in the same group fail alone.
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let mut agents = Vec::new();
    for i in 0..20 {
        agents.push(
            db.create_agent(NewAgent::named(format!("g{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let db = db.clone();
        let agent = if i % 5 == 3 {
            pattern_db::AgentId::new()
        } else {
            agents[i % 20]
        };
        let trigger = if i % 5 == 4 {
            NewMessage::assistant("not a trigger")
        } else {
            NewMessage::user(format!("m{i}"))
        };
        tasks.push(tokio::spawn(async move {
            (
                i,
                db.messages(agent)
                    .begin_batch(trigger, BeginBatch::default())
                    .await,
            )
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let (i, r) = t.await.unwrap();
        match i % 5 {
            3 => assert!(
                matches!(r, Err(Error::Agent(AgentError::NotFound(_)))),
                "{i}: {r:?}"
            ),
            4 => assert!(
                matches!(r, Err(Error::Batch(BatchError::InvalidContent(_)))),
                "{i}: {r:?}"
            ),
            _ => {
                r.unwrap();
                ok += 1;
            }
        }
    }
    assert_eq!(ok, 120);
    let mut total = 0;
    for agent in &agents {
        let batches = db.messages(*agent).get_recent(1000).await.unwrap();
        assert!(batches.windows(2).all(|w| w[0].info.id < w[1].info.id));
        assert!(
            batches
                .iter()
                .all(|b| b.messages.len() == 1 && b.messages[0].position == b.info.id)
        );
        total += batches.len();
    }
    assert_eq!(total, 120);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn cached_reads_see_writes_of_other_processes(kind: Kind) {
    // Two handles stand for two processes: each has its own read cache.
    let tdb = fresh(kind).await;
    let reader = tdb.open().await.unwrap();
    let writer = tdb.open().await.unwrap();
    let agent = writer.create_agent(NewAgent::named("ada")).await.unwrap();
    let (r, w) = (reader.messages(agent.id), writer.messages(agent.id));
    let b = w
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    let first = r.get_recent(10).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        r.get_recent(10).await.unwrap(),
        first,
        "a repeated read is answered the same"
    );
    let rev = r.revision().await.unwrap().unwrap();
    w.append_step(b, vec![NewMessage::assistant("two")])
        .await
        .unwrap();
    assert!(r.revision().await.unwrap().unwrap() > rev);
    assert_eq!(
        r.get_recent(10).await.unwrap()[0].messages.len(),
        2,
        "append seen"
    );
    w.complete_batch(b).await.unwrap();
    assert_eq!(
        r.get_recent(10).await.unwrap()[0].info.state,
        BatchState::Complete,
        "completion seen"
    );
    let b2 = w
        .begin_batch(NewMessage::user("three"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert_eq!(r.get_recent(1).await.unwrap()[0].info.id, b2);
    assert_eq!(
        r.get_recent(10).await.unwrap().len(),
        2,
        "a wider window than cached is read"
    );
    w.archive_before(b2).await.unwrap();
    assert_eq!(r.get_recent(10).await.unwrap().len(), 1, "archiving seen");
    w.recover_scope(RecoveryScope::AllOpen).await.unwrap();
    assert_eq!(
        r.get_recent(10).await.unwrap()[0].info.state,
        BatchState::Abandoned,
        "recovery seen"
    );
    writer.delete_agent(agent.id).await.unwrap();
    assert!(r.get_recent(10).await.unwrap().is_empty(), "deletion seen");
    reader.close().await;
    writer.close().await;
    tdb.cleanup().await.unwrap();
}

async fn machine_ids_are_leased_per_process(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    assert_ne!(a.machine_id(), b.machine_id());
    let fixed = open_with(&tdb, |c| c.machine_id = MachineId::Fixed(777)).await;
    assert_eq!(fixed.machine_id(), 777);
    // Two handles writing the same agent keep one strictly increasing history.
    let agent = a.create_agent(NewAgent::named("shared")).await.unwrap();
    for i in 0..20 {
        let db = if i % 2 == 0 { &a } else { &b };
        db.messages(agent.id)
            .begin_batch(NewMessage::user(format!("{i}")), BeginBatch::default())
            .await
            .unwrap();
    }
    let all = a
        .messages(agent.id)
        .get_all(None, 100, false)
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|m| m.text()).collect::<Vec<_>>(),
        (0..20).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    a.close().await;
    b.close().await;
    fixed.close().await;
    tdb.cleanup().await.unwrap();
}

async fn bad_input_is_typed_and_changes_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.max_content_bytes = 1000).await;
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let b = store
        .begin_batch(NewMessage::user("hi"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;

    let err = store
        .append_step(b, vec![NewMessage::assistant("x".repeat(2000))])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Batch(BatchError::ContentTooLarge { limit: 1000, .. })
        ),
        "{err}"
    );
    assert!(matches!(
        store
            .begin_batch(NewMessage::user("y".repeat(5000)), BeginBatch::default())
            .await,
        Err(Error::Batch(BatchError::ContentTooLarge { .. }))
    ));
    assert!(matches!(
        NewMessage::from_json(Role::User, "{not json"),
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    assert!(matches!(
        NewMessage::from_json(Role::User, r#"[{"type":"video"}]"#),
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    assert!(matches!(
        NewMessage::from_json(Role::User, "[]")
            .unwrap()
            .validate_shape(),
        Err(Error::Batch(BatchError::InvalidContent(_)))
    ));
    let unknown = SnowflakeId(42);
    assert!(matches!(
        store
            .append_step(unknown, vec![NewMessage::assistant("x")])
            .await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    assert!(matches!(
        store.get_batch(unknown).await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    assert!(matches!(
        store.complete_batch(unknown).await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    // Another agent's batch is not found through this agent's store.
    let other = db.create_agent(NewAgent::named("bob")).await.unwrap();
    assert!(matches!(
        db.messages(other.id).get_batch(b).await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    assert!(matches!(
        db.messages(other.id)
            .append_step(b, vec![NewMessage::assistant("x")])
            .await,
        Err(Error::Batch(BatchError::NotFound { .. }))
    ));
    let ghost = db.messages(pattern_db::AgentId::new());
    assert!(matches!(
        ghost
            .begin_batch(NewMessage::user("x"), BeginBatch::default())
            .await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    // An import refuses the same sizes as any write, counted on the content's JSON (quotes and
    // control characters escaped), with nothing of it stored; SQLite measures a text message's
    // JSON without writing it.
    let json_len = |t: &str| {
        serde_json::to_string(&[ContentBlock::text(t)])
            .unwrap()
            .len()
    };
    let sized = |len: usize| {
        let mut text = "\"quoted\"\n\t\u{1}é ".to_owned();
        text.push_str(&"x".repeat(len - json_len(&text)));
        assert_eq!(json_len(&text), len);
        text
    };
    let user = |text: String| LegacyMessage {
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        created_at: None,
        origin: None,
    };
    let written = store
        .begin_batch(NewMessage::user(sized(1001)), BeginBatch::default())
        .await
        .unwrap_err();
    let imported = store
        .import_legacy(vec![user(sized(1000)), user(sized(1001))])
        .await
        .unwrap_err();
    for err in [written, imported] {
        assert!(
            matches!(
                err,
                Error::Batch(BatchError::ContentTooLarge {
                    size: 1001,
                    limit: 1000
                })
            ),
            "{err}"
        );
    }
    // Nothing of the above was stored.
    assert_eq!(store.get_all(None, 100, true).await.unwrap().len(), 1);
    assert_eq!(
        db.messages(other.id)
            .get_all(None, 100, true)
            .await
            .unwrap()
            .len(),
        0
    );
    // At the limit, both are stored.
    store.import_legacy(vec![user(sized(1000))]).await.unwrap();
    store
        .begin_batch(NewMessage::user(sized(1000)), BeginBatch::default())
        .await
        .unwrap();
    assert_eq!(store.get_all(None, 100, true).await.unwrap().len(), 3);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn migrations_are_checksummed_and_reversible(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let status = db.migration_status().await.unwrap();
    assert!(
        !status.is_empty() && status.iter().all(|m| m.applied),
        "{status:?}"
    );
    db.migrate_down(0).await.unwrap();
    assert!(
        db.migration_status()
            .await
            .unwrap()
            .iter()
            .all(|m| !m.applied)
    );
    db.migrate_up().await.unwrap();
    assert!(
        db.migration_status()
            .await
            .unwrap()
            .iter()
            .all(|m| m.applied)
    );
    db.create_agent(NewAgent::named("after-reset"))
        .await
        .unwrap();
    db.close().await;

    // Tamper with the recorded checksum: the next open refuses instead of re-running anything.
    tamper_checksum(&tdb.url, kind).await;
    let err = tdb.open().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage(StorageError::MigrationChecksumMismatch { version: 1 })
        ),
        "{err}"
    );
    tdb.cleanup().await.unwrap();
}

/// Everything the store's batch reads return for `agent`, as text (the read cache bypassed).
async fn batch_reads(db: &Database, agent: pattern_db::AgentId) -> Vec<String> {
    db.forget_read_cache();
    let store = db.messages(agent);
    let recent = store.get_recent(100).await.unwrap();
    let mut out: Vec<String> = recent
        .iter()
        .map(|b| {
            let ids: Vec<_> = b.messages.iter().map(|m| m.position.get()).collect();
            format!("recent {} {:?} {ids:?}", b.info.id.get(), b.info.state)
        })
        .collect();
    for b in store.list_batches(None, 100).await.unwrap() {
        out.push(format!("listed {} {:?}", b.id.get(), b.state));
    }
    let current = store.current_batch().await.unwrap().map(|b| b.id.get());
    out.push(format!("current {current:?}"));
    if let Some(last) = recent.last() {
        for b in store.live_batches_before(last.info.id, 100).await.unwrap() {
            out.push(format!("before {}", b.info.id.get()));
        }
    }
    out
}

/// Migrations 0026 (SQLite drops its agent-keyed batch index and finds batches through the
/// messages' positions; both backends index continuation parents) and 0027 (`live_from`): an
/// existing history reads the same before them and after they are reverted and applied again,
/// interleaved open batches, a continuation and an imported history included.
async fn batch_reads_are_the_same_across_migrations_0026_0027(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let talker = db.create_agent(NewAgent::named("talker")).await.unwrap().id;
    let other = db.create_agent(NewAgent::named("other")).await.unwrap().id;
    let store = db.messages(talker);
    let first = store
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    let second = store
        .begin_batch(NewMessage::user("two"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    // Steps go to the older batch after the newer one began: the two interleave.
    store
        .append_step(first, vec![NewMessage::assistant("to one")])
        .await
        .unwrap();
    store
        .append_step(second, vec![NewMessage::assistant("to two")])
        .await
        .unwrap();
    store.complete_batch(first).await.unwrap();
    store
        .begin_batch(
            NewMessage::user("more"),
            BeginBatch {
                parent_batch: Some(first),
                ..BeginBatch::default()
            },
        )
        .await
        .unwrap();
    let said = |role, text: &str| LegacyMessage {
        role,
        content: vec![ContentBlock::text(text)],
        created_at: None,
        origin: None,
    };
    db.messages(other)
        .import_legacy(vec![
            said(Role::User, "hello"),
            said(Role::Assistant, "hi"),
            said(Role::User, "again"),
            said(Role::Assistant, "yes"),
        ])
        .await
        .unwrap();
    let reads = async || {
        (
            batch_reads(&db, talker).await,
            batch_reads(&db, other).await,
        )
    };
    let before = reads().await;
    assert!(before.0.len() > 6 && before.1.len() > 3, "{before:?}");
    // (This code reads `live_from`, which 0027 adds: nothing is read at 0025.)
    db.migrate_down(25).await.unwrap();
    db.migrate_up().await.unwrap();
    assert_eq!(
        reads().await,
        before,
        "read differently with 0026 and 0027 applied again"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// The contents of every message of `store`'s agent, archived ones included, in order.
async fn history_contents(store: &pattern_db::MessageStore) -> Vec<Vec<ContentBlock>> {
    store
        .get_all(None, 10_000, true)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect()
}

/// The contents of the messages of `store`'s newest `batches` live batches, in order.
async fn recent_contents(
    store: &pattern_db::MessageStore,
    batches: usize,
) -> Vec<Vec<ContentBlock>> {
    store
        .get_recent(batches)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|b| b.messages.into_iter().map(|m| m.content))
        .collect()
}

/// SQLite: `expr` (over the message `m`) of every message of the agent named `name`, in
/// position order, read straight from the table.
async fn stored_per_message(db: &Database, name: &str, expr: &str) -> Vec<String> {
    pattern_db::testkit::fetch_texts(
        db,
        &format!(
            "SELECT {expr} FROM messages m JOIN agents a ON a.num = m.agent \
             WHERE a.name = '{name}' ORDER BY m.position"
        ),
    )
    .await
    .unwrap()
}

/// Archived history is stored compressed on SQLite (`DbConfig::compress_archived_from`, 64
/// bytes by default): archiving rewrites each message of at least that size whose compressed
/// form is smaller (plain text, JSON content with tool calls, text beyond ASCII), leaves short
/// and incompressible ones as text, and touches no live batch; every read of the archived
/// history gives back what was written, before and after. With the setting off, archived rows
/// stay text. PostgreSQL archives the same and reads back the same (it compresses large values
/// itself).
async fn archived_history_is_stored_compressed_and_reads_back(kind: Kind) {
    let tdb = fresh(kind).await;
    for setting in [Some(64), None] {
        let db = open_with(&tdb, |c| c.compress_archived_from = setting).await;
        let name = if setting.is_some() { "heron" } else { "egret" };
        let agent = db.create_agent(NewAgent::named(name)).await.unwrap().id;
        let store = db.messages(agent);
        let prose = |what: &str| {
            format!(
                "The {what} stood in the shallows of the river all morning, waiting for the \
                 fish to come back; the otters on the far bank watched it, and by noon the \
                 {what} had moved to the reeds."
            )
        };
        // 72 characters with no repeats worth coding: compressing saves less than a sixteenth
        // (the frame's own bytes), so it stays text.
        let alphabet: Vec<char> = ('A'..='Z').chain('a'..='z').chain('0'..='9').collect();
        let mut state = 7_u64;
        let noise: String = (0..72)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                alphabet[(state >> 33) as usize % alphabet.len()]
            })
            .collect();
        let messages = [
            vec![
                NewMessage::user(prose("heron")),
                NewMessage::assistant("short"),
            ],
            vec![
                NewMessage::user(format!("Où est le héron ? {}", prose("héron"))),
                NewMessage::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::text(prose("stork")),
                        ContentBlock::tool_use("c1", "search", json!({"q": prose("crane")})),
                    ],
                ),
                NewMessage::new(
                    Role::Tool,
                    vec![ContentBlock::tool_result("c1", prose("ibis"), false)],
                ),
                NewMessage::assistant(noise.clone()),
            ],
            vec![NewMessage::user(prose("gull"))],
        ];
        let mut ids = Vec::new();
        for batch in &messages {
            let b = store
                .begin_batch(batch[0].clone(), BeginBatch::default())
                .await
                .unwrap()
                .batch_id;
            if batch.len() > 1 {
                store.append_step(b, batch[1..].to_vec()).await.unwrap();
            }
            store.complete_batch(b).await.unwrap();
            ids.push(b);
        }
        let written: Vec<Vec<ContentBlock>> = messages
            .iter()
            .flatten()
            .map(|m| m.content.clone())
            .collect();
        let reads = async || {
            db.forget_read_cache();
            let all = history_contents(&store).await;
            assert_eq!(all, written, "history");
            for (i, batch) in ids.iter().enumerate() {
                let read: Vec<_> = store
                    .get_batch(*batch)
                    .await
                    .unwrap()
                    .messages
                    .into_iter()
                    .map(|m| m.content)
                    .collect();
                let want: Vec<_> = messages[i].iter().map(|m| m.content.clone()).collect();
                assert_eq!(read, want, "batch {i}");
            }
        };
        reads().await;
        let archived = store.archive_before(ids[2]).await.unwrap();
        assert_eq!(archived, 6, "the first two batches");
        reads().await;
        let live: Vec<_> = store
            .get_recent(10)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.info.id)
            .collect();
        assert_eq!(live, [ids[2]], "only the last batch is live");
        if kind == Kind::Sqlite {
            let stored = stored_per_message(&db, name, "typeof(m.content)").await;
            let want = if setting.is_some() {
                ["blob", "text", "blob", "blob", "blob", "text", "text"]
            } else {
                ["text"; 7]
            };
            assert_eq!(stored, want, "stored kinds with {setting:?}");
        }
        db.close().await;
    }
    tdb.cleanup().await.unwrap();
}

/// An imported history is stored compressed on SQLite (`DbConfig::compress_imported_from`, 64
/// bytes by default) except the messages of its newest `IMPORT_PLAIN_BATCHES` batches, which
/// the next context builds read; short and incompressible messages stay text; every read (the
/// whole history, a batch, the newest batches, a search hit) gives back what was imported, and
/// again once the old batches are archived, which leaves rows stored compressed already where
/// they are and moves the rest. With the setting off, every imported row is text. PostgreSQL
/// imports and reads back the same.
async fn imported_history_is_stored_compressed_but_its_newest_batches(kind: Kind) {
    use pattern_db::{IMPORT_PLAIN_BATCHES, TextSearch};
    let tdb = fresh(kind).await;
    for setting in [Some(64), None] {
        let db = open_with(&tdb, |c| c.compress_imported_from = setting).await;
        let name = if setting.is_some() { "heron" } else { "egret" };
        let agent = db.create_agent(NewAgent::named(name)).await.unwrap().id;
        let store = db.messages(agent);
        let prose = |i: usize| {
            format!(
                "Turn {i}: the heron stood in the shallows of the river all morning, waiting \
                 for the fish to come back; the otters on the far bank watched it, and by noon \
                 the heron had moved to the reeds."
            )
        };
        // Three old batches of every kind of content, then the newest `IMPORT_PLAIN_BATCHES`.
        let mut history = vec![
            (
                Role::User,
                vec![ContentBlock::text(format!(
                    "Où est le héron ? {}",
                    prose(0)
                ))],
            ),
            (
                Role::Assistant,
                vec![
                    ContentBlock::text(prose(1)),
                    ContentBlock::tool_use("c1", "search", json!({"q": prose(2)})),
                ],
            ),
            (
                Role::Tool,
                vec![ContentBlock::tool_result("c1", prose(3), false)],
            ),
            (Role::Assistant, vec![ContentBlock::text("short")]),
            (Role::User, vec![ContentBlock::text("kingfisher")]),
            (Role::Assistant, vec![ContentBlock::text(prose(5))]),
            (Role::User, vec![ContentBlock::text(prose(6))]),
            (Role::Assistant, vec![ContentBlock::text(prose(7))]),
        ];
        // More old messages than an import compresses at once (4,096) and than archiving moves
        // in one statement (250), then the newest batches.
        const OLD_PAIRS: usize = 2_100;
        let old_messages = 8 + 2 * OLD_PAIRS;
        for i in 0..OLD_PAIRS + IMPORT_PLAIN_BATCHES {
            history.push((Role::User, vec![ContentBlock::text(prose(100 + 2 * i))]));
            history.push((
                Role::Assistant,
                vec![ContentBlock::text(prose(101 + 2 * i))],
            ));
        }
        let written: Vec<Vec<ContentBlock>> = history.iter().map(|(_, c)| c.clone()).collect();
        let plan = store
            .import_legacy(
                history
                    .into_iter()
                    .map(|(role, content)| LegacyMessage {
                        role,
                        content,
                        created_at: None,
                        origin: None,
                    })
                    .collect(),
            )
            .await
            .unwrap();
        assert!(plan.anomalies.is_empty(), "{:?}", plan.anomalies);
        assert_eq!(plan.batches.len(), 3 + OLD_PAIRS + IMPORT_PLAIN_BATCHES);
        db.forget_read_cache();
        let all = history_contents(&store).await;
        assert_eq!(all, written, "history");
        let oldest = store.get_all(None, 1, true).await.unwrap()[0].batch_id;
        let first: Vec<_> = store
            .get_batch(oldest)
            .await
            .unwrap()
            .messages
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(first, written[..4], "the oldest batch");
        let recent = recent_contents(&store, plan.batches.len()).await;
        assert_eq!(recent, written, "the newest batches");
        let search = async |query: &str, limit: usize| {
            let opts = TextSearch {
                agent: Some(agent),
                limit,
                ..TextSearch::default()
            };
            db.search_text(query, &opts).await.unwrap()
        };
        let hits = search("kingfisher", 5).await;
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0].text, "kingfisher");
        let hits = search("otters", 100).await;
        assert_eq!(hits.len(), 100);
        for hit in &hits {
            assert!(
                written
                    .iter()
                    .any(|c| pattern_db::search::message_text(c) == hit.text),
                "a hit's text is a message's: {}",
                hit.text
            );
        }
        if kind == Kind::Sqlite {
            let stored = stored_per_message(&db, name, "typeof(m.content)").await;
            let (first, old) = if setting.is_some() {
                (
                    [
                        "blob", "blob", "blob", "text", "text", "blob", "blob", "blob",
                    ],
                    "blob",
                )
            } else {
                (["text"; 8], "text")
            };
            assert_eq!(stored[..8], first, "the first batches with {setting:?}");
            assert!(
                stored[8..old_messages].iter().all(|t| t == old),
                "the old batches with {setting:?}"
            );
            assert!(
                stored[old_messages..].iter().all(|t| t == "text"),
                "the newest {IMPORT_PLAIN_BATCHES} batches stay text"
            );
        }
        // Archive the old batches and ten of the newest: on SQLite a statement's worth of rows
        // (250) that shrink no more (stored compressed, or short) stays where it is; rows with
        // text to compress move to the table's end.
        let rowids = async || stored_per_message(&db, name, "CAST(m.rowid AS TEXT)").await;
        let before = if kind == Kind::Sqlite {
            rowids().await
        } else {
            Vec::new()
        };
        let archiving = old_messages + 20;
        let cut = store.get_all(None, 10_000, true).await.unwrap()[archiving].batch_id;
        let archived = store.archive_before(cut).await.unwrap();
        assert_eq!(archived as usize, archiving);
        db.forget_read_cache();
        let after = history_contents(&store).await;
        assert_eq!(after, written, "history once archived");
        let live = recent_contents(&store, plan.batches.len()).await;
        assert_eq!(live, written[archiving..], "the live batches");
        if kind == Kind::Sqlite {
            let moved = rowids().await;
            // Archiving moves rows 250 to a statement: the first 250 were stored compressed
            // (or are short), so they stay; rows that were text move, compressed.
            let (stayed, text_from) = if setting.is_some() {
                (250, old_messages)
            } else {
                (0, 0)
            };
            assert_eq!(
                moved[..stayed],
                before[..stayed],
                "rows that shrink no more stay"
            );
            assert!(
                moved[text_from..archiving]
                    .iter()
                    .zip(&before[text_from..archiving])
                    .all(|(m, b)| m != b),
                "the archived rows that were text moved"
            );
            assert_eq!(moved[archiving..], before[archiving..], "live rows stay");
        }
        db.close().await;
    }
    tdb.cleanup().await.unwrap();
}

/// SQLite: archiving moves the archived rows to the table's end, so the pages they leave are
/// emptied onto the free list (a row rewritten in place would leave its saved bytes inside a
/// page the table never fills again), and the next messages take those pages before the file
/// grows. Every message still reads back.
#[tokio::test]
async fn archiving_empties_the_pages_its_rows_leave() {
    use pattern_db::testkit::fetch_texts;
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("heron")).await.unwrap().id;
    let store = db.messages(agent);
    let text = |i: usize| {
        format!(
            "Note {i}: the heron stood in the shallows of the river all morning, waiting for \
             the fish to come back, while the otters on the far bank watched it and the kestrel \
             above them watched everything; by noon the river had risen and it moved on."
        )
    };
    let mut last = None;
    for i in 0..120 {
        let b = store
            .begin_batch(NewMessage::user(text(i)), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        store.complete_batch(b).await.unwrap();
        last = Some(b);
    }
    let count = |sql: &'static str| {
        let db = &db;
        async move {
            fetch_texts(db, sql).await.unwrap()[0]
                .parse::<i64>()
                .unwrap()
        }
    };
    let pages = "SELECT CAST(COUNT(*) AS TEXT) FROM dbstat WHERE name = 'messages'";
    let free = "SELECT CAST(freelist_count AS TEXT) FROM pragma_freelist_count()";
    let (pages_before, free_before) = (count(pages).await, count(free).await);
    assert_eq!(
        store.archive_before(last.unwrap()).await.unwrap(),
        119,
        "all but the last batch"
    );
    let (pages_after, free_after) = (count(pages).await, count(free).await);
    assert!(
        pages_after < pages_before && free_after > free_before,
        "messages' pages {pages_before} -> {pages_after}, free pages {free_before} -> {free_after}"
    );
    // The next writes take the free pages first.
    for i in 0..40 {
        store
            .begin_batch(NewMessage::user(text(1000 + i)), BeginBatch::default())
            .await
            .unwrap();
    }
    assert!(count(free).await < free_after, "free pages reused");
    let all = store.get_all(None, 500, true).await.unwrap();
    assert_eq!(all.len(), 160);
    for (i, m) in all.iter().take(120).enumerate() {
        assert_eq!(m.content, NewMessage::user(text(i)).content, "message {i}");
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// SQLite stores a long message's content compressed when that makes it smaller (migration
/// 0031; `DbConfig::compress_content_from`, 1 KiB by default) and a shorter one as text; every
/// read gives back what was written: the history, a batch, the newest batches and those before
/// them (one JSON document), full-text hits, and a full-text index rebuilt from the stored rows.
/// Frames name the built-in dictionary; 0032 refuses to be reverted while one does, 0031 while
/// a compressed row exists; rows compressed without a dictionary (as before 0032) and rows
/// stored as text (as before 0031) read the same. A threshold below 64 bytes is refused.
#[tokio::test]
async fn long_content_is_stored_compressed_and_reads_back() {
    use pattern_db::testkit::{execute_raw, fetch_text_pairs, fetch_texts};
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("heron")).await.unwrap().id;
    let store = db.messages(agent);
    // About 240 bytes: stored as text at the default threshold.
    let prose = |what: &str| {
        format!(
            "The {what} stood in the shallows of the river all morning, waiting for the fish \
             to come back; the otters on the far bank watched it, and the kestrel above them \
             watched everything. By noon the river had risen and the {what} moved to the reeds."
        )
    };
    // About 1.2 KB: compressed.
    let long = |what: &str| {
        format!(
            "{} {} {} {} {}",
            prose(what),
            prose("otter"),
            prose("egret"),
            prose("gull"),
            prose(what)
        )
    };
    let first = store
        .begin_batch(NewMessage::user(long("egret")), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(first, vec![NewMessage::assistant(prose("swan"))])
        .await
        .unwrap();
    store.complete_batch(first).await.unwrap();
    let long_call = NewMessage::new(
        Role::Assistant,
        vec![
            ContentBlock::text(long("heron")),
            ContentBlock::tool_use("c1", "search", json!({"q": prose("stork")})),
        ],
    );
    let long_result = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("c1", long("crane"), false)],
    );
    let second = store
        .begin_batch(
            NewMessage::user("where is the heron?"),
            BeginBatch::default(),
        )
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(second, vec![long_call.clone()])
        .await
        .unwrap();
    store
        .append_step(
            second,
            vec![long_result.clone(), NewMessage::assistant(long("ibis"))],
        )
        .await
        .unwrap();
    store.complete_batch(second).await.unwrap();

    let stored = fetch_texts(
        &db,
        "SELECT typeof(content) FROM messages ORDER BY position",
    )
    .await
    .unwrap();
    assert_eq!(
        stored,
        ["blob", "text", "text", "blob", "blob", "blob"],
        "stored kinds"
    );
    let written: Vec<Vec<ContentBlock>> = vec![
        NewMessage::user(long("egret")).content,
        NewMessage::assistant(prose("swan")).content,
        NewMessage::user("where is the heron?").content,
        long_call.content,
        long_result.content,
        NewMessage::assistant(long("ibis")).content,
    ];
    let reads = async || {
        db.forget_read_cache();
        let all = history_contents(&store).await;
        assert_eq!(all, written, "history");
        let contents = |batches: Vec<pattern_db::StoredBatch>| -> Vec<Vec<ContentBlock>> {
            batches
                .into_iter()
                .flat_map(|b| b.messages)
                .map(|m| m.content)
                .collect()
        };
        let recent = contents(store.get_recent(10).await.unwrap());
        assert_eq!(recent, written, "newest batches");
        let batch = contents(vec![store.get_batch(second).await.unwrap()]);
        assert_eq!(batch, written[2..], "one batch");
        let before = contents(store.live_batches_before(second, 10).await.unwrap());
        assert_eq!(before, written[..2], "batches before");
    };
    reads().await;

    let opts = pattern_db::TextSearch {
        limit: 10,
        ..Default::default()
    };
    let texts = |hits: Vec<pattern_db::TextHit>| {
        let mut t: Vec<String> = hits.into_iter().map(|h| h.text).collect();
        t.sort();
        t
    };
    assert!(long("egret").len() > 1024);
    let mut want = vec![
        long("crane"),
        long("egret"),
        long("heron"),
        long("ibis"),
        prose("swan"),
    ];
    want.sort();
    assert_eq!(texts(db.search_text("kestrel", &opts).await.unwrap()), want);
    db.reindex().await.unwrap();
    assert_eq!(
        texts(db.search_text("kestrel", &opts).await.unwrap()),
        want,
        "rebuilt from the stored rows"
    );

    // Every frame names the built-in dictionary; 0032 is not reverted while one does, nor 0031
    // while compressed rows exist, and nothing changes.
    let frames = fetch_texts(
        &db,
        "SELECT hex(content) FROM messages WHERE typeof(content) = 'blob'",
    )
    .await
    .unwrap();
    let named: Vec<Option<u32>> = frames
        .iter()
        .map(|f| {
            let bytes = hex::decode(f).unwrap();
            zstd::zstd_safe::get_dict_id_from_frame(&bytes).map(u32::from)
        })
        .collect();
    let english = pattern_db_sqlite::messages::ENGLISH_1_ID;
    assert_eq!(named, vec![Some(english); 4], "dictionary ids");
    let refused = db.migrate_down(31).await.unwrap_err().to_string();
    assert!(
        refused.contains("compressed with a dictionary"),
        "{refused}"
    );
    reads().await;
    // Compressed without a dictionary (as a build before 0032 wrote them), they read the same;
    // then 0032 reverts, and 0031 still refuses.
    let blobs = fetch_text_pairs(
        &db,
        "SELECT hex(id), content FROM messages WHERE typeof(content) = 'blob' ORDER BY id",
    )
    .await
    .unwrap();
    assert_eq!(blobs.len(), 4);
    for (id, text) in &blobs {
        let frame: String = zstd::bulk::compress(text.as_bytes(), 1)
            .unwrap()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        let sql = format!("UPDATE messages SET content = X'{frame}' WHERE hex(id) = '{id}'");
        execute_raw(&db, &sql).await.unwrap();
    }
    reads().await;
    db.migrate_down(31).await.unwrap();
    let refused = db.migrate_down(30).await.unwrap_err().to_string();
    assert!(refused.contains("compressed content"), "{refused}");
    reads().await;
    // Stored as text (as a build before 0031 wrote them), they read the same; then 0031
    // reverts and both apply again.
    for (id, text) in blobs {
        let text = text.replace('\'', "''");
        let sql = format!("UPDATE messages SET content = '{text}' WHERE hex(id) = '{id}'");
        execute_raw(&db, &sql).await.unwrap();
    }
    reads().await;
    db.migrate_down(30).await.unwrap();
    db.migrate_up().await.unwrap();
    reads().await;

    // A threshold below 64 bytes is refused; `None` stores everything as text.
    let mut config = tdb.config();
    config.compress_content_from = Some(10);
    let refused = Database::open(config.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("compress_content_from"), "{refused}");
    config.compress_content_from = None;
    let plain = Database::open(config).await.unwrap();
    let b = plain
        .messages(agent)
        .begin_batch(NewMessage::user(long("rook")), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    let kinds = fetch_texts(
        &plain,
        &format!(
            "SELECT typeof(content) FROM messages WHERE batch_id = {}",
            b.get()
        ),
    )
    .await
    .unwrap();
    assert_eq!(kinds, ["text"]);
    tdb.cleanup().await.unwrap();
}

/// SQLite's messages carry their agent's number, not its id (migration 0030): every read gives
/// each message its own agent's id, full text finds both agents' words, the history reads the
/// same after 0030 is reverted (the rows name their agent by id again) and applied again,
/// deleting an agent takes its messages, and a number is never given out twice.
#[tokio::test]
async fn messages_carry_their_agents_number() {
    use pattern_db::testkit::fetch_texts;
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap().id;
    let bo = db.create_agent(NewAgent::named("bo")).await.unwrap().id;
    for (agent, word) in [(ada, "heron"), (bo, "otter"), (ada, "kestrel")] {
        let store = db.messages(agent);
        let b = store
            .begin_batch(
                NewMessage::user(format!("a {word} flew by")),
                BeginBatch::default(),
            )
            .await
            .unwrap()
            .batch_id;
        store
            .append_step(b, vec![NewMessage::assistant(format!("the {word} again"))])
            .await
            .unwrap();
        store.complete_batch(b).await.unwrap();
    }
    let said = |role, text: &str| LegacyMessage {
        role,
        content: vec![ContentBlock::text(text)],
        created_at: None,
        origin: None,
    };
    db.messages(bo)
        .import_legacy(vec![
            said(Role::User, "an imported badger"),
            said(Role::Assistant, "noted"),
        ])
        .await
        .unwrap();
    // Content SQLite keeps as JSON: a text that starts with `[`, two blocks, a tool call and
    // its result; an empty text is kept as its text.
    let store = db.messages(ada);
    let b = store
        .begin_batch(NewMessage::user("[not json"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    let two = NewMessage::new(
        Role::Assistant,
        vec![
            ContentBlock::text("two"),
            ContentBlock::text("blocks \"quoted\"\n"),
        ],
    );
    store.append_step(b, vec![two, call("c1")]).await.unwrap();
    store
        .append_step(b, vec![result("c1"), NewMessage::assistant("")])
        .await
        .unwrap();
    store.complete_batch(b).await.unwrap();
    let stored = fetch_texts(&db, "SELECT content FROM messages ORDER BY position")
        .await
        .unwrap();
    let json = stored.iter().filter(|c| c.starts_with('[')).count();
    assert_eq!(json, 4, "{stored:#?}");
    assert!(stored.contains(&"a heron flew by".to_owned()) && stored.contains(&String::new()));
    let reads = async || {
        db.forget_read_cache();
        let mut out = Vec::new();
        for agent in [ada, bo] {
            let all = db.messages(agent).get_all(None, 100, true).await.unwrap();
            assert!(all.iter().all(|m| m.agent_id == agent), "{all:?}");
            out.push(format!("{all:?}"));
            out.extend(batch_reads(&db, agent).await);
        }
        out
    };
    let before = reads().await;
    let nums = fetch_texts(
        &db,
        "SELECT DISTINCT typeof(agent) || ' ' || agent FROM messages ORDER BY 1",
    )
    .await
    .unwrap();
    assert_eq!(nums, vec!["integer 1", "integer 2"]);
    let found = |word: &'static str| {
        let db = db.clone();
        async move {
            let opts = pattern_db::TextSearch {
                limit: 10,
                ..Default::default()
            };
            let hits = db.search_text(word, &opts).await.unwrap();
            hits.iter().map(|h| h.agent_id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found("kestrel").await, vec![ada, ada]);
    assert_eq!(found("badger").await, vec![bo]);

    db.migrate_down(29).await.unwrap();
    let mut named = vec![ada.to_string(), bo.to_string()];
    named.sort();
    assert_eq!(
        fetch_texts(&db, "SELECT DISTINCT agent_id FROM messages ORDER BY 1")
            .await
            .unwrap(),
        named
    );
    db.migrate_up().await.unwrap();
    assert_eq!(
        reads().await,
        before,
        "read differently with 0030 applied again"
    );

    // Deleting the newest agent takes its messages; the next agent gets a new number.
    db.delete_agent(bo).await.unwrap();
    let left = fetch_texts(&db, "SELECT DISTINCT CAST(agent AS TEXT) FROM messages")
        .await
        .unwrap();
    assert_eq!(left, vec!["1"]);
    let cy = db.create_agent(NewAgent::named("cy")).await.unwrap().id;
    db.messages(cy)
        .begin_batch(NewMessage::user("a new otter"), BeginBatch::default())
        .await
        .unwrap();
    let nums = fetch_texts(
        &db,
        "SELECT DISTINCT CAST(agent AS TEXT) FROM messages ORDER BY 1",
    )
    .await
    .unwrap();
    assert_eq!(nums, vec!["1", "3"]);
    assert_eq!(found("otter").await, vec![cy]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// An agent's `live_from` (migration 0027): the position below which every batch is archived.
async fn live_from(db: &Database, name: &str) -> i64 {
    let rows = pattern_db::testkit::fetch_texts(
        db,
        &format!("SELECT CAST(live_from AS TEXT) FROM agents WHERE name = '{name}'"),
    )
    .await
    .unwrap();
    rows[0].parse().unwrap()
}

/// Archiving moves the agent's `live_from` past what it archived, never past a live batch
/// (an open one older than the others stays live and holds it), and the reads of live batches
/// start there and return what they returned without it; migration 0027 sets the same mark on
/// an existing history.
async fn live_batches_start_after_the_archived_history(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("long")).await.unwrap().id;
    let store = db.messages(agent);
    let mut ids = Vec::new();
    for i in 0..6 {
        let id = store
            .begin_batch(NewMessage::user(format!("q{i}")), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        store
            .append_step(id, vec![NewMessage::assistant(format!("a{i}"))])
            .await
            .unwrap();
        // The third stays open.
        if i != 2 {
            store.complete_batch(id).await.unwrap();
        }
        ids.push(id);
    }
    let live = async |before| -> Vec<SnowflakeId> {
        store
            .live_batches_before(before, 10)
            .await
            .unwrap()
            .iter()
            .map(|b| b.info.id)
            .collect()
    };
    assert_eq!(live_from(&db, "long").await, 0);
    store.archive_batches(vec![ids[0], ids[1]]).await.unwrap();
    assert_eq!(live_from(&db, "long").await, ids[2].get());
    assert_eq!(live(ids[5]).await, vec![ids[2], ids[3], ids[4]]);
    // Live messages are counted from the mark: batches 2 to 5, two messages each.
    assert_eq!(store.count_live().await.unwrap(), 8);
    // A batch archived above the open one: the mark stays at the open one.
    store.archive_batches(vec![ids[3]]).await.unwrap();
    assert_eq!(live_from(&db, "long").await, ids[2].get());
    assert_eq!(live(ids[5]).await, vec![ids[2], ids[4]]);
    assert_eq!(store.count_live().await.unwrap(), 6);
    // Archiving below a position skips the open batch and leaves the mark on it.
    store.archive_before(ids[5]).await.unwrap();
    assert_eq!(live_from(&db, "long").await, ids[2].get());
    assert_eq!(live(ids[5]).await, vec![ids[2]]);
    store.complete_batch(ids[2]).await.unwrap();
    store.archive_batches(vec![ids[2]]).await.unwrap();
    assert_eq!(live_from(&db, "long").await, ids[5].get());
    assert_eq!(live(ids[5]).await, Vec::<SnowflakeId>::new());
    // Everything archived: the mark is past the newest message, and a new batch is above it.
    store.archive_batches(vec![ids[5]]).await.unwrap();
    let all = store.get_all(None, 100, true).await.unwrap();
    let newest = all.last().unwrap().position.get();
    assert_eq!(live_from(&db, "long").await, newest + 1);
    let next = store
        .begin_batch(NewMessage::user("later"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    let after = store
        .begin_batch(NewMessage::user("later still"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert_eq!(live(after).await, vec![next]);
    assert_eq!(store.get_recent(10).await.unwrap().len(), 2);
    assert_eq!(store.count_live().await.unwrap(), 2);
    // The migration computes the mark from the stored flags: the oldest live batch.
    assert!(live_from(&db, "long").await <= next.get());
    db.migrate_down(26).await.unwrap();
    db.migrate_up().await.unwrap();
    assert_eq!(live_from(&db, "long").await, next.get());
    assert_eq!(live(after).await, vec![next]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn tamper_checksum(url: &str, kind: Kind) {
    use sqlx::{Connection, Executor};
    match kind {
        Kind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            c.execute("UPDATE _sqlx_migrations SET checksum = X'00' WHERE version = 1")
                .await
                .unwrap();
        }
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            c.execute("UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = 1")
                .await
                .unwrap();
        }
    }
}

async fn engine_and_urls(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let version = db.engine_version().await.unwrap();
    match kind {
        Kind::Sqlite => {
            assert_eq!(db.backend(), Backend::Sqlite);
            let v: Vec<u32> = version.split('.').map(|p| p.parse().unwrap()).collect();
            assert!(
                (v[0], v[1], v[2]) >= pattern_db::MIN_SQLITE_VERSION,
                "bundled SQLite {version} lacks the WAL-reset fix"
            );
        }
        Kind::Postgres => {
            assert_eq!(db.backend(), Backend::Postgres);
            assert!(version.starts_with("PostgreSQL"), "{version}");
        }
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

#[tokio::test]
async fn malformed_and_unreachable_urls_are_typed_errors() {
    for bad in ["", "nope", "mysql://x/y", "sqlite://", "sqlite::memory:"] {
        assert!(
            matches!(
                Database::open_url(bad).await,
                Err(Error::Storage(StorageError::InvalidUrl { .. }))
            ),
            "{bad}"
        );
    }
    // Nothing listens on port 1.
    let mut config = DbConfig::new("postgres://postgres:secret@127.0.0.1:1/postgres");
    config.connect_timeout = Duration::from_secs(2);
    let err = Database::open(config).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage(StorageError::Connect {
                backend: "postgres",
                ..
            })
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("secret"), "{err}");
    // A directory that does not exist.
    let err = Database::open_url("sqlite:///nonexistent-dir-for-pattern/x.db")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage(StorageError::Connect {
                backend: "sqlite",
                ..
            })
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// memory blocks

const WRITERS: &[&str] = &["append", "read_write", "admin"];

fn new_block(label: &str, value: &str, limit: i64) -> NewBlock {
    NewBlock {
        label: label.into(),
        description: format!("about {label}"),
        value: value.into(),
        char_limit: limit,
        block_type: "core".into(),
    }
}

async fn blocks_lifecycle(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let bob = db.create_agent(NewAgent::named("bob")).await.unwrap();

    let created = db
        .create_block(ada.id, new_block("persona", "I am Ada.", 100))
        .await
        .unwrap();
    assert_eq!(created.version, 1);
    assert_eq!(created.permission, "admin");
    assert_eq!(created.owner, ada.id);
    db.create_block(ada.id, new_block("human", "", 50))
        .await
        .unwrap();
    let read = db.block(ada.id, "persona").await.unwrap();
    assert_eq!(read, created);
    let labels =
        |v: Vec<pattern_db::StoredBlock>| v.into_iter().map(|b| b.label).collect::<Vec<_>>();
    assert_eq!(
        labels(db.blocks_for(ada.id).await.unwrap()),
        ["human", "persona"]
    );
    assert!(db.blocks_for(bob.id).await.unwrap().is_empty());

    // Write, history, undo.
    let v2 = db
        .write_block(
            ada.id,
            "persona",
            1,
            "I am Ada, héllo.".into(),
            "replace",
            WRITERS,
        )
        .await
        .unwrap();
    assert_eq!(v2, 2);
    assert_eq!(
        db.block(ada.id, "persona").await.unwrap().value,
        "I am Ada, héllo."
    );
    let v3 = db.undo_block(ada.id, "persona", 2, WRITERS).await.unwrap();
    assert_eq!(v3, 3);
    assert_eq!(
        db.block(ada.id, "persona").await.unwrap().value,
        "I am Ada."
    );
    let history = db.block_history(ada.id, "persona").await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| (v.version, v.change.as_str(), v.value.as_str()))
            .collect::<Vec<_>>(),
        [
            (3, "undo", "I am Ada."),
            (2, "replace", "I am Ada, héllo."),
            (1, "create", "I am Ada."),
        ]
    );
    assert!(history.iter().all(|v| v.changed_by == ada.id));
    assert!(matches!(
        db.undo_block(ada.id, "human", 1, WRITERS).await,
        Err(Error::Block(BlockError::NothingToUndo { version: 1, .. }))
    ));

    // Share: bob sees the block with his own permission; an append-only writer may not rewrite.
    db.share_block(ada.id, "persona", bob.id, "read_only")
        .await
        .unwrap();
    let seen = db.block(bob.id, "persona").await.unwrap();
    assert_eq!(
        (seen.permission.as_str(), seen.version, seen.owner),
        ("read_only", 3, ada.id)
    );
    assert!(matches!(
        db.write_block(bob.id, "persona", 3, "x".into(), "replace", WRITERS).await,
        Err(Error::Block(BlockError::PermissionDenied { ref permission, .. })) if permission == "read_only"
    ));
    // Only an admin shares.
    assert!(matches!(
        db.share_block(bob.id, "persona", bob.id, "admin").await,
        Err(Error::Block(BlockError::PermissionDenied { .. }))
    ));
    // Re-sharing changes the permission.
    db.share_block(ada.id, "persona", bob.id, "read_write")
        .await
        .unwrap();
    let v4 = db
        .write_block(
            bob.id,
            "persona",
            3,
            "Bob was here.".into(),
            "replace",
            WRITERS,
        )
        .await
        .unwrap();
    assert_eq!(v4, 4);
    let theirs = db.block(ada.id, "persona").await.unwrap();
    assert_eq!(
        (theirs.value.as_str(), theirs.version),
        ("Bob was here.", 4)
    );
    assert_eq!(
        db.block_history(ada.id, "persona").await.unwrap()[0].changed_by,
        bob.id
    );
    // Label taken by another block of the other agent.
    db.create_block(bob.id, new_block("human", "bob's human", 50))
        .await
        .unwrap();
    assert!(matches!(
        db.share_block(ada.id, "human", bob.id, "read_only").await,
        Err(Error::Block(BlockError::LabelTaken { agent, .. })) if agent == bob.id
    ));
    // Unshare: bob no longer sees it.
    db.unshare_block(ada.id, "persona", bob.id).await.unwrap();
    assert!(matches!(
        db.block(bob.id, "persona").await,
        Err(Error::Block(BlockError::NotFound { agent, .. })) if agent == bob.id
    ));
    assert!(matches!(
        db.unshare_block(ada.id, "persona", bob.id).await,
        Err(Error::Block(BlockError::NotFound { .. }))
    ));
    assert!(matches!(
        db.unshare_block(ada.id, "persona", ada.id).await,
        Err(Error::Block(BlockError::Invalid(_)))
    ));

    // Delete: admin only; history goes too; the label is free again.
    db.share_block(ada.id, "persona", bob.id, "read_write")
        .await
        .unwrap();
    assert!(matches!(
        db.delete_block(bob.id, "persona").await,
        Err(Error::Block(BlockError::PermissionDenied { .. }))
    ));
    db.delete_block(ada.id, "persona").await.unwrap();
    assert!(matches!(
        db.block(ada.id, "persona").await,
        Err(Error::Block(BlockError::NotFound { .. }))
    ));
    assert!(matches!(
        db.block(bob.id, "persona").await,
        Err(Error::Block(BlockError::NotFound { .. }))
    ));
    db.create_block(ada.id, new_block("persona", "again", 10))
        .await
        .unwrap();
    assert_eq!(db.block_history(ada.id, "persona").await.unwrap().len(), 1);

    // Deleting the owner deletes its blocks.
    db.delete_agent(ada.id).await.unwrap();
    assert_eq!(labels(db.blocks_for(bob.id).await.unwrap()), ["human"]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn bad_block_writes_are_typed_and_change_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let bob = db.create_agent(NewAgent::named("bob")).await.unwrap();
    let before = db
        .create_block(ada.id, new_block("notes", "short", 10))
        .await
        .unwrap();
    db.share_block(ada.id, "notes", bob.id, "append")
        .await
        .unwrap();

    // Over the limit, counted in characters: 11 characters (more bytes) are refused, never cut.
    let err = db
        .write_block(ada.id, "notes", 1, "ééééééééééé".into(), "replace", WRITERS)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Block(BlockError::OverLimit { ref label, chars: 11, limit: 10 }) if label == "notes"),
        "{err}"
    );
    // Creating over the limit is refused too.
    assert!(matches!(
        db.create_block(ada.id, new_block("big", &"x".repeat(11), 10))
            .await,
        Err(Error::Block(BlockError::OverLimit { .. }))
    ));
    // Unknown label.
    assert!(matches!(
        db.write_block(ada.id, "nope", 1, "x".into(), "replace", WRITERS).await,
        Err(Error::Block(BlockError::NotFound { ref label, .. })) if label == "nope"
    ));
    // Wrong permission (bob holds `append`, the caller allows only rewriters).
    assert!(matches!(
        db.write_block(bob.id, "notes", 1, "x".into(), "replace", &["read_write", "admin"]).await,
        Err(Error::Block(BlockError::PermissionDenied { ref permission, .. })) if permission == "append"
    ));
    // Stale version.
    assert!(matches!(
        db.write_block(ada.id, "notes", 0, "x".into(), "replace", WRITERS)
            .await,
        Err(Error::Block(BlockError::VersionConflict {
            expected: 0,
            current: 1,
            ..
        }))
    ));
    // Bad labels, limits, types, permissions, change kinds.
    for label in ["", "Notes", "a b", "ünï", &"x".repeat(101)] {
        assert!(
            matches!(
                db.create_block(ada.id, new_block(label, "", 10)).await,
                Err(Error::Block(BlockError::InvalidLabel { .. }))
            ),
            "{label:?}"
        );
    }
    for limit in [0, -1, 1_000_001] {
        assert!(matches!(
            db.create_block(ada.id, new_block("x", "", limit)).await,
            Err(Error::Block(BlockError::Invalid(_)))
        ));
    }
    let mut odd = new_block("x", "", 10);
    odd.block_type = "weird".into();
    assert!(matches!(
        db.create_block(ada.id, odd).await,
        Err(Error::Block(BlockError::Invalid(_)))
    ));
    assert!(matches!(
        db.share_block(ada.id, "notes", bob.id, "owner").await,
        Err(Error::Block(BlockError::Invalid(_)))
    ));
    assert!(matches!(
        db.write_block(ada.id, "notes", 1, "x".into(), "rewrite", WRITERS)
            .await,
        Err(Error::Block(BlockError::Invalid(_)))
    ));
    // Taken label, unknown agents.
    assert!(matches!(
        db.create_block(ada.id, new_block("notes", "", 10)).await,
        Err(Error::Block(BlockError::LabelTaken { .. }))
    ));
    let ghost = pattern_db::AgentId::new();
    assert!(matches!(
        db.create_block(ghost, new_block("notes", "", 10)).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    assert!(matches!(
        db.share_block(ada.id, "notes", ghost, "read_only").await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));

    // Nothing changed.
    assert_eq!(db.block(ada.id, "notes").await.unwrap(), before);
    assert_eq!(db.block_history(ada.id, "notes").await.unwrap().len(), 1);
    assert_eq!(db.blocks_for(ada.id).await.unwrap().len(), 1);
    assert_eq!(
        db.block(bob.id, "notes").await.unwrap().permission,
        "append"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn concurrent_block_writes_lose_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let bob = db.create_agent(NewAgent::named("bob")).await.unwrap();
    db.create_block(ada.id, new_block("shared", "start", 10_000))
        .await
        .unwrap();
    db.share_block(ada.id, "shared", bob.id, "read_write")
        .await
        .unwrap();

    let mut successes: Vec<(i64, String)> = Vec::new();
    let mut conflicts = 0;
    // Several rounds: in each, 20 tasks read the version and all write against it.
    for round in 0..3 {
        let mut tasks = Vec::new();
        for t in 0..20 {
            let db = db.clone();
            let agent = if t % 2 == 0 { ada.id } else { bob.id };
            tasks.push(tokio::spawn(async move {
                let v = db.block(agent, "shared").await.unwrap().version;
                let text = format!("round {round} task {t}");
                let r = db
                    .write_block(agent, "shared", v, text.clone(), "replace", WRITERS)
                    .await;
                (v, text, r)
            }));
        }
        for task in tasks {
            let (v, text, r) = task.await.unwrap();
            match r {
                Ok(new) => {
                    assert_eq!(new, v + 1);
                    successes.push((new, text));
                }
                Err(Error::Block(BlockError::VersionConflict {
                    expected, current, ..
                })) => {
                    assert_eq!(expected, v);
                    assert!(current > expected);
                    conflicts += 1;
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
    }
    // Exactly one success per version.
    let mut versions: Vec<i64> = successes.iter().map(|s| s.0).collect();
    versions.sort_unstable();
    let before = versions.len();
    versions.dedup();
    assert_eq!(versions.len(), before, "two writes got the same version");
    assert_eq!(successes.len() + conflicts, 60);
    assert!(successes.len() >= 3);

    let block = db.block(ada.id, "shared").await.unwrap();
    assert_eq!(block.version, 1 + successes.len() as i64);
    let history = db.block_history(ada.id, "shared").await.unwrap();
    assert_eq!(history.len() as i64, block.version);
    for (version, text) in &successes {
        let row = history.iter().find(|h| h.version == *version).unwrap();
        assert_eq!(&row.value, text);
    }
    assert_eq!(history[0].value, block.value);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

// -- agent-to-agent protocol -----------------------------------------------------------------

async fn protocol_organizations_and_agents(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let beta = db.create_organization("beta", "Beta").await.unwrap();
    assert_eq!(db.organization_by_external_id("acme").await.unwrap(), acme);
    let listed: Vec<_> = db
        .organizations()
        .await
        .unwrap()
        .into_iter()
        .filter(|o| o.external_id != pattern_db::LOCAL_ORGANIZATION)
        .collect();
    assert_eq!(listed, [acme.clone(), beta.clone()]);
    assert!(matches!(
        db.create_organization("acme", "Again").await,
        Err(Error::Protocol(ProtocolError::ExternalIdTaken { kind: "organization", external_id })) if external_id == "acme"
    ));
    assert!(matches!(
        db.organization_by_external_id("nope").await,
        Err(Error::Protocol(ProtocolError::ExternalIdNotFound {
            kind: "organization",
            ..
        }))
    ));
    for (external_id, name, field) in [
        ("", "Empty", "external_id"),
        ("a/b", "Slash", "external_id"),
        ("ok", "bad\u{202E}", "name"),
    ] {
        let refused = db.create_organization(external_id, name).await;
        assert!(
            matches!(&refused, Err(Error::Agent(AgentError::InvalidName { field: f, .. })) if *f == field),
            "{refused:?}"
        );
    }

    // The protocol's participants are agents: one identity, scoped by organization.
    let ada = db
        .create_agent(NewAgent {
            external_id: Some("ada@acme".into()),
            ..NewAgent::named("Ada").in_organization(acme.id)
        })
        .await
        .unwrap();
    assert_eq!(ada.organization, acme.id);
    assert_eq!(
        db.agent_by_external_id(acme.id, "ada@acme").await.unwrap(),
        ada
    );
    assert_eq!(db.agent(ada.id).await.unwrap(), ada);
    assert_eq!(
        db.org_agents(acme.id).await.unwrap().as_slice(),
        std::slice::from_ref(&ada)
    );
    assert!(db.org_agents(beta.id).await.unwrap().is_empty());
    assert!(matches!(
        db.agent_by_external_id(beta.id, "ada@acme").await,
        Err(Error::Protocol(ProtocolError::ExternalIdNotFound {
            kind: "agent",
            ..
        }))
    ));
    // The same external id in another organization is another agent.
    let other_ada = db
        .create_agent(NewAgent {
            external_id: Some("ada@acme".into()),
            ..NewAgent::named("Other").in_organization(beta.id)
        })
        .await
        .unwrap();
    assert_ne!(other_ada.id, ada.id);
    let dup = db
        .create_agent(NewAgent {
            external_id: Some("ada@acme".into()),
            ..NewAgent::named("Third").in_organization(acme.id)
        })
        .await;
    assert!(
        matches!(
            dup,
            Err(Error::Protocol(ProtocolError::ExternalIdTaken {
                kind: "agent",
                ..
            }))
        ),
        "{dup:?}"
    );
    let orphan = db
        .create_agent(NewAgent::named("Orphan").in_organization(OrganizationId::new()))
        .await;
    assert!(matches!(
        orphan,
        Err(Error::Protocol(ProtocolError::NotFound {
            kind: "organization",
            ..
        }))
    ));

    // (Nothing crosses an organization's wall, no session and no meeting: pattern_protocol's
    // `storage::nothing_crosses_an_organization_wall`.)
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// A completion without a run's claim (on SQLite one text that is its own transaction:
/// decision 0025, "Stop 42"): what it returns is what is stored, the agent's revision moves once
/// so a cached read sees it, and a batch the short form must not complete (a tool call waiting,
/// already complete) gets the answer it always got, nothing changed.
async fn a_lone_completion_is_stored_once_or_left_to_the_full_rules(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let b = store
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(b, vec![NewMessage::assistant("done")])
        .await
        .unwrap();
    let cached = store.get_recent(5).await.unwrap();
    assert_eq!(cached.last().unwrap().info.state, BatchState::Open);
    let before = store.revision().await.unwrap().unwrap();
    let done = store.complete_batch(b).await.unwrap();
    assert_eq!(store.revision().await.unwrap(), Some(before + 1));
    assert_eq!(done.state, BatchState::Complete);
    assert_eq!(done.message_count, 2);
    assert_eq!(
        (done.run_owner.as_deref(), done.lease_expires_at),
        (None, None)
    );
    assert_eq!(store.batch_info(b).await.unwrap(), done);
    assert_eq!(
        store.get_recent(5).await.unwrap().last().unwrap().info,
        done
    );

    // A tool call waits for its result: refused, nothing changed.
    let waiting = store
        .begin_batch(NewMessage::user("two"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store.append_step(waiting, vec![call("x")]).await.unwrap();
    let revision = store.revision().await.unwrap();
    assert!(matches!(
        store.complete_batch(waiting).await,
        Err(Error::Batch(BatchError::PendingToolCalls { pending, .. })) if pending == ["x"]
    ));
    assert_eq!(store.revision().await.unwrap(), revision);
    assert_eq!(
        store.batch_info(waiting).await.unwrap().state,
        BatchState::Open
    );
    store.append_step(waiting, vec![result("x")]).await.unwrap();
    assert_eq!(
        store.complete_batch(waiting).await.unwrap().state,
        BatchState::Complete
    );

    // Completing a complete batch answers with it as stored.
    assert_eq!(store.complete_batch(b).await.unwrap(), done);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    agents,
    a_lone_completion_is_stored_once_or_left_to_the_full_rules,
    batch_lifecycle,
    pairing_is_enforced,
    continuation_keeps_the_batch,
    recovery_abandons_expired_open_batches,
    get_recent_returns_whole_batches,
    archive_and_summaries,
    archived_history_is_stored_compressed_and_reads_back,
    imported_history_is_stored_compressed_but_its_newest_batches,
    activity_log,
    legacy_import,
    many_agents_write_at_once,
    a_failed_write_leaves_the_writer_usable_and_closable,
    grouped_acknowledgements_fail_one_by_one,
    machine_ids_are_leased_per_process,
    cached_reads_see_writes_of_other_processes,
    bad_input_is_typed_and_changes_nothing,
    migrations_are_checksummed_and_reversible,
    batch_reads_are_the_same_across_migrations_0026_0027,
    live_batches_start_after_the_archived_history,
    engine_and_urls,
    blocks_lifecycle,
    bad_block_writes_are_typed_and_change_nothing,
    concurrent_block_writes_lose_nothing,
    protocol_organizations_and_agents,
);

/// PostgreSQL: the server ends the sessions of the pool's idle connections (a restart, an idle
/// timeout, an administrator). Connections idle longer than a second are pinged before they are
/// handed out, so the next reads and writes run on connections opened again, not on dead ones.
#[tokio::test]
async fn connections_the_server_closed_while_idle_are_replaced() {
    use sqlx::Connection as _;
    let tdb = fresh(Kind::Postgres).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let first = store
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap();
    assert_eq!(store.get_all(None, 10, false).await.unwrap().len(), 1);

    let mut admin = sqlx::PgConnection::connect(&tdb.url).await.unwrap();
    let ended: i64 = sqlx::query_scalar(
        "WITH others AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) \
         SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM others",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(ended > 0, "no session of the handle was ended");
    admin.close().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    store.complete_batch(first.batch_id).await.unwrap();
    store
        .begin_batch(NewMessage::user("two"), BeginBatch::default())
        .await
        .unwrap();
    let texts: Vec<String> = store
        .get_all(None, 10, false)
        .await
        .unwrap()
        .iter()
        .map(pattern_db::Message::text)
        .collect();
    assert_eq!(texts, ["one", "two"]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// PostgreSQL: another process stores a message while holding the agent's row lock, and an
/// acknowledgement of this process waits for that lock. The acknowledgement must see what the
/// other committed: its batch comes after the other's message even when this process's id
/// generator is behind it (decision 0025, "Stop 30": a statement that waits for a row lock keeps
/// its older snapshot, so the newest position is read by the next statement).
#[tokio::test]
async fn an_acknowledgement_waiting_for_the_agent_sees_what_the_lock_holder_committed() {
    use sqlx::Connection as _;
    let tdb = fresh(Kind::Postgres).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let first = db
        .messages(agent.id)
        .begin_batch(NewMessage::user("one"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    db.messages(agent.id).complete_batch(first).await.unwrap();

    // The other process: a position about four minutes ahead of this process's generator.
    let ahead = first.get() + (1_i64 << 40);
    let mut other = sqlx::PgConnection::connect(&tdb.url).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    let id = agent.id.to_string();
    sqlx::query("UPDATE agents SET revision = revision + 1 WHERE id = $1::uuid")
        .bind(&id)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO batches (id, agent_id, batch_type, state, next_sequence, continuations, \
         archived, started_at, completed_at) \
         VALUES ($1, $2::uuid, 'user_request', 'complete', 1, 0, FALSE, now(), now())",
    )
    .bind(ahead)
    .bind(&id)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO messages (id, agent_id, position, batch_id, sequence_num, batch_type, role, \
         content, token_estimate, archived, deleted, created_at) \
         VALUES (gen_random_uuid(), $2::uuid, $1, $1, 0, 'user_request', 'user', \
         '[{\"type\":\"text\",\"text\":\"other\"}]'::json, 1, FALSE, FALSE, now())",
    )
    .bind(ahead)
    .bind(&id)
    .execute(&mut *tx)
    .await
    .unwrap();

    let waiting = {
        let db = db.clone();
        tokio::spawn(async move {
            db.messages(agent.id)
                .begin_batch(NewMessage::user("two"), BeginBatch::default())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the acknowledgement waits for the agent's row lock"
    );
    tx.commit().await.unwrap();
    let second = waiting.await.unwrap().unwrap().batch_id;
    assert!(
        second.get() > ahead,
        "the batch acknowledged second ({}) comes after the other's message ({ahead})",
        second.get()
    );
    let recent = db.messages(agent.id).get_recent(10).await.unwrap();
    let ids: Vec<i64> = recent.iter().map(|b| b.info.id.get()).collect();
    assert_eq!(ids, vec![first.get(), ahead, second.get()]);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// SQLite: a lone acknowledgement is one text of statements that is its own transaction
/// (decision 0025, "Stop 41"). When another process has stored a message of the agent at a
/// position ahead of this process's id generator, that text stores nothing and the write runs
/// on its transactional path, which moves the generator past it: the acknowledged batch comes
/// after the other's message, and the trigger is logged for search as on every other path.
#[tokio::test]
async fn a_lone_sqlite_acknowledgement_comes_after_another_process_s_newer_message() {
    use sqlx::Connection as _;
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let first = store
        .begin_batch(NewMessage::user("one heron"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store.complete_batch(first).await.unwrap();

    // The other process: a batch and its message about four minutes ahead of this generator.
    let ahead = first.get() + (1_i64 << 40);
    let mut other = sqlx::SqliteConnection::connect(&tdb.url).await.unwrap();
    let id = agent.id.to_string();
    let mut tx = other.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO batches (id, agent_id, batch_type, state, next_sequence, continuations, \
         archived, started_at, completed_at) VALUES (?1, ?2, 'user_request', 'complete', 1, 0, 0, 1, 1)",
    )
    .bind(ahead)
    .bind(&id)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO messages (id, agent, position, batch_id, sequence_num, batch_type, role, \
         content, token_estimate, archived, deleted, created_at) \
         SELECT randomblob(16), num, ?1, ?1, 0, 0, 1, 'other', 1, 0, 0, 1 FROM agents WHERE id = ?2",
    )
    .bind(ahead)
    .bind(&id)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("UPDATE agents SET revision = revision + 1 WHERE id = ?1")
        .bind(&id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    other.close().await.unwrap();

    let second = store
        .begin_batch(NewMessage::user("two kestrel"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    assert!(
        second.get() > ahead,
        "the batch acknowledged second ({}) comes after the other's message ({ahead})",
        second.get()
    );
    let recent = store.get_recent(10).await.unwrap();
    let ids: Vec<i64> = recent.iter().map(|b| b.info.id.get()).collect();
    assert_eq!(ids, vec![first.get(), ahead, second.get()]);
    // Both acknowledgements (one per path) are found by full text.
    for word in ["heron", "kestrel"] {
        let opts = pattern_db::TextSearch {
            agent: Some(agent.id),
            ..Default::default()
        };
        let hits = db.search_text(word, &opts).await.unwrap();
        assert_eq!(hits.len(), 1, "one hit for {word}");
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}
