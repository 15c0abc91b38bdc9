//! `cargo xtask sqlx prepare|check`: the offline query cache of the crate of checked SQLite
//! statements (`crates/pattern_db_sqlite/.sqlx`, decision 0023 step 3 (c)), without sqlx-cli.
//!
//! Both commands build a throwaway SQLite file under the target folder (`xtask-sqlx/`), migrate it with
//! `pattern_db`'s own migrator (`pattern-db migrate up`, the same code every database is opened
//! with), and compile `pattern_db_sqlite` once in check mode with its macros online
//! (`SQLX_OFFLINE=false`, `DATABASE_URL` the throwaway file): sqlx's macros then describe each
//! statement against that schema and write its data into `SQLX_OFFLINE_DIR`, a fresh folder.
//! `prepare` makes the committed cache that folder's copy (new and changed files written,
//! files of statements that are gone removed); `check` fails when they differ, so a statement or
//! a migration changed without `prepare` is caught.
//!
//! The `pattern-db` binary itself contains the checked statements, so it builds from the
//! committed cache; when a statement is new (no cached data yet) `prepare` builds it once against
//! a bootstrap schema the `sqlite3` shell applies from the same migration files (only to compile
//! the migrator; the cache is always described against the migrator's schema). `check` never
//! bootstraps: a cache that cannot build the binary is stale.
//!
//! It must never write into the committed cache in `check`, never touch a database other than
//! its throwaway files, and never leave the workspace's normal build artifacts compiled against
//! a live database (the online compile is a check-mode build of one crate, forced by a `--cfg`
//! that changes every run).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use crate::{cmd, workspace};

/// The crate whose statements sqlx checks, relative to the root.
const CRATE_DIR: &str = "crates/pattern_db_sqlite";
/// Its package name.
const CRATE: &str = "pattern_db_sqlite";

/// What to do with the offline query cache.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Regenerate `crates/pattern_db_sqlite/.sqlx` from a freshly migrated throwaway schema.
    Prepare,
    /// Fail when the committed cache differs from what `prepare` would write.
    Check,
}

/// Run a `sqlx` subcommand.
pub(crate) fn run(root: &Path, action: Action) -> Result<()> {
    let work = target_dir(root).join("xtask-sqlx");
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    let fresh = work.join("query-data");
    fs::create_dir_all(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
    let schema = work.join("schema.db");
    let bootstrap = matches!(action, Action::Prepare);
    migrate(root, &work, &schema, bootstrap)?;
    describe(root, &schema, &fresh)?;
    let committed = root.join(CRATE_DIR).join(".sqlx");
    let diff = compare(&read_dir(&fresh)?, &read_dir(&committed)?);
    match action {
        Action::Check => {
            if diff.is_empty() {
                eprintln!("sqlx check: the committed cache matches the schema and the statements");
                return Ok(());
            }
            for line in &diff {
                eprintln!("  {line}");
            }
            bail!(
                "{CRATE_DIR}/.sqlx is stale ({} file(s)): run `cargo xtask sqlx prepare` and commit it",
                diff.len()
            );
        }
        Action::Prepare => {
            fs::create_dir_all(&committed)?;
            let fresh_files = read_dir(&fresh)?;
            let old = read_dir(&committed)?;
            for name in old.keys().filter(|n| !fresh_files.contains_key(*n)) {
                fs::remove_file(committed.join(name))?;
            }
            for (name, bytes) in &fresh_files {
                if old.get(name) != Some(bytes) {
                    fs::write(committed.join(name), bytes)?;
                }
            }
            if diff.is_empty() {
                eprintln!("sqlx prepare: {CRATE_DIR}/.sqlx was already up to date");
            } else {
                for line in &diff {
                    eprintln!("  {line}");
                }
                eprintln!(
                    "sqlx prepare: {CRATE_DIR}/.sqlx updated ({} file(s))",
                    diff.len()
                );
            }
            Ok(())
        }
    }
}

/// The build's target folder (`CARGO_TARGET_DIR`, or `target/`): the throwaway files live there,
/// beside the build they belong to, so two checkouts never share them.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// `cargo`, in the workspace root.
fn cargo(root: &Path) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root);
    cmd
}

