//! `Database::import_agent` and `Database::import_history_agent`: a whole agent in one
//! transaction, or nothing.

use chrono::{TimeZone, Utc};
use pattern_db::testkit::{allow_inserts, refuse_inserts};
use pattern_db::{AgentError, BlockError};
use pattern_db::{
    AgentImport, Anomaly, BatchState, BatchType, ContentBlock, Error, HistoryImport, ImportBatch,
    ImportBlock, ImportMessage, ImportPassage, ImportSummary, ImportVersion, LegacyMessage,
    ListArchival, NewAgent, NewArchival, Role,
};

use crate::{Kind, fresh};

fn message(role: Role, text: &str, minute: u32) -> ImportMessage {
    ImportMessage {
        role,
        content: vec![ContentBlock::text(text)],
        created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, minute, 0).unwrap(),
    }
}

fn sample(name: &str) -> AgentImport {
    let batch = |q: &str, a: &str, minute: u32, archived: bool| ImportBatch {
        batch_type: BatchType::UserRequest,
        state: BatchState::Complete,
        archived,
        retried_at: None,
        messages: vec![
            message(Role::User, q, minute),
            message(Role::Assistant, a, minute + 1),
        ],
    };
    AgentImport {
        agent: NewAgent::named(name),
        blocks: vec![ImportBlock {
            label: "human".into(),
            char_limit: 100,
            block_type: "core".into(),
            versions: vec![
                ImportVersion {
                    value: "Ada".into(),
                    description: "the user".into(),
                    change: "create".into(),
                },
                ImportVersion {
                    value: "Ada\nlikes tea".into(),
                    description: "the user".into(),
                    change: "append".into(),
                },
            ],
        }],
        batches: vec![
            batch("hello", "hi", 0, true),
            batch("tea?", "yes", 10, false),
            ImportBatch {
                batch_type: BatchType::UserRequest,
                state: BatchState::Abandoned,
                archived: false,
                retried_at: Some(Utc.with_ymd_and_hms(2026, 1, 1, 0, 30, 0).unwrap()),
                messages: vec![message(Role::User, "never answered", 20)],
            },
        ],
        summaries: vec![ImportSummary {
            content: "Ada said hello.".into(),
            from_batch: 0,
            through_batch: 0,
            message_count: 2,
            depth: 0,
            created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 5, 0).unwrap(),
        }],
        archival: vec![
            ImportPassage {
                passage: NewArchival {
                    tags: vec!["drinks".into()],
                    dedupe_key: Some("tea".into()),
                    ..NewArchival::text("Ada drinks tea at four")
                },
                created_at: Utc.with_ymd_and_hms(2025, 6, 1, 16, 0, 0).unwrap(),
            },
            ImportPassage {
                passage: NewArchival::text("Ada keeps bees"),
                created_at: Utc.with_ymd_and_hms(2025, 7, 1, 9, 0, 0).unwrap(),
            },
        ],
    }
}

async fn a_whole_agent_is_imported_in_one_piece(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let done = db.import_agent(sample("ada")).await.unwrap();
    assert_eq!(done.batches.len(), 3);
    assert_eq!(done.archival, 2);
    let id = done.agent.id;
    let block = db.block(id, "human").await.unwrap();
    assert_eq!(block.value, "Ada\nlikes tea");
    assert_eq!(block.version, 2);
    assert_eq!(db.block_history(id, "human").await.unwrap().len(), 2);
    let store = db.messages(id);
    let batches = store.list_batches(None, 10).await.unwrap();
    let states: Vec<_> = batches
        .iter()
        .rev()
        .map(|b| (b.state, b.archived, b.retried_at.is_some()))
        .collect();
    assert_eq!(
        states,
        [
            (BatchState::Complete, true, false),
            (BatchState::Complete, false, false),
            (BatchState::Abandoned, false, true)
        ]
    );
    // An imported batch that was retried stays retried: it is not run a second time.
    assert_eq!(
        batches[0].retried_at,
        Some(Utc.with_ymd_and_hms(2026, 1, 1, 0, 30, 0).unwrap())
    );
    let summaries = store.get_summaries().await.unwrap();
    assert_eq!(summaries[0].from_batch, done.batches[0]);
    let passages = db.list_archival(id, ListArchival::default()).await.unwrap();
    assert_eq!(passages.len(), 2);
    let tea = passages
        .iter()
        .find(|p| p.dedupe_key.as_deref() == Some("tea"))
        .unwrap();
    assert_eq!(
        tea.created_at,
        Utc.with_ymd_and_hms(2025, 6, 1, 16, 0, 0).unwrap()
    );
    assert_eq!(tea.tags, ["drinks"]);
    // The name is taken now: a second import writes nothing.
    assert!(matches!(
        db.import_agent(sample("ada")).await,
        Err(Error::Agent(AgentError::NameTaken(_)))
    ));
    assert_eq!(db.agents().await.unwrap().len(), 1);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn a_failure_part_way_leaves_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    // The last thing written (the archival passages) is refused: everything before rolls back.
    refuse_inserts(&db, "archival_memories", "content", "Ada keeps bees")
        .await
        .unwrap();
    let err = db.import_agent(sample("ada")).await.unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    assert!(db.agents().await.unwrap().is_empty());
    assert!(matches!(
        db.agent_by_name("ada").await,
        Err(Error::Agent(AgentError::NameNotFound(_)))
    ));
    allow_inserts(&db, "archival_memories").await.unwrap();
    // Batches the planner would rebuild differently are refused before anything is written.
    let mut odd = sample("odd");
    odd.batches[1]
        .messages
        .insert(0, message(Role::User, "two openers", 9));
    assert!(matches!(
        db.import_agent(odd).await,
        Err(Error::Agent(AgentError::InvalidImport(_)))
    ));
    // Only an abandoned batch carries a retry time.
    let mut retried_complete = sample("retried");
    retried_complete.batches[0].retried_at = Some(Utc::now());
    assert!(matches!(
        db.import_agent(retried_complete).await,
        Err(Error::Agent(AgentError::InvalidImport(_)))
    ));
    let mut bad_summary = sample("bad");
    bad_summary.summaries[0].through_batch = 9;
    assert!(matches!(
        db.import_agent(bad_summary).await,
        Err(Error::Agent(AgentError::InvalidImport(_)))
    ));
    assert!(db.agents().await.unwrap().is_empty());
    // And with storage back, the same import works.
    db.import_agent(sample("ada")).await.unwrap();
    db.close().await;
    tdb.cleanup().await.unwrap();
}

