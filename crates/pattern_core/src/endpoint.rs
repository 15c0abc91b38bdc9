//! Where an agent's `send_message` goes: [`MessageTarget`]s, the [`MessageEndpoint`] trait for
//! users' channels (a CLI, a chat bridge, an HTTP stream), and [`CollectingEndpoint`], an
//! in-memory endpoint for embedding and tests.
//!
//! Messages to another agent do not go through an endpoint: the runtime commits them to that
//! agent's durable queue, so they survive a crash of either side. This module must never block
//! an agent on a slow endpoint beyond the runtime's tool timeout.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pattern_db::AgentId;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Who a message is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum MessageTarget {
    /// The agent's default user endpoint.
    User,
    /// A registered endpoint by name.
    Endpoint(String),
    /// Another agent by name (delivered through its durable queue).
    Agent(String),
}

impl MessageTarget {
    /// Parses the text tools use: `user`, `agent:NAME`, or an endpoint name.
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("user") {
            MessageTarget::User
        } else if let Some(name) = text.strip_prefix("agent:") {
            MessageTarget::Agent(name.trim().to_owned())
        } else {
            MessageTarget::Endpoint(text.to_owned())
        }
    }
}

/// A message leaving an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutgoingMessage {
    /// The sending agent.
    pub from: AgentId,
    /// Its name.
    pub from_name: String,
    /// The text.
    pub content: String,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
}

/// Why an endpoint could not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("endpoint `{endpoint}` failed: {message}")]
pub struct EndpointError {
    /// The endpoint's name.
    pub endpoint: String,
    /// What failed.
    pub message: String,
}

/// A channel to a user.
#[async_trait]
pub trait MessageEndpoint: Send + Sync + fmt::Debug {
    /// Delivers `message`; an error is reported to the model as a failed tool call.
    async fn deliver(&self, message: &OutgoingMessage) -> Result<(), EndpointError>;
}

/// Keeps every message in memory (for embedding applications and tests).
#[derive(Debug, Default, Clone)]
pub struct CollectingEndpoint {
    messages: Arc<Mutex<Vec<OutgoingMessage>>>,
}

impl CollectingEndpoint {
    /// An empty endpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything delivered so far, in order.
    pub async fn messages(&self) -> Vec<OutgoingMessage> {
        self.messages.lock().await.clone()
    }
}

#[async_trait]
impl MessageEndpoint for CollectingEndpoint {
    async fn deliver(&self, message: &OutgoingMessage) -> Result<(), EndpointError> {
        self.messages.lock().await.push(message.clone());
        Ok(())
    }
}
