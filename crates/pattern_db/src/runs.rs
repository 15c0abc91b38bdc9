//! Runs fenced in the database: the claim a run holds on its agent, the turns runs answer and
//! the events they stream (decision 0010).
//!
//! **Claims.** A run claims its agent before it begins (or, chained, continues with) a batch:
//! [`Database::submit`] commits a trigger and, when the agent is free, claims it and begins the
//! batch in the same transaction; otherwise the trigger goes to the agent's durable queue.
//! [`Database::claim_next`] claims a free agent and delivers its oldest due queue entry;
//! [`Database::finish_run`] completes or abandons the batch, finishes its turn and either hands
//! the claim on to the next due entry or releases it, in one transaction. A claim lives as long
//! as its holder process lives (see `process`): a claim whose holder died is taken over by the
//! next claimant or by [`Database::recover_runs`], which abandons the dead run's batch and bumps
//! the claim's `token`. Every write of a run carries the token (explicitly, or through
//! [`fenced`] for everything the run's task writes, tools included), and the writer refuses a
//! write whose token is no longer current with [`RunError::ClaimLost`]:
//! a run that lost its claim can write nothing.
//!
//! **Turns.** Every submitted trigger has a turn: its id, an optional idempotency key (unique per
//! agent, so a repeated request finds the first turn instead of storing the message again), and
//! an append-only event log with dense sequence numbers (1, 2, ...). The lifecycle events this
//! crate writes itself are `queued`, `received` and, when recovery abandons a dead run's batch,
//! an `error` of kind `interrupted`; their JSON is documented on [`lifecycle`]. Everything else in
//! the log is written by the run and opaque here. A finished turn never grows again.
//!
//! This module must never let a write of a run commit after its claim was taken over, never
//! begin a run's batch while another run's batch of the agent is open, and never append to a
//! finished turn.

use crate::StorageError;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{
    Abandoned, AgentId, BatchId, BatchInfo, BatchType, NewMessage, Received, RecoveryScope,
    StepReceipt,
};
use crate::queue::QueuedMessage;
use crate::wake::WakeKey;

/// Identity of a turn (UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnId(pub Uuid);

impl TurnId {
    /// A fresh, time-ordered id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for TurnId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for TurnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for TurnId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|e| {
            Error::Storage(StorageError::InvalidId {
                what: "turn id",
                value: s.to_owned(),
                reason: e.to_string(),
            })
        })
    }
}

/// A run's claim on its agent: the fencing token every write of the run carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunClaim {
    /// The agent.
    pub agent: AgentId,
    /// Grows by one at every claim and every takeover.
    pub token: i64,
}

/// A request's idempotency key and a fingerprint of what it asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotency {
    /// The key (1 to 200 bytes).
    pub key: String,
    /// A fingerprint of the request body: the same key with another fingerprint is refused.
    pub fingerprint: String,
}

/// The turn a submitted trigger starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTurn {
    /// Its id (the caller's, so it can be named before the write returns).
    pub id: TurnId,
    /// Who asked, for inspection (`http`, `cli`, an agent's name, `scheduler`); at most 200
    /// bytes.
    pub source: String,
    /// The request's idempotency key, if it has one.
    pub idempotency: Option<Idempotency>,
}

impl NewTurn {
    /// A new turn from `source`, without an idempotency key.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            id: TurnId::new(),
            source: source.into(),
            idempotency: None,
        }
    }
}

/// A trigger to commit for an agent, and its turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Submit {
    /// The agent.
    pub agent: AgentId,
    /// The trigger (a user or system message).
    pub trigger: NewMessage,
    /// The batch type (default from the role: user request or system trigger).
    pub batch_type: Option<BatchType>,
    /// The abandoned batch this retries (marked retried in the same transaction).
    pub retry_of: Option<BatchId>,
    /// The turn.
    pub turn: NewTurn,
    /// Start the run now when the agent is free (`false`: always queue, e.g. for a suspended
    /// agent).
    pub start: bool,
}

/// A run that begins: its claim, its batch and its turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// The claim the run holds.
    pub claim: RunClaim,
    /// The batch it begun, and its trigger.
    pub received: Received,
    /// The batch's type.
    pub batch_type: BatchType,
    /// The turn it answers (now `running`).
    pub turn: TurnInfo,
    /// The queue entry it delivers, when it came from the queue.
    pub entry: Option<QueuedMessage>,
}

