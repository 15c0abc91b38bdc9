//! PostgreSQL's native column types (migration 0023, decision 0026): existing databases convert
//! in place and back, and what the store acknowledged reads back unchanged on both engines,
//! including text PostgreSQL's JSONB and text types cannot hold (a NUL character).

use pattern_db::search::TextSearch;
use pattern_db::testkit::fetch_texts;
use pattern_db::{BeginBatch, Database, NewAgent, NewArchival, NewMessage, StoredBatch};
use serde_json::json;

use crate::{Kind, fresh, open_with};

fn named(name: &str, metadata: serde_json::Value) -> NewAgent {
    NewAgent {
        metadata,
        ..NewAgent::named(name)
    }
}

/// The type PostgreSQL gives `table.column`.
async fn column_type(db: &Database, table: &str, column: &str) -> String {
    let got = fetch_texts(
        db,
        &format!(
            "SELECT data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = '{table}' \
             AND column_name = '{column}'"
        ),
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 1, "{table}.{column}: {got:?}");
    got[0].clone()
}

/// Everything the store gives back about `agent` that 0023 converts: the agent (id, metadata,
/// time), its batches and messages, an archival passage.
async fn snapshot(
    db: &Database,
    agent: pattern_db::AgentId,
    passage: pattern_db::archival::ArchivalId,
) -> (
    pattern_db::Agent,
    Vec<StoredBatch>,
    pattern_db::archival::ArchivalEntry,
) {
    (
        db.agent(agent).await.unwrap(),
        db.messages(agent).get_recent(10).await.unwrap(),
        db.archival(agent, passage).await.unwrap(),
    )
}

