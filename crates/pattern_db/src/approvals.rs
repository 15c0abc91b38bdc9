//! Approval requests a human can answer (migration `0010_approvals`, decision 0011): the row a
//! run stores when a guarded action needs approval, and the one conditional write that decides
//! it, from any process.
//!
//! [`Database::request_approval`] stores a pending request and, when its batch has a running
//! turn, that turn's `approval_requested` event (see [`approval_requested_event`]) in the same
//! transaction; it is a write of the run (fenced by its claim like the others).
//! [`Database::decide_approval`] is `UPDATE ... WHERE state = 'pending'`: exactly one decision
//! wins, a second answer is [`ApprovalError::AlreadyDecided`], an unknown id (or another
//! organization's) [`ApprovalError::NotFound`]. [`Database::expire_approval`] marks a
//! pending request `timed_out` the same way. Every decision wakes [`WakeKey::Approval`] (in this
//! process, and on PostgreSQL in every process through `NOTIFY`), so the waiting run learns it
//! wherever it runs. A batch that ends (completed, abandoned, recovered) marks its still-pending
//! requests `abandoned` in its own transaction.
//!
//! This module must never decide a request that is not pending, never reveal another
//! organization's request, and never let a request outlive its batch as pending.

use crate::BatchError;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{AgentId, BatchId};
use crate::ops::approvals::{Decide, Expire, Request};
use crate::ops::{FromStored, StoredId, StoredTime};
use crate::protocol::OrganizationId;
use crate::runs::TurnId;
use crate::wake::WakeKey;

/// Longest free text (tool name, reason, decided-by, denial reason) in bytes.
pub const MAX_TEXT: usize = 4000;

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for an answer.
    Pending,
    /// Approved: the action may run.
    Approved,
    /// Denied by whoever answered.
    Denied,
    /// Nobody answered before the deadline: a denial.
    TimedOut,
    /// Its run ended (failed, cancelled, or its process died) before an answer: never approved.
    Abandoned,
}

impl ApprovalState {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::TimedOut => "timed_out",
            ApprovalState::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "pending" => ApprovalState::Pending,
            "approved" => ApprovalState::Approved,
            "denied" => ApprovalState::Denied,
            "timed_out" => ApprovalState::TimedOut,
            "abandoned" => ApprovalState::Abandoned,
            other => {
                return Err(BatchError::InvalidContent(format!(
                    "unknown approval state `{other}` (pending, approved, denied, timed_out, \
                     abandoned)"
                ))
                .into());
            }
        })
    }
}

/// A request to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewApproval {
    /// The agent asking.
    pub agent: AgentId,
    /// The batch of the run asking, when a run asks: its running turn gets the
    /// `approval_requested` event, and the request ends with the batch.
    pub batch: Option<BatchId>,
    /// The tool (or action).
    pub tool: String,
    /// The tool call's id.
    pub call_id: Option<String>,
    /// The call's arguments.
    pub input: serde_json::Value,
    /// Why approval is needed.
    pub reason: String,
    /// When an unanswered request times out.
    pub deadline: DateTime<Utc>,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Go ahead.
    Approve,
    /// Do not.
    Deny {
        /// Why (shown to the model); may be empty.
        #[serde(default)]
        reason: String,
    },
}

/// A stored approval request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// Its id.
    pub id: SnowflakeId,
    /// The agent's organization (`None`: a local agent).
    pub organization: Option<OrganizationId>,
    /// The agent asking.
    pub agent_id: AgentId,
    /// The run's batch.
    pub batch_id: Option<BatchId>,
    /// The run's turn (when the batch had a running one).
    pub turn_id: Option<TurnId>,
    /// The tool.
    pub tool: String,
    /// The tool call's id.
    pub call_id: Option<String>,
    /// The call's arguments.
    pub input: serde_json::Value,
    /// Why approval is needed.
    pub reason: String,
    /// When it was asked.
    pub requested_at: DateTime<Utc>,
    /// When an unanswered request times out.
    pub deadline: DateTime<Utc>,
    /// Where it stands.
    pub state: ApprovalState,
    /// When it left `pending`.
    pub decided_at: Option<DateTime<Utc>>,
    /// Who decided (`http`, `cli`, `timeout`, `recovery`, ...).
    pub decided_by: Option<String>,
    /// Why it was denied (also for timeouts and abandonment).
    pub denial_reason: Option<String>,
}

/// Which requests to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalFilter {
    /// Only these (`None`: all states).
    pub state: Option<ApprovalState>,
    /// At most this many, newest first (1..=1000).
    pub limit: usize,
}

/// The turn event that announces a request:
/// `{"type": "approval_requested", "approval_id": N, "tool": T, "call_id": C, "reason": R,
/// "deadline": RFC 3339}`.
pub fn approval_requested_event(approval: &Approval) -> crate::runs::NewTurnEvent {
    crate::runs::NewTurnEvent {
        kind: "approval_requested".into(),
        data: serde_json::json!({
            "type": "approval_requested",
            "approval_id": approval.id.get(),
            "tool": approval.tool,
            "call_id": approval.call_id,
            "reason": approval.reason,
            "deadline": approval.deadline,
        })
        .to_string(),
    }
}

