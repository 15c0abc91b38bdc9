//! The SQLite full-text index shared by processes that are killed: several child processes on
//! one database file insert and delete archival passages, acknowledge, import and archive
//! messages, rewrite a memory block, prune the change log (as retention passes do) and now and
//! then rebuild the index, each checking that its own search sees what it just wrote; the parent
//! searches meanwhile and SIGKILLs a random child every few hundred milliseconds (mid-write,
//! mid-commit of the index, mid-rebuild), starting another in its place. At the end a new
//! handle's search agrees with the database: every live item is found by its own word and
//! nothing else is, no deleted passage, archived message or old block value is, and every write
//! a child reported acknowledged is stored.
//!
//! The children are this test binary, re-run with `PATTERN_FTS_SOAK_URL` set
//! (`testkit::children`); a child prints a line for every write only after the store
//! acknowledged it. `PATTERN_FTS_SOAK_SECS` sets the run's length (6 s by default; the long form
//! is a few minutes).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use pattern_db::testkit::children::{Children, child_setting};
use pattern_db::testkit::{agents_with_a_block, all_archival};
use pattern_db::{
    ArchivalId, BeginBatch, ContentBlock, ContentRef, Database, DbConfig, LegacyMessage,
    NewArchival, NewMessage, Role,
};
use rand::Rng;

use crate::search::{RW, ids, search};
use crate::{Kind, fresh};

/// Children writing at once.
const CHILDREN: usize = 3;

fn run_secs() -> u64 {
    std::env::var("PATTERN_FTS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

/// What a search for `word` finds (at most 10).
async fn found(db: &Database, word: &str) -> Vec<ContentRef> {
    ids(db, word, &search(10)).await
}

/// The last word of a stored text: each item's own word.
fn own_word(text: &str) -> &str {
    text.rsplit(' ').next().unwrap_or_default()
}

/// Entry point of a child; a no-op in a normal test run. Writes until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((url, agent, tag)) = child_setting("PATTERN_FTS_SOAK") else {
        return;
    };
    let db = Database::open(DbConfig::new(url)).await.unwrap();
    let store = db.messages(agent);
    let mut passages: Vec<(ArchivalId, String)> = Vec::new();
    let mut batches = Vec::new();
    let mut rng = rand::rng();
    for i in 0u64.. {
        let word = format!("zq{tag}n{i}");
        let written = match i % 5 {
            0 | 3 => {
                let e = db
                    .insert_archival(agent, NewArchival::text(format!("soak passage {word}")))
                    .await
                    .unwrap();
                println!("A {} {word} .", e.id);
                passages.push((e.id, word.clone()));
                Some(ContentRef::archival(e.id))
            }
            1 => {
                let r = store
                    .begin_batch(
                        NewMessage::user(format!("soak message {word}")),
                        BeginBatch::default(),
                    )
                    .await
                    .unwrap();
                println!("M {} {word} .", r.message_id);
                store.complete_batch(r.batch_id).await.unwrap();
                batches.push((r.batch_id, r.message_id, word.clone()));
                Some(ContentRef::message(r.message_id))
            }
            2 => {
                let b = db.block(agent, "soak").await.unwrap();
                db.write_block(
                    agent,
                    "soak",
                    b.version,
                    format!("soak block {word}"),
                    "replace",
                    RW,
                )
                .await
                .unwrap();
                println!("B {} {word} .", b.id);
                Some(ContentRef::block(b.id))
            }
            _ => {
                if passages.is_empty() {
                    None
                } else {
                    let (id, gone) = passages.swap_remove(rng.random_range(0..passages.len()));
                    // Said before, so a kill after the delete commits does not look like a
                    // lost passage.
                    println!("d {id} {gone} .");
                    assert!(db.delete_archival(agent, id).await.unwrap());
                    println!("D {id} {gone} .");
                    assert!(found(&db, &gone).await.is_empty(), "deleted {gone} found");
                    None
                }
            }
        };
        // This process's search sees what it just wrote, whoever holds the index.
        if let Some(item) = written {
            assert_eq!(found(&db, &word).await, [item], "{word}");
        }
        if i % 30 == 29 {
            // An import: the index takes its messages while they are written.
            let words: Vec<String> = (0..4).map(|k| format!("zq{tag}n{i}k{k}")).collect();
            let history = words
                .iter()
                .enumerate()
                .map(|(k, w)| LegacyMessage {
                    role: if k % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    content: vec![ContentBlock::text(format!("soak import {w}"))],
                    created_at: None,
                    origin: None,
                })
                .collect();
            store.import_legacy(history).await.unwrap();
            for w in &words {
                println!("I - {w} .");
            }
            assert_eq!(found(&db, &words[3]).await.len(), 1, "{}", words[3]);
        }
        if i % 25 == 24 && !batches.is_empty() {
            // Archiving takes a batch's messages out of live history (and out of search).
            let (batch, message, gone) = batches.swap_remove(rng.random_range(0..batches.len()));
            println!("x {message} {gone} .");
            store.archive_batches(vec![batch]).await.unwrap();
            println!("X {message} {gone} .");
            assert!(found(&db, &gone).await.is_empty(), "archived {gone} found");
        }
        if i % 20 == 19 {
            db.prune_applied_search_changes().await.unwrap();
        }
        if i % 97 == 96 {
            db.reindex().await.unwrap();
        }
    }
}

