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
use crate::protocol::ProtocolMessageId;
use crate::queue::{Delivered, NewQueued, QueuedMessage, queued_from_plain};
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
        delivers = match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::queue::protocol_message_of_batch(
                c,
                abandoned.get(),
                &agent.to_string(),
            )
            .await?
            .flatten()
            .map(|m| super::parse_uuid(&m))
            .transpose()?,
            Conn::Postgres(c) => {
                pattern_db_postgres::queue::protocol_message_of_batch(c, abandoned.get(), agent.0)
                    .await?
                    .flatten()
            }
        }
        .map(ProtocolMessageId);
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
    insert_entry(conn, ctx, agent, entry, content, Some(message), now_ms()).await
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
    delivers: Option<ProtocolMessageId>,
    now: i64,
) -> Result<QueuedMessage> {
    let id = ctx.ids.next_id()?;
    let deliver_at = entry.deliver_at.map_or(now, |t| t.timestamp_millis());
    let every = entry
        .every
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let queued = insert_row(
        conn,
        &NewRow {
            id: id.get(),
            agent,
            batch_type: entry.batch_type.as_str(),
            role: entry.role.as_str(),
            content: &content,
            source: &entry.source,
            deliver_at,
            every_ms: every,
            created_at: now,
            retry_of: entry.retry_of.map(|b| b.get()),
            protocol_message: delivers,
            schedule: None,
            cron: None,
            time_zone: None,
            name: None,
        },
    )
    .await?;
    wake_queue(conn, ctx, agent).await?;
    Ok(queued)
}

/// A new queue row in the domain's values (times in milliseconds).
struct NewRow<'a> {
    id: i64,
    agent: AgentId,
    batch_type: &'a str,
    role: &'a str,
    content: &'a str,
    source: &'a str,
    deliver_at: i64,
    every_ms: Option<i64>,
    created_at: i64,
    retry_of: Option<i64>,
    protocol_message: Option<ProtocolMessageId>,
    schedule: Option<&'a str>,
    cron: Option<&'a str>,
    time_zone: Option<&'a str>,
    name: Option<&'a str>,
}

/// Inserts `row` with no deliveries yet; the entry as stored.
async fn insert_row(conn: &mut Conn<'_>, row: &NewRow<'_>) -> Result<QueuedMessage> {
    match conn {
        Conn::Sqlite(c) => {
            let agent = row.agent.to_string();
            let message = row.protocol_message.map(|m| m.to_string());
            queued_from_plain(
                pattern_db_sqlite::queue::insert(
                    c,
                    &pattern_db_sqlite::queue::NewEntry {
                        id: row.id,
                        agent_id: &agent,
                        batch_type: row.batch_type,
                        role: row.role,
                        content: row.content,
                        source: row.source,
                        deliver_at: row.deliver_at,
                        every_ms: row.every_ms,
                        created_at: row.created_at,
                        retry_of: row.retry_of,
                        protocol_message_id: message.as_deref(),
                        schedule: row.schedule,
                        cron: row.cron,
                        time_zone: row.time_zone,
                        name: row.name,
                    },
                )
                .await?,
            )
        }
        Conn::Postgres(c) => queued_from_plain(
            pattern_db_postgres::queue::insert(
                c,
                &pattern_db_postgres::queue::NewEntry {
                    id: row.id,
                    agent_id: row.agent.0,
                    batch_type: row.batch_type,
                    role: row.role,
                    content: row.content,
                    source: row.source,
                    deliver_at: crate::sql::instant(row.deliver_at)?,
                    every_ms: row.every_ms,
                    created_at: crate::sql::instant(row.created_at)?,
                    retry_of: row.retry_of,
                    protocol_message_id: row.protocol_message.map(|m| m.0),
                    schedule: row.schedule,
                    cron: row.cron,
                    time_zone: row.time_zone,
                    name: row.name,
                },
            )
            .await?,
        ),
    }
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
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::queue::set_delivered_batch(c, id.get(), received.batch_id.get())
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::queue::set_delivered_batch(c, id.get(), received.batch_id.get())
                .await?
        }
    };
    entry.delivered_batch = Some(received.batch_id);
    Ok(Some(Delivered { entry, received }))
}

async fn cancel_queued(conn: &mut Conn<'_>, agent: AgentId, id: SnowflakeId) -> Result<u64> {
    lock_agent(conn, agent).await?;
    Ok(match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::queue::delete_pending(c, id.get(), &agent.to_string()).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::queue::delete_pending(c, id.get(), agent.0).await?
        }
    })
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
    let current = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::queue::claim_state(c, id.get(), &agent.to_string())
            .await?
            .map(|r| (r.deliver_at, r.cron, r.time_zone, r.every_ms)),
        Conn::Postgres(c) => pattern_db_postgres::queue::claim_state(c, id.get(), agent.0)
            .await?
            .map(|r| {
                (
                    r.deliver_at.timestamp_millis(),
                    r.cron,
                    r.time_zone,
                    r.every_ms,
                )
            }),
    };
    let Some((deliver_at, cron, zone, every)) = current else {
        return Ok(None);
    };
    if due_only && deliver_at > now {
        return Ok(None);
    }
    let claim = match cron {
        Some(expr) => {
            // A stored expression was checked when it was added; one that fails now (or never
            // matches again) ends the schedule after this delivery rather than stalling it.
            let next = crate::schedule::next_fire(&expr, zone.as_deref(), super::from_ms(now))
                .ok()
                .flatten()
                .map(|t| t.timestamp_millis());
            match next {
                Some(next) => Claim::To(next),
                None => Claim::Last(now),
            }
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
            Claim::Set(delivered_at, next)
        }
    };
    claim_update(conn, agent, id, deliver_at, claim).await
}

