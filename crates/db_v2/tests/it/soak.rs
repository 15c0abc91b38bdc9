//! The embedding pipeline across processes that are killed, on both backends: several child
//! processes share one database, each inserting and deleting archival passages and rewriting a
//! memory block while its worker claims and embeds jobs (its own and the others'), pruning the
//! change log now and then as retention passes do; the parent, a worker too, follows the log
//! with its handle and SIGKILLs a random child every few hundred milliseconds, starting another
//! in its place. At the end a new handle finishes every job (the dead processes' claims
//! included), every live item has exactly the vector of its current text, no deleted passage
//! has one, every acknowledged write is stored, and both the new handle's index and the
//! parent's long-lived one hold exactly the live items.
//!
//! `PATTERN_EMBED_SOAK_SECS` sets the run's length (5 s by default; minutes for the long form).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use db_v2::{EmbedConfig, Embedder};
use pattern_db::testkit::children::{Children, child_setting};
use pattern_db::testkit::{agents_with_a_block, all_archival};
use pattern_db::{Backend, ContentRef, ContentType, NewArchival};
use rand::Rng;

use crate::common::{HashEmbedder, fresh, open, quick};
use crate::pipeline::assert_vectors_match;

const CHILDREN: usize = 3;
const DIM: usize = 64;

fn run_secs() -> u64 {
    std::env::var("PATTERN_EMBED_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

/// Entry point of a child; a no-op in a normal test run. Writes until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((url, agent, tag)) = child_setting("PATTERN_EMBED_SOAK") else {
        return;
    };
    // Slow enough that jobs are pending (and claimed) when the kill comes.
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder {
        delay: Duration::from_millis(15),
        ..HashEmbedder::new(DIM)
    });
    let config = EmbedConfig {
        batch_size: 4,
        ..quick()
    };
    let db =
        db_v2::ConstellationDb::connect(pattern_db::DbConfig::new(url), Some(embedder), config)
            .await
            .unwrap();
    let mut passages = Vec::new();
    let mut rng = rand::rng();
    for i in 0u64.. {
        let word = format!("zq{tag}n{i}");
        match i % 4 {
            0 | 2 => {
                let e = db
                    .insert_archival(agent, NewArchival::text(format!("soak passage {word}")))
                    .await
                    .unwrap();
                println!("A {} .", e.id);
                passages.push(e.id);
            }
            1 => {
                let b = db.db().block(agent, "soak").await.unwrap();
                db.db()
                    .write_block(
                        agent,
                        "soak",
                        b.version,
                        format!("soak block {word}"),
                        "replace",
                        &["admin"],
                    )
                    .await
                    .unwrap();
            }
            _ if !passages.is_empty() => {
                let id = passages.swap_remove(rng.random_range(0..passages.len()));
                // Said before, so a kill after the delete commits does not look like a lost
                // passage.
                println!("d {id} .");
                assert!(db.delete_archival(agent, id).await.unwrap());
                println!("D {id} .");
            }
            _ => {}
        }
        if i % 25 == 24 {
            db.db().prune_applied_search_changes().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn processes_killed_while_embedding_leave_every_vector_true(backend: Backend) {
    let tdb = fresh(backend).await;
    let hasher = Arc::new(HashEmbedder::new(DIM));
    // The parent embeds too (as one more server would) and keeps its index through every kill.
    let follower = open(&tdb, Some(hasher.clone() as Arc<dyn Embedder>)).await;
    let agents = agents_with_a_block(follower.db(), CHILDREN, "soak")
        .await
        .unwrap();
    let mut children = Children::per_agent(
        "soak::child",
        "PATTERN_EMBED_SOAK",
        &tdb.url,
        agents.clone(),
        100..600,
    )
    .unwrap();
    let started = Instant::now();
    while children.keep_going(started, run_secs(), 10) {
        children.tick().unwrap();
        follower.catch_up().await.unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let kills = children.kills();
    let lines = children.kill_all().unwrap();
    assert!(
        kills > 0 && lines.len() > 10,
        "{kills} kills, {} writes",
        lines.len()
    );

    // A new handle with the same embedder finishes every job, the dead children's claims
    // included.
    let db = open(&tdb, Some(hasher.clone() as Arc<dyn Embedder>)).await;
    assert!(db.wait_idle(Duration::from_secs(120)).await.unwrap());
    let mut live = Vec::new();
    let mut stored = BTreeSet::new();
    for &a in &agents {
        let entries = all_archival(db.db(), a).await.unwrap();
        for e in entries {
            stored.insert(e.id.to_string());
            live.push(ContentRef::archival(e.id));
        }
        let block = db.db().block(a, "soak").await.unwrap();
        live.push(ContentRef::new(ContentType::Block, block.id.to_string()));
    }
    let deleted: BTreeSet<&str> = lines.iter().filter_map(|l| l.strip_prefix("D ")).collect();
    let going: BTreeSet<&str> = lines.iter().filter_map(|l| l.strip_prefix("d ")).collect();
    for line in &lines {
        if let Some(id) = line.strip_prefix("A ")
            && !going.contains(id)
        {
            assert!(stored.contains(id), "acknowledged passage {id} lost");
        }
    }
    for id in &deleted {
        assert!(!stored.contains(*id), "deleted passage {id} stored");
    }
    // Every live item has exactly the vector of its current text (a block's last value), and no
    // job is left.
    assert_vectors_match(&db, &hasher, &live).await;
    // The indexes hold the live items and nothing else: no deleted passage, no block twice.
    assert_eq!(db.status().await.unwrap().indexed, live.len() as u64);
    follower.catch_up().await.unwrap();
    assert_eq!(follower.status().await.unwrap().indexed, live.len() as u64);
    eprintln!(
        "embedding soak ({backend:?}): {kills} kills, {} acknowledged writes, {} live items",
        lines.len(),
        live.len()
    );
    db.shutdown(Duration::from_secs(2)).await;
    follower.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

conformance!(processes_killed_while_embedding_leave_every_vector_true);
