//! Benches of the in-process vector index: search latency at 10k and 100k 384-dimension vectors
//! (synthetic random unit vectors: the scans' cost does not depend on where vectors come from),
//! the default search (sign-code scan above 20k entries, int8 ranking, exact re-rank) against
//! the int8 scan alone and a plain f32 scan. Before timing, it prints how many of the exact
//! top-10 hits the default search keeps on these structureless vectors (the worst case for the
//! sign scan; real embeddings are measured by `db_v2`'s `sign_scan_*` tests). Also hybrid's
//! per-query weights (`hybrid_weights`: the coverage of five full-text hits) on short turns and
//! on long passages. It must never touch a database or the model (those are in `pipeline.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use db_v2::{EntryMeta, IndexFilter, SignScan, VectorIndex, hybrid_weights};
use rand::{Rng, SeedableRng};

const DIM: usize = 384;

fn random_vec(rng: &mut impl Rng) -> Vec<f32> {
    (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn build(n: usize) -> VectorIndex<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut ix = VectorIndex::new(DIM);
    ix.reserve(n);
    for k in 0..n {
        let meta = EntryMeta {
            agent: None,
            kind: (k % 3) as u8,
            created_at_ms: k as i64,
        };
        ix.upsert(k as u32, meta, random_vec(&mut rng)).unwrap();
    }
    ix
}

fn search(c: &mut Criterion) {
    let mut group = c.benchmark_group("vector_index");
    group.sample_size(30);
    for n in [10_000usize, 100_000] {
        let ix = build(n);
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let queries: Vec<Vec<f32>> = (0..64).map(|_| random_vec(&mut rng)).collect();
        let filter = IndexFilter::default();
        let int8_only = ix.clone().with_sign_scan(SignScan {
            min_entries: usize::MAX,
            ..SignScan::default()
        });
        let kept: usize = queries
            .iter()
            .map(|q| {
                let exact = ix.search_exact(q, 10, &filter).unwrap();
                let fast = ix.search(q, 10, &filter).unwrap();
                fast.iter()
                    .filter(|h| exact.iter().any(|e| e.0 == h.0))
                    .count()
            })
            .sum();
        println!(
            "{n} random vectors: the default search kept {kept}/{} of the exact top-10 hits",
            queries.len() * 10
        );
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("default_top10", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                ix.search(&queries[i], 10, &filter).unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("int8_rerank_top10", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                int8_only.search(&queries[i], 10, &filter).unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("exact_f32_top10", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                ix.search_exact(&queries[i], 10, &filter).unwrap()
            })
        });
    }
    group.finish();
}

/// Hybrid's weights from five hits: short conversation turns, and long passages (2,000 words,
/// the size document ingestion makes) where the question's words are rare.
fn weights(c: &mut Criterion) {
    const WORDS: &[&str] = &[
        "river", "budget", "kitten", "server", "garden", "concert", "invoice", "mountain",
        "recipe", "deploy", "teacher", "harbor", "window", "battery", "novel", "storm", "the",
        "and", "painting", "groups",
    ];
    // Made-up words of 4-9 letters (about 700 distinct in a long passage), with the common
    // ones and a few of the question's stems among them.
    let text = |n: usize, seed: usize| -> String {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed as u64);
        (0..n)
            .map(|i| {
                if i % 3 == 0 {
                    WORDS[(i * 7 + seed * 13) % WORDS.len()].to_owned()
                } else {
                    let len = rng.random_range(4..10);
                    let pick = rng.random_range(0..700u32);
                    (0..len)
                        .map(|k| (b'a' + ((pick * 7 + k * 11) % 26) as u8) as char)
                        .collect()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let query = "When did Caroline paint the sunrise for her support group?";
    let mut group = c.benchmark_group("hybrid_weights");
    for (label, n) in [("turns_20_words", 20), ("passages_2000_words", 2000)] {
        let hits: Vec<String> = (0..5).map(|s| text(n, s)).collect();
        group.bench_function(label, |b| {
            b.iter(|| hybrid_weights(query, hits.iter().map(String::as_str)))
        });
    }
    group.finish();
}

criterion_group!(benches, search, weights);
criterion_main!(benches);
