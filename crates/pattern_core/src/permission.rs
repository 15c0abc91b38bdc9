//! The [`PermissionBroker`]: asks for approval of guarded actions and records every decision.
//!
//! Each runtime owns its broker (there is no process-wide one). A request goes to the
//! [`Approver`] set on the broker (a CLI prompt, an HTTP endpoint, a policy); no approver, or no
//! answer within the broker's timeout, is a denial. Every decision, approvals included, is
//! written to the agent's activity log (`permission_decision`) before it is returned. The broker
//! sets each request's deadline (now + its timeout); an approver that keeps the deadline itself
//! ([`Approver::keeps_deadline`], like [`crate::approvals::DbApprover`], which must record a
//! timeout) gets a few seconds of grace beyond it. An approver can tell the caller's live event
//! stream that a request waits ([`notice`]) while the run is in [`with_notices`]. This module
//! must never approve on its own and never return a decision it failed to record.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pattern_db::{AgentId, BatchId, MessageStore};
use serde::{Deserialize, Serialize};
use tokio::sync::{RwLock, mpsc, oneshot};

use crate::agent::ResponseEvent;
use crate::error::Result;

/// How much longer than the deadline the broker waits for an approver that keeps the deadline
/// itself (to record the timeout).
pub const DEADLINE_GRACE: Duration = Duration::from_secs(10);

tokio::task_local! {
    static NOTICES: mpsc::UnboundedSender<ResponseEvent>;
}

/// Runs `future` with [`notice`]s it makes (on this task) sent to `to`, when given. A task
/// spawned inside must be wrapped again (with [`current_notices`]).
pub async fn with_notices<F: Future>(
    to: Option<mpsc::UnboundedSender<ResponseEvent>>,
    future: F,
) -> F::Output {
    match to {
        Some(to) => NOTICES.scope(to, future).await,
        None => future.await,
    }
}

/// Where the current task's notices go, if anywhere.
pub fn current_notices() -> Option<mpsc::UnboundedSender<ResponseEvent>> {
    NOTICES.try_with(Clone::clone).ok()
}

/// Sends `event` to the live event stream of the run this task belongs to, if there is one (it
/// is not stored by this: a caller stores what must be in the turn's log).
pub fn notice(event: ResponseEvent) {
    // A closed receiver only means nobody listens live any more.
    let _ = NOTICES.try_with(|tx| tx.send(event));
}

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
    /// The batch of the run asking, when a run asks.
    #[serde(default)]
    pub batch: Option<BatchId>,
    /// When an unanswered request is denied (set by the broker).
    #[serde(default)]
    pub deadline: Option<DateTime<Utc>>,
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

    /// Whether this approver answers by the request's deadline itself (recording what a timeout
    /// means); the broker then waits [`DEADLINE_GRACE`] longer before it denies on its own.
    fn keeps_deadline(&self) -> bool {
        false
    }
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
    pub async fn request(&self, mut request: PermissionRequest) -> Result<Decision> {
        let approver = self.approver.read().await.clone();
        request.deadline = Some(
            Utc::now()
                + chrono::Duration::from_std(self.timeout)
                    .unwrap_or_else(|_| chrono::Duration::days(1)),
        );
        let decision = match approver {
            None => Decision::Denied {
                reason: "no approver is configured for this agent".into(),
            },
            Some(approver) => {
                let limit = if approver.keeps_deadline() {
                    self.timeout + DEADLINE_GRACE
                } else {
                    self.timeout
                };
                match tokio::time::timeout(limit, approver.decide(&request)).await {
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
