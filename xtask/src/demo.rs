//! `cargo xtask demo`: the main job. Installs what is missing (`setup`: the
//! embedding model, llama.cpp's server and models), then runs `pattern demo`
//! (a real agent conversation on the embedded defaults) with its data in
//! `.cache/demo`, passing extra arguments through. It must never hold demo
//! logic itself (that lives in the `pattern` CLI), and never call the agent's
//! failure a success: it repeats `pattern demo`'s verdict.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::{cmd, setup, workspace};

/// `pattern demo`'s exit code when everything ran but the agent did not store or recall the
/// fact (the model's failure, not the framework's).
const AGENT_FAILED: i32 = 6;

/// Run the demo with `args`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    setup::run_with(root, true)?;
    let data = workspace::cache_dir(root).join("demo");
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    judge(
        Command::new(program)
            .current_dir(root)
            .args(["run", "--quiet", "--release", "-p", "pattern_cli", "--"])
            .arg("--data-dir")
            .arg(&data)
            .arg("demo")
            .args(args),
    )
}

/// Runs `pattern demo`: an error when the conversation, storage or search failed; when only the
/// agent failed its task (exit 6), says so plainly and goes on, since the main job ran. The
/// verdict is `pattern demo`'s own; this never turns it into a success message.
pub(crate) fn judge(demo: &mut Command) -> Result<()> {
    let line = cmd::render(demo);
    eprintln!("$ {line}");
    let status = demo
        .status()
        .with_context(|| format!("could not start `{line}`"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(AGENT_FAILED) => {
            eprintln!(
                "main job: every step ran and is stored, but the agent did not store or recall \
                 the fact (pattern demo exit {AGENT_FAILED}; see its last lines). The bundled \
                 0.5B model often fails this; an API key gives a capable model."
            );
            Ok(())
        }
        _ => bail!("`{line}` failed ({status})"),
    }
}
