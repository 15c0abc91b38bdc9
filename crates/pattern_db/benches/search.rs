//! Criterion benchmarks of `pattern_db` search storage, each on SQLite (tantivy index beside the
//! file) and on PostgreSQL (tsvector + GIN):
//!
//! - `archival_insert/{engine}/batch_100`: one `insert_archival_many` call of 100 passages (with
//!   their search changes; throughput in passages/s), and `single`: one `insert_archival`;
//! - `fts/{engine}/{10k,100k}`: one `search_text` call (limit 10, a two-word query, cycling over a
//!   set) over that many archival passages; criterion's median is the p50. The time to load each
//!   corpus and, on SQLite, to build the tantivy index by the first search is printed;
//! - `fts_after_write/sqlite/{10k,100k}`: one `insert_archival` and then one `search_text`, the
//!   way an agent writes to memory and searches it: the search first applies that write to the
//!   tantivy index (a writer session: the directory opened, unused files collected, one commit,
//!   the reader reloaded). SQLite only (PostgreSQL's full text is in the write itself).
//!
//! `PATTERN_BENCH_QUICK=1` (and criterion's test mode) shrinks the corpora to 1k/10k. This file
//! must never assert timings: it measures and prints.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Database, NewAgent, NewArchival, TextSearch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;

fn quick() -> bool {
    let env_quick = std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let args: Vec<String> = std::env::args().collect();
    let test_mode = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test");
    env_quick || test_mode
}

fn corpus_sizes() -> Vec<(&'static str, usize)> {
    if quick() {
        vec![("1k", 1_000), ("10k", 10_000)]
    } else {
        vec![("10k", 10_000), ("100k", 100_000)]
    }
}

#[derive(Debug, Clone, Copy)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

struct Fixture {
    tdb: TestDb,
    db: Database,
    agent: AgentId,
}

impl Fixture {
    async fn open(engine: Engine) -> Self {
        let tdb = match engine {
            Engine::Sqlite => TestDb::sqlite().expect("temporary SQLite database"),
            Engine::Postgres => TestDb::postgres()
                .await
                .expect("temporary PostgreSQL database"),
        };
        let db = Database::open(tdb.config()).await.expect("open");
        let agent = db.create_agent(NewAgent::named("bench")).await.unwrap().id;
        Self { tdb, db, agent }
    }

    async fn close(self) {
        self.db.close().await;
        self.tdb.cleanup().await.expect("drop the bench database");
    }
}

/// A vocabulary of 5,000 pronounceable words; passages draw from it with a skew, so a few words
/// are common and most are rare, as in prose.
fn vocabulary() -> Vec<String> {
    let syllables = [
        "ka", "lo", "mi", "ner", "tu", "sa", "ve", "dor", "pi", "gan", "ri", "zo", "bel", "fu",
        "the", "wen", "qua", "sil", "ma", "ton",
    ];
    let mut rng = StdRng::seed_from_u64(7);
    (0..5000)
        .map(|_| {
            let n = rng.random_range(2..=4);
            (0..n)
                .map(|_| syllables[rng.random_range(0..syllables.len())])
                .collect()
        })
        .collect()
}

