//! The queue domain's writes ([`Enqueue`], [`BeginQueued`] (claim + begin the batch),
//! [`CancelQueued`]; schedules: [`AddSchedule`], [`RemoveSchedule`]) and their SQL, with the
//! next time of a cron schedule and the one retry of a crashed wakeup.
//!
//! Each write locks its agent. Runs inside the writer's transaction; it must never commit, and
//! never claim an entry without beginning its batch in the same transaction.

use crate::sql::Conn;
use crate::{BatchError, ScheduleError};

use super::{Ctx, begin_batch, claim_retry, encode_content, lock_agent, now_ms};

use crate::error::Result;
use crate::id::SnowflakeId;
use crate::model::{AgentId, BatchId, BatchType, BeginBatch, ContentBlock, NewMessage, Role};
use crate::queue::{Delivered, NewQueued, QUEUE_COLUMNS, QueuedMessage, queued_from_row};
use crate::runs::RunClaim;
use crate::schedule::{MAX_SCHEDULES_PER_AGENT, SCHEDULE_SOURCE, ValidSchedule};
use crate::writer::{Locks, Write};

/// Adds an entry to `agent`'s queue.
#[derive(Debug)]
pub(crate) struct Enqueue {
    pub(crate) agent: AgentId,
    pub(crate) entry: NewQueued,
}

impl Write for Enqueue {
    type Output = QueuedMessage;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<QueuedMessage> {
        enqueue(conn, ctx, self.agent, &self.entry).await
    }
}

/// Delivers entry `id` if it is pending and due (begins its batch in the same transaction).
#[derive(Debug)]
pub(crate) struct BeginQueued {
    pub(crate) agent: AgentId,
    pub(crate) id: SnowflakeId,
}

impl Write for BeginQueued {
    type Output = Option<Delivered>;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Option<Delivered>> {
        begin_queued(conn, ctx, self.agent, self.id).await
    }
}

/// Removes a pending entry; outputs how many were removed (0 or 1).
#[derive(Debug)]
pub(crate) struct CancelQueued {
    pub(crate) agent: AgentId,
    pub(crate) id: SnowflakeId,
}

impl Write for CancelQueued {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        cancel_queued(conn, self.agent, self.id).await
    }
}

/// Stores a checked schedule (a queue entry), within the agent's cap.
#[derive(Debug)]
pub(crate) struct AddSchedule {
    pub(crate) agent: AgentId,
    pub(crate) valid: ValidSchedule,
}

impl Write for AddSchedule {
    type Output = QueuedMessage;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<QueuedMessage> {
        add_schedule(conn, ctx, self.agent, &self.valid).await
    }
}

/// Removes `agent`'s live schedule `id`.
#[derive(Debug)]
pub(crate) struct RemoveSchedule {
    pub(crate) agent: AgentId,
    pub(crate) id: SnowflakeId,
}

impl Write for RemoveSchedule {
    type Output = QueuedMessage;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<QueuedMessage> {
        remove_schedule(conn, self.agent, self.id).await
    }
}

pub(crate) async fn enqueue(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    entry: &NewQueued,
) -> Result<QueuedMessage> {
    let content = check_entry(ctx, entry)?;
    lock_agent(conn, agent).await?;
    let now = now_ms();
    let mut delivers = None;
    if let Some(abandoned) = entry.retry_of {
        claim_retry(conn, agent, abandoned, now).await?;
        // A retry delivers the same session message as the entry whose batch it runs again.
        delivers = crate::sql::query(
            "SELECT protocol_message_id FROM agent_queue WHERE delivered_batch = $1 AND agent_id = $2",
        )
        .bind(abandoned.get())
        .bind(agent.to_string())
        .fetch_optional(&mut *conn)
        .await?
        .map(|row| row.try_get::<Option<String>, _>(0))
        .transpose()?
        .flatten();
    }
    insert_entry(conn, ctx, agent, entry, content, delivers, now).await
}

