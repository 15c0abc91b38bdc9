//! `pattern chat [AGENT]` and `pattern send AGENT MESSAGE`: turns with an agent, streamed.
//!
//! The model is the agent's own when it has one (`pattern agent set-model`; a `local/NAME` model
//! is started for the command), else it comes from the environment (`ANTHROPIC_API_KEY`,
//! `OPENAI_API_KEY`, `GEMINI_API_KEY`, in that order), then from `[model]` in config.toml
//! (`provider = "llamacpp"` with a `base_url`), and otherwise a local llama.cpp server (installed
//! by `pattern setup`) is started for the command and stopped after it.
//!
//! Ctrl-C during a turn cancels the turn (its batch is abandoned, the message stays stored): in
//! `chat` the prompt comes back, `send` exits 130. Ctrl-C at the prompt, or end of input,
//! leaves `chat`. A failed turn is one line on stderr: `chat` goes on, `send` exits with the
//! failure's code. Before the database is closed (and before the next prompt) the command waits,
//! bounded, until the agent's run has really ended.
//!
//! A guarded tool call (decision 0011) prints a line naming its approval request. `chat` asks
//! `approve? [y/N]` and reads one line (a terminal or piped stdin; anything but `y`/`yes` is a
//! denial), then decides the request through the database like `pattern approvals decide`.
//! `send` leaves it pending and names the command that answers it; its turn waits until the
//! deadline. This module must never print an API key,
//! never leave a started server running, and never close the database under a running batch
//! without saying so.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pattern::Pattern;
use pattern::core::approvals::DbApprover;
use pattern::core::db_agent::wait_idle;
use pattern::core::endpoint::{EndpointError, MessageEndpoint, OutgoingMessage};
use pattern::core::local_server::LocalModel;
use pattern::core::provider::ModelProvider;
use pattern::core::{
    Agent, DatabaseAgent, DoneReason, ErrorKind, IncomingMessage, Response, ResponseEvent,
    RuntimeConfig, TurnError, collect_response,
};
use pattern::db::ApprovalDecision;
use pattern::model::ModelChoice;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::cli::{ChatArgs, SendArgs};
use crate::env::{Config, Env, agent_named};
use crate::error::{CliError, Kind, Result};
use crate::interrupt::Interrupts;
use crate::output;

/// The model for this command (`pattern::model`): dropping it stops a local server it started.
pub(crate) type Model = pattern::model::Model;

/// Picks the model (module doc), starting a local server when nothing else is configured.
pub(crate) async fn model(env: &Env, local: LocalModel) -> Result<Model> {
    let choice = ModelChoice {
        local,
        ..model_choice(env)?
    };
    let model = choice.resolve().await?;
    if let Some(server) = model.local_server() {
        eprintln!(
            "started a local llama.cpp server in {:.1} s at {} (no API key or [model] configured)",
            server.started_in().as_secs_f64(),
            server.base_url()
        );
    }
    Ok(model)
}

/// The model `agent` runs on in this command (module doc).
pub(crate) async fn model_for(env: &Env, agent: &pattern::Agent) -> Result<Model> {
    let model = model_choice(env)?.for_agent(agent).await?;
    if let Some(server) = model.local_server() {
        eprintln!(
            "started a local llama.cpp server in {:.1} s at {}",
            server.started_in().as_secs_f64(),
            server.base_url()
        );
    }
    Ok(model)
}

/// How this data directory's commands choose a model: `[model]` in config.toml, and the local
/// server installed where `pattern setup` put it.
pub(crate) fn model_choice(env: &Env) -> Result<ModelChoice> {
    Ok(ModelChoice {
        openai_compatible: configured_llamacpp(env)?,
        llama_dir: Some(pattern::install::llama_dir(Some(&env.data_dir))),
        ..ModelChoice::default()
    })
}

