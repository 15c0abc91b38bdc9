//! Criterion benchmarks of `pattern_protocol`:
//!
//! - `messages/async_pairs_{1,10}` (SQLite and PostgreSQL): messages per second between pairs of
//!   agents in async sessions, every pair sending at once (each send is a durable commit);
//! - `handover/pg_{1,100}_meetings` (PostgreSQL): turn hand-over latency, from the speaker's
//!   `speak` call to the next speaker's `wait_for_meeting_turn` returning in another protocol
//!   handle (its own connections and listener, so only LISTEN/NOTIFY can wake it), with 1 and
//!   with 100 meetings handing over at the same moment (mean latency per hand-over);
//! - `unread/1M` (SQLite and PostgreSQL): `unread` (100 rows) and `unread_count` of one agent,
//!   and the `unread_per_agent` view over 100 agents, with 1,000,000 messages stored (one-off
//!   fixture loaded by multi-row inserts; 100k with `PATTERN_BENCH_QUICK=1` or in test mode).
//!
//! This file must never assert timings: it measures and prints.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use pattern_db::testkit::{TestDb, insert_bulk_protocol_messages};
use pattern_db::{Backend, Database};
use pattern_protocol::{AgentId, MeetingId, NewAgent, NewProtocolMessage, Protocol, SessionType};
use serde_json::json;
use tokio::runtime::Runtime;

fn quick() -> bool {
    let env_quick = std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let args: Vec<String> = std::env::args().collect();
    let test_mode = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test");
    env_quick || test_mode
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn label(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    }
}

fn say(n: usize) -> NewProtocolMessage {
    NewProtocolMessage::new("user_defined", json!({ "text": "status update", "n": n }))
}

async fn agents(p: &Protocol, prefix: &str, n: usize) -> Vec<AgentId> {
    let org = match p.organization("bench").await {
        Ok(org) => org,
        Err(_) => p.create_organization("bench", "Bench").await.unwrap(),
    };
    let mut out = Vec::new();
    for k in 0..n {
        let agent = p
            .create_agent(NewAgent {
                external_id: Some(format!("{prefix}-{k:04}")),
                ..NewAgent::named(format!("{prefix} {k}")).in_organization(org.id)
            })
            .await
            .unwrap();
        out.push(agent.id);
    }
    out
}

fn messages(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("messages");
    group.sample_size(20);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let (tdb, p) = rt.block_on(async {
            let tdb = TestDb::fresh(backend).await.unwrap();
            let p = Protocol::new(tdb.open().await.unwrap()).await.unwrap();
            (tdb, p)
        });
        for pairs in [1usize, 10] {
            let sessions = rt.block_on(async {
                let ids = agents(&p, &format!("pair{pairs}"), pairs * 2).await;
                let mut sessions = Vec::new();
                for k in 0..pairs {
                    let (a, b) = (ids[2 * k], ids[2 * k + 1]);
                    let s = p.open_session(a, b, SessionType::Async).await.unwrap();
                    sessions.push((s.id, a));
                }
                sessions
            });
            group.throughput(Throughput::Elements(pairs as u64));
            group.bench_function(format!("{}/async_pairs_{pairs}", label(backend)), |bench| {
                bench.to_async(&rt).iter(|| async {
                    let sends = sessions.iter().enumerate().map(|(n, (s, a))| {
                        let p = p.clone();
                        let (s, a) = (*s, *a);
                        async move { p.send(s, a, say(n)).await.unwrap() }
                    });
                    futures::future::join_all(sends).await
                });
            });
        }
        rt.block_on(async {
            p.db().clone().close().await;
            tdb.cleanup().await.unwrap();
        });
    }
    group.finish();
}

/// Started two-agent meetings; returns (meeting, first speaker, second speaker).
async fn meetings(p: &Protocol, n: usize) -> Vec<(MeetingId, AgentId, AgentId)> {
    let ids = agents(p, &format!("meet{n}"), 2 * n).await;
    let mut out = Vec::new();
    for k in 0..n {
        let (a, b) = (ids[2 * k], ids[2 * k + 1]);
        let m = p.create_meeting(a, None).await.unwrap().meeting.id;
        p.join_meeting(m, b).await.unwrap();
        p.start_meeting(m, a).await.unwrap();
        out.push((m, a, b));
    }
    out
}

