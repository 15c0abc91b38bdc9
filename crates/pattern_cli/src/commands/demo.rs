//! `pattern demo`: the main job. A real agent conversation on the embedded defaults: SQLite in
//! the data directory, the tantivy full-text index beside it, the offline embedding model, and a
//! local llama.cpp model server started for the run (or a hosted model when an API key is set).
//!
//! Steps: an agent is created with memory blocks and the tools of remembering; the user tells it
//! two facts in plain words (no tool is named: what to store, and where, is the agent's choice;
//! the first model call of each of these turns must call *some* tool, which a grammar-constrained
//! local server turns into a well-formed call); the database is closed and opened again, as a
//! new process would; the conversation is archived out of the context window, as it would be
//! after months; the user asks for the fact (answered from memory or after a search, as the
//! model chooses); then the command prints what the agent stored, searches archival memory and
//! prints the stored batches.
//!
//! It exits 6 when the agent did not store the fact in its memory (blocks or archival) or did
//! not recall it in its answer (everything else ran), and 1 when something else failed. It must never store, recall or answer on the agent's
//! behalf: every check reads what the agent itself wrote.

use std::sync::Arc;
use std::time::Duration;

use pattern::core::local_server::LocalModel;
use pattern::core::provider::ToolChoice;
use pattern::core::tool::ToolRule;
use pattern::core::{DatabaseAgent, ResponseEvent};
use pattern::db::{ContentType, ListArchival};
use pattern::memory::{
    ArchivalMemory, BlockType, MemoryEditor, NewMemoryBlock, SearchMode, SearchOptions,
};
use pattern::{Embedding, NewAgent, Pattern, PatternConfig};

use super::chat::{Model, TurnEnd, model, runtime_config, turn};
use crate::cli::DemoArgs;
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::interrupt::Interrupts;
use crate::output;

/// What the user tells the agent, in plain words: no tool is named.
const TELL: [&str; 2] = [
    "Hi! I'm Sam. I keep two beehives on my balcony in Lyon. Please remember that about me.",
    "Something worth keeping for later: my first hive was started in April 2024 from a swarm a \
     neighbour caught.",
];

/// What the user asks once the conversation has left the context window.
const ASK: &str = "When did I start my first beehive?";

/// The demo agent's instructions (its own system prompt; the user's turns name no tool).
const INSTRUCTIONS: &str = "You are a personal assistant with long-term memory. Your memory \
    tools are the only way to remember anything after this conversation ends. When the user \
    tells you something about themselves, save it in your memory, quoting the user's own words. \
    When the user asks you something, search your memory first, then answer in one short \
    sentence with what you found.";

/// The fact the agent must store and recall: the year (small models paraphrase the rest).
const FACT_MARK: &str = "2024";

/// Prints one line on stdout through [`output::line`] (a closed pipe is an error, not a panic).
macro_rules! say {
    ($($arg:tt)*) => {
        output::line(&format!($($arg)*))?
    };
}

fn other(e: impl std::fmt::Display) -> CliError {
    CliError::other(e.to_string())
}

/// What the agent did in its turns.
#[derive(Debug, Default)]
struct Observed {
    /// Tool calls, by name, in order.
    tool_calls: Vec<String>,
    /// The text of the last turn's answer.
    last_answer: String,
}

/// Runs the demo.
pub(crate) async fn run(env: &Env, args: DemoArgs) -> Result<()> {
    let config = || {
        PatternConfig::data_dir(&env.data_dir).with_embedding(Embedding::Model(
            pattern::install::embedding_paths(Some(&env.data_dir)),
        ))
    };
    let pattern = Pattern::open(config()).await?;
    say!("== Pattern demo: data in {}", env.data_dir.display());
    let row = create_agent(&pattern).await?;
    let model = model(env, LocalModel::Qwen).await?;
    let mut interrupts = Interrupts::new()?;
    let mut observed = Observed::default();

    let agent = start(&pattern, &row, &model, &args, ToolChoice::Required).await?;
    for text in TELL {
        if !converse(&agent, text, &mut interrupts, &mut observed).await? {
            drop(agent);
            pattern.close().await;
            return Err(cancelled());
        }
    }
    drop(agent);
    pattern.close().await;

    say!("\n== database closed and opened again, as a new process would");
    let pattern = Pattern::open(config()).await?;
    let archived = archive_conversation(&pattern, &row).await?;
    say!("== the conversation so far ({archived} messages) is archived out of the context window");
    // The question may be answered from the memory blocks in the context, or after a search:
    // the model's choice (a required tool call here made small models store the question).
    let agent = start(&pattern, &row, &model, &args, ToolChoice::Auto).await?;
    observed.last_answer.clear();
    let finished = converse(&agent, ASK, &mut interrupts, &mut observed).await?;
    drop(agent);
    drop(model);
    if !finished {
        pattern.close().await;
        return Err(cancelled());
    }

    let stored = show_memory(&pattern, &row, &observed).await?;
    search_archival(&pattern, &row).await?;
    print_batches(&pattern, &row).await?;
    pattern.close().await;
    verdict(stored, &observed)
}

