//! The meeting tools an agent gets while a [`crate::meeting::MeetingDriver`] runs its turns:
//! `meeting_pass` (end its turn without speaking), `meeting_leave` (leave the meeting) and, for
//! the host, `meeting_end` and (selector meetings) `meeting_choose` (who speaks after it).
//!
//! Each acts on the meeting in which the calling agent holds the turn now (read from the
//! database, never from the model's words), through the protocol's own checks: another agent's
//! turn, a meeting the caller does not host, or no meeting at all come back as error results the
//! model sees, and nothing changes. These tools must never act for another agent than the
//! caller, nor on a meeting where it is not the current speaker.

use async_trait::async_trait;
use pattern_protocol::store::Store;
use pattern_protocol::{Meeting, MeetingStatus};
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// The meeting in which the calling agent holds the turn now.
async fn my_turn(ctx: &ToolContext) -> Result<Meeting, ToolError> {
    let me = ctx.runtime.agent_id();
    let meetings = Store::new(ctx.runtime.database())
        .active_meetings()
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    meetings
        .into_iter()
        .map(|m| m.meeting)
        .find(|m| m.status == MeetingStatus::Active && m.speaker == Some(me))
        .ok_or_else(|| ToolError::Failed("it is not your turn in any meeting".into()))
}

fn no_input() -> Value {
    json!({"type": "object", "properties": {}})
}

fn refused(e: pattern_db::Error) -> ToolError {
    ToolError::Failed(e.to_string())
}

/// What a meeting tool does to the meeting whose turn the caller holds.
#[derive(Debug, Clone, Copy)]
enum Action {
    Pass,
    Leave,
    End,
}

/// Runs `action` for the caller in the meeting whose turn it holds, through the protocol's
/// checks; returns what the model is told.
async fn act(ctx: &ToolContext, action: Action) -> Result<ToolOutput, ToolError> {
    let meeting = my_turn(ctx).await?;
    let me = ctx.runtime.agent_id();
    let store = Store::new(ctx.runtime.database());
    let said = match action {
        Action::Pass => store
            .pass_turn(meeting.id, me)
            .await
            .map(|_| "you passed; the turn moved on"),
        Action::Leave => store
            .leave_meeting(meeting.id, me)
            .await
            .map(|_| "you left the meeting"),
        Action::End => {
            if meeting.host != me {
                return Err(ToolError::Failed(
                    "only the meeting's host can end it".into(),
                ));
            }
            store
                .end_meeting(meeting.id, me)
                .await
                .map(|_| "you ended the meeting")
        }
    };
    said.map(ToolOutput::text).map_err(refused)
}

/// `meeting_pass`: ends the caller's turn without speaking.
#[derive(Debug)]
pub struct MeetingPass;

#[async_trait]
impl Tool for MeetingPass {
    fn name(&self) -> &str {
        "meeting_pass"
    }
    fn description(&self) -> &str {
        "Pass your meeting turn without speaking."
    }
    fn input_schema(&self) -> Value {
        no_input()
    }
    async fn execute(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        act(&ctx, Action::Pass).await
    }
}

/// `meeting_leave`: the caller leaves the meeting whose turn it holds.
#[derive(Debug)]
pub struct MeetingLeave;

#[async_trait]
impl Tool for MeetingLeave {
    fn name(&self) -> &str {
        "meeting_leave"
    }
    fn description(&self) -> &str {
        "Leave the meeting (you will not speak in it again)."
    }
    fn input_schema(&self) -> Value {
        no_input()
    }
    async fn execute(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        act(&ctx, Action::Leave).await
    }
}

/// `meeting_end`: the host ends the meeting whose turn it holds.
#[derive(Debug)]
pub struct MeetingEnd;

#[async_trait]
impl Tool for MeetingEnd {
    fn name(&self) -> &str {
        "meeting_end"
    }
    fn description(&self) -> &str {
        "End the meeting (host only)."
    }
    fn input_schema(&self) -> Value {
        no_input()
    }
    async fn execute(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        act(&ctx, Action::End).await
    }
}

/// `meeting_choose`: the host of a selector meeting names who speaks after its turn.
#[derive(Debug)]
pub struct MeetingChoose;

#[async_trait]
impl Tool for MeetingChoose {
    fn name(&self) -> &str {
        "meeting_choose"
    }
    fn description(&self) -> &str {
        "Host of a selector meeting: name the participant who speaks after you."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"agent": {"type": "string", "minLength": 1}},
            "required": ["agent"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let name =
            input
                .get("agent")
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::InvalidInput {
                    tool: self.name().to_owned(),
                    reason: "`agent` (a name) is required".into(),
                })?;
        let meeting = my_turn(&ctx).await?;
        let me = ctx.runtime.agent_id();
        let db = ctx.runtime.database();
        let org = db.agent_organization(me).await.map_err(refused)?;
        // Names resolve only inside the caller's organization: another one's agent is unknown.
        let next = db.agent_in_scope(Some(org), name).await.map_err(refused)?;
        Store::new(db)
            .choose_speaker(meeting.id, me, next.id)
            .await
            .map_err(refused)?;
        Ok(ToolOutput::text(format!("{name} speaks after you")))
    }
}

/// The registry of an agent taking part in meetings: the meeting tools, memory and recall, and
/// `send_message`; not the schedule tools or `memory_undo`, so the definitions stay inside the
/// small tool budget of a local model's window.
pub fn registry() -> crate::Result<super::ToolRegistry> {
    use std::sync::Arc;

    use super::builtin::{MemoryAppend, MemoryInsert, MemoryReplace, SendMessage};
    use super::recall::{ArchivalInsert, ArchivalSearch, Search};
    let mut tools = super::ToolRegistry::new();
    let all: [Arc<dyn Tool>; 11] = [
        Arc::new(MeetingPass),
        Arc::new(MeetingLeave),
        Arc::new(MeetingEnd),
        Arc::new(MeetingChoose),
        Arc::new(MemoryAppend),
        Arc::new(MemoryReplace),
        Arc::new(MemoryInsert),
        Arc::new(SendMessage),
        Arc::new(ArchivalInsert),
        Arc::new(ArchivalSearch),
        Arc::new(Search),
    ];
    for tool in all {
        tools.register(tool)?;
    }
    Ok(tools)
}
