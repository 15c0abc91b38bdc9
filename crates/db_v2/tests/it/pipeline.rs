//! The background pipeline with test embedders, on both backends: failures and timeouts are
//! retried with backoff while the content write itself succeeded; a different model is a typed
//! error naming the re-embed command; re-embed and backfill; a child process SIGKILLed with jobs
//! pending leaves nothing lost (every job completes after restart, every vector is the embedding
//! of its content's current text).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use db_v2::{ConstellationDb, EmbedConfig, Embedder, Error, SearchMode, SearchOptions};
use pattern_db::testkit::TestDb;
use pattern_db::{Backend, ContentRef, ContentType, ListArchival, NewArchival, NewBlock};

use crate::common::{FlakyEmbedder, HashEmbedder, agent, fresh, open, open_with, quick};

/// Every stored vector equals the embedding of its content's current text, and no job is left.
pub(crate) async fn assert_vectors_match(
    db: &ConstellationDb,
    hasher: &HashEmbedder,
    refs: &[ContentRef],
) {
    assert_eq!(db.db().pending_embedding_jobs().await.unwrap(), 0);
    let rows = db.db().resolve_content(refs, None).await.unwrap();
    let vectors = db.db().vectors_for(refs).await.unwrap();
    assert_eq!(vectors.len(), rows.len(), "every live content has a vector");
    for (row, v) in rows.iter().zip(&vectors) {
        assert_eq!(row.content, v.content);
        assert_eq!(
            v.vector,
            hasher.vector(&row.text),
            "vector of {}",
            row.content
        );
    }
}

async fn failures_are_retried(backend: Backend) {
    let tdb = fresh(backend).await;
    let flaky = Arc::new(FlakyEmbedder {
        inner: HashEmbedder::new(32),
        fail: 3,
        stall: None,
        calls: AtomicUsize::new(0),
    });
    let db = open(&tdb, Some(flaky.clone() as Arc<dyn Embedder>)).await;
    let ada = agent(&db, "ada").await;
    // The write succeeds although the embedder is failing.
    let e = db
        .insert_archival(ada, NewArchival::text("retry me please"))
        .await
        .unwrap();
    assert!(db.wait_idle(Duration::from_secs(30)).await.unwrap());
    assert!(flaky.calls.load(Ordering::SeqCst) >= 4);
    let status = db.status().await.unwrap();
    assert!(status.failures >= 3, "{status:?}");
    assert!(status.last_error.unwrap().contains("injected failure"));
    assert_eq!(status.pending_jobs, 0);
    assert_eq!(status.embedded, 1);
    assert_vectors_match(&db, &flaky.inner, &[ContentRef::archival(e.id)]).await;
    let hits = db
        .search("retry", &SearchOptions::mode(SearchMode::Vector))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

async fn timeouts_are_retried(backend: Backend) {
    let tdb = fresh(backend).await;
    let flaky = Arc::new(FlakyEmbedder {
        inner: HashEmbedder::new(32),
        fail: 1,
        stall: Some(Duration::from_secs(5)),
        calls: AtomicUsize::new(0),
    });
    let config = EmbedConfig {
        embed_timeout: Duration::from_millis(300),
        ..quick()
    };
    let db = open_with(&tdb, Some(flaky.clone() as Arc<dyn Embedder>), config).await;
    let ada = agent(&db, "ada").await;
    let e = db
        .insert_archival(ada, NewArchival::text("slow model"))
        .await
        .unwrap();
    assert!(db.wait_idle(Duration::from_secs(30)).await.unwrap());
    let status = db.status().await.unwrap();
    assert!(status.failures >= 1);
    assert!(status.last_error.unwrap().contains("timed out"));
    assert_vectors_match(&db, &flaky.inner, &[ContentRef::archival(e.id)]).await;
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

async fn model_mismatch_and_reembed(backend: Backend) {
    let tdb = fresh(backend).await;
    let first: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(16));
    let db = open(&tdb, Some(first)).await;
    let ada = agent(&db, "ada").await;
    let mut refs = Vec::new();
    for i in 0..5 {
        let e = db
            .insert_archival(ada, NewArchival::text(format!("passage number {i}")))
            .await
            .unwrap();
        refs.push(ContentRef::archival(e.id));
    }
    assert!(db.wait_idle(Duration::from_secs(30)).await.unwrap());
    db.shutdown(Duration::from_secs(2)).await;
    drop(db);

    // Another model: a typed error that names the way forward.
    let other = HashEmbedder::new(24);
    let err = ConstellationDb::connect(tdb.config(), Some(Arc::new(other)), quick())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EmbeddingModelMismatch { .. }), "{err}");
    assert!(err.to_string().contains("pattern embed --reembed"), "{err}");

    // Re-embed: open without registering, then switch every vector to the new model.
    let raw = pattern_db::Database::open(tdb.config()).await.unwrap();
    let new_model = Arc::new(HashEmbedder {
        name: "hash-bow-24".into(),
        ..HashEmbedder::new(24)
    });
    let info = pattern_db::EmbeddingModelInfo {
        name: new_model.name.clone(),
        dimension: 24,
        file_hash: new_model.model_hash().to_owned(),
    };
    raw.reset_embeddings(info).await.unwrap();
    let db = ConstellationDb::open(raw, Some(new_model.clone() as Arc<dyn Embedder>), quick())
        .await
        .unwrap();
    let mut seen = Vec::new();
    db.reembed(&mut |p| seen.push(p)).await.unwrap();
    assert_eq!(seen.last().unwrap().done, seen.last().unwrap().total);
    assert_vectors_match(&db, &new_model, &refs).await;
    assert_eq!(db.status().await.unwrap().indexed, 5);
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

