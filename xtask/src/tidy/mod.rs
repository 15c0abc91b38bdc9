//! `cargo xtask tidy`: repository rules that the compiler and clippy do not
//! check. It prints every violation as `file:line: message` and fails if there
//! is any. It must never modify a file: it only reports.
//!
//! Rules: `//!` docs on every Rust file ([`files`]), dependencies owned by one
//! crate, SQL above the storage layer only in a storage module, and front ends
//! through the facade ([`deps`]), layer order from `ARCHITECTURE.md`
//! ([`layers`]), no placeholder macros ([`files`]), storage writes owned by their domains
//! ([`writes`]), storage errors by domain behind one wrapper ([`errors`]), no sqlx `Any`
//! driver ([`drivers`]), and only compile-time checked statements in the crate of checked
//! SQLite statements ([`checked`]).

mod checked;
mod deps;
mod drivers;
mod errors;
mod files;
mod layers;
mod manifest;
mod writes;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::workspace;

/// One broken rule at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// File path relative to the workspace root.
    pub(crate) file: String,
    /// 1-based line.
    pub(crate) line: usize,
    /// What is wrong and how to fix it.
    pub(crate) message: String,
}

impl Violation {
    /// A violation at `file:line`.
    pub(crate) fn new(file: &str, line: usize, message: String) -> Self {
        Self {
            file: file.to_owned(),
            line,
            message,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// Folders of a crate whose Rust files must open with a `//!` doc.
const DOC_DIRS: &[&str] = &["src", "tests", "benches", "examples"];

/// Run every check, print violations, fail if any.
pub(crate) fn run(root: &Path) -> Result<()> {
    let violations = check_all(root)?;
    for v in &violations {
        println!("{v}");
    }
    if !violations.is_empty() {
        bail!("tidy: {} violation(s)", violations.len());
    }
    eprintln!("tidy: ok");
    Ok(())
}

/// Every violation in the workspace at `root`.
pub(crate) fn check_all(root: &Path) -> Result<Vec<Violation>> {
    let mut out = Vec::new();
    let members = workspace::members(root)?;

    // a. `//!` docs.
    let mut doc_files: Vec<PathBuf> = Vec::new();
    for member in &members {
        for dir in DOC_DIRS {
            doc_files.extend(files::rust_files(&member.dir.join(dir)));
        }
        let build = member.dir.join("build.rs");
        if build.is_file() {
            doc_files.push(build);
        }
    }
    for path in &doc_files {
        let text = read(path)?;
        out.extend(files::check_doc_header(&workspace::rel(root, path), &text));
    }

    // d. placeholder macros.
    for dir in ["crates", "xtask"] {
        for path in files::rust_files(&root.join(dir)) {
            let text = read(&path)?;
            let rel = workspace::rel(root, &path);
            out.extend(files::check_forbidden(&rel, &text));
            out.extend(drivers::check_source(&rel, &text));
        }
    }

    // e. storage writes by domain.
    let mut db_files = Vec::new();
    for path in files::rust_files(&root.join("crates/pattern_db/src")) {
        db_files.push((workspace::rel(root, &path), read(&path)?));
    }
    out.extend(writes::check(&db_files));

    // f. storage errors by domain.
    out.extend(errors::check(&db_files));

    // h. only checked statements in the crates of checked statements.
    for dir in checked::CHECKED_CRATES {
        for path in files::rust_files(&root.join(dir)) {
            out.extend(checked::check_source(
                &workspace::rel(root, &path),
                &read(&path)?,
            ));
        }
    }

    // g. SQL above the storage layer only in a crate's storage module.
    for member in &members {
        let mut files = Vec::new();
        for dir in DOC_DIRS {
            for path in files::rust_files(&member.dir.join(dir)) {
                let in_crate = workspace::rel(&member.dir, &path);
                files.push((in_crate, workspace::rel(root, &path), read(&path)?));
            }
        }
        out.extend(deps::check_sql_module(&member.name, &files));
    }

    // b. restricted dependencies, c. layers.
    let root_manifest = read(&root.join("Cargo.toml"))?;
    out.extend(drivers::check_manifest("Cargo.toml", &root_manifest));
    let renames = manifest::workspace_renames(&root_manifest);
    let mut crates = Vec::new();
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    for member in &members {
        let path = member.dir.join("Cargo.toml");
        let rel = workspace::rel(root, &path);
        match manifest::dependencies(&read(&path)?, &renames) {
            Ok(deps) => {
                out.extend(deps::check_restricted(&member.name, &rel, &deps));
                out.extend(deps::check_front_end(&member.name, &rel, &deps, &names));
                crates.push(layers::CrateDeps {
                    name: member.name.clone(),
                    manifest: rel,
                    deps,
                });
            }
            Err((line, message)) => {
                out.push(Violation::new(
                    &rel,
                    line,
                    format!("cannot parse: {message}"),
                ));
            }
        }
    }
    let arch = root.join("ARCHITECTURE.md");
    let arch_md = fs::read_to_string(&arch).unwrap_or_default();
    out.extend(layers::check_layers(
        &workspace::rel(root, &arch),
        &arch_md,
        &crates,
    ));
    Ok(out)
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    //! Every rule at once on a small workspace written to a temporary folder.

    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap();
        }
        fs::write(path, text).unwrap();
    }

    #[test]
    fn reports_every_rule_with_file_and_line() {
        let root = std::env::temp_dir().join(format!("xtask-tidy-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        write(
            &root,
            "Cargo.toml",
            "[workspace]\nmembers = [\"crates/*\", \"xtask\"]\n",
        );
        write(
            &root,
            "ARCHITECTURE.md",
            &format!("# A\n\n{}\n```\nlow\nhigh\n```\n", layers::MARKER),
        );
        write(
            &root,
            "crates/low/Cargo.toml",
            "[package]\nname = \"low\"\n\n[dependencies]\nsqlx = \"0.9\"\nhigh = { path = \"../high\" }\n",
        );
        write(&root, "crates/low/src/lib.rs", "//! Low.\n");
        write(
            &root,
            "crates/high/Cargo.toml",
            "[package]\nname = \"high\"\n\n[dependencies]\nlow = { path = \"../low\" }\n",
        );
        let placeholder = concat!("to", "do!()");
        write(
            &root,
            "crates/high/src/lib.rs",
            &format!("//! High.\nfn f() {{ {placeholder} }}\n"),
        );
        write(&root, "crates/high/tests/t.rs", "#[test]\nfn t() {}\n");
        write(
            &root,
            "xtask/Cargo.toml",
            "[package]\nname = \"xtask\"\n\n[dependencies]\nanyhow = \"1\"\n",
        );
        write(&root, "xtask/src/main.rs", "//! Tasks.\nfn main() {}\n");

        let got: Vec<String> = check_all(&root)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        let _ = fs::remove_dir_all(&root);
        let starts = [
            "crates/high/tests/t.rs:1: the first line",
            "crates/high/src/lib.rs:2: `",
            "crates/low/Cargo.toml:5: `sqlx` may only",
            "crates/low/Cargo.toml:6: `low` (layer 1) depends on `high` (layer 2)",
        ];
        assert_eq!(got.len(), starts.len(), "{got:#?}");
        for (line, start) in got.iter().zip(starts) {
            assert!(
                line.starts_with(start),
                "{line:?} should start with {start:?}"
            );
        }
    }
}
