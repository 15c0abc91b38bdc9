//! The message and batch store's writes: begin a batch (the acknowledgement), append a step,
//! complete, continue, renew or abandon a batch, recover dead runs' batches, archive and
//! summarise, import a legacy history. The SQL is in `ops` (shared with runs and imports);
//! these types say what each write locks and pass the run's fence on.
//!
//! They run inside the writer's transaction and must never commit. Every batch write locks
//! its agent; writes that archive log search changes.

use crate::sql::Conn;

use super::Ctx;
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::legacy::{ImportPlan, LegacyMessage};
use crate::model::{
    Abandoned, AgentId, BatchId, BatchInfo, BeginBatch as BeginOptions, NewMessage, Received,
    RecoveryScope, StepReceipt, Summary,
};
use crate::runs::{NewTurnEvent, RunClaim, TurnId};
use crate::writer::{Locks, Write};

/// Commits a trigger as the first message of a new open batch.
#[derive(Debug)]
pub(crate) struct BeginBatch {
    pub(crate) agent: AgentId,
    pub(crate) trigger: NewMessage,
    pub(crate) opts: BeginOptions,
}

impl Write for BeginBatch {
    type Output = Received;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        fence: Option<&RunClaim>,
    ) -> Result<Received> {
        let token = fence.filter(|f| f.agent == self.agent).map(|f| f.token);
        super::begin_batch(conn, ctx, self.agent, &self.trigger, &self.opts, token).await
    }

    fn bulk_begin(&self) -> Option<(AgentId, &NewMessage, &BeginOptions)> {
        Some((self.agent, &self.trigger, &self.opts))
    }

    /// Without a parent or retry: [`super::begin_batch_alone`] (both engines).
    fn has_alone_form(&self, _ctx: &Ctx) -> bool {
        self.opts.parent_batch.is_none() && self.opts.retry_of.is_none()
    }

    async fn apply_alone(
        &self,
        pooled: &mut crate::sql::Pooled,
        ctx: &Ctx,
    ) -> Result<Option<Received>> {
        super::begin_batch_alone(pooled, ctx, self.agent, &self.trigger, &self.opts).await
    }

    fn from_received(received: Received) -> Option<Received> {
        Some(received)
    }
}

/// Appends one step to an open batch; a run's step also appends events to its turn.
#[derive(Debug)]
pub(crate) struct AppendStep {
    pub(crate) agent: AgentId,
    pub(crate) batch: BatchId,
    pub(crate) messages: Vec<NewMessage>,
    pub(crate) turn: Option<(TurnId, Vec<NewTurnEvent>)>,
}

impl Write for AppendStep {
    type Output = StepReceipt;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        fence: Option<&RunClaim>,
    ) -> Result<StepReceipt> {
        let receipt =
            super::append_step(conn, ctx, self.agent, self.batch, &self.messages, fence).await?;
        if let Some((turn, events)) = &self.turn {
            super::runs::append_events(conn, ctx, self.agent, *turn, events).await?;
        }
        Ok(receipt)
    }
}

/// What [`BatchChange`] does to the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Marks it complete (refused while a call waits).
    Complete,
    /// Heartbeat continuation: reopens (or keeps open) under this process's lease.
    Continue,
    /// Extends the lease of an open batch.
    RenewLease,
}

/// One change of one batch's state.
#[derive(Debug)]
pub(crate) struct BatchChange {
    pub(crate) agent: AgentId,
    pub(crate) batch: BatchId,
    pub(crate) change: Change,
}

impl Write for BatchChange {
    type Output = BatchInfo;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    /// Completing, on SQLite: [`super::complete_batch_alone`].
    fn has_alone_form(&self, ctx: &Ctx) -> bool {
        self.change == Change::Complete && ctx.backend == crate::config::Backend::Sqlite
    }

    async fn apply_alone(
        &self,
        pooled: &mut crate::sql::Pooled,
        _ctx: &Ctx,
    ) -> Result<Option<BatchInfo>> {
        if self.change != Change::Complete {
            return Ok(None);
        }
        super::complete_batch_alone(pooled, self.agent, self.batch).await
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        fence: Option<&RunClaim>,
    ) -> Result<BatchInfo> {
        let (agent, batch) = (self.agent, self.batch);
        match self.change {
            Change::Complete => super::complete_batch(conn, ctx, agent, batch, fence).await,
            Change::Continue => super::continue_batch(conn, ctx, agent, batch, fence).await,
            Change::RenewLease => super::renew_lease(conn, ctx, agent, batch, fence).await,
        }
    }
}

