//! The SQL of queue writes: enqueue, deliver (claim + begin the batch), cancel.
//!
//! Runs inside the writer's transaction like every op; it must never commit, and never claim an
//! entry without beginning its batch in the same transaction.

use sqlx::AnyConnection;

use super::{Ctx, begin_batch, claim_retry, encode_content, lock_agent, now_ms};
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{AgentId, BeginBatch, NewMessage};
use crate::queue::{Delivered, NewQueued, QUEUE_COLUMNS, QueuedMessage, queued_from_row};

pub(crate) async fn enqueue(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    entry: &NewQueued,
) -> Result<QueuedMessage> {
    let message = NewMessage::new(entry.role, entry.content.clone());
    let content = encode_content(ctx.max_content_bytes, &message)?;
    if message.tool_result_ids().next().is_some() || message.tool_use_ids().next().is_some() {
        return Err(Error::InvalidContent(
            "a queued trigger cannot hold tool calls or tool results".into(),
        ));
    }
    if entry.source.len() > 200 {
        return Err(Error::InvalidContent(
            "a queue entry's source is at most 200 bytes".into(),
        ));
    }
    if entry.retry_of.is_some() && entry.every.is_some() {
        return Err(Error::InvalidContent(
            "a retry is delivered once: it cannot be a recurring entry".into(),
        ));
    }
    lock_agent(conn, agent).await?;
    let id = ctx.ids.next_id()?;
    let now = now_ms();
    if let Some(abandoned) = entry.retry_of {
        claim_retry(conn, agent, abandoned, now).await?;
    }
    let deliver_at = entry.deliver_at.map_or(now, |t| t.timestamp_millis());
    let every = entry
        .every
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO agent_queue (id, agent_id, batch_type, role, content, source, deliver_at, \
         every_ms, deliveries, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9) \
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
    .fetch_one(&mut *conn)
    .await?;
    crate::wake::notify(
        conn,
        ctx.backend,
        &[
            crate::wake::WakeKey::Agent(agent),
            crate::wake::WakeKey::Queue,
        ],
    )
    .await?;
    queued_from_row(&row)
}

pub(crate) async fn begin_queued(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    id: SnowflakeId,
) -> Result<Option<Delivered>> {
    let now = now_ms();
    // Claim first, in one statement (on PostgreSQL the row lock makes a concurrent claim wait
    // and then find the entry gone): a one-off entry is marked delivered, a recurring one moves
    // to its first slot after now.
    let claimed = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE agent_queue SET \
           delivered_at = CASE WHEN every_ms IS NULL THEN $1 ELSE NULL END, \
           deliver_at = CASE WHEN every_ms IS NULL THEN deliver_at \
                        ELSE deliver_at + every_ms * ((($1 - deliver_at) / every_ms) + 1) END, \
           deliveries = deliveries + 1 \
         WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at <= $1 \
         RETURNING {QUEUE_COLUMNS}"
    )))
    .bind(now)
    .bind(id.get())
    .bind(agent.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = claimed else {
        return Ok(None);
    };
    let mut entry = queued_from_row(&row)?;
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
    sqlx::query("UPDATE agent_queue SET delivered_batch = $1 WHERE id = $2")
        .bind(received.batch_id.get())
        .bind(id.get())
        .execute(&mut *conn)
        .await?;
    entry.delivered_batch = Some(received.batch_id);
    Ok(Some(Delivered { entry, received }))
}

pub(crate) async fn cancel_queued(
    conn: &mut AnyConnection,
    agent: AgentId,
    id: SnowflakeId,
) -> Result<u64> {
    lock_agent(conn, agent).await?;
    let done = sqlx::query(
        "DELETE FROM agent_queue WHERE id = $1 AND agent_id = $2 AND delivered_at IS NULL",
    )
    .bind(id.get())
    .bind(agent.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}
