//! `pattern demo`: the main job. A real agent conversation on the embedded defaults: SQLite in
//! the data directory, the tantivy full-text index beside it, the offline embedding model, and a
//! local llama.cpp model server started for the run (or a hosted model when an API key is set).
//!
//! The agent is created with memory blocks, answers scripted user turns with streamed output,
//! calls tools (memory and archival), and then the command searches archival memory and prints
//! the stored batches and the search hits. It fails (non-zero exit) when the model called no
//! tool at all or nothing was found again, so CI notices a broken chain; it must never fake a
//! step: a passage the model did not store is reported as such before the search.

use std::time::Duration;

use pattern::core::ResponseEvent;
use pattern::core::local_server::LocalModel;
use pattern::db::{ContentType, ListArchival, NewArchival};
use pattern::memory::{
    ArchivalMemory, BlockType, MemoryEditor, NewMemoryBlock, SearchMode, SearchOptions,
};
use pattern::search::ModelPaths;
use pattern::{Embedding, NewAgent, Pattern, PatternConfig};

use super::chat::{TurnEnd, model, runtime_config, turn};
use crate::cli::DemoArgs;
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::interrupt::Interrupts;
use crate::output;

const TURNS: [&str; 3] = [
    "Hi! I'm Sam. I keep two beehives on my balcony in Lyon. Use memory_append to add that to \
     your `human` memory block.",
    "Please store this in your archival memory with archival_insert: the first balcony hive was \
     started in April 2024 from a swarm a neighbour caught.",
    "Thanks. In one sentence: what do you know about me?",
];

const FACT: &str =
    "The first balcony hive was started in April 2024 from a swarm a neighbour caught.";

/// Prints one line on stdout through [`output::line`] (a closed pipe is an error, not a panic).
macro_rules! say {
    ($($arg:tt)*) => {
        output::line(&format!($($arg)*))?
    };
}

fn other(e: impl std::fmt::Display) -> CliError {
    CliError::other(e.to_string())
}

/// Runs the demo.
pub(crate) async fn run(env: &Env, args: DemoArgs) -> Result<()> {
    let paths = ModelPaths::from_env();
    let config = PatternConfig::data_dir(&env.data_dir).with_embedding(Embedding::Model(paths));
    let pattern = Pattern::open(config).await?;
    say!("== Pattern demo: data in {}", env.data_dir.display());
    let name = format!("demo-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let row = pattern.db().create_agent(NewAgent::named(&name)).await?;
    let memory = pattern.memory();
    for (label, description, value) in [
        (
            "persona",
            "Who you are.",
            "I am a friendly assistant who remembers what matters.",
        ),
        ("human", "What you know about the user.", ""),
    ] {
        memory
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
    say!("== agent `{name}` created with memory blocks `persona` and `human`");

    let model = model(env, LocalModel::Qwen).await?;
    let mut config = runtime_config(&row, &*model.provider);
    config.max_iterations = args.max_iterations;
    // Greedy decoding: the small local model's tool-call format is then the same on every run
    // (sampled, it sometimes writes a call as plain JSON text that the server cannot parse).
    config.temperature = Some(0.0);
    let agent = pattern
        .agent(row.clone(), model.provider.clone(), config)
        .map_err(other)?;

    let mut tool_calls = Vec::new();
    let mut interrupts = Interrupts::new()?;
    for text in TURNS {
        say!("\n-- user: {text}\n-- {name}:");
        let events = match turn(&agent, text, &mut interrupts, true, None).await? {
            TurnEnd::Finished(events) => events,
            TurnEnd::Cancelled => {
                drop(agent);
                drop(model);
                pattern.close().await;
                return Err(CliError::interrupted(
                    "the demo was cancelled (its last batch is abandoned)",
                ));
            }
        };
        for e in &events {
            match e {
                ResponseEvent::ToolCallFinished { name, .. } => tool_calls.push(name.clone()),
                // The demo goes on; its checks at the end decide.
                ResponseEvent::Error { kind, message, .. } => {
                    eprintln!("  [the turn failed ({kind:?}): {message}]");
                }
                _ => {}
            }
        }
    }
    drop(agent);
    drop(model);

    say!("\n== tool calls made by the agent: {tool_calls:?}");
    let human = pattern::memory::MemoryStore::block(memory, row.id, "human").await?;
    say!(
        "== memory block `human` (version {}): {:?}",
        human.version,
        human.value
    );

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
        say!("== the agent stored no archival passage; storing the fact through the API");
        memory
            .insert_archival(row.id, NewArchival::text(FACT))
            .await?;
    } else {
        for p in &passages {
            say!("== archival passage stored by the agent: {}", p.content);
        }
    }
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
    let hits = memory
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

    say!("\n== stored batches of `{name}`:");
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
    pattern.close().await;

    if tool_calls.is_empty() {
        return Err(CliError::other("the model made no tool call in the demo"));
    }
    if !hits.iter().any(|h| h.text.contains("April 2024")) {
        return Err(CliError::other("search did not find the stored fact again"));
    }
    say!("\n== demo complete: durable memory, tool calls and search all worked");
    Ok(())
}
