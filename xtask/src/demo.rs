//! `cargo xtask demo`: the main job. Installs what is missing (`setup`: the
//! embedding model, llama.cpp's server and models), then runs `pattern demo`
//! (a real agent conversation on the embedded defaults) with its data in
//! `.cache/demo`, passing extra arguments through. It must never hold demo
//! logic itself: that lives in the `pattern` CLI.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::{cmd, setup, workspace};

/// Run the demo with `args`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    setup::run(root)?;
    let data = workspace::cache_dir(root).join("demo");
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    cmd::run(
        Command::new(program)
            .current_dir(root)
            .args(["run", "--quiet", "--release", "-p", "pattern_cli", "--"])
            .arg("--data-dir")
            .arg(&data)
            .arg("demo")
            .args(args),
    )
}
