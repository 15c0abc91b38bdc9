//! The runs domain's writes (claims, turns, the process heartbeat): submit a turn, claim the
//! next queued one, finish a run, append turn events, release a claim, cancel or prune turns.
//! The SQL is in `ops::runs`; these types say what each write locks and whether it carries its
//! own claim (so the task's fence is not added to it).
//!
//! They run inside the writer's transaction and must never commit.

use crate::sql::Conn;

use crate::error::Result;
use crate::model::AgentId;
use crate::ops::Ctx;
use crate::process::HeartbeatReport;
use crate::runs::{Finished, NewTurnEvent, RunClaim, Started, Submit, Submitted, TurnId, TurnInfo};
use crate::writer::{Locks, Write};

impl Write for Submit {
    type Output = Submitted;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Submitted> {
        super::submit(conn, ctx, self).await
    }
}

/// Claims `agent` if free and delivers its oldest due queue entry.
#[derive(Debug)]
pub(crate) struct ClaimNext {
    pub(crate) agent: AgentId,
}

impl Write for ClaimNext {
    type Output = Option<Box<Started>>;

    fn locks(&self) -> Locks {
        // Takes its agent's lock itself, without waiting (SKIP LOCKED on PostgreSQL).
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        super::claim_next(conn, ctx, self.agent).await
    }
}

impl Write for super::FinishRun {
    type Output = Box<Finished>;

    fn locks(&self) -> Locks {
        Locks::agent(self.claim.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Box<Finished>> {
        super::finish_run(conn, ctx, self).await
    }
}

/// Appends events to a running turn; outputs the last sequence number.
#[derive(Debug)]
pub(crate) struct AppendTurnEvents {
    pub(crate) agent: AgentId,
    pub(crate) turn: TurnId,
    pub(crate) events: Vec<NewTurnEvent>,
}

impl Write for AppendTurnEvents {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::append_events(conn, ctx, self.agent, self.turn, &self.events).await
    }
}

/// Gives up a claim whose run is gone; `false` when it was not this process's any more.
#[derive(Debug)]
pub(crate) struct ReleaseClaim {
    pub(crate) claim: RunClaim,
    pub(crate) reason: String,
}

impl Write for ReleaseClaim {
    type Output = bool;

    fn locks(&self) -> Locks {
        // It checks the claim itself (a claim already gone is `false`, not an error).
        Locks::agent(self.claim.agent).carrying_claim()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<bool> {
        super::release_claim(conn, ctx, &self.claim, &self.reason).await
    }
}

/// Asks the run answering a turn to stop.
#[derive(Debug)]
pub(crate) struct CancelTurn {
    pub(crate) agent: AgentId,
    pub(crate) turn: TurnId,
}

impl Write for CancelTurn {
    type Output = Box<TurnInfo>;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Box<TurnInfo>> {
        super::cancel_turn(conn, ctx, self.agent, self.turn).await
    }
}

/// Deletes finished turns that finished before `before` (Unix ms); outputs how many.
#[derive(Debug)]
pub(crate) struct PruneTurns {
    pub(crate) before: i64,
}

impl Write for PruneTurns {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::none().carrying_claim()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        super::prune_turns(conn, self.before).await
    }
}

/// This process's heartbeat: its `processes` row and machine-id lease.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    pub(crate) machine_id: Option<u16>,
}

impl Write for Heartbeat {
    type Output = HeartbeatReport;

    fn locks(&self) -> Locks {
        Locks::none().carrying_claim()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<HeartbeatReport> {
        crate::process::renew(
            conn,
            &ctx.run_owner,
            ctx.lock_key,
            self.machine_id.map(|id| (id, ctx.machine_lease)),
            ctx.run_lease,
        )
        .await
    }
}
