//! [`MessageStore`]: one agent's history, organised in batches.
//!
//! The batch life cycle of the incremental-save flow lives here: [`begin_batch`] commits the
//! trigger and is the "received" acknowledgement; [`append_step`] stores one step whole or not at
//! all; [`complete_batch`], [`continue_batch`] and [`recover`] move batches between states.
//! Reads never cut a batch in half. This type must never hand back a write as done before the
//! writer has committed it.
//!
//! [`begin_batch`]: MessageStore::begin_batch
//! [`append_step`]: MessageStore::append_step
//! [`complete_batch`]: MessageStore::complete_batch
//! [`continue_batch`]: MessageStore::continue_batch
//! [`recover`]: MessageStore::recover

use crate::db::Database;
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::legacy::{self, ImportPlan, LegacyMessage};
use crate::model::{
    Abandoned, ActivityEvent, AgentId, BatchId, BatchInfo, BeginBatch, Message, NewMessage,
    Received, RecoveryScope, StepReceipt, StoredBatch, Summary,
};
use crate::ops;
use crate::sql::Conn;

/// The message store of one agent. Cheap to clone.
#[derive(Debug, Clone)]
pub struct MessageStore {
    db: Database,
    agent: AgentId,
}

impl MessageStore {
    pub(crate) fn new(db: Database, agent: AgentId) -> Self {
        Self { db, agent }
    }

    /// The agent this store serves.
    pub fn agent_id(&self) -> AgentId {
        self.agent
    }

    /// The database behind it.
    pub fn database(&self) -> &Database {
        &self.db
    }

    async fn write<W: crate::writer::Write>(&self, write: W) -> Result<W::Output> {
        self.db.write(write).await
    }

    // -- batch life cycle ----------------------------------------------------------------------

    /// Commits `trigger` as the first message of a new open batch and returns where it lives.
    /// When this returns, the trigger is durable: it is the "received" acknowledgement.
    pub async fn begin_batch(&self, trigger: NewMessage, opts: BeginBatch) -> Result<Received> {
        self.write(crate::ops::batches::BeginBatch {
            agent: self.agent,
            trigger,
            opts,
        })
        .await
    }

    /// Appends one step (the messages of one model turn and its tool results) to an open batch,
    /// in one transaction. Refuses a tool result whose call is not in the batch, a repeated call
    /// id or result, and any batch that is not open. Renews the batch's lease.
    pub async fn append_step(
        &self,
        batch: BatchId,
        messages: Vec<NewMessage>,
    ) -> Result<StepReceipt> {
        self.write(crate::ops::batches::AppendStep {
            agent: self.agent,
            batch,
            messages,
            turn: None,
        })
        .await
    }

    /// Marks the batch complete. Refused while a tool call waits for its result. Completing a
    /// complete batch is a no-op.
    pub async fn complete_batch(&self, batch: BatchId) -> Result<BatchInfo> {
        let done = self
            .batch_change(batch, crate::ops::batches::Change::Complete)
            .await?;
        // The completion may have queued another agent's trigger (a sync session's reply).
        self.db.hub().wake(crate::wake::WakeKey::Queue);
        Ok(done)
    }

    /// Heartbeat continuation: reopens (or keeps open) the batch under this process's lease, so
    /// the next steps extend it; their messages carry the `continuation` batch type.
    pub async fn continue_batch(&self, batch: BatchId) -> Result<BatchInfo> {
        self.batch_change(batch, crate::ops::batches::Change::Continue)
            .await
    }

    /// Extends the lease of an open batch, for runs that work long between steps.
    pub async fn renew_lease(&self, batch: BatchId) -> Result<BatchInfo> {
        self.batch_change(batch, crate::ops::batches::Change::RenewLease)
            .await
    }

    async fn batch_change(
        &self,
        batch: BatchId,
        change: crate::ops::batches::Change,
    ) -> Result<BatchInfo> {
        self.write(crate::ops::batches::BatchChange {
            agent: self.agent,
            batch,
            change,
        })
        .await
    }

    /// Abandons one open batch now (its run gave up: the model failed, the caller cancelled):
    /// it is never sent to a provider again, and is returned with its trigger for retry.
    pub async fn abandon_batch(&self, batch: BatchId, reason: &str) -> Result<Abandoned> {
        self.write(crate::ops::batches::AbandonBatch {
            agent: self.agent,
            batch,
            reason: reason.to_owned(),
        })
        .await
    }