/// How a claim moves an entry on: to a next time (a cron schedule), delivered for good (a cron
/// schedule that never fires again), or both columns set (a one-off or an `every` entry).
#[derive(Clone, Copy, Debug)]
enum Claim {
    To(i64),
    Last(i64),
    Set(Option<i64>, i64),
}

/// Runs `claim` on pending entry `id` of `agent` if it is still due at `was` (the update is
/// conditional on what the claim read).
async fn claim_update(
    conn: &mut Conn<'_>,
    agent: AgentId,
    id: SnowflakeId,
    was: i64,
    claim: Claim,
) -> Result<Option<QueuedMessage>> {
    let id = id.get();
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::queue as q;
            let agent = agent.to_string();
            let row = match claim {
                Claim::To(next) => q::claim_to(c, id, &agent, was, next).await?,
                Claim::Last(now) => q::claim_last(c, id, &agent, was, now).await?,
                Claim::Set(delivered_at, next) => {
                    q::claim_set(c, id, &agent, was, delivered_at, next).await?
                }
            };
            row.map(queued_from_plain).transpose()
        }
        Conn::Postgres(c) => {
            use crate::sql::instant;
            use pattern_db_postgres::queue as q;
            let agent = agent.0;
            let was = instant(was)?;
            let row = match claim {
                Claim::To(next) => q::claim_to(c, id, agent, was, instant(next)?).await?,
                Claim::Last(now) => q::claim_last(c, id, agent, was, instant(now)?).await?,
                Claim::Set(delivered_at, next) => {
                    let delivered_at = delivered_at.map(instant).transpose()?;
                    q::claim_set(c, id, agent, was, delivered_at, instant(next)?).await?
                }
            };
            row.map(queued_from_plain).transpose()
        }
    }
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
    let live = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::queue::count_live_schedules(c, &agent.to_string()).await?
        }
        Conn::Postgres(c) => pattern_db_postgres::queue::count_live_schedules(c, agent.0).await?,
    };
    if usize::try_from(live).unwrap_or(usize::MAX) >= MAX_SCHEDULES_PER_AGENT {
        return Err(ScheduleError::TooMany {
            agent,
            limit: MAX_SCHEDULES_PER_AGENT,
        }
        .into());
    }
    let id = ctx.ids.next_id()?;
    let now = now_ms();
    let queued = insert_row(
        conn,
        &NewRow {
            id: id.get(),
            agent,
            batch_type: BatchType::SystemTrigger.as_str(),
            role: Role::System.as_str(),
            content: &content,
            source: SCHEDULE_SOURCE,
            deliver_at: valid.first,
            every_ms: None,
            created_at: now,
            retry_of: None,
            protocol_message: None,
            schedule: Some(valid.kind.as_str()),
            cron: valid.cron.as_deref(),
            time_zone: valid.time_zone.as_deref(),
            name: valid.name.as_deref(),
        },
    )
    .await?;
    wake_queue(conn, ctx, agent).await?;
    Ok(queued)
}

/// Deletes `agent`'s live schedule `id`; returns it.
async fn remove_schedule(
    conn: &mut Conn<'_>,
    agent: AgentId,
    id: SnowflakeId,
) -> Result<QueuedMessage> {
    lock_agent(conn, agent).await?;
    let row = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::queue::delete_schedule(c, id.get(), &agent.to_string())
                .await?
                .map(queued_from_plain)
        }
        Conn::Postgres(c) => pattern_db_postgres::queue::delete_schedule(c, id.get(), agent.0)
            .await?
            .map(queued_from_plain),
    };
    match row {
        Some(entry) => entry,
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
    let row = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::queue::by_delivered_batch(c, batch.get(), &agent.to_string())
                .await?
                .map(queued_from_plain)
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::queue::by_delivered_batch(c, batch.get(), agent.0)
                .await?
                .map(queued_from_plain)
        }
    };
    let Some(entry) = row.transpose()? else {
        return Ok(None);
    };
    if !earns_retry(&entry) || entry.retry_of.is_some() {
        return Ok(None);
    }
    let retried = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::batches::retried_at(c, batch.get()).await?,
        Conn::Postgres(c) => pattern_db_postgres::batches::retried_at(c, batch.get())
            .await?
            .map(|t| t.timestamp_millis()),
    };
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
