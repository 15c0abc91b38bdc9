//! `pattern session list|create|send|read|show|end`: one-to-one sessions of the agent-to-agent
//! protocol between agents of this process's organization (`--org`, default `local`): the
//! protocol's participants are the agents themselves. This
//! module must never bypass the protocol's rules (turns, participants, ended sessions): every
//! action goes through `pattern_protocol::Protocol`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
    /// `inbox` or `agents` (the agents answer themselves).
    delivery: String,
    message_limit: Option<u64>,
    messages_sent: u64,
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
            delivery: s.delivery.as_str().to_owned(),
            message_limit: s.message_limit,
            messages_sent: s.messages_sent,
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
        SessionCommand::Start {
            from,
            to,
            message,
            sync,
            max_messages,
            wait_seconds,
        } => {
            let start = Start {
                from,
                to,
                message,
                sync,
                max_messages,
                wait: Duration::from_secs(wait_seconds),
            };
            start.run(env, pattern, &mut names).await
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
                Err(pattern::protocol::Error::Db(DbError::Protocol(
                    pattern::db::ProtocolError::OutOfTurn { turn, .. },
                ))) => {
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

/// `session start`: a conversation the agents hold themselves (decision 0020).
struct Start {
    from: String,
    to: String,
    message: String,
    sync: bool,
    max_messages: Option<u64>,
    wait: Duration,
}

/// Messages of a sync session `session start` opens when `--max-messages` is not given.
const DEFAULT_SYNC_MESSAGES: u64 = 4;
/// How long an async session must stay quiet (nothing queued or running) before `session
/// start` stops waiting.
const QUIET: Duration = Duration::from_secs(2);

impl Start {
    async fn run(self, env: &Env, p: &Pattern, names: &mut Names) -> Result<()> {
        if self.max_messages == Some(0) {
            return Err(CliError::usage("--max-messages must be at least 1"));
        }
        let a = participant(p, &self.from).await?;
        let b = participant(p, &self.to).await?;
        if a.id == b.id {
            return Err(CliError::usage(
                "an agent cannot hold a session with itself",
            ));
        }
        let model =
            crate::commands::chat::model(env, pattern::core::local_server::LocalModel::Qwen)
                .await?;
        let tools = Arc::new(pattern::core::tool::builtin::registry()?);
        let agents =
            crate::commands::meeting::conversing_agents(env, p, &model, vec![a, b.clone()], tools)
                .await?;
        let processor = p.queue_processor(Duration::from_millis(250));
        for agent in &agents {
            agent.recover().await?;
            processor.register(agent.clone()).await;
        }
        let delivering = processor.clone().spawn();
        let (kind, limit) = if self.sync {
            (
                SessionType::Sync,
                Some(self.max_messages.unwrap_or(DEFAULT_SYNC_MESSAGES)),
            )
        } else {
            (SessionType::Async, self.max_messages)
        };
        let opened = agents[0]
            .runtime_arc()
            .open_session(&b.name, kind, limit, Some(&self.message))
            .await;
        let followed = match opened {
            Ok((session, _)) => self.follow(env, p, names, &agents, session.id).await,
            Err(e) => Err(e.into()),
        };
        processor.stop();
        let _ = delivering.await;
        for agent in &agents {
            let _ = pattern::core::db_agent::wait_idle(agent, Duration::from_secs(10)).await;
        }
        drop(agents);
        drop(model);
        let (id, ended) = followed?;
        let messages = p.protocol().session_messages(id).await?;
        let mut views = Vec::with_capacity(messages.len());
        for m in &messages {
            views.push(names.message(p, m).await?);
        }
        if env.json {
            return output::json(&serde_json::json!({
                "session": id.to_string(),
                "ended": ended,
                "messages": views,
            }));
        }
        output::line(&format!(
            "\ntranscript of session {id} ({}):",
            if ended { "ended" } else { "still live" }
        ))?;
        for v in &views {
            output::line(&format!(
                "{} -> {}: {}",
                v.from,
                v.to.as_deref().unwrap_or("-"),
                pattern::db::content_text(&v.content)
            ))?;
        }
        Ok(())
    }

    /// Prints each message as it arrives (stderr) until the session ended and nothing is queued
    /// or running, an async session stayed quiet for [`QUIET`], the wait ran out, or Ctrl-C.
    /// Returns the session and whether it ended.
    async fn follow(
        &self,
        env: &Env,
        p: &Pattern,
        names: &mut Names,
        agents: &[Arc<pattern::core::DatabaseAgent>],
        id: SessionId,
    ) -> Result<(SessionId, bool)> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut interrupts = crate::interrupt::Interrupts::new()?;
        let mut shown = 0;
        let mut quiet_since: Option<tokio::time::Instant> = None;
        eprintln!("session {id}: {} -> {}", self.from, self.to);
        loop {
            let messages = p.protocol().session_messages(id).await?;
            for m in messages.iter().skip(shown) {
                let v = names.message(p, m).await?;
                if env.json {
                    eprintln!("{}", serde_json::to_string(&v).unwrap_or_default());
                } else {
                    eprintln!(
                        "{} -> {}: {}",
                        v.from,
                        v.to.as_deref().unwrap_or("-"),
                        pattern::db::content_text(&v.content)
                    );
                }
            }
            shown = messages.len();
            let session = p.protocol().session(id).await?;
            let mut busy = false;
            for agent in agents {
                busy |= agent.is_running()
                    || !p
                        .db()
                        .pending_queue(agent.runtime_arc().agent_id())
                        .await?
                        .is_empty();
            }
            let now = tokio::time::Instant::now();
            if busy {
                quiet_since = None;
            } else if !session.is_live() {
                return Ok((id, true));
            } else if quiet_since.is_some_and(|q| now.duration_since(q) >= QUIET) {
                eprintln!("the session is quiet: nothing is queued or running");
                return Ok((id, false));
            } else if quiet_since.is_none() {
                quiet_since = Some(now);
            }
            if now >= deadline {
                eprintln!(
                    "stopped waiting after {} s; the session and its queued turns stay",
                    self.wait.as_secs()
                );
                return Ok((id, !session.is_live()));
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                () = interrupts.recv() => {
                    for agent in agents {
                        agent.cancel_running("session start stopped by Ctrl-C");
                    }
                    return Err(CliError::interrupted("session start stopped"));
                }
            }
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
