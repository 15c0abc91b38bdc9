//! What every request handler shares: the wired [`Pattern`] layers, the models agents run on
//! ([`Models`]: each agent's own model, built once per model and shared, else the server's
//! default), the server's limits, and the agents loaded in this process.
//!
//! An agent is loaded on first use (one [`DatabaseAgent`] per agent, registered with this
//! process's queue processor) and unloaded again when it has been idle for
//! [`ServerConfig::idle_unload`] with no run going on here, so memory follows the agents in use,
//! not every agent ever served. An agent whose stored model changed (in any process) is loaded
//! again with the new one on its next use once no run of it goes on here. Whether an agent may run is decided in the database (its claim),
//! never by this map: any number of processes serve the same agents. This module must never hand
//! out an agent without its organization having been checked by the caller (the routes look
//! agents up through [`crate::auth::Caller`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pattern::core::approvals::DbApprover;
use pattern::core::meeting::{MeetingDriver, MeetingPlan};
use pattern::core::provider::ModelProvider;
use pattern::core::{Agent, AgentLoader, DatabaseAgent, QueueProcessor, RuntimeConfig};
use pattern::db::MeetingId;
use pattern::model::{AgentModel, Models};
use pattern::{AgentId, Pattern};
use tokio::sync::{Mutex, watch};

use crate::error::ApiError;
use crate::layers::CorsOrigins;

/// The server's limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted, in bytes (default 1 MiB); larger is 413
    /// `payload_too_large`.
    pub max_body_bytes: usize,
    /// Longest a request may take before it is answered 504 `timeout` (default 30 s). Turns are
    /// exempt: a turn's length is bounded by the agent's `max_duration`.
    pub request_timeout: Duration,
    /// How long a finished turn and its events stay in the database, answerable and replayable
    /// by any instance (default 24 hours); older ones are pruned by the sweep.
    pub turn_retention: Duration,
    /// Most model calls per turn (default 10).
    pub max_iterations: usize,
    /// How often a stream sends a keep-alive comment while nothing happens (default 15 s).
    pub keep_alive: Duration,
    /// How often the sweep runs: abandons the batches of dead runs (of any process), loads
    /// agents with due queue entries, unloads idle agents and prunes old turns (default 5 s;
    /// also once at start).
    pub recovery_interval: Duration,
    /// On shutdown, how long turns in flight may go on before they are cancelled (default 10 s).
    pub drain: Duration,
    /// An agent with no run here for this long is unloaded (default 10 minutes).
    pub idle_unload: Duration,
    /// Browser origins allowed to call the API (default none: same-origin only).
    pub cors: CorsOrigins,
    /// When set, `GET /metrics` needs `Authorization: Bearer <token>` (default unset: open, as
    /// Prometheus scrapers on a private network expect; it shows counts and agent ids of every
    /// organization, never stored content).
    pub metrics_token: Option<MetricsToken>,
    /// MCP servers from the configuration file, by the name of an agent of the local
    /// organization (agents of other organizations never get them), used besides those stored
    /// for the agent (decision 0015).
    pub mcp_servers: HashMap<String, Vec<pattern::core::mcp::McpServerConfig>>,
    /// How long a login to the console's pages without JavaScript lasts (brought within 1
    /// second to 30 days; decision 0022).
    pub console_session: Duration,
}

/// The bearer token of `/metrics`; never printed (its `Debug` shows `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct MetricsToken(String);

impl MetricsToken {
    /// A token; an empty one is `None`.
    pub fn new(token: impl Into<String>) -> Option<Self> {
        let token = token.into();
        (!token.trim().is_empty()).then(|| Self(token.trim().to_owned()))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(***)")
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            turn_retention: Duration::from_secs(24 * 3600),
            max_iterations: 10,
            keep_alive: Duration::from_secs(15),
            recovery_interval: Duration::from_secs(5),
            drain: Duration::from_secs(10),
            idle_unload: Duration::from_secs(600),
            cors: CorsOrigins::none(),
            metrics_token: None,
            mcp_servers: HashMap::new(),
            console_session: crate::pages::DEFAULT_SESSION,
        }
    }
}

/// The state behind every route: cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    pattern: Pattern,
    models: Arc<Models>,
    config: ServerConfig,
    agents: Mutex<HashMap<AgentId, Loaded>>,
    /// Meetings this process drives (`meeting run`), with the agents it built for them.
    meetings: Mutex<HashMap<MeetingId, Driving>>,
    /// Live meetings found to have no plan (people act in them by hand). A plan is written with
    /// the meeting and never later, so the sweep need not read their logs again.
    unplanned: Mutex<std::collections::HashSet<MeetingId>>,
    /// Delivers agents' durable queues (triggers that waited, entries a crash left, wakeups).
    queue: Arc<QueueProcessor>,
    /// Set when the server starts shutting down: no new turn starts, meeting streams end.
    closing: watch::Sender<bool>,
    /// Set when the drain is over: turn streams and waits still open end (their turns go on
    /// in other processes; clients resume them there).
    stopped: watch::Sender<bool>,
}

