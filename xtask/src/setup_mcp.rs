//! `cargo xtask setup` step "MCP servers": the real MCP servers the tests talk to, under
//! `.cache/mcp`:
//!
//! - a Python venv `.cache/mcp/venv` with `mcp-server-time` (PyPI) and the Python MCP SDK `mcp`
//!   (the client of the memory server's Python test, and the tiny test servers' library);
//! - `@modelcontextprotocol/server-everything` from npm in `.cache/mcp/npm`, pinned in a
//!   `package.json` written here, installed by `npm install` the first time (which writes
//!   `package-lock.json` with every package's sha512) and by `npm ci` against that lock after.
//!
//! Idempotent: a venv whose packages import at the pinned versions, and a `node_modules` whose
//! server has the pinned version, are left alone. Integrity is checked by the clients (pip's
//! wheel hashes from the index, npm's lockfile `integrity` sums). This step must never fetch
//! from anywhere but PyPI and npm, and never install outside `.cache/mcp`.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup::Outcome;
use crate::{cmd, workspace};

/// The PyPI packages, pinned.
const PYTHON_PACKAGES: &[(&str, &str)] = &[("mcp-server-time", "2026.10.19"), ("mcp", "2.3.0")];
/// The npm package, pinned.
const EVERYTHING: (&str, &str) = ("@modelcontextprotocol/server-everything", "2026.8.31");

/// The step: the venv, then the npm server.
pub(crate) fn mcp_servers(root: &Path) -> Result<Outcome> {
    let dir = workspace::cache_dir(root).join("mcp");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut installed = Vec::new();
    let python = dir.join("venv/bin/python");
    if !venv_ready(&python) {
        let venv = dir.join("venv");
        if venv.exists() {
            fs::remove_dir_all(&venv).with_context(|| format!("removing {}", venv.display()))?;
        }
        cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]);
        for (name, version) in PYTHON_PACKAGES {
            pip.arg(format!("{name}=={version}"));
        }
        cmd::run(&mut pip)?;
        if !venv_ready(&python) {
            bail!("installed the MCP Python packages but they do not import at their versions");
        }
        installed.extend(
            PYTHON_PACKAGES
                .iter()
                .map(|(name, version)| format!("{name} {version}")),
        );
    }
    let npm = dir.join("npm");
    if !everything_ready(&npm) {
        node_and_npm()?;
        fs::create_dir_all(&npm).with_context(|| format!("creating {}", npm.display()))?;
        let manifest = serde_json::json!({
            "name": "pattern-mcp-test-servers",
            "private": true,
            "dependencies": { EVERYTHING.0: EVERYTHING.1 }
        });
        let path = npm.join("package.json");
        fs::write(&path, format!("{manifest:#}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
        let verb = if npm.join("package-lock.json").is_file() {
            "ci"
        } else {
            "install"
        };
        cmd::run(
            Command::new("npm")
                .arg(verb)
                .args(["--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&npm),
        )?;
        if !everything_ready(&npm) {
            bail!(
                "`npm {verb}` ran but {} is not at {}",
                EVERYTHING.0,
                EVERYTHING.1
            );
        }
        installed.push(format!("{} {}", EVERYTHING.0, EVERYTHING.1));
    }
    let shown = workspace::rel(root, &dir);
    Ok(if installed.is_empty() {
        Outcome::Present(shown)
    } else {
        Outcome::Installed(format!("{shown}: {}", installed.join(", ")))
    })
}

const APT_NODE: &str =
    "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm";

/// `node` and `npm` on PATH, from Debian's packages when missing (as root).
fn node_and_npm() -> Result<()> {
    let present = |program: &str| cmd::succeeds(Command::new(program).arg("--version"));
    if present("node") && present("npm") {
        return Ok(());
    }
    if !cmd::is_root() {
        bail!(
            "node and npm are needed for {}; as root run: {APT_NODE}",
            EVERYTHING.0
        );
    }
    cmd::run(Command::new("apt-get").arg("update"))?;
    cmd::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "nodejs", "npm"]),
    )?;
    if !(present("node") && present("npm")) {
        bail!("installed nodejs and npm but `node --version` or `npm --version` still fails");
    }
    Ok(())
}

/// Whether the venv's packages are installed at their pinned versions and import.
fn venv_ready(python: &Path) -> bool {
    let mut check = Command::new(python);
    check.args([
        "-c",
        "import sys, importlib.metadata as m\n\
         import mcp, mcp_server_time\n\
         pins = sys.argv[1:]\n\
         sys.exit(0 if all(m.version(n) == v for n, v in zip(pins[::2], pins[1::2])) else 1)",
    ]);
    for (name, version) in PYTHON_PACKAGES {
        check.args([name, version]);
    }
    check.output().is_ok_and(|o| o.status.success())
}

/// Whether `npm/node_modules` holds the server at its pinned version.
fn everything_ready(npm: &Path) -> bool {
    let manifest = npm
        .join("node_modules")
        .join(EVERYTHING.0)
        .join("package.json");
    fs::read_to_string(manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v["version"] == EVERYTHING.1)
}
