//! The SQL of approval requests: the domain's writes ([`Request`] one, with its turn's event;
//! [`Decide`] or [`Expire`] one with a conditional update), ending the pending ones of a batch
//! that ends, and the reads.
//!
//! Writes run inside the writer's transaction (reads on the reader pool); they must never
//! commit, and never change a request that is not pending.

use crate::sql::Conn;
use crate::sql::Pool;
use crate::{AgentError, ApprovalError, BatchError};

use super::{Ctx, now_ms, runs};
use crate::approvals::{
    APPROVAL_COLUMNS, Approval, ApprovalDecision, ApprovalFilter, ApprovalState, NewApproval,
    approval_from_row, approval_requested_event,
};
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::model::BatchId;
use crate::protocol::OrganizationId;
use crate::runs::RunClaim;
use crate::runs::TurnId;
use crate::wake::{self, WakeKey};
use crate::writer::{Locks, Write};

/// Stores a request (and its turn's `approval_requested` event): a write of the run.
#[derive(Debug)]
pub(crate) struct Request(pub(crate) NewApproval);

impl Write for Request {
    type Output = Approval;

    fn locks(&self) -> Locks {
        Locks::agent(self.0.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Approval> {
        request(conn, ctx, &self.0).await
    }
}

/// Decides a pending request (only within `organization` when given): whoever answers, not a
/// run, so it carries no claim.
#[derive(Debug)]
pub(crate) struct Decide {
    pub(crate) organization: Option<OrganizationId>,
    pub(crate) id: SnowflakeId,
    pub(crate) decision: ApprovalDecision,
    pub(crate) by: String,
}

impl Write for Decide {
    type Output = Approval;

    fn locks(&self) -> Locks {
        // One conditional update of one row: no agent lock.
        Locks::none().carrying_claim()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Approval> {
        decide(
            conn,
            ctx,
            self.organization,
            self.id,
            &self.decision,
            &self.by,
        )
        .await
    }
}

/// Marks a request `timed_out` if it is still pending: a write of the run, like the request.
#[derive(Debug)]
pub(crate) struct Expire {
    pub(crate) id: SnowflakeId,
}

impl Write for Expire {
    type Output = Approval;

    fn locks(&self) -> Locks {
        // One conditional update of one row: no agent lock.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Approval> {
        expire(conn, ctx, self.id).await
    }
}

async fn request(conn: &mut Conn<'_>, ctx: &Ctx, new: &NewApproval) -> Result<Approval> {
    let org = crate::sql::query("SELECT organization_id FROM agents WHERE id = $1")
        .bind(new.agent.to_string())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(AgentError::NotFound(new.agent))?;
    let org: Option<String> = org.try_get(0)?;
    let turn: Option<TurnId> = match new.batch {
        Some(batch) => {
            let row = crate::sql::query(
                "SELECT id FROM turns WHERE batch_id = $1 AND agent_id = $2 AND state = 'running' \
                 ORDER BY created_at DESC LIMIT 1",
            )
            .bind(batch.get())
            .bind(new.agent.to_string())
            .fetch_optional(&mut *conn)
            .await?;
            match row {
                Some(r) => Some(TurnId(super::parse_uuid(&r.try_get::<String, _>(0)?)?)),
                None => None,
            }
        }
        None => None,
    };
    let id = ctx.ids.next_id()?;
    let input = serde_json::to_string(&new.input)
        .map_err(|e| BatchError::InvalidContent(format!("approval input: {e}")))?;
    if input.len() > ctx.max_content_bytes {
        return Err(BatchError::ContentTooLarge {
            size: input.len(),
            limit: ctx.max_content_bytes,
        }
        .into());
    }
    crate::sql::query(
        "INSERT INTO approvals (id, organization_id, agent_id, batch_id, turn_id, tool, call_id, \
         input, reason, requested_at, deadline, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending')",
    )
    .bind(id.get())
    .bind(org)
    .bind(new.agent.to_string())
    .bind(new.batch.map(SnowflakeId::get))
    .bind(turn.map(|t| t.to_string()))
    .bind(new.tool.clone())
    .bind(new.call_id.clone())
    .bind(input)
    .bind(new.reason.clone())
    .bind(now_ms())
    .bind(new.deadline.timestamp_millis())
    .execute(&mut *conn)
    .await?;
    let approval = read_in(conn, None, id).await?;
    if let Some(turn) = turn {
        runs::append_events(
            conn,
            ctx,
            new.agent,
            turn,
            &[approval_requested_event(&approval)],
        )
        .await?;
    }
    Ok(approval)
}

async fn decide(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    organization: Option<OrganizationId>,
    id: SnowflakeId,
    decision: &ApprovalDecision,
    by: &str,
) -> Result<Approval> {
    let (state, reason) = match decision {
        ApprovalDecision::Approve => (ApprovalState::Approved, None),
        ApprovalDecision::Deny { reason } => (ApprovalState::Denied, Some(reason.clone())),
    };
    let scope = if organization.is_some() {
        " AND organization_id = $6"
    } else {
        ""
    };
    let sql = format!(
        "UPDATE approvals SET state = $1, decided_at = $2, decided_by = $3, denial_reason = $4 \
         WHERE id = $5 AND state = 'pending'{scope}"
    );
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql))
        .bind(state.as_str())
        .bind(now_ms())
        .bind(by.to_owned())
        .bind(reason)
        .bind(id.get());
    if let Some(org) = organization {
        q = q.bind(org.to_string());
    }
    let changed = q.execute(&mut *conn).await?.rows_affected();
    let approval = read_in(conn, organization, id).await?;
    if changed == 0 {
        return Err(ApprovalError::AlreadyDecided {
            id,
            state: approval.state,
        }
        .into());
    }
    wake::notify(conn, ctx.backend, &[WakeKey::Approval(id)]).await?;
    Ok(approval)
}

async fn expire(conn: &mut Conn<'_>, ctx: &Ctx, id: SnowflakeId) -> Result<Approval> {
    let changed = crate::sql::query(
        "UPDATE approvals SET state = 'timed_out', decided_at = $1, decided_by = 'timeout', \
         denial_reason = 'no answer before the deadline' WHERE id = $2 AND state = 'pending'",
    )
    .bind(now_ms())
    .bind(id.get())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if changed > 0 {
        wake::notify(conn, ctx.backend, &[WakeKey::Approval(id)]).await?;
    }
    read_in(conn, None, id).await
}

/// Marks the pending requests of `batch` (which is ending) `abandoned`, waking their waiters.
pub(crate) async fn end_batch(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    batch: BatchId,
    by: &str,
    reason: &str,
) -> Result<()> {
    let pending: Vec<i64> =
        crate::sql::query("SELECT id FROM approvals WHERE batch_id = $1 AND state = 'pending'")
            .bind(batch.get())
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
    if pending.is_empty() {
        return Ok(());
    }
    crate::sql::query(
        "UPDATE approvals SET state = 'abandoned', decided_at = $1, decided_by = $2, \
         denial_reason = $3 WHERE batch_id = $4 AND state = 'pending'",
    )
    .bind(now_ms())
    .bind(by.to_owned())
    .bind(reason.to_owned())
    .bind(batch.get())
    .execute(&mut *conn)
    .await?;
    let keys: Vec<WakeKey> = pending
        .into_iter()
        .map(|id| WakeKey::Approval(SnowflakeId(id)))
        .collect();
    wake::notify(conn, ctx.backend, &keys).await
}

async fn read_in(
    conn: &mut Conn<'_>,
    organization: Option<OrganizationId>,
    id: SnowflakeId,
) -> Result<Approval> {
    let (sql, org) = scoped(organization);
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(id.get());
    if let Some(org) = org {
        q = q.bind(org);
    }
    let row = q
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(ApprovalError::NotFound(id))?;
    approval_from_row(&row)
}

fn scoped(organization: Option<OrganizationId>) -> (String, Option<String>) {
    match organization {
        Some(org) => (
            format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1 AND organization_id = $2"
            ),
            Some(org.to_string()),
        ),
        None => (
            format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"),
            None,
        ),
    }
}