fn passage(rng: &mut StdRng, words: &[String]) -> String {
    let n = rng.random_range(12..40);
    (0..n)
        .map(|_| {
            let x: f64 = rng.random();
            words[((x * x) * words.len() as f64) as usize].as_str()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Two-word queries: pairs of words of middling frequency (ranks 500..2500).
fn queries(words: &[String]) -> Vec<String> {
    let mut qrng = StdRng::seed_from_u64(3);
    (0..64)
        .map(|_| {
            let a = &words[qrng.random_range(500..2500)];
            let b = &words[qrng.random_range(500..2500)];
            format!("{a} {b}")
        })
        .collect()
}

/// `size` passages into the fixture's agent, in calls of 1,000.
async fn load(fx: &Fixture, rng: &mut StdRng, words: &[String], size: usize) {
    let mut left = size;
    while left > 0 {
        let n = left.min(1000);
        let batch = (0..n)
            .map(|_| NewArchival::text(passage(rng, words)))
            .collect();
        fx.db.insert_archival_many(fx.agent, batch).await.unwrap();
        left -= n;
    }
}

fn inserts(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let words = vocabulary();
    let mut group = c.benchmark_group("archival_insert");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for engine in [Engine::Sqlite, Engine::Postgres] {
        let fx = rt.block_on(Fixture::open(engine));
        let mut rng = StdRng::seed_from_u64(1);
        let batches: Vec<Vec<NewArchival>> = (0..64)
            .map(|_| {
                (0..100)
                    .map(|_| NewArchival::text(passage(&mut rng, &words)))
                    .collect()
            })
            .collect();
        let next = AtomicUsize::new(0);
        group.throughput(Throughput::Elements(100));
        group.bench_function(BenchmarkId::new(engine.name(), "batch_100"), |b| {
            b.to_async(&rt).iter(|| {
                let batch = batches[next.fetch_add(1, Ordering::Relaxed) % batches.len()].clone();
                let db = fx.db.clone();
                async move { black_box(db.insert_archival_many(fx.agent, batch).await.unwrap()) }
            })
        });
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(engine.name(), "single"), |b| {
            b.to_async(&rt).iter(|| {
                let text = batches[0][next.fetch_add(1, Ordering::Relaxed) % 100].clone();
                let db = fx.db.clone();
                async move { black_box(db.insert_archival(fx.agent, text).await.unwrap()) }
            })
        });
        rt.block_on(fx.close());
    }
    group.finish();
}

fn fts(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let words = vocabulary();
    let mut group = c.benchmark_group("fts");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    let queries = queries(&words);
    for engine in [Engine::Sqlite, Engine::Postgres] {
        for (label, size) in corpus_sizes() {
            let fx = rt.block_on(Fixture::open(engine));
            let mut rng = StdRng::seed_from_u64(2);
            let started = Instant::now();
            rt.block_on(load(&fx, &mut rng, &words, size));
            let loaded = started.elapsed();
            let started = Instant::now();
            let opts = TextSearch::default();
            let first = rt.block_on(fx.db.search_text(&queries[0], &opts)).unwrap();
            assert!(!first.is_empty(), "the corpus holds the query words");
            eprintln!(
                "fts/{}/{label}: loaded {size} passages in {:.2} s ({:.0}/s); first search (builds \
                 the index on SQLite) {:.2} s",
                engine.name(),
                loaded.as_secs_f64(),
                size as f64 / loaded.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            let next = AtomicUsize::new(0);
            group.bench_function(BenchmarkId::new(engine.name(), label), |b| {
                b.to_async(&rt).iter(|| {
                    let q = &queries[next.fetch_add(1, Ordering::Relaxed) % queries.len()];
                    let db = fx.db.clone();
                    let opts = opts.clone();
                    async move { black_box(db.search_text(q, &opts).await.unwrap()) }
                })
            });
            rt.block_on(fx.close());
        }
    }
    group.finish();
}

fn fts_after_write(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let words = vocabulary();
    let mut group = c.benchmark_group("fts_after_write");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let queries = queries(&words);
    for (label, size) in corpus_sizes() {
        let fx = rt.block_on(Fixture::open(Engine::Sqlite));
        let mut rng = StdRng::seed_from_u64(2);
        rt.block_on(async {
            load(&fx, &mut rng, &words, size).await;
            // The index built before measuring.
            fx.db
                .search_text(&queries[0], &TextSearch::default())
                .await
                .unwrap();
        });
        let fresh: Vec<String> = (0..256).map(|_| passage(&mut rng, &words)).collect();
        let next = AtomicUsize::new(0);
        group.bench_function(BenchmarkId::new("sqlite", label), |b| {
            b.to_async(&rt).iter(|| {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let text = fresh[i % fresh.len()].clone();
                let q = &queries[i % queries.len()];
                let db = fx.db.clone();
                async move {
                    db.insert_archival(fx.agent, NewArchival::text(text))
                        .await
                        .unwrap();
                    black_box(db.search_text(q, &TextSearch::default()).await.unwrap())
                }
            })
        });
        rt.block_on(fx.close());
    }
    group.finish();
}

criterion_group!(search, inserts, fts, fts_after_write);
criterion_main!(search);
