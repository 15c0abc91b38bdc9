//! `pattern agent create|set-model|list|show|delete`. Instructions are kept in the agent's
//! metadata under `instructions`, its own model under `model` (`pattern::model::AgentModel`;
//! keys stay in the environment, never stored). Deleting needs `--yes`: it must never delete without that confirmation.

use pattern::model::AgentModel;
use pattern::{NewAgent, Pattern};
use serde::Serialize;
use serde_json::json;

use crate::cli::AgentCommand;
use crate::env::{Env, agent_named};
use crate::error::{CliError, Result};
use crate::output::{self, AgentView, BatchView};

pub(crate) async fn run(env: &Env, command: AgentCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = act(env, &pattern, command).await;
    pattern.close().await;
    result
}

/// `agent show` shape.
#[derive(Serialize)]
struct AgentDetail {
    #[serde(flatten)]
    agent: AgentView,
    blocks: Vec<String>,
    live_messages: i64,
    current_batch: Option<BatchView>,
    latest_batch: Option<BatchView>,
}

async fn act(env: &Env, pattern: &Pattern, command: AgentCommand) -> Result<()> {
    match command {
        AgentCommand::Create {
            name,
            instructions,
            model,
            base_url,
        } => {
            let model = model
                .map(|spec| AgentModel::parse(&spec, base_url))
                .transpose()?;
            let mut new = NewAgent::named(name);
            if let Some(text) = instructions {
                new.metadata = json!({ "instructions": text });
            }
            if let Some(model) = &model {
                new.metadata = AgentModel::store(Some(model), &new.metadata);
            }
            let org = crate::env::organization(pattern).await?;
            let agent = pattern.db().create_agent(new.in_organization(org)).await?;
            if env.json {
                output::json(&AgentView::from(&agent))
            } else {
                output::line(&format!("created agent {} ({})", agent.name, agent.id))
            }
        }
        AgentCommand::SetModel {
            name,
            model,
            base_url,
            default: _,
        } => {
            let model = model
                .map(|spec| AgentModel::parse(&spec, base_url))
                .transpose()?;
            let agent = agent_named(pattern, &name).await?;
            let metadata = AgentModel::store(model.as_ref(), &agent.metadata);
            let agent = pattern.db().set_agent_metadata(agent.id, metadata).await?;
            if env.json {
                return output::json(&AgentView::from(&agent));
            }
            output::line(&match model {
                Some(model) => format!("agent {} runs on {}", agent.name, model.spec()),
                None => format!("agent {} runs on the default model", agent.name),
            })
        }
        AgentCommand::List => {
            let org = crate::env::organization(pattern).await?;
            let agents = pattern.db().org_agents(org).await?;
            if env.json {
                let views: Vec<AgentView> = agents.iter().map(AgentView::from).collect();
                return output::json(&views);
            }
            if agents.is_empty() {
                return output::line("no agents");
            }
            for a in &agents {
                output::line(&format!(
                    "{:<24} {}  created {}",
                    a.name,
                    a.id,
                    a.created_at.format("%Y-%m-%d %H:%M:%S")
                ))?;
            }
            Ok(())
        }
        AgentCommand::Show { name } => {
            let agent = agent_named(pattern, &name).await?;
            let store = pattern.messages(agent.id);
            let blocks = pattern
                .memory()
                .all_blocks(agent.id)
                .await?
                .into_iter()
                .map(|b| b.label)
                .collect();
            let detail = AgentDetail {
                agent: AgentView::from(&agent),
                blocks,
                live_messages: store.count_live().await?,
                current_batch: store.current_batch().await?.as_ref().map(BatchView::from),
                latest_batch: store
                    .list_batches(None, 1)
                    .await?
                    .first()
                    .map(BatchView::from),
            };
            if env.json {
                return output::json(&detail);
            }
            let mut text = format!(
                "agent {}\n  id:            {}\n  created:       {}\n  blocks:        {}\n  live messages: {}",
                detail.agent.name,
                detail.agent.id,
                detail.agent.created_at,
                if detail.blocks.is_empty() {
                    "-".to_owned()
                } else {
                    detail.blocks.join(", ")
                },
                detail.live_messages
            );
            if let Some(i) = &detail.agent.instructions {
                text.push_str(&format!("\n  instructions:  {}", output::preview(i, 100)));
            }
            if let Some(b) = &detail.latest_batch {
                text.push_str(&format!("\n  latest batch:  {} ({})", b.id, b.state));
            }
            output::line(&text)
        }
        AgentCommand::Delete { name, yes } => {
            let agent = agent_named(pattern, &name).await?;
            if !yes {
                return Err(CliError::usage(format!(
                    "deleting agent `{name}` removes its history and memory for good: pass --yes \
                     to confirm"
                )));
            }
            pattern.db().delete_agent(agent.id).await?;
            if env.json {
                output::json(&json!({ "deleted": AgentView::from(&agent) }))
            } else {
                output::line(&format!("deleted agent {name}"))
            }
        }
    }
}
