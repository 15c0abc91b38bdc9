//! What the `store` and `goals` benches share: whether to run the quick form, the bare
//! single-row insert they measure an acknowledgement against, and a history imported in chunks. It must never touch a table of the
//! schema (it makes its own).

#![allow(clippy::expect_used)]

use std::str::FromStr;
use std::time::Duration;

use pattern_db::{LegacyMessage, MessageStore};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

/// The quick form: `PATTERN_BENCH_QUICK=1`, or criterion's test mode (without `--bench`, or with
/// `--test`, it runs every benchmark once as a test).
pub(crate) fn quick() -> bool {
    let env_quick = std::env::var("PATTERN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let args: Vec<String> = std::env::args().collect();
    let test_mode = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test");
    env_quick || test_mode
}

/// One connection to the SQLite file at `url` with pattern_db's durability (WAL,
/// `synchronous=FULL`), and the table `bench_bare` created in it.
pub(crate) async fn sqlite_bare_pool(url: &str) -> SqlitePool {
    let options = SqliteConnectOptions::from_str(url)
        .expect("sqlite URL")
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("connect");
    sqlx::query(
        "CREATE TABLE bench_bare (id INTEGER PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL, \
         content TEXT NOT NULL, created_at INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await
    .expect("create bench_bare");
    pool
}

/// Messages per `import_legacy` call while building a history.
pub(crate) const IMPORT_CHUNK: usize = 20_000;

/// Imports `messages` messages into `store`, [`IMPORT_CHUNK`] per call, `chunk(first, len)`
/// giving each call's messages; a history with anything the importer could not pair fails.
pub(crate) async fn import_history(
    store: &MessageStore,
    messages: usize,
    chunk: impl Fn(usize, usize) -> Vec<LegacyMessage>,
) {
    import_chunks(store, history_chunks(messages, chunk)).await;
}

/// The calls of [`import_history`]: `messages` messages, [`IMPORT_CHUNK`] per call.
pub(crate) fn history_chunks(
    messages: usize,
    chunk: impl Fn(usize, usize) -> Vec<LegacyMessage>,
) -> Vec<Vec<LegacyMessage>> {
    (0..messages)
        .step_by(IMPORT_CHUNK)
        .map(|first| chunk(first, IMPORT_CHUNK.min(messages - first)))
        .collect()
}

/// Imports each of `chunks` into `store` with one `import_legacy` call; a history with anything
/// the importer could not pair fails.
pub(crate) async fn import_chunks(store: &MessageStore, chunks: Vec<Vec<LegacyMessage>>) {
    for messages in chunks {
        let plan = store.import_legacy(messages).await.expect("import_legacy");
        assert!(
            plan.anomalies.is_empty(),
            "unexpected import anomalies: {:?}",
            plan.anomalies
        );
    }
}
