//! `pattern meeting create|invite|join|start|speak|pass|leave|end|show|events`: meetings of
//! several Pattern agents over `pattern_protocol` (each agent takes part as its protocol agent
//! `agent:NAME`, created on first use, as in `session`). This module must never bypass the
//! protocol's rules (host-only actions, turns, ended meetings): every action goes through
//! `pattern_protocol::Protocol`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pattern::Pattern;
use pattern::protocol::{Meeting, MeetingEvent, MeetingId, MeetingUpdate, NewProtocolMessage};
use serde::Serialize;
use serde_json::Value;

use crate::cli::MeetingCommand;
use crate::commands::session::{Names, participant};
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::interrupt::Interrupts;
use crate::output;

/// `meeting` shape.
#[derive(Serialize)]
struct MeetingView {
    id: String,
    host: String,
    status: Value,
    speaker: Option<String>,
    turn_seconds: Option<u64>,
    turn_deadline: Option<DateTime<Utc>>,
    last_event_seq: u64,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
}

/// `meeting_event` shape.
#[derive(Serialize)]
struct EventView {
    seq: u64,
    event_type: Value,
    agent: Option<String>,
    data: Option<Value>,
    created_at: DateTime<Utc>,
}

/// `meeting_participant` shape.
#[derive(Serialize)]
struct ParticipantView {
    agent: String,
    status: Value,
    join_order: Option<u64>,
}

/// `meeting_message` shape.
#[derive(Serialize)]
struct MessageView {
    id: String,
    from: String,
    message_type: String,
    content: Value,
    created_at: DateTime<Utc>,
}

/// `meeting_update` shape: the meeting after an action and the events it caused.
#[derive(Serialize)]
struct UpdateView {
    meeting: MeetingView,
    events: Vec<EventView>,
}

/// `meeting_show` shape.
#[derive(Serialize)]
struct ShowView {
    meeting: MeetingView,
    participants: Vec<ParticipantView>,
    messages: Vec<MessageView>,
}

fn meeting_id(text: &str) -> Result<MeetingId> {
    text.parse::<uuid::Uuid>()
        .map(MeetingId)
        .map_err(|_| CliError::usage(format!("`{text}` is not a meeting id (a UUID)")))
}

fn tag<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn tag_text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

async fn meeting_view(names: &mut Names, p: &Pattern, m: &Meeting) -> Result<MeetingView> {
    let speaker = match m.speaker {
        Some(s) => Some(names.of(p, s).await?),
        None => None,
    };
    Ok(MeetingView {
        id: m.id.to_string(),
        host: names.of(p, m.host).await?,
        status: tag(&m.status),
        speaker,
        turn_seconds: m.turn_duration.map(|d| d.as_secs()),
        turn_deadline: m.turn_deadline,
        last_event_seq: m.last_event_seq,
        created_at: m.created_at,
        started_at: m.started_at,
        ended_at: m.ended_at,
    })
}

async fn event_view(names: &mut Names, p: &Pattern, e: &MeetingEvent) -> Result<EventView> {
    let agent = match e.agent {
        Some(a) => Some(names.of(p, a).await?),
        None => None,
    };
    Ok(EventView {
        seq: e.seq,
        event_type: tag(&e.event_type),
        agent,
        data: e.data.clone(),
        created_at: e.created_at,
    })
}

pub(crate) async fn run(env: &Env, command: MeetingCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = act(env, &pattern, command).await;
    pattern.close().await;
    result
}

