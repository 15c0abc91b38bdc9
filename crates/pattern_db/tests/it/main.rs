//! Integration tests of `pattern_db`: one binary, one module per concern.
//!
//! The conformance suite runs every case against SQLite and against a real PostgreSQL server
//! (from `PATTERN_TEST_PG_URL`, or a private cluster the testkit starts). These tests must never
//! skip a backend silently: a missing server fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

// `conformance!(case, ...)`: each case once per backend (pattern_db testkit).
#[macro_use]
extern crate pattern_db;

mod approvals;
mod auth;
mod conformance;
mod console;
mod crash;
mod fts_soak;
mod identity;
mod ids;
mod import;
mod mcp;
mod native;
mod props;
mod queue;
mod retention;
mod runs;
mod schedules;
mod search;

use pattern_db::testkit::TestDb;
use pattern_db::{Database, DbConfig};

/// Which backend a case runs on.
pub use pattern_db::Backend as Kind;

/// A fresh database of the given kind.
pub async fn fresh(kind: Kind) -> TestDb {
    TestDb::fresh(kind).await.unwrap()
}

/// Opens `tdb` with `tweak` applied to its default configuration.
pub async fn open_with(tdb: &TestDb, tweak: impl FnOnce(&mut DbConfig)) -> Database {
    let mut config = tdb.config();
    tweak(&mut config);
    Database::open(config).await.unwrap()
}
