//! Integration tests of `pattern_core`, one binary (modules per area).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod provider_cassettes;
mod provider_contract;
mod provider_e2e;
mod provider_record;
mod provider_support;