/// A meeting driven here: the driving task and the meeting's agents (built for it, with the
/// meeting tools; their runs are fenced in the database like any other).
struct Driving {
    task: tokio::task::JoinHandle<()>,
    agents: Vec<Arc<DatabaseAgent>>,
}

struct Loaded {
    agent: Arc<DatabaseAgent>,
    /// The agent's own model when it was loaded (`None`: the default).
    model: Option<AgentModel>,
    used: Instant,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("models", &self.inner.models)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Loads agents for the queue processor (without keeping the state alive).
#[derive(Debug)]
struct Loader(Weak<Inner>);

#[async_trait]
impl AgentLoader for Loader {
    async fn load(&self, id: AgentId) -> pattern::core::Result<Option<Arc<DatabaseAgent>>> {
        let Some(inner) = self.0.upgrade() else {
            return Ok(None);
        };
        let state = AppState { inner };
        if state.is_closing() {
            return Ok(None);
        }
        let row = match state.inner.pattern.db().agent(id).await {
            Ok(row) => row,
            // Deleted meanwhile: its queue went with it.
            Err(pattern::db::Error::Agent(pattern::db::AgentError::NotFound(_))) => {
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        Ok(state.agent(row).await.ok())
    }
}

impl AppState {
    /// State over opened layers, `model` for every agent that names none of its own, and limits.
    pub fn new(pattern: Pattern, model: Arc<dyn ModelProvider>, config: ServerConfig) -> Self {
        Self::with_models(pattern, Models::new(Some(model)), config)
    }

    /// State over opened layers, the process's models (agents' own models, the default if
    /// any, the local server if one runs), and limits.
    pub fn with_models(pattern: Pattern, models: Models, config: ServerConfig) -> Self {
        let state = Self {
            inner: Arc::new(Inner {
                queue: pattern.queue_processor(config.recovery_interval),
                pattern,
                models: Arc::new(models),
                config,
                agents: Mutex::new(HashMap::new()),
                meetings: Mutex::new(HashMap::new()),
                unplanned: Mutex::new(std::collections::HashSet::new()),
                closing: watch::Sender::new(false),
                stopped: watch::Sender::new(false),
            }),
        };
        // Runs record metrics from now on (once per process).
        let _ = crate::metrics::handle();
        let loader = Arc::new(Loader(Arc::downgrade(&state.inner)));
        let queue = state.inner.queue.clone();
        tokio::spawn(async move { queue.set_loader(loader).await });
        state
    }

    /// The wired layers.
    pub fn pattern(&self) -> &Pattern {
        &self.inner.pattern
    }

    /// The limits.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The running agent for a stored agent row (already checked against the caller's
    /// organization), loaded on first use.
    pub(crate) async fn agent(&self, row: pattern::Agent) -> Result<Arc<DatabaseAgent>, ApiError> {
        let mut agents = self.inner.agents.lock().await;
        let wanted = AgentModel::of(&row).ok().flatten();
        if let Some(loaded) = agents.get_mut(&row.id) {
            // A changed model takes effect once no run of the old one goes on here.
            if loaded.model == wanted || !loaded.agent.is_idle() {
                loaded.used = Instant::now();
                return Ok(loaded.agent.clone());
            }
            agents.remove(&row.id);
            self.inner.queue.unregister(row.id).await;
        }
        // Connecting MCP servers may take a while: not under the lock of every agent.
        drop(agents);
        let tools = self.tools_for(&row).await?;
        let mut agents = self.inner.agents.lock().await;
        if let Some(loaded) = agents.get_mut(&row.id) {
            loaded.used = Instant::now();
            return Ok(loaded.agent.clone());
        }
        let model = self.inner.models.for_agent(&row);
        let mut config = RuntimeConfig::for_agent(&row, model.model().context_window);
        config.max_iterations = self.inner.config.max_iterations;
        let id = row.id;
        let agent = self
            .inner
            .pattern
            .agent_with_tools(row, model, config, tools)?;
        // Guarded tool calls wait for an answer stored in the database (`/v1/approvals`), from
        // any instance.
        agent
            .runtime()
            .permissions()
            .set_approver(Arc::new(DbApprover::new(self.inner.pattern.db().clone())))
            .await;
        agents.insert(
            id,
            Loaded {
                agent: agent.clone(),
                model: wanted,
                used: Instant::now(),
            },
        );
        drop(agents);
        self.inner.queue.register(agent.clone()).await;
        Ok(agent)
    }

    /// The agent's tools when it uses MCP servers (stored, or in the configuration file): the
    /// built-ins plus theirs; servers that fail are logged and left out. `None`: the built-ins.
    async fn tools_for(
        &self,
        row: &pattern::Agent,
    ) -> Result<Option<Arc<pattern::core::tool::ToolRegistry>>, ApiError> {
        let db = self.inner.pattern.db();
        // The configuration file names the local organization's agents only.
        let local = matches!(db.agent_by_name(&row.name).await, Ok(a) if a.id == row.id);
        let extra = match self.inner.config.mcp_servers.get(&row.name) {
            Some(servers) if local => servers.clone(),
            _ => Vec::new(),
        };
        if extra.is_empty() && db.mcp_servers(row.id).await?.is_empty() {
            return Ok(None);
        }
        let (registry, problems) = pattern::core::mcp::agent_tools(db, row.id, &extra).await?;
        for problem in problems {
            tracing::warn!(agent = %row.id, "{problem}");
        }
        Ok(Some(Arc::new(registry)))
    }

    /// Agents loaded in this process now.
    pub async fn loaded_agents(&self) -> usize {
        self.inner.agents.lock().await.len()
    }

    /// Forgets a deleted agent: its cached handle and its registration for queue delivery.
    pub(crate) async fn forget(&self, agent: AgentId) {
        self.inner.agents.lock().await.remove(&agent);
        self.inner.queue.unregister(agent).await;
    }

    /// Unloads agents idle longer than [`ServerConfig::idle_unload`] with no run and no waiting
    /// caller here; returns how many.
    pub(crate) async fn unload_idle(&self) -> usize {
        let limit = self.inner.config.idle_unload;
        let idle: Vec<AgentId> = {
            let agents = self.inner.agents.lock().await;
            agents
                .iter()
                .filter(|(_, l)| l.used.elapsed() >= limit && l.agent.is_idle())
                .map(|(id, _)| *id)
                .collect()
        };
        for id in &idle {
            let mut agents = self.inner.agents.lock().await;
            if agents
                .get(id)
                .is_some_and(|l| l.used.elapsed() >= limit && l.agent.is_idle())
            {
                agents.remove(id);
                drop(agents);
                self.inner.queue.unregister(*id).await;
            }
        }
        idle.len()
    }

    /// Starts shutting down: no new turn starts here, queue delivery stops, meeting streams end.
    /// Turns in flight go on; [`AppState::cancel_running`] ends those left after the drain.
    pub fn shut_down(&self) {
        self.inner.closing.send_replace(true);
        self.inner.queue.stop();
    }

    /// Cancels every run going on in this process (their batches are abandoned, their messages
    /// stay stored and can be retried at once); returns how many.
    pub async fn cancel_running(&self, reason: &str) -> usize {
        let mut agents: Vec<Arc<DatabaseAgent>> = self
            .inner
            .agents
            .lock()
            .await
            .values()
            .map(|l| l.agent.clone())
            .collect();
        for driving in self.inner.meetings.lock().await.values() {
            driving.task.abort();
            agents.extend(driving.agents.iter().cloned());
        }
        agents.iter().filter(|a| a.cancel_running(reason)).count()
    }

    /// Waits until no run goes on in this process, at most `limit`; whether none does.
    pub async fn wait_runs(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let busy = self
                .inner
                .agents
                .lock()
                .await
                .values()
                .any(|l| l.agent.is_running())
                || self
                    .inner
                    .meetings
                    .lock()
                    .await
                    .values()
                    .any(|d| d.agents.iter().any(|a| a.is_running()));
            if !busy {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the server is shutting down.
    pub(crate) fn is_closing(&self) -> bool {
        *self.inner.closing.borrow()
    }

    pub(crate) fn queue(&self) -> &Arc<QueueProcessor> {
        &self.inner.queue
    }

    /// Loads the agents that have queue entries due and no live claim, so the queue processor
    /// delivers them (the processor's loader does it too; this is the sweep's safety net).
    pub(crate) async fn load_agents_with_due_entries(&self) -> Result<usize, ApiError> {
        let db = self.inner.pattern.db();
        let due = db.deliverable_agents(256).await?;
        let mut loaded = 0;
        for id in due {
            if self.inner.agents.lock().await.contains_key(&id) {
                continue;
            }
            let row = match db.agent(id).await {
                Ok(row) => row,
                Err(pattern::db::Error::Agent(pattern::db::AgentError::NotFound(_))) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            self.agent(row).await?;
            loaded += 1;
        }
        Ok(loaded)
    }

    /// A meeting driver over agents `ids` (each on its own model, with the meeting tools),
    /// with the agents it drives.
    async fn meeting_driver(
        &self,
        ids: &[AgentId],
    ) -> Result<(MeetingDriver, Vec<Arc<DatabaseAgent>>), ApiError> {
        let tools = Arc::new(pattern::core::tool::meeting::registry()?);
        let mut agents = Vec::new();
        for id in ids {
            let row = self.inner.pattern.db().agent(*id).await?;
            let model = self.inner.models.for_agent(&row);
            let mut config = RuntimeConfig::for_agent(&row, model.model().context_window);
            config.max_iterations = self.inner.config.max_iterations;
            let agent =
                self.inner
                    .pattern
                    .agent_with_tools(row, model, config, Some(tools.clone()))?;
            agent
                .runtime()
                .permissions()
                .set_approver(Arc::new(DbApprover::new(self.inner.pattern.db().clone())))
                .await;
            agents.push(agent);
        }
        let driver = MeetingDriver::new(self.inner.pattern.protocol().clone(), agents.clone());
        Ok((driver, agents))
    }

    /// Creates the meeting of `plan` (its agents already checked against the caller's
    /// organization) and drives it here in the background; returns its id at once.
    pub(crate) async fn run_meeting(
        &self,
        plan: &MeetingPlan,
        turn: Option<Duration>,
    ) -> Result<MeetingId, ApiError> {
        let (driver, agents) = self.meeting_driver(&plan.agents).await?;
        let id = driver.create(plan, turn).await?;
        self.drive(id, driver, agents).await;
        Ok(id)
    }

    async fn drive(&self, id: MeetingId, driver: MeetingDriver, agents: Vec<Arc<DatabaseAgent>>) {
        let mut meetings = self.inner.meetings.lock().await;
        if meetings.get(&id).is_some_and(|d| !d.task.is_finished()) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let task = tokio::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::channel(64);
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            match driver.run(id, tx).await {
                Ok(outcome) => {
                    tracing::info!(meeting = %id, ended = %outcome.ended_because, "meeting ended");
                }
                Err(e) => tracing::warn!(meeting = %id, error = %e, "driving a meeting failed"),
            }
            if let Some(inner) = weak.upgrade() {
                inner.meetings.lock().await.remove(&id);
            }
        });
        meetings.insert(id, Driving { task, agents });
    }

    /// Drives every live meeting that was created with a plan and is not driven here: a
    /// meeting whose driving process died goes on here (from its log). Several processes may
    /// drive one meeting: each turn is still run once and spoken once (the driver's keys).
    pub(crate) async fn resume_meetings(&self) -> Result<usize, ApiError> {
        if self.is_closing() {
            return Ok(0);
        }
        let live = self.inner.pattern.protocol().active_meetings().await?;
        let mut resumed = 0;
        {
            // Forget ended meetings, so the set stays as small as the live ones.
            let mut unplanned = self.inner.unplanned.lock().await;
            unplanned.retain(|id| live.iter().any(|m| m.meeting.id == *id));
        }
        for m in live {
            let id = m.meeting.id;
            if self.inner.meetings.lock().await.contains_key(&id)
                || self.inner.unplanned.lock().await.contains(&id)
            {
                continue;
            }
            let bare = MeetingDriver::new(self.inner.pattern.protocol().clone(), Vec::new());
            let plan = match bare.plan(id).await {
                Ok(plan) => plan,
                Err(pattern::core::Error::InvalidMeeting(_)) => {
                    // Not a driven meeting: people act in it by hand.
                    self.inner.unplanned.lock().await.insert(id);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(meeting = %id, error = %e, "cannot read a meeting's plan");
                    continue;
                }
            };
            let (driver, agents) = match self.meeting_driver(&plan.agents).await {
                Ok(built) => built,
                Err(e) => {
                    tracing::warn!(meeting = %id, error = %e.message, "cannot resume a meeting");
                    continue;
                }
            };
            self.drive(id, driver, agents).await;
            resumed += 1;
        }
        Ok(resumed)
    }

    /// Ends the drain: turn streams and waits still open end.
    pub(crate) fn stop_streams(&self) {
        self.inner.stopped.send_replace(true);
    }

    /// Completes once the drain is over ([`AppState::stop_streams`]).
    pub(crate) fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + use<> {
        let mut rx = self.inner.stopped.subscribe();
        async move {
            let _ = rx.wait_for(|stopped| *stopped).await;
        }
    }

    /// Completes once [`AppState::shut_down`] was called.
    pub(crate) fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.closing.subscribe();
        async move {
            let _ = rx.wait_for(|closing| *closing).await;
        }
    }
}
