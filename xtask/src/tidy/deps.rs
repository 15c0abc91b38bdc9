//! Tidy rule: some dependencies belong to exactly one crate (the database
//! driver and search index to the storage layer, `anyhow` to binaries...),
//! and SQL to the storage crates and one module of a crate above them
//! ([`SQL_MODULES`]: `pattern_protocol::store`). It must never exempt a crate
//! that is not listed in [`RESTRICTED`], nor a file outside its [`SQL_MODULES`].

use super::Violation;
use super::manifest::Dep;

/// Package → the only crates allowed to depend on it, and why.
pub(crate) const RESTRICTED: &[(&str, &[&str], &str)] = &[
    (
        "sqlx",
        &[
            "pattern_db",
            "pattern_db_sqlite",
            "pattern_db_postgres",
            "pattern_protocol",
        ],
        "SQL stays in the storage crates and pattern_protocol's storage module",
    ),
    (
        "pattern_db_sqlite",
        &["pattern_db", "pattern_protocol"],
        "the checked SQLite statements are called from the engine arms of pattern_db and \
         pattern_protocol::store",
    ),
    (
        "pattern_db_postgres",
        &["pattern_db", "pattern_protocol"],
        "the checked PostgreSQL statements are called from the engine arms of pattern_db and \
         pattern_protocol::store",
    ),
    (
        "tantivy",
        &["pattern_db"],
        "the search index stays in the storage layer",
    ),
    ("fastembed", &["db_v2"], "embeddings stay in db_v2"),
    ("ort", &["db_v2"], "the ONNX runtime stays in db_v2"),
    (
        "rmcp",
        &["pattern_core", "pattern_server"],
        "MCP stays in pattern_core::mcp and the server's HTTP mount (decision 0015)",
    ),
    (
        "anyhow",
        &["pattern_cli", "pattern_server", "xtask"],
        "libraries return typed errors; only binaries use anyhow",
    ),
];

/// Crates above the storage layer that may name `sqlx` and the backend crates of checked
/// statements (see [`RESTRICTED`]), and the only files of each that may: its storage module
/// (decision 0023). Paths are relative to the crate's folder; one ending in `/` is a folder.
pub(crate) const SQL_MODULES: &[(&str, &[&str])] =
    &[("pattern_protocol", &["src/store.rs", "src/store/"])];

/// What only a crate's [`SQL_MODULES`] may name: the driver and the crates of checked statements.
const SQL_NAMES: &[&str] = &["sqlx", "pattern_db_sqlite", "pattern_db_postgres"];

/// Violations of [`SQL_MODULES`] by crate `krate`: a line naming one of [`SQL_NAMES`] in one of `files`
/// (`(path relative to the crate, path relative to the workspace, text)`) outside the crate's
/// storage module. Crates not listed have nothing to check here (the manifest rule covers them).
pub(crate) fn check_sql_module(krate: &str, files: &[(String, String, String)]) -> Vec<Violation> {
    let Some((_, allowed)) = SQL_MODULES.iter().find(|(name, _)| *name == krate) else {
        return Vec::new();
    };
    let inside = |path: &str| {
        allowed.iter().any(|a| {
            if a.ends_with('/') {
                path.starts_with(a)
            } else {
                path == *a
            }
        })
    };
    let mut out = Vec::new();
    for (in_crate, rel, text) in files {
        if inside(in_crate) {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if let Some(name) = SQL_NAMES.iter().find(|name| code.contains(*name)) {
                out.push(Violation::new(
                    rel,
                    n + 1,
                    format!(
                        "`{name}` named outside {}'s storage module ({}): the protocol's SQL \
                         lives there only",
                        krate,
                        allowed.join(", ")
                    ),
                ));
            }
        }
    }
    out
}

/// The front ends: they reach the layers through the facade only (issue 17).
pub(crate) const FRONT_ENDS: &[&str] = &["pattern_server", "pattern_cli"];

/// The workspace crates a front end may depend on (tests may use any, as dev-dependencies):
/// the facade, the shared JSON shapes, and the server (the CLI runs it).
pub(crate) const FRONT_END_DEPS: &[&str] = &["pattern", "pattern_api", "pattern_server"];

/// Violations of [`FRONT_END_DEPS`] by front end `krate`: a normal or build dependency on a
/// workspace crate (one of `members`) other than those.
pub(crate) fn check_front_end(
    krate: &str,
    manifest: &str,
    deps: &[Dep],
    members: &[&str],
) -> Vec<Violation> {
    if !FRONT_ENDS.contains(&krate) {
        return Vec::new();
    }
    deps.iter()
        .filter(|dep| members.contains(&dep.name.as_str()) && !dep.section.contains("dev"))
        .filter(|dep| dep.name != krate && !FRONT_END_DEPS.contains(&dep.name.as_str()))
        .map(|dep| {
            Violation::new(
                manifest,
                dep.line,
                format!(
                    "front end `{krate}` depends on `{}`: front ends go through the facade \
                     (`pattern`) and share JSON shapes through `pattern_api` [{}]",
                    dep.name, dep.section
                ),
            )
        })
        .collect()
}