async fn act(env: &Env, p: &Pattern, command: MeetingCommand) -> Result<()> {
    let protocol = p.protocol();
    let mut names = Names::new();
    let update: MeetingUpdate = match command {
        MeetingCommand::Create { host, turn_seconds } => {
            let h = participant(p, &host).await?;
            if turn_seconds == Some(0) {
                return Err(CliError::usage("--turn-seconds must be at least 1"));
            }
            protocol
                .create_meeting(h.id, turn_seconds.map(Duration::from_secs))
                .await?
        }
        MeetingCommand::Invite { meeting, by, agent } => {
            let id = meeting_id(&meeting)?;
            let h = participant(p, &by).await?;
            let a = participant(p, &agent).await?;
            protocol.invite(id, h.id, a.id).await?
        }
        MeetingCommand::Join { meeting, agent } => {
            let id = meeting_id(&meeting)?;
            let a = participant(p, &agent).await?;
            protocol.join_meeting(id, a.id).await?
        }
        MeetingCommand::Start { meeting, by } => {
            let id = meeting_id(&meeting)?;
            let h = participant(p, &by).await?;
            protocol.start_meeting(id, h.id).await?
        }
        MeetingCommand::Speak {
            meeting,
            from,
            message,
        } => {
            let id = meeting_id(&meeting)?;
            let a = participant(p, &from).await?;
            protocol
                .speak(
                    id,
                    a.id,
                    NewProtocolMessage::new("chat", Value::String(message)),
                )
                .await?
        }
        MeetingCommand::Pass { meeting, agent } => {
            let id = meeting_id(&meeting)?;
            let a = participant(p, &agent).await?;
            protocol.pass_turn(id, a.id).await?
        }
        MeetingCommand::Leave { meeting, agent } => {
            let id = meeting_id(&meeting)?;
            let a = participant(p, &agent).await?;
            protocol.leave_meeting(id, a.id).await?
        }
        MeetingCommand::End { meeting, by } => {
            let id = meeting_id(&meeting)?;
            let h = participant(p, &by).await?;
            protocol.end_meeting(id, h.id).await?
        }
        MeetingCommand::Show { meeting } => {
            let id = meeting_id(&meeting)?;
            let m = protocol.meeting(id).await?;
            let mut participants = Vec::new();
            for part in protocol.participants(id).await? {
                participants.push(ParticipantView {
                    agent: names.of(p, part.agent).await?,
                    status: tag(&part.status),
                    join_order: part.join_order,
                });
            }
            let mut messages = Vec::new();
            for msg in protocol.meeting_messages(id).await? {
                messages.push(MessageView {
                    id: msg.id.to_string(),
                    from: names.of(p, msg.sender).await?,
                    message_type: msg.message_type.clone(),
                    content: msg.content.clone(),
                    created_at: msg.created_at,
                });
            }
            let view = ShowView {
                meeting: meeting_view(&mut names, p, &m).await?,
                participants,
                messages,
            };
            if env.json {
                return output::json(&view);
            }
            print_meeting(&view.meeting)?;
            for part in &view.participants {
                output::line(&format!("  {} ({})", part.agent, tag_text(&part.status)))?;
            }
            for msg in &view.messages {
                output::line(&format!(
                    "  {} {}: {}",
                    msg.created_at.format("%H:%M:%S"),
                    msg.from,
                    tag_text(&msg.content)
                ))?;
            }
            return Ok(());
        }
        MeetingCommand::Events {
            meeting,
            after,
            follow: true,
            ..
        } => {
            let id = meeting_id(&meeting)?;
            // Unknown meetings are an error, not an endless wait.
            protocol.meeting(id).await?;
            return follow_events(env, p, &mut names, id, after).await;
        }
        MeetingCommand::Events {
            meeting,
            after,
            limit,
            follow: false,
        } => {
            let id = meeting_id(&meeting)?;
            let mut views = Vec::new();
            for e in protocol.events_after(id, after, limit).await? {
                views.push(event_view(&mut names, p, &e).await?);
            }
            if env.json {
                return output::json(&views);
            }
            for v in &views {
                print_event(v)?;
            }
            return Ok(());
        }
    };
    let mut events = Vec::with_capacity(update.events.len());
    for e in &update.events {
        events.push(event_view(&mut names, p, e).await?);
    }
    let view = UpdateView {
        meeting: meeting_view(&mut names, p, &update.meeting).await?,
        events,
    };
    if env.json {
        return output::json(&view);
    }
    print_meeting(&view.meeting)?;
    for e in &view.events {
        print_event(e)?;
    }
    Ok(())
}

fn print_meeting(m: &MeetingView) -> Result<()> {
    output::line(&format!(
        "meeting {} ({}): host {}{}",
        m.id,
        tag_text(&m.status),
        m.host,
        m.speaker
            .as_ref()
            .map_or_else(String::new, |s| format!(", speaker: {s}"))
    ))
}

/// How often a follower looks at the log when nothing woke it: writes of other processes wake it
/// only on PostgreSQL (LISTEN/NOTIFY); on SQLite this is how they are seen.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// `meeting events --follow`: every event after `after`, as it happens, until `meeting_ended`
/// (exit 0) or Ctrl-C (exit 0: following is reading, nothing to cancel).
async fn follow_events(
    env: &Env,
    p: &Pattern,
    names: &mut Names,
    id: MeetingId,
    after: u64,
) -> Result<()> {
    let mut interrupts = Interrupts::new()?;
    let mut follower = p.protocol().follow(id, after);
    loop {
        // `Follower::next` is cancel-safe: a timed-out call loses no event.
        let next = tokio::select! {
            next = tokio::time::timeout(FOLLOW_POLL, follower.next()) => next,
            () = interrupts.recv() => return Ok(()),
        };
        let event = match next {
            Err(_elapsed) => continue,
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => return Err(e.into()),
        };
        let view = event_view(names, p, &event).await?;
        if env.json {
            output::line(&serde_json::to_string(&view)?)?;
        } else {
            print_event(&view)?;
        }
    }
}

fn print_event(e: &EventView) -> Result<()> {
    output::line(&format!(
        "  #{} {} {}",
        e.seq,
        tag_text(&e.event_type),
        e.agent.as_deref().unwrap_or("-")
    ))
}
