//! `pattern session list|create|send|read|show|end`: one-to-one sessions of the agent-to-agent
//! protocol between agents of this process's organization (`--org`, default `local`): the
//! protocol's participants are the agents themselves. This
//! module must never bypass the protocol's rules (turns, participants, ended sessions): every
//! action goes through `pattern_protocol::Protocol`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use pattern::Pattern;
use pattern::db::Error as DbError;
use pattern::protocol::{
    AgentId, NewProtocolMessage, ProtocolMessage, Session, SessionId, SessionType,
};
use serde::Serialize;
use serde_json::Value;

use crate::cli::SessionCommand;
use crate::env::{Env, agent_named};
use crate::error::{CliError, Result};
use crate::output;

/// `session` shape.
#[derive(Serialize)]
struct SessionView {
    id: String,
    agent_a: String,
    agent_b: String,
    session_type: String,
    status: String,
    turn: Option<String>,
    created_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
}

/// `session_message` shape.
#[derive(Serialize)]
struct MessageView {
    id: String,
    session: Option<String>,
    from: String,
    to: Option<String>,
    message_type: String,
    content: Value,
    read_at: Option<DateTime<Utc>>,
    seq: String,
    created_at: DateTime<Utc>,
}

/// Protocol agent ids to the names shown (the Pattern agent's name, else the external id).
pub(crate) struct Names {
    cache: HashMap<AgentId, String>,
}

impl Names {
    pub(crate) fn new() -> Self {
        Self {
            cache: HashMap::new(),
        }
    }

    pub(crate) async fn of(&mut self, pattern: &Pattern, id: AgentId) -> Result<String> {
        if let Some(name) = self.cache.get(&id) {
            return Ok(name.clone());
        }
        let name = pattern.db().agent(id).await?.name;
        self.cache.insert(id, name.clone());
        Ok(name)
    }

    async fn session(&mut self, pattern: &Pattern, s: &Session) -> Result<SessionView> {
        let turn = match s.turn {
            Some(t) => Some(self.of(pattern, t).await?),
            None => None,
        };
        Ok(SessionView {
            id: s.id.to_string(),
            agent_a: self.of(pattern, s.agent_a).await?,
            agent_b: self.of(pattern, s.agent_b).await?,
            session_type: s.session_type.as_str().to_owned(),
            status: format!("{:?}", s.status).to_lowercase(),
            turn,
            created_at: s.created_at,
            ended_at: s.ended_at,
        })
    }

    async fn message(&mut self, pattern: &Pattern, m: &ProtocolMessage) -> Result<MessageView> {
        let to = match m.recipient {
            Some(r) => Some(self.of(pattern, r).await?),
            None => None,
        };
        Ok(MessageView {
            id: m.id.to_string(),
            session: m.session.map(|s| s.to_string()),
            from: self.of(pattern, m.sender).await?,
            to,
            message_type: m.message_type.clone(),
            content: m.content.clone(),
            read_at: m.read_at,
            seq: m.seq.to_string(),
            created_at: m.created_at,
        })
    }
}

/// The agent `name` of this process's organization: the protocol's participants are the agents
/// themselves.
pub(crate) async fn participant(pattern: &Pattern, name: &str) -> Result<pattern::Agent> {
    agent_named(pattern, name).await
}

fn session_id(text: &str) -> Result<SessionId> {
    text.parse::<uuid::Uuid>()
        .map(SessionId)
        .map_err(|_| CliError::usage(format!("`{text}` is not a session id (a UUID)")))
}

pub(crate) async fn run(env: &Env, command: SessionCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = act(env, &pattern, command).await;
    pattern.close().await;
    result
}

