//! `pattern meeting run|create|invite|join|start|speak|pass|leave|end|show|events`: meetings of
//! agents of one organization over `pattern_protocol`. `run` lets the agents hold the meeting
//! themselves (`pattern_core::meeting::MeetingDriver`); the other commands act for an agent by
//! hand. This module must never bypass the protocol's rules (host-only actions, turns, ended
//! meetings), and never speak for an agent in `run`: every action goes through
//! `pattern_protocol::Protocol` or the driver.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pattern::Pattern;
use pattern::protocol::{Meeting, MeetingEvent, MeetingId, MeetingUpdate, NewProtocolMessage};
use serde::Serialize;
use serde_json::Value;

use std::sync::Arc;

use pattern::core::Agent as _;
use pattern::core::db_agent::wait_idle;
use pattern::core::local_server::LocalModel;
use pattern::core::meeting::{MeetingDriver, MeetingPlan, MeetingProgress, Policy};
use tokio::sync::mpsc;

use crate::cli::{MeetingCommand, MeetingRunArgs};
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
    let result = match command {
        MeetingCommand::Run(args) => run_meeting(env, &pattern, args).await,
        other => act(env, &pattern, other).await,
    };
    pattern.close().await;
    result
}

/// `meeting run`: creates (or resumes) a meeting of agents and drives it to its end, printing
/// every turn as it happens; the transcript at the end. Ctrl-C stops driving (exit 130): the
/// meeting stays in the log, and `--resume ID` goes on from where it stood.
async fn run_meeting(env: &Env, p: &Pattern, args: MeetingRunArgs) -> Result<()> {
    let tools = Arc::new(pattern::core::tool::meeting::registry()?);
    let model = crate::commands::chat::model(env, LocalModel::Qwen).await?;
    let org = crate::env::organization(p).await?;
    let (rows, plan_and_turn) = match &args.resume {
        Some(id) => {
            let id = meeting_id(id)?;
            (None, Err(id))
        }
        None => {
            let mut rows = Vec::new();
            for name in &args.agents {
                rows.push(participant(p, name.trim()).await?);
            }
            if args.turn_seconds == Some(0) {
                return Err(CliError::usage("--turn-seconds must be at least 1"));
            }
            let policy = Policy::parse(&args.policy)
                .map_err(|e| CliError::usage(format!("--policy: {e}")))?;
            let plan = MeetingPlan {
                topic: args.topic.clone().unwrap_or_default(),
                rounds: args.rounds,
                end_phrase: args.end_phrase.clone(),
                policy,
                agents: rows.iter().map(|r| r.id).collect(),
            };
            plan.validate()?;
            (
                Some(rows),
                Ok((plan, args.turn_seconds.map(Duration::from_secs))),
            )
        }
    };
    // The agents: named ones, or the plan's when resuming (each must be of this organization).
    let agent_rows = match (rows, &plan_and_turn) {
        (Some(rows), _) => rows,
        (None, Err(id)) => {
            let bare = MeetingDriver::new(p.protocol().clone(), Vec::new());
            let plan = bare.plan(*id).await?;
            let mut rows = Vec::new();
            for agent in plan.agents {
                let row = p.db().agent(agent).await?;
                if row.organization != org {
                    return Err(CliError::not_found(format!(
                        "no meeting `{id}` in this organization"
                    )));
                }
                rows.push(row);
            }
            rows
        }
        (None, Ok(_)) => Vec::new(),
    };
    let agents = conversing_agents(env, p, &model, agent_rows, tools).await?;
    let driver = MeetingDriver::new(p.protocol().clone(), agents.clone());
    let id = match plan_and_turn {
        Ok((plan, turn)) => driver.create(&plan, turn).await?,
        Err(id) => id,
    };
    eprintln!("meeting {id} (resume with `pattern meeting run --resume {id}`)");
    let (tx, mut rx) = mpsc::channel(256);
    let json = env.json;
    let printer = tokio::spawn(async move {
        let mut printer = Printer::new(json);
        while let Some(progress) = rx.recv().await {
            printer.print(&progress);
        }
    });
    let mut interrupts = Interrupts::new()?;
    let outcome = tokio::select! {
        outcome = driver.run(id, tx) => outcome,
        () = interrupts.recv() => {
            for agent in &agents {
                agent.cancel_running("meeting run stopped by Ctrl-C");
            }
            for agent in &agents {
                let _ = wait_idle(agent, Duration::from_secs(10)).await;
            }
            let _ = printer.await;
            eprintln!("stopped; resume with `pattern meeting run --resume {id}`");
            return Err(CliError::interrupted("meeting run stopped"));
        }
    };
    let _ = printer.await;
    let outcome = outcome?;
    for agent in &agents {
        let _ = wait_idle(agent, Duration::from_secs(10)).await;
    }
    drop(agents);
    drop(model);
    if env.json {
        return output::json(&serde_json::json!({
            "meeting": id.to_string(),
            "ended_because": outcome.ended_because,
            "transcript": outcome
                .transcript
                .iter()
                .map(|(who, text)| serde_json::json!({"speaker": who, "text": text}))
                .collect::<Vec<_>>(),
        }));
    }
    output::line(&format!(
        "\ntranscript of meeting {id} (ended: {}):",
        outcome.ended_because
    ))?;
    for (who, text) in &outcome.transcript {
        output::line(&format!("{who}: {text}"))?;
    }
    Ok(())
}

