//! Integration tests of `pattern_server`, one binary: every test runs a real server on a loopback
//! port, over SQLite and over PostgreSQL (a private server from `pattern_db`'s testkit when
//! `PATTERN_TEST_PG_URL` is unset), with a scripted model.
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

mod api;
mod approvals;
mod console;
mod context;
mod crash;
mod limits;
mod mcp;
mod models;
mod observe;
mod pages;
mod protocol;
mod retention;
mod schedules;
mod search;
mod support;
mod turns;
