//! The SQL of approval requests: the domain's writes ([`Request`] one, with its turn's event;
//! [`Decide`] or [`Expire`] one with a conditional update), ending the pending ones of a batch
//! that ends, and the reads.
//!
//! Writes run inside the writer's transaction (reads on the reader pool); they must never
//! commit, and never change a request that is not pending.

use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::instant;
use crate::{AgentError, ApprovalError, BatchError};

use super::{Ctx, now_ms, runs};
use crate::approvals::{
    Approval, ApprovalDecision, ApprovalFilter, ApprovalState, NewApproval, approval_from_plain,
    approval_requested_event,
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
    let org = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::agents::organization_of(c, &new.agent.to_string())
            .await?
            .ok_or(AgentError::NotFound(new.agent))?
            .map(|o| super::parse_uuid(&o))
            .transpose()?,
        Conn::Postgres(c) => pattern_db_postgres::agents::organization_of(c, new.agent.0)
            .await?
            .ok_or(AgentError::NotFound(new.agent))?,
    };
    let turn: Option<TurnId> = match new.batch {
        Some(batch) => match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::approvals::running_turn(c, batch.get(), &new.agent.to_string())
                    .await?
                    .map(|t| super::parse_uuid(&t))
                    .transpose()?
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::approvals::running_turn(c, batch.get(), new.agent.0).await?
            }
        }
        .map(TurnId),
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
    let requested_at = now_ms();
    let deadline = new.deadline.timestamp_millis();
    match conn {
        Conn::Sqlite(c) => {
            let org = org.map(|o| o.to_string());
            let agent = new.agent.to_string();
            let turn = turn.map(|t| t.to_string());
            pattern_db_sqlite::approvals::insert(
                c,
                &pattern_db_sqlite::approvals::NewApproval {
                    id: id.get(),
                    organization_id: org.as_deref(),
                    agent_id: &agent,
                    batch_id: new.batch.map(SnowflakeId::get),
                    turn_id: turn.as_deref(),
                    tool: &new.tool,
                    call_id: new.call_id.as_deref(),
                    input: &input,
                    reason: &new.reason,
                    requested_at,
                    deadline,
                },
            )
            .await?;
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::approvals::insert(
                c,
                &pattern_db_postgres::approvals::NewApproval {
                    id: id.get(),
                    organization_id: org,
                    agent_id: new.agent.0,
                    batch_id: new.batch.map(SnowflakeId::get),
                    turn_id: turn.map(|t| t.0),
                    tool: &new.tool,
                    call_id: new.call_id.as_deref(),
                    input: &input,
                    reason: &new.reason,
                    requested_at: instant(requested_at)?,
                    deadline: instant(deadline)?,
                },
            )
            .await?;
        }
    }
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
    let now = now_ms();
    let changed = match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::approvals as a;
            let decision = a::Decision {
                state: state.as_str(),
                decided_at: now,
                decided_by: by,
                denial_reason: reason.as_deref(),
            };
            match organization {
                Some(org) => a::decide_in(c, id.get(), &decision, &org.to_string()).await?,
                None => a::decide(c, id.get(), &decision).await?,
            }
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::approvals as a;
            let decision = a::Decision {
                state: state.as_str(),
                decided_at: instant(now)?,
                decided_by: by,
                denial_reason: reason.as_deref(),
            };
            match organization {
                Some(org) => a::decide_in(c, id.get(), &decision, org.0).await?,
                None => a::decide(c, id.get(), &decision).await?,
            }
        }
    };
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
    let now = now_ms();
    let changed = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::approvals::expire(c, id.get(), now).await?,
        Conn::Postgres(c) => {
            pattern_db_postgres::approvals::expire(c, id.get(), instant(now)?).await?
        }
    };
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
    let pending = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::approvals::pending_of_batch(c, batch.get()).await?,
        Conn::Postgres(c) => {
            pattern_db_postgres::approvals::pending_of_batch(c, batch.get()).await?
        }
    };
    if pending.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::approvals::abandon_batch(c, batch.get(), now, by, reason).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::approvals::abandon_batch(c, batch.get(), instant(now)?, by, reason)
                .await?
        }
    };
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
    let row = match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::approvals as a;
            match organization {
                Some(org) => a::by_id_in(c, id.get(), &org.to_string()).await?,
                None => a::by_id(c, id.get()).await?,
            }
            .map(approval_from_plain)
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::approvals as a;
            match organization {
                Some(org) => a::by_id_in(c, id.get(), org.0).await?,
                None => a::by_id(c, id.get()).await?,
            }
            .map(approval_from_plain)
        }
    };
    row.ok_or(ApprovalError::NotFound(id))?
}

pub(crate) async fn read(
    pool: &Pool,
    organization: Option<OrganizationId>,
    id: SnowflakeId,
) -> Result<Approval> {
    let mut pooled = pool.acquire().await?;
    read_in(&mut pooled.conn(), organization, id).await
}

pub(crate) async fn list(
    pool: &Pool,
    organization: Option<OrganizationId>,
    filter: ApprovalFilter,
) -> Result<Vec<Approval>> {
    // One fixed statement per filter combination, checked in each engine's crate.
    use pattern_db_postgres::approvals as pg;
    use pattern_db_sqlite::approvals as lite;
    let limit = i64::try_from(filter.limit).unwrap_or(1000);
    let state = filter.state.map(|s| s.as_str());
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => {
            let org = organization.map(|o| o.to_string());
            let rows = match (org.as_deref(), state) {
                (None, None) => lite::newest(c, limit).await?,
                (Some(org), None) => lite::newest_in(c, org, limit).await?,
                (None, Some(state)) => lite::newest_in_state(c, state, limit).await?,
                (Some(org), Some(state)) => {
                    lite::newest_in_with_state(c, org, state, limit).await?
                }
            };
            rows.into_iter().map(approval_from_plain).collect()
        }
        Conn::Postgres(c) => {
            let rows = match (organization, state) {
                (None, None) => pg::newest(c, limit).await?,
                (Some(org), None) => pg::newest_in(c, org.0, limit).await?,
                (None, Some(state)) => pg::newest_in_state(c, state, limit).await?,
                (Some(org), Some(state)) => {
                    pg::newest_in_with_state(c, org.0, state, limit).await?
                }
            };
            rows.into_iter().map(approval_from_plain).collect()
        }
    }
}
