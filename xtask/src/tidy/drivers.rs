//! Tidy rule (decision 0023, step 3): storage talks to sqlx's SQLite and PostgreSQL drivers
//! directly, through `pattern_db::sql`; sqlx's `Any` driver (which converted every argument and
//! every column into its own value type and back) does not come back. It flags Rust lines that
//! name the `Any` driver's types and a workspace `sqlx` entry that enables its `any` feature. It
//! must never flag a word that merely contains "Any" (`AnyOf`, `Company`): only the driver's
//! own names, as whole words.

use super::Violation;

/// The `Any` driver's names (built from parts so that this file does not flag itself).
fn driver_names() -> Vec<String> {
    let any = "Any";
    vec![
        format!("sqlx::{}", any.to_lowercase()),
        format!("sqlx::{any}"),
        format!("{any}Connection"),
        format!("{any}Pool"),
        format!("{any}Row"),
        format!("{any}Arguments"),
    ]
}

/// Whether `name` occurs in `line` as a whole word (not inside a longer identifier).
fn has_word(line: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(name).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Violations in one Rust file (`path` relative to the root).
pub(crate) fn check_source(path: &str, text: &str) -> Vec<Violation> {
    let names = driver_names();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if let Some(name) = names.iter().find(|n| has_word(code, n)) {
            out.push(Violation::new(
                path,
                i + 1,
                format!(
                    "`{name}` is sqlx's Any driver: run statements through `pattern_db::sql` (typed SQLite and PostgreSQL drivers)"
                ),
            ));
        }
    }
    out
}

/// Violations in the workspace manifest: a `sqlx` entry whose features include `any`.
pub(crate) fn check_manifest(path: &str, text: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let is_sqlx = trimmed.starts_with("sqlx ")
            || trimmed.starts_with("sqlx=")
            || trimmed.contains("package = \"sqlx\"");
        if is_sqlx && line.contains("\"any\"") {
            out.push(Violation::new(
                path,
                i + 1,
                "sqlx's `any` feature: storage uses the typed SQLite and PostgreSQL drivers only"
                    .to_owned(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_the_driver_names_and_nothing_that_only_contains_them() {
        let any = "Any";
        let text = format!(
            "use sqlx::{any}Pool;\nfn f(c: &mut {any}Connection) {{}}\nlet x = Company{any}Pool2;\n// {any}Row in a comment\nstruct {any}Of;\n"
        );
        let found = check_source("crates/x/src/lib.rs", &text);
        let lines: Vec<usize> = found.iter().map(|v| v.line).collect();
        assert_eq!(lines, vec![1, 2]);
    }

    #[test]
    fn flags_the_any_feature_in_the_manifest() {
        let text = "[workspace.dependencies]\nsqlx = { version = \"0.9\", features = [\"runtime-tokio\", \"any\", \"sqlite\"] }\nserde = { version = \"1\", features = [\"any\"] }\n";
        let found = check_manifest("Cargo.toml", text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 2);
        assert!(
            check_manifest(
                "Cargo.toml",
                "sqlx = { version = \"0.9\", features = [\"sqlite\"] }\n"
            )
            .is_empty()
        );
    }
}
