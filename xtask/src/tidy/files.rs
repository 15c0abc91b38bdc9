//! Tidy rules on Rust sources: every file opens with a `//!` doc, and no file
//! contains the placeholder macros. It must never hold those macro names as
//! literal text itself (the patterns are built with `concat!`), so tidy passes
//! on its own source.

use std::fs;
use std::path::{Path, PathBuf};

use super::Violation;

/// Placeholder macro calls that must not be committed.
const FORBIDDEN: [&str; 2] = [concat!("to", "do!("), concat!("unimple", "mented!(")];

/// Violation when the first non-blank line of `text` does not start with `//!`.
pub(crate) fn check_doc_header(file: &str, text: &str) -> Option<Violation> {
    let first = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty());
    match first {
        Some((_, line)) if line.trim_start().starts_with("//!") => None,
        Some((i, _)) => Some(Violation::new(
            file,
            i + 1,
            "the first line must be a `//!` doc saying what this file is for and what it must \
             never do"
                .to_owned(),
        )),
        None => Some(Violation::new(
            file,
            1,
            "empty file: it must open with a `//!` doc".to_owned(),
        )),
    }
}

/// One violation per line of `text` holding a placeholder macro call.
pub(crate) fn check_forbidden(file: &str, text: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for pattern in FORBIDDEN {
            if line.contains(pattern) {
                out.push(Violation::new(
                    file,
                    i + 1,
                    format!("`{pattern}` placeholder: finish the code or return an error"),
                ));
            }
        }
    }
    out
}

/// Every `.rs` file under `dir` (recursively, skipping `target` and hidden
/// folders), sorted. A missing `dir` yields nothing.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Header and placeholder checks on in-memory sources.

    use super::*;

    #[test]
    fn doc_header_ok_after_blank_lines() {
        assert!(check_doc_header("a.rs", "\n\n//! Does a thing.\nfn f() {}\n").is_none());
        assert!(check_doc_header("a.rs", "  //! Indented is fine.\n").is_none());
    }

    #[test]
    fn doc_header_missing() {
        let v = check_doc_header("a.rs", "\n// plain comment\n//! late\n");
        assert_eq!(
            v.map(|v| v.to_string())
                .unwrap_or_default()
                .split(": ")
                .next(),
            Some("a.rs:2")
        );
        assert!(check_doc_header("a.rs", "/// item doc\nfn f() {}\n").is_some());
        assert!(check_doc_header("a.rs", "").is_some());
    }

    #[test]
    fn finds_placeholders_with_lines() {
        let bad = format!(
            "//! x\nfn f() {{\n    {}\n}}\nfn g() {{ {}) }}\n",
            FORBIDDEN[0], FORBIDDEN[1]
        );
        let lines: Vec<usize> = check_forbidden("b.rs", &bad)
            .iter()
            .map(|v| v.line)
            .collect();
        assert_eq!(lines, vec![3, 5]);
        assert!(check_forbidden("b.rs", "//! fine\nfn todo() {}\n").is_empty());
    }
}