/// What [`Database::submit`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// The trigger began a batch under a new claim: the caller runs it.
    Started(Box<Started>),
    /// The agent was busy (or not to be started): the trigger waits in its queue, and whoever
    /// delivers it writes the turn's events.
    Queued {
        /// The queue entry.
        entry: QueuedMessage,
        /// The turn (`queued`).
        turn: TurnInfo,
    },
    /// The idempotency key was used before with the same request: nothing was stored; this is
    /// the first turn.
    Replayed(TurnInfo),
}

impl Submitted {
    /// The turn, whichever way it went.
    pub fn turn(&self) -> &TurnInfo {
        match self {
            Submitted::Started(s) => &s.turn,
            Submitted::Queued { turn, .. } | Submitted::Replayed(turn) => turn,
        }
    }
}

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnState {
    /// Its trigger waits in the agent's queue.
    Queued,
    /// A run works on it.
    Running,
    /// It is over; its log does not grow again.
    Finished,
}

impl TurnState {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Queued => "queued",
            TurnState::Running => "running",
            TurnState::Finished => "finished",
        }
    }
}

impl FromStr for TurnState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "queued" => Ok(TurnState::Queued),
            "running" => Ok(TurnState::Running),
            "finished" => Ok(TurnState::Finished),
            other => Err(StorageError::Corrupt(format!("unknown turn state `{other}`")).into()),
        }
    }
}

/// How a finished turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The batch completed.
    Done,
    /// The run failed or was cancelled; its batch was abandoned.
    Failed,
    /// The process running it died; recovery abandoned its batch.
    Interrupted,
}

impl TurnOutcome {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Done => "done",
            TurnOutcome::Failed => "failed",
            TurnOutcome::Interrupted => "interrupted",
        }
    }
}

impl FromStr for TurnOutcome {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "done" => Ok(TurnOutcome::Done),
            "failed" => Ok(TurnOutcome::Failed),
            "interrupted" => Ok(TurnOutcome::Interrupted),
            other => Err(StorageError::Corrupt(format!("unknown turn outcome `{other}`")).into()),
        }
    }
}

/// A stored turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInfo {
    /// Its id.
    pub id: TurnId,
    /// The agent.
    pub agent_id: AgentId,
    /// Who asked.
    pub source: String,
    /// The idempotency key it was started with.
    pub idempotency_key: Option<String>,
    /// The fingerprint of the request that key was first used with.
    pub fingerprint: Option<String>,
    /// The queue entry that carries (or carried) its trigger.
    pub queue_id: Option<SnowflakeId>,
    /// The batch its trigger began.
    pub batch_id: Option<BatchId>,
    /// Where it is.
    pub state: TurnState,
    /// How it ended, once finished.
    pub outcome: Option<TurnOutcome>,
    /// The sequence number of its newest event (0: none yet).
    pub last_seq: u64,
    /// Someone asked to cancel it.
    pub cancel_requested: bool,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

/// One event of a turn's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnEvent {
    /// 1, 2, 3, ... within the turn.
    pub seq: u64,
    /// The event's type (`received`, `text_delta`, `done`, ...).
    pub kind: String,
    /// The event as JSON text.
    pub data: String,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

/// An event to append to a turn's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTurnEvent {
    /// The event's type (1 to 64 bytes).
    pub kind: String,
    /// The event as a JSON object (text).
    pub data: String,
}

/// How a run ends its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnding {
    /// Complete the batch (refused while a tool call waits for its result).
    Complete,
    /// Abandon it: it is never sent to a model again; its trigger stays for a retry.
    Abandon {
        /// Why, for the activity log.
        reason: String,
    },
}

/// What [`Database::finish_run`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The batch, completed or abandoned.
    pub batch: BatchInfo,
    /// The turn, finished.
    pub turn: TurnInfo,
    /// The next run, when the claim was handed on to the agent's next due queue entry.
    pub next: Option<Box<Started>>,
}

/// An agent's claim as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimInfo {
    /// The agent.
    pub agent: AgentId,
    /// The current token.
    pub token: i64,
    /// The process holding it (`None`: free).
    pub holder: Option<String>,
    /// When it was taken.
    pub claimed_at: Option<DateTime<Utc>>,
    /// The batch the run works on.
    pub batch_id: Option<BatchId>,
}

