//! Framework overhead per turn: everything outside the model (trigger commit, context build,
//! tool dispatch, step commits, completion) with a model that answers instantly, for agents with
//! 1k and 100k stored messages on SQLite. Two turn shapes: a plain answer (3 commits), and a
//! memory tool call followed by an answer (4 commits, 2 context builds). Timings are reported,
//! never asserted; figures go to docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use memory_v2::{BlockType, DbMemoryStore, MemoryEditor, NewMemoryBlock};
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{
    Agent, AgentRuntime, DatabaseAgent, IncomingMessage, ResponseEvent, RuntimeConfig,
};
use pattern_db::testkit::TestDb;
use pattern_db::{ContentBlock, LegacyMessage, MessageStore, NewAgent, Role};
use serde_json::json;

fn quick() -> bool {
    std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// `messages` of history as user/assistant pairs, imported in chunks.
async fn history(store: &MessageStore, messages: usize) {
    let mut left = messages / 2;
    while left > 0 {
        let n = left.min(10_000);
        let mut chunk = Vec::with_capacity(n * 2);
        for i in 0..n {
            for (role, text) in [
                (Role::User, format!("question {i} about the garden?")),
                (
                    Role::Assistant,
                    format!("answer {i}: tomatoes, basil and beans."),
                ),
            ] {
                chunk.push(LegacyMessage {
                    role,
                    content: vec![ContentBlock::text(text)],
                    created_at: None,
                    origin: None,
                });
            }
        }
        store.import_legacy(chunk).await.unwrap();
        left -= n;
    }
}

struct Setup {
    _tdb: TestDb,
    agent: Arc<DatabaseAgent>,
    provider: ScriptedProvider,
}

async fn setup(messages: usize) -> Setup {
    let tdb = TestDb::sqlite().unwrap();
    let db = tdb.open().await.unwrap();
    let row = db.create_agent(NewAgent::named("bench")).await.unwrap();
    let started = Instant::now();
    history(&db.messages(row.id), messages).await;
    eprintln!(
        "built {messages} messages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    memory
        .create_block(
            row.id,
            NewMemoryBlock {
                label: "notes".into(),
                description: "notes".into(),
                value: String::new(),
                char_limit: 1_000_000,
                block_type: BlockType::Core,
            },
        )
        .await
        .unwrap();
    let provider = ScriptedProvider::new(vec![]);
    let mut config = RuntimeConfig::new("You are a benchmark agent.", 128_000);
    config.context.max_batches = 50;
    let runtime = AgentRuntime::builder(db, row, memory, Arc::new(provider.clone()), config)
        .build()
        .unwrap();
    Setup {
        _tdb: tdb,
        agent: DatabaseAgent::new(runtime),
        provider,
    }
}

async fn turn(agent: &Arc<DatabaseAgent>) {
    let events: Vec<_> = agent
        .clone()
        .process(IncomingMessage::user("how are the tomatoes?"))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(events.last(), Some(ResponseEvent::Done { .. })),
        "{:?}",
        events.last()
    );
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sizes: &[(&str, usize)] = if quick() {
        &[("1k", 1_000), ("10k", 10_000)]
    } else {
        &[("1k", 1_000), ("100k", 100_000)]
    };
    let mut group = c.benchmark_group("turn");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(6))
        .warm_up_time(Duration::from_secs(1));
    for (name, messages) in sizes {
        let s = rt.block_on(setup(*messages));
        group.bench_function(format!("plain/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    for _ in 0..iters {
                        s.provider.push(Turn::text("They are ripening."));
                    }
                    let start = Instant::now();
                    for _ in 0..iters {
                        turn(&s.agent).await;
                    }
                    start.elapsed()
                })
            });
        });
        group.bench_function(format!("tool_call/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    for i in 0..iters {
                        s.provider.push(Turn::call(
                            &format!("c{i}"),
                            "memory_append",
                            json!({"label": "notes", "content": "tomatoes ripening"}),
                        ));
                        s.provider.push(Turn::text("Noted."));
                    }
                    let start = Instant::now();
                    for _ in 0..iters {
                        turn(&s.agent).await;
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
