//! `cargo xtask db`: migrations. `new NAME` writes the next numbered pair of
//! reversible migrations for both back ends; `up|down|reset|status` delegate
//! to the `pattern-db` binary of pattern_db. It must never overwrite an
//! existing migration file and never run SQL itself.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::{cmd, workspace};

/// Back ends, each with its own migrations folder under `migrations/`.
pub(crate) const BACKENDS: &[&str] = &["sqlite", "postgres"];

/// What to do with migrations.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Apply every pending migration.
    Up(Target),
    /// Revert the last applied migration.
    Down(Target),
    /// Revert everything, then apply everything.
    Reset(Target),
    /// List applied and pending migrations.
    Status(Target),
    /// Create the next numbered up/down pair for every back end.
    New {
        /// Migration name: lowercase letters, digits and `_`.
        name: String,
    },
}

/// The database to act on.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Database URL; default `sqlite://<root>/.cache/dev.db`.
    #[arg(long, env = "DATABASE_URL")]
    url: Option<String>,
}

/// Run a `db` subcommand.
pub(crate) fn run(root: &Path, action: Action) -> Result<()> {
    let (verb, target) = match action {
        Action::New { name } => {
            for path in new_migration(root, &name)? {
                eprintln!("created {}", workspace::rel(root, &path));
            }
            return Ok(());
        }
        Action::Up(t) => ("up", t),
        Action::Down(t) => ("down", t),
        Action::Reset(t) => ("reset", t),
        Action::Status(t) => ("status", t),
    };
    let url = match target.url {
        Some(url) => url,
        None => {
            let cache = workspace::cache_dir(root);
            fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
            format!("sqlite://{}", cache.join("dev.db").display())
        }
    };
    cmd::run(
        migrator(root, "run")
            .arg("--")
            .args(["migrate", verb, "--url", &url]),
    )
}

/// `cargo SUBCOMMAND --quiet -p pattern_db --bin pattern-db` in `root` (`build` or `run`; a
/// `run` takes `--` and the migrator's arguments after it).
pub(crate) fn migrator(root: &Path, subcommand: &str) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.current_dir(root).args([
        subcommand,
        "--quiet",
        "-p",
        "pattern_db",
        "--bin",
        "pattern-db",
    ]);
    command
}

/// Write `NNNN_NAME.{up,down}.sql` in every back end's folder; returns them.
fn new_migration(root: &Path, name: &str) -> Result<Vec<PathBuf>> {
    validate_name(name)?;
    let dirs: Vec<PathBuf> = BACKENDS
        .iter()
        .map(|b| root.join("migrations").join(b))
        .collect();
    let mut existing = Vec::new();
    for dir in &dirs {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            existing.push(entry?.file_name().to_string_lossy().into_owned());
        }
    }
    if let Some(taken) = existing.iter().find(|f| migration_name(f) == Some(name)) {
        bail!("a migration named `{name}` already exists ({taken})");
    }
    let number = next_number(&existing);
    if number > 9999 {
        bail!("migration numbers are 4 digits and 9999 is taken");
    }
    let mut created = Vec::new();
    for dir in &dirs {
        for direction in ["up", "down"] {
            let path = dir.join(format!("{number:04}_{name}.{direction}.sql"));
            let body = match direction {
                "up" => "-- Purpose: <fill in>\n".to_owned(),
                _ => format!(
                    "-- Purpose: <fill in>\n-- Reverts {number:04}_{name}.up.sql exactly.\n"
                ),
            };
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            file.write_all(body.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            created.push(path);
        }
    }
    Ok(created)
}

/// Names must match `[a-z0-9_]+`.
fn validate_name(name: &str) -> Result<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        bail!("migration name `{name}` must match [a-z0-9_]+");
    }
    Ok(())
}

/// `"0003_add_x.up.sql"` → `Some(3)`.
fn number_of(file: &str) -> Option<u32> {
    let (digits, _) = file.split_once('_')?;
    if digits.len() == 4 && digits.chars().all(|c| c.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

/// `"0003_add_x.up.sql"` → `Some("add_x")`.
fn migration_name(file: &str) -> Option<&str> {
    number_of(file)?;
    let (_, rest) = file.split_once('_')?;
    rest.strip_suffix(".up.sql")
        .or_else(|| rest.strip_suffix(".down.sql"))
}

/// One more than the highest number among `files` (1 when there is none).
fn next_number(files: &[String]) -> u32 {
    files.iter().filter_map(|f| number_of(f)).max().unwrap_or(0) + 1
}

#[cfg(test)]
mod tests {
    //! Migration naming and numbering.

    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("add_agents_2").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("Add").is_err());
        assert!(validate_name("a-b").is_err());
        assert!(validate_name("../x").is_err());
    }

    #[test]
    fn numbers_continue_across_backends() {
        let files = vec![
            "0001_init.up.sql".to_owned(),
            "0001_init.down.sql".to_owned(),
            "0007_late.up.sql".to_owned(),
            "README.md".to_owned(),
            "12_bad.up.sql".to_owned(),
        ];
        assert_eq!(next_number(&files), 8);
        assert_eq!(next_number(&[]), 1);
    }

    #[test]
    fn names_are_extracted() {
        assert_eq!(migration_name("0001_init.up.sql"), Some("init"));
        assert_eq!(migration_name("0002_add_x.down.sql"), Some("add_x"));
        assert_eq!(migration_name("notes.txt"), None);
    }

    #[test]
    fn new_writes_four_files_and_refuses_duplicates() {
        let root = std::env::temp_dir().join(format!("xtask-db-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let made = new_migration(&root, "init").unwrap_or_default();
        assert_eq!(made.len(), 4);
        let first = fs::read_to_string(&made[0]).unwrap_or_default();
        assert!(first.starts_with("-- Purpose: <fill in>\n"));
        assert!(made[0].ends_with("migrations/sqlite/0001_init.up.sql"));
        assert!(made[3].ends_with("migrations/postgres/0001_init.down.sql"));
        assert!(new_migration(&root, "init").is_err());
        let next = new_migration(&root, "second").unwrap_or_default();
        assert!(next[0].ends_with("migrations/sqlite/0002_second.up.sql"));
        let _ = fs::remove_dir_all(&root);
    }
}
