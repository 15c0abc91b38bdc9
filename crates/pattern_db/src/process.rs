//! This process in the `processes` table: registered when a database opens, renewed by a
//! heartbeat while it lives, removed when it closes; and the test every other process uses to
//! tell whether a holder of a claim or a machine id is still alive.
//!
//! A holder is alive while its row exists, has not expired (the heartbeat renews it every quarter
//! of [`crate::DbConfig::run_lease`]), and the process still holds its liveness lock:
//!
//! - on PostgreSQL a session-level advisory lock `(0x5054, lock_key)` held by a dedicated
//!   connection, which the server releases the moment that session ends (a killed process's
//!   socket closes at once), so a dead process is seen dead at once;
//! - on SQLite an exclusive lock on `<database>.procs/<lock_key>.lock`, which the kernel releases
//!   when the process exits, so a restarted process sees its predecessor dead at once.
//!
//! Where neither lock can tell (the lock file missing, another host), the row's expiry decides.
//! A wrong "dead" is safe: claims are fenced, so a live process judged dead loses its runs, never
//! its data. This module must never judge a holder alive on a lock it cannot see, and must never
//! write outside the writer once the database is open (registration at open comes before it).

use crate::StorageError;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::instant;
use sqlx::Connection;
use tokio::sync::Mutex;
use tracing::warn;

use crate::config::Backend;
use crate::error::Result;
use crate::ops::now_ms;

/// The PostgreSQL transaction-level advisory lock that lets one process lease a machine id at a
/// time.
const MACHINE_LEASE_LOCK: i64 = 7_061_747_465;

/// First key of the PostgreSQL advisory locks that show a process alive (`'PT'`).
pub(crate) const LOCK_NAMESPACE: i64 = 0x5054;

/// Where a SQLite database keeps its processes' lock files: `<file>.procs`.
pub(crate) fn lock_dir_for(url: &str) -> Option<PathBuf> {
    let path = url.strip_prefix("sqlite:")?.trim_start_matches("//");
    let path = path.split('?').next()?;
    if path.is_empty() {
        return None;
    }
    let decoded = percent_decode(path);
    Some(PathBuf::from(format!("{decoded}.procs")))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn lock_file(dir: &Path, key: i64) -> PathBuf {
    dir.join(format!("{key}.lock"))
}

/// What this process holds to show itself alive, released on close (or by the kernel or the
/// database server when the process dies).
#[derive(Debug)]
pub(crate) struct Liveness {
    /// The PostgreSQL session holding the advisory lock.
    pub(crate) pg: Option<Mutex<sqlx::PgConnection>>,
    /// The locked SQLite lock file and its path.
    pub(crate) file: Option<(File, PathBuf)>,
    /// The second advisory-lock key, also the lock file's name.
    pub(crate) lock_key: i64,
}

/// A random positive 31-bit key.
fn random_key() -> Result<i64> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes)
        .map_err(|e| StorageError::Config(format!("no random source: {e}")))?;
    Ok(i64::from(u32::from_le_bytes(bytes) & 0x7fff_ffff).max(1))
}

/// Takes this process's liveness lock (trying fresh keys on the rare collision) and inserts its
/// row. Runs at open, before the writer starts.
pub(crate) async fn register(
    pool: &Pool,
    backend: Backend,
    url: &str,
    holder: &str,
    lease: Duration,
) -> Result<Liveness> {
    let mut attempts = 0;
    let liveness = loop {
        attempts += 1;
        let key = random_key()?;
        match backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(url).await?;
                let got = pattern_db_postgres::processes::try_liveness_lock(
                    &mut conn,
                    LOCK_NAMESPACE,
                    key,
                )
                .await?;
                if got {
                    break Liveness {
                        pg: Some(Mutex::new(conn)),
                        file: None,
                        lock_key: key,
                    };
                }
            }
            Backend::Sqlite => match lock_dir_for(url) {
                Some(dir) => {
                    std::fs::create_dir_all(&dir).map_err(|e| {
                        StorageError::Config(format!("cannot create {}: {e}", dir.display()))
                    })?;
                    let path = lock_file(&dir, key);
                    let file = File::options()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&path)
                        .map_err(|e| {
                            StorageError::Config(format!("cannot create {}: {e}", path.display()))
                        })?;
                    if file.try_lock().is_ok() {
                        break Liveness {
                            pg: None,
                            file: Some((file, path)),
                            lock_key: key,
                        };
                    }
                }
                None => {
                    break Liveness {
                        pg: None,
                        file: None,
                        lock_key: key,
                    };
                }
            },
        }
        if attempts >= 8 {
            return Err(StorageError::Config(
                "could not take a process liveness lock after 8 random keys".into(),
            )
            .into());
        }
    };
    let now = now_ms();
    let host = hostname();
    let expires = now + lease_ms(lease);
    let pid = i64::from(std::process::id());
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::processes::register(
                c,
                holder,
                liveness.lock_key,
                pid,
                &host,
                now,
                expires,
            )
            .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::processes::register(
                c,
                holder,
                liveness.lock_key,
                pid,
                &host,
                instant(now)?,
                instant(expires)?,
            )
            .await?
        }
    };
    Ok(liveness)
}