/// A `sqlite://` URL for a file.
fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// Migrates `schema` with `pattern-db migrate up`, building the binary from the committed cache
/// (or, with `bootstrap`, against a bootstrap schema when the committed cache cannot build it).
fn migrate(root: &Path, work: &Path, schema: &Path, bootstrap: bool) -> Result<()> {
    let mut build = crate::db::migrator(root, "build");
    let built = if bootstrap {
        // A failure is expected when a statement is new: no compiler output for it.
        cmd::output(&mut build)?.status.success()
    } else {
        cmd::run(&mut build).is_ok()
    };
    if !built {
        if !bootstrap {
            bail!(
                "`pattern-db` does not build from the committed query cache (a checked statement \
                 has no cached data): run `cargo xtask sqlx prepare`"
            );
        }
        let boot = work.join("bootstrap.db");
        eprintln!(
            "sqlx prepare: building the migrator against a bootstrap schema ({})",
            workspace::rel(root, &boot)
        );
        bootstrap_schema(root, &boot)?;
        let mut build = crate::db::migrator(root, "build");
        build
            .env("SQLX_OFFLINE", "false")
            .env("DATABASE_URL", sqlite_url(&boot));
        cmd::run(&mut build)?;
    }
    let mut up = crate::db::migrator(root, "run");
    up.args(["--", "migrate", "up", "--url"])
        .arg(sqlite_url(schema));
    let out = cmd::output(&mut up)?;
    if !out.status.success() {
        bail!(
            "pattern-db migrate up failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Applies every `migrations/sqlite/*.up.sql` in version order to `boot` with the `sqlite3`
/// shell: only for compiling the migrator when the committed cache cannot.
fn bootstrap_schema(root: &Path, boot: &Path) -> Result<()> {
    let mut ups: Vec<PathBuf> = fs::read_dir(root.join("migrations/sqlite"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".up.sql"))
        .collect();
    ups.sort();
    for up in ups {
        let sql = fs::read(&up).with_context(|| format!("reading {}", up.display()))?;
        let mut shell = Command::new("sqlite3");
        shell
            .arg(boot)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null());
        let mut child = shell.spawn().context(
            "the `sqlite3` shell is needed to bootstrap a new statement (apt-get install sqlite3)",
        )?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(&sql)?;
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("sqlite3 failed on {}", workspace::rel(root, &up));
        }
    }
    Ok(())
}

/// Compiles the checked crate once, in check mode, with its macros online against `schema`,
/// writing each statement's data into `out`.
fn describe(root: &Path, schema: &Path, out: &Path) -> Result<()> {
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut check = cargo(root);
    check
        .env("SQLX_OFFLINE", "false")
        .env("DATABASE_URL", sqlite_url(schema))
        .env("SQLX_OFFLINE_DIR", out)
        .args([
            "rustc",
            "--quiet",
            "-p",
            CRATE,
            "--lib",
            "--profile",
            "check",
            "--",
            "--check-cfg",
            "cfg(pattern_sqlx_refresh, values(any()))",
            "--cfg",
        ])
        .arg(format!("pattern_sqlx_refresh=\"{nonce}\""));
    cmd::run(&mut check)
}

/// The files of a cache folder by name (empty when there is no folder).
fn read_dir(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("query-") && name.ends_with(".json") {
            let bytes =
                fs::read(entry.path()).with_context(|| format!("reading {}", name.as_str()))?;
            out.insert(name, bytes);
        }
    }
    Ok(out)
}

/// How `committed` differs from `fresh`, one line per file.
fn compare(
    fresh: &BTreeMap<String, Vec<u8>>,
    committed: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, bytes) in fresh {
        match committed.get(name) {
            None => out.push(format!("missing {name} (a new or changed statement)")),
            Some(old) if old != bytes => {
                out.push(format!(
                    "changed {name} (the schema describes it differently)"
                ));
            }
            Some(_) => {}
        }
    }
    for name in committed.keys() {
        if !fresh.contains_key(name) {
            out.push(format!(
                "extra {name} (no statement has this text any more)"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        list.iter()
            .map(|(n, b)| ((*n).to_owned(), b.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn compare_names_missing_changed_and_extra_files() {
        let fresh = files(&[
            ("query-a.json", "1"),
            ("query-b.json", "2"),
            ("query-c.json", "3"),
        ]);
        let committed = files(&[
            ("query-a.json", "1"),
            ("query-b.json", "9"),
            ("query-d.json", "4"),
        ]);
        let got = compare(&fresh, &committed);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].starts_with("changed query-b.json"));
        assert!(got[1].starts_with("missing query-c.json"));
        assert!(got[2].starts_with("extra query-d.json"));
        assert!(compare(&fresh, &fresh).is_empty());
    }
}
