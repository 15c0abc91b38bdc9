//! `pattern approvals list|decide`: the approval requests of guarded tool calls (every agent's:
//! the CLI is the local operator), and answering one. An answer is the same conditional write
//! as `POST /v1/approvals/{id}`, so the waiting run learns it in whichever process runs it; an
//! answer to a request that is no longer pending exits 4, an unknown id 3. This module must
//! never decide a request by any other path than `Database::decide_approval`.

use pattern::SnowflakeId;
use pattern::db::{ApprovalDecision, ApprovalFilter, ApprovalState};

use crate::cli::ApprovalsCommand;
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::output::{self, ApprovalView};

pub(crate) async fn run(env: &Env, command: ApprovalsCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = async {
        match command {
            ApprovalsCommand::List { state, limit } => {
                if !(1..=100).contains(&limit) {
                    return Err(CliError::usage("--limit is 1 to 100"));
                }
                let state = match state.as_str() {
                    "all" => None,
                    other => Some(
                        other
                            .parse::<ApprovalState>()
                            .map_err(|e| CliError::usage(e.to_string()))?,
                    ),
                };
                let found = pattern
                    .db()
                    .approvals(None, ApprovalFilter { state, limit })
                    .await?;
                let views: Vec<ApprovalView> = found.iter().map(ApprovalView::from).collect();
                if env.json {
                    return output::json(&views);
                }
                if views.is_empty() {
                    return output::line("no approval requests");
                }
                for v in &views {
                    output::line(&format!(
                        "{:<20} {:<10} {:<16} agent {}  {}  {}",
                        v.id,
                        v.state,
                        v.tool,
                        v.agent_id,
                        v.requested_at.format("%Y-%m-%d %H:%M:%S"),
                        output::preview(&v.reason, 60)
                    ))?;
                }
                Ok(())
            }
            ApprovalsCommand::Decide {
                id,
                decision,
                reason,
            } => {
                let id: SnowflakeId = id.parse().map_err(|_| {
                    CliError::usage(format!("`{id}` is not an approval id (a decimal number)"))
                })?;
                let decision = parse_decision(&decision, reason)?;
                let decided = pattern
                    .db()
                    .decide_approval(None, id, decision, "cli")
                    .await?;
                let view = ApprovalView::from(&decided);
                if env.json {
                    return output::json(&view);
                }
                output::line(&format!("approval {} {}", view.id, view.state))
            }
        }
    }
    .await;
    pattern.close().await;
    result
}

fn parse_decision(decision: &str, reason: Option<String>) -> Result<ApprovalDecision> {
    match decision {
        "approve" if reason.is_some() => Err(CliError::usage("--reason goes with `deny` only")),
        "approve" => Ok(ApprovalDecision::Approve),
        "deny" => Ok(ApprovalDecision::Deny {
            reason: reason.unwrap_or_default(),
        }),
        other => Err(CliError::usage(format!(
            "the decision is `approve` or `deny`, not `{other}`"
        ))),
    }
}
