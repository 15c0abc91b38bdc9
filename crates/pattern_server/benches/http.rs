//! What the HTTP layer adds, on loopback over SQLite, for an agent with 10k stored messages (100k
//! with the full run): an authenticated read (`GET /v1/agents/{id}/batches?limit=20`: key hash
//! lookup, organization-scoped agent lookup, one page of batches, JSON), and a whole turn through
//! `POST /v1/agents/{id}/messages` (message committed first, a model that answers instantly, the
//! final response as JSON) against the same turn through `Agent::process` directly. Timings are
//! reported, never asserted; figures go to docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use pattern::core::provider::ModelProvider;
use pattern::core::testkit::{ScriptedProvider, Turn};
use pattern::core::{Agent, IncomingMessage, RuntimeConfig};
use pattern::db::LegacyMessage;
use pattern::search::ConstellationDb;
use pattern::{AgentId, ContentBlock, Database, Pattern, Role};
use pattern_db::testkit::TestDb;
use pattern_server::{AppState, ServerConfig};
use serde_json::json;

fn quick() -> bool {
    std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| v == "1")
}

struct Setup {
    _tdb: TestDb,
    base: String,
    key: String,
    agent: String,
    state: AppState,
    http: reqwest::Client,
}

async fn setup(messages: usize) -> Setup {
    let tdb = TestDb::sqlite().unwrap();
    let db: Database = tdb.open().await.unwrap();
    let pattern = Pattern::wire(ConstellationDb::fts_only(db.clone()))
        .await
        .unwrap();
    let org = pattern
        .protocol()
        .create_organization("bench", "Bench")
        .await
        .unwrap();
    let key = db.create_api_key(org.id, "bench").await.unwrap().secret;
    let provider = Arc::new(ScriptedProvider::new(vec![]).with_fallback(Turn::text("ok")));
    let model: Arc<dyn ModelProvider> = provider;
    let state = AppState::new(pattern, model, ServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(pattern_server::serve(
        listener,
        state.clone(),
        std::future::pending(),
    ));
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{base}/v1/agents"))
        .bearer_auth(&key)
        .json(&json!({"name": "bench"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let agent = created["id"].as_str().unwrap().to_owned();
    let id = AgentId(agent.parse().unwrap());
    let store = db.messages(id);
    let mut left = messages / 2;
    while left > 0 {
        let n = left.min(10_000);
        let mut chunk = Vec::with_capacity(n * 2);
        for i in 0..n {
            for (role, text) in [
                (Role::User, format!("question {i} about the garden?")),
                (Role::Assistant, format!("answer {i}: tomatoes and basil.")),
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
    Setup {
        _tdb: tdb,
        base,
        key,
        agent,
        state,
        http,
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sizes: &[usize] = if quick() {
        &[10_000]
    } else {
        &[10_000, 100_000]
    };
    let mut group = c.benchmark_group("http");
    group.sample_size(if quick() { 20 } else { 50 });
    group.measurement_time(Duration::from_secs(if quick() { 5 } else { 15 }));
    for &messages in sizes {
        let s = rt.block_on(setup(messages));
        let batches = format!("{}/v1/agents/{}/batches?limit=20", s.base, s.agent);
        group.bench_function(format!("get_batches/{messages}"), |b| {
            b.to_async(&rt).iter(|| async {
                let r = s
                    .http
                    .get(&batches)
                    .bearer_auth(&s.key)
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                r.bytes().await.unwrap();
            })
        });
        let messages_url = format!("{}/v1/agents/{}/messages", s.base, s.agent);
        group.bench_function(format!("turn_over_http/{messages}"), |b| {
            b.to_async(&rt).iter(|| async {
                let r = s
                    .http
                    .post(&messages_url)
                    .bearer_auth(&s.key)
                    .json(&json!({"content": "what grows well?"}))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                r.bytes().await.unwrap();
            })
        });
        // The same turn without HTTP, for the difference.
        let direct = rt.block_on(async {
            let row = s
                .state
                .pattern()
                .db()
                .agent(AgentId(s.agent.parse().unwrap()))
                .await
                .unwrap();
            let provider = Arc::new(ScriptedProvider::new(vec![]).with_fallback(Turn::text("ok")));
            let model: Arc<dyn ModelProvider> = provider;
            let config = RuntimeConfig::for_agent(&row, model.model().context_window);
            s.state.pattern().agent(row, model, config).unwrap()
        });
        group.bench_function(format!("turn_direct/{messages}"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let agent = direct.clone();
                async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let events: Vec<_> = agent
                            .clone()
                            .process(IncomingMessage::user("what grows well?"))
                            .await
                            .unwrap()
                            .collect()
                            .await;
                        assert!(!events.is_empty());
                    }
                    start.elapsed()
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
