//! [`AgentRuntime`]: everything an agent *does* goes through here.
//!
//! Executing tools (schema check, tool rules, permission, timeout, panic capture, audit of
//! failures), storing steps, sending messages to endpoints and other agents, building context
//! (through `context_v2`), and scheduling wakeups. A runtime belongs to one agent and owns its
//! permission broker and rule counters; its tool registry and memory store may be shared.
//!
//! This module must never let a tool's failure escape as a crash (every failure is an error
//! result the model sees), never run a guarded tool without a recorded approval, and never store
//! a tool result apart from its call.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use context_v2::{ContextBuilder, ContextConfig, MemoryContext, Summarizer, TokenCounter};
use futures::future::join_all;
use memory_v2::{ArchivalMemory, MemoryEditor, MemoryStore, SearchHit, SearchOptions};
use pattern_db::queue::{NewQueued, QueuedMessage};
use pattern_db::{
    AgentId, BatchId, BatchType, ContentBlock, Database, MessageStore, NewMessage, Role,
    SessionType, StepReceipt,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, RwLock};
use tracing::Instrument;

use crate::endpoint::{MessageEndpoint, MessageTarget, OutgoingMessage};
use crate::error::{Error, Result};
use crate::permission::{Decision, PermissionBroker, PermissionRequest};
use crate::provider::{ModelProvider, ToolChoice};
use crate::tool::{ToolContext, ToolError, ToolOutput, ToolRegistry, ToolRule};

/// Limits and settings of one agent's runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeConfig {
    /// Context building.
    pub context: ContextConfig,
    /// Tool rules.
    pub rules: Vec<ToolRule>,
    /// Longest a tool call may run.
    pub tool_timeout: Duration,
    /// Longest a permission request waits for an answer.
    pub permission_timeout: Duration,
    /// Most model calls per batch; the loop ends cleanly at the limit.
    pub max_iterations: usize,
    /// Longest a batch may run; the loop ends cleanly after the step in progress.
    pub max_duration: Duration,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Whether the first model call of every run must call a tool (default: the model
    /// decides). A [`ToolRule::StartWith`] rule forces its tool on that call instead, so the
    /// provider (or a grammar-constrained local server) cannot break the rule. Later calls of
    /// the run are always [`ToolChoice::Auto`], so the loop can end.
    pub first_tool_choice: ToolChoice,
    /// How many archival passages are recalled into the context of each run (default 0:
    /// none). The agent's archival memory is searched (hybrid when embeddings are configured,
    /// else full text) with the text of the run's trigger once per batch, and the best passages
    /// are shown after the memory blocks, as many as fit the system budget. The agent still
    /// decides what to store; recall only brings back what it stored.
    pub recall: usize,
    /// The last model call a run may make (the `max_iterations`-th) calls no tool
    /// ([`ToolChoice::None`]), so a run that reaches the limit ends with an answer rather than
    /// with a call nobody will see the result of (default true). A forced first call wins when
    /// the two are the same call.
    pub last_call_answers: bool,
}

impl RuntimeConfig {
    /// Defaults around `instructions` for a model window of `window` tokens: 10 iterations,
    /// 10 minutes, 60 s per tool, 5 minutes per permission request.
    pub fn new(instructions: impl Into<String>, window: usize) -> Self {
        Self {
            context: ContextConfig::for_window(instructions, window),
            rules: Vec::new(),
            tool_timeout: Duration::from_secs(60),
            permission_timeout: Duration::from_secs(300),
            max_iterations: 10,
            max_duration: Duration::from_secs(600),
            temperature: None,
            first_tool_choice: ToolChoice::Auto,
            recall: 0,
            last_call_answers: true,
        }
    }

