//! Each agent's durable queue: triggers waiting while a batch is in flight, and scheduled
//! wakeups (one-off and recurring).
//!
//! [`Database::enqueue`] commits an entry (the durable "received" of a trigger that cannot start
//! its batch yet). [`Database::begin_queued`] delivers one: in one transaction it claims the
//! entry (a one-off is marked delivered, a recurring one moves to its next time after now) and
//! begins its batch, so an entry is delivered exactly once across restarts and processes: a
//! crash before the commit leaves it pending, a crash after leaves an open batch that recovery
//! abandons and offers for retry. This module must never deliver an entry without beginning its
//! batch in the same transaction, nor begin a batch for an entry that is not due.

use crate::BatchError;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::model::{AgentId, BatchId, BatchType, ContentBlock, Received, Role};
use crate::ops::queue::{BeginQueued, CancelQueued, Enqueue};
use crate::ops::{FromStored, StoredId, StoredTime, decode_content, from_ms};
use crate::sql::Conn;

/// What to queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewQueued {
    /// What kind of batch delivery begins (not `continuation`).
    pub batch_type: BatchType,
    /// `user` or `system`.
    pub role: Role,
    /// The trigger's content.
    pub content: Vec<ContentBlock>,
    /// Who sent it, for inspection (an endpoint, an agent name, `scheduler`).
    pub source: String,
    /// Not delivered before this time; `None` means now.
    pub deliver_at: Option<DateTime<Utc>>,
    /// Come back every this long after each delivery (a recurring wakeup); at least 1 s.
    pub every: Option<Duration>,
    /// The abandoned batch this entry retries: marked retried when the entry is stored, in the
    /// same transaction (see [`crate::BeginBatch::retry_of`]). Not for recurring entries.
    #[serde(default)]
    pub retry_of: Option<BatchId>,
}

impl NewQueued {
    /// A trigger to deliver as soon as the agent is free.
    pub fn now(batch_type: BatchType, role: Role, content: Vec<ContentBlock>) -> Self {
        Self {
            batch_type,
            role,
            content,
            source: String::new(),
            deliver_at: None,
            every: None,
            retry_of: None,
        }
    }
}

/// A queued entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedMessage {
    /// Identity and arrival order.
    pub id: SnowflakeId,
    /// The agent it is for.
    pub agent_id: AgentId,
    /// The batch type delivery begins.
    pub batch_type: BatchType,
    /// `user` or `system`.
    pub role: Role,
    /// The trigger's content.
    pub content: Vec<ContentBlock>,
    /// Who sent it.
    pub source: String,
    /// Next delivery time.
    pub deliver_at: DateTime<Utc>,
    /// Period of a recurring entry.
    pub every: Option<Duration>,
    /// When a one-off entry was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The batch the latest delivery began.
    pub delivered_batch: Option<BatchId>,
    /// How often it was delivered.
    pub deliveries: i64,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
    /// `Some` for a schedule (decision 0012): how it fires, and its label.
    #[serde(default)]
    pub schedule: Option<Box<QueuedSchedule>>,
    /// The abandoned batch this entry runs again.
    #[serde(default)]
    pub retry_of: Option<BatchId>,
    /// The session message this entry delivers (marked read when the entry's batch completes).
    #[serde(default)]
    pub protocol_message: Option<crate::protocol::ProtocolMessageId>,
}

/// What makes a queue entry a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedSchedule {
    /// One-off (`at`) or recurring (`cron`).
    pub kind: crate::schedule::ScheduleKind,
    /// A recurring schedule's cron expression.
    pub cron: Option<String>,
    /// The time zone of `cron` (IANA name).
    pub time_zone: Option<String>,
    /// The schedule's label.
    pub name: Option<String>,
}

/// A delivery: the entry as it is after delivery, and its new batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivered {
    /// The entry, updated.
    pub entry: QueuedMessage,
    /// The batch its trigger began.
    pub received: Received,
}

/// A queue entry from either engine's checked row ([`FromStored`]).
pub(crate) fn queued_from_plain(row: impl FromStored<QueuedMessage>) -> Result<QueuedMessage> {
    row.into_domain()
}

/// The schedule part of a stored entry (`None` for a plain entry); an unknown kind is refused.
fn schedule_of(
    kind: Option<String>,
    cron: Option<String>,
    time_zone: Option<String>,
    name: Option<String>,
) -> Result<Option<Box<QueuedSchedule>>> {
    let Some(kind) = kind else {
        return Ok(None);
    };
    let kind = match kind.as_str() {
        "at" => crate::schedule::ScheduleKind::At,
        "cron" => crate::schedule::ScheduleKind::Cron,
        other => {
            return Err(BatchError::InvalidContent(format!(
                "unknown schedule kind `{other}` in the queue"
            ))
            .into());
        }
    };
    Ok(Some(Box::new(QueuedSchedule {
        kind,
        cron,
        time_zone,
        name,
    })))
}

