//! `cargo xtask setup`: idempotently install what the project needs on a fresh
//! Debian machine, one step per component. It must never reinstall or upgrade
//! something already present, and never install anything without root (it
//! prints the command to run instead).
//!
//! To add a component (an embedding model, a model server...), write a
//! function `fn(&Path) -> Result<Outcome>` that checks first and installs only
//! when missing, and append it to [`STEPS`].

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{cmd, pg, workspace};

/// What a step did.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The component was already there (with a detail such as its path).
    Present(String),
    /// The component was installed now.
    Installed(String),
}

/// One installable component.
struct Step {
    /// Name printed on the line for this component.
    name: &'static str,
    /// Check, and install when missing.
    run: fn(&Path) -> Result<Outcome>,
}

/// Every component, in install order.
const STEPS: &[Step] = &[
    Step {
        name: "cache folder",
        run: cache_folder,
    },
    Step {
        name: "postgresql",
        run: postgresql,
    },
    Step {
        name: "embedding model",
        run: crate::setup_embedding::embedding_model,
    },
    Step {
        name: "llama.cpp server",
        run: crate::setup_llama::llama_server,
    },
    Step {
        name: "MCP servers",
        run: crate::setup_mcp::mcp_servers,
    },
];

/// Run every step, printing one line per component.
pub(crate) fn run(root: &Path) -> Result<()> {
    for step in STEPS {
        let outcome = (step.run)(root).with_context(|| format!("setup step `{}`", step.name))?;
        match outcome {
            Outcome::Present(detail) => {
                eprintln!("setup: {}: already present ({detail})", step.name)
            }
            Outcome::Installed(detail) => eprintln!("setup: {}: installed ({detail})", step.name),
        }
    }
    Ok(())
}

fn cache_folder(root: &Path) -> Result<Outcome> {
    let dir = workspace::cache_dir(root);
    let shown = workspace::rel(root, &dir);
    if dir.is_dir() {
        return Ok(Outcome::Present(shown));
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Outcome::Installed(shown))
}

const APT_INSTALL: &str =
    "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql";

fn postgresql(_root: &Path) -> Result<Outcome> {
    if let Some(bin) = pg::find_bin_dir() {
        return Ok(Outcome::Present(bin.display().to_string()));
    }
    if !cmd::is_root() {
        bail!(
            "PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin \
             or on PATH; as root run: {APT_INSTALL}"
        );
    }
    cmd::run(Command::new("apt-get").arg("update"))?;
    cmd::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "postgresql"]),
    )?;
    match pg::find_bin_dir() {
        Some(bin) => Ok(Outcome::Installed(bin.display().to_string())),
        None => bail!("installed the postgresql package but still cannot find initdb and pg_ctl"),
    }
}
