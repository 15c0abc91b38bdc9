//! The retention archive (decision 0024): old batches written, before they are deleted, to a file
//! per pass under `DATA_DIR/archive/AGENT_ID/FIRST-LAST.jsonl`, one line per batch in the
//! `batch` section shape of `pattern export` (`{"section":"batch","data":{...}}`, messages in
//! sequence order). The file is written to a temporary name, fsynced, renamed and its directory
//! fsynced, so it exists whole or not at all; the batches are deleted only after that, by the
//! pass that the plan (`Database::plan_archive`) ties to exactly these batches. A pass that
//! crashed in between is finished by the next one, which writes the same file again (same
//! name, same content) and then deletes.
//!
//! A crash between creating and renaming the temporary file leaves it behind; a later write in
//! the same directory removes temporary files older than [`STALE_TMP`] (a writer finishes its
//! file in seconds).
//!
//! This module must never delete anything but its own stale temporary files, and never rename a
//! file it did not write completely.

use std::io::Write;
use std::path::{Path, PathBuf};

use pattern::AgentId;
use pattern::Pattern;
use pattern::db::BatchId;
use pattern::db::retention::{AgentRetention, AgentRetentionReport, BatchDisposal};

use crate::error::{CliError, Result, io};
use crate::transfer::{BatchRecord, MessageRecord, Section};

/// The archive root of a data directory.
pub(crate) fn root(data_dir: &Path) -> PathBuf {
    data_dir.join("archive")
}

/// Runs `pass` for `agent`: with [`BatchDisposal::Archive`] (and not a dry run), the batches
/// planned are written under `root` first. Returns the report and the file written, if any.
pub(crate) async fn retain(
    pattern: &Pattern,
    root: &Path,
    agent: AgentId,
    pass: AgentRetention,
) -> Result<(AgentRetentionReport, Option<PathBuf>)> {
    let mut file = None;
    if pass.batch_disposal == BatchDisposal::Archive
        && !pass.dry_run
        && let Some(age) = pass.batches_older_than
    {
        let planned = pattern.db().plan_archive(agent, age).await?;
        if !planned.is_empty() {
            file = Some(write(pattern, root, agent, &planned).await?);
        }
    }
    let report = pattern.db().retain_agent(agent, pass).await?;
    Ok((report, file))
}

async fn write(
    pattern: &Pattern,
    root: &Path,
    agent: AgentId,
    batches: &[BatchId],
) -> Result<PathBuf> {
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Err(CliError::other("an empty archive plan has no file"));
    };
    let store = pattern.messages(agent);
    let mut body = Vec::new();
    for id in batches {
        let b = store.get_batch(*id).await?;
        let line = Section::Batch(BatchRecord {
            id: b.info.id.get(),
            batch_type: b.info.batch_type,
            state: b.info.state,
            archived: b.info.archived,
            started_at: b.info.started_at,
            completed_at: b.info.completed_at,
            retried_at: b.info.retried_at,
            messages: b
                .messages
                .into_iter()
                .map(|m| MessageRecord {
                    role: m.role,
                    content: m.content,
                    created_at: m.created_at,
                })
                .collect(),
        });
        serde_json::to_writer(&mut body, &line).map_err(|e| CliError::other(e.to_string()))?;
        body.push(b'\n');
    }
    let dir = root.join(agent.to_string());
    let name = format!("{}-{}", first.get(), last.get());
    // The file work blocks: off the async workers (`pattern serve` runs this beside requests).
    tokio::task::spawn_blocking(move || write_file(&dir, &name, &body))
        .await
        .map_err(|e| CliError::other(format!("writing the archive file: {e}")))?
}

/// How old a temporary archive file must be before a later write removes it as a crashed
/// writer's leftover.
pub(crate) const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes temporary archive files (`.NAME.PID.tmp`) in `dir` last modified more than
/// [`STALE_TMP`] ago; returns how many. A file that cannot be removed is logged and left.
fn sweep_stale(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let now = std::time::SystemTime::now();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, &e))? {
        let entry = entry.map_err(|e| io(dir, &e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') && name.ends_with(".tmp")) {
            continue;
        }
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok());
        if age.is_some_and(|a| a > STALE_TMP) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!(
                    path = %entry.path().display(),
                    error = %e,
                    "could not remove a stale temporary archive file"
                ),
            }
        }
    }
    Ok(removed)
}

/// Writes `body` to `dir/name.jsonl` whole: a temporary file, fsynced, renamed, the directory
/// fsynced. Stale temporary files of crashed writers in `dir` are removed first.
fn write_file(dir: &Path, name: &str, body: &[u8]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, &e))?;
    let swept = sweep_stale(dir)?;
    if swept > 0 {
        tracing::info!(dir = %dir.display(), swept, "removed stale temporary archive files");
    }
    let path = dir.join(format!("{name}.jsonl"));
    // Several processes may finish the same plan: each writes its own temporary file.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, &e))?;
    f.write_all(body).map_err(|e| io(&tmp, &e))?;
    f.sync_all().map_err(|e| io(&tmp, &e))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, &e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, &e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    //! The archive file's own rules: whole or absent, leftovers of crashed writers removed.

    use super::*;

    #[test]
    fn a_write_removes_stale_temporary_files_and_keeps_fresh_ones() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".1-9.4242.tmp");
        let fresh = dir.path().join(".1-9.4343.tmp");
        let other = dir.path().join("notes.tmp");
        for p in [&stale, &fresh, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        let old = std::time::SystemTime::now() - STALE_TMP - std::time::Duration::from_secs(60);
        for p in [&stale, &other] {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        let path = write_file(dir.path(), "1-9", b"{}\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
        assert!(!stale.exists(), "a crashed writer's stale file is removed");
        assert!(fresh.exists(), "a file that may be a live writer's is kept");
        assert!(
            other.exists(),
            "only our own temporary files (dot names) are touched"
        );
        // Nothing else was left behind by this write.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 3, "{left:?}");
    }
}
