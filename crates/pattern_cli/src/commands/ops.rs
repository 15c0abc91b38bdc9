//! Operator commands: `pattern recover` and `pattern migrate up|down|status`. `migrate` opens
//! the database without migrating it first; `down` needs `--yes`. This module must never revert
//! or abandon anything the operator did not ask for.

use pattern::RecoveryScope;
use pattern::db::MigrationStatus;
use serde::Serialize;

use crate::cli::{MigrateCommand, RecoverArgs};
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::output::{self, BatchView, MessageView};

/// One abandoned batch in `recover`'s answer.
#[derive(Serialize)]
struct Recovered {
    agent: String,
    agent_id: String,
    batch: BatchView,
    trigger: MessageView,
}

pub(crate) async fn recover(env: &Env, args: RecoverArgs) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = async {
        let scope = if args.all_open {
            RecoveryScope::AllOpen
        } else {
            RecoveryScope::ExpiredLeases
        };
        let abandoned = pattern.db().recover_all(scope).await?;
        let mut report = Vec::with_capacity(abandoned.len());
        for a in &abandoned {
            let name = match pattern.db().agent(a.batch.agent_id).await {
                Ok(agent) => agent.name,
                Err(_) => String::new(),
            };
            report.push(Recovered {
                agent: name,
                agent_id: a.batch.agent_id.to_string(),
                batch: BatchView::from(&a.batch),
                trigger: MessageView::from(&a.trigger),
            });
        }
        if env.json {
            return output::json(&report);
        }
        if report.is_empty() {
            return output::line(if args.all_open {
                "nothing to recover: no open batches"
            } else {
                "nothing to recover: no open batch has an expired run lease (--all-open abandons \
                 every open batch)"
            });
        }
        output::line(&format!("abandoned {} batch(es):", report.len()))?;
        for r in &report {
            output::line(&format!(
                "  {} batch {} ({} msgs), trigger: {}",
                r.agent,
                r.batch.id,
                r.batch.message_count,
                output::preview(&r.trigger.text, 70)
            ))?;
        }
        Ok(())
    }
    .await;
    pattern.close().await;
    result
}

pub(crate) async fn migrate(env: &Env, command: MigrateCommand) -> Result<()> {
    let db = env.open_for_migrations().await?;
    let result = async {
        match command {
            MigrateCommand::Up => db.migrate_up().await?,
            MigrateCommand::Down { to, yes } => {
                if !yes {
                    return Err(CliError::usage(
                        "reverting migrations destroys stored data: pass --yes to confirm",
                    ));
                }
                if to < 0 {
                    return Err(CliError::usage("--to must be 0 or a migration version"));
                }
                db.migrate_down(to).await?;
            }
            MigrateCommand::Status => {}
        }
        let status: Vec<MigrationStatus> = db.migration_status().await?;
        if env.json {
            return output::json(&status);
        }
        for s in &status {
            output::line(&format!(
                "{:>4} {:<28} {}",
                s.version,
                s.description,
                if s.applied { "applied" } else { "pending" }
            ))?;
        }
        Ok(())
    }
    .await;
    db.close().await;
    result
}
