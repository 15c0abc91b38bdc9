//! The in-process notifier: one [`tokio::sync::Notify`] per protocol agent, woken when a message
//! is stored for that agent or a session of it ends.
//!
//! Waiters register (`enable`) before they check the database and sleep only after, so a wake-up
//! that comes between the check and the sleep is not lost. It carries no data: the database is
//! the only truth. This module must never hold a lock across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pattern_db::ProtocolAgentId;
use tokio::sync::Notify;

/// Wake-up channels by agent.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    agents: Mutex<HashMap<ProtocolAgentId, Arc<Notify>>>,
}

impl Notifier {
    /// The channel of `agent` (created on first use).
    pub(crate) fn channel(&self, agent: ProtocolAgentId) -> Arc<Notify> {
        let mut agents = self
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        agents.entry(agent).or_default().clone()
    }

    /// Wakes every current waiter of `agent`.
    pub(crate) fn wake(&self, agent: ProtocolAgentId) {
        let channel = {
            let agents = self
                .agents
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            agents.get(&agent).cloned()
        };
        if let Some(channel) = channel {
            channel.notify_waiters();
        }
    }
}
