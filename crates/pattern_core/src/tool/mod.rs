//! Tools: the [`Tool`] trait, the [`ToolRegistry`] that holds them (per agent, or shared between
//! agents when one `Arc` is given to several runtimes), and the [`ToolRule`]s a runtime enforces.
//!
//! Every tool declares a JSON Schema for its input; the registry compiles it once at
//! registration (a bad schema is refused then, not at call time) and checks every call against
//! it, so a tool only ever sees input of the shape it declared. A bad call (unknown tool,
//! arguments that fail the schema, a broken rule, a denied permission, a timeout, a panic) is
//! never a crash: it becomes an error result the model sees. This module must never execute a
//! tool itself (the runtime does, with timeouts and permissions) and never hold per-agent state:
//! rule counters live in each runtime.

pub mod builtin;
pub mod meeting;
pub mod recall;
pub mod schedule;
pub mod session;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use context_v2::ToolDefinition;
use pattern_db::BatchId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::runtime::AgentRuntime;

/// What a tool returns when it succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Ask for another model turn even if the loop would otherwise end (heartbeat).
    pub request_heartbeat: bool,
}

impl ToolOutput {
    /// A plain result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            request_heartbeat: false,
        }
    }
}

/// Why a call did not produce a result. The runtime turns each into an error result for the
/// model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool has this name.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The registered names, comma-separated.
        available: String,
    },
    /// The arguments do not match the tool's schema, or are not JSON.
    #[error("invalid arguments for `{tool}`: {reason}")]
    InvalidInput {
        /// The tool.
        tool: String,
        /// What is wrong, for the model.
        reason: String,
    },
    /// A tool rule refused the call.
    #[error("`{tool}` refused by a tool rule: {reason}")]
    RuleViolation {
        /// The tool.
        tool: String,
        /// Which rule and why.
        reason: String,
    },
    /// A permission was denied (or not answered in time).
    #[error("permission denied for `{tool}`: {reason}")]
    PermissionDenied {
        /// The tool.
        tool: String,
        /// The broker's reason.
        reason: String,
    },
    /// The tool ran and failed; the message is for the model.
    #[error("{0}")]
    Failed(String),
    /// The tool did not finish in time (it was cancelled).
    #[error("`{tool}` did not finish within {after:?} and was cancelled")]
    TimedOut {
        /// The tool.
        tool: String,
        /// The limit.
        after: Duration,
    },
    /// The tool panicked; the runtime caught it.
    #[error("`{tool}` crashed: {message}")]
    Panicked {
        /// The tool.
        tool: String,
        /// The panic message, if it had one.
        message: String,
    },
}

impl ToolError {
    /// A short, stable name of the failure (for metrics and traces; never the message).
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::InvalidInput { .. } => "invalid_input",
            ToolError::RuleViolation { .. } => "rule_violation",
            ToolError::PermissionDenied { .. } => "permission_denied",
            ToolError::Failed(_) => "failed",
            ToolError::TimedOut { .. } => "timed_out",
            ToolError::Panicked { .. } => "panicked",
        }
    }
}

/// What a tool gets besides its input.
#[derive(Clone)]
pub struct ToolContext {
    /// The runtime of the calling agent.
    pub runtime: Arc<AgentRuntime>,
    /// The batch the call belongs to.
    pub batch: BatchId,
    /// The call's id.
    pub call_id: String,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("agent", &self.runtime.agent_id())
            .field("batch", &self.batch)
            .field("call_id", &self.call_id)
            .finish()
    }
}

/// A capability the model can call.
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// The name the model calls it by: 1 to 64 characters of `[a-zA-Z0-9_-]`.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of its input object.
    fn input_schema(&self) -> Value;

    /// Whether the tool needs a human's approval before every call.
    fn requires_approval(&self) -> bool {
        false
    }

    /// Runs the call. `input` has passed the schema.
    async fn execute(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> std::result::Result<ToolOutput, ToolError>;
}

/// Reads a tool's (schema-checked) input into its argument type; a mismatch is an error result
/// for the model, never a crash.
pub(crate) fn parse_input<T: for<'de> Deserialize<'de>>(
    tool: &str,
    input: Value,
) -> std::result::Result<T, ToolError> {
    serde_json::from_value(input).map_err(|e| ToolError::InvalidInput {
        tool: tool.to_owned(),
        reason: e.to_string(),
    })
}

