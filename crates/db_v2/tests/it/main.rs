//! Integration tests of `db_v2`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