/// `[model] provider = "llamacpp"` with `[model.llamacpp] base_url, model`.
fn configured_llamacpp(env: &Env) -> Result<Option<(String, String)>> {
    let path = env.config_path();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let value: toml::Value =
        toml::from_str(&text).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    let model = value.get("model");
    let provider = model
        .and_then(|m| m.get("provider"))
        .and_then(|p| p.as_str());
    match provider {
        None => Ok(None),
        Some("llamacpp") => {
            let section = model.and_then(|m| m.get("llamacpp"));
            let get = |k: &str| section.and_then(|s| s.get(k)).and_then(|v| v.as_str());
            let base = get("base_url")
                .unwrap_or("http://127.0.0.1:8080/v1")
                .to_owned();
            let name = get("model").unwrap_or("local").to_owned();
            Ok(Some((base, name)))
        }
        Some(other) => Err(CliError::usage(format!(
            "{}: model.provider `{other}` needs its API key in the environment \
             (ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY); only `llamacpp` is read \
             from the file",
            path.display()
        ))),
    }
}

/// The agent's runtime settings: its instructions (agent metadata), the model's window, and
/// few iterations (small local models loop).
pub(crate) fn runtime_config(agent: &pattern::Agent, model: &dyn ModelProvider) -> RuntimeConfig {
    let mut config = RuntimeConfig::for_agent(agent, model.model().context_window);
    config.max_iterations = 4;
    config
}

/// The terminal as the agent's `user` endpoint: what the agent sends the user with
/// `send_message` is printed on a line of its own, on stdout (on stderr with `--json`, whose
/// stdout is one JSON document).
#[derive(Debug)]
pub(crate) struct Terminal {
    /// Print on stderr.
    pub(crate) json: bool,
}

#[async_trait::async_trait]
impl MessageEndpoint for Terminal {
    async fn deliver(&self, message: &OutgoingMessage) -> std::result::Result<(), EndpointError> {
        let line = format!("\n[{} to you] {}\n", message.from_name, message.content);
        let written = if self.json {
            let mut err = std::io::stderr().lock();
            err.write_all(line.as_bytes()).and_then(|()| err.flush())
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(line.as_bytes()).and_then(|()| out.flush())
        };
        written.map_err(|e| EndpointError {
            endpoint: "terminal".into(),
            message: e.to_string(),
        })
    }
}

/// How long a command waits after a turn for the agent's run to end (its batch completed or
/// abandoned) before it goes on or closes the database.
const SETTLE: Duration = Duration::from_secs(30);

/// What a terminal shows of a turn: text as it streams on stdout (the answer), tool calls and
/// results on their own lines on stderr.
#[derive(Default)]
struct Screen {
    /// Streamed text ended without a newline.
    mid_line: bool,
}

impl Screen {
    /// Shows `event`: the answer's text on `out`, notes on their own lines on `err`.
    fn show(
        &mut self,
        event: &ResponseEvent,
        out: &mut impl Write,
        err: &mut impl Write,
    ) -> std::io::Result<()> {
        let note = match event {
            ResponseEvent::TextDelta { text } if !text.is_empty() => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
                self.mid_line = !text.ends_with('\n');
                return Ok(());
            }
            ResponseEvent::Done { .. } => {
                self.mid_line = false;
                return writeln!(out);
            }
            ResponseEvent::ToolCallStarted { name, .. } => format!("[calling {name}]"),
            ResponseEvent::ToolCallFinished { name, input, .. } => format!(
                "[tool call] {name} {}",
                output::preview(&input.to_string(), 200)
            ),
            ResponseEvent::ToolResult {
                content, is_error, ..
            } => {
                let tag = if *is_error {
                    "tool error"
                } else {
                    "tool result"
                };
                format!("[{tag}] {}", output::preview(content, 200))
            }
            ResponseEvent::Queued { .. } => {
                "[queued: the agent is busy; your message is stored]".to_owned()
            }
            _ => return Ok(()),
        };
        // A note after streamed text starts on a line of its own (on a terminal, both streams
        // share the screen).
        let lead = if std::mem::take(&mut self.mid_line) {
            "\n"
        } else {
            ""
        };
        writeln!(err, "{lead}  {note}")
    }

    /// Ends the answer's last line when the turn ended without `Done`.
    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if std::mem::take(&mut self.mid_line) {
            writeln!(out)?;
        }
        Ok(())
    }
}

fn stdout_error(e: std::io::Error) -> CliError {
    CliError::other(format!("stdout: {e}"))
}