/// A PostgreSQL database in 0022's form (its columns TEXT and BIGINT) converts in place: every
/// id, time and JSON document reads back the same, and converting back and forth again changes
/// nothing. The data is written at the newest schema and converted down by 0023's down migration:
/// the message store's checked statements (`pattern_db_postgres`) are written against the native
/// types, so this build no longer writes under 0022's schema (decision 0023, step 3 (c)).
#[tokio::test]
async fn native_types_convert_in_place() {
    let tdb = fresh(Kind::Postgres).await;
    let db = open_with(&tdb, |c| {
        c.machine_id = pattern_db::MachineId::Fixed(7);
    })
    .await;
    let agent = db
        .create_agent(named("ada", json!({"zone": "Europe/Oslo", "n": 1.5})))
        .await
        .unwrap();
    let store = db.messages(agent.id);
    store
        .begin_batch(
            NewMessage::user("the river runs north"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    let passage = db
        .insert_archival(
            agent.id,
            NewArchival {
                content: "the bridge was built in 1901".into(),
                metadata: json!({"source": "test", "page": 3}),
                tags: vec!["history".into()],
                dedupe_key: None,
            },
        )
        .await
        .unwrap();
    let before = snapshot(&db, agent.id, passage.id).await;

    db.migrate_down(22).await.unwrap();
    for (table, column, ty) in [
        ("agents", "id", "text"),
        ("messages", "created_at", "bigint"),
        ("messages", "content", "text"),
        ("mcp_servers", "config", "text"),
    ] {
        assert_eq!(
            column_type(&db, table, column).await,
            ty,
            "{table}.{column}"
        );
    }
    // 0022's forms: an id's hyphenated text, a time's milliseconds.
    let old = fetch_texts(
        &db,
        "SELECT id || ' ' || created_at::text FROM agents WHERE name = 'ada'",
    )
    .await
    .unwrap();
    assert_eq!(
        old,
        vec![format!(
            "{} {}",
            agent.id,
            before.0.created_at.timestamp_millis()
        )]
    );
    db.close().await;

    // Opening migrates: the TEXT and BIGINT columns convert in place.
    let db = tdb.open().await.unwrap();
    for (table, column, ty) in [
        ("agents", "id", "uuid"),
        ("messages", "agent_id", "uuid"),
        ("messages", "created_at", "timestamp with time zone"),
        ("messages", "content", "json"),
        ("agents", "metadata", "json"),
        ("mcp_servers", "config", "jsonb"),
        ("batches", "lease_expires_at", "timestamp with time zone"),
    ] {
        assert_eq!(
            column_type(&db, table, column).await,
            ty,
            "{table}.{column}"
        );
    }
    assert_eq!(snapshot(&db, agent.id, passage.id).await, before);
    // Converted rows stay searchable and writable.
    let hits = db
        .search_text("river", &TextSearch::default())
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    store_and_read_again(&db, agent.id).await;
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn store_and_read_again(db: &Database, agent: pattern_db::AgentId) {
    let store = db.messages(agent);
    let open = store.current_batch().await.unwrap().unwrap();
    store
        .append_step(open.id, vec![NewMessage::assistant("north, to the sea")])
        .await
        .unwrap();
    let batch = store.get_batch(open.id).await.unwrap();
    assert_eq!(batch.messages.len(), 2);
}

/// A NUL character (JSON's `\u0000`) in a message and in agent metadata is stored and read back
/// unchanged on both engines, and the message's other words are found by full-text search; an
/// archival passage holding one is refused with a typed error on both.
async fn nul_characters_round_trip(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db
        .create_agent(named("nul", json!({"note": "a\u{0}b"})))
        .await
        .unwrap();
    assert_eq!(
        db.agent(agent.id).await.unwrap().metadata["note"],
        "a\u{0}b"
    );
    let store = db.messages(agent.id);
    let text = "before\u{0}after the estuary \\u0000 stays";
    let got = store
        .begin_batch(NewMessage::user(text), BeginBatch::default())
        .await
        .unwrap();
    let batch = store.get_batch(got.batch_id).await.unwrap();
    assert_eq!(batch.messages[0].content, NewMessage::user(text).content);
    // The newest batches read them back alike (on SQLite as one JSON document).
    let tricky = "quotes \" and \\ backslashes, \u{1F980} \u{7}\u{1f} tabs\t, lines\n, ]},{[";
    store
        .begin_batch(NewMessage::user(tricky), BeginBatch::default())
        .await
        .unwrap();
    let recent = store.get_recent(10).await.unwrap();
    assert_eq!(recent.len(), 2);
    assert_eq!(recent[0].info, batch.info);
    assert_eq!(recent[0].messages, batch.messages);
    assert_eq!(
        recent[1].messages[0].content,
        NewMessage::user(tricky).content
    );
    assert_eq!(
        recent[1].messages,
        store.get_batch(recent[1].info.id).await.unwrap().messages
    );
    let hits = db
        .search_text("estuary", &TextSearch::default())
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    // Plain-text fields cannot keep one on PostgreSQL: refused alike on both engines.
    let refused = db
        .insert_archival(
            agent.id,
            NewArchival {
                content: "a\u{0}b".into(),
                metadata: json!(null),
                tags: Vec::new(),
                dedupe_key: None,
            },
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(pattern_db::Error::Archival(
                pattern_db::ArchivalError::Invalid(_)
            ))
        ),
        "{refused:?}"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// On PostgreSQL a text that is not a UUID, bound where the column is one, is an encoding error
/// that names the parameter and the type (never a silent NULL or a match); on SQLite it matches
/// nothing.
async fn a_text_that_is_not_a_uuid_is_named(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    db.create_agent(NewAgent::named("ada")).await.unwrap();
    let got = pattern_db::sql::query("SELECT name FROM agents WHERE id = $1")
        .bind("not-a-uuid")
        .fetch_all(db.reader())
        .await;
    match kind {
        Kind::Sqlite => assert!(got.unwrap().is_empty()),
        Kind::Postgres => {
            let e = got.unwrap_err().to_string();
            assert!(e.contains("parameter $1 (UUID)"), "{e}");
        }
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    nul_characters_round_trip,
    a_text_that_is_not_a_uuid_is_named
);
