//! An agent's memory as an MCP server (`pattern mcp serve`): its memory blocks (list, read,
//! append, replace against an expected version), archival memory (insert, search) and a search
//! over its history, for other programs to use.
//!
//! [`MemoryServer`] is the handler; [`serve_stdio`] runs it on this process's stdin and stdout
//! (the HTTP transport, with its organization API key, is `pattern_server::mcp`'s). Every write
//! goes through the memory store with the agent's own permissions and the version the caller
//! read: a stale version is refused (`version conflict`), never merged or overwritten, and a
//! value over its limit is refused, never cut. Bad input is an error result, never a panic.
//! This module must never write anything but through `memory_v2`, and never reach another
//! agent's memory than the one it serves.

use std::fmt::Write as _;
use std::sync::Arc;

use memory_v2::{ArchivalMemory, MemoryEditor, WriteAuth};
use pattern_db::search::ContentType;
use pattern_db::{AgentId, NewArchival};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The tools the memory server offers, with their input schemas.
fn tools() -> Vec<Tool> {
    let tool = |name: &'static str, description: &'static str, schema: Value| {
        let Value::Object(schema) = schema else {
            return None;
        };
        Some(Tool::new(name, description, Arc::new(schema)))
    };
    let query = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50}
        },
        "required": ["query"],
        "additionalProperties": false
    });
    [
        tool(
            "blocks_list",
            "List the agent's memory blocks: label, description, permission, version, length.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        tool(
            "block_read",
            "Read one memory block: its value and version.",
            json!({
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"],
                "additionalProperties": false
            }),
        ),
        tool(
            "block_append",
            "Append text on a new line at the end of a block. With expected_version, refused if \
             the block changed since.",
            json!({
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "content": {"type": "string"},
                    "expected_version": {"type": "integer"}
                },
                "required": ["label", "content"],
                "additionalProperties": false
            }),
        ),
        tool(
            "block_replace",
            "Replace the exact text `old` with `new` in a block, at the version you read \
             (refused if the block changed since).",
            json!({
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "old": {"type": "string", "minLength": 1},
                    "new": {"type": "string"},
                    "expected_version": {"type": "integer"}
                },
                "required": ["label", "old", "new", "expected_version"],
                "additionalProperties": false
            }),
        ),
        tool(
            "archival_add",
            "Store a passage in the agent's archival memory.",
            json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["content"],
                "additionalProperties": false
            }),
        ),
        tool(
            "archival_find",
            "Search the agent's archival memory.",
            query.clone(),
        ),
        tool(
            "history_search",
            "Search the agent's conversation history.",
            query,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The memory of one agent, served over MCP.
#[derive(Clone)]
pub struct MemoryServer {
    agent: AgentId,
    name: String,
    memory: Arc<dyn MemoryEditor>,
    archival: Arc<dyn ArchivalMemory>,
}

impl std::fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryServer")
            .field("agent", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    old: Option<String>,
    #[serde(default)]
    new: Option<String>,
    #[serde(default)]
    expected_version: Option<i64>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

fn missing(field: &str) -> String {
    format!("`{field}` is required")
}

impl MemoryServer {
    /// Serves `agent`'s memory (its own permissions apply to every write).
    pub fn new(
        agent: AgentId,
        name: impl Into<String>,
        memory: Arc<dyn MemoryEditor>,
        archival: Arc<dyn ArchivalMemory>,
    ) -> Self {
        Self {
            agent,
            name: name.into(),
            memory,
            archival,
        }
    }

    /// Runs one call; `Err` is the message of an error result.
    async fn run(&self, tool: &str, args: Args) -> std::result::Result<String, String> {
        let label = || args.label.clone().ok_or_else(|| missing("label"));
        let text = |e: memory_v2::Error| match e {
            memory_v2::Error::Conflict { .. } => format!(
                "version conflict: {e}; read the block again and retry with its current version"
            ),
            other => other.to_string(),
        };
        match tool {
            "blocks_list" => {
                let blocks = self.memory.context_blocks(self.agent).await.map_err(text)?;
                let list: Vec<Value> = blocks
                    .iter()
                    .map(|b| {
                        json!({
                            "label": b.label,
                            "description": b.description,
                            "permission": b.permission,
                            "version": b.version,
                            "chars": b.value.chars().count(),
                            "char_limit": b.char_limit,
                        })
                    })
                    .collect();
                Ok(Value::Array(list).to_string())
            }
            "block_read" => {
                let block = self
                    .memory
                    .block(self.agent, &label()?)
                    .await
                    .map_err(text)?;
                Ok(json!({
                    "label": block.label,
                    "value": block.value,
                    "version": block.version,
                    "permission": block.permission,
                })
                .to_string())
            }
            "block_append" => {
                let label = label()?;
                let content = args.content.clone().ok_or_else(|| missing("content"))?;
                let version = match args.expected_version {
                    Some(v) => v,
                    None => {
                        self.memory
                            .block(self.agent, &label)
                            .await
                            .map_err(text)?
                            .version
                    }
                };
                let version = self
                    .memory
                    .append(self.agent, &label, &content, version, WriteAuth::Agent)
                    .await
                    .map_err(text)?;
                Ok(json!({"label": label, "version": version}).to_string())
            }
            "block_replace" => {
                let label = label()?;
                let old = args.old.clone().ok_or_else(|| missing("old"))?;
                let new = args.new.clone().ok_or_else(|| missing("new"))?;
                let expected = args
                    .expected_version
                    .ok_or_else(|| missing("expected_version"))?;
                let version = self
                    .memory
                    .replace(self.agent, &label, &old, &new, expected, WriteAuth::Agent)
                    .await
                    .map_err(text)?;
                Ok(json!({"label": label, "version": version}).to_string())
            }
            "archival_add" => {
                let content = args.content.clone().ok_or_else(|| missing("content"))?;
                let entry = self
                    .archival
                    .insert_archival(
                        self.agent,
                        NewArchival {
                            tags: args.tags.clone(),
                            ..NewArchival::text(content)
                        },
                    )
                    .await
                    .map_err(text)?;
                Ok(json!({"id": entry.id.to_string()}).to_string())
            }
            "archival_find" | "history_search" => {
                let query = args.query.clone().ok_or_else(|| missing("query"))?;
                let only = if tool == "archival_find" {
                    ContentType::Archival
                } else {
                    ContentType::Message
                };
                let options = db_v2_options(self.agent, args.limit.unwrap_or(5), only);
                let hits = self.archival.search(&query, &options).await.map_err(text)?;
                let mut out = String::new();
                for hit in &hits {
                    let _ = writeln!(
                        out,
                        "{}",
                        json!({
                            "text": hit.text,
                            "score": hit.score,
                            "created_at": hit.created_at.to_rfc3339(),
                        })
                    );
                }
                Ok(if out.is_empty() {
                    "no results".into()
                } else {
                    out
                })
            }
            other => Err(format!(
                "unknown tool `{}`",
                other.chars().take(100).collect::<String>()
            )),
        }
    }
}

fn db_v2_options(agent: AgentId, limit: usize, only: ContentType) -> memory_v2::SearchOptions {
    memory_v2::SearchOptions {
        agent: Some(agent),
        ..memory_v2::SearchOptions::mode(memory_v2::SearchMode::Auto)
            .with_limit(limit)
            .only(&[only])
    }
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "pattern-memory",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "The memory of Pattern agent `{}`: blocks (read before you change one and pass \
                 its version), archival passages and history search.",
                self.name
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match serde_json::from_value::<Args>(arguments) {
            Ok(args) => self.run(&request.name, args).await,
            Err(e) => Err(format!("invalid arguments: {e}")),
        };
        Ok(CallToolResponse::Complete(match result {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
        }))
    }
}

/// Serves `server` on this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(server: MemoryServer) -> Result<()> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Mcp {
            server: "memory".into(),
            reason: format!("the MCP handshake failed: {e}"),
        })?;
    running.waiting().await.map_err(|e| Error::Mcp {
        server: "memory".into(),
        reason: e.to_string(),
    })?;
    Ok(())
}