pub(crate) async fn read(
    pool: &Pool,
    organization: Option<OrganizationId>,
    id: SnowflakeId,
) -> Result<Approval> {
    let (sql, org) = scoped(organization);
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(id.get());
    if let Some(org) = org {
        q = q.bind(org);
    }
    let row = q
        .fetch_optional(pool)
        .await?
        .ok_or(ApprovalError::NotFound(id))?;
    approval_from_row(&row)
}

pub(crate) async fn list(
    pool: &Pool,
    organization: Option<OrganizationId>,
    filter: ApprovalFilter,
) -> Result<Vec<Approval>> {
    let mut conditions = Vec::new();
    let mut n = 0;
    if organization.is_some() {
        n += 1;
        conditions.push(format!("organization_id = ${n}"));
    }
    if filter.state.is_some() {
        n += 1;
        conditions.push(format!("state = ${n}"));
    }
    let where_clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals {where_clause} ORDER BY id DESC LIMIT ${}",
        n + 1
    );
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
    if let Some(org) = organization {
        q = q.bind(org.to_string());
    }
    if let Some(state) = filter.state {
        q = q.bind(state.as_str());
    }
    q.bind(i64::try_from(filter.limit).unwrap_or(1000))
        .fetch_all(pool)
        .await?
        .iter()
        .map(approval_from_row)
        .collect()
}
