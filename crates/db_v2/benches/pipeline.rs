//! Benches of the embedding pipeline and search with the real model on SQLite: raw fastembed
//! throughput (batch 32) against the background pipeline's; foreground write latency p50/p99
//! with and without an embedding backlog, and vector search p50/p95 likewise (a query must not
//! wait for the pipeline's batch); Fts, Vector and Hybrid search p50/p95 at 10k and 100k
//! passages (synthetic random unit vectors stored for the passages; the query is embedded by
//! the real model), and the same searches on PostgreSQL (groups `search_pg_N`) when
//! `PATTERN_TEST_PG_URL` is set (as `cargo xtask bench` does). Two corpora: passages of 12 words
//! of 16 (`search_N`: every query word in most passages, full text's worst case) and 387-byte
//! English-like passages with the storage goals' two-word queries (`search_en_N`,
//! `search_pg_en_N`). Percentiles are printed as `PCT ...` lines; criterion times the searches.
//! It must never be run as a test (timings live here, not in tests). Needs `cargo xtask setup`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use db_v2::{
    ConstellationDb, EmbedConfig, Embedder, FastEmbedder, ModelPaths, SearchMode, SearchOptions,
};
use pattern_db::search::text_hash;
use pattern_db::testkit::TestDb;
use pattern_db::testkit::english::{english, english_query};
use pattern_db::{
    ContentRef, Database, DbConfig, EmbeddingModelInfo, NewAgent, NewArchival, NewVector,
};
use rand::{Rng, SeedableRng};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn model() -> Arc<FastEmbedder> {
    let cache = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache");
    Arc::new(
        FastEmbedder::load(&ModelPaths::in_cache(&cache), Duration::from_secs(300))
            .await
            .expect("run `cargo xtask setup`"),
    )
}

fn sentence(i: usize) -> String {
    const W: &[&str] = &[
        "river", "budget", "kitten", "server", "garden", "concert", "invoice", "mountain",
        "recipe", "deploy", "teacher", "harbor", "window", "battery", "novel", "storm",
    ];
    let mut s = format!("note {i}:");
    for k in 0..12 {
        s.push(' ');
        s.push_str(W[(i * 7 + k * 13 + k * k) % W.len()]);
    }
    s
}

