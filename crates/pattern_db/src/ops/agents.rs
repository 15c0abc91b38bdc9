//! The agents domain's writes: create one, set its metadata, delete it with everything stored
//! for it, log an activity event, import a whole one ([`ImportAgent`], composed of the other
//! domains' writes inside its one transaction). The SQL is in `ops` (shared with the writes
//! that need an agent row); these types only say what each write locks.
//!
//! They run inside the writer's transaction and must never commit.

use crate::sql::Conn;

use super::Ctx;
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::model::{Agent, AgentId, NewAgent};
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// A new agent (a row nobody else can hold yet: no lock).
#[derive(Debug)]
pub(crate) struct CreateAgent(pub(crate) NewAgent);

impl Write for CreateAgent {
    type Output = Agent;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Agent> {
        super::create_agent(conn, &self.0).await
    }
}

/// Replaces an agent's metadata.
#[derive(Debug)]
pub(crate) struct SetMetadata {
    pub(crate) agent: AgentId,
    pub(crate) metadata: serde_json::Value,
}

impl Write for SetMetadata {
    type Output = Agent;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Agent> {
        super::set_agent_metadata(conn, self.agent, &self.metadata).await
    }
}

/// Deletes an agent and everything stored for it.
#[derive(Debug)]
pub(crate) struct DeleteAgent(pub(crate) AgentId);

impl Write for DeleteAgent {
    type Output = ();

    fn locks(&self) -> Locks {
        // Its content leaves the search indexes.
        Locks::agent(self.0).logging_changes()
    }

    async fn apply(&self, conn: &mut Conn<'_>, ctx: &Ctx, _fence: Option<&RunClaim>) -> Result<()> {
        super::delete_agent(conn, ctx, self.0).await
    }
}

/// An activity event of an agent.
#[derive(Debug)]
pub(crate) struct LogActivity {
    pub(crate) agent: AgentId,
    pub(crate) kind: String,
    pub(crate) payload: serde_json::Value,
}

impl Write for LogActivity {
    type Output = SnowflakeId;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<SnowflakeId> {
        super::log_activity(conn, ctx, self.agent, &self.kind, &self.payload).await
    }
}

/// A whole agent (row, blocks, batches, summaries, archival) in one transaction.
#[derive(Debug)]
pub(crate) struct ImportAgent(pub(crate) crate::import::PlannedImport);

impl Write for ImportAgent {
    type Output = crate::import::ImportedAgent;

    fn locks(&self) -> Locks {
        // A new agent: nobody else can hold its row yet.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        super::import_agent(conn, ctx, &self.0).await
    }
}