/// Queues the trigger that delivers session message `message` to `agent` (decision 0020).
/// Takes no agent lock (the session row is this write's lock; an agent lock after it would break
/// the writer's lock order), so it only inserts: whoever claims `agent` next sees the entry.
pub(crate) async fn enqueue_session_message(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    entry: &NewQueued,
    message: crate::protocol::ProtocolMessageId,
) -> Result<QueuedMessage> {
    let content = check_entry(ctx, entry)?;
    insert_entry(
        conn,
        ctx,
        agent,
        entry,
        content,
        Some(message.to_string()),
        now_ms(),
    )
    .await
}

/// Checks an entry before anything is written; returns its encoded content.
fn check_entry(ctx: &Ctx, entry: &NewQueued) -> Result<String> {
    let message = NewMessage::new(entry.role, entry.content.clone());
    let content = encode_content(ctx.max_content_bytes, &message)?;
    if message.tool_result_ids().next().is_some() || message.tool_use_ids().next().is_some() {
        return Err(BatchError::InvalidContent(
            "a queued trigger cannot hold tool calls or tool results".into(),
        )
        .into());
    }
    if entry.source.len() > 200 {
        return Err(BatchError::InvalidContent(
            "a queue entry's source is at most 200 bytes".into(),
        )
        .into());
    }
    if entry.retry_of.is_some() && entry.every.is_some() {
        return Err(BatchError::InvalidContent(
            "a retry is delivered once: it cannot be a recurring entry".into(),
        )
        .into());
    }
    Ok(content)
}

async fn insert_entry(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    entry: &NewQueued,
    content: String,
    delivers: Option<String>,
    now: i64,
) -> Result<QueuedMessage> {
    let id = ctx.ids.next_id()?;
    let deliver_at = entry.deliver_at.map_or(now, |t| t.timestamp_millis());
    let every = entry
        .every
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO agent_queue (id, agent_id, batch_type, role, content, source, deliver_at, \
         every_ms, deliveries, created_at, retry_of, protocol_message_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11) \
         RETURNING {QUEUE_COLUMNS}"
    )))
    .bind(id.get())
    .bind(agent.to_string())
    .bind(entry.batch_type.as_str())
    .bind(entry.role.as_str())
    .bind(content)
    .bind(entry.source.as_str())
    .bind(deliver_at)
    .bind(every)
    .bind(now)
    .bind(entry.retry_of.map(|b| b.get()))
    .bind(delivers)
    .fetch_one(&mut *conn)
    .await?;
    wake_queue(conn, ctx, agent).await?;
    queued_from_row(&row)
}

/// Wakes whoever waits on `agent`'s queue or on any queue (after a new entry, in its
/// transaction: on PostgreSQL the notification goes out at commit).
async fn wake_queue(conn: &mut Conn<'_>, ctx: &Ctx, agent: AgentId) -> Result<()> {
    crate::wake::notify(
        conn,
        ctx.backend,
        &[
            crate::wake::WakeKey::Agent(agent),
            crate::wake::WakeKey::Queue,
        ],
    )
    .await
}

async fn begin_queued(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    id: SnowflakeId,
) -> Result<Option<Delivered>> {
    let now = now_ms();
    let Some(mut entry) = claim_entry(conn, agent, id, now, true).await? else {
        return Ok(None);
    };
    let trigger = NewMessage::new(entry.role, entry.content.clone());
    let received = begin_batch(
        conn,
        ctx,
        agent,
        &trigger,
        &BeginBatch {
            batch_type: Some(entry.batch_type),
            ..BeginBatch::default()
        },
        None,
    )
    .await?;
    crate::sql::query("UPDATE agent_queue SET delivered_batch = $1 WHERE id = $2")
        .bind(received.batch_id.get())
        .bind(id.get())
        .execute(&mut *conn)
        .await?;
    entry.delivered_batch = Some(received.batch_id);
    Ok(Some(Delivered { entry, received }))
}

