//! Test support (feature `testkit`): fresh databases on both backends, and a throwaway PostgreSQL
//! server when the environment does not provide one.
//!
//! `PATTERN_TEST_PG_URL` (set by `cargo xtask test` and `cargo xtask ci`) names a server to use.
//! Without it, the first test that asks starts a private cluster with the machine's PostgreSQL
//! binaries (`cargo xtask setup` installs them) on a free loopback port, and a watchdog stops and
//! deletes it when the test process exits. A missing PostgreSQL is an error, never a skipped test.
//! This module must never be compiled into a production build: it panics-free but runs shell
//! commands as the `postgres` user.

pub mod children;
pub mod english;

use crate::StorageError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tempfile::TempDir;

use crate::config::{Backend, DbConfig};
use crate::db::Database;
use crate::error::{Error, Result};

/// Instantiates each case (an `async fn(Backend)` in the calling module) as one test per
/// backend: `mod sqlite { ... }` and `mod postgres { ... }`. The calling crate needs `tokio` with
/// the multi-threaded runtime.
#[macro_export]
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::Backend::Postgres).await
                }
            )*
        }
    };
}

/// A fresh database and what keeps it alive.
#[derive(Debug)]
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// For PostgreSQL: the admin URL and the database name, to drop it.
    pg: Option<(String, String)>,
    _dir: Option<TempDir>,
}

impl TestDb {
    /// A fresh SQLite file in its own temporary directory.
    pub fn sqlite() -> Result<Self> {
        let dir = tempfile::tempdir()
            .map_err(|e| StorageError::Config(format!("cannot create a temp dir: {e}")))?;
        let url = format!("sqlite://{}", dir.path().join("test.db").display());
        Ok(Self {
            url,
            pg: None,
            _dir: Some(dir),
        })
    }

    /// A fresh, empty database on the given backend (for suites that run every case on both).
    pub async fn fresh(backend: Backend) -> Result<Self> {
        match backend {
            Backend::Sqlite => Self::sqlite(),
            Backend::Postgres => Self::postgres().await,
        }
    }

    /// A fresh, empty PostgreSQL database on the test server.
    pub async fn postgres() -> Result<Self> {
        let admin = pg_admin_url()?;
        let name = format!("pattern_test_{}", uuid::Uuid::new_v4().simple());
        run_admin(&admin, &format!("CREATE DATABASE {name}")).await?;
        let url = replace_db(&admin, &name);
        Ok(Self {
            url,
            pg: Some((admin, name)),
            _dir: None,
        })
    }

    /// The temporary directory of a SQLite database.
    pub fn dir(&self) -> Option<&Path> {
        self._dir.as_ref().map(TempDir::path)
    }

    /// The full-text index directory beside a SQLite database file (`None` on PostgreSQL).
    pub fn search_index_dir(&self) -> Option<PathBuf> {
        crate::fts::dir_for(&self.url)
    }

    /// Default configuration for this database.
    pub fn config(&self) -> DbConfig {
        DbConfig::new(self.url.clone())
    }

    /// Opens it with default configuration.
    pub async fn open(&self) -> Result<Database> {
        Database::open(self.config()).await
    }