    /// The tool choice of a run's `iteration`-th model call (from 1) when `offered` are the
    /// tools of its request: the rules' and [`first_tool_choice`](Self::first_tool_choice) on
    /// the first call, as far as the tools named are offered; [`ToolChoice::None`] on the last
    /// allowed call ([`last_call_answers`](Self::last_call_answers)); [`ToolChoice::Auto`]
    /// otherwise.
    pub fn tool_choice(
        &self,
        iteration: usize,
        offered: &[context_v2::ToolDefinition],
    ) -> ToolChoice {
        if offered.is_empty() {
            return ToolChoice::Auto;
        }
        let first = self.first_choice(iteration, offered);
        if first == ToolChoice::Auto && self.last_call_answers && iteration >= self.max_iterations {
            return ToolChoice::None;
        }
        first
    }

    /// The forced choice of a run's first call (rules, then `first_tool_choice`).
    fn first_choice(&self, iteration: usize, offered: &[context_v2::ToolDefinition]) -> ToolChoice {
        if iteration != 1 {
            return ToolChoice::Auto;
        }
        let is_offered = |name: &str| offered.iter().any(|t| t.name == name);
        let start = self.rules.iter().find_map(|r| match r {
            ToolRule::StartWith { tool } if is_offered(tool) => Some(tool.clone()),
            _ => None,
        });
        match (start, &self.first_tool_choice) {
            (Some(tool), _) => ToolChoice::Tool(tool),
            (None, ToolChoice::Tool(tool)) if !is_offered(tool) => ToolChoice::Auto,
            (None, choice) => choice.clone(),
        }
    }

    /// [`RuntimeConfig::new`] for a stored agent: its instructions come from the agent's
    /// metadata (`"instructions"`, a string), else [`DEFAULT_INSTRUCTIONS`].
    pub fn for_agent(agent: &pattern_db::Agent, window: usize) -> Self {
        let instructions = agent
            .metadata
            .get("instructions")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(DEFAULT_INSTRUCTIONS);
        Self::new(instructions, window)
    }
}

/// What an agent is told when its metadata names no instructions of its own.
pub const DEFAULT_INSTRUCTIONS: &str = "You are a helpful assistant with long-term memory. Keep \
    what matters about the user in your memory blocks, store facts worth keeping with \
    archival_insert, and look things up with archival_search.";

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub input: Value,
    /// Why the arguments could not be read, when they could not.
    pub malformed: Option<String>,
}

/// A call's outcome, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// Result text (or the error's text).
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
    /// The tool asked for another turn.
    pub request_heartbeat: bool,
    /// The tool is an exit tool and succeeded.
    pub exit: bool,
}

impl CallOutcome {
    /// The result block for the model.
    pub fn block(&self) -> ContentBlock {
        ContentBlock::tool_result(self.call_id.clone(), self.content.clone(), self.is_error)
    }
}

#[derive(Debug, Default)]
struct RuleState {
    batch: Option<BatchId>,
    calls_in_batch: u32,
    per_tool: HashMap<String, u32>,
    last_call: HashMap<String, Instant>,
}

/// The doing half of an agent.
pub struct AgentRuntime {
    agent: AgentId,
    name: String,
    db: Database,
    store: MessageStore,
    memory: Arc<dyn MemoryEditor>,
    tools: Arc<ToolRegistry>,
    config: RuntimeConfig,
    rule_texts: Vec<String>,
    rule_state: StdMutex<RuleState>,
    permissions: PermissionBroker,
    endpoints: RwLock<HashMap<String, Arc<dyn MessageEndpoint>>>,
    default_endpoint: RwLock<Option<Arc<dyn MessageEndpoint>>>,
    model: Arc<dyn ModelProvider>,
    counter: Arc<dyn TokenCounter>,
    summarizer: Option<Arc<dyn Summarizer>>,
    queue_signal: Arc<Notify>,
    archival: Option<Arc<dyn ArchivalMemory>>,
    /// The passages recalled for the last batch built ([`RuntimeConfig::recall`]).
    recalled: StdMutex<Option<(BatchId, Vec<String>)>>,
}

impl fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRuntime")
            .field("agent", &self.agent)
            .field("name", &self.name)
            .field("model", &self.model.name())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// Builds an [`AgentRuntime`].