/// A write a child reported acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Acked {
    Passage(String, String),
    Message(String, String),
    Block(String, String),
    Deleted(String, String),
    Imported(String),
    Archived(String, String),
    /// About to delete or archive (said before the write, whose outcome a kill can hide).
    Going(String),
}

/// A child's line: what it wrote, the id and the word.
fn acked(line: &str) -> Option<Acked> {
    let parts: Vec<&str> = line.split(' ').collect();
    let [kind, id, word] = parts[..] else {
        return None;
    };
    let (id, word) = (id.to_owned(), word.to_owned());
    Some(match kind {
        "A" => Acked::Passage(id, word),
        "M" => Acked::Message(id, word),
        "B" => Acked::Block(id, word),
        "D" => Acked::Deleted(id, word),
        "I" => Acked::Imported(word),
        "X" => Acked::Archived(id, word),
        "d" | "x" => Acked::Going(id),
        _ => return None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_killed_while_sharing_the_index_leave_it_true() {
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    let agents = agents_with_a_block(&db, CHILDREN, "soak").await.unwrap();
    let mut children = Children::per_agent(
        "fts_soak::child",
        "PATTERN_FTS_SOAK",
        &tdb.url,
        agents.clone(),
        50..500,
    )
    .unwrap();
    let started = Instant::now();
    while children.keep_going(started, run_secs(), 40) {
        children.tick().unwrap();
        // The parent's searches run meanwhile (and catch the index up themselves).
        let _ = found(&db, "soak").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kills = children.kills();
    let acked: Vec<Acked> = children
        .kill_all()
        .unwrap()
        .iter()
        .filter_map(|l| acked(l))
        .collect();
    db.close().await;
    assert!(
        kills > 0 && acked.len() > 20,
        "{kills} kills, {} writes",
        acked.len()
    );

    // A new handle: its first search catches up with whatever the killed processes left.
    let db = tdb.open().await.unwrap();
    let going: BTreeSet<String> = acked
        .iter()
        .filter_map(|a| match a {
            Acked::Going(id) => Some(id.clone()),
            _ => None,
        })
        .collect();
    let mut live_words: HashMap<String, ContentRef> = HashMap::new();
    let mut stored_passages = BTreeSet::new();
    let mut stored_messages = BTreeSet::new();
    for &agent in &agents {
        for e in all_archival(&db, agent).await.unwrap() {
            stored_passages.insert(e.id.to_string());
            live_words.insert(own_word(&e.content).to_owned(), ContentRef::archival(e.id));
        }
        for m in db
            .messages(agent)
            .get_all(None, 1_000_000, false)
            .await
            .unwrap()
        {
            let text = pattern_db::search::message_text(&m.content);
            stored_messages.insert(m.id.to_string());
            live_words.insert(own_word(&text).to_owned(), ContentRef::message(m.id));
        }
        let b = db.block(agent, "soak").await.unwrap();
        live_words.insert(own_word(&b.value).to_owned(), ContentRef::block(b.id));
    }
    // Every acknowledged write is stored (and a deleted passage is not).
    for a in &acked {
        match a {
            Acked::Passage(id, _) if !going.contains(id) => {
                assert!(
                    stored_passages.contains(id),
                    "acknowledged passage {id} lost"
                );
            }
            Acked::Message(id, _) if !going.contains(id) => {
                assert!(
                    stored_messages.contains(id),
                    "acknowledged message {id} lost"
                );
            }
            Acked::Deleted(id, _) => {
                assert!(!stored_passages.contains(id), "deleted passage {id} stored");
            }
            Acked::Archived(id, _) => {
                assert!(!stored_messages.contains(id), "archived message {id} live");
            }
            Acked::Imported(word) => {
                assert!(live_words.contains_key(word), "imported {word} lost");
            }
            _ => {}
        }
    }
    // The index agrees with the database: every live item is found by its word, alone...
    for (word, item) in &live_words {
        assert_eq!(
            &found(&db, word).await,
            std::slice::from_ref(item),
            "{word}"
        );
    }
    // ...and no word of a deleted passage, an archived message or a replaced block value finds
    // anything.
    for a in &acked {
        if let Acked::Deleted(_, word)
        | Acked::Block(_, word)
        | Acked::Passage(_, word)
        | Acked::Message(_, word)
        | Acked::Archived(_, word) = a
            && !live_words.contains_key(word)
        {
            assert!(found(&db, word).await.is_empty(), "{word} is gone");
        }
    }
    eprintln!(
        "fts soak: {kills} kills, {} acknowledged writes, {} live items checked",
        acked.len(),
        live_words.len()
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}