/// Checks that the PostgreSQL liveness session still answers and still holds its lock; on a
/// lost session, connects again and takes the lock again (another process may meanwhile have
/// judged this one dead and taken its runs, which their fencing tokens then refuse to write).
pub(crate) async fn keep_alive(liveness: &Liveness, url: &str) {
    let Some(pg) = &liveness.pg else { return };
    let mut conn = pg.lock().await;
    let ok = pattern_db_postgres::processes::ping(&mut conn)
        .await
        .is_ok();
    if ok {
        return;
    }
    warn!("the process liveness session was lost; taking the lock again");
    match sqlx::PgConnection::connect(url).await {
        Ok(mut fresh) => {
            let taken = pattern_db_postgres::processes::liveness_lock(
                &mut fresh,
                LOCK_NAMESPACE,
                liveness.lock_key,
            )
            .await;
            match taken {
                Ok(_) => *conn = fresh,
                Err(e) => warn!(error = %e, "cannot take the process liveness lock again"),
            }
        }
        Err(e) => warn!(error = %e, "cannot reconnect the process liveness session"),
    }
}

/// Releases what [`register`] took (the row is deleted by the caller through the pool).
pub(crate) async fn release(liveness: Liveness) {
    if let Some(pg) = liveness.pg {
        let conn = pg.into_inner();
        let _ = conn.close().await;
    }
    if let Some((file, path)) = liveness.file {
        let _ = file.unlock();
        drop(file);
        let _ = std::fs::remove_file(path);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

pub(crate) fn lease_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

/// How liveness is judged inside a transaction.
#[derive(Debug, Clone)]
pub(crate) struct Judge {
    /// This process: always alive to itself.
    pub(crate) me: String,
    /// SQLite: the lock file folder.
    pub(crate) lock_dir: Option<PathBuf>,
}

/// What is known of a holder process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderStatus {
    /// Its row is current and its liveness lock is held (or cannot be seen from here).
    Alive,
    /// Its row expired (no heartbeat for a whole lease) though its lock may still be held: a
    /// stalled process. Its claims are taken; its machine id is not freed while its lease holds.
    Expired,
    /// It is certainly gone: no row, or its liveness lock is free.
    Gone,
}

impl Judge {
    /// What is known of `holder`, read inside the caller's transaction.
    pub(crate) async fn status(&self, conn: &mut Conn<'_>, holder: &str) -> Result<HolderStatus> {
        if holder == self.me {
            return Ok(HolderStatus::Alive);
        }
        let (expires, locked) = match conn {
            Conn::Sqlite(c) => {
                let Some(row) = pattern_db_sqlite::processes::process(c, holder).await? else {
                    return Ok(HolderStatus::Gone);
                };
                let locked = match &self.lock_dir {
                    Some(dir) => file_held(&lock_file(dir, row.lock_key)),
                    None => true,
                };
                (row.expires_at, locked)
            }
            Conn::Postgres(c) => {
                let Some(row) = pattern_db_postgres::processes::process(c, holder).await? else {
                    return Ok(HolderStatus::Gone);
                };
                let locked =
                    pattern_db_postgres::processes::liveness_held(c, LOCK_NAMESPACE, row.lock_key)
                        .await?;
                (row.expires_at.timestamp_millis(), locked)
            }
        };
        Ok(if !locked {
            HolderStatus::Gone
        } else if expires <= now_ms() {
            HolderStatus::Expired
        } else {
            HolderStatus::Alive
        })
    }
}

/// Whether another process holds the lock on `path`. A missing file means its process is gone
/// (it is created and locked before the row is written, and removed only after).
fn file_held(path: &Path) -> bool {
    let Ok(file) = File::options().write(true).open(path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            // Nobody holds it: its process is dead. Tidy the file away.
            let _ = file.unlock();
            let _ = std::fs::remove_file(path);
            false
        }
        Err(_) => true,
    }
}

/// Forgets a dead holder: its row and its machine-id lease, so both are free at once.
pub(crate) async fn forget(conn: &mut Conn<'_>, holder: &str) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::processes::delete(c, holder).await?;
            pattern_db_sqlite::processes::delete_leases(c, holder).await?;
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::processes::delete(c, holder).await?;
            pattern_db_postgres::processes::delete_leases(c, holder).await?;
        }
    }
    Ok(())
}

