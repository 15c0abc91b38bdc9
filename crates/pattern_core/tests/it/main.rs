//! Integration tests of `pattern_core`, one binary. Runtime cases run on SQLite and PostgreSQL
//! (a private server from `pattern_db`'s testkit when `PATTERN_TEST_PG_URL` is unset).
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
mod crash;
mod fenced;
mod flow;
mod mcp;
mod meetings;
mod provider_cassettes;
mod provider_contract;
mod provider_e2e;
mod provider_record;
mod provider_support;
mod queue;
mod schedules;
mod sessions;
mod summarizer;
mod support;
mod tools;
