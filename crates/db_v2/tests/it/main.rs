//! Integration tests of `db_v2`: the real offline model end to end (`search`), the background
//! pipeline with test embedders (failures, timeouts, model mismatch, a SIGKILLed child process:
//! `pipeline`) and a retrieval-quality set (`quality`). Database cases run on SQLite and
//! PostgreSQL (the testkit starts a private server when `PATTERN_TEST_PG_URL` is unset).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod common;
mod pipeline;
mod quality;
mod search;

/// Instantiate `async fn case(Backend)` for both backends.
#[macro_export]
macro_rules! both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(pattern_db::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(pattern_db::Backend::Postgres).await
                }
            )*
        }
    };
}
