//! Connections to MCP servers and their tools as [`Tool`]s.
//!
//! A [`McpConnection`] starts its server on first use (a child process over stdio, or a
//! streamable HTTP session) and keeps it. A call that fails at the transport (the server died,
//! closed its pipe, answered what is not MCP) or that is cancelled mid-way (the runtime's tool
//! timeout, the run's cancellation) drops the connection, so the next call starts the server
//! again; the failed call is an error result for the model. [`add_servers`] connects an
//! agent's servers, lists and checks their tools, and registers each as a [`McpTool`]; a server
//! that does not start, or a tool that is refused (a built-in's name, a name or schema the
//! registry refuses), is reported as an [`McpProblem`] and left out while the rest is used.
//! This module must never panic on what a server sends, never wait on a server without a
//! deadline when it starts, and never register a tool under a built-in's name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{McpServerConfig, McpTransport, shown_name, wire_name};
use crate::error::{Error, Result};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// How long a server may take to start and answer the handshake and the tool list.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest result text passed to the model; a longer one is an error result (never cut).
pub const MAX_RESULT_CHARS: usize = 100_000;
/// The longest tool description passed to the model, in characters (longer ones are cut at a
/// character boundary: descriptions are the server's prose, not data).
pub const MAX_DESCRIPTION_CHARS: usize = 512;

type Service = RunningService<RoleClient, ()>;

/// One server, started on demand and again after it failed.
pub struct McpConnection {
    config: McpServerConfig,
    start_timeout: Duration,
    live: Mutex<Option<Arc<Service>>>,
}

impl fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpConnection")
            .field("server", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// Closes the service it guards unless disarmed: a call cancelled mid-way leaves the server in
/// an unknown state, so it is shut down and the next call starts it again.
struct Abandon {
    service: Option<Arc<Service>>,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(service) = self.service.take() {
            service.cancellation_token().cancel();
        }
    }
}

impl McpConnection {
    /// A connection to `config`'s server (not started yet).
    pub fn new(config: McpServerConfig, start_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            config,
            start_timeout,
            live: Mutex::new(None),
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        Error::Mcp {
            server: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    async fn start(&self) -> Result<Service> {
        let started = async {
            match &self.config.transport {
                McpTransport::Stdio { command, args, env } => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).envs(env);
                    let (transport, _) = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| {
                            self.error(format!(
                                "`{command}` could not be started ({e}); is it installed?"
                            ))
                        })?;
                    ().serve(transport)
                        .await
                        .map_err(|e| self.error(format!("the MCP handshake failed: {e}")))
                }
                McpTransport::Http { url } => {
                    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                    ().serve(transport).await.map_err(|e| {
                        self.error(format!("the MCP handshake with {url} failed: {e}"))
                    })
                }
            }
        };
        match tokio::time::timeout(self.start_timeout, started).await {
            Ok(result) => result,
            Err(_) => Err(self.error(format!(
                "it did not answer the MCP handshake within {:?}",
                self.start_timeout
            ))),
        }
    }

    /// The running service, started when there is none.
    async fn service(&self) -> Result<Arc<Service>> {
        let mut live = self.live.lock().await;
        if let Some(service) = live
            .as_ref()
            .filter(|s| !s.is_closed() && !s.peer().is_transport_closed())
        {
            return Ok(service.clone());
        }
        let service = Arc::new(self.start().await?);
        *live = Some(service.clone());
        Ok(service)
    }

    async fn forget(&self, service: &Arc<Service>) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| Arc::ptr_eq(l, service)) {
            *live = None;
        }
    }

    /// The server's tools (starting it if needed), within the start timeout.
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>> {
        let service = self.service().await?;
        match tokio::time::timeout(self.start_timeout, service.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => {
                self.forget(&service).await;
                Err(self.error(format!("listing its tools failed: {e}")))
            }
            Err(_) => {
                self.forget(&service).await;
                Err(self.error(format!(
                    "it did not list its tools within {:?}",
                    self.start_timeout
                )))
            }
        }
    }

    /// Calls `tool` with `arguments`; a failure of the server (not of the tool) drops the
    /// connection so the next call starts it again.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<CallToolResult> {
        let service = self.service().await?;
        let mut guard = Abandon {
            service: Some(service.clone()),
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let result = service.call_tool(params).await;
        match result {
            Ok(result) => {
                guard.service = None;
                Ok(result)
            }
            Err(ServiceError::McpError(e)) => {
                // The server answered with a JSON-RPC error: it is alive and well.
                guard.service = None;
                Err(self.error(format!("the call of `{tool}` failed: {}", e.message)))
            }
            Err(e) => {
                drop(guard);
                self.forget(&service).await;
                Err(self.error(format!(
                    "the call of `{tool}` failed ({e}); the server will be started again on the \
                     next call"
                )))
            }
        }
    }
}

