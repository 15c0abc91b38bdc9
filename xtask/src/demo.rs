//! `cargo xtask demo`: a thin wrapper that runs the project's demo, passing
//! extra arguments through. It must never hold demo logic itself, so that it
//! can later point at the real agent conversation without other changes.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::cmd;

/// Run the demo with `args`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    cmd::run(
        Command::new(program)
            .current_dir(root)
            .args([
                "run",
                "--quiet",
                "--release",
                "-p",
                "pattern_db",
                "--example",
                "demo",
            ])
            .arg("--")
            .args(args),
    )
}