/// The JSON of the events this crate writes into turn logs itself. Each is an object with a
/// `type`; ids are JSON numbers. A layer that writes the other events of a log uses the same
/// convention.
pub mod lifecycle {
    use super::NewTurnEvent;
    use crate::id::SnowflakeId;
    use crate::model::{BatchId, Received};

    /// `{"type": "queued", "queue_id": N}`: the trigger waits in the agent's queue.
    pub fn queued(queue_id: SnowflakeId) -> NewTurnEvent {
        NewTurnEvent {
            kind: "queued".into(),
            data: serde_json::json!({"type": "queued", "queue_id": queue_id.get()}).to_string(),
        }
    }

    /// `{"type": "received", "batch_id": N, "message_id": "UUID"}`: the trigger began its batch.
    pub fn received(received: &Received) -> NewTurnEvent {
        NewTurnEvent {
            kind: "received".into(),
            data: serde_json::json!({
                "type": "received",
                "batch_id": received.batch_id.get(),
                "message_id": received.message_id.to_string(),
            })
            .to_string(),
        }
    }

    /// What recovery tells a turn whose process died.
    pub const INTERRUPTED_MESSAGE: &str = "the process running this turn stopped; its batch was \
        abandoned and its message stays stored: retry the batch";

    /// `{"type": "error", "kind": "interrupted", "message": TEXT, "batch_id": N}`: the process
    /// running the turn died and recovery abandoned its batch.
    pub fn interrupted(batch: Option<BatchId>) -> NewTurnEvent {
        NewTurnEvent {
            kind: "error".into(),
            data: serde_json::json!({
                "type": "error",
                "kind": "interrupted",
                "message": INTERRUPTED_MESSAGE,
                "batch_id": batch.map(SnowflakeId::get),
            })
            .to_string(),
        }
    }
}

tokio::task_local! {
    static FENCE: RunClaim;
}

/// Runs `future` with every database write it makes (on this task) fenced by `claim`: the
/// writer refuses each one, with [`RunError::ClaimLost`], once the claim was taken over. A task
/// spawned inside must be wrapped again ([`with_fence`]).
pub async fn fenced<F: Future>(claim: RunClaim, future: F) -> F::Output {
    FENCE.scope(claim, future).await
}

/// The claim fencing the current task's writes, if any.
pub fn current_fence() -> Option<RunClaim> {
    FENCE.try_with(|c| *c).ok()
}

/// `future` fenced by `fence` when there is one (for a task spawned by a fenced one).
pub async fn with_fence<F: Future>(fence: Option<RunClaim>, future: F) -> F::Output {
    match fence {
        Some(claim) => FENCE.scope(claim, future).await,
        None => future.await,
    }
}

impl Database {
    /// Commits `submit`'s trigger and its turn in one transaction: when the agent is free (no
    /// live claim, no open batch, nothing due in its queue) it is claimed and the trigger begins
    /// its batch ([`Submitted::Started`]: the caller runs it); otherwise the trigger goes to the
    /// end of the agent's queue ([`Submitted::Queued`]). A claim held by a dead process is taken
    /// over first. With an idempotency key used before: the same request is
    /// [`Submitted::Replayed`] (nothing stored), another is [`RunError::IdempotencyKeyReused`].
    pub async fn submit(&self, submit: Submit) -> Result<Submitted> {
        let agent = submit.agent;
        let s = self.write(submit).await?;
        self.hub().wake(WakeKey::Turn(s.turn().id));
        if matches!(s, Submitted::Queued { .. }) {
            self.hub().wake(WakeKey::Agent(agent));
            self.hub().wake(WakeKey::Queue);
        }
        Ok(s)
    }

    /// Claims `agent` if it is free and delivers its oldest due queue entry (marking it
    /// delivered, or moving a recurring one on, in the transaction that begins its batch).
    /// `None`: the agent is busy (a live claim, an open batch, or another process claiming it
    /// right now) or has nothing due.
    pub async fn claim_next(&self, agent: AgentId) -> Result<Option<Started>> {
        let started = self
            .write(crate::ops::runs::writes::ClaimNext { agent })
            .await?;
        if let Some(s) = &started {
            self.hub().wake(WakeKey::Turn(s.turn.id));
        }
        Ok(started.map(|s| *s))
    }

