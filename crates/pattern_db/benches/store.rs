//! Criterion benchmarks of the `pattern_db` message store, each on SQLite and on PostgreSQL:
//!
//! - `ack/begin_batch` against `ack/bare_insert`: the durable "received" acknowledgement against
//!   a bare one-row autocommit `INSERT` through sqlx on the same database (the ratio is printed);
//! - `throughput/acks_1_agent` and `throughput/acks_100_agents`: durable acknowledgements per
//!   second from one writer task and from 100 concurrent tasks, one agent each (group commit);
//!   `throughput/turns_100_agents`: time per turn (`begin_batch`, one answer by `append_step`,
//!   `complete_batch`) from 100 concurrent tasks, one agent each: groups that mix the bulk
//!   acknowledgements with writes that each run in their own savepoint;
//! - `append_step/10_messages`: one step of ten assistant messages appended to an open batch
//!   (a fresh batch every 20 steps; the cost of a step into a 2001-message batch is printed);
//! - `get_recent_20/{1k,100k,1M}`: `get_recent(20)` for an agent with that many messages of
//!   history (the largest/smallest ratio is printed);
//! - `get_recent_20/after_a_write/1k`: a turn's storage in its shortest form on a 1k history:
//!   `begin_batch`, `complete_batch`, then `get_recent(20)`, whose cached answer the writes made
//!   stale (so the read runs its statement with the revision it knows);
//! - `beyond_window_50/{1k,100k}`: `live_batches_before(oldest of the newest 20, 50)`, the read
//!   every context build that fills its window makes, for an agent whose history is archived but
//!   for its newest 40 batches (20 live ones are found beyond the window);
//! - `content_decode/{text_50,mixed_50}/{hand,derived}`: decoding the stored content of 50
//!   messages (one text block each; or text, tool call and tool result blocks) with
//!   `ContentBlock`'s hand-written `Deserialize` and with a copy of the derived one it replaced
//!   (no database).
//!
//! `PATTERN_BENCH_QUICK=1` (and criterion's test mode, `cargo test --benches`) shrinks the
//! histories and the side timings. Fixtures are built lazily, so a name filter skips the setup of
//! the benchmarks it leaves out. This file must never assert timings: it measures and prints, and
//! judging the numbers is for people (only the correctness of what is read is checked).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use pattern_db::testkit::TestDb;
use pattern_db::{
    BatchId, BeginBatch, ContentBlock, Database, LegacyMessage, MessageStore, NewAgent, NewMessage,
    Role,
};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::SqlitePool;
use tokio::runtime::Runtime;

mod support;

use support::quick;

// ---------------------------------------------------------------------------------------------
// settings

/// Text of every trigger and bare row: a short chat message.
const TRIGGER_TEXT: &str =
    "Hello! Could you look at the build log from this morning and tell me what failed?";
/// Text of every assistant message of a step.
const ASSISTANT_TEXT: &str = "The build failed in the integration tests: the connection pool ran out of \
    connections while the migration test held one open. Raising the pool size or closing the \
    connection after the migration fixes it; I suggest the second.";
/// Concurrent writers of `throughput/acks_100_agents`.
const AGENTS: usize = 100;
/// Steps appended to one batch before `append_step` opens a fresh one.
const STEPS_PER_BATCH: usize = 20;

/// Calls of each kind timed outside criterion for the printed ratios.
fn side_calls() -> usize {
    if quick() { 50 } else { 500 }
}