/// How a turn ended.
pub(crate) enum TurnEnd {
    /// It ran to its end: every event, the last one `Done` or `Error`.
    Finished(Vec<ResponseEvent>),
    /// Ctrl-C cancelled it: its batch is abandoned, the message stays stored.
    Cancelled,
}

/// One turn: streamed to the terminal when `show`, cancelled by Ctrl-C. Returns once the agent's
/// run has ended (or [`SETTLE`] passed), so the batch is completed or abandoned by then.
pub(crate) async fn turn(
    agent: &Arc<DatabaseAgent>,
    text: &str,
    interrupts: &mut Interrupts,
    show: bool,
    mut answers: Option<&mut Lines>,
) -> Result<TurnEnd> {
    // Not raced with Ctrl-C: committing the message is quick, and a Ctrl-C meanwhile is kept by
    // `interrupts` for the loop below (dropping this call halfway could strand its batch).
    let mut stream = agent.clone().process(IncomingMessage::user(text)).await?;
    let mut screen = Screen::default();
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let mut events = Vec::new();
    let ended: Result<bool> = loop {
        tokio::select! {
            event = stream.next() => {
                let Some(event) = event else { break Ok(false) };
                if show && let Err(e) = screen.show(&event, &mut stdout, &mut stderr) {
                    break Err(stdout_error(e));
                }
                if let ResponseEvent::ApprovalRequested { .. } = &event {
                    if let Err(e) = screen.finish(&mut stdout) {
                        break Err(stdout_error(e));
                    }
                    if ask(agent, &event, answers.as_deref_mut(), interrupts).await {
                        break Ok(true);
                    }
                }
                // `Done` and `Error` end the turn: a Ctrl-C after them is not about it.
                let last = matches!(event, ResponseEvent::Done { .. } | ResponseEvent::Error { .. });
                events.push(event);
                if last {
                    break Ok(false);
                }
            }
            () = interrupts.recv() => break Ok(true),
        }
    };
    // Dropping the stream cancels a run still going; the agent then abandons its batch.
    drop(stream);
    settle(agent).await;
    let cancelled = ended?;
    if show {
        screen.finish(&mut stdout).map_err(stdout_error)?;
    }
    Ok(if cancelled {
        TurnEnd::Cancelled
    } else {
        TurnEnd::Finished(events)
    })
}

/// Lines of stdin (see [`stdin_lines`]).
pub(crate) type Lines = mpsc::Receiver<std::io::Result<String>>;

/// Shows an `approval_requested` event on stderr and, with `answers`, asks `approve? [y/N]` and
/// decides the request with the answer (end of input is a denial). Returns `true` when Ctrl-C
/// came instead of an answer (the turn is then cancelled; its request ends with its batch).
async fn ask(
    agent: &DatabaseAgent,
    event: &ResponseEvent,
    answers: Option<&mut Lines>,
    interrupts: &mut Interrupts,
) -> bool {
    let ResponseEvent::ApprovalRequested {
        approval_id,
        tool,
        reason,
        deadline,
        ..
    } = event
    else {
        return false;
    };
    let id = *approval_id;
    eprintln!(
        "  [approval needed] {tool}: {reason} (approval {id}, denied if unanswered by {})",
        deadline.format("%H:%M:%S UTC")
    );
    let Some(lines) = answers else {
        eprintln!(
            "  [waiting for an answer: pattern approvals decide {id} approve|deny [--reason TEXT]]"
        );
        return false;
    };
    eprint!("  approve? [y/N] ");
    let _ = std::io::stderr().flush();
    let line = tokio::select! {
        line = lines.recv() => line,
        () = interrupts.recv() => return true,
    };
    let yes = match &line {
        Some(Ok(l)) => matches!(l.trim().to_lowercase().as_str(), "y" | "yes"),
        _ => {
            eprintln!();
            false
        }
    };
    let decision = if yes {
        ApprovalDecision::Approve
    } else {
        ApprovalDecision::Deny {
            reason: "denied at the chat prompt".into(),
        }
    };
    match agent
        .runtime()
        .database()
        .decide_approval(None, id, decision, "cli")
        .await
    {
        Ok(a) => eprintln!("  [approval {} {}]", a.id, a.state),
        Err(e) => eprintln!("  [approval {id} not answered here: {e}]"),
    }
    false
}

