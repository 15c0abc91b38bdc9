//! `pattern retention --dry-run|--apply`: the protocol's retention (archive old read messages,
//! delete long-ended sessions and meetings, their messages archived first). This module must
//! never change anything on `--dry-run`: the protocol's dry run reports without writing.

use std::time::Duration;

use pattern::db::RetentionPolicy;

use crate::cli::RetentionArgs;
use crate::env::Env;
use crate::error::Result;
use crate::output;

pub(crate) async fn run(env: &Env, args: RetentionArgs) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let age = Duration::from_secs(u64::from(args.older_than_days) * 24 * 60 * 60);
    let result = pattern
        .protocol()
        .retention(RetentionPolicy {
            archive_messages_after: age,
            delete_ended_after: age,
            dry_run: !args.apply,
        })
        .await;
    pattern.close().await;
    let report = result?;
    if env.json {
        return output::json(&report);
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
        "{verb} {} message(s); {del} {} session(s) and {} meeting(s); {} busy row(s) skipped",
        report.archived_messages.len(),
        report.deleted_sessions.len(),
        report.deleted_meetings.len(),
        report.skipped_busy
    ))
}
