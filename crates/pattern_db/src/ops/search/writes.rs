//! The search storage domain's writes: archival passages, the embedding model, embedding jobs
//! and vectors, and the change log's bookkeeping. Each says what it locks; the SQL is in
//! `ops::search`.
//!
//! They run inside the writer's transaction and must never commit. Writes that may append
//! `vector` or `delete` changes say so ([`Locks::logs_changes`]), so their group takes the
//! change-log lock before any agent lock.

use std::time::Duration;

use crate::sql::Conn;
use chrono::{DateTime, Utc};

use crate::archival::{ArchivalEntry, ArchivalId, NewArchival};
use crate::error::Result;
use crate::model::AgentId;
use crate::ops::Ctx;
use crate::runs::RunClaim;
use crate::search::{ContentRef, EmbeddingJob, EmbeddingModelInfo, NewVector, StoreReport};
use crate::writer::{Locks, Write};

/// Stores archival passages of an agent (with their embedding jobs and text changes).
#[derive(Debug)]
pub(crate) struct InsertArchival {
    pub(crate) agent: AgentId,
    pub(crate) entries: Vec<NewArchival>,
}

impl Write for InsertArchival {
    type Output = Vec<ArchivalEntry>;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<ArchivalEntry>> {
        super::insert_archival(conn, ctx, self.agent, &self.entries).await
    }
}

/// Deletes a passage (its vector and job too); outputs how many were deleted.
#[derive(Debug)]
pub(crate) struct DeleteArchival {
    pub(crate) agent: AgentId,
    pub(crate) id: ArchivalId,
}

impl Write for DeleteArchival {
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
        super::delete_archival(conn, ctx, self.agent, self.id).await
    }
}

/// Registers the embedding model (the same again is fine, another is refused).
#[derive(Debug)]
pub(crate) struct RegisterModel(pub(crate) EmbeddingModelInfo);

impl Write for RegisterModel {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<()> {
        super::register_model(conn, &self.0).await
    }
}

/// Re-embeds everything under a new model; outputs the jobs queued.
#[derive(Debug)]
pub(crate) struct ResetEmbeddings(pub(crate) EmbeddingModelInfo);

impl Write for ResetEmbeddings {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none().logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::reset_embeddings(conn, ctx, &self.0).await
    }
}

/// Records (or refreshes) the embedding job of existing, live content.
#[derive(Debug)]
pub(crate) struct EnqueueEmbedding(pub(crate) ContentRef);

impl Write for EnqueueEmbedding {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<()> {
        super::enqueue(conn, &self.0).await
    }
}

/// Queues a job for all live content without a current vector; outputs how many.
#[derive(Debug)]
pub(crate) struct Backfill;

impl Write for Backfill {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::backfill(conn).await
    }
}

/// Frees the claims of holders that are not alive; outputs how many jobs.
#[derive(Debug)]
pub(crate) struct ReclaimFromDead;

impl Write for ReclaimFromDead {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::reclaim_from_dead(conn, ctx, super::now_ms()).await
    }
}

/// Frees this process's own claims (it is closing); outputs how many jobs.
#[derive(Debug)]
pub(crate) struct ReleaseOwnClaims;

impl Write for ReleaseOwnClaims {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::release_claims_of(conn, &ctx.judge.me).await
    }
}

/// Claims up to `limit` due jobs for `lease`.
#[derive(Debug)]
pub(crate) struct ClaimJobs {
    pub(crate) limit: usize,
    pub(crate) lease: Duration,
}

impl Write for ClaimJobs {
    type Output = Vec<EmbeddingJob>;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<EmbeddingJob>> {
        super::claim(conn, ctx, self.limit, self.lease).await
    }
}

/// Stores vectors whose text is still current.
#[derive(Debug)]
pub(crate) struct StoreVectors(pub(crate) Vec<NewVector>);

impl Write for StoreVectors {
    type Output = StoreReport;

    fn locks(&self) -> Locks {
        Locks::none().logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<StoreReport> {
        super::store(conn, ctx, &self.0).await
    }
}

/// Marks claimed jobs failed, due again at `retry_at`; outputs how many.
#[derive(Debug)]
pub(crate) struct FailJobs {
    pub(crate) failures: Vec<(ContentRef, String)>,
    pub(crate) retry_at: DateTime<Utc>,
}

impl Write for FailJobs {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::fail(conn, &self.failures, self.retry_at).await
    }
}

/// Deletes change-log entries up to `upto` that every follower has applied; outputs how many.
#[derive(Debug)]
pub(crate) struct PruneChanges {
    pub(crate) upto: i64,
}

impl Write for PruneChanges {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::prune_changes(conn, self.upto).await
    }
}

/// Records a durable follower's cursor.
#[derive(Debug)]
pub(crate) struct SetCursor {
    pub(crate) name: String,
    pub(crate) seq: i64,
}

impl Write for SetCursor {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<()> {
        super::set_cursor(conn, &self.name, self.seq).await
    }
}