/// Waits (at most [`SETTLE`]) until the agent holds no batch, and says so when it still does.
async fn settle(agent: &DatabaseAgent) {
    if !wait_idle(agent, SETTLE).await {
        eprintln!(
            "warning: the agent's run did not end within {} s; its batch stays open until \
             `pattern recover`",
            SETTLE.as_secs()
        );
    }
}

/// A failed turn as a CLI error: cancelled 130, the agent suspended 4, anything else (the
/// provider, storage, context, the run interrupted by another process's recovery) 1.
fn turn_failure(e: &TurnError) -> CliError {
    let kind = match e.kind {
        ErrorKind::Cancelled => Kind::Interrupted,
        ErrorKind::Suspended => Kind::Conflict,
        _ => Kind::Other,
    };
    let stored = match e.batch_id {
        Some(batch) => format!(
            " (batch {} abandoned; the message stays stored)",
            batch.get()
        ),
        None => String::new(),
    };
    CliError::new(kind, format!("the turn failed: {}{stored}", e.message))
}

/// The opened database, model and agent of `chat` and `send`.
struct Session {
    pattern: Pattern,
    model: Model,
    agent: Arc<DatabaseAgent>,
}

impl Session {
    async fn open(env: &Env, name: Option<&str>) -> Result<Self> {
        let (pattern, config) = env.open_for_agents().await?;
        let opened = Self::agent(env, &pattern, &config, name).await;
        match opened {
            Ok((model, agent)) => Ok(Self {
                pattern,
                model,
                agent,
            }),
            Err(e) => {
                pattern.close().await;
                Err(e)
            }
        }
    }

    async fn agent(
        env: &Env,
        pattern: &Pattern,
        config: &Config,
        name: Option<&str>,
    ) -> Result<(Model, Arc<DatabaseAgent>)> {
        let name = name
            .map(str::to_owned)
            .or_else(|| config.agent.default.clone())
            .ok_or_else(|| CliError::usage("no agent given: name one or set [agent] default"))?;
        let row = agent_named(pattern, &name).await?;
        let model = model_for(env, &row).await?;
        let tools = super::mcp::tools(env, pattern, config, &row).await?;
        let agent = pattern.agent_with_tools(
            row.clone(),
            model.provider.clone(),
            runtime_config(&row, &*model.provider),
            tools,
        )?;
        // `send_message` to the user reaches this terminal.
        agent
            .runtime()
            .set_default_endpoint(Arc::new(Terminal { json: env.json }))
            .await;
        // Guarded tool calls wait for an answer stored in the database: the prompt of `chat`,
        // `pattern approvals decide`, or `POST /v1/approvals/{id}`.
        agent
            .runtime()
            .permissions()
            .set_approver(Arc::new(DbApprover::new(pattern.db().clone())))
            .await;
        Ok((model, agent))
    }

    /// Waits for the agent's run to end, then stops the model and closes the database.
    async fn close(self) {
        settle(&self.agent).await;
        drop(self.agent);
        drop(self.model);
        self.pattern.close().await;
    }
}

/// `send --json`: the collected turn. A failed turn prints nothing on stdout (one error line on
/// stderr and its exit code).
#[derive(Serialize)]
struct SendReport {
    batch_id: Option<String>,
    text: String,
    tool_calls: Vec<serde_json::Value>,
    tool_results: Vec<serde_json::Value>,
    reason: DoneReason,
}

impl From<Response> for SendReport {
    fn from(r: Response) -> Self {
        Self {
            batch_id: r.batch_id.map(|b| b.get().to_string()),
            text: r.text,
            tool_calls: r
                .tool_calls
                .into_iter()
                .map(|(id, name, input)| serde_json::json!({"id": id, "name": name, "input": input}))
                .collect(),
            tool_results: r
                .tool_results
                .into_iter()
                .map(|(id, content, is_error)| {
                    serde_json::json!({"call_id": id, "content": content, "is_error": is_error})
                })
                .collect(),
            reason: r.reason,
        }
    }
}