    /// Turns this agent's open batches whose run lease has expired into `abandoned`, and returns
    /// them with their trigger messages for retry.
    pub async fn recover(&self) -> Result<Vec<Abandoned>> {
        self.recover_scope(RecoveryScope::ExpiredLeases).await
    }

    /// Like [`recover`](Self::recover) with an explicit scope.
    pub async fn recover_scope(&self, scope: RecoveryScope) -> Result<Vec<Abandoned>> {
        self.write(crate::ops::batches::Recover {
            agent: Some(self.agent),
            scope,
        })
        .await
    }

    // -- reads ---------------------------------------------------------------------------------

    /// The latest `n_batches` batches that are not archived (in every state), oldest first, each
    /// whole. The cost follows `n_batches`, not the length of the history; a repeated call with no
    /// write in between (by any process) is answered from memory after one primary-key lookup of
    /// the agent's revision.
    pub async fn get_recent(&self, n_batches: usize) -> Result<Vec<StoredBatch>> {
        if n_batches == 0 {
            return Ok(Vec::new());
        }
        // One connection for the lookup and the read: every pool acquire and release costs a
        // task hop of its own.
        let mut pooled = self.db.reader().acquire().await?;
        let limit = i64::try_from(n_batches).unwrap_or(i64::MAX);
        if let Conn::Sqlite(c) = pooled.conn() {
            let agent = self.agent.to_string();
            // One statement, one round trip: the revision, and the batches only when it is not
            // the revision of the answer cached (decision 0025, "Stop 41"); revision and
            // batches from one snapshot, so the entry cached is exactly that revision's
            // ("Stop 29"). One JSON value instead of a row per message ("Stop 28").
            let mut known = self.db.cached_recent_revision(self.agent, n_batches);
            loop {
                let Some((revision, doc)) =
                    pattern_db_sqlite::batches::revision_and_newest_json(c, &agent, limit, known)
                        .await?
                else {
                    return Ok(Vec::new());
                };
                let Some(doc) = doc else {
                    if let Some(hit) = self.db.cached_recent(self.agent, revision, n_batches) {
                        return Ok(hit);
                    }
                    // The entry was replaced since it was looked at: read the batches (the
                    // second round always brings them).
                    known = None;
                    continue;
                };
                let batches = ops::batches_from_json(&doc)?;
                self.db
                    .cache_recent(self.agent, revision, n_batches, &batches);
                return Ok(batches);
            }
        }
        let Some(revision) = self.revision_on(&mut pooled.conn()).await? else {
            return Ok(Vec::new());
        };
        if let Some(hit) = self.db.cached_recent(self.agent, revision, n_batches) {
            return Ok(hit);
        }
        // Dynamic on PostgreSQL: a checked statement decodes every column of every row, and
        // this join repeats a batch's columns on each of its messages (decision 0023, 3 (c)).
        let sql = ops::batches_with_messages(
            "SELECT * FROM batches WHERE agent_id = $1 AND NOT archived ORDER BY id DESC LIMIT $2",
        );
        let rows = crate::sql::query(sqlx::AssertSqlSafe(sql))
            .bind(self.agent.to_string())
            .bind(limit)
            .fetch_all(&mut pooled.conn())
            .await?;
        let batches = ops::batches_from_joined_rows(&rows)?;
        self.db
            .cache_recent(self.agent, revision, n_batches, &batches);
        Ok(batches)
    }

    /// The agent's revision: bumped by every write of its history. `None` for an unknown agent.
    pub async fn revision(&self) -> Result<Option<i64>> {
        let mut pooled = self.db.reader().acquire().await?;
        self.revision_on(&mut pooled.conn()).await
    }

