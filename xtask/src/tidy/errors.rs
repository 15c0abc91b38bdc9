//! Tidy rule (decision 0023): the storage layer's errors belong to their domains. No error enum
//! in `crates/pattern_db/src/` (an `enum` whose name ends in `Error`) has more than
//! [`MAX_ERROR_VARIANTS`] variants (one enum of every failure is what this rule keeps out), and
//! the crate's `Error` only wraps: each of its variants is one `#[from]` field (the storage core's
//! error or a domain's). It must never parse Rust beyond these line patterns, and never flag a
//! file outside `pattern_db`.

use super::Violation;
use super::writes::enum_variants;

/// Most variants one error enum may have (the storage core's: 17, the protocol's: 8).
pub(crate) const MAX_ERROR_VARIANTS: usize = 25;

/// The file holding the crate's wrapper `Error`.
const WRAPPER_FILE: &str = "crates/pattern_db/src/error.rs";

/// The name of the error enum `line` declares, if it declares one.
fn error_enum(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let line = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    let name = line.strip_prefix("enum ")?.split_whitespace().next()?;
    let name = name.trim_end_matches('{');
    name.ends_with("Error").then_some(name)
}

/// Variants of `enum Error` in `text` that are not one `#[from]` field, with their lines.
fn non_wrapping_variants(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| error_enum(l) == Some("Error") && l.trim_end().ends_with('{'))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if line.starts_with('}') {
            break;
        }
        let Some(variant) = line.strip_prefix("    ") else {
            continue;
        };
        if !variant.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let wraps = variant
            .split_once("(#[from] ")
            .and_then(|(name, rest)| Some((name, rest.strip_suffix("),")?)))
            .is_some_and(|(name, ty)| {
                name.chars().all(|c| c.is_ascii_alphanumeric())
                    && !ty.is_empty()
                    && ty
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == ':' || c == '_')
            });
        if !wraps {
            let name: String = variant
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            out.push((i + 1, name));
        }
    }
    out
}

/// Violations in `files` (`(path relative to the root, text)` of `pattern_db`'s sources).
pub(crate) fn check(files: &[(String, String)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (path, text) in files {
        for line in text.lines() {
            let Some(name) = error_enum(line) else {
                continue;
            };
            if let Some((line, variants)) = enum_variants(text, name)
                && variants > MAX_ERROR_VARIANTS
            {
                out.push(Violation::new(
                    path,
                    line,
                    format!(
                        "error enum `{name}` has {variants} variants (at most {MAX_ERROR_VARIANTS}): give each domain its own error enum beside its module"
                    ),
                ));
            }
        }
        if path == WRAPPER_FILE {
            for (line, name) in non_wrapping_variants(text) {
                out.push(Violation::new(
                    path,
                    line,
                    format!(
                        "`Error::{name}` is not one `#[from]` field: the crate's `Error` only wraps the storage core's or a domain's error enum"
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (String, String) {
        (path.to_owned(), text.to_owned())
    }

    #[test]
    fn finds_error_enums() {
        assert_eq!(error_enum("pub enum BatchError {"), Some("BatchError"));
        assert_eq!(error_enum("pub(crate) enum Error {"), Some("Error"));
        assert_eq!(error_enum("pub enum ErrorClass {"), None);
        assert_eq!(error_enum("enum Op {"), None);
    }

    #[test]
    fn a_big_error_enum_is_flagged() {
        let variants: String = (0..26).map(|i| format!("    V{i}(String),\n")).collect();
        let big = format!("pub enum BlockError {{\n{variants}}}\n");
        let got = check(&[file("crates/pattern_db/src/blocks.rs", &big)]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].line, 1);
        assert!(got[0].message.contains("26 variants"));

        let small = "pub enum RunError {\n    A { x: u8 },\n    B,\n}\n";
        assert!(check(&[file("crates/pattern_db/src/runs.rs", small)]).is_empty());
    }

    #[test]
    fn the_wrapper_only_wraps() {
        let good = "pub enum Error {\n    /// Core.\n    #[error(transparent)]\n    Storage(#[from] StorageError),\n    Agent(#[from] crate::AgentError),\n}\n";
        assert!(check(&[file(WRAPPER_FILE, good)]).is_empty());

        let bad = "pub enum Error {\n    Storage(#[from] StorageError),\n    #[error(\"closed\")]\n    Closed,\n    Corrupt(String),\n    Agent {\n        id: u8,\n    },\n}\n";
        let got = check(&[file(WRAPPER_FILE, bad)]);
        let lines: Vec<usize> = got.iter().map(|v| v.line).collect();
        assert_eq!(lines, [4, 5, 6], "{got:?}");
        assert!(got[0].message.contains("`Error::Closed`"));
        // The same enum elsewhere is not the crate's wrapper.
        assert!(check(&[file("crates/pattern_db/src/x.rs", bad)]).is_empty());
    }
}
