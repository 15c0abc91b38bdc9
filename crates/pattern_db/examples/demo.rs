//! The Pattern demo (run by `cargo xtask demo`): the crash-safe, batch-aware message store at work.
//!
//! It opens the embedded default database (`<workspace>/.cache/demo/demo.db`, or the database
//! given with `--url URL`, e.g. a PostgreSQL server), finds or creates the agent `demo-agent`, and
//! drives its message store the way the agent runtime will:
//!
//! 1. a scripted three-turn conversation: each trigger is committed before any work starts (the
//!    durable "received" acknowledgement), the model's tool call and the tool's result are stored
//!    step by step, and the batch is completed;
//! 2. safety: a tool result for a call the batch never made is refused with a typed error, a run
//!    that dies in the middle of a tool call leaves an open batch that recovery abandons and whose
//!    trigger it hands back for retry;
//! 3. the latest batches read back whole, and the totals.
//!
//! Every run appends new batches, so running it again shows the history growing. There is no
//! model here: the assistant's words are scripted. The demo only uses the public `pattern_db`
//! API; it must never reach around it (no SQL of its own), and never touch any database but the
//! one it names at start-up.

use pattern_db::{AgentError, BatchError};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use pattern_db::{
    AgentId, BatchId, BatchState, BeginBatch, ContentBlock, Database, DbConfig, Error, NewAgent,
    NewMessage, RecoveryScope, Role, StoredBatch,
};
use serde_json::json;

/// Any failure of the demo: the store's own errors, plus the few things around it.
type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

const AGENT: &str = "demo-agent";

/// One scripted turn: what the user says, what the agent searches for, what it finds, and what it
/// answers.
struct Turn {
    user: &'static str,
    query: &'static str,
    found: &'static str,
    reply: &'static str,
}

const CONVERSATION: [Turn; 3] = [
    Turn {
        user: "What did I plant in the garden this spring?",
        query: "garden planting spring",
        found: "2025-04-12: planted tomatoes, basil and two rows of beans",
        reply: "Tomatoes, basil and two rows of beans, on 12 April.",
    },
    Turn {
        user: "When will the beans be ready?",
        query: "beans harvest",
        found: "2025-04-12: the seed packet says beans are ready in 55-60 days",
        reply: "Around the second week of June: the packet says 55-60 days from 12 April.",
    },
    Turn {
        user: "And what does the basil need?",
        query: "basil care",
        found: "basil: full sun, water when the top inch of soil is dry, pinch off flowers",
        reply: "Full sun, water when the top inch of soil is dry, and pinch off the flowers.",
    },
];

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> DemoResult<()> {
    let url = match parse_args(std::env::args().skip(1))? {
        Some(url) => url,
        None => default_url()?,
    };
    let db = Database::open(DbConfig::new(url)).await?;
    let result = demo(&db).await;
    db.close().await;
    result
}

/// `--url URL` (or `--url=URL`); `None` means the embedded default.
fn parse_args(mut args: impl Iterator<Item = String>) -> DemoResult<Option<String>> {
    let mut url = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => url = Some(args.next().ok_or("--url needs a value")?),
            "-h" | "--help" => {
                println!("usage: demo [--url sqlite://PATH | --url postgres://USER@HOST:PORT/DB]");
                println!("default: sqlite file {}", default_path()?.display());
                std::process::exit(0);
            }
            other => match other.strip_prefix("--url=") {
                Some(value) => url = Some(value.to_owned()),
                None => return Err(format!("unknown argument `{other}` (try --help)").into()),
            },
        }
    }
    Ok(url)
}

/// `<workspace>/.cache/demo/demo.db`.
fn default_path() -> DemoResult<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the workspace root from CARGO_MANIFEST_DIR")?;
    Ok(root.join(".cache").join("demo").join("demo.db"))
}

/// The default SQLite URL, creating its folder.
fn default_url() -> DemoResult<String> {
    let path = default_path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(format!("sqlite://{}", path.display()))
}