/// Renews this process's row (and its machine-id lease), inside the writer's transaction.
/// Returns whether the row was still there: `false` means another process judged this one dead
/// and forgot it, so it was written again (its runs' claims may be gone; their writes are fenced).
pub(crate) async fn renew(
    conn: &mut Conn<'_>,
    holder: &str,
    lock_key: i64,
    machine: Option<(u16, Duration)>,
    lease: Duration,
) -> Result<HeartbeatReport> {
    let now = now_ms();
    let expires = now + lease_ms(lease);
    let pid = i64::from(std::process::id());
    let machine_expires = machine.map(|(id, l)| (id, now + lease_ms(l)));
    let (renewed, machine_kept) = match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::processes as p;
            let renewed = p::renew(c, holder, expires).await? == 1;
            if !renewed {
                p::insert(c, holder, lock_key, pid, &hostname(), now, expires).await?;
            }
            let kept = match machine_expires {
                Some((id, until)) => p::renew_lease(c, i64::from(id), holder, until).await? == 1,
                None => true,
            };
            (renewed, kept)
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::processes as p;
            let renewed = p::renew(c, holder, instant(expires)?).await? == 1;
            if !renewed {
                p::insert(
                    c,
                    holder,
                    lock_key,
                    pid,
                    &hostname(),
                    instant(now)?,
                    instant(expires)?,
                )
                .await?;
            }
            let kept = match machine_expires {
                Some((id, until)) => {
                    p::renew_lease(c, i32::from(id), holder, instant(until)?).await? == 1
                }
                None => true,
            };
            (renewed, kept)
        }
    };
    Ok(HeartbeatReport {
        renewed,
        machine_kept,
    })
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeartbeatReport {
    /// The process row was still there.
    pub(crate) renewed: bool,
    /// The machine-id lease was still this process's.
    pub(crate) machine_kept: bool,
}

/// Leases the lowest machine id that is free: never leased, expired, or leased by a holder that
/// is dead. Runs at open (and again after a lease was lost), on the pool, in its own transaction.
pub(crate) async fn lease_machine_id(
    pool: &Pool,
    judge: &Judge,
    holder: &str,
    lease: Duration,
) -> Result<u16> {
    let mut tx = pool.begin_write().await?;
    // `(machine id, holder, expiry in ms)` of every lease.
    let rows: Vec<(i64, String, i64)> = match &mut tx.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::processes::leases(c)
            .await?
            .into_iter()
            .map(|r| (r.machine_id, r.holder, r.expires_at))
            .collect(),
        Conn::Postgres(c) => {
            // One leaser at a time across processes; released at commit.
            pattern_db_postgres::processes::xact_lock(c, MACHINE_LEASE_LOCK).await?;
            pattern_db_postgres::processes::leases(c)
                .await?
                .into_iter()
                .map(|r| {
                    (
                        i64::from(r.machine_id),
                        r.holder,
                        r.expires_at.timestamp_millis(),
                    )
                })
                .collect()
        }
    };
    let max = usize::from(crate::id::MAX_MACHINE_ID);
    let mut taken = vec![false; max + 1];
    let now = now_ms();
    let mut live = 0usize;
    for (id, owner, expires) in rows {
        let Some(slot) = usize::try_from(id).ok().filter(|i| *i <= max) else {
            continue;
        };
        if owner == holder {
            continue;
        }
        if expires > now && judge.status(&mut tx.conn(), &owner).await? == HolderStatus::Alive {
            taken[slot] = true;
            live += 1;
        }
    }
    let Some(free) = taken.iter().position(|t| !t) else {
        return Err(StorageError::MachineIdsExhausted { live }.into());
    };
    let until = now + lease_ms(lease);
    match &mut tx.conn() {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::processes::delete_leases(c, holder).await?;
            pattern_db_sqlite::processes::lease(c, free as i64, holder, until).await?;
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::processes::delete_leases(c, holder).await?;
            pattern_db_postgres::processes::lease(c, free as i32, holder, instant(until)?).await?;
        }
    }
    tx.commit().await?;
    Ok(free as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_dirs_sit_beside_sqlite_files() {
        assert_eq!(
            lock_dir_for("sqlite:///tmp/a%20b/x.db?mode=rwc"),
            Some(PathBuf::from("/tmp/a b/x.db.procs"))
        );
        assert_eq!(lock_dir_for("postgres://u@h/db"), None);
    }

    #[test]
    fn a_lock_file_is_held_while_its_handle_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_file(dir.path(), 7);
        let file = File::create(&path).unwrap();
        file.try_lock().unwrap();
        assert!(file_held(&path));
        file.unlock().unwrap();
        assert!(!file_held(&path));
        assert!(!path.exists(), "a dead process's file is tidied away");
        assert!(!file_held(&path));
    }
}
