//! `cargo xtask sqlx prepare|check`: the offline query caches of the crates of checked
//! statements (decision 0023 step 3 (c)), `crates/pattern_db_sqlite/.sqlx` and
//! `crates/pattern_db_postgres/.sqlx`, without sqlx-cli.
//!
//! Both commands build a throwaway schema per engine, a SQLite file under the target folder
//! (`xtask-sqlx/`) and a PostgreSQL cluster of their own ([`crate::pg::Throwaway`]: a fresh
//! folder, a free port, stopped and deleted at the end, so it needs no `pg start` and never
//! touches a running cluster), migrate both with `pattern_db`'s own migrator (`pattern-db migrate
//! up`, the same code every database is opened with), and compile each checked crate once in
//! check mode with its macros online (`SQLX_OFFLINE=false`, `DATABASE_URL` its engine's schema):
//! sqlx's macros then describe each statement against that schema and write its data into
//! `SQLX_OFFLINE_DIR`, a fresh folder. `prepare` makes each committed cache that folder's copy
//! (new and changed files written, files of statements that are gone removed); `check` fails
//! when they differ, so a statement or a migration changed without `prepare` is caught.
//!
//! The `pattern-db` binary itself contains the checked statements, so it builds from the
//! committed caches; when a statement is new (no cached data yet) `prepare` first describes each
//! crate against a bootstrap schema applied from the same migration files by the engine's shell
//! (`sqlite3`, `psql`) and writes that into the committed cache, only so that the migrator
//! builds; the cache is then described again against the migrator's schema. `check` never
//! bootstraps: a cache that cannot build the binary is stale. The system `sqlite3` may be older
//! than the SQLite sqlx bundles (Debian bookworm's is 3.40, the bundled one 3.51), so a SQLite
//! migration must use no SQL function newer than the shell's (no `unhex`, 3.41: migration 0030
//! converts hex through a table instead), or `prepare` fails at the bootstrap.
//!
//! It must never write into a committed cache in `check`, never touch a database other than its
//! throwaway ones, and never leave the workspace's normal build artifacts compiled against a live
//! database (the online compile is a check-mode build of one crate, forced by a `--cfg` that
//! changes every run).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use crate::cmd;

/// The engine a checked crate's statements are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

/// A crate whose statements sqlx checks.
#[derive(Debug)]
struct Checked {
    /// Its folder, relative to the root.
    dir: &'static str,
    /// Its package name.
    krate: &'static str,
    /// The engine its statements are described against.
    engine: Engine,
}

/// Every crate of checked statements.
const CHECKED: &[Checked] = &[
    Checked {
        dir: "crates/pattern_db_sqlite",
        krate: "pattern_db_sqlite",
        engine: Engine::Sqlite,
    },
    Checked {
        dir: "crates/pattern_db_postgres",
        krate: "pattern_db_postgres",
        engine: Engine::Postgres,
    },
];

/// What to do with the offline query caches.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Regenerate every checked crate's `.sqlx` from freshly migrated throwaway schemas.
    Prepare,
    /// Fail when a committed cache differs from what `prepare` would write.
    Check,
}

/// The throwaway schemas: one URL per engine.
struct Schemas {
    sqlite: String,
    postgres: String,
}

impl Schemas {
    fn url(&self, engine: Engine) -> &str {
        match engine {
            Engine::Sqlite => &self.sqlite,
            Engine::Postgres => &self.postgres,
        }
    }
}

