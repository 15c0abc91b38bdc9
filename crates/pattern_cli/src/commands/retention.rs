//! `pattern retention --dry-run|--apply`: the protocol's retention (archive old read messages,
//! delete long-ended sessions and meetings, their messages archived first), finished turns'
//! event logs older than the same age, and, when asked, each agent's own data
//! (`pattern_db::retention`: old abandoned or summarised batches, block versions, activity
//! events; one transaction per agent). This module must never change anything on `--dry-run`:
//! the protocol's dry run reports without writing, turns are only counted, and agents' retention
//! runs as a dry run.

use std::time::Duration;

use pattern::db::RetentionPolicy;
use pattern::db::retention::AgentRetention;

use crate::cli::RetentionArgs;
use crate::env::Env;
use crate::error::Result;
use crate::output;

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 24 * 60 * 60)
}

pub(crate) async fn run(env: &Env, args: RetentionArgs) -> Result<()> {
    let age = Duration::from_secs(u64::from(args.older_than_days) * 24 * 60 * 60);
    let agent_policy = AgentRetention {
        batches_older_than: args.batches_older_than_days.map(days),
        keep_block_versions: args.keep_block_versions,
        activity_older_than: args.activity_older_than_days.map(days),
        dry_run: !args.apply,
        ..AgentRetention::default()
    };
    let protocol_policy = RetentionPolicy {
        archive_messages_after: age,
        delete_ended_after: age,
        dry_run: !args.apply,
    };
    // A zero age or zero versions is refused before anything runs.
    agent_policy.check()?;
    protocol_policy.check()?;
    let per_agent = agent_policy.batches_older_than.is_some()
        || agent_policy.keep_block_versions.is_some()
        || agent_policy.activity_older_than.is_some();
    let (pattern, _config) = env.open().await?;
    let result = async {
        let mut agents = Vec::new();
        if per_agent {
            let org = crate::env::organization_id(pattern.db()).await?;
            let targets = match &args.agent {
                Some(name) => vec![pattern.db().agent_in_scope(Some(org), name).await?],
                None => pattern
                    .db()
                    .agents()
                    .await?
                    .into_iter()
                    .filter(|a| a.organization == org)
                    .collect(),
            };
            for agent in targets {
                let report = pattern
                    .db()
                    .retain_agent(agent.id, agent_policy.clone())
                    .await?;
                agents.push((agent.name, report));
            }
        }
        let report = pattern
            .protocol()
            .retention(protocol_policy)
            .await?;
        let cutoff =
            chrono::Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        let turns = if args.apply {
            pattern.db().prune_turns(cutoff).await?
        } else {
            pattern.db().prunable_turns(cutoff).await?
        };
        Ok::<_, crate::error::CliError>((report, turns, agents))
    }
    .await;
    pattern.close().await;
    let (report, turns, agents) = result?;
    if env.json {
        let mut value = serde_json::to_value(&report)
            .map_err(|e| crate::error::CliError::other(e.to_string()))?;
        value["deleted_turns"] = serde_json::json!(turns);
        value["agents"] = agents
            .iter()
            .map(|(name, r)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["name"] = serde_json::json!(name);
                v
            })
            .collect();
        return output::json(&value);
    }
    let would = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for (name, r) in &agents {
        output::line(&format!(
            "{name}: {would} {} batch(es) with {} message(s), {} block version(s), {} activity \
             event(s)",
            r.deleted_batches.len(),
            r.deleted_messages,
            r.deleted_block_versions,
            r.deleted_activity_events
        ))?;
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
