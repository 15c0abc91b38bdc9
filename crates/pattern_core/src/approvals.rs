//! [`DbApprover`]: the [`Approver`] whose requests are rows in the database, answered by whoever
//! decides them (`POST /v1/approvals/{id}`, `pattern approvals decide`, the prompt of `pattern
//! chat`), in this process or any other (decision 0011).
//!
//! A request is stored with its turn's `approval_requested` event (one transaction, a write of
//! the run, fenced by its claim), announced on the caller's live stream ([`notice`]), then
//! waited for: the waiter registers for the request's wake-up (`WakeKey::Approval`, which other
//! processes send through `NOTIFY` on PostgreSQL) before it reads the row, and reads again at
//! least every poll interval (another process's decision on SQLite is not announced). At the
//! deadline it marks the row `timed_out` with a conditional update: a decision that won the race
//! stands. The run's claim is kept alive meanwhile by the process heartbeat, not by this wait.
//!
//! [`wait_for_decision`] is the same wait for anyone else (the CLI's `chat` waits for its own
//! prompt's answer through it). This module must never approve a request that is not stored as
//! approved, and never leave a request it gave up on pending.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use pattern_db::{Approval, ApprovalState, Database, NewApproval, SnowflakeId, WakeKey};

use crate::agent::ResponseEvent;
use crate::error::Result;
use crate::permission::{Approver, Decision, PermissionRequest, notice};

/// How long an unanswered request waits when its request names no deadline.
const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// Asks through the database and waits for the stored decision.
#[derive(Debug, Clone)]
pub struct DbApprover {
    db: Database,
    poll: Duration,
}

impl DbApprover {
    /// An approver storing requests in `db`; it reads the row again at least every second on
    /// SQLite and every 2 s on PostgreSQL (where other processes' decisions wake it at once).
    pub fn new(db: Database) -> Self {
        let poll = match db.backend() {
            pattern_db::Backend::Sqlite => Duration::from_millis(250),
            pattern_db::Backend::Postgres => Duration::from_secs(2),
        };
        Self { db, poll }
    }

    /// The same, reading the row at least every `poll`.
    pub fn with_poll(db: Database, poll: Duration) -> Self {
        Self {
            db,
            poll: poll.max(Duration::from_millis(10)),
        }
    }

    async fn ask(&self, request: &PermissionRequest) -> Result<Decision> {
        let deadline = request.deadline.unwrap_or_else(|| {
            Utc::now() + chrono::Duration::from_std(DEFAULT_WAIT).unwrap_or_default()
        });
        let asked = self
            .db
            .request_approval(NewApproval {
                agent: request.agent,
                batch: request.batch,
                tool: request.tool.clone(),
                call_id: request.call_id.clone(),
                input: request.input.clone(),
                reason: request.reason.clone(),
                deadline,
            })
            .await?;
        notice(ResponseEvent::ApprovalRequested {
            approval_id: asked.id,
            tool: asked.tool.clone(),
            call_id: asked.call_id.clone(),
            reason: asked.reason.clone(),
            deadline: asked.deadline,
        });
        let decided = wait_for_decision(&self.db, asked.id, deadline, self.poll).await?;
        Ok(decision_of(&decided))
    }
}

#[async_trait]
impl Approver for DbApprover {
    async fn decide(&self, request: &PermissionRequest) -> Decision {
        match self.ask(request).await {
            Ok(decision) => decision,
            Err(e) => Decision::Denied {
                reason: format!("the approval request failed: {e}"),
            },
        }
    }

    fn keeps_deadline(&self) -> bool {
        true
    }
}

/// What a decided request means for the action.
pub fn decision_of(approval: &Approval) -> Decision {
    let id = approval.id;
    match approval.state {
        ApprovalState::Approved => Decision::Approved,
        ApprovalState::Denied => Decision::Denied {
            reason: match approval.denial_reason.as_deref() {
                Some(r) if !r.is_empty() => format!("denied (approval {id}): {r}"),
                _ => format!("denied (approval {id})"),
            },
        },
        ApprovalState::TimedOut => Decision::Denied {
            reason: format!("no answer before the deadline (approval {id})"),
        },
        ApprovalState::Abandoned | ApprovalState::Pending => Decision::Denied {
            reason: format!("the approval request {id} was not answered"),
        },
    }
}

/// Waits until request `id` is no longer pending, or until `deadline`, when it is marked
/// `timed_out` (unless a decision won the race). Returns the request as decided.
pub async fn wait_for_decision(
    db: &Database,
    id: SnowflakeId,
    deadline: DateTime<Utc>,
    poll: Duration,
) -> Result<Approval> {
    loop {
        let channel = db.hub().subscribe(WakeKey::Approval(id));
        let notified = channel.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let approval = db.approval(None, id).await?;
        if approval.state != ApprovalState::Pending {
            return Ok(approval);
        }
        let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        if left.is_zero() {
            return Ok(db.expire_approval(id).await?);
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(left.min(poll)) => {}
        }
    }
}