/// Run a `sqlx` subcommand.
pub(crate) fn run(root: &Path, action: Action) -> Result<()> {
    let work = target_dir(root).join("xtask-sqlx");
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let cluster = crate::pg::Throwaway::start("sqlx")?;
    let schemas = Schemas {
        sqlite: sqlite_url(&work.join("schema.db")),
        postgres: cluster.url(),
    };
    // The committed caches as they were, to report what `prepare` changed.
    let mut before = BTreeMap::new();
    for checked in CHECKED {
        before.insert(checked.krate, read_dir(&committed(root, checked))?);
    }
    if !migrator_builds(root, matches!(action, Action::Prepare))? {
        if matches!(action, Action::Check) {
            bail!(
                "`pattern-db` does not build from the committed query caches (a checked \
                 statement has no cached data): run `cargo xtask sqlx prepare`"
            );
        }
        bootstrap(root, &work, &cluster)?;
        cmd::run(&mut crate::db::migrator(root, "build"))?;
    }
    migrate(root, &schemas.sqlite)?;
    migrate(root, &schemas.postgres)?;
    let mut stale = 0;
    for checked in CHECKED {
        let fresh = work.join(format!("query-data-{}", checked.krate));
        fs::create_dir_all(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
        describe(root, checked.krate, schemas.url(checked.engine), &fresh)?;
        let fresh_files = read_dir(&fresh)?;
        let old = before.remove(checked.krate).unwrap_or_default();
        let diff = compare(&fresh_files, &old);
        for line in &diff {
            eprintln!("  {}: {line}", checked.dir);
        }
        stale += diff.len();
        if matches!(action, Action::Prepare) {
            write_cache(&committed(root, checked), &fresh_files)?;
            if diff.is_empty() {
                eprintln!("sqlx prepare: {}/.sqlx was already up to date", checked.dir);
            } else {
                eprintln!(
                    "sqlx prepare: {}/.sqlx updated ({} file(s))",
                    checked.dir,
                    diff.len()
                );
            }
        }
    }
    drop(cluster);
    match action {
        Action::Check if stale > 0 => bail!(
            "the committed query cache is stale ({stale} file(s)): run `cargo xtask sqlx \
             prepare` and commit it"
        ),
        Action::Check => {
            eprintln!("sqlx check: the committed caches match the schemas and the statements");
            Ok(())
        }
        Action::Prepare => Ok(()),
    }
}

/// A checked crate's committed cache folder.
fn committed(root: &Path, checked: &Checked) -> PathBuf {
    root.join(checked.dir).join(".sqlx")
}

/// Makes `dir` hold exactly `files` (only `query-*.json` files are touched).
fn write_cache(dir: &Path, files: &BTreeMap<String, Vec<u8>>) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let old = read_dir(dir)?;
    for name in old.keys().filter(|n| !files.contains_key(*n)) {
        fs::remove_file(dir.join(name))?;
    }
    for (name, bytes) in files {
        if old.get(name) != Some(bytes) {
            fs::write(dir.join(name), bytes)?;
        }
    }
    Ok(())
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

/// Whether `pattern-db` builds from the committed caches (with `quiet`, a failure prints
/// nothing: it is expected when a statement is new).
fn migrator_builds(root: &Path, quiet: bool) -> Result<bool> {
    let mut build = crate::db::migrator(root, "build");
    Ok(if quiet {
        cmd::output(&mut build)?.status.success()
    } else {
        cmd::run(&mut build).is_ok()
    })
}

/// Migrates the schema at `url` with `pattern-db migrate up` (built already).
fn migrate(root: &Path, url: &str) -> Result<()> {
    let mut up = crate::db::migrator(root, "run");
    up.args(["--", "migrate", "up", "--url"]).arg(url);
    let out = cmd::output(&mut up)?;
    if !out.status.success() {
        bail!(
            "pattern-db migrate up failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes the migrator buildable when a statement is new: describes every checked crate against
/// a bootstrap schema its engine's shell applies from the same migration files, and writes that
/// into its committed cache (`prepare` overwrites it with the migrator's schema's description).
fn bootstrap(root: &Path, work: &Path, cluster: &crate::pg::Throwaway) -> Result<()> {
    eprintln!("sqlx prepare: building the migrator against bootstrap schemas");
    let sqlite = work.join("bootstrap.db");
    for up in up_migrations(root, "sqlite")? {
        let mut shell = Command::new("sqlite3");
        shell.arg(&sqlite);
        feed(&mut shell, &up, "sqlite3 (apt-get install sqlite3)")?;
    }
    let url = cluster.url();
    let postgres = format!(
        "{}/bootstrap",
        url.strip_suffix("/postgres").unwrap_or(&url)
    );
    let psql = cluster.bin().join("psql");
    cmd::run(Command::new(&psql).arg(cluster.url()).args([
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "CREATE DATABASE bootstrap",
    ]))?;
    for up in up_migrations(root, "postgres")? {
        let mut shell = Command::new(&psql);
        // One transaction a file, as the migrator runs it (temporary tables `ON COMMIT DROP`).
        shell
            .arg(&postgres)
            .args(["-q", "-1", "-v", "ON_ERROR_STOP=1"]);
        feed(&mut shell, &up, "psql")?;
    }
    for checked in CHECKED {
        let url = match checked.engine {
            Engine::Sqlite => sqlite_url(&sqlite),
            Engine::Postgres => postgres.clone(),
        };
        let out = work.join(format!("bootstrap-{}", checked.krate));
        fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        describe(root, checked.krate, &url, &out)?;
        write_cache(&committed(root, checked), &read_dir(&out)?)?;
    }
    Ok(())
}

/// `migrations/<engine>/*.up.sql` in version order.
fn up_migrations(root: &Path, engine: &str) -> Result<Vec<PathBuf>> {
    let mut ups: Vec<PathBuf> = fs::read_dir(root.join("migrations").join(engine))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".up.sql"))
        .collect();
    ups.sort();
    Ok(ups)
}

/// Runs `shell` with the file `sql` on its standard input; fails when it does.
fn feed(shell: &mut Command, sql: &Path, what: &str) -> Result<()> {
    let text = fs::read(sql).with_context(|| format!("reading {}", sql.display()))?;
    shell
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let mut child = shell
        .spawn()
        .with_context(|| format!("`{what}` is needed to bootstrap a new statement"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(&text)?;
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{what} failed on {}", sql.display());
    }
    Ok(())
}

/// Compiles the checked crate `krate` once, in check mode, with its macros online against the
/// schema at `url`, writing each statement's data into `out`.
fn describe(root: &Path, krate: &str, url: &str, out: &Path) -> Result<()> {
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut check = cargo(root);
    check
        .env("SQLX_OFFLINE", "false")
        .env("DATABASE_URL", url)
        .env("SQLX_OFFLINE_DIR", out)
        .args([
            "rustc",
            "--quiet",
            "-p",
            krate,
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