async fn backfill_embeds_content_written_without_jobs(backend: Backend) {
    let tdb = fresh(backend).await;
    // Written by a process without an embedder: no jobs recorded.
    let plain = ConstellationDb::connect(tdb.config(), None, quick())
        .await
        .unwrap();
    let ada = agent(&plain, "ada").await;
    let entries = plain
        .insert_archival_many(
            ada,
            (0..40)
                .map(|i| NewArchival::text(format!("old note {i}")))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(plain.db().pending_embedding_jobs().await.unwrap(), 0);
    drop(plain);
    let hasher = Arc::new(HashEmbedder::new(16));
    let db = open(&tdb, Some(hasher.clone() as Arc<dyn Embedder>)).await;
    let mut last = None;
    let report = db.backfill(&mut |p| last = Some(p)).await.unwrap();
    assert_eq!(report.queued, 40);
    assert_eq!(report.already_pending, 0);
    assert_eq!(report.reclaimed, 0);
    assert_eq!(report.embedded, 40);
    assert_eq!(report.pending, 0);
    let last = last.unwrap();
    assert_eq!((last.done, last.total), (40, 40));
    let refs: Vec<ContentRef> = entries.iter().map(|e| ContentRef::archival(e.id)).collect();
    assert_vectors_match(&db, &hasher, &refs).await;
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// Another process's vectors reach this process's index through the change log.
async fn follows_other_writers(backend: Backend) {
    let tdb = fresh(backend).await;
    let hasher: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(16));
    let reader = open(&tdb, Some(hasher.clone())).await;
    let writer = open(&tdb, Some(hasher)).await;
    let ada = agent(&writer, "ada").await;
    let e = writer
        .insert_archival(ada, NewArchival::text("written elsewhere"))
        .await
        .unwrap();
    assert!(writer.wait_idle(Duration::from_secs(30)).await.unwrap());
    let hits = reader
        .search(
            "written elsewhere",
            &SearchOptions::mode(SearchMode::Vector),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].content, ContentRef::archival(e.id));
    // A delete elsewhere leaves the index too.
    writer.delete_archival(ada, e.id).await.unwrap();
    reader.catch_up().await.unwrap();
    assert_eq!(reader.status().await.unwrap().indexed, 0);
    writer.shutdown(Duration::from_secs(2)).await;
    reader.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// A retention pass prunes the search log past a follower's cursor: the follower (its cursor
/// only in memory) reloads from the stored vectors instead of missing the changes pruned.
async fn follows_past_a_pruned_log(backend: Backend) {
    let tdb = fresh(backend).await;
    let hasher: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(16));
    let reader = open(&tdb, Some(hasher.clone())).await;
    let writer = open(&tdb, Some(hasher)).await;
    let ada = agent(&writer, "ada").await;
    reader.catch_up().await.unwrap();
    let gone = writer
        .insert_archival(ada, NewArchival::text("deleted before the reader looked"))
        .await
        .unwrap();
    let kept = writer
        .insert_archival(ada, NewArchival::text("written while the log was pruned"))
        .await
        .unwrap();
    assert!(writer.wait_idle(Duration::from_secs(30)).await.unwrap());
    writer.delete_archival(ada, gone.id).await.unwrap();
    // SQLite prunes only what its full-text index applied: let it catch up first.
    writer
        .search("pruned", &SearchOptions::mode(SearchMode::Fts))
        .await
        .unwrap();
    assert!(writer.db().prune_applied_search_changes().await.unwrap() > 0);
    assert!(writer.db().search_pruned_through().await.unwrap() > 0);
    let hits = reader
        .search(
            "written while the log was pruned",
            &SearchOptions::mode(SearchMode::Vector),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].content, ContentRef::archival(kept.id));
    assert_eq!(reader.status().await.unwrap().indexed, 1);
    writer.shutdown(Duration::from_secs(2)).await;
    reader.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// A follower catching up over and over while another handle writes, embeds, deletes and
