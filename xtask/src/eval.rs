//! `cargo xtask eval recall [--postgres] [--external PATH]`: the whole generated recall
//! evaluation (db_v2's `eval_recall_full` test: 3,150 conversation turns, 480 questions of six
//! kinds) with the real embedding model (a debug build, as CI's tests: latencies are of that
//! build), printing recall@5/10 and MRR per mode and per kind, and search latency; with
//! `--external`, a public conversational-memory set in LoCoMo's layout kept outside the
//! repository instead (`eval_external`). The quick form runs in CI as an ordinary test. This
//! module must never change the set or the floors: they live with the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};
use clap::Subcommand;

use crate::cmd;
use crate::guard::PgGuard;

/// Which evaluation.
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum Which {
    /// Retrieval over long multi-session conversations.
    Recall {
        /// Run on PostgreSQL (a throwaway cluster) instead of SQLite.
        #[arg(long)]
        postgres: bool,
        /// Evaluate a public set in LoCoMo's layout (a directory of JSON files or one file)
        /// instead of the generated one; it is never copied into the repository.
        #[arg(long, value_name = "PATH")]
        external: Option<PathBuf>,
    },
}

/// Runs an evaluation.
pub(crate) fn run(root: &Path, which: Which) -> Result<()> {
    let Which::Recall { postgres, external } = which;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    let test = if let Some(path) = &external {
        if !path.exists() {
            bail!("--external {}: no such file or directory", path.display());
        }
        cmd.env("PATTERN_EVAL_EXTERNAL", std::path::absolute(path)?);
        "eval::eval_external"
    } else {
        "eval::eval_recall_full"
    };
    cmd.current_dir(root).args([
        "test",
        "-p",
        "db_v2",
        "--test",
        "it",
        test,
        "--",
        "--ignored",
        "--exact",
        "--nocapture",
    ]);
    let guard = if postgres {
        let guard = PgGuard::start(root)?;
        cmd.env("PATTERN_TEST_PG_URL", guard.url())
            .env("PATTERN_EVAL_BACKEND", "postgres");
        Some(guard)
    } else {
        None
    };
    let outcome = cmd::run(&mut cmd);
    if let Some(guard) = guard {
        guard.stop()?;
    }
    if outcome.is_err() {
        bail!("the recall evaluation failed (see above)");
    }
    Ok(())
}