/// Violations of [`RESTRICTED`] by crate `krate` whose manifest is `manifest`.
pub(crate) fn check_restricted(krate: &str, manifest: &str, deps: &[Dep]) -> Vec<Violation> {
    let mut out = Vec::new();
    for dep in deps {
        for (package, allowed, why) in RESTRICTED {
            if dep.name == *package && !allowed.contains(&krate) {
                out.push(Violation::new(
                    manifest,
                    dep.line,
                    format!(
                        "`{package}` may only be a dependency of {} ({why}), found in `{krate}` [{}]",
                        allowed.join(", "),
                        dep.section
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Restricted dependencies on hand-made dependency lists.

    use super::*;

    fn dep(name: &str, line: usize) -> Dep {
        Dep {
            name: name.to_owned(),
            section: "dependencies".to_owned(),
            local: false,
            line,
        }
    }

    #[test]
    fn allows_the_owner() {
        let deps = [dep("sqlx", 3), dep("tantivy", 4), dep("serde", 5)];
        assert!(check_restricted("pattern_db", "m", &deps).is_empty());
        assert!(check_restricted("xtask", "m", &[dep("anyhow", 1)]).is_empty());
        assert!(check_restricted("pattern_cli", "m", &[dep("anyhow", 1)]).is_empty());
    }

    #[test]
    fn front_ends_reach_the_layers_through_the_facade() {
        let local = |name: &str, section: &str, line| Dep {
            name: name.to_owned(),
            section: section.to_owned(),
            local: true,
            line,
        };
        let deps = [
            local("pattern", "dependencies", 1),
            local("pattern_api", "dependencies", 2),
            local("db_v2", "dependencies", 3),
            local("pattern_db", "dev-dependencies", 4),
            dep("tokio", 5),
        ];
        let members = [
            "pattern",
            "pattern_api",
            "db_v2",
            "pattern_db",
            "pattern_cli",
        ];
        let got = check_front_end("pattern_cli", "m", &deps, &members);
        assert_eq!(got.iter().map(|v| v.line).collect::<Vec<_>>(), vec![3]);
        assert!(check_front_end("pattern", "m", &deps, &members).is_empty());
    }

    #[test]
    fn sql_stays_in_the_storage_module() {
        let file = |path: &str, text: &str| {
            (
                path.to_owned(),
                format!("crates/pattern_protocol/{path}"),
                text.to_owned(),
            )
        };
        let files = [
            file("src/store.rs", "use sqlx::Row;\n"),
            file("src/store/meetings.rs", "use sqlx::Row;\n"),
            file("src/protocol.rs", "//! No `sqlx` here.\nuse sqlx::Row;\n"),
            file("tests/it/main.rs", "fn f() { sqlx::query(\"\"); }\n"),
            file("src/storeroom.rs", "use sqlx::Row;\n"),
        ];
        let got = check_sql_module("pattern_protocol", &files);
        let at: Vec<_> = got.iter().map(|v| (v.file.as_str(), v.line)).collect();
        assert_eq!(
            at,
            [
                ("crates/pattern_protocol/src/protocol.rs", 2),
                ("crates/pattern_protocol/tests/it/main.rs", 1),
                ("crates/pattern_protocol/src/storeroom.rs", 1),
            ]
        );
        assert!(check_sql_module("pattern_core", &files).is_empty());
        // The manifest rule still refuses every other crate.
        assert_eq!(
            check_restricted("pattern_core", "m", &[dep("sqlx", 2)]).len(),
            1
        );
        assert!(check_restricted("pattern_protocol", "m", &[dep("sqlx", 2)]).is_empty());
    }

    #[test]
    fn checked_statements_stay_in_the_storage_module() {
        let file = |path: &str, text: &str| {
            (
                path.to_owned(),
                format!("crates/pattern_protocol/{path}"),
                text.to_owned(),
            )
        };
        let files = [
            file(
                "src/store/sessions.rs",
                "pattern_db_sqlite::protocol::f(c);\n",
            ),
            file("src/store.rs", "use pattern_db_postgres::protocol;\n"),
            file(
                "src/lib.rs",
                "// pattern_db_sqlite in a comment\nuse pattern_db_sqlite;\n",
            ),
            file("src/meeting.rs", "x(pattern_db_postgres::Uuid::nil());\n"),
        ];
        let got = check_sql_module("pattern_protocol", &files);
        let at: Vec<_> = got.iter().map(|v| (v.file.as_str(), v.line)).collect();
        assert_eq!(
            at,
            [
                ("crates/pattern_protocol/src/lib.rs", 2),
                ("crates/pattern_protocol/src/meeting.rs", 1),
            ]
        );
        assert!(got[0].message.contains("`pattern_db_sqlite`"));
        // The manifest rule lets pattern_db and pattern_protocol name the backend crates only.
        for backend in ["pattern_db_sqlite", "pattern_db_postgres"] {
            assert!(check_restricted("pattern_protocol", "m", &[dep(backend, 2)]).is_empty());
            assert!(check_restricted("pattern_db", "m", &[dep(backend, 2)]).is_empty());
            assert_eq!(
                check_restricted("pattern_core", "m", &[dep(backend, 2)]).len(),
                1
            );
        }
    }

    #[test]
    fn flags_everyone_else() {
        let deps = [dep("sqlx", 3), dep("anyhow", 7), dep("ort", 9)];
        let got = check_restricted("pattern", "crates/pattern/Cargo.toml", &deps);
        let lines: Vec<usize> = got.iter().map(|v| v.line).collect();
        assert_eq!(lines, vec![3, 7, 9]);
        assert!(
            got[0]
                .to_string()
                .starts_with("crates/pattern/Cargo.toml:3: `sqlx`")
        );
    }
}
