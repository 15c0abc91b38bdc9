//! Benchmarks of context building: a full `ContextBuilder::build` (20 memory blocks, the latest
//! batches, validation) for agents with 1k, 100k and 1M stored messages, and the compression path
//! (a build that must truncate). Timings are reported, never asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use context_v2::{CompressionStrategy, ContextBuilder, ContextConfig, EstimateCounter};
use criterion::{Criterion, criterion_group, criterion_main};
use memory_v2::{BlockType, MemoryBlock, MemoryStore, Permission};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, ContentBlock, Database, LegacyMessage, MessageStore, NewAgent, Role};

struct Blocks(HashMap<AgentId, Vec<MemoryBlock>>);

#[async_trait]
impl MemoryStore for Blocks {
    async fn context_blocks(&self, agent: AgentId) -> memory_v2::Result<Vec<MemoryBlock>> {
        Ok(self.0.get(&agent).cloned().unwrap_or_default())
    }
}

fn twenty_blocks() -> Vec<MemoryBlock> {
    (0..20)
        .map(|i| MemoryBlock {
            label: format!("block_{i:02}"),
            description: format!("memory block number {i}"),
            value: format!("fact {i}: ").repeat(20),
            char_limit: 2000,
            block_type: BlockType::Core,
            permission: Permission::ReadWrite,
            version: 1,
            updated_at: Utc::now(),
        })
        .collect()
}

fn quick() -> bool {
    std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// `messages` of history as user/assistant pairs (complete batches), imported in chunks.
async fn history(store: &MessageStore, messages: usize) {
    let mut left = messages / 2;
    while left > 0 {
        let n = left.min(10_000);
        let mut chunk = Vec::with_capacity(n * 2);
        for i in 0..n {
            chunk.push(LegacyMessage {
                role: Role::User,
                content: vec![ContentBlock::text(format!(
                    "question {i} about the garden?"
                ))],
                created_at: None,
                origin: None,
            });
            chunk.push(LegacyMessage {
                role: Role::Assistant,
                content: vec![ContentBlock::text(format!(
                    "answer {i}: tomatoes, basil and beans."
                ))],
                created_at: None,
                origin: None,
            });
        }
        store.import_legacy(chunk).await.unwrap();
        left -= n;
    }
}

struct Setup {
    _tdb: TestDb,
    db: Database,
    store: MessageStore,
    memory: Blocks,
}

async fn setup(messages: usize) -> Setup {
    let tdb = TestDb::sqlite().unwrap();
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("bench")).await.unwrap();
    let store = db.messages(agent.id);
    let started = Instant::now();
    history(&store, messages).await;
    eprintln!(
        "built {messages} messages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let memory = Blocks(HashMap::from([(agent.id, twenty_blocks())]));
    Setup {
        _tdb: tdb,
        db,
        store,
        memory,
    }
}

fn build(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counter = EstimateCounter::default();
    let mut config = ContextConfig::for_window("You are a helpful agent.", 32_000);
    config.max_batches = 50;
    let sizes: &[(&str, usize)] = if quick() {
        &[("1k", 1_000), ("10k", 10_000)]
    } else {
        &[("1k", 1_000), ("100k", 100_000), ("1M", 1_000_000)]
    };
    let mut group = c.benchmark_group("build");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    let mut medians = Vec::new();
    for (name, messages) in sizes {
        let s = rt.block_on(setup(*messages));
        group.bench_function(*name, |b| {
            b.to_async(&rt).iter(|| async {
                ContextBuilder::new(&s.memory, &s.store, &config, &counter)
                    .build()
                    .await
                    .unwrap()
            })
        });
        // Side timing for the ratio: median of 200 warm builds.
        let mut times: Vec<Duration> = rt.block_on(async {
            let mut t = Vec::with_capacity(200);
            for _ in 0..200 {
                let started = Instant::now();
                ContextBuilder::new(&s.memory, &s.store, &config, &counter)
                    .build()
                    .await
                    .unwrap();
                t.push(started.elapsed());
            }
            t
        });
        times.sort();
        medians.push((*name, times[times.len() / 2]));
        rt.block_on(s.db.close());
    }
    group.finish();
    if let (Some(first), Some(last)) = (medians.first(), medians.last()) {
        println!(
            "build p50: {} ; {}/{} = {:.2}",
            medians
                .iter()
                .map(|(n, d)| format!("{n} {:.3} ms", d.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            last.0,
            first.0,
            last.1.as_secs_f64() / first.1.as_secs_f64()
        );
    }
}

fn compression(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counter = EstimateCounter::default();
    // 20 blocks take about 2k tokens; 400 messages of history about 5k: a 6k window must compress.
    let mut config = ContextConfig::for_window("You are a helpful agent.", 6_000);
    config.budgets.system = 3_000;
    config.compression = CompressionStrategy::Truncate;
    let mut group = c.benchmark_group("compress");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("truncate_200_batches", |b| {
        let (config, counter) = (&config, &counter);
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let s = setup(400).await;
                let started = Instant::now();
                let ctx = ContextBuilder::new(&s.memory, &s.store, config, counter)
                    .build()
                    .await
                    .unwrap();
                total += started.elapsed();
                assert!(ctx.compression.is_some());
                s.db.close().await;
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, build, compression);
criterion_main!(benches);