async fn demo(db: &Database) -> DemoResult<()> {
    let engine = db.engine_version().await?;
    let engine = engine.split(" on ").next().unwrap_or(&engine);
    println!("Pattern demo: the crash-safe, batch-aware message store");
    println!(
        "database  {} ({engine}, machine id {})",
        db.url(),
        db.machine_id()
    );

    let (agent, created) = match db.agent_by_name(AGENT).await {
        Ok(agent) => (agent, false),
        Err(Error::Agent(AgentError::NameNotFound(_))) => {
            (db.create_agent(NewAgent::named(AGENT)).await?, true)
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "agent     {} {} ({})",
        agent.name,
        agent.id,
        if created { "created" } else { "reused" }
    );
    let store = db.messages(agent.id);
    let mut this_run: HashSet<BatchId> = HashSet::new();

    section("1. A conversation, saved step by step");
    for turn in &CONVERSATION {
        let batch = run_turn(db, agent.id, NewMessage::user(turn.user), turn).await?;
        this_run.insert(batch);
    }

    section("2. Safety");
    let trigger = NewMessage::user("Summarise everything I wrote about the garden.");
    println!("user: {}", trigger_text(&trigger));
    let batch = receive(db, agent.id, trigger).await?;
    this_run.insert(batch);
    let call = ContentBlock::tool_use("call_1", "archival_search", json!({ "query": "garden" }));
    store
        .append_step(batch, vec![NewMessage::new(Role::Assistant, vec![call])])
        .await?;
    println!("  step: assistant calls archival_search [call_1]");

    println!("(a) a buggy runtime stores a result for a call the model never made:");
    let stray = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("call_7", "no such call", false)],
    );
    match store.append_step(batch, vec![stray]).await {
        Err(e @ Error::Batch(BatchError::UnpairedToolResult { .. })) => println!("  refused: {e}"),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("the store accepted a tool result without its call".into()),
    }
    match store.complete_batch(batch).await {
        Err(e @ Error::Batch(BatchError::PendingToolCalls { .. })) => {
            println!("  completing it early is refused too: {e}")
        }
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("the store completed a batch with a pending tool call".into()),
    }

    println!(
        "(b) the run dies before call_1 gets its result; at start-up, recovery finds the open batch:"
    );
    let abandoned = store.recover_scope(RecoveryScope::AllOpen).await?;
    if abandoned.is_empty() {
        return Err("recovery found no open batch".into());
    }
    let mut retries = Vec::new();
    for a in abandoned {
        println!(
            "  abandoned batch {} ({} messages, run {}); trigger offered for retry: {:?}",
            a.batch.id,
            a.batch.message_count,
            a.batch.run_owner.as_deref().unwrap_or("-"),
            a.trigger.text()
        );
        retries.push(NewMessage::new(a.trigger.role, a.trigger.content));
    }
    println!("  the abandoned batch is kept for inspection but never sent to a model again;");
    println!("  the runtime retries its trigger in a new batch:");
    let answer = Turn {
        user: "",
        query: "garden",
        found: "3 notes: planting (12 April), bean harvest time, basil care",
        reply: "You planted tomatoes, basil and beans on 12 April; beans are due in June; basil wants sun.",
    };
    for trigger in retries {
        this_run.insert(run_turn(db, agent.id, trigger, &answer).await?);
    }

    section("3. Reading back: the latest 10 batches, each whole (* = written by this run)");
    let recent = store.get_recent(10).await?;
    for batch in &recent {
        print_batch(batch, this_run.contains(&batch.info.id));
    }

    let batches = store.list_batches(None, usize::MAX).await?;
    let count = |state: BatchState| batches.iter().filter(|b| b.state == state).count();
    println!();
    println!(
        "{} now has {} batches ({} complete, {} abandoned, {} open) and {} live messages",
        agent.name,
        batches.len(),
        count(BatchState::Complete),
        count(BatchState::Abandoned),
        count(BatchState::Open),
        store.count_live().await?
    );
    println!("database  {}", db.url());
    Ok(())
}

fn section(title: &str) {
    println!();
    println!("== {title}");
}

/// Commits the trigger and prints the acknowledgement.
async fn receive(db: &Database, agent: AgentId, trigger: NewMessage) -> DemoResult<BatchId> {
    let store = db.messages(agent);
    let started = Instant::now();
    let received = store.begin_batch(trigger, BeginBatch::default()).await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    println!(
        "  received: batch {} (committed in {ms:.1} ms, before any model call)",
        received.batch_id
    );
    Ok(received.batch_id)
}

/// One turn as the runtime runs it: acknowledge the trigger, store the tool call, store the tool
/// result with the final answer, complete.
async fn run_turn(
    db: &Database,
    agent: AgentId,
    trigger: NewMessage,
    turn: &Turn,
) -> DemoResult<BatchId> {
    println!("user: {}", trigger_text(&trigger));
    let batch = receive(db, agent, trigger).await?;
    let store = db.messages(agent);

    let call = ContentBlock::tool_use("call_1", "archival_search", json!({ "query": turn.query }));
    store
        .append_step(batch, vec![NewMessage::new(Role::Assistant, vec![call])])
        .await?;
    println!(
        "  step 1: assistant calls archival_search {{\"query\": {:?}}} [call_1]",
        turn.query
    );

    let result = NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result("call_1", turn.found, false)],
    );
    let receipt = store
        .append_step(batch, vec![result, NewMessage::assistant(turn.reply)])
        .await?;
    println!(
        "  step 2: tool result + reply, {} messages in one transaction",
        receipt.stored.len()
    );

    let info = store.complete_batch(batch).await?;
    println!(
        "  batch {} {} with {} messages",
        info.id, info.state, info.message_count
    );
    println!("agent: {}", turn.reply);
    Ok(batch)
}

fn trigger_text(message: &NewMessage) -> String {
    message
        .content
        .iter()
        .map(block_summary)
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_batch(batch: &StoredBatch, new: bool) {
    let info = &batch.info;
    println!(
        "{} batch {}  {}  {}  {} messages",
        if new { '*' } else { ' ' },
        info.id,
        info.batch_type.as_str(),
        info.state,
        info.message_count
    );
    for m in &batch.messages {
        let text = m
            .content
            .iter()
            .map(block_summary)
            .collect::<Vec<_>>()
            .join(" | ");
        println!("      {:<9}  {}", m.role.as_str(), text);
    }
}

/// One block as a short line of text.
fn block_summary(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text { text } => short(text),
        ContentBlock::ToolUse {
            id, name, input, ..
        } => short(&format!("{name}({input}) [{id}]")),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let label = if *is_error { "error" } else { "result" };
            short(&format!("{label} for {tool_use_id}: {content}"))
        }
        ContentBlock::Thinking { text, .. } => short(&format!("(thinking) {text}")),
        ContentBlock::Image {
            media_type,
            reference,
        } => format!("[{media_type} image: {reference}]"),
    }
}

/// At most 80 characters on one line.
fn short(text: &str) -> String {
    const MAX: usize = 80;
    let line = text.replace('\n', " ");
    if line.chars().count() <= MAX {
        return line;
    }
    let mut cut: String = line.chars().take(MAX - 3).collect();
    cut.push_str("...");
    cut
}