pub struct RuntimeBuilder {
    db: Database,
    agent: pattern_db::Agent,
    memory: Arc<dyn MemoryEditor>,
    model: Arc<dyn ModelProvider>,
    config: RuntimeConfig,
    tools: Option<Arc<ToolRegistry>>,
    counter: Option<Arc<dyn TokenCounter>>,
    summarizer: Option<Arc<dyn Summarizer>>,
    queue_signal: Option<Arc<Notify>>,
    archival: Option<Arc<dyn ArchivalMemory>>,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("agent", &self.agent.name)
            .field("model", &self.model.name())
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// The tools (default: the built-in set, see [`crate::tool::builtin::registry`]).
    pub fn tools(mut self, tools: Arc<ToolRegistry>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The token counter (default: a calibrated estimate).
    pub fn counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// The summarizer for recursive summarization (default: none; that strategy then fails
    /// with a typed error when it is needed).
    pub fn summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The signal that wakes a [`crate::QueueProcessor`] when this runtime queues work (so that
    /// messages to other agents and wakeups are picked up at once).
    pub fn queue_signal(mut self, signal: Arc<Notify>) -> Self {
        self.queue_signal = Some(signal);
        self
    }

    /// Archival memory and search (default: none; the archival and search tools then answer
    /// with an error result).
    pub fn archival(mut self, archival: Arc<dyn ArchivalMemory>) -> Self {
        self.archival = Some(archival);
        self
    }

    /// The runtime. Refused: a rule naming a tool that is not registered.
    pub fn build(self) -> Result<AgentRuntime> {
        let tools = match self.tools {
            Some(t) => t,
            None => Arc::new(crate::tool::builtin::registry()?),
        };
        for rule in &self.config.rules {
            if tools.get(rule.tool()).is_none() {
                return Err(Error::InvalidTool {
                    name: rule.tool().to_owned(),
                    reason: "a tool rule names a tool that is not registered".into(),
                });
            }
        }
        let store = self.db.messages(self.agent.id);
        let rule_texts = self.config.rules.iter().map(ToolRule::describe).collect();
        Ok(AgentRuntime {
            agent: self.agent.id,
            name: self.agent.name,
            permissions: PermissionBroker::new(store.clone(), self.config.permission_timeout),
            db: self.db,
            store,
            memory: self.memory,
            tools,
            rule_texts,
            config: self.config,
            rule_state: StdMutex::new(RuleState::default()),
            endpoints: RwLock::new(HashMap::new()),
            default_endpoint: RwLock::new(None),
            model: self.model,
            counter: self
                .counter
                .unwrap_or_else(|| Arc::new(context_v2::EstimateCounter::default())),
            summarizer: self.summarizer,
            queue_signal: self.queue_signal.unwrap_or_default(),
            archival: self.archival,
            recalled: StdMutex::new(None),
        })
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic without a message".into()
    }
}

impl AgentRuntime {
    /// Starts a runtime for `agent`.
    pub fn builder(
        db: Database,
        agent: pattern_db::Agent,
        memory: Arc<dyn MemoryEditor>,
        model: Arc<dyn ModelProvider>,
        config: RuntimeConfig,
    ) -> RuntimeBuilder {
        RuntimeBuilder {
            db,
            agent,
            memory,
            model,
            config,
            tools: None,
            counter: None,
            summarizer: None,
            queue_signal: None,
            archival: None,
        }
    }

    /// The agent.
    pub fn agent_id(&self) -> AgentId {
        self.agent
    }

    /// The agent's name.
    pub fn agent_name(&self) -> &str {
        &self.name
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The agent's message store.
    pub fn messages(&self) -> &MessageStore {
        &self.store
    }

    /// The memory store (shared across agents; the agent is a parameter).
    pub fn memory(&self) -> &Arc<dyn MemoryEditor> {
        &self.memory
    }

    /// Archival memory and search, when configured.
    pub fn archival(&self) -> Option<&Arc<dyn ArchivalMemory>> {
        self.archival.as_ref()
    }

    /// Searches what this agent can see (its messages and passages, blocks shared with it):
    /// `options.agent` is always this agent.
    pub async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        let archival = self.archival.as_ref().ok_or(Error::SearchNotConfigured)?;
        let options = SearchOptions {
            agent: Some(self.agent),
            ..options.clone()
        };
        Ok(archival.search(query, &options).await?)
    }

    /// The tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// The model.
    pub fn model(&self) -> &Arc<dyn ModelProvider> {
        &self.model
    }

    /// The token counter.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// Settings and limits.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The permission broker.
    pub fn permissions(&self) -> &PermissionBroker {
        &self.permissions
    }

    /// The signal a queue processor waits on.
    pub fn queue_signal(&self) -> &Arc<Notify> {
        &self.queue_signal
    }

    // -- endpoints and messages -------------------------------------------------------------

    /// Registers `endpoint` under `name` (replacing one of the same name).
    pub async fn register_endpoint(&self, name: &str, endpoint: Arc<dyn MessageEndpoint>) {
        self.endpoints
            .write()
            .await
            .insert(name.to_owned(), endpoint);
    }

    /// Sets the endpoint `MessageTarget::User` goes to.
    pub async fn set_default_endpoint(&self, endpoint: Arc<dyn MessageEndpoint>) {
        *self.default_endpoint.write().await = Some(endpoint);
    }

    /// Sends `content` to `target`: a user endpoint now, or another agent through its durable
    /// queue (committed before this returns).
    pub async fn send_message(&self, target: &MessageTarget, content: &str) -> Result<()> {
        let message = OutgoingMessage {
            from: self.agent,
            from_name: self.name.clone(),
            content: content.to_owned(),
            sent_at: Utc::now(),
        };
        let endpoint = match target {
            MessageTarget::User => self
                .default_endpoint
                .read()
                .await
                .clone()
                .ok_or_else(|| Error::NoEndpoint("user (no default endpoint is set)".into()))?,
            MessageTarget::Endpoint(name) => self
                .endpoints
                .read()
                .await
                .get(name)
                .cloned()
                .ok_or_else(|| Error::NoEndpoint(name.clone()))?,
            MessageTarget::Agent(name) => {
                // One channel between agents (decision 0020): the protocol's async session of
                // the pair, which the agents answer themselves; the message becomes the other
                // agent's trigger in the transaction that stores it.
                self.open_session(name, SessionType::Async, None, Some(content))
                    .await?;
                return Ok(());
            }
        };
        endpoint.deliver(&message).await.map_err(Error::Endpoint)
    }

    /// Opens (or finds live) a session of this agent with the agent `name` of its organization,
    /// answered by the agents themselves (decision 0020), and sends `first` into it if given:
    /// one transaction. A session with itself, an unknown name or another organization's agent
    /// are errors; nothing is stored then.
    pub async fn open_session(
        &self,
        name: &str,
        session_type: SessionType,
        message_limit: Option<u64>,
        first: Option<&str>,
    ) -> Result<(pattern_db::Session, Option<pattern_db::ProtocolMessage>)> {
        let to = self.agent_in_my_organization(name).await?;
        let first = first.map(|text| {
            pattern_db::NewProtocolMessage::new("text", serde_json::json!({ "text": text }))
        });
        let opened = pattern_protocol::store::Store::new(&self.db)
            .open_session_with(
                self.agent,
                to.id,
                session_type,
                pattern_db::SessionOptions::agents(message_limit),
                first,
            )
            .await?;
        self.queue_signal.notify_one();
        Ok(opened)
    }

    /// Sends `text` into session `session` as this agent (its turn, in a sync session).
    pub async fn send_into_session(
        &self,
        session: pattern_db::SessionId,
        text: &str,
    ) -> Result<pattern_db::ProtocolMessage> {
        let message =
            pattern_db::NewProtocolMessage::new("text", serde_json::json!({ "text": text }));
        let sent = pattern_protocol::store::Store::new(&self.db)
            .send_session_message(session, self.agent, message)
            .await?;
        self.queue_signal.notify_one();
        Ok(sent)
    }

    /// Ends session `session` (this agent must take part in it).
    pub async fn end_session(&self, session: pattern_db::SessionId) -> Result<pattern_db::Session> {
        Ok(pattern_protocol::store::Store::new(&self.db)
            .end_session(session, self.agent)
            .await?)
    }

    /// The agent `name` names, looked up only among the agents of this agent's organization:
    /// any other name, another organization's agent included, is `AgentError::NameNotFound`, the same
    /// answer as for a name that exists nowhere.
    async fn agent_in_my_organization(&self, name: &str) -> Result<pattern_db::Agent> {
        let org = self.db.agent_organization(self.agent).await?;
        Ok(self.db.agent_in_scope(Some(org), name).await?)
    }

    /// Schedules a system trigger for this agent at `at`, once or every `every`.
    pub async fn schedule_wakeup(
        &self,
        at: DateTime<Utc>,
        every: Option<Duration>,
        text: &str,
    ) -> Result<QueuedMessage> {
        let entry = NewQueued {
            source: "scheduler".into(),
            deliver_at: Some(at),
            every,
            ..NewQueued::now(
                BatchType::SystemTrigger,
                Role::System,
                vec![ContentBlock::text(text)],
            )
        };
        let queued = self.db.enqueue(self.agent, entry).await?;
        self.queue_signal.notify_one();
        Ok(queued)
    }

    /// Adds a schedule for this agent (decision 0012): checked and capped by the database,
    /// delivered by whichever process serves the agent's queue.
    pub async fn add_schedule(
        &self,
        new: pattern_db::schedule::NewSchedule,
    ) -> Result<pattern_db::schedule::Schedule> {
        let schedule = self.db.add_schedule(self.agent, new).await?;
        self.queue_signal.notify_one();
        Ok(schedule)
    }

    /// This agent's live schedules.
    pub async fn schedules(&self) -> Result<Vec<pattern_db::schedule::Schedule>> {
        Ok(self.db.schedules(self.agent).await?)
    }

    /// Removes one of this agent's live schedules.
    pub async fn remove_schedule(
        &self,
        id: pattern_db::SnowflakeId,
    ) -> Result<pattern_db::schedule::Schedule> {
        Ok(self.db.remove_schedule(self.agent, id).await?)
    }

    // -- storage and context ----------------------------------------------------------------

    /// Commits one step (an answer and its tool results) atomically.
    pub async fn store_step(
        &self,
        batch: BatchId,
        messages: Vec<NewMessage>,
    ) -> Result<StepReceipt> {
        Ok(self.store.append_step(batch, messages).await?)
    }

    /// Builds the model request context, with `active` as the batch in progress.
    pub async fn build_context(&self, active: Option<BatchId>) -> Result<MemoryContext> {
        let definitions = self.tools.definitions();
        let recalled = self.recalled_for(active).await;
        let memory: &dyn MemoryStore = &*self.memory;
        let mut builder =
            ContextBuilder::new(memory, &self.store, &self.config.context, &*self.counter)
                .tools(&definitions)
                .tool_rules(&self.rule_texts)
                .recalled(&recalled)
                .active_batch(active);
        if let Some(s) = &self.summarizer {
            builder = builder.summarizer(&**s);
        }
        Ok(builder.build_for_model(self.model.model()).await?)
    }

    /// The request [`Self::build_context`] would build now for a new turn (no batch active, so
    /// no passages recalled), without compressing anything: read-only, for inspection.
    pub async fn preview_context(&self) -> Result<context_v2::ContextPreview> {
        let definitions = self.tools.definitions();
        let memory: &dyn MemoryStore = &*self.memory;
        let builder =
            ContextBuilder::new(memory, &self.store, &self.config.context, &*self.counter)
                .tools(&definitions)
                .tool_rules(&self.rule_texts);
        Ok(builder.preview_for_model(self.model.model()).await?)
    }

    /// The passages recalled for `active` ([`RuntimeConfig::recall`]): searched once per batch
    /// with its trigger's text. A failed search recalls nothing (and is logged): recall never
    /// fails a run.
    async fn recalled_for(&self, active: Option<BatchId>) -> Vec<String> {
        let (Some(batch), Some(archival)) = (active, &self.archival) else {
            return Vec::new();
        };
        if self.config.recall == 0 {
            return Vec::new();
        }
        let cache = || {
            self.recalled
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((b, passages)) = cache().as_ref()
            && *b == batch
        {
            return passages.clone();
        }
        let query = match self.store.get_batch(batch).await {
            Ok(stored) => stored
                .messages
                .first()
                .map(|m| m.text())
                .unwrap_or_default(),
            Err(e) => {
                tracing::warn!(agent = %self.agent, error = %e, "recall: reading the trigger failed");
                return Vec::new();
            }
        };
        let passages = if query.trim().is_empty() {
            Vec::new()
        } else {
            let options = SearchOptions::mode(memory_v2::SearchMode::Auto)
                .with_limit(self.config.recall)
                .for_agent(self.agent)
                .only(&[pattern_db::ContentType::Archival]);
            match archival.search(&query, &options).await {
                Ok(hits) => hits.into_iter().map(|h| h.text).collect(),
                Err(e) => {
                    tracing::warn!(agent = %self.agent, error = %e, "recall: search failed");
                    Vec::new()
                }
            }
        };
        *cache() = Some((batch, passages.clone()));
        passages
    }

    // -- tools ------------------------------------------------------------------------------

    fn has_rule(&self, tool: &str, pred: impl Fn(&ToolRule) -> bool) -> bool {
        self.config
            .rules
            .iter()
            .any(|r| r.tool() == tool && pred(r))
    }

    /// Checks the rules for one call and counts it; in call order, before anything runs.
    fn admit(&self, batch: BatchId, name: &str) -> std::result::Result<(), ToolError> {
        let mut state = self
            .rule_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.batch != Some(batch) {
            state.batch = Some(batch);
            state.calls_in_batch = 0;
            state.per_tool.clear();
        }
        let violation = |reason: String| ToolError::RuleViolation {
            tool: name.to_owned(),
            reason,
        };
        for rule in &self.config.rules {
            match rule {
                ToolRule::StartWith { tool } if state.calls_in_batch == 0 && tool != name => {
                    return Err(violation(format!(
                        "the first call of a turn must be `{tool}`"
                    )));
                }
                ToolRule::MaxCallsPerBatch { tool, max }
                    if tool == name && state.per_tool.get(name).copied().unwrap_or(0) >= *max =>
                {
                    return Err(violation(format!(
                        "at most {max} calls per turn, and they are used up"
                    )));
                }
                ToolRule::Cooldown { tool, period } if tool == name => {
                    if let Some(last) = state.last_call.get(name) {
                        let since = last.elapsed();
                        if since < *period {
                            return Err(violation(format!(
                                "cooling down: wait {:.1} s more",
                                (*period - since).as_secs_f64()
                            )));
                        }
                    }
                }
                _ => {}
            }
        }
        state.calls_in_batch += 1;
        *state.per_tool.entry(name.to_owned()).or_default() += 1;
        state.last_call.insert(name.to_owned(), Instant::now());
        Ok(())
    }

    async fn audit_failure(&self, call: &ToolCall, error: &ToolError) {
        let payload = serde_json::json!({
            "tool": call.name,
            "call_id": call.id,
            "error": error.to_string(),
        });
        if let Err(e) = self.store.log_activity("tool_failed", payload).await {
            tracing::warn!(agent = %self.name, error = %e, "could not record a tool failure");
        }
    }

    /// Runs one call: malformed arguments, unknown tool, schema, rules, permission, then the
    /// tool under a timeout with panics caught. Failures are audited in the activity log.
    /// Rules are counted here; to admit several calls in order and run them together use
    /// [`execute_calls`](Self::execute_calls).
    pub async fn execute_tool(self: &Arc<Self>, batch: BatchId, call: &ToolCall) -> CallOutcome {
        let admitted = self.prepare(batch, call);
        self.finish(batch, call, admitted).await
    }

    /// Runs the calls of one step: admitted in call order, then run concurrently; outcomes in
    /// call order whatever order they finish in.
    pub async fn execute_calls(
        self: &Arc<Self>,
        batch: BatchId,
        calls: &[ToolCall],
    ) -> Vec<CallOutcome> {
        let admitted: Vec<_> = calls.iter().map(|c| self.prepare(batch, c)).collect();
        join_all(
            calls
                .iter()
                .zip(admitted)
                .map(|(call, admitted)| self.finish(batch, call, admitted)),
        )
        .await
    }

    fn prepare(
        &self,
        batch: BatchId,
        call: &ToolCall,
    ) -> std::result::Result<Arc<dyn crate::tool::Tool>, ToolError> {
        if let Some(reason) = &call.malformed {
            return Err(ToolError::InvalidInput {
                tool: call.name.clone(),
                reason: format!("the arguments are not a JSON object ({reason})"),
            });
        }
        let tool = self.tools.check(&call.name, &call.input)?;
        self.admit(batch, &call.name)?;
        Ok(tool)
    }

    async fn finish(
        self: &Arc<Self>,
        batch: BatchId,
        call: &ToolCall,
        admitted: std::result::Result<Arc<dyn crate::tool::Tool>, ToolError>,
    ) -> CallOutcome {
        let span = crate::telemetry::tool_span(&call.name, &call.id);
        let began = Instant::now();
        let result = match admitted {
            Ok(tool) => {
                self.run_admitted(batch, call, tool)
                    .instrument(span.clone())
                    .await
            }
            Err(e) => Err(e),
        };
        crate::telemetry::tool_call(
            &self.agent.to_string(),
            &call.name,
            result.is_ok(),
            began.elapsed(),
        );
        if let Err(e) = &result {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.kind());
        }
        let exit =
            result.is_ok() && self.has_rule(&call.name, |r| matches!(r, ToolRule::ExitLoop { .. }));
        match result {
            Ok(ToolOutput {
                content,
                request_heartbeat,
            }) => CallOutcome {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: false,
                request_heartbeat,
                exit,
            },
            Err(error) => {
                self.audit_failure(call, &error).await;
                CallOutcome {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: error.to_string(),
                    is_error: true,
                    request_heartbeat: false,
                    exit: false,
                }
            }
        }
    }

    async fn run_admitted(
        self: &Arc<Self>,
        batch: BatchId,
        call: &ToolCall,
        tool: Arc<dyn crate::tool::Tool>,
    ) -> std::result::Result<ToolOutput, ToolError> {
        let guarded = tool.requires_approval()
            || self.has_rule(&call.name, |r| {
                matches!(r, ToolRule::RequiresApproval { .. })
            });
        if guarded {
            self.approve_in(Some(batch), call, "this tool needs approval for every call")
                .await?;
        }
        let ctx = ToolContext {
            runtime: self.clone(),
            batch,
            call_id: call.id.clone(),
        };
        let input = call.input.clone();
        // The tool's writes are the run's: fenced by its claim like the run's own.
        let fence = pattern_db::runs::current_fence();
        let notices = crate::permission::current_notices();
        let mut handle = tokio::spawn(crate::permission::with_notices(
            notices,
            pattern_db::runs::with_fence(fence, async move { tool.execute(ctx, input).await }),
        ));
        match tokio::time::timeout(self.config.tool_timeout, &mut handle).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) if join.is_panic() => Err(ToolError::Panicked {
                tool: call.name.clone(),
                message: panic_message(join.into_panic()),
            }),
            Ok(Err(_)) => Err(ToolError::Failed(format!(
                "`{}` was cancelled before it finished",
                call.name
            ))),
            Err(_) => {
                handle.abort();
                Err(ToolError::TimedOut {
                    tool: call.name.clone(),
                    after: self.config.tool_timeout,
                })
            }
        }
    }

