//! The schedule tools: `schedule_wakeup` (an agent schedules its own wakeup, once at a time or
//! on a cron expression), `list_schedules` and `cancel_schedule` (decision 0012).
//!
//! The rules are the database's (`pattern_db::schedule`): a bad expression, an unknown zone, a
//! time in the past or the cap of 100 live schedules per agent come back as error results the
//! model sees, with the field named, and nothing is stored. These tools must never schedule or
//! cancel for another agent than the caller, and never bypass the database's checks.

use std::fmt::Write as _;

use async_trait::async_trait;
use pattern_db::schedule::{NewSchedule, Schedule, ScheduleKind, When};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input as parse};

fn describe(s: &Schedule) -> String {
    let when = match s.kind {
        ScheduleKind::At => "once".to_owned(),
        ScheduleKind::Cron => format!(
            "cron `{}` ({})",
            s.cron.as_deref().unwrap_or_default(),
            s.time_zone
        ),
    };
    let name = s
        .name
        .as_deref()
        .map(|n| format!(" \"{n}\""))
        .unwrap_or_default();
    format!(
        "schedule {}{name}: {when}, next at {}: {}",
        s.id,
        s.next_at.to_rfc3339(),
        s.message
    )
}

fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(e.to_string())
}

/// `schedule_wakeup`: schedules a wakeup of the calling agent.
#[derive(Debug)]
pub struct ScheduleWakeup;

#[derive(Deserialize)]
struct WakeupInput {
    message: String,
    #[serde(default)]
    at: Option<String>,
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    tz: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[async_trait]
impl Tool for ScheduleWakeup {
    fn name(&self) -> &str {
        "schedule_wakeup"
    }
    fn description(&self) -> &str {
        "Wake yourself later with `message`: once `at` (RFC 3339) or on `cron` (in `tz`, \
         default UTC)."
    }
    fn input_schema(&self) -> Value {
        // Kept short (tool definitions share a small budget); `at` xor `cron` is checked by
        // `When::from_fields`, whose refusal names the field.
        json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "minLength": 1},
                "at": {"type": "string"},
                "cron": {"type": "string"},
                "tz": {"type": "string"},
                "name": {"type": "string"}
            },
            "required": ["message"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: WakeupInput = parse(self.name(), input)?;
        let when = When::from_fields(args.at.as_deref(), args.cron.as_deref(), args.tz.as_deref())
            .map_err(failed)?;
        let schedule = ctx
            .runtime
            .add_schedule(NewSchedule {
                message: args.message,
                when,
                name: args.name,
            })
            .await
            .map_err(failed)?;
        Ok(ToolOutput::text(format!(
            "scheduled: {}",
            describe(&schedule)
        )))
    }
}

/// `list_schedules`: the calling agent's live schedules.
#[derive(Debug)]
pub struct ListSchedules;

#[async_trait]
impl Tool for ListSchedules {
    fn name(&self) -> &str {
        "list_schedules"
    }
    fn description(&self) -> &str {
        "List your scheduled wakeups."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    async fn execute(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        let schedules = ctx.runtime.schedules().await.map_err(failed)?;
        if schedules.is_empty() {
            return Ok(ToolOutput::text("no schedules"));
        }
        let mut out = String::new();
        for s in &schedules {
            let _ = writeln!(out, "{}", describe(s));
        }
        Ok(ToolOutput::text(out))
    }
}

/// `cancel_schedule`: removes one of the calling agent's schedules.
#[derive(Debug)]
pub struct CancelSchedule;

#[derive(Deserialize)]
struct CancelInput {
    id: String,
}

#[async_trait]
impl Tool for CancelSchedule {
    fn name(&self) -> &str {
        "cancel_schedule"
    }
    fn description(&self) -> &str {
        "Cancel a scheduled wakeup by id."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: CancelInput = parse(self.name(), input)?;
        let id: i64 = args
            .id
            .parse()
            .map_err(|_| failed(format!("`{}` is not a schedule id", args.id)))?;
        let removed = ctx
            .runtime
            .remove_schedule(pattern_db::SnowflakeId(id))
            .await
            .map_err(failed)?;
        Ok(ToolOutput::text(format!(
            "cancelled: {}",
            describe(&removed)
        )))
    }
}
