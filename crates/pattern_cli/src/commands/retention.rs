//! `pattern retention --dry-run|--apply`: the protocol's retention (archive old read messages,
//! delete long-ended sessions and meetings, their messages archived first) and finished turns'
//! event logs older than the same age. This module must never change anything on `--dry-run`:
//! the protocol's dry run reports without writing, and turns are only counted.

use std::time::Duration;

use pattern::db::RetentionPolicy;

use crate::cli::RetentionArgs;
use crate::env::Env;
use crate::error::Result;
use crate::output;

pub(crate) async fn run(env: &Env, args: RetentionArgs) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let age = Duration::from_secs(u64::from(args.older_than_days) * 24 * 60 * 60);
    let result = async {
        let report = pattern
            .protocol()
            .retention(RetentionPolicy {
                archive_messages_after: age,
                delete_ended_after: age,
                dry_run: !args.apply,
            })
            .await?;
        let cutoff =
            chrono::Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        let turns = if args.apply {
            pattern.db().prune_turns(cutoff).await?
        } else {
            pattern.db().prunable_turns(cutoff).await?
        };
        Ok::<_, crate::error::CliError>((report, turns))
    }
    .await;
    pattern.close().await;
    let (report, turns) = result?;
    if env.json {
        let mut value = serde_json::to_value(&report)
            .map_err(|e| crate::error::CliError::other(e.to_string()))?;
        value["deleted_turns"] = serde_json::json!(turns);
        return output::json(&value);
    }
    let verb = if report.dry_run {
        "would archive"
    } else {
        "archived"
    };
    let del = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    output::line(&format!(
        "{verb} {} message(s); {del} {} session(s), {} meeting(s) and {turns} finished turn(s); \
         {} busy row(s) skipped",
        report.archived_messages.len(),
        report.deleted_sessions.len(),
        report.deleted_meetings.len(),
        report.skipped_busy
    ))
}