    /// Stores one step of a run (as [`crate::MessageStore::append_step`]) and appends `events`
    /// to its turn, in one transaction, fenced by `claim`.
    pub async fn run_step(
        &self,
        claim: RunClaim,
        batch: BatchId,
        turn: TurnId,
        messages: Vec<NewMessage>,
        events: Vec<NewTurnEvent>,
    ) -> Result<StepReceipt> {
        let step = crate::ops::batches::AppendStep {
            agent: claim.agent,
            batch,
            messages,
            turn: Some((turn, events)),
        };
        let receipt = self.write_fenced(step, claim).await?;
        self.hub().wake(WakeKey::Turn(turn));
        Ok(receipt)
    }

    /// Appends `events` to a running turn of `claim`'s agent, fenced by `claim`. Returns the
    /// sequence number of the last one.
    pub async fn append_turn_events(
        &self,
        claim: RunClaim,
        turn: TurnId,
        events: Vec<NewTurnEvent>,
    ) -> Result<u64> {
        let append = crate::ops::runs::writes::AppendTurnEvents {
            agent: claim.agent,
            turn,
            events,
        };
        let seq = self.write_fenced(append, claim).await?;
        self.hub().wake(WakeKey::Turn(turn));
        Ok(seq)
    }

    /// Heartbeat continuation of a run's batch, fenced by `claim`.
    pub async fn continue_run(&self, claim: RunClaim, batch: BatchId) -> Result<BatchInfo> {
        let change = crate::ops::batches::BatchChange {
            agent: claim.agent,
            batch,
            change: crate::ops::batches::Change::Continue,
        };
        self.write_fenced(change, claim).await
    }

    /// Ends a run's batch (`ending`), appends `events` to its turn and finishes the turn, then
    /// (with `next`) hands the claim on to the agent's oldest due queue entry, or releases it:
    /// one transaction, fenced by `claim`. A batch with a call still waiting cannot complete:
    /// abandon it instead.
    pub async fn finish_run(
        &self,
        claim: RunClaim,
        batch: BatchId,
        turn: TurnId,
        ending: RunEnding,
        events: Vec<NewTurnEvent>,
        next: bool,
    ) -> Result<Finished> {
        let finish = crate::ops::runs::FinishRun {
            claim,
            batch,
            turn,
            ending,
            events,
            next,
        };
        let f = self.write_fenced(finish, claim).await?;
        self.hub().wake(WakeKey::Turn(turn));
        match &f.next {
            Some(next) => self.hub().wake(WakeKey::Turn(next.turn.id)),
            None => self.hub().wake(WakeKey::Agent(claim.agent)),
        }
        // Free agent or not, the completion may have queued another agent's trigger (a sync
        // session's reply, decision 0020).
        self.hub().wake(WakeKey::Queue);
        Ok(*f)
    }

    /// Gives up a claim whose run is gone (a task that ended without finishing): its open batch
    /// is abandoned with `reason` and its turn finished as interrupted, then the claim is free.
    /// `false` when the claim was not this process's any more.
    pub async fn release_claim(&self, claim: RunClaim, reason: &str) -> Result<bool> {
        let released = self
            .write(crate::ops::runs::writes::ReleaseClaim {
                claim,
                reason: reason.to_owned(),
            })
            .await?;
        self.hub().wake(WakeKey::Agent(claim.agent));
        self.hub().wake(WakeKey::Queue);
        Ok(released)
    }

    /// Asks the run answering `turn` to stop (any process: the holder sees it at once through
    /// its wake-ups on PostgreSQL, or at its next heartbeat). A queued turn is cancelled when
    /// it is delivered: its batch begins and is abandoned at once, so the message stays stored
    /// and can be retried. Asking again, or for a finished turn, changes nothing.
    pub async fn cancel_turn(&self, agent: AgentId, turn: TurnId) -> Result<TurnInfo> {
        let t = self
            .write(crate::ops::runs::writes::CancelTurn { agent, turn })
            .await?;
        self.hub().wake(WakeKey::Cancel(turn));
        Ok(*t)
    }

    /// Abandons the batches of runs whose holder is dead (and, with
    /// [`RecoveryScope::AllOpen`], every open batch), finishing their turns as interrupted and
    /// freeing their claims; open batches begun without a claim are abandoned once their lease
    /// expired. Locks agents in agent order. Returns the abandoned batches with their triggers.
    pub async fn recover_runs(&self, scope: RecoveryScope) -> Result<Vec<Abandoned>> {
        let list = self
            .write(crate::ops::batches::Recover { agent: None, scope })
            .await?;
        for a in &list {
            self.hub().wake(WakeKey::Agent(a.batch.agent_id));
        }
        if !list.is_empty() {
            self.hub().wake(WakeKey::Queue);
            self.hub().wake_turns();
        }
        Ok(list)
    }

