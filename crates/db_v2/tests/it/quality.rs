//! Retrieval quality with the real model on both backends: `tests/data/retrieval_quality.json`
//! (300 passages: hand-written everyday facts asked about in other words, identifiers such as
//! `INV-58213` with near-duplicate distractors, and filler; 110 questions with the id of the
//! passage that answers them). Reports recall@5 and @10 for Fts, Vector and Hybrid (run with
//! `--nocapture` to see them) and requires Hybrid to beat each alone at 10.

use std::sync::Arc;
use std::time::Duration;

use db_v2::{Embedder, SearchMode, SearchOptions};
use pattern_db::{Backend, ContentRef, NewArchival};
use serde_json::Value;

use crate::common::{agent, fresh, model, open};

async fn recall(backend: Backend) {
    let data: Value = serde_json::from_str(include_str!("../data/retrieval_quality.json")).unwrap();
    let passages = data["passages"].as_array().unwrap();
    let questions = data["questions"].as_array().unwrap();
    let tdb = fresh(backend).await;
    let m: Arc<dyn Embedder> = model().await;
    let db = open(&tdb, Some(m)).await;
    let ada = agent(&db, "ada").await;
    let entries = db
        .insert_archival_many(
            ada,
            passages
                .iter()
                .map(|p| NewArchival::text(p["text"].as_str().unwrap()))
                .collect(),
        )
        .await
        .unwrap();
    assert!(db.wait_idle(Duration::from_secs(300)).await.unwrap());
    let refs: Vec<ContentRef> = entries.iter().map(|e| ContentRef::archival(e.id)).collect();
    let mut table = Vec::new();
    for mode in [SearchMode::Fts, SearchMode::Vector, SearchMode::Hybrid] {
        let (mut at5, mut at10) = (0usize, 0usize);
        for q in questions {
            let want = &refs[q["answer"].as_u64().unwrap() as usize];
            let hits = db
                .search(
                    q["question"].as_str().unwrap(),
                    &SearchOptions::mode(mode).with_limit(10).for_agent(ada),
                )
                .await
                .unwrap();
            if let Some(pos) = hits.iter().position(|h| &h.content == want) {
                at10 += 1;
                if pos < 5 {
                    at5 += 1;
                }
            }
        }
        let n = questions.len() as f64;
        let r = (at5 as f64 / n, at10 as f64 / n);
        println!(
            "{backend:?} {mode:?}: recall@5 {:.3} recall@10 {:.3}",
            r.0, r.1
        );
        table.push(r);
    }
    let (fts, vector, hybrid) = (table[0], table[1], table[2]);
    assert!(
        hybrid.1 > fts.1 && hybrid.1 > vector.1,
        "hybrid recall@10 {:.3} must beat fts {:.3} and vector {:.3}",
        hybrid.1,
        fts.1,
        vector.1
    );
    db.shutdown(Duration::from_secs(5)).await;
    tdb.cleanup().await.unwrap();
}

conformance!(recall);