fn history(name: &str) -> HistoryImport {
    let said = |role, content| LegacyMessage {
        role,
        content,
        created_at: None,
        origin: None,
    };
    HistoryImport {
        agent: NewAgent::named(name),
        blocks: vec![ImportBlock {
            label: "persona".into(),
            char_limit: 100,
            block_type: "core".into(),
            versions: vec![ImportVersion {
                value: "curious".into(),
                description: "who I am".into(),
                change: "create".into(),
            }],
        }],
        messages: vec![
            said(Role::User, vec![ContentBlock::text("weather?")]),
            said(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "c1",
                    "weather",
                    serde_json::json!({}),
                )],
            ),
            said(
                Role::Tool,
                vec![ContentBlock::tool_result("c1", "sun", false)],
            ),
            said(Role::Assistant, vec![ContentBlock::text("sunny")]),
            // A call whose result the file lost: its batch is stored abandoned and reported.
            said(Role::User, vec![ContentBlock::text("and tomorrow?")]),
            said(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "c2",
                    "weather",
                    serde_json::json!({}),
                )],
            ),
        ],
        archival: vec![ImportPassage {
            passage: NewArchival::text("Ada keeps bees"),
            created_at: Utc::now(),
        }],
    }
}

async fn a_history_agent_is_imported_in_one_piece_or_not_at_all(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    // A refused last write (the passages) rolls back the agent, its blocks and its batches.
    refuse_inserts(&db, "archival_memories", "content", "Ada keeps bees")
        .await
        .unwrap();
    let err = db.import_history_agent(history("ada")).await.unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    assert!(db.agents().await.unwrap().is_empty());
    allow_inserts(&db, "archival_memories").await.unwrap();
    // A block without versions is refused before anything is written.
    let mut empty = history("empty");
    empty.blocks[0].versions.clear();
    assert!(matches!(
        db.import_history_agent(empty).await,
        Err(Error::Agent(AgentError::InvalidImport(_)))
    ));
    // A block over its limit or with a bad label is refused by the block write, whole.
    let mut over = history("over");
    over.blocks[0].char_limit = 3;
    assert!(matches!(
        db.import_history_agent(over).await,
        Err(Error::Block(BlockError::OverLimit { .. }))
    ));
    let mut label = history("label");
    label.blocks[0].label = "no spaces allowed".into();
    assert!(matches!(
        db.import_history_agent(label).await,
        Err(Error::Block(BlockError::InvalidLabel { .. }))
    ));
    assert!(db.agents().await.unwrap().is_empty());

    let (imported, plan) = db.import_history_agent(history("ada")).await.unwrap();
    assert_eq!(imported.batches.len(), 2);
    assert_eq!(imported.archival, 1);
    assert!(matches!(plan.anomalies[..], [Anomaly::Unfinished { .. }]));
    let batches = db.messages(imported.agent.id).get_recent(10).await.unwrap();
    let states: Vec<BatchState> = batches.iter().map(|b| b.info.state).collect();
    assert_eq!(states, [BatchState::Complete, BatchState::Abandoned]);
    assert_eq!(batches[0].messages.len(), 4);
    let blocks = db.blocks_for(imported.agent.id).await.unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].value, "curious");
    // The name is taken now: a second import is refused whole.
    assert!(matches!(
        db.import_history_agent(history("ada")).await,
        Err(Error::Agent(AgentError::NameTaken(_)))
    ));
    assert_eq!(db.agents().await.unwrap().len(), 1);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    a_whole_agent_is_imported_in_one_piece,
    a_failure_part_way_leaves_nothing,
    a_history_agent_is_imported_in_one_piece_or_not_at_all,
);