    async fn revision_on(&self, conn: &mut Conn<'_>) -> Result<Option<i64>> {
        Ok(match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::agents::revision(c, &self.agent.to_string()).await?
            }
            Conn::Postgres(c) => pattern_db_postgres::agents::revision(c, self.agent.0).await?,
        })
    }

    /// Every message of the agent in position order, archived ones included when asked; at most
    /// `limit` messages after `after` (exclusive) for paging.
    pub async fn get_all(
        &self,
        after: Option<SnowflakeId>,
        limit: usize,
        include_archived: bool,
    ) -> Result<Vec<Message>> {
        let after = after.map_or(-1, SnowflakeId::get);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pooled = self.db.reader().acquire().await?;
        match pooled.conn() {
            Conn::Sqlite(c) => {
                let agent = self.agent.to_string();
                pattern_db_sqlite::messages::page_after(c, &agent, after, limit, include_archived)
                    .await?
                    .into_iter()
                    .map(ops::message_from_plain)
                    .collect()
            }
            Conn::Postgres(c) => pattern_db_postgres::messages::page_after(
                c,
                self.agent.0,
                after,
                limit,
                include_archived,
            )
            .await?
            .into_iter()
            .map(ops::message_from_plain)
            .collect(),
        }
    }

    /// One batch with its messages. Unknown (or another agent's) batch is
    /// [`BatchError::NotFound`].
    pub async fn get_batch(&self, batch: BatchId) -> Result<StoredBatch> {
        let info = self.batch_info(batch).await?;
        let mut pooled = self.db.reader().acquire().await?;
        let messages = match pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::messages::live_of_batch(c, batch.get())
                .await?
                .into_iter()
                .map(ops::message_from_plain)
                .collect::<Result<Vec<_>>>()?,
            Conn::Postgres(c) => pattern_db_postgres::messages::live_of_batch(c, batch.get())
                .await?
                .into_iter()
                .map(ops::message_from_plain)
                .collect::<Result<Vec<_>>>()?,
        };
        Ok(StoredBatch { info, messages })
    }

    /// One batch's row.
    pub async fn batch_info(&self, batch: BatchId) -> Result<BatchInfo> {
        let mut pooled = self.db.reader().acquire().await?;
        ops::load_batch(&mut pooled.conn(), self.agent, batch).await
    }

    /// The newest open batch, if any: the batch a run is working on.
    pub async fn current_batch(&self) -> Result<Option<BatchInfo>> {
        let mut pooled = self.db.reader().acquire().await?;
        match pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::batches::newest_open(c, &self.agent.to_string())
                .await?
                .map(ops::batch_from_plain)
                .transpose(),
            Conn::Postgres(c) => pattern_db_postgres::batches::newest_open(c, self.agent.0)
                .await?
                .map(ops::batch_from_plain)
                .transpose(),
        }
    }

    /// Batch rows newest first, at most `limit`, optionally only those before `before`.
    pub async fn list_batches(
        &self,
        before: Option<BatchId>,
        limit: usize,
    ) -> Result<Vec<BatchInfo>> {
        let before = before.map_or(i64::MAX, SnowflakeId::get);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pooled = self.db.reader().acquire().await?;
        match pooled.conn() {
            Conn::Sqlite(c) => {
                let agent = self.agent.to_string();
                pattern_db_sqlite::batches::page_before(c, &agent, before, limit)
                    .await?
                    .into_iter()
                    .map(ops::batch_from_plain)
                    .collect()
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::batches::page_before(c, self.agent.0, before, limit)
                    .await?
                    .into_iter()
                    .map(ops::batch_from_plain)
                    .collect()
            }
        }
    }

    /// Live (not archived) batches before `before`, oldest first, each whole, at most `limit`:
    /// what lies beyond a window read by [`Self::get_recent`], for the context to summarise
    /// before it leaves the request.
    pub async fn live_batches_before(
        &self,
        before: BatchId,
        limit: usize,
    ) -> Result<Vec<StoredBatch>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pooled = self.db.reader().acquire().await?;
        // Every batch below the agent's `live_from` is archived (migration 0027): both walks
        // start there, not at the start of a long archived history.
        if let Conn::Sqlite(c) = pooled.conn() {
            let doc = pattern_db_sqlite::batches::live_before_json(
                c,
                &self.agent.to_string(),
                before.get(),
                limit,
            )
            .await?;
            return ops::batches_from_json(&doc);
        }
        // Dynamic on PostgreSQL, as `get_recent`'s read there.
        let sql = ops::batches_with_messages(
            "SELECT * FROM batches WHERE agent_id = $1 \
             AND id >= (SELECT a.live_from FROM agents a WHERE a.id = $1) \
             AND id < $2 AND NOT archived ORDER BY id LIMIT $3",
        );
        let rows = crate::sql::query(sqlx::AssertSqlSafe(sql))
            .bind(self.agent.to_string())
            .bind(before.get())
            .bind(limit)
            .fetch_all(&mut pooled.conn())
            .await?;
        ops::batches_from_joined_rows(&rows)
    }

    /// Number of live (not archived, not deleted) messages.
    pub async fn count_live(&self) -> Result<i64> {
        let mut pooled = self.db.reader().acquire().await?;
        Ok(match pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::messages::count_live(c, &self.agent.to_string()).await?
            }
            Conn::Postgres(c) => pattern_db_postgres::messages::count_live(c, self.agent.0).await?,
        })
    }

    // -- archive and summaries -----------------------------------------------------------------

    /// Archives every whole, closed batch that lies entirely before `position`; returns the number
    /// of messages archived. Open batches and batches reaching past `position` stay.
    pub async fn archive_before(&self, position: SnowflakeId) -> Result<u64> {
        self.write(crate::ops::batches::ArchiveBefore {
            agent: self.agent,
            position,
        })
        .await
    }

    /// Archives exactly these whole batches (for importance-based compression); returns the
    /// number of messages archived. Refused, with nothing changed, if any batch is unknown or open.
    pub async fn archive_batches(&self, batches: Vec<BatchId>) -> Result<u64> {
        self.write(crate::ops::batches::ArchiveBatches {
            agent: self.agent,
            batches,
        })
        .await
    }

    /// Stores `summary` and archives the batches it covers (`from_batch..=through_batch`) in one
    /// transaction, so the summary is never lost and its batches never counted twice. Open batches
    /// in the range are left live (a run may still write them). Returns the archived batch ids.
    pub async fn summarize_and_archive(&self, summary: Summary) -> Result<Vec<BatchId>> {
        self.check_owner(&summary)?;
        self.write(crate::ops::batches::SummarizeAndArchive(summary))
            .await
    }

    /// Inserts or replaces a summary (by id).
    pub async fn upsert_summary(&self, summary: Summary) -> Result<()> {
        self.check_owner(&summary)?;
        self.write(crate::ops::batches::UpsertSummary(summary))
            .await
    }

    fn check_owner(&self, summary: &Summary) -> Result<()> {
        if summary.agent_id == self.agent {
            Ok(())
        } else {
            Err(BatchError::InvalidContent(format!(
                "summary belongs to agent {}, not to this store's agent {}",
                summary.agent_id, self.agent
            ))
            .into())
        }
    }

    /// The newest summary (covering the latest batches), if any.
    pub async fn get_summary(&self) -> Result<Option<Summary>> {
        Ok(self.get_summaries().await?.pop())
    }

    /// Every summary, oldest coverage first.
    pub async fn get_summaries(&self) -> Result<Vec<Summary>> {
        let mut pooled = self.db.reader().acquire().await?;
        match pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::summaries::of_agent(c, &self.agent.to_string())
                .await?
                .into_iter()
                .map(ops::summary_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::summaries::of_agent(c, self.agent.0)
                .await?
                .into_iter()
                .map(ops::summary_from_plain)
                .collect(),
        }
    }

    /// A new summary id (a snowflake from this process's generator).
    pub fn new_summary_id(&self) -> Result<SnowflakeId> {
        self.db.next_id()
    }

    // -- activity ------------------------------------------------------------------------------

    /// Records an event in the agent's activity log; returns its id.
    pub async fn log_activity(
        &self,
        kind: &str,
        payload: serde_json::Value,
    ) -> Result<SnowflakeId> {
        self.write(crate::ops::agents::LogActivity {
            agent: self.agent,
            kind: kind.to_owned(),
            payload,
        })
        .await
    }

    /// The latest `limit` events, newest first.
    pub async fn recent_activity(&self, limit: usize) -> Result<Vec<ActivityEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::activity::recent(c, &self.agent.to_string(), limit)
                    .await?
                    .into_iter()
                    .map(ops::activity_from_plain)
                    .collect()
            }
            Conn::Postgres(c) => pattern_db_postgres::activity::recent(c, self.agent.0, limit)
                .await?
                .into_iter()
                .map(ops::activity_from_plain)
                .collect(),
        }
    }

    // -- legacy import -------------------------------------------------------------------------

    /// Splits a legacy history into batches (see [`legacy::plan`]) and stores it after the
    /// agent's current history, in one transaction. Returns the plan that was applied.
    pub async fn import_legacy(&self, messages: Vec<LegacyMessage>) -> Result<ImportPlan> {
        let plan = legacy::plan(&messages)?;
        if messages.is_empty() {
            return Ok(plan);
        }
        let now = ops::now_ms();
        let ids: Vec<crate::MessageId> = messages.iter().map(|_| crate::MessageId::new()).collect();
        let messages = std::sync::Arc::new(messages);
        // Encoding and compressing run before the write is queued, so the writer (which every
        // other write waits for) holds the import's transaction for its statements alone.
        let write = async {
            let prepared = ops::prepare_legacy(self.db.ctx(), messages.clone(), &plan).await?;
            self.write(crate::ops::batches::ImportLegacy {
                agent: self.agent,
                messages: messages.clone(),
                plan: plan.clone(),
                ids: ids.clone(),
                prepared,
                now,
            })
            .await
        };
        if self.db.backend() == crate::Backend::Postgres {
            write.await?;
            return Ok(plan);
        }
        // SQLite: the full-text index takes the messages while they are prepared and written
        // (on a thread of its own, which also makes their documents), so it is current when the
        // import returns (decision 0025, "Stop 28").
        let (agent, docs_of, docs_ids) = (self.agent, messages.clone(), ids.clone());
        let docs = move || {
            docs_of
                .iter()
                .zip(&docs_ids)
                .filter_map(|(m, id)| {
                    let at = m.created_at.map_or(now, |t| t.timestamp_millis());
                    crate::fts::Doc::message(*id, agent, at, &m.content)
                })
                .collect()
        };
        let fts = self.db.fts().await?;
        fts.index_alongside(&self.db, messages.len(), docs, write)
            .await?;
        Ok(plan)
    }
}