/// A new agent with an empty `human` block and a `persona`.
async fn create_agent(pattern: &Pattern) -> Result<pattern::Agent> {
    let name = format!("demo-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let row = pattern
        .db()
        .create_agent(NewAgent {
            metadata: serde_json::json!({ "instructions": INSTRUCTIONS }),
            ..NewAgent::named(&name)
        })
        .await?;
    for (label, description, value) in [
        ("persona", "Who you are.", "A personal assistant."),
        ("human", "What you know about the user.", ""),
    ] {
        pattern
            .memory()
            .create_block(
                row.id,
                NewMemoryBlock {
                    label: label.into(),
                    description: description.into(),
                    value: value.into(),
                    char_limit: 2_000,
                    block_type: BlockType::Core,
                },
            )
            .await?;
    }
    say!("== agent `{name}` created with memory blocks `persona` and `human` (empty)");
    Ok(row)
}

/// The agent over `pattern`: greedy decoding unless `--temperature` says otherwise, the tools of
/// remembering only, and `first_tool` for each turn's first model call (which tool, if any, is
/// the model's choice).
async fn start(
    pattern: &Pattern,
    row: &pattern::Agent,
    model: &Model,
    args: &DemoArgs,
    first_tool: ToolChoice,
) -> Result<Arc<DatabaseAgent>> {
    let mut config = runtime_config(row, &*model.provider);
    config.max_iterations = args.max_iterations;
    config.temperature = Some(args.temperature);
    // What the agent stored earlier and what the message is about come back into its context.
    config.recall = 3;
    config.first_tool_choice = first_tool;
    // Storing ends the turn: small models otherwise store the same thing again and again.
    for tool in ["memory_append", "memory_replace", "archival_insert"] {
        config.rules.push(ToolRule::ExitLoop { tool: tool.into() });
    }
    // The tools of remembering only: with every built-in tool offered, the local 0.5B model
    // answered through `send_message` and `schedule_wakeup` instead of storing anything.
    let tools = pattern::core::tool::builtin::memory_registry().map_err(other)?;
    let agent = pattern
        .agent_with_tools(
            row.clone(),
            model.provider.clone(),
            config,
            Some(Arc::new(tools)),
        )
        .map_err(other)?;
    pattern::core::Agent::runtime(&*agent)
        .set_default_endpoint(Arc::new(super::chat::Terminal { json: false }))
        .await;
    Ok(agent)
}

fn cancelled() -> CliError {
    CliError::interrupted("the demo was cancelled (its last batch is abandoned)")
}

/// One user turn, streamed; what the agent did goes into `observed`. `false` when Ctrl-C
/// cancelled it.
async fn converse(
    agent: &Arc<DatabaseAgent>,
    text: &str,
    interrupts: &mut Interrupts,
    observed: &mut Observed,
) -> Result<bool> {
    say!("\n-- user: {text}\n-- {}:", agent_name(agent));
    let events = match turn(agent, text, interrupts, true, None).await? {
        TurnEnd::Finished(events) => events,
        TurnEnd::Cancelled => return Ok(false),
    };
    for e in &events {
        match e {
            ResponseEvent::ToolCallFinished { name, .. } => observed.tool_calls.push(name.clone()),
            ResponseEvent::TextDelta { text } => observed.last_answer.push_str(text),
            // The demo goes on; the verdict at the end decides.
            ResponseEvent::Error { kind, message, .. } => {
                eprintln!("  [the turn failed ({kind:?}): {message}]");
            }
            _ => {}
        }
    }
    Ok(true)
}

fn agent_name(agent: &DatabaseAgent) -> String {
    pattern::core::Agent::name(agent).to_owned()
}

/// Archives every closed batch of the agent, so the next turn's context holds its memory
/// blocks but none of the conversation.
async fn archive_conversation(pattern: &Pattern, row: &pattern::Agent) -> Result<u64> {
    let store = pattern.messages(row.id);
    let Some(newest) = store.list_batches(None, 1).await?.into_iter().next() else {
        return Ok(0);
    };
    let batch = store.get_batch(newest.id).await?;
    let Some(last) = batch.messages.iter().map(|m| m.position).max() else {
        return Ok(0);
    };
    Ok(store
        .archive_before(pattern::db::SnowflakeId(last.0 + 1))
        .await?)
}

/// Prints what the agent keeps; whether the fact is in its memory (blocks or archival).
async fn show_memory(pattern: &Pattern, row: &pattern::Agent, observed: &Observed) -> Result<bool> {
    let memory = pattern.memory();
    say!(
        "\n== tool calls made by the agent: {:?}",
        observed.tool_calls
    );
    let mut in_blocks = false;
    for label in ["persona", "human"] {
        let block = pattern::memory::MemoryStore::block(memory, row.id, label).await?;
        say!(
            "== memory block `{label}` (version {}): {:?}",
            block.version,
            block.value
        );
        in_blocks |= block.value.contains(FACT_MARK);
    }
    let passages = memory
        .list_archival(
            row.id,
            ListArchival {
                limit: 10,
                before: None,
                tag: None,
            },
        )
        .await?;
    if passages.is_empty() {
        say!("== archival memory: empty (the agent stored no passage)");
    }
    for p in &passages {
        say!("== archival passage stored by the agent: {}", p.content);
    }
    Ok(in_blocks || passages.iter().any(|p| p.content.contains(FACT_MARK)))
}

/// Hybrid search of what the agent stored (archival) and said (messages).
async fn search_archival(pattern: &Pattern, row: &pattern::Agent) -> Result<()> {
    // Let the background worker embed what was written, then search by meaning and words.
    let idle = pattern
        .search_db()
        .wait_idle(Duration::from_secs(120))
        .await
        .map_err(other)?;
    if !idle {
        eprintln!("warning: embeddings still pending after 120 s");
    }
    let query = "when did the beehive start?";
    let hits = pattern
        .memory()
        .search(
            query,
            &SearchOptions::mode(SearchMode::Hybrid)
                .with_limit(3)
                .for_agent(row.id)
                .only(&[ContentType::Archival, ContentType::Message]),
        )
        .await?;
    say!("\n== hybrid search for {query:?}:");
    for (i, h) in hits.iter().enumerate() {
        say!(
            "  {}. [{} {:.3}] {}",
            i + 1,
            h.content.content_type.as_str(),
            h.score,
            output::preview(&h.text, 120)
        );
    }
    Ok(())
}

/// Every stored batch of the agent, oldest first, with its tool pairs.
async fn print_batches(pattern: &Pattern, row: &pattern::Agent) -> Result<()> {
    say!("\n== stored batches of `{}`:", row.name);
    let store = pattern.messages(row.id);
    let mut infos = store.list_batches(None, 100).await?;
    infos.reverse();
    for info in infos {
        let batch = store.get_batch(info.id).await?;
        let calls = batch
            .messages
            .iter()
            .flat_map(|m| m.tool_use_ids().map(str::to_owned).collect::<Vec<_>>())
            .count();
        say!(
            "  batch {} {:?} {:?}: {} messages, {} tool calls, every call answered: {}",
            info.id.get(),
            info.batch_type,
            info.state,
            batch.messages.len(),
            calls,
            batch.pending_tool_calls().is_empty()
        );
    }
    Ok(())
}

/// Whether `answer` is a tool call written as text (a JSON object, fenced or not) rather than
/// words to the user: small models write one when they may call no tool.
fn call_shaped(answer: &str) -> bool {
    let body = answer
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| v.is_object())
}

