//! `pattern retention --dry-run|--apply`: the protocol's retention (archive old read messages,
//! delete long-ended sessions and meetings, their messages archived first), finished turns'
//! event logs older than the same age, and each agent's own data (`pattern_db::retention`: old
//! abandoned or summarised batches, deleted or archived to a file first (`crate::archive`),
//! block versions, activity events; one transaction per agent): with a per-kind flag, that
//! policy for the agents named (or all of the organization); without one, every agent's stored
//! policy. `pattern retention policy set|show|clear` stores them. This module must never change
//! anything on `--dry-run`: the protocol's dry run reports without writing, turns are only
//! counted, agents' retention runs as a dry run and no archive file is written.

use std::time::Duration;

use pattern::db::retention::{AgentRetention, BatchDisposal, RetentionSettings};
use pattern::protocol::RetentionPolicy;
use pattern::{Agent, Pattern};

use crate::cli::{PolicyCommand, RetentionArgs, RetentionCommand};
use crate::env::{Env, agent_named};
use crate::error::{CliError, Result};
use crate::output;

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 24 * 60 * 60)
}

/// The agents of the organization, or the one named.
async fn targets(pattern: &Pattern, agent: Option<&str>) -> Result<Vec<Agent>> {
    let org = crate::env::organization_id(pattern.db()).await?;
    Ok(match agent {
        Some(name) => vec![pattern.db().agent_in_scope(Some(org), name).await?],
        None => pattern
            .db()
            .agents()
            .await?
            .into_iter()
            .filter(|a| a.organization == org)
            .collect(),
    })
}

pub(crate) async fn run(env: &Env, args: RetentionArgs) -> Result<()> {
    if let Some(RetentionCommand::Policy(command)) = args.command {
        return policy(env, command).await;
    }
    let age = days(args.older_than_days);
    let given = AgentRetention {
        batches_older_than: args.batches_older_than_days.map(days),
        batch_disposal: if args.archive {
            BatchDisposal::Archive
        } else {
            BatchDisposal::Delete
        },
        keep_block_versions: args.keep_block_versions,
        activity_older_than: args.activity_older_than_days.map(days),
        dry_run: !args.apply,
    };
    let protocol_policy = RetentionPolicy {
        archive_messages_after: age,
        delete_ended_after: age,
        dry_run: !args.apply,
    };
    // A zero age or zero versions is refused before anything runs.
    given.check()?;
    protocol_policy.check()?;
    if args.archive && given.batches_older_than.is_none() {
        return Err(CliError::usage(
            "--archive needs --batches-older-than-days (a stored policy says it itself)",
        ));
    }
    let flags = given.batches_older_than.is_some()
        || given.keep_block_versions.is_some()
        || given.activity_older_than.is_some();
    let (pattern, _config) = env.open().await?;
    let archive_root = crate::archive::root(&env.data_dir);
    let result = async {
        let mut agents = Vec::new();
        for agent in targets(&pattern, args.agent.as_deref()).await? {
            // The flags override for this run; without them each agent's stored policy.
            let pass = if flags {
                given.clone()
            } else {
                match pattern.db().retention_policy(agent.id).await? {
                    Some(stored) => stored.settings.to_pass(!args.apply),
                    None => continue,
                }
            };
            let (report, file) =
                crate::archive::retain(&pattern, &archive_root, agent.id, pass).await?;
            agents.push((agent.name, report, file));
        }
        // The search log keeps only what its followers have not applied yet.
        let search_changes = if args.apply {
            pattern.db().prune_applied_search_changes().await?
        } else {
            0
        };
        let report = pattern.protocol().retention(protocol_policy).await?;
        let cutoff =
            chrono::Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        let turns = if args.apply {
            pattern.db().prune_turns(cutoff).await?
        } else {
            pattern.db().prunable_turns(cutoff).await?
        };
        Ok::<_, CliError>((report, turns, agents, search_changes))
    }
    .await;
    pattern.close().await;
    let (report, turns, agents, search_changes) = result?;
    if env.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| CliError::other(e.to_string()))?;
        value["deleted_turns"] = serde_json::json!(turns);
        value["pruned_search_changes"] = serde_json::json!(search_changes);
        let mut list = Vec::new();
        for (name, r, file) in &agents {
            let mut v = serde_json::to_value(r).map_err(|e| CliError::other(e.to_string()))?;
            v["name"] = serde_json::json!(name);
            v["archive_file"] = serde_json::json!(file);
            list.push(v);
        }
        value["agents"] = serde_json::Value::Array(list);
        return output::json(&value);
    }
    let would = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for (name, r, file) in &agents {
        let archived = match (r.batch_disposal, file) {
            (BatchDisposal::Archive, Some(f)) => format!(" (archived to {})", f.display()),
            (BatchDisposal::Archive, None) if !r.deleted_batches.is_empty() => {
                " (archived first)".to_owned()
            }
            _ => String::new(),
        };
        output::line(&format!(
            "{name}: {would} {} batch(es) with {} message(s){archived}, {} superseded \
             summar(ies), {} block version(s), {} activity event(s)",
            r.deleted_batches.len(),
            r.deleted_messages,
            r.deleted_summaries,
            r.deleted_block_versions,
            r.deleted_activity_events
        ))?;
    }
    let verb = if report.dry_run {
        "would archive"
    } else {
        "archived"
    };
    output::line(&format!(
        "{verb} {} message(s); {would} {} session(s), {} meeting(s) and {turns} finished turn(s); \
         {} busy row(s) skipped",
        report.archived_messages.len(),
        report.deleted_sessions.len(),
        report.deleted_meetings.len(),
        report.skipped_busy
    ))
}

