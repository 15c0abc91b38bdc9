//! Reading the dependency tables of a `Cargo.toml` for tidy, with the line of
//! each entry. It must never interpret anything but dependency tables and
//! `[package] name`, and never resolve versions or touch the network.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Dependency table names, as written in manifests.
const SECTIONS: &[&str] = &[
    "dependencies",
    "dev-dependencies",
    "dev_dependencies",
    "build-dependencies",
    "build_dependencies",
];

/// One dependency entry of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dep {
    /// The real package name (`package = "..."` when renamed, else the key).
    pub(crate) name: String,
    /// The table it was found in, e.g. `dependencies` or
    /// `target.cfg(unix).dev-dependencies`.
    pub(crate) section: String,
    /// True for `path = ...` or `workspace = true` entries.
    pub(crate) local: bool,
    /// 1-based line of the entry's key.
    pub(crate) line: usize,
}

/// `[workspace.dependencies]` key → real package name, from the root manifest.
pub(crate) fn workspace_renames(root_manifest: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(doc) = DeTable::parse(root_manifest) else {
        return out;
    };
    let Some(DeValue::Table(ws)) = doc.get_ref().get("workspace").map(Spanned::get_ref) else {
        return out;
    };
    let Some(DeValue::Table(deps)) = ws.get("dependencies").map(Spanned::get_ref) else {
        return out;
    };
    for (key, value) in deps {
        let key = key.get_ref().to_string();
        let name = match value.get_ref() {
            DeValue::Table(t) => string_field(t, "package").unwrap_or_else(|| key.clone()),
            _ => key.clone(),
        };
        out.insert(key, name);
    }
    out
}

/// Every dependency of a member manifest, in source order.
///
/// `renames` maps `[workspace.dependencies]` keys to real names so that
/// `foo.workspace = true` resolves a rename done in the root manifest.
/// On a parse error returns the 1-based line and the message.
pub(crate) fn dependencies(
    text: &str,
    renames: &BTreeMap<String, String>,
) -> Result<Vec<Dep>, (usize, String)> {
    let doc = DeTable::parse(text).map_err(|err| {
        let line = err.span().map_or(1, |span| line_of(text, &span));
        (line, err.to_string().trim().to_owned())
    })?;
    let mut out = Vec::new();
    collect(text, doc.get_ref(), "", renames, &mut out);
    if let Some(DeValue::Table(targets)) = doc.get_ref().get("target").map(Spanned::get_ref) {
        for (cfg, value) in targets {
            if let DeValue::Table(table) = value.get_ref() {
                let prefix = format!("target.{}.", cfg.get_ref());
                collect(text, table, &prefix, renames, &mut out);
            }
        }
    }
    out.sort_by_key(|d| d.line);
    Ok(out)
}

fn collect(
    text: &str,
    table: &DeTable<'_>,
    prefix: &str,
    renames: &BTreeMap<String, String>,
    out: &mut Vec<Dep>,
) {
    for section in SECTIONS {
        let Some(DeValue::Table(deps)) = table.get(*section).map(Spanned::get_ref) else {
            continue;
        };
        for (key, value) in deps {
            let key_str = key.get_ref().to_string();
            let (name, local) = match value.get_ref() {
                DeValue::Table(t) => {
                    let workspace = matches!(
                        t.get("workspace").map(Spanned::get_ref),
                        Some(DeValue::Boolean(true))
                    );
                    let name = match string_field(t, "package") {
                        Some(name) => name,
                        None if workspace => renames
                            .get(&key_str)
                            .cloned()
                            .unwrap_or_else(|| key_str.clone()),
                        None => key_str.clone(),
                    };
                    (name, workspace || t.get("path").is_some())
                }
                _ => (key_str.clone(), false),
            };
            out.push(Dep {
                name,
                section: format!("{prefix}{section}"),
                local,
                line: line_of(text, &key.span()),
            });
        }
    }
}

fn string_field(table: &DeTable<'_>, field: &str) -> Option<String> {
    match table.get(field).map(Spanned::get_ref) {
        Some(DeValue::String(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// 1-based line holding the start of `span`.
pub(crate) fn line_of(text: &str, span: &Range<usize>) -> usize {
    let end = span.start.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    //! Dependency extraction from small manifests.

    use super::*;

    const MANIFEST: &str = r#"[package]
name = "demo"

[dependencies]
serde = "1"
pattern_db.workspace = true
db = { package = "sqlx", version = "0.9" }
local = { path = "../local" }

[dev-dependencies.tempfile]
workspace = true

[target.'cfg(unix)'.build-dependencies]
cc = "1"
"#;

    fn deps() -> Vec<Dep> {
        let mut renames = BTreeMap::new();
        renames.insert("tempfile".to_owned(), "tempfile".to_owned());
        dependencies(MANIFEST, &renames).unwrap_or_default()
    }

    #[test]
    fn finds_every_entry_with_lines() {
        let got: Vec<(String, usize, bool)> = deps()
            .into_iter()
            .map(|d| (d.name, d.line, d.local))
            .collect();
        assert_eq!(
            got,
            vec![
                ("serde".to_owned(), 5, false),
                ("pattern_db".to_owned(), 6, true),
                ("sqlx".to_owned(), 7, false),
                ("local".to_owned(), 8, true),
                ("tempfile".to_owned(), 10, true),
                ("cc".to_owned(), 14, false),
            ]
        );
    }

    #[test]
    fn records_sections() {
        let sections: Vec<String> = deps().into_iter().map(|d| d.section).collect();
        assert_eq!(sections[4], "dev-dependencies");
        assert_eq!(sections[5], "target.cfg(unix).build-dependencies");
    }

    #[test]
    fn resolves_workspace_renames() {
        let root = "[workspace.dependencies]\ndb = { package = \"sqlx\", version = \"1\" }\n";
        let renames = workspace_renames(root);
        let member = "[dependencies]\ndb.workspace = true\n";
        let deps = dependencies(member, &renames).unwrap_or_default();
        assert_eq!(deps.first().map(|d| d.name.as_str()), Some("sqlx"));
    }

    #[test]
    fn reports_parse_errors_with_line() {
        let err = dependencies("[dependencies]\nfoo = \n", &BTreeMap::new());
        assert!(matches!(err, Err((2, _))), "{err:?}");
    }
}