/// Refusals of the batches' domain ([`crate::MessageStore`]): batch states, tool call pairing, step
/// and content shapes, legacy imports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// No batch with this id for this agent.
    #[error("unknown batch {batch} for agent {agent}")]
    NotFound {
        /// The agent.
        agent: crate::AgentId,
        /// The batch asked for.
        batch: crate::SnowflakeId,
    },
    /// The batch is not open, so nothing can be appended to it.
    #[error("batch {batch} is {state}, not open: nothing can be appended to it")]
    NotOpen {
        /// The batch.
        batch: crate::SnowflakeId,
        /// Its state.
        state: crate::BatchState,
    },
    /// The operation needs a batch in another state.
    #[error("batch {batch} is {state}: {action} is not possible")]
    InvalidState {
        /// The batch.
        batch: crate::SnowflakeId,
        /// Its state.
        state: crate::BatchState,
        /// What was attempted.
        action: &'static str,
    },
    /// The abandoned batch was retried already: its trigger is stored again elsewhere.
    #[error("batch {batch} was retried already at {retried_at}: its message is not stored twice")]
    AlreadyRetried {
        /// The batch.
        batch: crate::SnowflakeId,
        /// When the earlier retry was stored.
        retried_at: chrono::DateTime<chrono::Utc>,
    },
    /// A tool result names a tool call that is not in its batch.
    #[error("tool_result for `{tool_use_id}` has no matching tool_use in batch {batch}")]
    UnpairedToolResult {
        /// The batch.
        batch: crate::SnowflakeId,
        /// The unknown call id.
        tool_use_id: String,
    },
    /// A tool call id is used twice in one batch.
    #[error("tool_use id `{tool_use_id}` appears twice in batch {batch}")]
    DuplicateToolUse {
        /// The batch.
        batch: crate::SnowflakeId,
        /// The repeated id.
        tool_use_id: String,
    },
    /// A tool call already has its result.
    #[error("tool_use `{tool_use_id}` in batch {batch} already has a result")]
    DuplicateToolResult {
        /// The batch.
        batch: crate::SnowflakeId,
        /// The call id.
        tool_use_id: String,
    },
    /// The batch cannot complete while tool calls wait for results.
    #[error("batch {batch} still waits for tool results: {pending:?}")]
    PendingToolCalls {
        /// The batch.
        batch: crate::SnowflakeId,
        /// Calls without results, in call order.
        pending: Vec<String>,
    },
    /// A step must hold at least one message.
    #[error("a step needs at least one message")]
    EmptyStep,
    /// A message's content is larger than the configured limit.
    #[error("message content is {size} bytes, over the limit of {limit} bytes")]
    ContentTooLarge {
        /// Size of the serialized content.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Content does not have a valid shape.
    #[error("invalid message content: {0}")]
    InvalidContent(String),
    /// A legacy history could not be imported.
    #[error("legacy import: message {index}: {reason}")]
    LegacyImport {
        /// Index of the offending message in the input.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl BatchError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            BatchError::NotFound { .. } => C::NotFound,
            BatchError::NotOpen { .. }
            | BatchError::InvalidState { .. }
            | BatchError::AlreadyRetried { .. } => C::Conflict,
            BatchError::UnpairedToolResult { .. }
            | BatchError::DuplicateToolUse { .. }
            | BatchError::DuplicateToolResult { .. }
            | BatchError::PendingToolCalls { .. }
            | BatchError::EmptyStep
            | BatchError::InvalidContent(_) => C::Invalid,
            BatchError::ContentTooLarge { .. } => C::Refused,
            BatchError::LegacyImport { .. } => C::Internal,
        }
    }
}
