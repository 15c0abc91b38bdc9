//! Embeds the SQL migrations of `../../migrations/{sqlite,postgres}` into the crate, so a binary
//! built from it needs no migration files at run time.
//!
//! It only lists files and writes `OUT_DIR/migrations.rs`; it must never touch a database.

#![allow(clippy::panic)] // a build script reports failure by panicking

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("../../migrations");
    let mut out = String::new();
    for backend in ["sqlite", "postgres"] {
        let dir = root.join(backend);
        println!("cargo:rerun-if-changed={}", dir.display());
        let files = migration_files(&dir);
        let _ = writeln!(
            out,
            "/// Migrations for {backend}: (version, description, up, down)."
        );
        let _ = writeln!(
            out,
            "pub(crate) const {}: &[(i64, &str, &str, &str)] = &[",
            backend.to_uppercase()
        );
        for (version, desc, up, down) in files {
            println!("cargo:rerun-if-changed={}", up.display());
            println!("cargo:rerun-if-changed={}", down.display());
            let _ = writeln!(
                out,
                "    ({version}, {desc:?}, include_str!({:?}), include_str!({:?})),",
                up.display().to_string(),
                down.display().to_string()
            );
        }
        let _ = writeln!(out, "];");
    }
    let dest = PathBuf::from(env::var("OUT_DIR").unwrap_or_default()).join("migrations.rs");
    if let Err(e) = fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}

/// `(version, description, up path, down path)` sorted by version; panics (failing the build)
/// on a malformed name or a missing half of a pair.
fn migration_files(dir: &Path) -> Vec<(i64, String, PathBuf, PathBuf)> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => panic!("cannot read {}: {e}", dir.display()),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".up.sql") else {
            continue;
        };
        let Some((num, desc)) = stem.split_once('_') else {
            panic!("migration {name} must be named NNNN_description.up.sql")
        };
        let version: i64 = match num.parse() {
            Ok(v) => v,
            Err(_) => panic!("migration {name}: `{num}` is not a number"),
        };
        let up = dir.join(&name);
        let down = dir.join(format!("{stem}.down.sql"));
        if !down.exists() {
            panic!("migration {name} has no {stem}.down.sql: every migration must be reversible");
        }
        let up = fs::canonicalize(&up).unwrap_or(up);
        let down = fs::canonicalize(&down).unwrap_or(down);
        found.push((version, desc.replace('_', " "), up, down));
    }
    found.sort_by_key(|f| f.0);
    for pair in found.windows(2) {
        if pair[0].0 == pair[1].0 {
            panic!(
                "two migrations share version {} in {}",
                pair[0].0,
                dir.display()
            );
        }
    }
    found
}