/// [`FromStored`] for the queue rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! queue_from_stored {
    ($engine:ident) => {
        impl FromStored<QueuedMessage> for $engine::QueueRow {
            fn into_domain(self) -> Result<QueuedMessage> {
                Ok(QueuedMessage {
                    id: SnowflakeId(self.id),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    batch_type: self.batch_type.parse()?,
                    role: self.role.parse()?,
                    content: decode_content(&self.content)?,
                    source: self.source,
                    deliver_at: self.deliver_at.time(),
                    every: self
                        .every_ms
                        .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                    delivered_at: self.delivered_at.map(StoredTime::time),
                    delivered_batch: self.delivered_batch.map(SnowflakeId),
                    deliveries: self.deliveries,
                    created_at: self.created_at.time(),
                    schedule: schedule_of(self.schedule, self.cron, self.time_zone, self.name)?,
                    retry_of: self.retry_of.map(SnowflakeId),
                    protocol_message: self
                        .protocol_message_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(crate::protocol::ProtocolMessageId),
                })
            }
        }
    };
}

queue_from_stored!(pattern_db_sqlite);
queue_from_stored!(pattern_db_postgres);

impl Database {
    /// Commits `entry` to `agent`'s queue. When this returns, the trigger is durable.
    pub async fn enqueue(&self, agent: AgentId, entry: NewQueued) -> Result<QueuedMessage> {
        if entry.batch_type == BatchType::Continuation {
            return Err(BatchError::InvalidContent(
                "a queued trigger cannot have type continuation".into(),
            )
            .into());
        }
        if !matches!(entry.role, Role::User | Role::System) {
            return Err(BatchError::InvalidContent(format!(
                "a queued trigger is a user or system message, not {}",
                entry.role.as_str()
            ))
            .into());
        }
        if let Some(every) = entry.every
            && every < Duration::from_secs(1)
        {
            return Err(BatchError::InvalidContent(
                "a recurring wakeup comes back at most once a second".into(),
            )
            .into());
        }
        let queued = self.write(Enqueue { agent, entry }).await?;
        self.hub().wake(crate::wake::WakeKey::Agent(agent));
        self.hub().wake(crate::wake::WakeKey::Queue);
        Ok(queued)
    }

    /// Delivers entry `id` of `agent`'s queue if it is pending and due: begins its batch and
    /// marks it delivered (or moves a recurring entry on) in one transaction. `None` when it is
    /// not pending (delivered already, cancelled) or not due yet.
    pub async fn begin_queued(&self, agent: AgentId, id: SnowflakeId) -> Result<Option<Delivered>> {
        self.write(BeginQueued { agent, id }).await
    }

    /// Removes a pending entry; `false` when there was none.
    pub async fn cancel_queued(&self, agent: AgentId, id: SnowflakeId) -> Result<bool> {
        Ok(self.write(CancelQueued { agent, id }).await? > 0)
    }

    /// `agent`'s pending entries (due or not) in arrival order.
    pub async fn pending_queue(&self, agent: AgentId) -> Result<Vec<QueuedMessage>> {
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::queue::pending(c, &agent.to_string())
                .await?
                .into_iter()
                .map(queued_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::queue::pending(c, agent.0)
                .await?
                .into_iter()
                .map(queued_from_plain)
                .collect(),
        }
    }

    /// Pending entries of every agent that are due at `now`, by due time then arrival, at most
    /// `limit`.
    pub async fn due_queue(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<QueuedMessage>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::queue::due(c, now.timestamp_millis(), limit)
                .await?
                .into_iter()
                .map(queued_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::queue::due(c, now, limit)
                .await?
                .into_iter()
                .map(queued_from_plain)
                .collect(),
        }
    }

    /// When the next pending entry of any agent becomes due after now, if one will (entries
    /// due already wait for their agent's claim, whose release wakes the deliverers).
    pub async fn next_queue_due(&self) -> Result<Option<DateTime<Utc>>> {
        let now = Utc::now().timestamp_millis();
        let mut pooled = self.reader().acquire().await?;
        Ok(match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::queue::next_due(c, now)
                .await?
                .map(from_ms),
            Conn::Postgres(c) => {
                pattern_db_postgres::queue::next_due(c, crate::sql::instant(now)?).await?
            }
        })
    }
}
