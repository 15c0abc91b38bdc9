//! Tidy rule: some dependencies belong to exactly one crate (the database
//! driver and search index to the storage layer, `anyhow` to binaries...).
//! It must never exempt a crate that is not listed in [`RESTRICTED`].

use super::Violation;
use super::manifest::Dep;

/// Package → the only crates allowed to depend on it, and why.
pub(crate) const RESTRICTED: &[(&str, &[&str], &str)] = &[
    ("sqlx", &["pattern_db"], "SQL stays in the storage layer"),
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