async fn cancel_queued(conn: &mut Conn<'_>, agent: AgentId, id: SnowflakeId) -> Result<u64> {
    lock_agent(conn, agent).await?;
    let done = crate::sql::query(
        "DELETE FROM agent_queue WHERE id = $1 AND agent_id = $2 AND delivered_at IS NULL",
    )
    .bind(id.get())
    .bind(agent.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Claims pending entry `id` of `agent` for delivery at `now`: a one-off is marked delivered, an
/// `every` entry moves to its first slot after now, a cron schedule to its next fire time after
/// now (computed here, stored in this transaction; one that never fires again is marked
/// delivered). With `due_only`, an entry not due yet is left alone. `None` when it is not
/// pending (or another transaction claimed it first: the update is conditional on what was read,
/// and on PostgreSQL waits for a concurrent claim's row lock, then finds it changed).
pub(crate) async fn claim_entry(
    conn: &mut Conn<'_>,
    agent: AgentId,
    id: SnowflakeId,
    now: i64,
    due_only: bool,
) -> Result<Option<QueuedMessage>> {
    let current = crate::sql::query(
        "SELECT deliver_at, cron, time_zone, every_ms FROM agent_queue \
         WHERE id = $1 AND agent_id = $2 AND delivered_at IS NULL",
    )
    .bind(id.get())
    .bind(agent.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(current) = current else {
        return Ok(None);
    };
    let deliver_at: i64 = current.try_get(0)?;
    let cron: Option<String> = current.try_get(1)?;
    let zone: Option<String> = current.try_get(2)?;
    let every: Option<i64> = current.try_get(3)?;
    if due_only && deliver_at > now {
        return Ok(None);
    }
    let row = match cron {
        Some(expr) => {
            // A stored expression was checked when it was added; one that fails now (or never
            // matches again) ends the schedule after this delivery rather than stalling it.
            let next = crate::schedule::next_fire(&expr, zone.as_deref(), super::from_ms(now))
                .ok()
                .flatten()
                .map(|t| t.timestamp_millis());
            let sql = match next {
                Some(_) => format!(
                    "UPDATE agent_queue SET deliver_at = $1, deliveries = deliveries + 1 \
                     WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 \
                     RETURNING {QUEUE_COLUMNS}"
                ),
                None => format!(
                    "UPDATE agent_queue SET delivered_at = $1, deliveries = deliveries + 1 \
                     WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 \
                     RETURNING {QUEUE_COLUMNS}"
                ),
            };
            crate::sql::query(sqlx::AssertSqlSafe(sql))
                .bind(next.unwrap_or(now))
                .bind(id.get())
                .bind(agent.to_string())
                .bind(deliver_at)
                .fetch_optional(&mut *conn)
                .await?
        }
        None => {
            // A one-off is delivered now; an `every` entry moves to its first slot after now
            // (computed here, like a cron's next time: the update is conditional on the slot
            // that was read).
            let (delivered_at, next) = match every {
                Some(every) if every > 0 => {
                    let missed = now.saturating_sub(deliver_at).max(0) / every;
                    let step = every.saturating_mul(missed.saturating_add(1));
                    (None, deliver_at.saturating_add(step))
                }
                _ => (Some(now), deliver_at),
            };
            crate::sql::query(sqlx::AssertSqlSafe(format!(
                "UPDATE agent_queue SET delivered_at = $1, deliver_at = $5, deliveries = deliveries + 1 \
                 WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 \
                 RETURNING {QUEUE_COLUMNS}"
            )))
            .bind(delivered_at)
            .bind(id.get())
            .bind(agent.to_string())
            .bind(deliver_at)
            .bind(next)
            .fetch_optional(&mut *conn)
            .await?
        }
    };
    row.as_ref().map(queued_from_row).transpose()
}

/// Stores a checked schedule as a queue entry, under the agent's lock, after checking its cap.
async fn add_schedule(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    valid: &ValidSchedule,
) -> Result<QueuedMessage> {
    let message = NewMessage::new(Role::System, vec![ContentBlock::text(&valid.message)]);
    let content = encode_content(ctx.max_content_bytes, &message)?;
    lock_agent(conn, agent).await?;
    let live: i64 = crate::sql::query(
        "SELECT COUNT(*) FROM agent_queue \
         WHERE agent_id = $1 AND schedule IS NOT NULL AND delivered_at IS NULL",
    )
    .bind(agent.to_string())
    .fetch_one(&mut *conn)
    .await?
    .try_get(0)?;
    if usize::try_from(live).unwrap_or(usize::MAX) >= MAX_SCHEDULES_PER_AGENT {
        return Err(ScheduleError::TooMany {
            agent,
            limit: MAX_SCHEDULES_PER_AGENT,
        }
        .into());
    }
    let id = ctx.ids.next_id()?;
    let now = now_ms();
    let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO agent_queue (id, agent_id, batch_type, role, content, source, deliver_at, \
         deliveries, created_at, schedule, cron, time_zone, name) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9, $10, $11, $12) \
         RETURNING {QUEUE_COLUMNS}"
    )))
    .bind(id.get())
    .bind(agent.to_string())
    .bind(BatchType::SystemTrigger.as_str())
    .bind(Role::System.as_str())
    .bind(content)
    .bind(SCHEDULE_SOURCE)
    .bind(valid.first)
    .bind(now)
    .bind(valid.kind.as_str())
    .bind(valid.cron.as_deref())
    .bind(valid.time_zone.as_deref())
    .bind(valid.name.as_deref())
    .fetch_one(&mut *conn)
    .await?;
    wake_queue(conn, ctx, agent).await?;
    queued_from_row(&row)
}

