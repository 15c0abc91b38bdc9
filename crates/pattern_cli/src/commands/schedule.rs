//! `pattern schedule add|list|remove`: an agent's schedules (decision 0012). The rules (a valid
//! cron expression and zone, a time not in the past, the cap per agent) are the database's; this
//! module only maps arguments onto them and must never fire a schedule (`pattern serve` does).

use std::collections::HashMap;

use pattern::SnowflakeId;
use pattern::db::schedule::{NewSchedule, Schedule, When};
use pattern_api::views::ScheduleView;

use crate::cli::ScheduleCommand;
use crate::env::{Env, agent};
use crate::error::{CliError, Result};
use crate::output;

fn text_line(v: &ScheduleView) -> String {
    let when = match &v.cron {
        Some(cron) => format!("cron `{cron}` {}", v.tz),
        None => "once".to_owned(),
    };
    format!(
        "{:<20} {:<12} next {}  {:<28} {}{}",
        v.id,
        v.agent,
        v.next_at.format("%Y-%m-%d %H:%M:%S UTC"),
        when,
        v.name
            .as_deref()
            .map(|n| format!("[{n}] "))
            .unwrap_or_default(),
        output::preview(&v.message, 60)
    )
}

pub(crate) async fn run(env: &Env, command: ScheduleCommand) -> Result<()> {
    let (pattern, config) = env.open().await?;
    let result = async {
        match command {
            ScheduleCommand::Add {
                agent: arg,
                at,
                cron,
                tz,
                name,
                message,
            } => {
                let a = agent(&pattern, &config, &arg).await?;
                let when = When::from_fields(at.as_deref(), cron.as_deref(), tz.as_deref())?;
                let s = pattern
                    .db()
                    .add_schedule(
                        a.id,
                        NewSchedule {
                            message,
                            when,
                            name,
                        },
                    )
                    .await?;
                let view = ScheduleView::new(&s, &a.name);
                if env.json {
                    return output::json(&view);
                }
                output::line(&format!(
                    "schedule {} for {}: next at {}",
                    view.id,
                    a.name,
                    view.next_at.to_rfc3339()
                ))
            }
            ScheduleCommand::List { agent: name } => {
                let schedules: Vec<Schedule> = match &name {
                    Some(name) => {
                        let a = crate::env::agent_named(&pattern, name).await?;
                        pattern.db().schedules(a.id).await?
                    }
                    None => pattern.db().all_schedules().await?,
                };
                let mut names = HashMap::new();
                let mut views = Vec::with_capacity(schedules.len());
                for s in &schedules {
                    if let std::collections::hash_map::Entry::Vacant(slot) = names.entry(s.agent_id)
                    {
                        slot.insert(pattern.db().agent(s.agent_id).await?.name);
                    }
                    let agent_name = names.get(&s.agent_id).map_or("", String::as_str);
                    views.push(ScheduleView::new(s, agent_name));
                }
                if env.json {
                    return output::json(&views);
                }
                if views.is_empty() {
                    return output::line("no schedules");
                }
                for v in &views {
                    output::line(&text_line(v))?;
                }
                Ok(())
            }
            ScheduleCommand::Remove { id } => {
                let sid: SnowflakeId = id.parse().map_err(|_| {
                    CliError::usage(format!("`{id}` is not a schedule id (a decimal number)"))
                })?;
                let s = pattern.db().schedule(sid).await?;
                let removed = pattern.db().remove_schedule(s.agent_id, sid).await?;
                let a = pattern.db().agent(removed.agent_id).await?;
                let view = ScheduleView::new(&removed, &a.name);
                if env.json {
                    return output::json(&serde_json::json!({ "removed": view }));
                }
                output::line(&format!("removed schedule {}", view.id))
            }
        }
    }
    .await;
    pattern.close().await;
    result
}
