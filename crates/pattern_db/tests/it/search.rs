//! Search storage on both backends: archival memory, embedding jobs and vectors, the change log,
//! content resolution and full-text search. Every case is written once and instantiated for
//! SQLite and PostgreSQL by the macro at the bottom.

use pattern_db::{AgentError, ArchivalError, BatchError, SearchError};
use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use pattern_db::{
    ArchivalId, BeginBatch, ChangeKind, ContentBlock, ContentRef, ContentType, Database, Error,
    ListArchival, NewAgent, NewArchival, NewBlock, NewMessage, NewVector, Role, TextSearch,
};
use serde_json::json;

use crate::{Kind, fresh, open_with};

pub(crate) const RW: &[&str] = &["read_write", "admin"];

fn model(name: &str, dimension: u32) -> pattern_db::EmbeddingModelInfo {
    pattern_db::EmbeddingModelInfo {
        name: name.into(),
        dimension,
        file_hash: format!("hash-of-{name}"),
    }
}

fn block(label: &str, value: &str) -> NewBlock {
    NewBlock {
        label: label.into(),
        description: String::new(),
        value: value.into(),
        char_limit: 10_000,
        block_type: "core".into(),
    }
}

fn tagged(content: &str, tags: &[&str], key: Option<&str>) -> NewArchival {
    NewArchival {
        content: content.into(),
        metadata: json!({"source": "test"}),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        dedupe_key: key.map(str::to_owned),
    }
}

pub(crate) fn search(limit: usize) -> TextSearch {
    TextSearch {
        limit,
        ..TextSearch::default()
    }
}

pub(crate) async fn ids(db: &Database, query: &str, opts: &TextSearch) -> Vec<ContentRef> {
    db.search_text(query, opts)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.content)
        .collect()
}

