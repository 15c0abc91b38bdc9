//! The [`PermissionBroker`]: asks for approval of guarded actions and records every decision.
//!
//! Each runtime owns its broker (there is no process-wide one). A request goes to the
//! [`Approver`] set on the broker (a CLI prompt, an HTTP endpoint, a policy); no approver, or no
//! answer within the broker's timeout, is a denial. Every decision, approvals included, is
//! written to the agent's activity log (`permission_decision`) before it is returned. This module
//! must never approve on its own and never return a decision it failed to record.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pattern_db::{AgentId, MessageStore};
use serde::{Deserialize, Serialize};
use tokio::sync::{RwLock, mpsc, oneshot};

use crate::error::Result;

/// What needs approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequest {
    /// The agent asking.
    pub agent: AgentId,
    /// The agent's name.
    pub agent_name: String,
    /// The tool (or action) to approve.
    pub tool: String,
    /// The call's id, when it is a tool call.
    pub call_id: Option<String>,
    /// The call's arguments.
    pub input: serde_json::Value,
    /// Why approval is needed, for the human.
    pub reason: String,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Go ahead.
    Approved,
    /// Do not.
    Denied {
        /// Why, for the model.
        reason: String,
    },
}

/// Answers permission requests.
#[async_trait]
pub trait Approver: Send + Sync + fmt::Debug {
    /// Decides `request`. Taking longer than the broker's timeout is a denial.
    async fn decide(&self, request: &PermissionRequest) -> Decision;
}

/// A broker per runtime.
#[derive(Debug)]
pub struct PermissionBroker {
    approver: RwLock<Option<Arc<dyn Approver>>>,
    timeout: Duration,
    log: MessageStore,
}

impl PermissionBroker {
    /// A broker without approver (everything is denied until one is set), recording decisions in
    /// `log`'s activity log.
    pub fn new(log: MessageStore, timeout: Duration) -> Self {
        Self {
            approver: RwLock::new(None),
            timeout,
            log,
        }
    }

    /// Sets who answers (replacing the previous approver).
    pub async fn set_approver(&self, approver: Arc<dyn Approver>) {
        *self.approver.write().await = Some(approver);
    }

    /// Removes the approver: requests are denied from now on.
    pub async fn clear_approver(&self) {
        *self.approver.write().await = None;
    }

    /// How long a request waits for an answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Asks, waits at most the timeout, records the decision, returns it. The error is only a
    /// failure to record (the action must then not happen).
    pub async fn request(&self, request: PermissionRequest) -> Result<Decision> {
        let approver = self.approver.read().await.clone();
        let decision = match approver {
            None => Decision::Denied {
                reason: "no approver is configured for this agent".into(),
            },
            Some(approver) => {
                match tokio::time::timeout(self.timeout, approver.decide(&request)).await {
                    Ok(decision) => decision,
                    Err(_) => Decision::Denied {
                        reason: format!("no answer within {} s", self.timeout.as_secs_f64()),
                    },
                }
            }
        };
        self.log
            .log_activity(
                "permission_decision",
                serde_json::json!({
                    "tool": request.tool,
                    "call_id": request.call_id,
                    "reason": request.reason,
                    "decision": decision,
                }),
            )
            .await?;
        Ok(decision)
    }
}

/// A request waiting for an answer from a [`ChannelApprover`]'s receiver.
#[derive(Debug)]
pub struct PendingApproval {
    /// What is asked.
    pub request: PermissionRequest,
    /// Send the answer here; dropping it is a denial.
    pub reply: oneshot::Sender<Decision>,
}

/// An approver that hands requests to whoever holds the receiver (a CLI prompt, an HTTP
/// endpoint). A dropped receiver or reply is a denial.
#[derive(Debug, Clone)]
pub struct ChannelApprover {
    tx: mpsc::Sender<PendingApproval>,
}

impl ChannelApprover {
    /// The approver and the receiving end, holding at most `capacity` unanswered requests.
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<PendingApproval>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { tx }, rx)
    }
}

#[async_trait]
impl Approver for ChannelApprover {
    async fn decide(&self, request: &PermissionRequest) -> Decision {
        let (reply, answer) = oneshot::channel();
        let pending = PendingApproval {
            request: request.clone(),
            reply,
        };
        if self.tx.send(pending).await.is_err() {
            return Decision::Denied {
                reason: "nobody is answering permission requests".into(),
            };
        }
        answer.await.unwrap_or(Decision::Denied {
            reason: "the request was dropped without an answer".into(),
        })
    }
}
