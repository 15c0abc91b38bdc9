//! Where the files `pattern setup` installs live, and where every command finds them, from any
//! working directory: the embedding model (`models/all-minilm-l6-v2/`), ONNX Runtime
//! (`onnxruntime/`) and the local llama.cpp server with its GGUF models (`llama/`), all under one
//! install root.
//!
//! Lookup order, for each component: its own environment variable (`PATTERN_MODEL_DIR` with
//! `PATTERN_ORT_LIBRARY`, `PATTERN_LLAMA_DIR`); else the first of these roots that holds it:
//! the data directory (the CLI's `--data-dir`, else `PATTERN_DATA_DIR`), the XDG data directory
//! (`$XDG_DATA_HOME/pattern`, else `~/.local/share/pattern`), and for development this
//! repository's `.cache/` (`PATTERN_DEV_CACHE` names another, or none when empty). When no root
//! holds it, the first root is named, so the error says where `pattern setup` would put it.
//!
//! This module only computes paths: it must never create, download or delete anything.

use std::path::{Path, PathBuf};

use db_v2::{MODEL_DIR_ENV, ModelPaths, ORT_LIBRARY_ENV};
use pattern_core::local_server::LLAMA_DIR_ENV;

/// The environment variable naming the data directory (and install root).
pub const DATA_DIR_ENV: &str = "PATTERN_DATA_DIR";
/// The environment variable naming the development cache (empty: none).
pub const DEV_CACHE_ENV: &str = "PATTERN_DEV_CACHE";

fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `$XDG_DATA_HOME/pattern` (an absolute `XDG_DATA_HOME` only, as the spec says), else
/// `$HOME/.local/share/pattern`.
pub fn xdg_data_dir() -> Option<PathBuf> {
    if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("pattern"));
    }
    var("HOME").map(|home| home.join(".local/share/pattern"))
}

/// This repository's `.cache/` (where `cargo xtask setup` installs), or `PATTERN_DEV_CACHE`;
/// `None` when that is set empty.
pub fn dev_cache() -> Option<PathBuf> {
    match std::env::var_os(DEV_CACHE_ENV) {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache")),
    }
}

/// The install roots in lookup order (module doc), without repeats. `data_dir` is the data
/// directory a command was given; `None` reads `PATTERN_DATA_DIR`.
pub fn roots(data_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let candidates = [
        data_dir
            .map(Path::to_path_buf)
            .or_else(|| var(DATA_DIR_ENV)),
        xdg_data_dir(),
        dev_cache(),
    ];
    for root in candidates.into_iter().flatten() {
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}

/// Where `pattern setup` installs: the first root.
pub fn install_root(data_dir: Option<&Path>) -> PathBuf {
    roots(data_dir)
        .into_iter()
        .next()
        .unwrap_or_else(|| PathBuf::from(".pattern"))
}

/// The embedding model and ONNX Runtime (module doc).
pub fn embedding_paths(data_dir: Option<&Path>) -> ModelPaths {
    if var(MODEL_DIR_ENV).is_some() {
        return ModelPaths::from_env();
    }
    let mut paths = embedding_in(&roots(data_dir))
        .unwrap_or_else(|| ModelPaths::in_cache(&install_root(data_dir)));
    if let Some(library) = var(ORT_LIBRARY_ENV).or_else(|| var("ORT_DYLIB_PATH")) {
        paths.runtime_library = library;
    }
    paths
}

/// The first of `roots` holding the model and the runtime library.
fn embedding_in(roots: &[PathBuf]) -> Option<ModelPaths> {
    roots
        .iter()
        .map(|root| ModelPaths::in_cache(root))
        .find(|p| p.model_dir.join("model.onnx").is_file() && p.runtime_library.is_file())
}

/// The llama.cpp folder (its venv and models; module doc).
pub fn llama_dir(data_dir: Option<&Path>) -> PathBuf {
    if let Some(dir) = var(LLAMA_DIR_ENV) {
        return dir;
    }
    roots(data_dir)
        .iter()
        .map(|root| root.join("llama"))
        .find(|dir| dir.join("venv/bin/python").is_file())
        .unwrap_or_else(|| install_root(data_dir).join("llama"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_explicit_data_dir_comes_first_and_roots_do_not_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(Some(dir.path()));
        assert_eq!(roots[0], dir.path());
        let mut unique = roots.clone();
        unique.dedup();
        assert_eq!(unique.len(), roots.len());
        assert_eq!(install_root(Some(dir.path())), dir.path());
    }

    #[test]
    fn a_root_without_the_model_is_passed_over() {
        let (empty, half, full) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        // Only the model, no runtime library: not installed there.
        let half_paths = ModelPaths::in_cache(half.path());
        std::fs::create_dir_all(&half_paths.model_dir).unwrap();
        std::fs::write(half_paths.model_dir.join("model.onnx"), b"x").unwrap();
        let full_paths = ModelPaths::in_cache(full.path());
        std::fs::create_dir_all(&full_paths.model_dir).unwrap();
        std::fs::write(full_paths.model_dir.join("model.onnx"), b"x").unwrap();
        std::fs::create_dir_all(full_paths.runtime_library.parent().unwrap()).unwrap();
        std::fs::write(&full_paths.runtime_library, b"x").unwrap();
        let roots = [&empty, &half, &full].map(|d| d.path().to_path_buf());
        assert_eq!(embedding_in(&roots), Some(full_paths));
        assert_eq!(embedding_in(&roots[..2]), None);
    }
}
