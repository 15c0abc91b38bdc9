//! Integration tests of `context_v2`: one binary, one module per concern.
//!
//! `props` checks `assemble` and `validate` on generated histories (crashes, parallel calls,
//! shuffled results, continuations, intentional damage); `sqlite` goes through a real database.
//! These tests must never depend on the order or timing of one another.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod builder;
mod format;
mod pipeline;
mod props;
mod regressions;
mod sqlite;
mod support;
