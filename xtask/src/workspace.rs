//! Where things are: the workspace root and its member crates. It must never
//! guess from the current directory; everything is anchored on the manifest
//! folder of the xtask that runs (`cargo run` says which at run time).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The workspace root (the parent of xtask's own manifest folder). `cargo run` sets
/// `CARGO_MANIFEST_DIR` for the process it starts; the folder xtask was compiled in is only the
/// fallback, because a build cache shared by two checkouts of the same workspace can hand one of
/// them a binary compiled in the other.
pub(crate) fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// The ignored cache folder at the root.
pub(crate) fn cache_dir(root: &Path) -> PathBuf {
    root.join(".cache")
}

/// One crate of the workspace.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Package name from `[package] name`.
    pub(crate) name: String,
    /// Folder holding its `Cargo.toml`.
    pub(crate) dir: PathBuf,
}

/// Every crate directory under `crates/` (sorted by folder name), then xtask.
pub(crate) fn members(root: &Path) -> Result<Vec<Member>> {
    let mut out = crate_members(root)?;
    out.push(Member {
        name: "xtask".to_owned(),
        dir: root.join("xtask"),
    });
    Ok(out)
}

/// Every crate directory under `crates/` (sorted by folder name).
pub(crate) fn crate_members(root: &Path) -> Result<Vec<Member>> {
    let crates = root.join("crates");
    let mut dirs = Vec::new();
    let entries = fs::read_dir(&crates).with_context(|| format!("reading {}", crates.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.join("Cargo.toml").is_file() {
            dirs.push(path);
        }
    }
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let manifest = dir.join("Cargo.toml");
        let text = fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        let fallback = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = package_name(&text).unwrap_or(fallback);
        out.push(Member { name, dir });
    }
    Ok(out)
}

/// `[package] name` of a manifest, if it parses.
pub(crate) fn package_name(manifest: &str) -> Option<String> {
    let doc = toml::de::DeTable::parse(manifest).ok()?;
    let package = doc.get_ref().get("package")?;
    match package.get_ref() {
        toml::de::DeValue::Table(t) => match t.get("name")?.get_ref() {
            toml::de::DeValue::String(s) => Some(s.to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// `path` relative to `root`, for messages.
pub(crate) fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    //! Package-name extraction.

    use super::*;

    #[test]
    fn reads_package_name() {
        let m = "[package]\nname = \"pattern_db\"\nversion = \"0.1.0\"\n";
        assert_eq!(package_name(m).as_deref(), Some("pattern_db"));
        assert_eq!(package_name("[workspace]\n"), None);
    }

    #[test]
    fn root_holds_xtask() {
        assert!(root().join("xtask").join("Cargo.toml").is_file());
    }
}