async fn act(env: &Env, pattern: &Pattern, command: SessionCommand) -> Result<()> {
    let protocol = pattern.protocol();
    let mut names = Names::new();
    match command {
        SessionCommand::List { agent } => {
            if let Some(name) = &agent {
                // An unknown agent is "not found" (exit 3), not an empty list.
                agent_named(pattern, name).await?;
            }
            let mut views = Vec::new();
            for c in protocol.active_conversations().await? {
                let view = names.session(pattern, &c.session).await?;
                if agent
                    .as_ref()
                    .is_none_or(|a| *a == view.agent_a || *a == view.agent_b)
                {
                    views.push(view);
                }
            }
            if env.json {
                return output::json(&views);
            }
            if views.is_empty() {
                return output::line("no live sessions");
            }
            for v in &views {
                print_session(env, v)?;
            }
            Ok(())
        }
        SessionCommand::Create { a, b, sync } => {
            let pa = participant(pattern, &a).await?;
            let pb = participant(pattern, &b).await?;
            let kind = if sync {
                SessionType::Sync
            } else {
                SessionType::Async
            };
            let session = protocol.open_session(pa.id, pb.id, kind).await?;
            let view = names.session(pattern, &session).await?;
            print_session(env, &view)
        }
        SessionCommand::Show { session } => {
            let s = protocol.session(session_id(&session)?).await?;
            let view = names.session(pattern, &s).await?;
            print_session(env, &view)
        }
        SessionCommand::End { session, by } => {
            let who = participant(pattern, &by).await?;
            let s = protocol.end_session(session_id(&session)?, who.id).await?;
            let view = names.session(pattern, &s).await?;
            print_session(env, &view)
        }
        SessionCommand::Send {
            session,
            from,
            message,
            raw,
            message_type,
        } => {
            let sender = participant(pattern, &from).await?;
            let new = if raw {
                NewProtocolMessage::from_json_str(message_type, &message)?
            } else {
                NewProtocolMessage::new(message_type, Value::String(message))
            };
            let id = session_id(&session)?;
            let stored = match protocol.send(id, sender.id, new).await {
                Ok(stored) => stored,
                Err(pattern::protocol::Error::Db(DbError::OutOfTurn { turn, .. })) => {
                    let holder = match turn {
                        Some(t) => names.of(pattern, t).await?,
                        None => "nobody".to_owned(),
                    };
                    return Err(CliError::conflict(format!(
                        "`{from}` cannot send in session {id}: it is not its turn (the turn is \
                         {holder}'s)"
                    )));
                }
                Err(e) => return Err(e.into()),
            };
            let view = names.message(pattern, &stored).await?;
            if env.json {
                output::json(&view)
            } else {
                output::line(&format!(
                    "sent {} from {} to {}",
                    view.id,
                    view.from,
                    view.to.as_deref().unwrap_or("-")
                ))
            }
        }
        SessionCommand::Read {
            session,
            agent,
            mark_read,
        } => {
            let (messages, reader) = match (session, agent) {
                (Some(s), None) => {
                    if mark_read {
                        return Err(CliError::usage("--mark-read needs --agent"));
                    }
                    (protocol.session_messages(session_id(&s)?).await?, None)
                }
                (None, Some(a)) => {
                    let p = participant(pattern, &a).await?;
                    (protocol.unread(p.id).await?, Some(p))
                }
                _ => {
                    return Err(CliError::usage(
                        "give either a session id or --agent NAME (its unread inbox)",
                    ));
                }
            };
            let mut views = Vec::with_capacity(messages.len());
            for m in &messages {
                views.push(names.message(pattern, m).await?);
            }
            if let (Some(p), true) = (reader, mark_read) {
                let ids: Vec<_> = messages.iter().map(|m| m.id).collect();
                protocol.mark_read(p.id, &ids).await?;
            }
            if env.json {
                return output::json(&views);
            }
            if views.is_empty() {
                return output::line("no messages");
            }
            for v in &views {
                let text = match &v.content {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                output::line(&format!(
                    "{} {} -> {} [{}]: {}",
                    v.created_at.format("%H:%M:%S"),
                    v.from,
                    v.to.as_deref().unwrap_or("-"),
                    v.message_type,
                    text
                ))?;
            }
            Ok(())
        }
    }
}

fn print_session(env: &Env, view: &SessionView) -> Result<()> {
    if env.json {
        return output::json(view);
    }
    output::line(&format!(
        "session {} ({}, {}): {} <-> {}{}",
        view.id,
        view.session_type,
        view.status,
        view.agent_a,
        view.agent_b,
        view.turn
            .as_ref()
            .map_or_else(String::new, |t| format!(", turn: {t}"))
    ))
}
