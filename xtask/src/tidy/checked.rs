//! Tidy rule (decision 0023, step 3 (c)): every statement of the crates of checked statements
//! (`crates/pattern_db_sqlite` and `crates/pattern_db_postgres`, [`CHECKED_CRATES`]) is one of
//! sqlx's compile-time checked macros (`query!`, `query_as!`, `query_scalar!`, `query_file!`...).
//! It flags, in those crates' Rust files, sqlx's run-time statement builders (text sqlx cannot
//! check), and the `_unchecked` macros, which skip the check. It must never flag a checked macro
//! call, nor a name in a comment, nor a file of another crate (dynamic statements belong in
//! `pattern_db::sql`).
//!
//! In the SQLite crate it also flags a bare bound `LIMIT $n`: SQLite plans with a bound
//! `LIMIT`'s value and marks the statement to be prepared again whenever that parameter is bound
//! anew, so every call would compile it from scratch; `LIMIT $n + 0` is an expression it does
//! not read at planning (`pattern_db_sqlite`'s crate doc).

use super::Violation;

/// The crates this rule covers: the folders of their sources relative to the workspace root.
pub(crate) const CHECKED_CRATES: &[&str] = &[
    "crates/pattern_db_sqlite/src",
    "crates/pattern_db_postgres/src",
];

/// What a checked crate must not use: run-time statements and unchecked macros (built from parts
/// so that this file's own text says what it looks for without spelling a call).
fn unchecked() -> Vec<String> {
    let mut out = Vec::new();
    for builder in ["query", "query_as", "query_scalar", "query_with", "raw_sql"] {
        out.push(format!("sqlx::{builder}("));
    }
    for builder in [
        "QueryBuilder",
        "AssertSqlSafe",
        "query_as_with",
        "query_scalar_with",
    ] {
        out.push(format!("sqlx::{builder}"));
    }
    for name in ["query", "query_as", "query_scalar"] {
        out.push(format!("{name}_unchecked!("));
    }
    out
}

/// The position just after each bare bound `LIMIT $n` in `code` (one not followed by ` + 0`).
fn bare_bound_limits(code: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("LIMIT $") {
        let digits = from + at + "LIMIT $".len();
        let end = code[digits..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(code.len(), |i| digits + i);
        if end > digits && !code[end..].starts_with(" + 0") {
            out.push(end);
        }
        from = end.max(digits);
    }
    out
}

/// Violations in one Rust file of the checked crate (`path` relative to the root).
pub(crate) fn check_source(path: &str, text: &str) -> Vec<Violation> {
    let banned = unchecked();
    let sqlite = path.starts_with(CHECKED_CRATES[0]);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if sqlite && !bare_bound_limits(line).is_empty() {
            out.push(Violation::new(
                path,
                i + 1,
                "a bare bound `LIMIT $n` on SQLite: write `LIMIT $n + 0` (a bound LIMIT makes \
                 SQLite prepare the statement again on every call)"
                    .to_owned(),
            ));
        }
        let code = line.split("//").next().unwrap_or("");
        if let Some(name) = banned.iter().find(|b| code.contains(b.as_str())) {
            out.push(Violation::new(
                path,
                i + 1,
                format!(
                    "`{name}` in the crate of checked statements: write the statement with \
                     `sqlx::query!`/`query_as!`/`query_scalar!` (and run `cargo xtask sqlx \
                     prepare`), or keep dynamic text in `pattern_db::sql`"
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_bare_bound_limits_on_sqlite_only() {
        let text = [
            r#"sqlx::query!("SELECT 1 FROM t ORDER BY x LIMIT $1", n)"#,
            r#"sqlx::query!("SELECT 1 FROM t ORDER BY x LIMIT $12 + 0", n)"#,
            r#"sqlx::query!("SELECT 1 FROM t ORDER BY x LIMIT 5")"#,
            r#"sqlx::query!("SELECT 1 FROM t LIMIT $2) u LIMIT $3 + 0", n)"#,
        ]
        .join("\n");
        let got: Vec<usize> = check_source("crates/pattern_db_sqlite/src/x.rs", &text)
            .iter()
            .map(|v| v.line)
            .collect();
        assert_eq!(got, vec![1, 4]);
        assert!(check_source("crates/pattern_db_postgres/src/x.rs", &text).is_empty());
    }

    #[test]
    fn flags_run_time_statements_and_unchecked_macros_only() {
        let text = [
            "let a = sqlx::query!(\"SELECT 1\");",
            "let b = sqlx::query_as!(Row, \"SELECT 1 AS x\");",
            "let c = sqlx::query_scalar!(\"SELECT 1\");",
            &format!("let d = sqlx::{}(\"SELECT 1\");", "query"),
            &format!("let e = sqlx::{}(text);", "raw_sql"),
            &format!("let f = sqlx::{}!(\"SELECT 1\");", "query_unchecked"),
            &format!("// sqlx::{}( in a comment", "query"),
            &format!("let g = sqlx::{}::new(\"\");", "QueryBuilder"),
        ]
        .join("\n");
        let got: Vec<usize> = check_source("crates/pattern_db_sqlite/src/x.rs", &text)
            .iter()
            .map(|v| v.line)
            .collect();
        assert_eq!(got, vec![4, 5, 6, 8]);
    }

    #[test]
    fn covers_both_engines_crates() {
        for krate in ["pattern_db_sqlite", "pattern_db_postgres"] {
            let dir = format!("crates/{krate}/src");
            assert!(CHECKED_CRATES.contains(&dir.as_str()), "{dir}");
        }
    }
}
