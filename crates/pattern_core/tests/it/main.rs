//! Integration tests of `pattern_core`, one binary. Runtime cases run on SQLite and PostgreSQL
//! (a private server from `pattern_db`'s testkit when `PATTERN_TEST_PG_URL` is unset).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

/// Instantiates each case (an `async fn(Backend)`) as one test per backend.
macro_rules! conformance {
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

mod crash;
mod flow;
mod provider_cassettes;
mod provider_contract;
mod provider_e2e;
mod provider_record;
mod provider_support;
mod queue;
mod summarizer;
mod support;
mod tools;