    /// Deletes finished turns (and their events) that finished before `before`; returns how
    /// many. Running and queued turns are never touched.
    pub async fn prune_turns(&self, before: DateTime<Utc>) -> Result<u64> {
        self.write(crate::ops::runs::writes::PruneTurns {
            before: before.timestamp_millis(),
        })
        .await
    }

    /// How many finished turns [`Database::prune_turns`] would delete for `before`.
    pub async fn prunable_turns(&self, before: DateTime<Utc>) -> Result<u64> {
        crate::ops::runs::count_prunable(self.reader(), before.timestamp_millis()).await
    }

    /// The turn `turn` of `agent` ([`RunError::TurnNotFound`] for another agent's).
    pub async fn turn(&self, agent: AgentId, turn: TurnId) -> Result<TurnInfo> {
        crate::ops::runs::read_turn(self.reader(), agent, turn).await
    }

    /// The turn `agent` started with idempotency `key`, if any.
    pub async fn turn_by_key(&self, agent: AgentId, key: &str) -> Result<Option<TurnInfo>> {
        crate::ops::runs::read_turn_by_key(self.reader(), agent, key).await
    }

    /// `agent`'s latest turns, newest first, at most `limit`.
    pub async fn turns(&self, agent: AgentId, limit: usize) -> Result<Vec<TurnInfo>> {
        crate::ops::runs::read_turns(self.reader(), agent, limit).await
    }

    /// Events of `turn` with sequence numbers above `after`, in order, at most `limit`.
    pub async fn turn_events(
        &self,
        turn: TurnId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TurnEvent>> {
        crate::ops::runs::read_events(self.reader(), turn, after, limit).await
    }

    /// `agent`'s claim as stored (`None`: it never ran under a claim).
    pub async fn run_claim(&self, agent: AgentId) -> Result<Option<ClaimInfo>> {
        crate::ops::runs::read_claim_info(self.reader(), agent).await
    }

    /// The claims this process holds, as stored.
    pub async fn claims_held(&self) -> Result<Vec<ClaimInfo>> {
        crate::ops::runs::read_claims_of(self.reader(), self.run_owner()).await
    }

    /// Agents with a due queue entry whose claim is free or whose holder's process row is gone
    /// or expired, oldest due first, one row per agent, at most `limit`: one agent's backlog
    /// takes one row, however long it is.
    pub async fn deliverable_agents(&self, limit: usize) -> Result<Vec<AgentId>> {
        crate::ops::runs::read_deliverable(self.reader(), limit).await
    }
}

/// Refusals of runs and turns (module [`crate::runs`]): claims, turns, idempotency keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Another run (in this or another process) holds the agent now; the caller's trigger was
    /// not stored by this call.
    #[error("agent {agent} is busy: a run of process `{holder}` holds it")]
    AgentBusy {
        /// The agent.
        agent: crate::AgentId,
        /// The process whose run holds it.
        holder: String,
    },
    /// The run's claim on its agent was taken over (its process was judged dead, or recovery
    /// fenced it): the write carrying the old token was refused and nothing of it was stored.
    #[error(
        "the run of agent {agent} lost its claim (token {token}): the agent was taken over; \
         nothing was written"
    )]
    ClaimLost {
        /// The agent.
        agent: crate::AgentId,
        /// The token the write carried.
        token: i64,
    },
    /// No turn with this id for this agent.
    #[error("unknown turn {turn} for agent {agent}")]
    TurnNotFound {
        /// The agent.
        agent: crate::AgentId,
        /// The turn asked for.
        turn: crate::runs::TurnId,
    },
    /// The turn is over: nothing more is appended to it.
    #[error("turn {0} is finished")]
    TurnFinished(crate::runs::TurnId),
    /// An idempotency key was used again for a different request.
    #[error("idempotency key `{key}` was used for a different request (turn {turn})")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The turn its first use started.
        turn: crate::runs::TurnId,
    },
}

impl RunError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            RunError::AgentBusy { .. }
            | RunError::ClaimLost { .. }
            | RunError::TurnFinished(_)
            | RunError::IdempotencyKeyReused { .. } => C::Conflict,
            RunError::TurnNotFound { .. } => C::NotFound,
        }
    }
}