async fn archival_crud(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.max_content_bytes = 1000).await;
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let b = db.create_agent(NewAgent::named("bob")).await.unwrap();

    let first = db
        .insert_archival(a.id, tagged("the first passage", &["x", "y"], None))
        .await
        .unwrap();
    assert_eq!(first.tags, ["x", "y"]);
    assert_eq!(first.metadata, json!({"source": "test"}));
    assert_eq!(db.archival(a.id, first.id).await.unwrap(), first);
    // Another agent does not see it.
    assert!(matches!(
        db.archival(b.id, first.id).await,
        Err(Error::Archival(ArchivalError::NotFound { .. }))
    ));

    // Dedupe keys: the same key returns the stored entry and stores nothing.
    let keyed = db
        .insert_archival(a.id, tagged("keyed", &[], Some("k1")))
        .await
        .unwrap();
    let again = db
        .insert_archival(a.id, tagged("different text", &["z"], Some("k1")))
        .await
        .unwrap();
    assert_eq!(again, keyed);
    // Per agent: bob may use the same key.
    let bobs = db
        .insert_archival(b.id, tagged("bob's", &[], Some("k1")))
        .await
        .unwrap();
    assert_ne!(bobs.id, keyed.id);
    // Within one call too, and in one transaction.
    let many = db
        .insert_archival_many(
            a.id,
            vec![
                tagged("m1", &["y"], Some("k2")),
                tagged("m2", &[], Some("k2")),
                tagged("m3", &["y"], None),
            ],
        )
        .await
        .unwrap();
    assert_eq!(many.len(), 3);
    assert_eq!(many[0], many[1]);
    assert_eq!(db.count_archival(a.id).await.unwrap(), 4);

    // Newest first, paged with `before`, filtered by tag.
    let all = db
        .list_archival(a.id, ListArchival::default())
        .await
        .unwrap();
    let contents: Vec<&str> = all.iter().map(|e| e.content.as_str()).collect();
    assert_eq!(contents, ["m3", "m1", "keyed", "the first passage"]);
    let page = db
        .list_archival(
            a.id,
            ListArchival {
                limit: 2,
                before: Some(all[1].id),
                tag: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(page, all[2..4].to_vec());
    let y = db
        .list_archival(
            a.id,
            ListArchival {
                tag: Some("y".into()),
                ..ListArchival::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        y.iter().map(|e| e.content.as_str()).collect::<Vec<_>>(),
        ["m3", "m1", "the first passage"]
    );

    // A failing entry stores none of its call.
    let before = db.count_archival(a.id).await.unwrap();
    let err = db
        .insert_archival_many(
            a.id,
            vec![tagged("ok", &[], None), NewArchival::text("x".repeat(1001))],
        )
        .await
        .unwrap_err();
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
    assert_eq!(db.count_archival(a.id).await.unwrap(), before);
    for bad in [
        NewArchival::text(""),
        tagged("t", &[""], None),
        tagged("t", &["a", "a"], None),
        NewArchival {
            tags: (0..33).map(|i| i.to_string()).collect(),
            ..NewArchival::text("t")
        },
    ] {
        assert!(matches!(
            db.insert_archival(a.id, bad).await,
            Err(Error::Archival(ArchivalError::Invalid(_)))
        ));
    }
    assert!(matches!(
        db.insert_archival(pattern_db::AgentId::new(), NewArchival::text("t"))
            .await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    assert!(matches!(
        db.list_archival(
            a.id,
            ListArchival {
                limit: 0,
                ..ListArchival::default()
            }
        )
        .await,
        Err(Error::Archival(ArchivalError::Invalid(_)))
    ));

    // Delete: true once, then false; other agents cannot delete it.
    assert!(!db.delete_archival(b.id, first.id).await.unwrap());
    assert!(db.delete_archival(a.id, first.id).await.unwrap());
    assert!(!db.delete_archival(a.id, first.id).await.unwrap());
    assert!(
        !db.delete_archival(a.id, ArchivalId(uuid::Uuid::now_v7()))
            .await
            .unwrap()
    );
    assert_eq!(db.count_archival(a.id).await.unwrap(), before - 1);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn jobs_are_recorded_with_their_content(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.record_embedding_jobs = true).await;
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(a.id);
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 0);

    let received = store
        .begin_batch(NewMessage::user("hello there"), BeginBatch::default())
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 1);
    // A tool call alone has no searchable text; its result has.
    let call = NewMessage::new(
        Role::Assistant,
        vec![ContentBlock::tool_use(
            "c1",
            "search",
            json!({"q": "secret input"}),
        )],
    );
    store
        .append_step(received.batch_id, vec![call])
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 1);
    let result = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("c1", "found it", false)],
    );
    store
        .append_step(received.batch_id, vec![result])
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 2);

    // A failing step stores neither its messages nor their jobs.
    let unpaired = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("nope", "orphan", false)],
    );
    let err = store
        .append_step(
            received.batch_id,
            vec![NewMessage::assistant("would be text"), unpaired],
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Batch(BatchError::UnpairedToolResult { .. })
    ));
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 2);

    // Blocks: create and write refresh one job per block.
    let b = db.create_block(a.id, block("persona", "v1")).await.unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 3);
    db.write_block(a.id, "persona", b.version, "v2".into(), "replace", RW)
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 3);
    // Archival.
    db.insert_archival(a.id, NewArchival::text("a passage"))
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 4);

    // The claimed block job carries the current text.
    db.register_embedding_model(model("m", 2)).await.unwrap();
    let jobs = db
        .claim_embedding_jobs(10, Duration::from_secs(60))
        .await
        .unwrap();
    let texts: HashSet<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
    assert_eq!(
        texts,
        HashSet::from(["hello there", "found it", "v2", "a passage"])
    );
    for j in &jobs {
        assert_eq!(j.text_hash, pattern_db::search::text_hash(&j.text));
        assert_eq!(j.agent_id, a.id);
    }
    db.close().await;

    // Without the setting nothing is recorded.
    let db = tdb.open().await.unwrap();
    db.insert_archival(a.id, NewArchival::text("unrecorded"))
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 4);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn claim_store_fail(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| c.record_embedding_jobs = true).await;
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let e1 = db
        .insert_archival(a.id, NewArchival::text("one"))
        .await
        .unwrap();
    let e2 = db
        .insert_archival(a.id, NewArchival::text("two"))
        .await
        .unwrap();
    let blk = db
        .create_block(a.id, block("notes", "old text"))
        .await
        .unwrap();

    // No model yet: storing is refused.
    let v = |c: &ContentRef, hash: &str, x: f32| NewVector {
        content: c.clone(),
        text_hash: hash.into(),
        vector: vec![x, 1.0],
    };
    let jobs = db
        .claim_embedding_jobs(10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(jobs.len(), 3);
    // Oldest first.
    assert_eq!(jobs[0].content, ContentRef::archival(e1.id));
    assert_eq!(jobs[1].content, ContentRef::archival(e2.id));
    // Claimed jobs are not handed out again while the lease runs.
    assert!(
        db.claim_embedding_jobs(10, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let first = v(&jobs[0].content, &jobs[0].text_hash, 0.5);
    assert!(matches!(
        db.store_embeddings(vec![first.clone()]).await,
        Err(Error::Search(SearchError::EmbeddingModelNotRegistered))
    ));
    db.register_embedding_model(model("m", 2)).await.unwrap();
    // Wrong dimension or non-finite values: nothing stored.
    let mut wrong = first.clone();
    wrong.vector.push(0.0);
    assert!(matches!(
        db.store_embeddings(vec![first.clone(), wrong]).await,
        Err(Error::Search(SearchError::EmbeddingDimension {
            expected: 2,
            got: 3,
            ..
        }))
    ));
    let mut nan = first.clone();
    nan.vector[0] = f32::NAN;
    assert!(matches!(
        db.store_embeddings(vec![nan]).await,
        Err(Error::Search(SearchError::InvalidEmbedding(_)))
    ));
    assert!(db.vectors_page(None, 10).await.unwrap().is_empty());

    // The block changes after the claim: its vector is stale and its job stays.
    let block_job = jobs
        .iter()
        .find(|j| j.content.content_type == ContentType::Block)
        .unwrap();
    db.write_block(a.id, "notes", blk.version, "new text".into(), "replace", RW)
        .await
        .unwrap();
    let report = db
        .store_embeddings(vec![
            first.clone(),
            v(&block_job.content, &block_job.text_hash, 0.7),
        ])
        .await
        .unwrap();
    assert_eq!(report.stored, vec![first.content.clone()]);
    assert_eq!(report.stale, vec![block_job.content.clone()]);
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 2);
    let again = db
        .claim_embedding_jobs(10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].text, "new text");

    // Failure: attempts counted, due again only at retry_at.
    let failed = db
        .fail_embedding_jobs(
            vec![(again[0].content.clone(), "embedder timed out".into())],
            Utc::now() + chrono::Duration::hours(1),
        )
        .await
        .unwrap();
    assert_eq!(failed, 1);
    // The second archival job is still claimed, the block job not due.
    assert!(
        db.claim_embedding_jobs(10, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    db.fail_embedding_jobs(vec![(again[0].content.clone(), "again".into())], Utc::now())
        .await
        .unwrap();
    let retried = db.claim_embedding_jobs(10, Duration::ZERO).await.unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].attempts, 2);
    // A zero lease expires at once: the job is due again.
    assert_eq!(
        db.claim_embedding_jobs(10, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );

    // Gone content: its job is dropped at claim time, its vector refused.
    let e2_ref = ContentRef::archival(e2.id);
    db.delete_archival(a.id, e2.id).await.unwrap();
    let report = db
        .store_embeddings(vec![v(&e2_ref, &pattern_db::search::text_hash("two"), 0.1)])
        .await
        .unwrap();
    assert_eq!(report.gone, vec![e2_ref.clone()]);

    // Vectors read back with agent and content time; the log has the vector change.
    let rows = db.vectors_page(None, 10).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].content, first.content);
    assert_eq!(rows[0].vector, vec![0.5, 1.0]);
    assert_eq!(rows[0].agent_id, a.id);
    assert_eq!(rows[0].created_at, e1.created_at);
    assert!(
        db.vectors_page(Some(first.content.clone()), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let for_ = db
        .vectors_for(&[e2_ref.clone(), first.content.clone()])
        .await
        .unwrap();
    assert_eq!(for_.len(), 1);
    let changes = db.search_changes_after(0, 1000).await.unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c.kind == ChangeKind::Vector && c.content == first.content)
    );
    assert!(
        changes
            .iter()
            .any(|c| c.kind == ChangeKind::Delete && c.content == e2_ref)
    );
    assert!(changes.windows(2).all(|w| w[0].seq < w[1].seq));
    // Deleting the content removes its vector and logs it.
    db.delete_archival(a.id, e1.id).await.unwrap();
    assert!(db.vectors_page(None, 10).await.unwrap().is_empty());
    let last = db.search_changes_after(0, 1000).await.unwrap();
    let tail = last.last().unwrap();
    assert_eq!(
        (tail.kind, &tail.content),
        (ChangeKind::Delete, &first.content)
    );
    // Pruning.
    let head = db.search_changes_head().await.unwrap();
    assert_eq!(head, tail.seq);
    assert!(db.prune_search_changes(head).await.unwrap() > 0);
    // The newest change stays (nothing after the head for a follower at the head), so numbers
    // are never handed out again: the next change comes after it.
    let left = db.search_changes_after(0, 10).await.unwrap();
    assert_eq!(left.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![head]);
    assert!(db.search_changes_after(head, 10).await.unwrap().is_empty());
    assert_eq!(db.prune_search_changes(head).await.unwrap(), 0);
    let again = db
        .insert_archival(a.id, tagged("after the prune", &[], None))
        .await
        .unwrap();
    db.delete_archival(a.id, again.id).await.unwrap();
    let next = db.search_changes_after(head, 10).await.unwrap();
    assert!(next.iter().all(|c| c.seq > head), "{next:?}");
    let tail = next.last().unwrap();
    assert_eq!(
        (tail.kind, &tail.content),
        (ChangeKind::Delete, &ContentRef::archival(again.id))
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn model_mismatch_and_reembed(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    assert_eq!(db.embedding_model().await.unwrap(), None);
    db.register_embedding_model(model("mini", 2)).await.unwrap();
    db.register_embedding_model(model("mini", 2)).await.unwrap();
    assert_eq!(db.embedding_model().await.unwrap(), Some(model("mini", 2)));
    let err = db
        .register_embedding_model(model("big", 3))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Search(SearchError::EmbeddingModelMismatch { stored, requested }) if stored.name == "mini" && requested.dimension == 3)
    );
    assert!(err.to_string().contains("re-embed"), "{err}");
    let mut changed_file = model("mini", 2);
    changed_file.file_hash = "other".into();
    assert!(matches!(
        db.register_embedding_model(changed_file).await,
        Err(Error::Search(SearchError::EmbeddingModelMismatch { .. }))
    ));

    // Jobs are off here: backfill queues what lacks a vector.
    let e = db
        .insert_archival(a.id, NewArchival::text("alpha"))
        .await
        .unwrap();
    db.create_block(a.id, block("b", "beta")).await.unwrap();
    let store = db.messages(a.id);
    let r = store
        .begin_batch(NewMessage::user("gamma"), BeginBatch::default())
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 0);
    assert_eq!(db.backfill_embedding_jobs().await.unwrap(), 3);
    assert_eq!(db.backfill_embedding_jobs().await.unwrap(), 0);
    let jobs = db
        .claim_embedding_jobs(10, Duration::from_secs(60))
        .await
        .unwrap();
    let vectors: Vec<NewVector> = jobs
        .iter()
        .map(|j| NewVector {
            content: j.content.clone(),
            text_hash: j.text_hash.clone(),
            vector: vec![1.0, 0.0],
        })
        .collect();
    assert_eq!(db.store_embeddings(vectors).await.unwrap().stored.len(), 3);
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 0);
    // Everything has a current vector: nothing to backfill.
    assert_eq!(db.backfill_embedding_jobs().await.unwrap(), 0);
    // Enqueue: existing content only.
    db.enqueue_embedding(ContentRef::archival(e.id))
        .await
        .unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 1);
    let unknown = ContentRef::new(ContentType::Block, uuid::Uuid::now_v7().to_string());
    assert!(matches!(
        db.enqueue_embedding(unknown).await,
        Err(Error::Search(SearchError::ContentNotFound(_)))
    ));

    // Re-embed: all vectors go (logged), the new model is stored, jobs for all live content.
    let cursor = db.search_changes_head().await.unwrap();
    assert_eq!(db.reset_embeddings(model("big", 3)).await.unwrap(), 3);
    assert_eq!(db.embedding_model().await.unwrap(), Some(model("big", 3)));
    assert!(db.vectors_page(None, 10).await.unwrap().is_empty());
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 3);
    let deletes = db
        .search_changes_after(cursor, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.kind == ChangeKind::Delete)
        .count();
    assert_eq!(deletes, 3);
    // Archiving a message drops its job and logs the delete.
    store.complete_batch(r.batch_id).await.unwrap();
    store.archive_batches(vec![r.batch_id]).await.unwrap();
    assert_eq!(db.pending_embedding_jobs().await.unwrap(), 2);
    let tail = db.search_changes_after(0, 1000).await.unwrap();
    let last = tail.last().unwrap();
    assert_eq!(last.kind, ChangeKind::Delete);
    assert_eq!(last.content, ContentRef::message(r.message_id));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Several writers store vectors (and delete content) while a reader follows the log: the union
