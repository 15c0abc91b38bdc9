//! [`QueueProcessor`]: delivers what waits in agents' durable queues (messages from other
//! agents, triggers whose caller went away, scheduled and recurring wakeups) through
//! [`Agent::process`] and nothing else.
//!
//! It sleeps until the next entry is due or a runtime signals new work, then hands each due entry
//! to its agent as an [`IncomingMessage::queued`]; the agent begins the entry's batch in the same
//! transaction that marks it delivered, so an entry runs exactly once even when several
//! processors (processes) watch one database, and entries left by a crash run after a restart.
//! This module must never deliver an entry by any other way than `Agent::process`, and never
//! run two entries of one agent at once (the agent's run lock serialises them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use pattern_db::{AgentId, Database, SnowflakeId};
use tokio::sync::{Mutex, Notify, RwLock, mpsc};
use tokio::task::JoinHandle;

use crate::agent::{Agent, IncomingMessage, ResponseEvent};
use crate::error::Result;

/// Most entries handed out per pass.
const PASS_LIMIT: usize = 64;

/// Delivers queued entries to registered agents.
#[derive(Debug)]
pub struct QueueProcessor {
    db: Database,
    agents: RwLock<HashMap<AgentId, Arc<dyn Agent>>>,
    signal: Arc<Notify>,
    in_flight: Mutex<HashSet<SnowflakeId>>,
    events: Option<mpsc::Sender<(AgentId, ResponseEvent)>>,
    idle_poll: Duration,
    stop: AtomicBool,
}

impl QueueProcessor {
    /// A processor over `db`, woken by `signal` (give the same signal to the runtimes, see
    /// [`crate::RuntimeBuilder::queue_signal`]). Between signals it checks at least every
    /// `idle_poll` (other processes may queue work too).
    pub fn new(db: Database, signal: Arc<Notify>, idle_poll: Duration) -> Arc<Self> {
        Arc::new(Self {
            db,
            agents: RwLock::new(HashMap::new()),
            signal,
            in_flight: Mutex::new(HashSet::new()),
            events: None,
            idle_poll,
            stop: AtomicBool::new(false),
        })
    }

    /// Like [`new`](Self::new), forwarding every event of the turns it runs to `events`.
    pub fn with_events(
        db: Database,
        signal: Arc<Notify>,
        idle_poll: Duration,
        events: mpsc::Sender<(AgentId, ResponseEvent)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            db,
            agents: RwLock::new(HashMap::new()),
            signal,
            in_flight: Mutex::new(HashSet::new()),
            events: Some(events),
            idle_poll,
            stop: AtomicBool::new(false),
        })
    }

    /// Delivers `agent`'s entries from now on.
    pub async fn register(&self, agent: Arc<dyn Agent>) {
        self.agents.write().await.insert(agent.id(), agent);
        self.signal.notify_one();
    }

    /// Stops delivering to `agent` (it was deleted, or is no longer served by this process);
    /// its entries stay queued for whoever registers it next.
    pub async fn unregister(&self, agent: AgentId) {
        self.agents.write().await.remove(&agent);
    }

    /// One pass: hands every due entry of a registered agent to it. Returns how many were
    /// handed out (their turns run in the background).
    pub async fn run_once(self: &Arc<Self>) -> Result<usize> {
        let due = self.db.due_queue(Utc::now(), PASS_LIMIT).await?;
        let agents = self.agents.read().await;
        let mut started = 0;
        for entry in due {
            let Some(agent) = agents.get(&entry.agent_id).cloned() else {
                continue;
            };
            if !self.in_flight.lock().await.insert(entry.id) {
                continue;
            }
            started += 1;
            let this = self.clone();
            tokio::spawn(async move {
                let id = entry.id;
                let agent_id = entry.agent_id;
                match agent.process(IncomingMessage::queued(&entry)).await {
                    Ok(mut stream) => {
                        while let Some(event) = stream.next().await {
                            if let Some(tx) = &this.events {
                                let _ = tx.send((agent_id, event)).await;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(agent = %agent_id, entry = %id.get(), error = %e,
                            "delivering a queued entry failed; it stays queued");
                    }
                }
                this.in_flight.lock().await.remove(&id);
                this.signal.notify_one();
            });
        }
        Ok(started)
    }

    /// Runs passes until [`stop`](Self::stop): after each, sleeps until the next entry is due,
    /// a signal arrives, or `idle_poll` passes.
    pub fn spawn(self: Arc<Self>) -> JoinHandle<()> {
        tokio::spawn(async move {
            while !self.stop.load(Ordering::Acquire) {
                if let Err(e) = self.run_once().await {
                    tracing::warn!(error = %e, "queue pass failed; retrying");
                }
                let wait = match self.db.next_queue_due().await {
                    Ok(Some(at)) => (at - Utc::now())
                        .to_std()
                        .unwrap_or(self.idle_poll)
                        .min(self.idle_poll),
                    _ => self.idle_poll,
                };
                tokio::select! {
                    () = self.signal.notified() => {}
                    () = tokio::time::sleep(wait) => {}
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