/// Success only when the agent itself stored the fact and recalled it in words.
fn verdict(stored: bool, observed: &Observed) -> Result<()> {
    let recalled = observed.last_answer.contains(FACT_MARK) && !call_shaped(&observed.last_answer);
    say!(
        "\n== stored the fact in its memory: {}; recalled it after the restart: {}",
        yes(stored),
        yes(recalled)
    );
    match (stored, recalled) {
        (true, true) => {
            say!(
                "== demo complete: the agent stored the fact itself and recalled it from durable memory"
            );
            Ok(())
        }
        (false, _) => Err(CliError::agent_failed(
            "the agent did not store the fact (April 2024) in its memory blocks or archival memory",
        )),
        (true, false) => Err(CliError::agent_failed(
            "the agent stored the fact but did not recall it when asked",
        )),
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    //! The demo's verdict on an answer.

    use super::call_shaped;

    #[test]
    fn a_call_written_as_text_is_not_an_answer() {
        assert!(call_shaped(
            "```json\n{\"name\": \"archival_search\", \"arguments\": {\"query\": \"April 2024\"}}\n```"
        ));
        assert!(call_shaped("{\"name\": \"x\", \"arguments\": {}}"));
        assert!(!call_shaped("You started your first hive in April 2024."));
        assert!(!call_shaped("2024"));
    }
}
