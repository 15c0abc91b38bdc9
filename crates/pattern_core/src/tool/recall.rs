//! The search tools: `archival_insert`, `archival_search` and `search` (messages, archival
//! passages, memory blocks), over the runtime's archival memory.
//!
//! Every search is scoped to the calling agent (the runtime sets the agent filter; a tool
//! cannot widen it). Results are rendered as short, numbered lines with their kind and date, cut
//! at a clear marker so a long passage cannot flood the context. These tools must never search
//! across agents and never store anything but the passage they are asked to insert.

use std::fmt::Write as _;

use async_trait::async_trait;
use memory_v2::{SearchHit, SearchMode, SearchOptions};
use pattern_db::{ContentType, NewArchival};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input as parse};

/// Most characters of one hit shown to the model.
const HIT_CHARS: usize = 500;

fn render(hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return "no results".into();
    }
    let mut out = String::new();
    for (i, hit) in hits.iter().enumerate() {
        let kind = hit.content.content_type.as_str();
        let date = hit.created_at.format("%Y-%m-%d %H:%M");
        let mut chars = hit.text.chars();
        let text: String = chars.by_ref().take(HIT_CHARS).collect();
        let more = if chars.next().is_some() { " [...]" } else { "" };
        let _ = writeln!(out, "{}. [{kind}, {date}] {text}{more}", i + 1);
    }
    out
}

async fn run_search(
    ctx: &ToolContext,
    query: &str,
    options: SearchOptions,
) -> Result<ToolOutput, ToolError> {
    let hits = ctx
        .runtime
        .search(query, &options)
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    Ok(ToolOutput::text(render(&hits)))
}

/// `archival_insert`: stores a passage in the agent's archival memory.
#[derive(Debug)]
pub struct ArchivalInsert;

#[derive(Deserialize)]
struct InsertInput {
    content: String,
    #[serde(default)]
    tags: Vec<String>,
}

#[async_trait]
impl Tool for ArchivalInsert {
    fn name(&self) -> &str {
        "archival_insert"
    }
    fn description(&self) -> &str {
        "Store a passage in your long-term archival memory, to find later with archival_search."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["content"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: InsertInput = parse(self.name(), input)?;
        let archival = ctx
            .runtime
            .archival()
            .ok_or_else(|| ToolError::Failed("archival memory is not configured".into()))?;
        let entry = archival
            .insert_archival(
                ctx.runtime.agent_id(),
                NewArchival {
                    tags: args.tags,
                    ..NewArchival::text(args.content)
                },
            )
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput::text(format!("stored passage {}", entry.id)))
    }
}

/// `archival_search`: searches the agent's archival memory.
#[derive(Debug)]
pub struct ArchivalSearch;

#[derive(Deserialize)]
struct QueryInput {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl Tool for ArchivalSearch {
    fn name(&self) -> &str {
        "archival_search"
    }
    fn description(&self) -> &str {
        "Search your archival memory by meaning and by words."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: QueryInput = parse(self.name(), input)?;
        let options = SearchOptions::mode(SearchMode::Auto)
            .with_limit(args.limit.unwrap_or(5))
            .only(&[ContentType::Archival]);
        run_search(&ctx, &args.query, options).await
    }
}

/// `search`: searches the agent's conversation history, archival memory and memory blocks.
#[derive(Debug)]
pub struct Search;

#[derive(Deserialize)]
struct SearchInput {
    query: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl Tool for Search {
    fn name(&self) -> &str {
        "search"
    }
    fn description(&self) -> &str {
        "Search your past conversations, archival memory and memory blocks."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "scope": {"type": "string", "enum": ["all", "messages", "archival", "blocks"]},
                "mode": {"type": "string", "enum": ["auto", "fts", "vector", "hybrid"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: SearchInput = parse(self.name(), input)?;
        let mode = match args.mode.as_deref() {
            Some("fts") => SearchMode::Fts,
            Some("vector") => SearchMode::Vector,
            Some("hybrid") => SearchMode::Hybrid,
            _ => SearchMode::Auto,
        };
        let types: &[ContentType] = match args.scope.as_deref() {
            Some("messages") => &[ContentType::Message],
            Some("archival") => &[ContentType::Archival],
            Some("blocks") => &[ContentType::Block],
            _ => &[],
        };
        let options = SearchOptions::mode(mode)
            .with_limit(args.limit.unwrap_or(5))
            .only(types);
        run_search(&ctx, &args.query, options).await
    }
}
