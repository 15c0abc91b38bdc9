//! `assemble` on a history written and read back through a real SQLite database with
//! `pattern_db`'s own API: parallel calls answered in reverse order, a heartbeat continuation, and
//! a run that crashed with a call still waiting. It must never build `StoredBatch` values by hand.

use context_v2::{ContextMessage, ExclusionReason, TrimmedActive, assemble};
use pattern_db::testkit::TestDb;
use pattern_db::{
    BatchId, BatchState, BeginBatch, ContentBlock, MessageStore, NewAgent, NewMessage,
    RecoveryScope, Role,
};

fn calls(text: &str, ids: &[&str]) -> NewMessage {
    let mut content = vec![ContentBlock::text(text)];
    content.extend(
        ids.iter()
            .map(|id| ContentBlock::tool_use(*id, "lookup", serde_json::json!({ "id": id }))),
    );
    NewMessage::new(Role::Assistant, content)
}

fn results(role: Role, ids: &[&str]) -> NewMessage {
    NewMessage::new(
        role,
        ids.iter()
            .map(|id| ContentBlock::tool_result(*id, format!("{id}: ok"), false))
            .collect(),
    )
}

/// Each message as `(batch, role, short blocks)`.
fn layout(messages: &[ContextMessage]) -> Vec<(BatchId, Role, Vec<String>)> {
    messages
        .iter()
        .map(|m| {
            let blocks = m
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text } => format!("text:{text}"),
                    ContentBlock::ToolUse { id, .. } => format!("use:{id}"),
                    ContentBlock::ToolResult { tool_use_id, .. } => format!("result:{tool_use_id}"),
                    other => format!("{other:?}"),
                })
                .collect();
            (m.batch_id, m.role, blocks)
        })
        .collect()
}

fn row(batch: BatchId, role: Role, blocks: &[&str]) -> (BatchId, Role, Vec<String>) {
    (
        batch,
        role,
        blocks.iter().map(|b| (*b).to_owned()).collect(),
    )
}

async fn begin(store: &MessageStore, text: &str) -> BatchId {
    store
        .begin_batch(NewMessage::user(text), BeginBatch::default())
        .await
        .unwrap()
        .batch_id
}

#[tokio::test]
async fn assembles_a_history_read_from_sqlite() {
    let tdb = TestDb::sqlite().unwrap();
    let db = tdb.open().await.unwrap();
    let agent = db
        .create_agent(NewAgent::named("context-it"))
        .await
        .unwrap();
    let store = db.messages(agent.id);

    // Batch 1: two parallel calls; the results arrive in reverse order, one step each.
    let b1 = begin(&store, "weather in Paris and Oslo?").await;
    store
        .append_step(b1, vec![calls("checking both", &["paris", "oslo"])])
        .await
        .unwrap();
    store
        .append_step(b1, vec![results(Role::Tool, &["oslo"])])
        .await
        .unwrap();
    store
        .append_step(b1, vec![results(Role::Tool, &["paris"])])
        .await
        .unwrap();
    store
        .append_step(b1, vec![NewMessage::assistant("Paris 20°, Oslo 8°")])
        .await
        .unwrap();
    store.complete_batch(b1).await.unwrap();

    // Batch 2: three parallel calls; all results in one message, in reverse order.
    let b2 = begin(&store, "compare three sources").await;
    store
        .append_step(
            b2,
            vec![
                calls("asking all three", &["s1", "s2", "s3"]),
                results(Role::User, &["s3", "s2", "s1"]),
                NewMessage::assistant("they agree"),
            ],
        )
        .await
        .unwrap();
    store.complete_batch(b2).await.unwrap();

    // A heartbeat continues batch 1 after batch 2: its new positions come after batch 2's.
    store.continue_batch(b1).await.unwrap();
    store
        .append_step(
            b1,
            vec![
                calls("heartbeat: checking again", &["paris2"]),
                results(Role::Tool, &["paris2"]),
                NewMessage::assistant("still 20° in Paris"),
            ],
        )
        .await
        .unwrap();
    store.complete_batch(b1).await.unwrap();

    // Batch 3: the run dies while `r1` runs (`r2` answered, `r1` never).
    let b3 = begin(&store, "remind me later").await;
    store
        .append_step(b3, vec![calls("scheduling", &["r1", "r2"])])
        .await
        .unwrap();
    store
        .append_step(b3, vec![results(Role::Tool, &["r2"])])
        .await
        .unwrap();

    let batches = store.get_recent(50).await.unwrap();
    assert_eq!(
        batches.iter().map(|b| b.info.id).collect::<Vec<_>>(),
        vec![b1, b2, b3]
    );
    assert!(
        batches[0].messages[5].position > batches[1].messages[0].position,
        "the continuation interleaves with batch 2"
    );

    let done = vec![
        row(b1, Role::User, &["text:weather in Paris and Oslo?"]),
        row(
            b1,
            Role::Assistant,
            &["text:checking both", "use:paris", "use:oslo"],
        ),
        row(b1, Role::Tool, &["result:paris"]),
        row(b1, Role::Tool, &["result:oslo"]),
        row(b1, Role::Assistant, &["text:Paris 20°, Oslo 8°"]),
        row(
            b1,
            Role::Assistant,
            &["text:heartbeat: checking again", "use:paris2"],
        ),
        row(b1, Role::Tool, &["result:paris2"]),
        row(b1, Role::Assistant, &["text:still 20° in Paris"]),
        row(b2, Role::User, &["text:compare three sources"]),
        row(
            b2,
            Role::Assistant,
            &["text:asking all three", "use:s1", "use:s2", "use:s3"],
        ),
        row(b2, Role::User, &["result:s1", "result:s2", "result:s3"]),
        row(b2, Role::Assistant, &["text:they agree"]),
    ];

    // Without the crashed batch active: it is an orphan, left out.
    let h = assemble(&batches, None).unwrap();
    assert_eq!(h.included_batches, vec![b1, b2]);
    assert_eq!(h.excluded, vec![(b3, ExclusionReason::Orphaned)]);
    assert_eq!(h.trimmed_active, None);
    assert_eq!(layout(&h.messages), done);

    // With it active (its tool still running): cut before the call that waits.
    let h = assemble(&batches, Some(b3)).unwrap();
    assert_eq!(h.included_batches, vec![b1, b2, b3]);
    assert!(h.excluded.is_empty());
    assert_eq!(
        h.trimmed_active,
        Some(TrimmedActive {
            batch: b3,
            dropped_messages: 2,
            pending_calls: vec!["r1".to_owned()],
        })
    );
    let mut expected = done.clone();
    expected.push(row(b3, Role::User, &["text:remind me later"]));
    assert_eq!(layout(&h.messages), expected);

    // Once recovery has abandoned it, it is never sent, active or not.
    let abandoned = store.recover_scope(RecoveryScope::AllOpen).await.unwrap();
    assert_eq!(abandoned.len(), 1);
    let batches = store.get_recent(50).await.unwrap();
    assert_eq!(batches[2].info.state, BatchState::Abandoned);
    for active in [None, Some(b3)] {
        let h = assemble(&batches, active).unwrap();
        assert_eq!(h.excluded, vec![(b3, ExclusionReason::Abandoned)]);
        assert_eq!(layout(&h.messages), done);
    }

    db.close().await;
}
