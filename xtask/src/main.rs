//! `cargo xtask`: the project's automation, written in Rust so it runs the
//! same on every machine. It must never depend on a workspace crate (it has to
//! build while they are broken) and must never touch anything outside the
//! workspace except the PostgreSQL install done by `setup` and the throwaway
//! cluster under `.cache/pg` (or its `/tmp` fallback).
//!
//! Commands:
//!
//! - `setup` — idempotently install what the project needs (PostgreSQL server
//!   binaries, the offline embedding model and ONNX Runtime under
//!   `.cache/models/` and `.cache/onnxruntime/`) and create the ignored
//!   `.cache/` folder.
//! - `pg start|stop|status` — a throwaway PostgreSQL cluster on 127.0.0.1
//!   (port `PATTERN_PG_PORT`, default 55432); `start` prints its URL.
//! - `tidy` — repository rules: `//!` docs on every file, dependency
//!   restrictions, layer order from `ARCHITECTURE.md`, no `todo`-style macros.
//! - `ci` — fmt, clippy, tidy, setup, every crate's tests against a fresh
//!   cluster, docs; always stops the cluster it started.
//! - `test [CRATE] [-- ARGS]` — tests with `PATTERN_TEST_PG_URL` set.
//! - `bench [CRATE] [-- ARGS]` — benches with `PATTERN_TEST_PG_URL` set; `bench --goals` runs
//!   `pattern_db`'s storage goals (SQLite, and PostgreSQL's on a throwaway cluster) and writes
//!   their table into `docs/performance.md`.
//! - `db up|down|reset|status [--url URL]`, `db new NAME` — migrations.
//! - `sqlx prepare|check` — the offline query caches of `pattern_db_sqlite` and
//!   `pattern_db_postgres` (their statements are checked at compile time): regenerate them from a
//!   throwaway migrated SQLite file and PostgreSQL cluster of their own, or fail when a committed
//!   one is stale.
//! - `dictionary --out PATH` — trains a zstd dictionary for SQLite's compressed message content
//!   from the repository's own prose, as the built-in one was made; never overwrites a file.
//! - `demo [-- ARGS]` — the main job: setup, then `pattern demo` (a real agent conversation).
//! - `eval recall [--postgres] [--external PATH]` — the whole generated recall evaluation (or a
//!   public set kept outside the repository) with the real model: recall@5/10 and MRR per mode
//!   and kind, and latency.

mod ci;
mod cmd;
mod db;
mod demo;
mod dictionary;
mod eval;
mod goals;
mod guard;
mod pg;
mod setup;
mod setup_mcp;
mod sqlx;
mod tidy;
mod workspace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Project automation for Pattern.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The xtask subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the project needs (idempotent) and create `.cache/`.
    Setup,
    /// Manage the throwaway PostgreSQL cluster used by tests.
    Pg {
        /// start, stop or status.
        #[command(subcommand)]
        action: pg::Action,
    },
    /// Check repository rules; lists every violation as file:line.
    Tidy,
    /// Run the full CI pipeline.
    Ci,
    /// Run tests for one crate (or all) against a throwaway PostgreSQL.
    Test {
        /// Crate to test; all crates when omitted.
        krate: Option<String>,
        /// Extra arguments for `cargo test` itself, e.g. a test-name filter or
        /// `--release`; test-binary flags go after a second `--`
        /// (`cargo xtask test pattern_db -- -- --nocapture`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run benchmarks for one crate (or all with benches) against PostgreSQL.
    Bench {
        /// Crate to bench; every crate with a `benches/` folder when omitted.
        krate: Option<String>,
        /// Run only `pattern_db`'s storage goals (SQLite and PostgreSQL) and write their table
        /// into `docs/performance.md`.
        #[arg(long)]
        goals: bool,
        /// Extra arguments passed to the bench binaries after `--`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Database migrations.
    Db {
        /// What to do with migrations.
        #[command(subcommand)]
        action: db::Action,
    },
    /// The offline query caches of the checked SQLite and PostgreSQL statements.
    Sqlx {
        /// prepare or check.
        #[command(subcommand)]
        action: sqlx::Action,
    },
    /// Run an evaluation.
    Eval {
        /// Which one.
        #[command(subcommand)]
        which: eval::Which,
    },
    /// Train a dictionary for SQLite's compressed message content (never overwrites a file).
    Dictionary {
        /// Where to write it; must not exist.
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Run the demo (extra arguments are passed through).
    Demo {
        /// Extra arguments passed to the demo after `--`.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace::root();
    let result = match cli.command {
        Command::Setup => setup::run(&root),
        Command::Pg { action } => pg::run(&root, action),
        Command::Tidy => tidy::run(&root),
        Command::Ci => ci::ci(&root),
        Command::Test { krate, args } => ci::test(&root, krate.as_deref(), &args),
        Command::Bench {
            goals: true, args, ..
        } => goals::run(&root, &args),
        Command::Bench { krate, args, .. } => ci::bench(&root, krate.as_deref(), &args),
        Command::Db { action } => db::run(&root, action),
        Command::Sqlx { action } => sqlx::run(&root, action),
        Command::Demo { args } => demo::run(&root, &args),
        Command::Dictionary { out } => dictionary::run(&root, &out),
        Command::Eval { which } => eval::run(&root, which),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    //! Checks that the command line parses as documented.

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn test_passes_extra_args() {
        let cli = Cli::try_parse_from(["xtask", "test", "pattern_db", "--", "--", "--nocapture"]);
        match cli.map(|c| c.command) {
            Ok(Command::Test { krate, args }) => {
                assert_eq!(krate.as_deref(), Some("pattern_db"));
                assert_eq!(args, vec!["--".to_owned(), "--nocapture".to_owned()]);
            }
            other => panic!("unexpected parse: {other:?}"),
        }
    }
}