    /// Drops a PostgreSQL database (a SQLite one goes with its directory).
    pub async fn cleanup(self) -> Result<()> {
        if let Some((admin, name)) = &self.pg {
            run_admin(
                admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
            .await?;
        }
        Ok(())
    }
}

/// Inserts a protocol message row straight into the table, bypassing every check of the API:
/// with a recipient, a meeting id, both or neither. For the test that the schema itself refuses
/// a message with both (or neither). A refused row is [`StorageError::Database`].
pub async fn insert_raw_protocol_message(
    db: &Database,
    sender: crate::model::AgentId,
    recipient: Option<crate::model::AgentId>,
    meeting: Option<&str>,
) -> Result<()> {
    let mut conn = db.write_pool().acquire().await?;
    crate::ops::protocol::insert_raw_message(&mut conn.conn(), sender, recipient, meeting).await?;
    Ok(())
}

/// Makes the database itself refuse inserts into `table` whose `column` equals `value` (a
/// trigger raising `injected storage failure`), to test how callers survive a storage failure
/// in the middle of their work. [`allow_inserts`] removes it. Test-only: names are spliced into
/// SQL unchecked.
pub async fn refuse_inserts(db: &Database, table: &str, column: &str, value: &str) -> Result<()> {
    let name = format!("pattern_inject_{table}");
    let statements = match db.backend() {
        Backend::Sqlite => {
            // SQLite stores a message's role and batch type as codes (migration 0030).
            use pattern_db_sqlite::messages::{BATCH_TYPES, ROLES, code};
            let stored = match (table, column) {
                ("messages", "role") => code(&ROLES, value).map(|c| c.to_string()),
                ("messages", "batch_type") => code(&BATCH_TYPES, value).map(|c| c.to_string()),
                _ => None,
            }
            .unwrap_or_else(|| format!("'{value}'"));
            vec![format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN NEW.{column} = {stored} \
                 BEGIN SELECT RAISE(ABORT, 'injected storage failure'); END"
            )]
        }
        Backend::Postgres => vec![
            format!(
                "CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $body$ BEGIN \
                 IF NEW.{column} = '{value}' THEN RAISE EXCEPTION 'injected storage failure'; \
                 END IF; RETURN NEW; END $body$ LANGUAGE plpgsql"
            ),
            format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
            ),
        ],
    };
    let mut conn = db.write_pool().acquire().await?;
    for sql in statements {
        crate::sql::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

/// Removes what [`refuse_inserts`] installed on `table`.
pub async fn allow_inserts(db: &Database, table: &str) -> Result<()> {
    let name = format!("pattern_inject_{table}");
    let sql = match db.backend() {
        Backend::Sqlite => format!("DROP TRIGGER IF EXISTS {name}"),
        Backend::Postgres => format!("DROP TRIGGER IF EXISTS {name} ON {table}"),
    };
    let mut conn = db.write_pool().acquire().await?;
    crate::sql::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// Stores `count` session messages from `sender` to `recipient` in `session` with multi-row
/// inserts in one transaction, bypassing the writer (benchmark fixtures: millions of rows in
/// reasonable time). Every `unread_every`-th message is left unread, the others are read.
pub async fn insert_bulk_protocol_messages(
    db: &Database,
    session: crate::protocol::SessionId,
    sender: crate::model::AgentId,
    recipient: crate::model::AgentId,
    count: usize,
    unread_every: usize,
) -> Result<()> {
    const CHUNK: usize = 64;
    let mut tx = db.write_pool().begin_write().await?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut done = 0;
    while done < count {
        let rows = CHUNK.min(count - done);
        let sql = format!(
            "INSERT INTO protocol_messages (id, sender_id, recipient_id, session_id, meeting_id, \
             message_type, content, read_at, seq, created_at) VALUES {}",
            crate::ops::placeholders(rows, 10, 1)
        );
        let mut query = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for k in 0..rows {
            let n = done + k;
            let read = unread_every == 0 || n % unread_every != 0;
            query = query
                .bind(crate::protocol::ProtocolMessageId::new().to_string())
                .bind(sender.to_string())
                .bind(recipient.to_string())
                .bind(session.to_string())
                .bind(None::<String>)
                .bind("user_defined")
                .bind(format!("{{\"n\":{n}}}"))
                .bind(read.then_some(now))
                .bind(db.next_id()?.get())
                .bind(now);
        }
        query.execute(&mut tx).await?;
        done += rows;
    }
    tx.commit().await?;
    Ok(())
}

/// `n` new agents (`soak0`, `soak1`, ...), each owning a block labelled `label` whose value ends
/// with a word of its own (`zqstart0`, ...): the setting of the kill-loop soaks.
pub async fn agents_with_a_block(
    db: &Database,
    n: usize,
    label: &str,
) -> Result<Vec<crate::AgentId>> {
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let a = db
            .create_agent(crate::NewAgent::named(format!("soak{i}")))
            .await?;
        db.create_block(
            a.id,
            crate::NewBlock {
                label: label.to_owned(),
                description: String::new(),
                value: format!("soak block zqstart{i}"),
                char_limit: 1000,
                block_type: "core".into(),
            },
        )
        .await?;
        agents.push(a.id);
    }
    Ok(agents)
}

/// Every archival passage of `agent`, newest first (every page of `list_archival`).
pub async fn all_archival(
    db: &Database,
    agent: crate::AgentId,
) -> Result<Vec<crate::ArchivalEntry>> {
    let mut all: Vec<crate::ArchivalEntry> = Vec::new();
    loop {
        let page = db
            .list_archival(
                agent,
                crate::ListArchival {
                    limit: crate::archival::MAX_LIST,
                    before: all.last().map(|e| e.id),
                    tag: None,
                },
            )
            .await?;
        let full = page.len() == crate::archival::MAX_LIST;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// Runs one SQL statement straight on the database, bypassing the writer and every check of the
/// API: for tests that the schema's own constraints refuse rows the API never writes.
pub async fn execute_raw(db: &Database, sql: &str) -> Result<()> {
    let mut conn = db.write_pool().acquire().await?;
    crate::sql::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// Moves everything stored `by` into the past: the times retention reads (protocol messages,
/// sessions and meetings; batches, messages, summaries, activity events, block versions), so a
/// test proves that retention with a real age (1 day or more) deletes what is old, without
/// waiting for it to age.
pub async fn backdate(db: &Database, by: std::time::Duration) -> Result<()> {
    let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
    let shifts: &[(&str, &[&str])] = &[
        ("protocol_messages", &["created_at", "read_at"]),
        (
            "protocol_sessions",
            &["created_at", "updated_at", "ended_at"],
        ),
        (
            "protocol_meetings",
            &["created_at", "started_at", "ended_at"],
        ),
        ("batches", &["started_at", "completed_at"]),
        ("messages", &["created_at"]),
        ("summaries", &["created_at"]),
        ("activity_events", &["created_at"]),
        ("memory_block_versions", &["created_at"]),
    ];
    for (table, columns) in shifts {
        let set: Vec<String> = columns
            .iter()
            .map(|c| format!("{c} = {}", minus_ms(db.backend(), c, &ms.to_string())))
            .collect();
        execute_raw(db, &format!("UPDATE {table} SET {}", set.join(", "))).await?;
    }
    Ok(())
}

/// SQL for time column `column` moved `ms` milliseconds (an integer SQL expression) into the
/// past, on either engine (PostgreSQL's times are `TIMESTAMPTZ`): for tests that age rows.
pub fn minus_ms(backend: Backend, column: &str, ms: &str) -> String {
    crate::sql::time_of_millis(
        backend,
        &format!("{} - ({ms})", crate::sql::millis_of(backend, column)),
    )
}

/// The first column (text) of every row `sql` returns, read straight from the database: for
/// tests that look at what is stored, not at what the API shows. A message's content SQLite
/// stored compressed (migration 0031) reads as its text.
pub async fn fetch_texts(db: &Database, sql: &str) -> Result<Vec<String>> {
    let rows = fetch_columns(db, sql, 1).await?;
    Ok(rows.into_iter().flatten().collect())
}

/// The first two columns (text) of every row `sql` returns, as [`fetch_texts`] reads them.
pub async fn fetch_text_pairs(db: &Database, sql: &str) -> Result<Vec<(String, String)>> {
    let rows = fetch_columns(db, sql, 2).await?;
    Ok(rows
        .into_iter()
        .map(|mut row| {
            let second = row.pop().unwrap_or_default();
            (row.pop().unwrap_or_default(), second)
        })
        .collect())
}

/// The first `columns` columns of every row `sql` returns, each read as stored text.
async fn fetch_columns(db: &Database, sql: &str, columns: usize) -> Result<Vec<Vec<String>>> {
    use pattern_db_sqlite::messages::StoredText;
    let mut conn = db.write_pool().acquire().await?;
    let rows = crate::sql::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(&mut conn)
        .await?;
    rows.iter()
        .map(|r| {
            (0..columns)
                .map(|i| Ok(r.try_get::<StoredText, _>(i)?.into_string()))
                .collect()
        })
        .collect()
}

async fn run_admin(admin: &str, sql: &str) -> Result<()> {
    use sqlx::{Connection, Executor};
    let mut conn =
        sqlx::PgConnection::connect(admin)
            .await
            .map_err(|source| StorageError::Connect {
                backend: "postgres",
                url: admin.to_owned(),
                source,
            })?;
    conn.execute(sqlx::AssertSqlSafe(sql.to_owned())).await?;
    conn.close().await?;
    Ok(())
}

fn replace_db(url: &str, db: &str) -> String {
    match url.rsplit_once('/') {
        Some((base, last)) if !base.ends_with('/') => {
            let query = last
                .split_once('?')
                .map(|(_, q)| format!("?{q}"))
                .unwrap_or_default();
            format!("{base}/{db}{query}")
        }
        _ => format!("{url}/{db}"),
    }
}

static SERVER: OnceLock<std::result::Result<String, String>> = OnceLock::new();

/// The admin URL of the test PostgreSQL server: `PATTERN_TEST_PG_URL`, or a private cluster
/// started on first use.
pub fn pg_admin_url() -> Result<String> {
    if let Ok(url) = std::env::var("PATTERN_TEST_PG_URL")
        && !url.is_empty()
    {
        return Ok(url);
    }
    SERVER
        .get_or_init(start_private_cluster)
        .clone()
        .map_err(|e| Error::Storage(StorageError::Config(e)))
}

fn pg_bin_dir() -> std::result::Result<PathBuf, String> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| {
            "PostgreSQL is not installed (no /usr/lib/postgresql): run `cargo xtask setup`"
                .to_owned()
        })?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "no initdb under /usr/lib/postgresql/*/bin: run `cargo xtask setup`".to_owned()
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn as_postgres(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn run(mut cmd: Command, what: &str) -> std::result::Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn start_private_cluster() -> std::result::Result<String, String> {
    let bin = pg_bin_dir()?;
    let root = is_root();
    // /tmp is traversable by the postgres user; a TempDir would be 0700 root-owned.
    let dir = PathBuf::from(format!(
        "/tmp/pattern-test-pg-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if root {
        run(
            {
                let mut c = Command::new("chown");
                c.args(["postgres:postgres"]).arg(&dir);
                c
            },
            "chown",
        )?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))?;
    let data = dir.join("data");
    let mut initdb = as_postgres(root, &bin.join("initdb"));
    initdb.arg("-D").arg(&data).args([
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
    ]);
    run(initdb, "initdb")?;
    let mut start = as_postgres(root, &bin.join("pg_ctl"));
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "-t", "60", "-o"])
        .arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on",
            dir.display()
        ));
    start.arg("start");
    run(start, "pg_ctl start")?;
    // Watchdog: when this test process exits, stop the cluster and remove its files.
    let pg_ctl = bin.join("pg_ctl");
    let stop = if root {
        format!(
            "runuser -u postgres -- {} -D {} stop -m immediate",
            pg_ctl.display(),
            data.display()
        )
    } else {
        format!(
            "{} -D {} stop -m immediate",
            pg_ctl.display(),
            data.display()
        )
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = dir.display()
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the cluster watchdog: {e}"))?;
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_database_name() {
        assert_eq!(
            replace_db("postgres://u@h:1/postgres", "t"),
            "postgres://u@h:1/t"
        );
        assert_eq!(
            replace_db("postgres://u@h:1/postgres?sslmode=disable", "t"),
            "postgres://u@h:1/t?sslmode=disable"
        );
    }
}
