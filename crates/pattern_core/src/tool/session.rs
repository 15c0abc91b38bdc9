//! The session tool (decision 0020): `session_send` opens a session with another agent of the
//! caller's organization (`agent`, sync or async) and sends its first message, or sends into a
//! session the caller takes part in (`session`), and with `end` ends it. One tool, so the
//! built-in definitions stay inside a small local model's tool budget.
//!
//! Sessions opened here are answered by the agents themselves: each message becomes the
//! recipient's trigger through its durable queue, in the transaction that stores it. Every check
//! is the protocol's (organization walls, turns, limits, a session with oneself): a refusal is an
//! error result the model sees, and nothing is stored. This tool must never act for another
//! agent than the caller, nor resolve a name outside the caller's organization.

use async_trait::async_trait;
use pattern_db::{SessionId, SessionType};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input as parse};

/// Messages a sync session opened by the tool holds: enough for a real exchange, and a bound on
/// two agents answering each other for ever.
pub const SYNC_LIMIT: u64 = 10;

fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(e.to_string())
}

fn invalid(reason: impl Into<String>) -> ToolError {
    ToolError::InvalidInput {
        tool: "session_send".into(),
        reason: reason.into(),
    }
}

/// `session_send`: talk with another agent through the protocol.
#[derive(Debug)]
pub struct SessionSend;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendInput {
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    sync: bool,
    #[serde(default)]
    end: bool,
}

#[async_trait]
impl Tool for SessionSend {
    fn name(&self) -> &str {
        "session_send"
    }
    fn description(&self) -> &str {
        "Talk to another agent: `agent` opens a session (sync: strict turns, replies come \
         back), `session` continues one, end ends it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string"},
                "session": {"type": "string"},
                "message": {"type": "string"},
                "sync": {"type": "boolean"},
                "end": {"type": "boolean"}
            },
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: SendInput = parse(self.name(), input)?;
        let message = args.message.filter(|m| !m.trim().is_empty());
        match (args.agent, args.session) {
            (Some(agent), None) => {
                let Some(message) = message else {
                    return Err(invalid("a new session needs a first `message`"));
                };
                let (kind, limit) = if args.sync {
                    (SessionType::Sync, Some(SYNC_LIMIT))
                } else {
                    (SessionType::Async, None)
                };
                let (session, _) = ctx
                    .runtime
                    .open_session(&agent, kind, limit, Some(&message))
                    .await
                    .map_err(failed)?;
                if args.end {
                    ctx.runtime.end_session(session.id).await.map_err(failed)?;
                }
                Ok(ToolOutput::text(format!(
                    "sent; session {} ({kind}) with {agent}",
                    session.id
                )))
            }
            (None, Some(session)) => {
                let id = session
                    .trim()
                    .parse::<uuid::Uuid>()
                    .map(SessionId)
                    .map_err(|_| invalid(format!("`{session}` is not a session id")))?;
                if message.is_none() && !args.end {
                    return Err(invalid("give a `message`, or end: true"));
                }
                if let Some(message) = &message {
                    ctx.runtime
                        .send_into_session(id, message)
                        .await
                        .map_err(failed)?;
                }
                if args.end {
                    ctx.runtime.end_session(id).await.map_err(failed)?;
                }
                Ok(ToolOutput::text(match (message.is_some(), args.end) {
                    (true, true) => "sent; the session ended",
                    (true, false) => "sent",
                    _ => "the session ended",
                }))
            }
            _ => Err(invalid(
                "give either `agent` (a new session) or `session` (an id)",
            )),
        }
    }
}