/// A request from either engine's checked row ([`FromStored`]).
pub(crate) fn approval_from_plain(row: impl FromStored<Approval>) -> Result<Approval> {
    row.into_domain()
}

/// [`FromStored`] for the approval rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! approval_from_stored {
    ($engine:ident) => {
        impl FromStored<Approval> for $engine::approvals::ApprovalRow {
            fn into_domain(self) -> Result<Approval> {
                Ok(Approval {
                    id: SnowflakeId(self.id),
                    organization: self
                        .organization_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(OrganizationId),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    batch_id: self.batch_id.map(SnowflakeId),
                    turn_id: self.turn_id.map(StoredId::uuid).transpose()?.map(TurnId),
                    tool: self.tool,
                    call_id: self.call_id,
                    input: serde_json::from_str(&self.input).map_err(|e| {
                        BatchError::InvalidContent(format!("stored approval input: {e}"))
                    })?,
                    reason: self.reason,
                    requested_at: self.requested_at.time(),
                    deadline: self.deadline.time(),
                    state: self.state.parse()?,
                    decided_at: self.decided_at.map(StoredTime::time),
                    decided_by: self.decided_by,
                    denial_reason: self.denial_reason,
                })
            }
        }
    };
}

approval_from_stored!(pattern_db_sqlite);
approval_from_stored!(pattern_db_postgres);

fn check_text(what: &str, text: &str) -> Result<()> {
    if text.len() > MAX_TEXT {
        return Err(BatchError::InvalidContent(format!(
            "an approval's {what} is at most {MAX_TEXT} bytes"
        ))
        .into());
    }
    Ok(())
}

impl Database {
    /// Stores a pending request (and its turn's `approval_requested` event, same transaction).
    /// A write of the run: inside `runs::fenced` it is refused once the claim is lost.
    pub async fn request_approval(&self, new: NewApproval) -> Result<Approval> {
        if new.tool.is_empty() {
            return Err(BatchError::InvalidContent("an approval names its tool".into()).into());
        }
        check_text("tool", &new.tool)?;
        check_text("reason", &new.reason)?;
        if let Some(call) = &new.call_id {
            check_text("call id", call)?;
        }
        let approval = self.write(Request(new)).await?;
        if let Some(turn) = approval.turn_id {
            self.hub().wake(WakeKey::Turn(turn));
        }
        Ok(approval)
    }

    /// Decides pending request `id` (only within `organization` when it is given): exactly one
    /// decision wins; a request that is not pending is [`ApprovalError::AlreadyDecided`], an
    /// unknown one (or another organization's) [`ApprovalError::NotFound`]. `by` says who
    /// answered.
    pub async fn decide_approval(
        &self,
        organization: Option<OrganizationId>,
        id: SnowflakeId,
        decision: ApprovalDecision,
        by: &str,
    ) -> Result<Approval> {
        check_text("decider", by)?;
        if let ApprovalDecision::Deny { reason } = &decision {
            check_text("denial reason", reason)?;
        }
        let approval = self
            .write(Decide {
                organization,
                id,
                decision,
                by: by.to_owned(),
            })
            .await?;
        self.hub().wake(WakeKey::Approval(id));
        Ok(approval)
    }

    /// Marks request `id` `timed_out` if it is still pending; returns it as it is after (a
    /// decision that won the race stays). A write of the run, like the request.
    pub async fn expire_approval(&self, id: SnowflakeId) -> Result<Approval> {
        let approval = self.write(Expire { id }).await?;
        self.hub().wake(WakeKey::Approval(id));
        Ok(approval)
    }

    /// Request `id` (only within `organization` when it is given).
    pub async fn approval(
        &self,
        organization: Option<OrganizationId>,
        id: SnowflakeId,
    ) -> Result<Approval> {
        crate::ops::approvals::read(self.reader(), organization, id).await
    }

    /// Requests of `organization` (`None`: of every agent, for the local operator), newest
    /// first.
    pub async fn approvals(
        &self,
        organization: Option<OrganizationId>,
        filter: ApprovalFilter,
    ) -> Result<Vec<Approval>> {
        if filter.limit == 0 || filter.limit > 1000 {
            return Err(BatchError::InvalidContent(
                "an approval listing's limit is 1 to 1000".into(),
            )
            .into());
        }
        crate::ops::approvals::list(self.reader(), organization, filter).await
    }
}

/// Refusals of approval requests (module [`crate::approvals`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No approval request with this id (or not the caller's organization's).
    #[error("unknown approval request {0}")]
    NotFound(crate::SnowflakeId),
    /// The approval request is not pending any more: another answer (or its deadline, or the
    /// end of its run) decided it first.
    #[error("approval request {id} is already decided ({state})")]
    AlreadyDecided {
        /// The request.
        id: crate::SnowflakeId,
        /// What decided it.
        state: crate::approvals::ApprovalState,
    },
}

impl ApprovalError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            ApprovalError::NotFound(_) => C::NotFound,
            ApprovalError::AlreadyDecided { .. } => C::Conflict,
        }
    }
}