/// One hand-over in each meeting at once; returns the mean latency.
async fn hand_over(
    speaker_side: &Protocol,
    waiter_side: &Protocol,
    meetings: &[(MeetingId, AgentId, AgentId)],
) -> Duration {
    let mut plan = Vec::new();
    for (m, a, b) in meetings {
        let now = speaker_side.meeting(*m).await.unwrap().speaker.unwrap();
        let next = if now == *a { *b } else { *a };
        plan.push((*m, now, next));
    }
    let waiters: Vec<_> = plan
        .iter()
        .map(|(m, _, next)| {
            let w = waiter_side.clone();
            let (m, next) = (*m, *next);
            tokio::spawn(async move {
                assert!(
                    w.wait_for_meeting_turn(m, next, Duration::from_secs(30))
                        .await
                        .unwrap()
                );
                Instant::now()
            })
        })
        .collect();
    // Let every waiter read the meeting and go to sleep first.
    tokio::time::sleep(Duration::from_millis(20 + meetings.len() as u64)).await;
    let start = Instant::now();
    let speaks = plan.iter().map(|(m, now, _)| {
        let p = speaker_side.clone();
        let (m, now) = (*m, *now);
        async move { p.speak(m, now, say(0)).await.unwrap() }
    });
    futures::future::join_all(speaks).await;
    let mut total = Duration::ZERO;
    for w in waiters {
        total += w.await.unwrap() - start;
    }
    total / u32::try_from(meetings.len()).unwrap()
}

fn handover(c: &mut Criterion) {
    let rt = runtime();
    let (tdb, speaker_side, waiter_side) = rt.block_on(async {
        let tdb = TestDb::fresh(Backend::Postgres).await.unwrap();
        let a = Protocol::new(tdb.open().await.unwrap()).await.unwrap();
        let b = Protocol::new(tdb.open().await.unwrap()).await.unwrap();
        (tdb, a, b)
    });
    let mut group = c.benchmark_group("handover");
    group.sample_size(20);
    group.sampling_mode(SamplingMode::Flat);
    for n in [1usize, 100] {
        let ms = rt.block_on(meetings(&speaker_side, n));
        group.bench_function(format!("pg_{n}_meetings"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += hand_over(&speaker_side, &waiter_side, &ms).await;
                    }
                    total
                })
            });
        });
    }
    group.finish();
    rt.block_on(async {
        speaker_side.db().clone().close().await;
        waiter_side.db().clone().close().await;
        tdb.cleanup().await.unwrap();
    });
}

fn unread(c: &mut Criterion) {
    let rt = runtime();
    let total: usize = if quick() { 100_000 } else { 1_000_000 };
    const AGENTS: usize = 100;
    let mut group = c.benchmark_group("unread");
    group.sample_size(30);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let (tdb, p, target) = rt.block_on(async {
            let tdb = TestDb::fresh(backend).await.unwrap();
            let db: Database = tdb.open().await.unwrap();
            let p = Protocol::new(db.clone()).await.unwrap();
            let ids = agents(&p, "inbox", AGENTS).await;
            let start = Instant::now();
            let per_agent = total / AGENTS;
            for k in 0..AGENTS {
                let (to, from) = (ids[k], ids[(k + 1) % AGENTS]);
                let s = p.open_session(from, to, SessionType::Async).await.unwrap();
                // One message in a hundred stays unread: 100 per agent with 1M stored.
                insert_bulk_protocol_messages(&db, s.id, from, to, per_agent, 100)
                    .await
                    .unwrap();
            }
            println!(
                "unread/{}: stored {total} messages in {:.1?}",
                label(backend),
                start.elapsed()
            );
            (tdb, p, ids[0])
        });
        let name = if quick() { "100k" } else { "1M" };
        group.bench_function(format!("{}/{name}/unread_100", label(backend)), |bench| {
            bench.to_async(&rt).iter(|| async {
                assert_eq!(p.unread(target).await.unwrap().len(), total / AGENTS / 100)
            });
        });
        group.bench_function(format!("{}/{name}/unread_count", label(backend)), |bench| {
            bench
                .to_async(&rt)
                .iter(|| async { p.unread_count(target).await.unwrap() });
        });
        group.bench_function(
            format!("{}/{name}/unread_per_agent", label(backend)),
            |bench| {
                bench
                    .to_async(&rt)
                    .iter(|| async { p.unread_per_agent().await.unwrap().len() });
            },
        );
        rt.block_on(async {
            p.db().clone().close().await;
            tdb.cleanup().await.unwrap();
        });
    }
    group.finish();
}

criterion_group!(benches, messages, handover, unread);
criterion_main!(benches);