/// Abandons one open batch now.
#[derive(Debug)]
pub(crate) struct AbandonBatch {
    pub(crate) agent: AgentId,
    pub(crate) batch: BatchId,
    pub(crate) reason: String,
}

impl Write for AbandonBatch {
    type Output = Abandoned;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        fence: Option<&RunClaim>,
    ) -> Result<Abandoned> {
        super::abandon_batch(conn, ctx, self.agent, self.batch, &self.reason, fence).await
    }
}

/// Abandons the open batches of dead runs (of one agent, or of every agent).
#[derive(Debug)]
pub(crate) struct Recover {
    pub(crate) agent: Option<AgentId>,
    pub(crate) scope: RecoveryScope,
}

impl Write for Recover {
    type Output = Vec<Abandoned>;

    fn locks(&self) -> Locks {
        Locks {
            agent: self.agent,
            // Across agents it discovers the agents it locks: it runs alone, locking them in
            // agent order.
            exclusive: self.agent.is_none(),
            ..Locks::none()
        }
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<Abandoned>> {
        super::runs::recover(conn, ctx, self.agent, self.scope).await
    }
}

/// Archives every whole, closed batch before `position`; outputs the messages archived.
#[derive(Debug)]
pub(crate) struct ArchiveBefore {
    pub(crate) agent: AgentId,
    pub(crate) position: SnowflakeId,
}

impl Write for ArchiveBefore {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent).logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::archive_before(conn, ctx, self.agent, self.position).await
    }
}

/// Archives exactly these whole batches; outputs the messages archived.
#[derive(Debug)]
pub(crate) struct ArchiveBatches {
    pub(crate) agent: AgentId,
    pub(crate) batches: Vec<BatchId>,
}

impl Write for ArchiveBatches {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent).logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::archive_chosen(conn, ctx, self.agent, &self.batches).await
    }
}

/// Stores a summary and archives the batches it covers.
#[derive(Debug)]
pub(crate) struct SummarizeAndArchive(pub(crate) Summary);

impl Write for SummarizeAndArchive {
    type Output = Vec<BatchId>;

    fn locks(&self) -> Locks {
        Locks::agent(self.0.agent_id).logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<BatchId>> {
        super::summarize_and_archive(conn, ctx, &self.0).await
    }
}

/// Inserts or replaces a summary (by id).
#[derive(Debug)]
pub(crate) struct UpsertSummary(pub(crate) Summary);

impl Write for UpsertSummary {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::agent(self.0.agent_id)
    }

    async fn apply(&self, conn: &mut Conn<'_>, ctx: &Ctx, _fence: Option<&RunClaim>) -> Result<()> {
        super::upsert_summary(conn, ctx, &self.0).await
    }
}

/// Stores a planned legacy history after the agent's current one.
#[derive(Debug)]
pub(crate) struct ImportLegacy {
    pub(crate) agent: AgentId,
    pub(crate) messages: std::sync::Arc<Vec<LegacyMessage>>,
    pub(crate) plan: ImportPlan,
    /// The messages encoded and compressed before the write ([`super::prepare_legacy`]).
    pub(crate) prepared: super::PreparedLegacy,
    /// The messages' ids, one per message (chosen before the write, so the full-text index can
    /// take the messages while they are written).
    pub(crate) ids: Vec<crate::MessageId>,
    /// The time of messages that carry none (ms).
    pub(crate) now: i64,
}

impl Write for ImportLegacy {
    /// The batches, and on SQLite the first and last search change the import logged.
    type Output = (Vec<BatchId>, Option<(i64, i64)>);

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        let legacy = super::Legacy {
            agent: self.agent,
            messages: &self.messages,
            plan: &self.plan,
            ids: &self.ids,
            prepared: &self.prepared,
            now: self.now,
        };
        super::import_legacy(conn, ctx, &legacy).await
    }
}