/// What `policy show` prints for an agent.
fn describe(s: &RetentionSettings) -> String {
    let mut parts = Vec::new();
    if let Some(d) = s.batches_older_than_days {
        let how = match s.batch_disposal {
            BatchDisposal::Archive => "archived, then deleted",
            _ => "deleted",
        };
        parts.push(format!("batches older than {d} day(s) {how}"));
    }
    if let Some(k) = s.keep_block_versions {
        parts.push(format!("last {k} block version(s) and one a day kept"));
    }
    if let Some(d) = s.activity_older_than_days {
        parts.push(format!("activity older than {d} day(s) deleted"));
    }
    parts.join("; ")
}

async fn policy(env: &Env, command: PolicyCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = async {
        match command {
            PolicyCommand::Set {
                agent,
                batches_older_than_days,
                archive,
                keep_block_versions,
                activity_older_than_days,
            } => {
                let settings = RetentionSettings {
                    batches_older_than_days,
                    batch_disposal: if archive {
                        BatchDisposal::Archive
                    } else {
                        BatchDisposal::Delete
                    },
                    keep_block_versions,
                    activity_older_than_days,
                };
                let agent = agent_named(&pattern, &agent).await?;
                let stored = pattern
                    .db()
                    .set_retention_policy(agent.id, settings)
                    .await?;
                Ok((agent.name, Some(stored), None))
            }
            PolicyCommand::Show { agent } => {
                let agent = agent_named(&pattern, &agent).await?;
                let stored = pattern.db().retention_policy(agent.id).await?;
                Ok((agent.name, stored, None))
            }
            PolicyCommand::Clear { agent } => {
                let agent = agent_named(&pattern, &agent).await?;
                let cleared = pattern.db().clear_retention_policy(agent.id).await?;
                Ok::<_, CliError>((agent.name, None, Some(cleared)))
            }
        }
    }
    .await;
    pattern.close().await;
    let (name, stored, cleared) = result?;
    if let Some(cleared) = cleared {
        if env.json {
            return output::json(&serde_json::json!({ "agent": name, "cleared": cleared }));
        }
        return output::line(&if cleared {
            format!("{name}: retention policy cleared")
        } else {
            format!("{name}: had no retention policy")
        });
    }
    if env.json {
        return output::json(&stored);
    }
    output::line(&match stored {
        Some(s) => format!("{name}: {}", describe(&s.settings)),
        None => format!("{name}: no retention policy (nothing of its own is pruned)"),
    })
}