struct Entry {
    tool: Arc<dyn Tool>,
    schema: Value,
    validator: jsonschema::Validator,
}

/// The tools an agent may call. Share one between agents by giving each runtime the same `Arc`.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Entry>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`. Refused: a name that is taken or not `[a-zA-Z0-9_-]{1,64}`, a schema that
    /// does not compile or does not describe an object.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<()> {
        let name = tool.name().to_owned();
        if !valid_tool_name(&name) {
            return Err(Error::InvalidTool {
                name,
                reason: "names are 1 to 64 characters of [a-zA-Z0-9_-]".into(),
            });
        }
        if self.tools.contains_key(&name) {
            return Err(Error::InvalidTool {
                name,
                reason: "a tool with this name is registered already".into(),
            });
        }
        let schema = tool.input_schema();
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(Error::InvalidTool {
                name,
                reason: "the input schema must have \"type\": \"object\"".into(),
            });
        }
        let validator = jsonschema::validator_for(&schema).map_err(|e| Error::InvalidTool {
            name: name.clone(),
            reason: format!("the input schema does not compile: {e}"),
        })?;
        self.tools.insert(
            name,
            Entry {
                tool,
                schema,
                validator,
            },
        );
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).map(|e| e.tool.clone())
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Definitions for the model, sorted by name (a stable prefix for prompt caches).
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|(name, e)| ToolDefinition {
                name: name.clone(),
                description: e.tool.description().to_owned(),
                input_schema: e.schema.clone(),
            })
            .collect()
    }

    /// Looks `name` up and checks `input` against its schema.
    pub fn check(
        &self,
        name: &str,
        input: &Value,
    ) -> std::result::Result<Arc<dyn Tool>, ToolError> {
        let Some(entry) = self.tools.get(name) else {
            return Err(ToolError::UnknownTool {
                name: name.chars().take(100).collect(),
                available: self.names().join(", "),
            });
        };
        let problems: Vec<String> = entry
            .validator
            .iter_errors(input)
            .take(5)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(ToolError::InvalidInput {
                tool: name.to_owned(),
                reason: problems.join("; "),
            });
        }
        Ok(entry.tool.clone())
    }
}

/// A rule about tool use, enforced by the runtime and shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum ToolRule {
    /// The first tool call of every batch must be this tool.
    StartWith {
        /// The tool.
        tool: String,
    },
    /// Calling this tool ends the loop once its result is stored (unless a result asks for a
    /// heartbeat).
    ExitLoop {
        /// The tool.
        tool: String,
    },
    /// At most `max` calls of this tool per batch.
    MaxCallsPerBatch {
        /// The tool.
        tool: String,
        /// The limit.
        max: u32,
    },
    /// At least `period` between two calls of this tool.
    Cooldown {
        /// The tool.
        tool: String,
        /// The period.
        #[serde(with = "duration_ms")]
        period: Duration,
    },
    /// Every call of this tool needs approval through the permission broker.
    RequiresApproval {
        /// The tool.
        tool: String,
    },
}

mod duration_ms {
    //! `Duration` as whole milliseconds in JSON; never a float.
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl ToolRule {
    /// The tool the rule is about.
    pub fn tool(&self) -> &str {
        match self {
            ToolRule::StartWith { tool }
            | ToolRule::ExitLoop { tool }
            | ToolRule::MaxCallsPerBatch { tool, .. }
            | ToolRule::Cooldown { tool, .. }
            | ToolRule::RequiresApproval { tool } => tool,
        }
    }

    /// The rule in words, for the system prompt.
    pub fn describe(&self) -> String {
        match self {
            ToolRule::StartWith { tool } => {
                format!("Your first tool call in every turn must be `{tool}`.")
            }
            ToolRule::ExitLoop { tool } => {
                format!("Calling `{tool}` ends your turn once its result is in.")
            }
            ToolRule::MaxCallsPerBatch { tool, max } => {
                format!("Call `{tool}` at most {max} times per turn.")
            }
            ToolRule::Cooldown { tool, period } => format!(
                "Wait at least {} s between two calls of `{tool}`.",
                period.as_secs_f64()
            ),
            ToolRule::RequiresApproval { tool } => {
                format!("Every call of `{tool}` waits for a human's approval.")
            }
        }
    }
}