/// Deletes `agent`'s live schedule `id`; returns it.
async fn remove_schedule(
    conn: &mut Conn<'_>,
    agent: AgentId,
    id: SnowflakeId,
) -> Result<QueuedMessage> {
    lock_agent(conn, agent).await?;
    let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM agent_queue \
         WHERE id = $1 AND agent_id = $2 AND schedule IS NOT NULL AND delivered_at IS NULL \
         RETURNING {QUEUE_COLUMNS}"
    )))
    .bind(id.get())
    .bind(agent.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => queued_from_row(&row),
        None => Err(ScheduleError::NotFound(id).into()),
    }
}

/// Whether a delivered entry's crashed run earns one retry: a scheduled wakeup (a schedule, a
/// recurring entry, or a wakeup of the runtime's scheduler) or a session message (decision
/// 0020: a conversation between agents must not stall on one dead process).
fn earns_retry(entry: &QueuedMessage) -> bool {
    entry.protocol_message.is_some()
        || (entry.batch_type == BatchType::SystemTrigger
            && (entry.schedule.is_some() || entry.every.is_some() || entry.source == "scheduler"))
}

/// Recovery found `batch` of `agent` dead (its run's process died): when its trigger was a
/// scheduled wakeup that is not itself a retry, and the batch was not retried already, queue the
/// wakeup again, once (`retry_of` marks the batch in this transaction, so a second attempt is
/// refused). Runs under the agent's lock, in the transaction that abandons the batch.
pub(crate) async fn retry_crashed_wakeup(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    now: i64,
) -> Result<Option<QueuedMessage>> {
    let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "SELECT {QUEUE_COLUMNS} FROM agent_queue WHERE delivered_batch = $1 AND agent_id = $2"
    )))
    .bind(batch.get())
    .bind(agent.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let entry = queued_from_row(&row)?;
    if !earns_retry(&entry) || entry.retry_of.is_some() {
        return Ok(None);
    }
    let retried: Option<i64> = crate::sql::query("SELECT retried_at FROM batches WHERE id = $1")
        .bind(batch.get())
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    if retried.is_some() {
        return Ok(None);
    }
    let mut source = format!("retry:{}", entry.source);
    source.truncate(200);
    let retry = NewQueued {
        source,
        retry_of: Some(batch),
        // Due at the abandonment's time, so the delivery that took the agent over finds it.
        deliver_at: Some(super::from_ms(now)),
        ..NewQueued::now(entry.batch_type, entry.role, entry.content.clone())
    };
    enqueue(conn, ctx, agent, &retry).await.map(Some)
}
