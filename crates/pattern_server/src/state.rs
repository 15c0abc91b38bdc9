//! What every request handler shares: the wired [`Pattern`] layers, the model agents run on, the
//! server's limits, the agents already loaded and the turns in flight.
//!
//! Agents are loaded once per process and kept (one [`DatabaseAgent`] per agent, so its run
//! lock serialises turns and queues what arrives while it is busy). This module must never hand
//! out an agent without its organization having been checked by the caller (the routes look
//! agents up through [`crate::auth::Caller`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pattern::core::provider::ModelProvider;
use pattern::core::{DatabaseAgent, QueueProcessor, RuntimeConfig};
use pattern::{Agent, AgentId, Pattern};
use tokio::sync::{Mutex, watch};

use crate::error::ApiError;
use crate::turns::Turns;

/// The server's limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted, in bytes (default 1 MiB); larger is 413
    /// `payload_too_large`.
    pub max_body_bytes: usize,
    /// Longest a request may take before it is answered 504 `timeout` (default 30 s). Turns are
    /// exempt: a turn's length is bounded by the agent's `max_duration`.
    pub request_timeout: Duration,
    /// How long a finished turn's events stay replayable (default 10 minutes).
    pub replay_window: Duration,
    /// Most model calls per turn (default 10).
    pub max_iterations: usize,
    /// How often a stream sends a keep-alive comment while nothing happens (default 15 s).
    pub keep_alive: Duration,
    /// How often batches whose run lease expired (a crashed process's turns) are abandoned so
    /// they can be retried, and agents with due queue entries are loaded so their entries are
    /// delivered (default 30 s; also once at start).
    pub recovery_interval: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            replay_window: Duration::from_secs(600),
            max_iterations: 10,
            keep_alive: Duration::from_secs(15),
            recovery_interval: Duration::from_secs(30),
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
    model: Arc<dyn ModelProvider>,
    config: ServerConfig,
    agents: Mutex<HashMap<AgentId, Arc<DatabaseAgent>>>,
    turns: Turns,
    /// Delivers agents' durable queues (entries a crash left, scheduled wakeups).
    queue: Arc<QueueProcessor>,
    /// Set when the server starts shutting down: endless streams end.
    closing: watch::Sender<bool>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("model", &self.inner.model.model().model)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State over opened layers, one model for every agent, and limits.
    pub fn new(pattern: Pattern, model: Arc<dyn ModelProvider>, config: ServerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                turns: Turns::new(config.replay_window),
                queue: pattern.queue_processor(config.recovery_interval),
                pattern,
                model,
                config,
                agents: Mutex::new(HashMap::new()),
                closing: watch::Sender::new(false),
            }),
        }
    }

    /// The wired layers.
    pub fn pattern(&self) -> &Pattern {
        &self.inner.pattern
    }

    /// The limits.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub(crate) fn turns(&self) -> &Turns {
        &self.inner.turns
    }

    /// The running agent for a stored agent row (already checked against the caller's
    /// organization), loaded on first use.
    pub(crate) async fn agent(&self, row: Agent) -> Result<Arc<DatabaseAgent>, ApiError> {
        let mut agents = self.inner.agents.lock().await;
        if let Some(agent) = agents.get(&row.id) {
            return Ok(agent.clone());
        }
        let mut config = RuntimeConfig::for_agent(&row, self.inner.model.model().context_window);
        config.max_iterations = self.inner.config.max_iterations;
        let id = row.id;
        let agent = self
            .inner
            .pattern
            .agent(row, self.inner.model.clone(), config)?;
        agents.insert(id, agent.clone());
        drop(agents);
        self.inner.queue.register(agent.clone()).await;
        Ok(agent)
    }

    /// Forgets a deleted agent: its cached handle and its registration for queue delivery.
    pub(crate) async fn forget(&self, agent: AgentId) {
        self.inner.agents.lock().await.remove(&agent);
        self.inner.queue.unregister(agent).await;
    }

    /// Starts shutting down: stops queue delivery, cancels the turns in flight (their batches
    /// are abandoned, their messages stay stored) and ends the meeting event streams.
    pub fn shut_down(&self) {
        self.inner.closing.send_replace(true);
        self.inner.queue.stop();
        self.inner.turns.cancel_all();
    }

    pub(crate) fn queue(&self) -> &Arc<QueueProcessor> {
        &self.inner.queue
    }

    /// Loads the agents that have queue entries due, so the queue processor delivers them (an
    /// agent is otherwise loaded by its first request).
    pub(crate) async fn load_agents_with_due_entries(&self) -> Result<usize, ApiError> {
        let db = self.inner.pattern.db();
        let due = db.due_queue(chrono::Utc::now(), 256).await?;
        let mut loaded = 0;
        for entry in due {
            if self.inner.agents.lock().await.contains_key(&entry.agent_id) {
                continue;
            }
            let row = match db.agent(entry.agent_id).await {
                Ok(row) => row,
                // Deleted meanwhile: its queue went with it.
                Err(pattern::db::Error::AgentNotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            self.agent(row).await?;
            loaded += 1;
        }
        Ok(loaded)
    }

    /// Completes once [`AppState::shut_down`] was called.
    pub(crate) fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.closing.subscribe();
        async move {
            let _ = rx.wait_for(|closing| *closing).await;
        }
    }
}