/// History sizes of `get_recent_20`, with their labels.
fn history_sizes() -> Vec<(&'static str, usize)> {
    if quick() {
        vec![("1k", 1_000), ("10k", 10_000)]
    } else {
        vec![("1k", 1_000), ("100k", 100_000), ("1M", 1_000_000)]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    const ALL: [Engine; 2] = [Engine::Sqlite, Engine::Postgres];

    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fixtures

/// A fresh database of one engine, opened with the default (fully durable) configuration.
struct Fixture {
    tdb: TestDb,
    db: Database,
}

impl Fixture {
    async fn open(engine: Engine) -> Self {
        let tdb = match engine {
            Engine::Sqlite => TestDb::sqlite().expect("temporary SQLite database"),
            Engine::Postgres => TestDb::postgres()
                .await
                .expect("temporary PostgreSQL database"),
        };
        let db = Database::open(tdb.config())
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", engine.name()));
        Self { tdb, db }
    }

    async fn agent(&self, name: &str) -> MessageStore {
        let agent = self
            .db
            .create_agent(NewAgent::named(name))
            .await
            .expect("create agent");
        self.db.messages(agent.id)
    }

    async fn close(self) {
        self.db.close().await;
        self.tdb
            .cleanup()
            .await
            .expect("drop the benchmark database");
    }
}

fn trigger() -> NewMessage {
    NewMessage::user(TRIGGER_TEXT)
}

async fn ack(store: &MessageStore) {
    black_box(
        store
            .begin_batch(trigger(), BeginBatch::default())
            .await
            .expect("begin_batch"),
    );
}

/// Takes one unit of work from a shared budget; false when it is spent.
fn take_one(budget: &AtomicU64) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

fn mean(total: Duration, n: usize) -> Duration {
    total / u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// 1. ack: begin_batch against a bare insert

/// A pool that bypasses `pattern_db`: one connection, one row per autocommit statement.
enum BarePool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

struct Bare {
    pool: BarePool,
    next_id: AtomicI64,
    agent_id: String,
    content: String,
}

impl Bare {
    async fn connect(engine: Engine, url: &str, agent_id: String) -> Self {
        let pool = match engine {
            Engine::Sqlite => {
                let pool = support::sqlite_bare_pool(url).await;
                BarePool::Sqlite(pool)
            }
            Engine::Postgres => {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .expect("connect");
                sqlx::query(
                    "CREATE TABLE bench_bare (id BIGINT PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL, \
                     content TEXT NOT NULL, created_at BIGINT NOT NULL)",
                )
                .execute(&pool)
                .await
                .expect("create bench_bare");
                BarePool::Postgres(pool)
            }
        };
        // The JSON that begin_batch stores for the same trigger.
        let content = format!(r#"[{{"type":"text","text":"{TRIGGER_TEXT}"}}]"#);
        Self {
            pool,
            next_id: AtomicI64::new(1),
            agent_id,
            content,
        }
    }

    async fn insert(&self) {
        const SQL: &str =
            "INSERT INTO bench_bare (id, agent_id, content, created_at) VALUES ($1, $2, $3, $4)";
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = chrono::Utc::now().timestamp_millis();
        let done = match &self.pool {
            BarePool::Sqlite(pool) => sqlx::query(SQL)
                .bind(id)
                .bind(self.agent_id.clone())
                .bind(self.content.clone())
                .bind(now)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
            BarePool::Postgres(pool) => sqlx::query(SQL)
                .bind(id)
                .bind(self.agent_id.clone())
                .bind(self.content.clone())
                .bind(now)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
        };
        assert_eq!(done.expect("bare insert"), 1);
    }

    async fn close(self) {
        match self.pool {
            BarePool::Sqlite(pool) => pool.close().await,
            BarePool::Postgres(pool) => pool.close().await,
        }
    }
}

struct AckFx {
    fx: Fixture,
    store: MessageStore,
    bare: Bare,
}

impl AckFx {
    async fn new(engine: Engine) -> Self {
        let fx = Fixture::open(engine).await;
        let store = fx.agent("ack").await;
        let bare = Bare::connect(engine, &fx.tdb.url, store.agent_id().to_string()).await;
        Self { fx, store, bare }
    }

    /// Mean latency of `n` begin_batch calls and of `n` bare inserts, interleaved in rounds of 50
    /// so that both see the same state of the machine.
    async fn side_timing(&self, n: usize) -> (Duration, Duration) {
        let (mut ours, mut bare) = (Duration::ZERO, Duration::ZERO);
        let mut done = 0;
        while done < n {
            let round = 50.min(n - done);
            let t = Instant::now();
            for _ in 0..round {
                ack(&self.store).await;
            }
            ours += t.elapsed();
            let t = Instant::now();
            for _ in 0..round {
                self.bare.insert().await;
            }
            bare += t.elapsed();
            done += round;
        }
        (mean(ours, n), mean(bare, n))
    }

    async fn close(self) {
        self.bare.close().await;
        self.fx.close().await;
    }
}

fn bench_ack(c: &mut Criterion, rt: &Runtime) {
    let mut group = c.benchmark_group("ack");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for engine in Engine::ALL {
        let mut state: Option<AckFx> = None;
        let (mut ran_ours, mut ran_bare) = (false, false);
        group.bench_function(BenchmarkId::new("begin_batch", engine.name()), |b| {
            let fx = &*state.get_or_insert_with(|| rt.block_on(AckFx::new(engine)));
            ran_ours = true;
            b.to_async(rt).iter(move || ack(&fx.store));
        });
        group.bench_function(BenchmarkId::new("bare_insert", engine.name()), |b| {
            let fx = &*state.get_or_insert_with(|| rt.block_on(AckFx::new(engine)));
            ran_bare = true;
            b.to_async(rt).iter(move || fx.bare.insert());
        });
        if let Some(fx) = state {
            if ran_ours && ran_bare {
                let n = side_calls();
                let (ours, bare) = rt.block_on(fx.side_timing(n));
                println!(
                    "ack/{}: begin_batch {:.3} ms, bare_insert {:.3} ms (means of {n} interleaved calls): \
                     begin_batch/bare = {:.2}",
                    engine.name(),
                    ms(ours),
                    ms(bare),
                    ours.as_secs_f64() / bare.as_secs_f64()
                );
            }
            rt.block_on(fx.close());
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// 2. throughput: acknowledgements per second, 1 writer against 100

struct ThroughputFx {
    fx: Fixture,
    stores: Vec<MessageStore>,
}

impl ThroughputFx {
    async fn new(engine: Engine) -> Self {
        let fx = Fixture::open(engine).await;
        let mut stores = Vec::with_capacity(AGENTS);
        for i in 0..AGENTS {
            stores.push(fx.agent(&format!("writer-{i:03}")).await);
        }
        Self { fx, stores }
    }
}

/// One turn's storage without a run: the trigger acknowledged, one answer appended, the batch
/// completed.
async fn turn(store: &MessageStore) {
    let received = store
        .begin_batch(trigger(), BeginBatch::default())
        .await
        .expect("begin_batch");
    store
        .append_step(
            received.batch_id,
            vec![NewMessage::assistant(ASSISTANT_TEXT)],
        )
        .await
        .expect("append_step");
    black_box(
        store
            .complete_batch(received.batch_id)
            .await
            .expect("complete_batch"),
    );
}

/// What each task of [`spread`] repeats.
#[derive(Clone, Copy)]
enum Work {
    Ack,
    Turn,
}

/// `iters` units of `work` spread over `writers` tasks (one agent each) that take work from a
/// shared budget until it is spent; returns the wall time.
async fn spread(stores: Vec<MessageStore>, iters: u64, work: Work) -> Duration {
    let budget = std::sync::Arc::new(AtomicU64::new(iters));
    let start = Instant::now();
    let tasks: Vec<_> = stores
        .into_iter()
        .take(usize::try_from(iters).unwrap_or(usize::MAX))
        .map(|store| {
            let budget = budget.clone();
            tokio::spawn(async move {
                while take_one(&budget) {
                    match work {
                        Work::Ack => ack(&store).await,
                        Work::Turn => turn(&store).await,
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    start.elapsed()
}

fn bench_throughput(c: &mut Criterion, rt: &Runtime) {
    let mut group = c.benchmark_group("throughput");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    for engine in Engine::ALL {
        let mut state: Option<ThroughputFx> = None;
        for (name, writers, work) in [
            ("acks_1_agent", 1, Work::Ack),
            ("acks_100_agents", AGENTS, Work::Ack),
            ("turns_100_agents", AGENTS, Work::Turn),
        ] {
            group.bench_function(BenchmarkId::new(name, engine.name()), |b| {
                let fx = &*state.get_or_insert_with(|| rt.block_on(ThroughputFx::new(engine)));
                b.to_async(rt)
                    .iter_custom(move |iters| spread(fx.stores[..writers].to_vec(), iters, work));
            });
        }
        if let Some(fx) = state {
            rt.block_on(fx.fx.close());
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// 3. append_step: ten assistant messages into an open batch

struct AppendFx {
    fx: Fixture,
    store: MessageStore,
    /// The open batch and how many steps it holds.
    cursor: Mutex<(Option<BatchId>, usize)>,
}

fn step() -> Vec<NewMessage> {
    (0..10)
        .map(|_| NewMessage::assistant(ASSISTANT_TEXT))
        .collect()
}

impl AppendFx {
    async fn new(engine: Engine) -> Self {
        let fx = Fixture::open(engine).await;
        let store = fx.agent("append").await;
        Self {
            fx,
            store,
            cursor: Mutex::new((None, 0)),
        }
    }

    async fn open_batch(&self) -> BatchId {
        self.store
            .begin_batch(trigger(), BeginBatch::default())
            .await
            .expect("begin_batch")
            .batch_id
    }

    /// The batch to append to: the current one, or a fresh one (the old one completed) once it
    /// holds `STEPS_PER_BATCH` steps. Not timed.
    async fn batch(&self) -> BatchId {
        let current = *self.cursor.lock().expect("cursor");
        let batch = match current {
            (Some(batch), steps) if steps < STEPS_PER_BATCH => batch,
            (old, _) => {
                if let Some(old) = old {
                    self.store
                        .complete_batch(old)
                        .await
                        .expect("complete_batch");
                }
                self.open_batch().await
            }
        };
        let mut cursor = self.cursor.lock().expect("cursor");
        let steps = if cursor.0 == Some(batch) { cursor.1 } else { 0 };
        *cursor = (Some(batch), steps + 1);
        batch
    }

    async fn timed_steps(&self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let batch = self.batch().await;
            let messages = step();
            let start = Instant::now();
            black_box(
                self.store
                    .append_step(batch, messages)
                    .await
                    .expect("append_step"),
            );
            total += start.elapsed();
        }
        total
    }

    /// Mean latency of `n` steps appended to a batch that already holds `existing_steps` steps.
    async fn steps_into_long_batch(&self, existing_steps: usize, n: usize) -> Duration {
        let batch = self.open_batch().await;
        for _ in 0..existing_steps {
            self.store
                .append_step(batch, step())
                .await
                .expect("append_step");
        }
        let start = Instant::now();
        for _ in 0..n {
            self.store
                .append_step(batch, step())
                .await
                .expect("append_step");
        }
        let elapsed = start.elapsed();
        self.store
            .complete_batch(batch)
            .await
            .expect("complete_batch");
        mean(elapsed, n)
    }
}

fn bench_append_step(c: &mut Criterion, rt: &Runtime) {
    let mut group = c.benchmark_group("append_step");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(10));
    for engine in Engine::ALL {
        let mut state: Option<AppendFx> = None;
        group.bench_function(BenchmarkId::new("10_messages", engine.name()), |b| {
            let fx = &*state.get_or_insert_with(|| rt.block_on(AppendFx::new(engine)));
            b.to_async(rt)
                .iter_custom(move |iters| fx.timed_steps(iters));
        });
        if let Some(fx) = state {
            // append_step re-reads the whole batch to check tool pairing: show how its cost
            // follows the length of the batch it extends.
            let long = if quick() { 20 } else { 200 };
            let (fresh, extended) = rt.block_on(async {
                (
                    fx.steps_into_long_batch(0, 20).await,
                    fx.steps_into_long_batch(long, 20).await,
                )
            });
            println!(
                "append_step/{}: 10 messages into a fresh batch {:.3} ms, into a batch of {} messages \
                 {:.3} ms (means of 20 steps): ratio {:.2}",
                engine.name(),
                ms(fresh),
                long * 10 + 1,
                ms(extended),
                extended.as_secs_f64() / fresh.as_secs_f64()
            );
            rt.block_on(fx.fx.close());
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// 4. get_recent(20) against the length of the history

struct RecentFx {
    fx: Fixture,
    store: MessageStore,
}

/// `len` messages of history starting at pair `first / 2`: user question, assistant answer, so
/// every pair is one complete batch.
fn history_chunk(first: usize, len: usize) -> Vec<LegacyMessage> {
    (first..first + len)
        .map(|i| {
            let (role, text) = if i % 2 == 0 {
                (Role::User, format!("Question {}: {TRIGGER_TEXT}", i / 2))
            } else {
                (
                    Role::Assistant,
                    format!("Answer {}: {ASSISTANT_TEXT}", i / 2),
                )
            };
            LegacyMessage {
                role,
                content: vec![ContentBlock::text(text)],
                created_at: None,
                origin: None,
            }
        })
        .collect()
}

impl RecentFx {
    async fn new(engine: Engine, label: &str, messages: usize) -> Self {
        let fx = Fixture::open(engine).await;
        let store = fx.agent(&format!("history-{label}")).await;
        let start = Instant::now();
        support::import_history(&store, messages, history_chunk).await;
        let built = start.elapsed();
        println!(
            "get_recent_20/{label}/{}: built {messages} messages in {:.1} s ({:.0} messages/s)",
            engine.name(),
            built.as_secs_f64(),
            messages as f64 / built.as_secs_f64()
        );
        let recent = store.get_recent(20).await.expect("get_recent");
        assert_eq!(
            recent.len(),
            20.min(messages / 2),
            "get_recent(20) returned the wrong number of batches"
        );
        assert!(
            recent.iter().all(|b| b.messages.len() == 2),
            "a batch came back incomplete"
        );
        for _ in 0..20 {
            black_box(store.get_recent(20).await.expect("get_recent"));
        }
        Self { fx, store }
    }

    async fn side_timing(&self, n: usize) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            black_box(self.store.get_recent(20).await.expect("get_recent"));
        }
        mean(start.elapsed(), n)
    }
}

fn bench_get_recent(c: &mut Criterion, rt: &Runtime) {
    let mut group = c.benchmark_group("get_recent_20");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let sizes = history_sizes();
    for engine in Engine::ALL {
        let mut built: Vec<(&str, RecentFx)> = Vec::new();
        for &(label, messages) in &sizes {
            let mut state: Option<RecentFx> = None;
            group.bench_function(BenchmarkId::new(label, engine.name()), |b| {
                let fx = &*state
                    .get_or_insert_with(|| rt.block_on(RecentFx::new(engine, label, messages)));
                b.to_async(rt).iter(move || async move {
                    black_box(fx.store.get_recent(20).await.expect("get_recent"))
                });
            });
            if let Some(fx) = state {
                built.push((label, fx));
            }
        }
        if let Some((label, fx)) = built.first() {
            group.bench_function(
                BenchmarkId::new(format!("after_a_write/{label}"), engine.name()),
                |b| {
                    b.to_async(rt).iter(|| async {
                        let got = fx
                            .store
                            .begin_batch(NewMessage::user(TRIGGER_TEXT), BeginBatch::default())
                            .await
                            .expect("begin_batch");
                        fx.store
                            .complete_batch(got.batch_id)
                            .await
                            .expect("complete_batch");
                        black_box(fx.store.get_recent(20).await.expect("get_recent"))
                    });
                },
            );
        }
        if built.len() >= 2 {
            let n = side_calls().min(200);
            let means: Vec<(&str, Duration)> = built
                .iter()
                .map(|(label, fx)| (*label, rt.block_on(fx.side_timing(n))))
                .collect();
            let line = means
                .iter()
                .map(|(l, d)| format!("{l} {:.3} ms", ms(*d)))
                .collect::<Vec<_>>()
                .join(", ");
            let (small, large) = (means[0], means[means.len() - 1]);
            println!(
                "get_recent_20/{}: {line} (means of {n} calls): {}/{} = {:.2}",
                engine.name(),
                large.0,
                small.0,
                large.1.as_secs_f64() / small.1.as_secs_f64()
            );
        }
        for (_, fx) in built {
            rt.block_on(fx.fx.close());
        }
    }
    group.finish();
}

/// An agent with a long history archived but for its newest 40 batches, and the oldest batch of
/// its window of 20.
struct BeyondFx {
    fx: Fixture,
    store: MessageStore,
    window_start: BatchId,
}

impl BeyondFx {
    async fn new(engine: Engine, label: &str, messages: usize) -> Self {
        let fx = Fixture::open(engine).await;
        let store = fx.agent(&format!("beyond-{label}")).await;
        support::import_history(&store, messages, history_chunk).await;
        let live = store.get_recent(40).await.expect("get_recent");
        let archived = store
            .archive_before(live[0].info.id)
            .await
            .expect("archive_before");
        let window_start = store.get_recent(20).await.expect("get_recent")[0].info.id;
        let beyond = store
            .live_batches_before(window_start, 50)
            .await
            .expect("live_batches_before");
        assert_eq!(beyond.len(), 20, "the live batches beyond the window");
        println!(
            "beyond_window_50/{label}/{}: {archived} messages archived, {} live batches beyond",
            engine.name(),
            beyond.len()
        );
        Self {
            fx,
            store,
            window_start,
        }
    }
}

fn bench_beyond_window(c: &mut Criterion, rt: &Runtime) {
    let mut group = c.benchmark_group("beyond_window_50");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let sizes: Vec<(&str, usize)> = history_sizes()
        .into_iter()
        .filter(|(_, n)| *n <= 100_000)
        .collect();
    for engine in Engine::ALL {
        for &(label, messages) in &sizes {
            let mut state: Option<BeyondFx> = None;
            group.bench_function(BenchmarkId::new(label, engine.name()), |b| {
                let fx = &*state
                    .get_or_insert_with(|| rt.block_on(BeyondFx::new(engine, label, messages)));
                b.to_async(rt).iter(move || async move {
                    black_box(
                        fx.store
                            .live_batches_before(fx.window_start, 50)
                            .await
                            .expect("live_batches_before"),
                    )
                });
            });
            if let Some(fx) = state {
                rt.block_on(fx.fx.close());
            }
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// 5. decoding stored content: `ContentBlock`'s hand-written `Deserialize` against the derive

/// `ContentBlock` with the derived `Deserialize` it had before stop 31 (docs/performance.md).
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[allow(dead_code)]
enum DerivedBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
        #[serde(default)]
        signature: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
    Thinking {
        text: String,
        #[serde(default)]
        signature: Option<String>,
    },
    Image {
        media_type: String,
        reference: String,
    },
}

/// The stored content (JSON text) of 50 messages: text blocks only, or a mix with tool calls.
fn stored_contents(mixed: bool) -> Vec<String> {
    (0..50)
        .map(|i| {
            let blocks = if mixed && i % 2 == 1 {
                vec![
                    ContentBlock::text(format!("Answer {i}: {ASSISTANT_TEXT}")),
                    ContentBlock::tool_use(
                        format!("call_{i}"),
                        "search_memory",
                        serde_json::json!({"query": TRIGGER_TEXT, "limit": 10, "tags": ["a", "b"]}),
                    ),
                ]
            } else if mixed {
                vec![ContentBlock::tool_result(
                    format!("call_{i}"),
                    format!("Result {i}: {TRIGGER_TEXT}"),
                    false,
                )]
            } else {
                vec![ContentBlock::text(format!("Question {i}: {TRIGGER_TEXT}"))]
            };
            serde_json::to_string(&blocks).unwrap()
        })
        .collect()
}

fn bench_content_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("content_decode");
    for (label, mixed) in [("text_50", false), ("mixed_50", true)] {
        let contents = stored_contents(mixed);
        group.bench_function(BenchmarkId::new(label, "hand"), |b| {
            b.iter(|| {
                for c in &contents {
                    black_box(serde_json::from_str::<Vec<ContentBlock>>(black_box(c)).unwrap());
                }
            });
        });
        group.bench_function(BenchmarkId::new(label, "derived"), |b| {
            b.iter(|| {
                for c in &contents {
                    black_box(serde_json::from_str::<Vec<DerivedBlock>>(black_box(c)).unwrap());
                }
            });
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------

fn benches(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    bench_ack(c, &rt);
    bench_throughput(c, &rt);
    bench_append_step(c, &rt);
    bench_get_recent(c, &rt);
    bench_beyond_window(c, &rt);
    bench_content_decode(c);
}

criterion_group!(store, benches);
criterion_main!(store);