/// A server's tool, as the model calls it.
pub struct McpTool {
    wire: String,
    remote: String,
    description: String,
    schema: Value,
    conn: Arc<McpConnection>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool").field("name", &self.wire).finish()
    }
}

impl McpTool {
    /// The tool as people see it: `server.tool`.
    pub fn shown(&self) -> String {
        shown_name(&self.wire).unwrap_or_else(|| self.wire.clone())
    }
}

/// The text of a result: its text blocks in order, anything else as JSON.
fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match block.as_text() {
            Some(t) => parts.push(t.text.clone()),
            None => parts.push(serde_json::to_string(block).unwrap_or_default()),
        }
    }
    if let (true, Some(structured)) = (parts.is_empty(), &result.structured_content) {
        parts.push(structured.to_string());
    }
    parts.join("\n")
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.wire
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    async fn execute(
        &self,
        _ctx: ToolContext,
        input: Value,
    ) -> std::result::Result<ToolOutput, ToolError> {
        let Value::Object(arguments) = input else {
            return Err(ToolError::InvalidInput {
                tool: self.wire.clone(),
                reason: "the arguments are not a JSON object".into(),
            });
        };
        let result = self
            .conn
            .call(&self.remote, arguments)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let text = result_text(&result);
        if text.chars().count() > MAX_RESULT_CHARS {
            return Err(ToolError::Failed(format!(
                "`{}` answered more than {MAX_RESULT_CHARS} characters; ask for less",
                self.shown()
            )));
        }
        if result.is_error == Some(true) {
            return Err(ToolError::Failed(format!(
                "`{}` reported an error: {text}",
                self.shown()
            )));
        }
        Ok(ToolOutput::text(text))
    }
}

/// Why a server or one of its tools is not available to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpProblem {
    /// The server.
    pub server: String,
    /// The tool, when only that tool is left out.
    pub tool: Option<String>,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for McpProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(tool) => write!(
                f,
                "MCP tool `{}.{tool}` left out: {}",
                self.server, self.reason
            ),
            None => write!(f, "MCP server `{}` left out: {}", self.server, self.reason),
        }
    }
}

fn valid_remote_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Connects `servers`, and registers each of their tools in `registry` as `server__tool`.
/// Names already in `registry` (the built-ins) are reserved: a server's tool with one of them
/// as its own name is refused, and so is anything the registry refuses (a name over 64
/// characters or not `[a-zA-Z0-9_-]`, a schema that is not a JSON object schema). Every
/// server or tool left out is returned; the rest is registered.
pub async fn add_servers(
    registry: &mut ToolRegistry,
    servers: &[McpServerConfig],
    start_timeout: Duration,
) -> Vec<McpProblem> {
    let reserved: Vec<String> = registry.names().iter().map(|s| (*s).to_owned()).collect();
    let mut problems = Vec::new();
    for config in servers {
        let conn = McpConnection::new(config.clone(), start_timeout);
        let tools = match conn.list_tools().await {
            Ok(tools) => tools,
            Err(e) => {
                problems.push(McpProblem {
                    server: config.name.clone(),
                    tool: None,
                    reason: match e {
                        Error::Mcp { reason, .. } => reason,
                        other => other.to_string(),
                    },
                });
                continue;
            }
        };
        for tool in tools {
            let remote = tool.name.to_string();
            let refuse = |reason: String| McpProblem {
                server: config.name.clone(),
                tool: Some(remote.chars().take(100).collect()),
                reason,
            };
            if reserved.contains(&remote) {
                problems.push(refuse(format!(
                    "`{remote}` is the name of a built-in tool; a server may not declare it"
                )));
                continue;
            }
            if !valid_remote_name(&remote) {
                problems.push(refuse(
                    "tool names must be [a-zA-Z0-9_-] to reach the model".into(),
                ));
                continue;
            }
            let description: String = tool
                .description
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(MAX_DESCRIPTION_CHARS)
                .collect();
            let schema = Value::Object((*tool.input_schema).clone());
            let mcp_tool = McpTool {
                wire: wire_name(&config.name, &remote),
                remote: remote.clone(),
                description: format!("[{}.{remote}] {description}", config.name),
                schema,
                conn: conn.clone(),
            };
            if let Err(e) = registry.register(Arc::new(mcp_tool)) {
                problems.push(refuse(match e {
                    Error::InvalidTool { reason, .. } => reason,
                    other => other.to_string(),
                }));
            }
        }
    }
    problems
}