/// of what the reader saw equals everything committed, in increasing `seq`.
async fn change_log_never_misses_under_concurrent_writers(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |c| {
        c.record_embedding_jobs = true;
        c.pg_write_connections = 4;
    })
    .await;
    db.register_embedding_model(model("m", 4)).await.unwrap();
    let agents: Vec<_> = futures::future::join_all(
        (0..4).map(|i| db.create_agent(NewAgent::named(format!("a{i}")))),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let db = db.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let page = db.search_changes_after(cursor, 50).await.unwrap();
                for c in &page {
                    assert!(c.seq > cursor);
                    cursor = c.seq;
                    seen.push(c.clone());
                }
                if page.is_empty() {
                    if finished {
                        return seen;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
    };
    let writers: Vec<_> = agents
        .iter()
        .map(|agent| {
            let db = db.clone();
            let agent = agent.id;
            tokio::spawn(async move {
                for round in 0..8 {
                    let entries = (0..5)
                        .map(|k| NewArchival::text(format!("text {round} {k}")))
                        .collect();
                    let stored = db.insert_archival_many(agent, entries).await.unwrap();
                    let vectors = stored
                        .iter()
                        .map(|e| NewVector {
                            content: ContentRef::archival(e.id),
                            text_hash: pattern_db::search::text_hash(&e.content),
                            vector: vec![round as f32, 0.0, 1.0, 2.0],
                        })
                        .collect();
                    let report = db.store_embeddings(vectors).await.unwrap();
                    assert_eq!(report.stored.len(), 5);
                    db.delete_archival(agent, stored[0].id).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.await.unwrap();
    let all = db.search_changes_after(0, 100_000).await.unwrap();
    assert_eq!(seen, all, "the follower saw exactly what was committed");
    let vectors = all.iter().filter(|c| c.kind == ChangeKind::Vector).count();
    let deletes = all.iter().filter(|c| c.kind == ChangeKind::Delete).count();
    assert_eq!((vectors, deletes), (4 * 8 * 5, 4 * 8));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn resolve_content_only_live_and_visible(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let b = db.create_agent(NewAgent::named("bob")).await.unwrap();
    let store = db.messages(a.id);
    let r1 = store
        .begin_batch(NewMessage::user("old message"), BeginBatch::default())
        .await
        .unwrap();
    store.complete_batch(r1.batch_id).await.unwrap();
    let r2 = store
        .begin_batch(NewMessage::user("new message"), BeginBatch::default())
        .await
        .unwrap();
    store.archive_batches(vec![r1.batch_id]).await.unwrap();
    let shared = db
        .create_block(a.id, block("shared", "shared value"))
        .await
        .unwrap();
    let private = db
        .create_block(a.id, block("private", "private value"))
        .await
        .unwrap();
    db.share_block(a.id, "shared", b.id, "read_only")
        .await
        .unwrap();
    let e = db
        .insert_archival(a.id, NewArchival::text("passage"))
        .await
        .unwrap();

    let refs = vec![
        ContentRef::archival(e.id),
        ContentRef::message(r1.message_id),
        ContentRef::block(private.id),
        ContentRef::message(r2.message_id),
        ContentRef::block(shared.id),
        ContentRef::archival(e.id),
        ContentRef::new(ContentType::Archival, "not-a-uuid"),
    ];
    let all = db.resolve_content(&refs, None).await.unwrap();
    let got: Vec<&str> = all.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        got,
        ["passage", "private value", "new message", "shared value"]
    );
    let as_b = db.resolve_content(&refs, Some(b.id)).await.unwrap();
    assert_eq!(
        as_b.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["shared value"]
    );
    assert_eq!(as_b[0].agent_id, a.id);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn full_text_search(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let b = db.create_agent(NewAgent::named("bob")).await.unwrap();
    let e1 = db
        .insert_archival(
            a.id,
            NewArchival::text("The multi-agent planner uses tantivy"),
        )
        .await
        .unwrap();
    let e2 = db
        .insert_archival(a.id, NewArchival::text("Zebras graze in the savanna"))
        .await
        .unwrap();
    let eb = db
        .insert_archival(b.id, NewArchival::text("bob also likes zebras"))
        .await
        .unwrap();
    let blk = db
        .create_block(a.id, block("persona", "I study zebras and giraffes"))
        .await
        .unwrap();
    let store = db.messages(a.id);
    let r = store
        .begin_batch(
            NewMessage::user("what about zebra stripes?"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    let call = NewMessage::new(
        Role::Assistant,
        vec![ContentBlock::tool_use(
            "c1",
            "lookup",
            json!({"q": "okapi"}),
        )],
    );
    let result = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("c1", "no results", false)],
    );
    store
        .append_step(r.batch_id, vec![call, result])
        .await
        .unwrap();

    // Exact terms, any kind; stemming matches zebra/zebras.
    let hits = ids(&db, "zebras", &search(10)).await;
    let want: HashSet<ContentRef> = [
        ContentRef::archival(e2.id),
        ContentRef::archival(eb.id),
        ContentRef::block(blk.id),
        ContentRef::message(r.message_id),
    ]
    .into();
    assert_eq!(hits.iter().cloned().collect::<HashSet<_>>(), want);
    // A message hit carries its text (on PostgreSQL read for the hits only).
    let all = db.search_text("zebras", &search(10)).await.unwrap();
    let message = all
        .iter()
        .find(|h| h.content == ContentRef::message(r.message_id))
        .unwrap();
    assert_eq!(message.text, "what about zebra stripes?");
    let top = db.search_text("tantivy planner", &search(5)).await.unwrap();
    assert_eq!(top[0].content, ContentRef::archival(e1.id));
    assert_eq!(top[0].text, "The multi-agent planner uses tantivy");
    assert!(top[0].score > 0.0);
    // Tool inputs are not searchable text.
    assert!(ids(&db, "okapi", &search(10)).await.is_empty());

    // Query syntax is never interpreted.
    for q in [
        "multi-agent",
        "\"unbalanced",
        "AND (",
        "*",
        "title:zebras",
        "zebras~2 OR -savanna",
        "🦓",
        "NOT",
        "\\",
        "'; DROP TABLE messages; --",
    ] {
        db.search_text(q, &search(10)).await.unwrap();
    }
    assert_eq!(
        ids(&db, "multi-agent", &search(10)).await,
        vec![ContentRef::archival(e1.id)]
    );
    let long = "zebras ".repeat(10_000 / 7);
    assert!(!ids(&db, &long, &search(10)).await.is_empty());
    assert!(matches!(
        db.search_text("   ", &search(10)).await,
        Err(Error::Search(SearchError::EmptyQuery))
    ));
    assert!(matches!(
        db.search_text(
            &"x".repeat(pattern_db::search::MAX_QUERY_BYTES + 1),
            &search(10)
        )
        .await,
        Err(Error::Search(SearchError::QueryTooLong { .. }))
    ));

    // Filters: agent (blocks through access), content type, time.
    let only_a = TextSearch {
        agent: Some(a.id),
        ..search(10)
    };
    let hits: HashSet<_> = ids(&db, "zebras", &only_a).await.into_iter().collect();
    assert!(!hits.contains(&ContentRef::archival(eb.id)));
    assert_eq!(hits.len(), 3);
    let only_b = TextSearch {
        agent: Some(b.id),
        ..search(10)
    };
    assert_eq!(
        ids(&db, "zebras", &only_b).await,
        vec![ContentRef::archival(eb.id)]
    );
    db.share_block(a.id, "persona", b.id, "read_only")
        .await
        .unwrap();
    assert_eq!(
        ids(&db, "giraffes", &only_b).await,
        vec![ContentRef::block(blk.id)]
    );
    db.unshare_block(a.id, "persona", b.id).await.unwrap();
    assert!(ids(&db, "giraffes", &only_b).await.is_empty());
    let archival_only = TextSearch {
        content_types: vec![ContentType::Archival],
        ..search(10)
    };
    assert_eq!(ids(&db, "zebras", &archival_only).await.len(), 2);
    let msgs_blocks = TextSearch {
        content_types: vec![ContentType::Message, ContentType::Block],
        ..search(10)
    };
    assert_eq!(ids(&db, "zebras", &msgs_blocks).await.len(), 2);
    let future = TextSearch {
        from: Some(Utc::now() + chrono::Duration::hours(1)),
        ..search(10)
    };
    assert!(ids(&db, "zebras", &future).await.is_empty());
    let past = TextSearch {
        to: Some(e2.created_at),
        ..search(10)
    };
    assert!(
        !ids(&db, "zebras", &past)
            .await
            .contains(&ContentRef::archival(e2.id))
    );
    let window = TextSearch {
        from: Some(e2.created_at),
        to: Some(e2.created_at + chrono::Duration::milliseconds(1)),
        content_types: vec![ContentType::Archival],
        agent: Some(a.id),
        ..search(10)
    };
    assert_eq!(
        ids(&db, "zebras", &window).await,
        vec![ContentRef::archival(e2.id)]
    );

    // Updated, deleted and archived content.
    db.write_block(
        a.id,
        "persona",
        1,
        "I study okapis now".into(),
        "replace",
        RW,
    )
    .await
    .unwrap();
    assert!(
        !ids(&db, "giraffes", &search(10))
            .await
            .contains(&ContentRef::block(blk.id))
    );
    assert_eq!(
        ids(&db, "okapis", &search(10)).await,
        vec![ContentRef::block(blk.id)]
    );
    db.delete_archival(a.id, e2.id).await.unwrap();
    db.delete_block(a.id, "persona").await.unwrap();
    store.complete_batch(r.batch_id).await.unwrap();
    store.archive_batches(vec![r.batch_id]).await.unwrap();
    assert_eq!(
        ids(&db, "zebras stripes okapis savanna", &search(10)).await,
        vec![ContentRef::archival(eb.id)]
    );
    db.delete_agent(b.id).await.unwrap();
    assert!(ids(&db, "zebras", &search(10)).await.is_empty());
    assert!(matches!(
        db.search_text("x", &search(0)).await,
        Err(Error::Search(SearchError::Invalid(_)))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// The tantivy index is derived data: dropped or behind, the next search repairs it.
async fn index_repairs_itself(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    for i in 0..20 {
        db.insert_archival(
            a.id,
            NewArchival::text(format!("passage number {i} about comets")),
        )
        .await
        .unwrap();
    }
    assert_eq!(ids(&db, "comets", &search(100)).await.len(), 20);
    // Content written while no search ran (the index is behind its cursor, as after a crash
    // between the database commit and the index commit), seen by a fresh handle.
    let e = db
        .insert_archival(a.id, NewArchival::text("late comets"))
        .await
        .unwrap();
    db.close().await;
    let db = tdb.open().await.unwrap();
    assert_eq!(
        ids(&db, "late", &search(10)).await,
        vec![ContentRef::archival(e.id)]
    );
    assert_eq!(db.reindex().await.unwrap(), 21);
    assert_eq!(ids(&db, "comets", &search(100)).await.len(), 21);
    db.close().await;
    if let Some(index) = tdb.search_index_dir() {
        // Drop the whole index directory: rebuilt from the database on the next search.
        std::fs::remove_dir_all(&index).unwrap();
        let db = tdb.open().await.unwrap();
        assert_eq!(ids(&db, "comets", &search(100)).await.len(), 21);
        // The index recorded its cursor: pruning keeps what it has not applied.
        let extra = db
            .insert_archival(a.id, NewArchival::text("after pruning comets"))
            .await
            .unwrap();
        let head = db.search_changes_head().await.unwrap();
        db.prune_search_changes(head).await.unwrap();
        assert!(ids(&db, "pruning", &search(10)).await == vec![ContentRef::archival(extra.id)]);
        db.close().await;
    }
    tdb.cleanup().await.unwrap();
}

/// Any query string either searches or is refused as empty or too long (a property over
/// generated strings, on one database per backend).
async fn arbitrary_queries_never_fail_otherwise(kind: Kind) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;

    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    db.insert_archival(
        a.id,
        NewArchival::text("a multi-agent \"quoted\" (text) AND more"),
    )
    .await
    .unwrap();
    let mut runner = TestRunner::deterministic();
    let strategy = (
        proptest::arbitrary::any::<String>(),
        "[a-z\\-\"*():~^'\\\\& |!<>]{0,40}",
        proptest::collection::vec(proptest::char::any(), 0..3000),
    );
    for _ in 0..96 {
        let (any, syntax, chars) = strategy.new_tree(&mut runner).unwrap().current();
        let long: String = chars.into_iter().collect();
        for q in [any.as_str(), syntax.as_str(), long.as_str()] {
            match db.search_text(q, &search(5)).await {
                Ok(_)
                | Err(Error::Search(SearchError::EmptyQuery))
                | Err(Error::Search(SearchError::QueryTooLong { .. })) => {}
                Err(e) => panic!("query {q:?}: {e}"),
            }
        }
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}
/// Two handles (as two processes would) claim at once: every job goes to exactly one of them.
async fn claims_are_disjoint_across_handles(kind: Kind) {
    let tdb = fresh(kind).await;
    let one = open_with(&tdb, |c| c.record_embedding_jobs = true).await;
    let two = tdb.open().await.unwrap();
    let a = one.create_agent(NewAgent::named("ada")).await.unwrap();
    let entries = (0..40)
        .map(|i| NewArchival::text(format!("passage {i}")))
        .collect();
    one.insert_archival_many(a.id, entries).await.unwrap();
    let claim = |db: Database| async move {
        let mut got = Vec::new();
        loop {
            let jobs = db
                .claim_embedding_jobs(3, Duration::from_secs(600))
                .await
                .unwrap();
            if jobs.is_empty() {
                return got;
            }
            got.extend(jobs.into_iter().map(|j| j.content));
        }
    };
    let (x, y) = tokio::join!(
        tokio::spawn(claim(one.clone())),
        tokio::spawn(claim(two.clone()))
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    let xs: HashSet<_> = x.iter().cloned().collect();
    let ys: HashSet<_> = y.iter().cloned().collect();
    assert_eq!(xs.len(), x.len());
    assert_eq!(ys.len(), y.len());
    assert!(xs.is_disjoint(&ys));
    assert_eq!(xs.len() + ys.len(), 40);
    one.close().await;
    two.close().await;
    tdb.cleanup().await.unwrap();
}

/// A claim is a lease held by a process: a closed process's claims are free at once (it releases
/// them, and a holder that is gone is judged dead), a claim of a holder that never existed or
/// died without closing is taken at once, and a live holder's claim is respected.
async fn claims_of_dead_processes_are_reclaimed_at_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let one = open_with(&tdb, |c| c.record_embedding_jobs = true).await;
    let two = tdb.open().await.unwrap();
    let a = one.create_agent(NewAgent::named("ada")).await.unwrap();
    let entries = (0..6)
        .map(|i| NewArchival::text(format!("passage {i}")))
        .collect();
    one.insert_archival_many(a.id, entries).await.unwrap();
    let lease = Duration::from_secs(3600);
    let held = one.claim_embedding_jobs(4, lease).await.unwrap();
    assert_eq!(held.len(), 4);
    // A live holder keeps its claims: only the two unclaimed jobs are handed out.
    let rest = two.claim_embedding_jobs(10, lease).await.unwrap();
    assert_eq!(rest.len(), 2);
    assert_eq!(two.reclaim_embedding_jobs().await.unwrap(), 0);
    // The holder goes away without finishing: its jobs are due at once, not in an hour.
    one.close().await;
    let taken = two.claim_embedding_jobs(10, lease).await.unwrap();
    let taken: HashSet<ContentRef> = taken.into_iter().map(|j| j.content).collect();
    let held: HashSet<ContentRef> = held.into_iter().map(|j| j.content).collect();
    assert_eq!(taken, held);
    // A process that died without closing (here: a holder with no registration at all).
    pattern_db::testkit::execute_raw(
        &two,
        "UPDATE embedding_jobs SET claimed_by = 'ghost-process'",
    )
    .await
    .unwrap();
    assert_eq!(two.reclaim_embedding_jobs().await.unwrap(), 6);
    assert_eq!(two.claim_embedding_jobs(10, lease).await.unwrap().len(), 6);
    // Closing releases this process's own claims.
    assert_eq!(two.release_embedding_claims().await.unwrap(), 6);
    let three = tdb.open().await.unwrap();
    assert_eq!(
        three.claim_embedding_jobs(10, lease).await.unwrap().len(),
        6
    );
    assert_eq!(two.claim_embedding_jobs(10, lease).await.unwrap().len(), 0);
    two.close().await;
    three.close().await;
    tdb.cleanup().await.unwrap();
}

/// A passage's `occurred_at` metadata is its time: stored as `created_at`, seen by the
/// full-text time filter; a malformed one is refused and nothing of its call is stored.
async fn archival_occurred_at_is_its_time(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = open_with(&tdb, |_| {}).await;
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let at = |text: &str, when: serde_json::Value| NewArchival {
        content: text.into(),
        metadata: json!({ pattern_db::OCCURRED_AT_KEY: when }),
        tags: Vec::new(),
        dedupe_key: None,
    };
    let old = db
        .insert_archival(
            a.id,
            at(
                "the harbour ferry schedule",
                json!("2023-01-14T18:03:00.250Z"),
            ),
        )
        .await
        .unwrap();
    assert_eq!(old.created_at.to_rfc3339(), "2023-01-14T18:03:00.250+00:00");
    assert_eq!(db.archival(a.id, old.id).await.unwrap(), old);
    let new = db
        .insert_archival(a.id, tagged("the harbour ferry is late", &[], None))
        .await
        .unwrap();
    assert!(new.created_at > old.created_at);
    let day = |d: u32| {
        chrono::TimeZone::with_ymd_and_hms(&Utc, 2023, 1, d, 0, 0, 0)
            .single()
            .unwrap()
    };
    let in_january = TextSearch {
        from: Some(day(14)),
        to: Some(day(15)),
        ..search(10)
    };
    assert_eq!(
        ids(&db, "harbour ferry", &in_january).await,
        [ContentRef::archival(old.id)]
    );
    assert_eq!(ids(&db, "harbour ferry", &search(10)).await.len(), 2);
    for bad in [json!("14 January 2023"), json!(1_673_719_380), json!(null)] {
        let err = db
            .insert_archival_many(a.id, vec![tagged("kept out", &[], None), at("bad", bad)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Archival(ArchivalError::Invalid(_))),
            "{err}"
        );
    }
    assert_eq!(db.count_archival(a.id).await.unwrap(), 2);
}

/// On PostgreSQL each handle (as each process) keeps its own full-text index, following what
/// every handle writes: messages by the transaction that last wrote them (migration 0029),
/// passages, blocks and removals through the log. A search sees every write acknowledged before
/// it, also while a transaction left open elsewhere holds every snapshot's `xmin` back (the
/// messages past the mark are applied without moving it), and stops finding a message changed by
/// any statement (the trigger stamps updates too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_handles_each_follow_every_write() {
    use pattern_db::testkit::execute_raw;
    use sqlx::Connection;
    let tdb = fresh(Kind::Postgres).await;
    let reader = tdb.open().await.unwrap();
    let writer = tdb.open().await.unwrap();
    let a = writer.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = writer.messages(a.id);
    let first = store
        .begin_batch(
            NewMessage::user("a heron by the weir"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        ids(&reader, "heron", &search(10)).await,
        [ContentRef::message(first.message_id)]
    );
    let passage = writer
        .insert_archival(a.id, NewArchival::text("herons nest in alders"))
        .await
        .unwrap();
    assert_eq!(
        ids(&reader, "alders", &search(10)).await,
        [ContentRef::archival(passage.id)]
    );

    // A transaction left open holds `xmin` at or below its own id from here on.
    let mut held = sqlx::PgConnection::connect(&tdb.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut held).await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut held)
        .await
        .unwrap();
    let step = NewMessage::new(
        Role::Assistant,
        vec![ContentBlock::text("two herons fishing")],
    );
    store.append_step(first.batch_id, vec![step]).await.unwrap();
    for _ in 0..3 {
        // Past the mark, applied on every catch-up without being indexed twice.
        assert_eq!(ids(&reader, "fishing", &search(10)).await.len(), 1);
        // Two messages and the passage.
        assert_eq!(ids(&reader, "heron", &search(10)).await.len(), 3);
    }
    // Changed by statements no code path logs: the trigger's stamp makes every index re-read
    // the message (its new words found; deleted, it is gone).
    execute_raw(
        &writer,
        "UPDATE messages SET content = replace(content::text, 'two herons', 'two egrets')::json \
         WHERE content::text LIKE '%two herons fishing%'",
    )
    .await
    .unwrap();
    assert_eq!(ids(&reader, "egrets", &search(10)).await.len(), 1);
    execute_raw(
        &writer,
        "UPDATE messages SET deleted = TRUE WHERE content::text LIKE '%two egrets fishing%'",
    )
    .await
    .unwrap();
    assert!(ids(&reader, "fishing", &search(10)).await.is_empty());
    assert!(ids(&writer, "egrets", &search(10)).await.is_empty());

    // Everything an agent owned leaves every index with it.
    let c = writer.create_agent(NewAgent::named("cy")).await.unwrap();
    writer
        .messages(c.id)
        .begin_batch(
            NewMessage::user("kestrels over the dunes"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    writer
        .insert_archival(c.id, NewArchival::text("kestrels hover"))
        .await
        .unwrap();
    assert_eq!(ids(&reader, "kestrels", &search(10)).await.len(), 2);
    writer.delete_agent(c.id).await.unwrap();
    assert!(ids(&reader, "kestrels", &search(10)).await.is_empty());

    sqlx::query("ROLLBACK").execute(&mut held).await.unwrap();
    held.close().await.unwrap();
    // The mark moves past everything once the transaction ended; nothing is lost or doubled.
    assert_eq!(ids(&reader, "heron", &search(10)).await.len(), 2);
    // A handle opened now builds its index from the database and finds the same.
    let late = tdb.open().await.unwrap();
    assert_eq!(
        ids(&late, "heron", &search(10)).await,
        ids(&reader, "heron", &search(10)).await
    );
    for db in [reader, writer, late] {
        db.close().await;
    }
    tdb.cleanup().await.unwrap();
}

macro_rules! search_conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Postgres).await
                }
            )*
        }
    };
}

search_conformance!(
    archival_crud,
    archival_occurred_at_is_its_time,
    jobs_are_recorded_with_their_content,
    claim_store_fail,
    claims_are_disjoint_across_handles,
    claims_of_dead_processes_are_reclaimed_at_once,
    model_mismatch_and_reembed,
    change_log_never_misses_under_concurrent_writers,
    resolve_content_only_live_and_visible,
    full_text_search,
    index_repairs_itself,
    arbitrary_queries_never_fail_otherwise,
);

/// SQLite logs a write's new messages as spans of positions (migration 0028), at most 512
/// messages each: the log holds a few entries for an import of 1,200 messages, and reading it
/// hands out a text change of every message with text, exactly once, whatever the page size
/// (a page never ends inside a span); a span whose messages are gone reads as a delete of no
/// content. Reverting 0028 turns spans back into one change per message. An oversized entry is
/// read whole.
#[tokio::test]
async fn messages_are_logged_as_spans() {
    use pattern_db::LegacyMessage;
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(a.id);
    let say = |text: &str| NewMessage::new(Role::User, vec![ContentBlock::text(text)]);
    let start = db.search_changes_head().await.unwrap();
    let history: Vec<LegacyMessage> = (0..1200)
        .map(|i| LegacyMessage {
            role: Role::User,
            content: vec![ContentBlock::text(format!("imported turn {i}"))],
            created_at: None,
            origin: None,
        })
        .collect();
    store.import_legacy(history).await.unwrap();
    for i in 0..3 {
        store
            .begin_batch(say(&format!("live turn {i}")), BeginBatch::default())
            .await
            .unwrap();
    }
    let head = db.search_changes_head().await.unwrap();
    // 1,200 messages in spans of at most 512, then one entry per acknowledgement.
    assert_eq!(head - start, 3 + 3, "log entries written");
    let mut expected: Vec<String> = store
        .get_recent(5000)
        .await
        .unwrap()
        .iter()
        .flat_map(|b| b.messages.iter().map(|m| m.id.to_string()))
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 1203);
    for limit in [1, 100, 511, 512, 513, 5000] {
        let (mut cursor, mut seen) = (start, Vec::new());
        loop {
            let page = db.search_changes_after(cursor, limit).await.unwrap();
            let Some(last) = page.last() else { break };
            assert!(page.windows(2).all(|w| w[0].seq <= w[1].seq), "{limit}");
            assert!(page.iter().all(|c| c.seq > cursor), "{limit}");
            assert!(page.len() <= limit + 512, "{limit}: {}", page.len());
            cursor = last.seq;
            for c in page {
                assert_eq!((c.kind, c.agent_id), (ChangeKind::Text, a.id), "{limit}");
                assert_eq!(c.content.content_type, ContentType::Message);
                seen.push(c.content.id);
            }
        }
        seen.sort();
        assert_eq!(seen, expected, "page size {limit}");
    }
    // A span whose messages are gone: one delete of no content, then the agent's deletes.
    let b = db.create_agent(NewAgent::named("bob")).await.unwrap();
    db.messages(b.id)
        .begin_batch(say("soon gone"), BeginBatch::default())
        .await
        .unwrap();
    let before = db.search_changes_head().await.unwrap();
    db.delete_agent(b.id).await.unwrap();
    let tail = db.search_changes_after(before - 1, 100).await.unwrap();
    assert_eq!(
        (tail[0].seq, tail[0].kind, tail[0].content.id.as_str()),
        (before, ChangeKind::Delete, "")
    );
    assert!(tail[1..].iter().all(|c| c.kind == ChangeKind::Delete));
    // Reverted: one text change per message (the span of the deleted agent stays a delete of
    // no content), and up again the log reads the same.
    db.migrate_down(27).await.unwrap();
    let texts = |changes: Vec<pattern_db::SearchChange>| {
        let mut ids: Vec<String> = changes
            .into_iter()
            .filter(|c| c.kind == ChangeKind::Text)
            .map(|c| c.content.id)
            .collect();
        ids.sort();
        ids
    };
    // (Read raw: this build reads the log of its own schema only.)
    let mut reverted = pattern_db::testkit::fetch_texts(
        &db,
        "SELECT content_id FROM search_changes WHERE kind = 'text' AND content_type = 'message'",
    )
    .await
    .unwrap();
    reverted.sort();
    assert_eq!(reverted, expected);
    db.migrate_up().await.unwrap();
    assert_eq!(
        texts(db.search_changes_after(0, 10_000).await.unwrap()),
        expected
    );
    assert_eq!(ids(&db, "imported", &search(1000)).await.len(), 1000);
    // An entry expanding to more than 512 changes (this version never writes one) is read
    // whole even at a page size of 1, never as an empty page that would stop the followers.
    let head = db.search_changes_head().await.unwrap();
    pattern_db::testkit::execute_raw(
        &db,
        &format!(
            "INSERT INTO search_changes (content_type, content_id, agent_id, kind, first_position, \
             last_position) SELECT 'message', '', a.id, 'messages', MIN(m.position), \
             MAX(m.position) FROM messages m JOIN agents a ON a.num = m.agent WHERE a.id = '{}' \
             GROUP BY a.id",
            a.id
        ),
    )
    .await
    .unwrap();
    let big = db.search_changes_after(head, 1).await.unwrap();
    assert_eq!(big.len(), expected.len());
    assert!(
        big.iter()
            .all(|c| c.seq == head + 1 && c.kind == ChangeKind::Text)
    );
    assert_eq!(ids(&db, "imported", &search(1000)).await.len(), 1000);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Migration 0022 (SQLite): a change log pruned empty while `seq` was AUTOINCREMENT keeps
/// counting after the table is rebuilt without it: the next change comes after every number
/// handed out before, and followers at the old head see it.
#[tokio::test]
async fn change_numbers_continue_across_migration_0022() {
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    db.migrate_down(21).await.unwrap();
    let e = db
        .insert_archival(a.id, tagged("before the rebuild", &[], None))
        .await
        .unwrap();
    db.delete_archival(a.id, e.id).await.unwrap();
    let head = db.search_changes_head().await.unwrap();
    assert!(head > 0);
    // What pruning everything did before 0022.
    pattern_db::testkit::execute_raw(&db, "DELETE FROM search_changes")
        .await
        .unwrap();
    db.migrate_up().await.unwrap();
    assert_eq!(db.search_changes_head().await.unwrap(), head);
    let e = db
        .insert_archival(a.id, tagged("after the rebuild", &[], None))
        .await
        .unwrap();
    db.delete_archival(a.id, e.id).await.unwrap();
    let next = db.search_changes_after(head, 10).await.unwrap();
    assert!(
        !next.is_empty() && next.iter().all(|c| c.seq > head),
        "{next:?}"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// SQLite: an import hands its messages to the full-text index while it writes them, so the
/// index is current when `import_legacy` returns (its cursor is the log's head before any
/// search), earlier changes it had not applied included; an import whose write fails leaves
/// nothing of it in the index and the index writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_is_indexed_when_it_returns() {
    use pattern_db::LegacyMessage;
    let tdb = fresh(Kind::Sqlite).await;
    let db = open_with(&tdb, |c| c.max_content_bytes = 4096).await;
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(a.id);
    let say = |text: &str| NewMessage::new(Role::User, vec![ContentBlock::text(text)]);
    store
        .begin_batch(say("the zebra spoke first"), BeginBatch::default())
        .await
        .unwrap();
    // The index exists and follows the log from here.
    assert_eq!(ids(&db, "zebra", &search(10)).await.len(), 1);
    store
        .begin_batch(
            say("an okapi spoke before the import"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    let legacy = |text: String| LegacyMessage {
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        created_at: None,
        origin: None,
    };
    let history: Vec<LegacyMessage> = (0..300)
        .map(|i| legacy(format!("quokka number {i} was imported")))
        .collect();
    store.import_legacy(history).await.unwrap();
    // No search ran since: pruning up to the head keeps only the newest change, which it does
    // only when the index (a registered follower) has applied everything.
    let head = db.search_changes_head().await.unwrap();
    db.prune_search_changes(head).await.unwrap();
    // (The newest entry is the import's span: one change per message, all under its `seq`.)
    let left = db.search_changes_after(0, 10).await.unwrap();
    let mut seqs: Vec<i64> = left.iter().map(|c| c.seq).collect();
    seqs.dedup();
    assert_eq!(seqs, vec![head]);
    assert_eq!(ids(&db, "okapi", &search(10)).await.len(), 1);
    assert_eq!(ids(&db, "quokka", &search(1000)).await.len(), 300);
    // A write that fails (one message over the size limit) leaves nothing of it indexed, and
    // the index takes later writes.
    let mut failing: Vec<LegacyMessage> = (0..10)
        .map(|i| legacy(format!("wombat number {i} never stored")))
        .collect();
    failing.push(legacy("x".repeat(5000)));
    assert!(store.import_legacy(failing).await.is_err());
    assert!(ids(&db, "wombat", &search(10)).await.is_empty());
    store
        .import_legacy(vec![legacy("a lemur came later".into())])
        .await
        .unwrap();
    assert_eq!(ids(&db, "lemur", &search(10)).await.len(), 1);
    assert_eq!(ids(&db, "quokka", &search(1000)).await.len(), 300);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Passages each child of `processes_share_the_full_text_index` writes.
const CHILD_PASSAGES: usize = 30;

/// Not a test on its own: a child of `processes_share_the_full_text_index` (a no-op in a
/// normal run). It writes passages carrying its word into the shared SQLite file, searching
/// after every few, and panics (exits non-zero) on any error or on missing one of its writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fts_child() {
    let (Ok(url), Ok(agent), Ok(word), Ok(go)) = (
        std::env::var("PATTERN_FTS_CHILD"),
        std::env::var("PATTERN_FTS_AGENT"),
        std::env::var("PATTERN_FTS_WORD"),
        std::env::var("PATTERN_FTS_GO"),
    ) else {
        return;
    };
    let db = Database::open(pattern_db::DbConfig::new(url))
        .await
        .unwrap();
    let agent = agent.parse().unwrap();
    // Ready; then all children open the (new) index at the same moment.
    std::fs::write(format!("{go}.{word}"), b"").unwrap();
    while !std::path::Path::new(&go).exists() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(ids(&db, &word, &search(100)).await.is_empty());
    for i in 0..CHILD_PASSAGES {
        db.insert_archival(
            agent,
            NewArchival::text(format!("{word} passage {i} in the shared file")),
        )
        .await
        .unwrap();
        if i % 3 == 2 {
            // A search catches up first: this process sees every write it made.
            assert_eq!(ids(&db, &word, &search(100)).await.len(), i + 1);
        }
    }
    db.close().await;
}

/// Several processes on one SQLite file share its full-text index directory: they open a new
/// index at the same moment, write, catch up and search it at once, and every search succeeds
/// and sees every write acknowledged before it, whichever process wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_share_the_full_text_index() {
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let words = ["heron", "otter", "badger", "marten"];
    let go = tdb.dir().unwrap().join(format!("go-{}", a.id));
    let mut children: Vec<std::process::Child> = words
        .iter()
        .map(|word| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "search::fts_child",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PATTERN_FTS_CHILD", &tdb.url)
                .env("PATTERN_FTS_AGENT", a.id.to_string())
                .env("PATTERN_FTS_WORD", word)
                .env("PATTERN_FTS_GO", &go)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let ready = |w: &&str| std::path::Path::new(&format!("{}.{w}", go.display())).exists();
    while !words.iter().all(ready) {
        if let Some(i) = children
            .iter_mut()
            .position(|c| c.try_wait().unwrap().is_some())
        {
            let out = children.swap_remove(i).wait_with_output().unwrap();
            panic!(
                "a child exited before it was ready ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    std::fs::write(&go, b"").unwrap();
    // This process searches (and so opens, catches up and commits the index) until every
    // child has exited; what it finds only grows.
    let mut seen = 0;
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        let now = ids(&db, "shared", &search(1000)).await.len();
        assert!(now >= seen, "a search lost hits: {now} after {seen}");
        seen = now;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for word in words {
        assert_eq!(ids(&db, word, &search(100)).await.len(), CHILD_PASSAGES);
    }
    db.close().await;
    // A handle opened afterwards finds the same.
    let db = tdb.open().await.unwrap();
    assert_eq!(
        ids(&db, "shared", &search(1000)).await.len(),
        words.len() * CHILD_PASSAGES
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// The log pruned past the full-text index's cursor (another process recorded a later cursor
/// for the shared follower row just before a rebuild moved the index back, then a retention
/// pass ran): the next search rebuilds the index instead of missing the pruned changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_behind_a_pruned_log_is_rebuilt() {
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("ada")).await.unwrap();
    db.insert_archival(a.id, NewArchival::text("the first heron"))
        .await
        .unwrap();
    assert_eq!(ids(&db, "heron", &search(10)).await.len(), 1);
    db.close().await;
    // The index as it was then, kept aside (its files are flat in one directory).
    let index = tdb.search_index_dir().unwrap();
    let saved = index.with_extension("saved");
    std::fs::create_dir_all(&saved).unwrap();
    for entry in std::fs::read_dir(&index).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, saved.join(path.file_name().unwrap())).unwrap();
    }
    let db = tdb.open().await.unwrap();
    let late = db
        .insert_archival(a.id, NewArchival::text("a late heron"))
        .await
        .unwrap();
    // The newest change is never pruned: a second one keeps the first's out of the log.
    db.insert_archival(a.id, NewArchival::text("the last heron"))
        .await
        .unwrap();
    assert_eq!(ids(&db, "heron", &search(10)).await.len(), 3);
    db.close().await;
    // The index goes back to before the late passage while the shared cursor says it has
    // applied everything, and the log is pruned to that cursor.
    std::fs::remove_dir_all(&index).unwrap();
    std::fs::rename(&saved, &index).unwrap();
    let db = tdb.open().await.unwrap();
    let head = db.search_changes_head().await.unwrap();
    db.set_search_cursor("tantivy", head).await.unwrap();
    assert!(db.prune_applied_search_changes().await.unwrap() > 0);
    assert_eq!(db.search_pruned_through().await.unwrap(), head);
    let found = ids(&db, "heron", &search(10)).await;
    assert_eq!(found.len(), 3);
    assert!(found.contains(&ContentRef::archival(late.id)));
    db.close().await;
    tdb.cleanup().await.unwrap();
}