    /// Asks the broker to approve `call`; a denial (or a failure to record the decision) is a
    /// [`ToolError::PermissionDenied`].
    pub async fn approve(
        &self,
        call: &ToolCall,
        reason: &str,
    ) -> std::result::Result<(), ToolError> {
        self.approve_in(None, call, reason).await
    }

    /// [`approve`](Self::approve) for a call of `batch` (its run's turn announces the request).
    pub async fn approve_in(
        &self,
        batch: Option<BatchId>,
        call: &ToolCall,
        reason: &str,
    ) -> std::result::Result<(), ToolError> {
        let request = PermissionRequest {
            agent: self.agent,
            agent_name: self.name.clone(),
            tool: call.name.clone(),
            call_id: Some(call.id.clone()),
            input: call.input.clone(),
            reason: reason.to_owned(),
            batch,
            deadline: None,
        };
        match self.permissions.request(request).await {
            Ok(Decision::Approved) => Ok(()),
            Ok(Decision::Denied { reason }) => Err(ToolError::PermissionDenied {
                tool: call.name.clone(),
                reason,
            }),
            Err(e) => Err(ToolError::PermissionDenied {
                tool: call.name.clone(),
                reason: format!("the decision could not be recorded: {e}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The tool choice of a run's model calls.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn offered(names: &[&str]) -> Vec<context_v2::ToolDefinition> {
        names
            .iter()
            .map(|n| context_v2::ToolDefinition {
                name: (*n).to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
            })
            .collect()
    }

    #[test]
    fn only_the_first_call_of_a_run_is_forced() {
        let tools = offered(&["memory_append", "archival_search"]);
        let mut config = RuntimeConfig::new("be brief", 8_000);
        assert_eq!(config.tool_choice(1, &tools), ToolChoice::Auto);
        config.first_tool_choice = ToolChoice::Required;
        assert_eq!(config.tool_choice(1, &tools), ToolChoice::Required);
        assert_eq!(config.tool_choice(2, &tools), ToolChoice::Auto);
        // Nothing to call: nothing forced.
        assert_eq!(config.tool_choice(1, &[]), ToolChoice::Auto);
    }

    #[test]
    fn the_last_allowed_call_answers_in_text() {
        let tools = offered(&["memory_append"]);
        let mut config = RuntimeConfig::new("be brief", 8_000);
        config.max_iterations = 3;
        assert_eq!(config.tool_choice(2, &tools), ToolChoice::Auto);
        assert_eq!(config.tool_choice(3, &tools), ToolChoice::None);
        config.last_call_answers = false;
        assert_eq!(config.tool_choice(3, &tools), ToolChoice::Auto);
        // A run of one call: the forced first call wins.
        config.last_call_answers = true;
        config.max_iterations = 1;
        config.first_tool_choice = ToolChoice::Required;
        assert_eq!(config.tool_choice(1, &tools), ToolChoice::Required);
    }

    #[test]
    fn a_start_with_rule_forces_its_tool_when_offered() {
        let tools = offered(&["memory_append", "archival_search"]);
        let mut config = RuntimeConfig::new("be brief", 8_000);
        config.first_tool_choice = ToolChoice::Required;
        config.rules.push(ToolRule::StartWith {
            tool: "archival_search".into(),
        });
        assert_eq!(
            config.tool_choice(1, &tools),
            ToolChoice::Tool("archival_search".into())
        );
        assert_eq!(config.tool_choice(2, &tools), ToolChoice::Auto);
        // A rule naming a tool that is not offered forces nothing of its own.
        config.rules = vec![ToolRule::StartWith {
            tool: "gone".into(),
        }];
        assert_eq!(config.tool_choice(1, &tools), ToolChoice::Required);
        config.first_tool_choice = ToolChoice::Tool("gone".into());
        assert_eq!(config.tool_choice(1, &tools), ToolChoice::Auto);
    }
}