/// `pattern send AGENT MESSAGE`.
pub(crate) async fn send(env: &Env, args: SendArgs) -> Result<()> {
    let session = Session::open(env, Some(&args.agent)).await?;
    let ended = match Interrupts::new() {
        Ok(mut interrupts) => {
            turn(
                &session.agent,
                &args.message,
                &mut interrupts,
                !env.json,
                None,
            )
            .await
        }
        Err(e) => Err(e),
    };
    session.close().await;
    let events = match ended? {
        TurnEnd::Finished(events) => events,
        TurnEnd::Cancelled => {
            return Err(CliError::interrupted(
                "cancelled: the turn's batch is abandoned; the message stays stored",
            ));
        }
    };
    let response = collect_response(futures::stream::iter(events))
        .await
        .map_err(|e| turn_failure(&e))?;
    if env.json {
        output::json(&SendReport::from(response))?;
    }
    Ok(())
}

/// `pattern chat [AGENT]`.
pub(crate) async fn chat(env: &Env, args: ChatArgs) -> Result<()> {
    let session = Session::open(env, args.agent.as_deref()).await?;
    let result = match Interrupts::new() {
        Ok(mut interrupts) => converse(&session.agent, &mut interrupts).await,
        Err(e) => Err(e),
    };
    session.close().await;
    result
}

/// The prompt loop: one turn per line until end of input or Ctrl-C at the prompt. A failed or
/// cancelled turn is reported on stderr and the prompt comes back.
async fn converse(agent: &Arc<DatabaseAgent>, interrupts: &mut Interrupts) -> Result<()> {
    eprintln!(
        "chatting with {} (Ctrl-C cancels a turn; Ctrl-D, or Ctrl-C at the prompt, leaves)",
        agent.name()
    );
    let mut lines = stdin_lines();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let line = tokio::select! {
            line = lines.recv() => line,
            () = interrupts.recv() => None,
        };
        let Some(line) = line else {
            eprintln!();
            return Ok(());
        };
        let line = line.map_err(|e| CliError::other(format!("stdin: {e}")))?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match turn(agent, text, interrupts, true, Some(&mut lines)).await {
            Ok(TurnEnd::Finished(events)) => {
                if let Err(e) = collect_response(futures::stream::iter(events)).await {
                    eprintln!("  [{}]", turn_failure(&e));
                }
            }
            Ok(TurnEnd::Cancelled) => {
                eprintln!(
                    "  [cancelled: the turn's batch is abandoned; your message stays stored]"
                );
            }
            Err(e) => eprintln!("  [the turn failed: {e}]"),
        }
    }
}

/// The lines of stdin, read on a thread of their own (a blocking read cannot be raced with
/// Ctrl-C); the channel closes at end of input. Invalid UTF-8 is replaced, not refused.
fn stdin_lines() -> Lines {
    let (tx, rx) = mpsc::channel(1);
    // Not joined: at the end of the command the process exits, ending a read in progress.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut bytes = Vec::new();
            let line = match stdin.read_until(b'\n', &mut bytes) {
                Ok(0) => return,
                Ok(_) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) => Err(e),
            };
            let failed = line.is_err();
            if tx.blocking_send(line).is_err() || failed {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(events: &[ResponseEvent]) -> (String, String) {
        let mut screen = Screen::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for e in events {
            screen.show(e, &mut out, &mut err).unwrap();
        }
        screen.finish(&mut out).unwrap();
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn a_tool_call_is_shown_when_it_starts_and_on_a_line_of_its_own() {
        let (out, err) = shown(&[
            ResponseEvent::TextDelta {
                text: "Let me note that".into(),
            },
            ResponseEvent::ToolCallStarted {
                call_id: "c1".into(),
                name: "memory_append".into(),
            },
            ResponseEvent::ToolCallFinished {
                call_id: "c1".into(),
                name: "memory_append".into(),
                input: serde_json::json!({"label": "human"}),
            },
            ResponseEvent::ToolResult {
                call_id: "c1".into(),
                content: "appended".into(),
                is_error: false,
            },
            ResponseEvent::TextDelta {
                text: "Done.".into(),
            },
        ]);
        // The turn ended without `Done` (failed or cancelled): the answer's line is ended.
        assert_eq!(out, "Let me note thatDone.\n");
        assert_eq!(
            err,
            "\n  [calling memory_append]\n  [tool call] memory_append {\"label\":\"human\"}\n  \
             [tool result] appended\n"
        );
    }
}
