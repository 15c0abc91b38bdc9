//! Turn hand-over in a meeting run by agents (`pattern_core::meeting`), with a model that
//! answers instantly: from the speaker's batch completing to the next speaker's batch beginning
//! (the driver storing the speech, the protocol handing the turn on, the next trigger built and
//! committed). Meetings of 2, 5 and 20 agents, two rounds each, on SQLite and PostgreSQL (a
//! private server from the testkit). Criterion times a whole meeting; the hand-over p50/p95 of
//! each shape are printed from the driver's progress events. Also a sync session two agents
//! hold by themselves (decision 0020): twenty messages, each stored with the recipient's trigger,
//! answered by the recipient's run, whose completion sends the reply; the per-message time is
//! printed. Timings are reported, never asserted; figures go to docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use memory_v2::DbMemoryStore;
use pattern_core::meeting::{MeetingDriver, MeetingPlan, MeetingProgress, Policy};
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{AgentRuntime, DatabaseAgent, ResponseEvent, RuntimeConfig};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Backend, NewAgent};
use pattern_protocol::Protocol;

fn quick() -> bool {
    std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| v == "1")
}

struct Party {
    _tdb: TestDb,
    protocol: Protocol,
    agents: Vec<Arc<DatabaseAgent>>,
    ids: Vec<AgentId>,
}

async fn party(backend: Backend, n: usize) -> Party {
    let tdb = TestDb::fresh(backend).await.unwrap();
    let db = tdb.open().await.unwrap();
    let org = db.create_organization("bench", "Bench").await.unwrap();
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let tools = Arc::new(pattern_core::tool::meeting::registry().unwrap());
    let mut agents = Vec::new();
    let mut ids = Vec::new();
    for i in 0..n {
        let row = db
            .create_agent(NewAgent::named(format!("agent-{i}")).in_organization(org.id))
            .await
            .unwrap();
        ids.push(row.id);
        let model = ScriptedProvider::new([]).with_fallback(Turn::text("agreed"));
        let config = RuntimeConfig::new("You are in a meeting.", 100_000);
        let runtime =
            AgentRuntime::builder(db.clone(), row, memory.clone(), Arc::new(model), config)
                .tools(tools.clone())
                .build()
                .unwrap();
        agents.push(DatabaseAgent::new(runtime));
    }
    let protocol = Protocol::new(db).await.unwrap();
    Party {
        _tdb: tdb,
        protocol,
        agents,
        ids,
    }
}

/// Runs one two-round meeting; returns the hand-overs (batch completed -> next batch begun).
async fn meeting(p: &Party) -> Vec<Duration> {
    let driver = MeetingDriver::new(p.protocol.clone(), p.agents.clone());
    let plan = MeetingPlan {
        topic: "the quarterly plan".into(),
        rounds: 2,
        end_phrase: None,
        policy: Policy::RoundRobin,
        agents: p.ids.clone(),
    };
    let id = driver.create(&plan, None).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let watcher = tokio::spawn(async move {
        let mut handovers = Vec::new();
        let mut completed: Option<Instant> = None;
        while let Some(progress) = rx.recv().await {
            if let MeetingProgress::Output { event, .. } = progress {
                match event {
                    ResponseEvent::BatchCompleted { .. } => completed = Some(Instant::now()),
                    ResponseEvent::Received { .. } => {
                        if let Some(done) = completed.take() {
                            handovers.push(done.elapsed());
                        }
                    }
                    _ => {}
                }
            }
        }
        handovers
    });
    driver.run(id, tx).await.unwrap();
    watcher.await.unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn handover(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sizes: &[usize] = if quick() { &[2] } else { &[2, 5, 20] };
    let backends: &[Backend] = if quick() {
        &[Backend::Sqlite]
    } else {
        &[Backend::Sqlite, Backend::Postgres]
    };
    let mut group = c.benchmark_group("meeting_two_rounds");
    group.sample_size(10);
    for backend in backends {
        for &n in sizes {
            let p = rt.block_on(party(*backend, n));
            // The hand-over distribution over several meetings of this shape.
            let mut all = Vec::new();
            for _ in 0..if quick() { 2 } else { 5 } {
                all.extend(rt.block_on(meeting(&p)));
            }
            all.sort();
            eprintln!(
                "meeting hand-over, {backend:?}, {n} agents: p50 {:.1} ms, p95 {:.1} ms ({} hand-overs)",
                percentile(&all, 0.5).as_secs_f64() * 1e3,
                percentile(&all, 0.95).as_secs_f64() * 1e3,
                all.len()
            );
            group.bench_function(format!("{backend:?}/{n}_agents"), |b| {
                b.iter(|| rt.block_on(meeting(&p)));
            });
        }
    }
    group.finish();
}

/// One sync session of `messages` messages between agents 0 and 1 of `p`, served by a queue
/// processor; returns when the session ended and its last trigger was answered.
async fn session(p: &Party, messages: u64) {
    let (session, _) = p.agents[0]
        .runtime_arc()
        .open_session(
            "agent-1",
            pattern_db::SessionType::Sync,
            Some(messages),
            Some("let us plan"),
        )
        .await
        .unwrap();
    let db = p.protocol.db();
    loop {
        let s = pattern_protocol::store::Store::new(db)
            .session(session.id)
            .await
            .unwrap();
        let idle = !s.is_live()
            && db.pending_queue(p.ids[0]).await.unwrap().is_empty()
            && db.pending_queue(p.ids[1]).await.unwrap().is_empty()
            && !p.agents[0].is_running()
            && !p.agents[1].is_running();
        if idle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn session_exchange(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backends: &[Backend] = if quick() {
        &[Backend::Sqlite]
    } else {
        &[Backend::Sqlite, Backend::Postgres]
    };
    const MESSAGES: u64 = 20;
    let mut group = c.benchmark_group("session_sync_20_messages");
    group.sample_size(10);
    for backend in backends {
        let p = rt.block_on(party(*backend, 2));
        let processor = pattern_core::QueueProcessor::new(
            p.protocol.db().clone(),
            Arc::new(tokio::sync::Notify::new()),
            Duration::from_millis(5),
        );
        rt.block_on(async {
            for agent in &p.agents {
                processor.register(agent.clone()).await;
            }
        });
        let task = {
            let _inside = rt.enter();
            processor.clone().spawn()
        };
        let start = Instant::now();
        let runs = if quick() { 2 } else { 5 };
        for _ in 0..runs {
            rt.block_on(session(&p, MESSAGES));
        }
        eprintln!(
            "sync session, {backend:?}: {:.1} ms per message (stored, delivered, answered, replied; {} sessions of {MESSAGES})",
            start.elapsed().as_secs_f64() * 1e3 / (runs as f64 * MESSAGES as f64),
            runs
        );
        group.bench_function(format!("{backend:?}"), |b| {
            b.iter(|| rt.block_on(session(&p, MESSAGES)));
        });
        processor.stop();
        rt.block_on(task).unwrap();
    }
    group.finish();
}

criterion_group!(benches, handover, session_exchange);
criterion_main!(benches);