fn pct(label: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let at = |p: f64| xs[((xs.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "PCT {label}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms (n = {})",
        at(0.5).as_secs_f64() * 1e3,
        at(0.95).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        xs.len()
    );
}

fn throughput_and_latency(_c: &mut Criterion) {
    let rt = rt();
    rt.block_on(async {
        let m = model().await;
        let texts: Vec<String> = (0..512).map(sentence).collect();
        // Raw model.
        m.embed(&texts[..32]).await.unwrap();
        let t = Instant::now();
        for chunk in texts.chunks(32) {
            m.embed(chunk).await.unwrap();
        }
        let raw = texts.len() as f64 / t.elapsed().as_secs_f64();
        println!("PCT raw fastembed: {raw:.0} sentences/s (batch 32)");

        // Pipeline: write, then wait until every vector is stored and indexed.
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("b.db").display());
        let db = ConstellationDb::connect(
            DbConfig::new(url),
            Some(m.clone() as Arc<dyn Embedder>),
            EmbedConfig::default(),
        )
        .await
        .unwrap();
        let agent = db.db().create_agent(NewAgent::named("a")).await.unwrap().id;
        let t = Instant::now();
        db.insert_archival_many(
            agent,
            texts.iter().map(|s| NewArchival::text(s.clone())).collect(),
        )
        .await
        .unwrap();
        assert!(db.wait_idle(Duration::from_secs(600)).await.unwrap());
        let piped = texts.len() as f64 / t.elapsed().as_secs_f64();
        println!(
            "PCT pipeline: {piped:.0} sentences/s ({:.0}% of raw)",
            piped / raw * 100.0
        );

        // Foreground write latency: idle, then with a backlog being embedded.
        let mut idle = Vec::new();
        for i in 0..200 {
            let t = Instant::now();
            db.insert_archival(agent, NewArchival::text(format!("idle write {i}")))
                .await
                .unwrap();
            idle.push(t.elapsed());
        }
        assert!(db.wait_idle(Duration::from_secs(600)).await.unwrap());
        pct("archival write, no backlog", idle);
        let vector = SearchOptions::mode(SearchMode::Vector).with_limit(10);
        let mut searches = Vec::new();
        for i in 0..50 {
            let t = Instant::now();
            db.search(&sentence(i + 20_000), &vector).await.unwrap();
            searches.push(t.elapsed());
        }
        pct("vector search, no backlog", searches);
        db.insert_archival_many(
            agent,
            (0..2000)
                .map(|i| NewArchival::text(sentence(i + 10_000)))
                .collect(),
        )
        .await
        .unwrap();
        let mut busy = Vec::new();
        for i in 0..200 {
            let t = Instant::now();
            db.insert_archival(agent, NewArchival::text(format!("busy write {i}")))
                .await
                .unwrap();
            busy.push(t.elapsed());
        }
        pct("archival write, embedding backlog", busy);
        // Searching while the pipeline embeds the backlog: the query must not wait for a batch.
        let mut searches = Vec::new();
        for i in 0..50 {
            let t = Instant::now();
            db.search(&sentence(i + 30_000), &vector).await.unwrap();
            searches.push(t.elapsed());
        }
        pct("vector search, embedding backlog", searches);
        db.shutdown(Duration::from_millis(100)).await;
    });
}

/// The texts a search corpus is made of.
#[derive(Clone, Copy)]
enum Corpus {
    /// `sentence`: 12 words of 16, so every query word is in most passages (full text's worst
    /// case: nothing to skip).
    Repetitive,
    /// 387-byte English-like passages and two-word queries of middling words
    /// (`pattern_db::testkit::english`, the storage goals' workload).
    English,
}

impl Corpus {
    fn text(self, i: usize) -> String {
        match self {
            Corpus::Repetitive => sentence(i),
            Corpus::English => english(i as u64, 387),
        }
    }
}

/// A database (a SQLite file, or a fresh PostgreSQL database when `postgres`) with `n` passages
/// of `texts` and random unit vectors registered as the real model's.
async fn corpus(
    m: &Arc<FastEmbedder>,
    n: usize,
    postgres: bool,
    texts: Corpus,
) -> (TestDb, ConstellationDb) {
    let tdb = if postgres {
        TestDb::postgres().await.unwrap()
    } else {
        TestDb::sqlite().unwrap()
    };
    let raw = Database::open(tdb.config()).await.unwrap();
    raw.register_embedding_model(EmbeddingModelInfo {
        name: m.name().to_owned(),
        dimension: 384,
        file_hash: m.model_hash().to_owned(),
    })
    .await
    .unwrap();
    let agent = raw.create_agent(NewAgent::named("a")).await.unwrap().id;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for start in (0..n).step_by(5000) {
        let texts: Vec<String> = (start..(start + 5000).min(n))
            .map(|i| texts.text(i))
            .collect();
        let entries = raw
            .insert_archival_many(
                agent,
                texts.iter().map(|t| NewArchival::text(t.clone())).collect(),
            )
            .await
            .unwrap();
        let vectors = entries
            .iter()
            .zip(&texts)
            .map(|(e, t)| NewVector {
                content: ContentRef::archival(e.id),
                text_hash: text_hash(t),
                vector: (0..384).map(|_| rng.random_range(-1.0f32..1.0)).collect(),
            })
            .collect();
        raw.store_embeddings(vectors).await.unwrap();
    }
    raw.close().await;
    let db = ConstellationDb::connect(
        tdb.config(),
        Some(m.clone() as Arc<dyn Embedder>),
        EmbedConfig::default(),
    )
    .await
    .unwrap();
    (tdb, db)
}

fn search(c: &mut Criterion) {
    let rt = rt();
    let m = rt.block_on(model());
    let scales: Vec<usize> = std::env::var("DB_V2_BENCH_SCALES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let repetitive: Vec<String> = [
        "budget for the river garden",
        "kitten near the window",
        "deploy server battery",
    ]
    .map(String::from)
    .to_vec();
    let english_queries: Vec<String> = (0..64).map(english_query).collect();
    let postgres = std::env::var_os("PATTERN_TEST_PG_URL").is_some();
    let runs = scales
        .iter()
        .map(|&n| (n, false))
        .chain(scales.iter().filter(|_| postgres).map(|&n| (n, true)));
    let corpora = [
        (Corpus::Repetitive, "", &repetitive),
        (Corpus::English, "en_", &english_queries),
    ];
    for (n, on_pg) in runs {
        for &(texts, tag, queries) in &corpora {
            let (tdb, db) = rt.block_on(corpus(&m, n, on_pg, texts));
            let name = if on_pg {
                format!("search_pg_{tag}{n}")
            } else {
                format!("search_{tag}{n}")
            };
            let mut group = c.benchmark_group(name.clone());
            group.sample_size(20);
            for mode in [SearchMode::Fts, SearchMode::Vector, SearchMode::Hybrid] {
                let opts = SearchOptions::mode(mode).with_limit(10);
                let mut samples = Vec::new();
                for i in 0..200 {
                    let t = Instant::now();
                    rt.block_on(db.search(&queries[i % queries.len()], &opts))
                        .unwrap();
                    samples.push(t.elapsed());
                }
                let engine = if on_pg { " on PostgreSQL" } else { "" };
                let words = if tag.is_empty() { "" } else { ", English-like" };
                pct(&format!("search {mode:?} at {n}{engine}{words}"), samples);
                let mut i = 0;
                group.bench_function(format!("{mode:?}"), |b| {
                    b.iter(|| {
                        i += 1;
                        rt.block_on(db.search(&queries[i % queries.len()], &opts))
                            .unwrap()
                    })
                });
            }
            group.finish();
            rt.block_on(db.shutdown(Duration::from_millis(100)));
            rt.block_on(tdb.cleanup()).unwrap();
        }
    }
}

criterion_group!(benches, throughput_and_latency, search);
criterion_main!(benches);