/// The agents of a conversation between agents (a meeting, a session), each on its own model
/// (decision 0016) or else `model`, with `tools`, printing what they send users to the terminal.
/// The small local model gets no tools on the first call of its turns: given tools it writes
/// calls as text, which would then be said as its words.
pub(crate) async fn conversing_agents(
    env: &Env,
    p: &Pattern,
    model: &crate::commands::chat::Model,
    rows: Vec<pattern::Agent>,
    tools: Arc<pattern::core::tool::ToolRegistry>,
) -> Result<Vec<Arc<pattern::core::DatabaseAgent>>> {
    let mut models = pattern::model::Models::new(Some(model.provider.clone()));
    if model.source == "local" {
        models = models.with_local(model.provider.clone());
    }
    let mut agents = Vec::new();
    for row in rows {
        let own = pattern::model::AgentModel::of(&row)?;
        let provider = models.for_agent(&row);
        let mut config = crate::commands::chat::runtime_config(&row, &*provider);
        let on_local = match &own {
            Some(m) => m.provider == pattern::model::ModelSource::Local,
            None => model.source == "local",
        };
        if on_local {
            config.first_tool_choice = pattern::context::format::ToolChoice::None;
        }
        let agent = p.agent_with_tools(row, provider, config, Some(tools.clone()))?;
        agent
            .runtime()
            .set_default_endpoint(Arc::new(crate::commands::chat::Terminal { json: env.json }))
            .await;
        agents.push(agent);
    }
    Ok(agents)
}

/// Prints a running meeting: text for people (on stderr, so stdout holds the transcript), or
/// one JSON object per line on stderr with `--json`.
struct Printer {
    json: bool,
    names: std::collections::HashMap<pattern::db::AgentId, String>,
    mid_line: bool,
}

impl Printer {
    fn new(json: bool) -> Self {
        Self {
            json,
            names: std::collections::HashMap::new(),
            mid_line: false,
        }
    }

    fn name(&self, id: pattern::db::AgentId) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    fn print(&mut self, progress: &MeetingProgress) {
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        if self.json {
            if let Ok(line) = serde_json::to_string(progress) {
                let _ = writeln!(err, "{line}");
            }
            return;
        }
        let newline = |mid: &mut bool, err: &mut std::io::StderrLock<'_>| {
            if *mid {
                let _ = writeln!(err);
                *mid = false;
            }
        };
        match progress {
            MeetingProgress::TurnStarted {
                speaker,
                name,
                round,
                deadline,
            } => {
                self.names.insert(*speaker, name.clone());
                newline(&mut self.mid_line, &mut err);
                let until = deadline
                    .map(|d| format!(", until {}", d.format("%H:%M:%S")))
                    .unwrap_or_default();
                let _ = write!(err, "[turn {round}{until}] {name}: ");
                self.mid_line = true;
            }
            MeetingProgress::Output { event, .. } => match event {
                pattern::core::ResponseEvent::TextDelta { text } => {
                    let _ = write!(err, "{text}");
                    self.mid_line = true;
                }
                pattern::core::ResponseEvent::ToolCallFinished { name, input, .. } => {
                    newline(&mut self.mid_line, &mut err);
                    let _ = writeln!(err, "  (calls {name} {input})");
                }
                pattern::core::ResponseEvent::ToolResult {
                    content, is_error, ..
                } => {
                    let tag = if *is_error { "error" } else { "result" };
                    let _ = writeln!(err, "  ({tag}: {content})");
                }
                pattern::core::ResponseEvent::Error { message, .. } => {
                    newline(&mut self.mid_line, &mut err);
                    let _ = writeln!(err, "  (run failed: {message})");
                }
                _ => {}
            },
            MeetingProgress::Spoke { .. } => newline(&mut self.mid_line, &mut err),
            MeetingProgress::Passed { speaker, reason } => {
                newline(&mut self.mid_line, &mut err);
                let _ = writeln!(err, "  ({} passed: {reason})", self.name(*speaker));
            }
            MeetingProgress::Ended { reason } => {
                newline(&mut self.mid_line, &mut err);
                let _ = writeln!(err, "meeting ended ({reason})");
            }
            _ => {}
        }
        let _ = err.flush();
    }
}

async fn act(env: &Env, p: &Pattern, command: MeetingCommand) -> Result<()> {
    let protocol = p.protocol();
    let mut names = Names::new();
    let update: MeetingUpdate = match command {
        MeetingCommand::Run(_) => {
            return Err(CliError::other("`meeting run` is handled before `act`"));
        }
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
