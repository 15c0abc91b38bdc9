//! [`QueueProcessor`]: delivers what waits in agents' durable queues (messages from other
//! agents, triggers that arrived while their agent was busy, scheduled and recurring wakeups)
//! by claiming each free agent in the database and running its oldest due entry.
//!
//! A pass asks the database for agents with due entries whose claim is free (one row per agent,
//! oldest due first, so one agent's backlog of a thousand entries takes one row and delays no
//! other agent), and for each agent this process serves, [`DatabaseAgent::deliver_next`] claims
//! it and begins the entry's batch in the transaction that marks the entry delivered. The run
//! then hands the claim on to the agent's next due entry itself, so a backlog drains without
//! waiting for passes. Several processors (processes) over one database never deliver an entry
//! twice: the claim decides, and on PostgreSQL a processor skips an agent another one is
//! claiming right now (`SKIP LOCKED`). It sleeps until the next entry is due, a local signal or
//! (PostgreSQL) another process's release or enqueue wakes it, or `idle_poll` passes. This module
//! must never deliver an entry any other way than by claiming its agent.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use pattern_db::{AgentId, Database, WakeKey};
use tokio::sync::{Notify, RwLock};
use tokio::task::JoinHandle;

use crate::db_agent::DatabaseAgent;
use crate::error::Result;

/// Most agents looked at per pass.
const PASS_LIMIT: usize = 256;

/// Finds the agent to deliver to when it is not registered (a server loads agents on demand).
#[async_trait]
pub trait AgentLoader: Send + Sync + std::fmt::Debug {
    /// The agent with this id, if this process serves it.
    async fn load(&self, agent: AgentId) -> Result<Option<Arc<DatabaseAgent>>>;
}

/// Delivers queued entries to the agents this process serves.
#[derive(Debug)]
pub struct QueueProcessor {
    db: Database,
    agents: RwLock<HashMap<AgentId, Arc<DatabaseAgent>>>,
    loader: RwLock<Option<Arc<dyn AgentLoader>>>,
    signal: Arc<Notify>,
    idle_poll: Duration,
    stop: AtomicBool,
}

impl QueueProcessor {
    /// A processor over `db`, woken by `signal` (give the same signal to the runtimes, see
    /// [`crate::RuntimeBuilder::queue_signal`]). Between signals it checks at least every
    /// `idle_poll`.
    pub fn new(db: Database, signal: Arc<Notify>, idle_poll: Duration) -> Arc<Self> {
        Arc::new(Self {
            db,
            agents: RwLock::new(HashMap::new()),
            loader: RwLock::new(None),
            signal,
            idle_poll,
            stop: AtomicBool::new(false),
        })
    }

    /// Loads agents that are not registered when they have due entries (a server's agents).
    pub async fn set_loader(&self, loader: Arc<dyn AgentLoader>) {
        *self.loader.write().await = Some(loader);
        self.signal.notify_one();
    }

    /// Delivers `agent`'s entries from now on; its runs hand the claim on to its next due entry.
    pub async fn register(&self, agent: Arc<DatabaseAgent>) {
        agent.set_serving(true);
        self.agents.write().await.insert(agent_id(&agent), agent);
        self.signal.notify_one();
    }

    /// Stops delivering to `agent` (it was deleted, or is no longer served by this process);
    /// its entries stay queued for whoever serves it next.
    pub async fn unregister(&self, agent: AgentId) {
        if let Some(a) = self.agents.write().await.remove(&agent) {
            a.set_serving(false);
        }
    }

    async fn agent(&self, id: AgentId) -> Result<Option<Arc<DatabaseAgent>>> {
        if let Some(a) = self.agents.read().await.get(&id) {
            return Ok(Some(a.clone()));
        }
        let loader = self.loader.read().await.clone();
        match loader {
            Some(loader) => {
                let loaded = loader.load(id).await?;
                if let Some(a) = &loaded {
                    a.set_serving(true);
                }
                Ok(loaded)
            }
            None => Ok(None),
        }
    }

    /// One pass: starts the oldest due entry of every free agent this process serves. Returns
    /// how many runs began (they run in the background).
    pub async fn run_once(self: &Arc<Self>) -> Result<usize> {
        let due = self.db.deliverable_agents(PASS_LIMIT).await?;
        let mut started = 0;
        for id in due {
            let Some(agent) = self.agent(id).await? else {
                continue;
            };
            match agent.deliver_next().await {
                Ok(true) => started += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(agent = %id, error = %e,
                    "delivering a queued entry failed; it stays queued"),
            }
        }
        Ok(started)
    }

    /// Runs passes until [`stop`](Self::stop): after each, sleeps until the next entry is due,
    /// a signal or wake-up arrives, or `idle_poll` passes.
    pub fn spawn(self: Arc<Self>) -> JoinHandle<()> {
        tokio::spawn(async move {
            let wakeups = self.db.hub().subscribe(WakeKey::Queue);
            while !self.stop.load(Ordering::Acquire) {
                let woken = wakeups.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if let Err(e) = self.run_once().await {
                    tracing::warn!(error = %e, "queue pass failed; retrying");
                }
                let wait = match self.db.next_queue_due().await {
                    Ok(Some(at)) => (at - Utc::now())
                        .to_std()
                        .unwrap_or(Duration::ZERO)
                        .min(self.idle_poll),
                    _ => self.idle_poll,
                };
                tokio::select! {
                    () = self.signal.notified() => {}
                    () = &mut woken => {}
                    () = tokio::time::sleep(wait.max(Duration::from_millis(5))) => {}
                }
            }
        })
    }

    /// Asks the loop of [`spawn`](Self::spawn) to end after its current pass.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.signal.notify_one();
    }
}

fn agent_id(agent: &DatabaseAgent) -> AgentId {
    use crate::agent::Agent;
    agent.id()
}