/// prunes the log as often as it can: whatever the interleaving of a prune with the follower's
/// reads, it ends holding exactly the stored vectors. A prune landing between reading the prune
/// mark and reading the changes used to leave a hole in the follower's page, applied as if
/// whole (the embedding soak on PostgreSQL met it once: 201 of 205 items indexed). The window
/// is a few hundred microseconds, so this run meets it only sometimes; widened by a 5 ms pause
/// between the two reads (a throwaway edit), the old order fails here at once on PostgreSQL
/// (68 of 80) and the new one passes.
async fn follows_while_the_log_is_pruned(backend: Backend) {
    let tdb = fresh(backend).await;
    let hasher: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(16));
    let reader = open(&tdb, Some(hasher.clone())).await;
    let writer = open(&tdb, Some(hasher)).await;
    let ada = agent(&writer, "ada").await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let following = {
        let (reader, done) = (reader.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                reader.catch_up().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    // Prunes as often as it can (a retention pass, in the worst case).
    let pruning = {
        let (writer, done) = (writer.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                // SQLite prunes only what its full-text index applied: let it catch up first.
                writer
                    .search("passage", &SearchOptions::mode(SearchMode::Fts))
                    .await
                    .unwrap();
                writer.db().prune_applied_search_changes().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    for round in 0..40 {
        let mut kept = Vec::new();
        for k in 0..3 {
            kept.push(
                writer
                    .insert_archival(ada, NewArchival::text(format!("round {round} passage {k}")))
                    .await
                    .unwrap(),
            );
        }
        assert!(writer.wait_idle(Duration::from_secs(30)).await.unwrap());
        writer.delete_archival(ada, kept[0].id).await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    following.await.unwrap();
    pruning.await.unwrap();
    writer.catch_up().await.unwrap();
    reader.catch_up().await.unwrap();
    let live = 40 * 2;
    assert_eq!(writer.status().await.unwrap().indexed, live);
    assert_eq!(reader.status().await.unwrap().indexed, live);
    writer.shutdown(Duration::from_secs(2)).await;
    reader.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

const CHILD_ENV: &str = "DB_V2_CRASH_CHILD_URL";

/// Not a test on its own: the child process of `crash_leaves_nothing_behind`. It writes content
/// with jobs, reports `READY`, and keeps embedding slowly until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let slow: Arc<dyn Embedder> = Arc::new(HashEmbedder {
        delay: Duration::from_millis(300),
        ..HashEmbedder::new(16)
    });
    // An hour-long lease: the parent finishing in seconds shows the dead child's claims were
    // taken at once, not after their lease.
    let config = EmbedConfig {
        batch_size: 8,
        lease: Duration::from_secs(3600),
        ..quick()
    };
    let db = ConstellationDb::connect(pattern_db::DbConfig::new(url), Some(slow), config)
        .await
        .unwrap();
    let ada = agent(&db, "ada").await;
    db.insert_archival_many(
        ada,
        (0..120)
            .map(|i| NewArchival::text(format!("crash passage {i} about topic {}", i % 7)))
            .collect(),
    )
    .await
    .unwrap();
    let block = db
        .db()
        .create_block(
            ada,
            NewBlock {
                label: "notes".into(),
                description: "notes".into(),
                value: "first value".into(),
                char_limit: 1000,
                block_type: "working".into(),
            },
        )
        .await
        .unwrap();
    let mut version = block.version;
    for i in 0..5 {
        version = db
            .db()
            .write_block(
                ada,
                "notes",
                version,
                format!("value {i}"),
                "replace",
                &["admin"],
            )
            .await
            .unwrap();
    }
    db.wake_worker();
    println!("READY");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

async fn crash_leaves_nothing_behind(backend: Backend) {
    let tdb: TestDb = fresh(backend).await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pipeline::crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &tdb.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.trim_end().ends_with("READY") => break,
            Some(Ok(_)) => continue,
            other => panic!("child ended before READY: {other:?}"),
        }
    }
    // Let it claim and store a few batches, then kill it mid-work.
    tokio::time::sleep(Duration::from_millis(700)).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let hasher = Arc::new(HashEmbedder::new(16));
    let db = open(&tdb, Some(hasher.clone() as Arc<dyn Embedder>)).await;
    let pending = db.db().pending_embedding_jobs().await.unwrap();
    assert!(pending > 0, "the child finished everything: kill it sooner");
    // The dead child's claims are taken at once (its liveness lock is free), not after their
    // hour-long lease.
    assert!(db.wait_idle(Duration::from_secs(60)).await.unwrap());
    let agents = db.db().agents().await.unwrap();
    let ada = agents[0].id;
    let entries = db
        .list_archival(
            ada,
            ListArchival {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(entries.len(), 120);
    let mut refs: Vec<ContentRef> = entries.iter().map(|e| ContentRef::archival(e.id)).collect();
    let block = db.db().block(ada, "notes").await.unwrap();
    refs.push(ContentRef::new(ContentType::Block, block.id.to_string()));
    assert_vectors_match(&db, &hasher, &refs).await;
    assert_eq!(db.status().await.unwrap().indexed, 121);
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    failures_are_retried,
    timeouts_are_retried,
    model_mismatch_and_reembed,
    backfill_embeds_content_written_without_jobs,
    follows_other_writers,
    follows_past_a_pruned_log,
    follows_while_the_log_is_pruned,
    crash_leaves_nothing_behind,
);
