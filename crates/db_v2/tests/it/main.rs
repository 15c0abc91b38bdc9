//! Integration tests of `db_v2`: the real offline model end to end (`search`), the background
//! pipeline with test embedders (failures, timeouts, model mismatch, a SIGKILLed child process:
//! `pipeline`), processes embedding while they are SIGKILLed in a loop (`soak`) and a
//! retrieval-quality set (`quality`). Database cases run on SQLite and PostgreSQL (the testkit
//! starts a private server when `PATTERN_TEST_PG_URL` is unset).

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

mod common;
mod eval;
mod pipeline;
mod quality;
mod search;
mod soak;
