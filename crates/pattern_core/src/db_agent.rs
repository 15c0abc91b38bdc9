//! [`DatabaseAgent`]: the [`Agent`] whose history lives in `pattern_db`, and its request flow.
//!
//! The flow of one turn (the incremental save of `message-flow-incremental-save.md`, fenced in
//! the database; decision 0010):
//!
//! 1. **Received.** [`DatabaseAgent::submit`] commits the trigger and its turn before anything
//!    else runs (`pattern_db::Database::submit`): when the agent is free in the database (no live
//!    claim in any process, no open batch, nothing due in its queue) the agent is claimed and
//!    the trigger begins its batch; otherwise it goes to the end of the agent's durable queue.
//!    Whoever later holds the claim delivers it, in this process or another, and writes its
//!    turn's events, so the caller always learns the real outcome by following the turn's log.
//! 2. **Loop**, fenced by the claim (every write of the run, tools' included, carries its token
//!    and is refused once the claim was taken over), at most `max_iterations` model calls and
//!    `max_duration`: build the context (the open batch included), stream the model's answer,
//!    run its tool calls (admitted in call order, run concurrently, results kept in call order),
//!    and commit the answer with its results as one step, together with the turn's events. An
//!    answer without tool calls is the last step; an exit tool ends the loop unless a result asks
//!    for a heartbeat, which continues the batch (`continuation`).
//! 3. **End.** In one transaction the batch is completed (or, after a failure or a
//!    cancellation, abandoned: never sent to a model again, its trigger kept for a retry), the
//!    turn finished with its last events, and the claim handed on to the agent's next due queue
//!    entry (when this process serves the agent's queue or a caller here waits for one) or
//!    released.
//!
//! A turn is cancelled by its caller going away (unless it was started detached), by
//! [`DatabaseAgent::cancel_turn`] (any process: the request is stored and the running process
//! wakes to it), or by [`DatabaseAgent::cancel_running`] (shutdown). The process's liveness
//! (its registration, renewed by `pattern_db`'s heartbeat whatever a step is doing) keeps the
//! claim; a process that dies leaves its claim to be taken over and its batch abandoned.
//!
//! This module must never commit part of a step, never leave a stored tool call without its
//! result, never run a batch of an agent without holding its claim, and never report a turn's
//! outcome before it is committed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use pattern_db::runs::fenced;
use pattern_db::{
    AgentId, BatchId, ContentBlock, Idempotency, NewMessage, NewTurn, NewTurnEvent, Role, RunClaim,
    RunEnding, Started, Submit, Submitted, TurnId, TurnInfo, TurnState, WakeKey,
};
use tokio::sync::{RwLock, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use crate::agent::{
    Agent, AgentState, DoneReason, ErrorKind, IncomingMessage, ResponseEvent, ResponseStream,
};
use crate::error::{Error, Result};
use crate::provider::{GenerateOptions, ProviderEvent};
use crate::runtime::{AgentRuntime, ToolCall};
use crate::telemetry::{self, TurnOutcome};
use crate::turn_log;

/// Events buffered between the run and a slow reader before the run waits.
const EVENT_BUFFER: usize = 256;

/// How often a run looks in the database for a cancellation asked for by another process
/// (PostgreSQL also wakes it at once).
const CANCEL_POLL: Duration = Duration::from_secs(2);

/// How often a caller whose trigger waits in the queue looks again, besides its wake-ups (on
/// SQLite another process's release is not announced).
fn waiter_poll(db: &pattern_db::Database) -> Duration {
    match db.backend() {
        pattern_db::Backend::Sqlite => Duration::from_millis(250),
        pattern_db::Backend::Postgres => Duration::from_secs(2),
    }
}

/// How a caller wants its turn.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// The turn's id (default: a fresh one).
    pub turn: Option<TurnId>,
    /// The request's idempotency key: the same key with the same fingerprint finds the first
    /// turn instead of storing the message again.
    pub idempotency: Option<Idempotency>,
    /// The run goes on when the caller drops the event stream (an HTTP turn); otherwise
    /// dropping the stream cancels the turn.
    pub detached: bool,
}

/// How a submitted turn began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// Its batch began here and now.
    Started,
    /// It waits in the agent's queue.
    Queued,
    /// The idempotency key found an earlier turn; nothing was stored.
    Replayed,
}

/// A submitted turn: stored, with its events.
pub struct Submission {
    /// The turn as stored right after the submit.
    pub turn: TurnInfo,
    /// How it began.
    pub begun: Begun,
    /// Its events: live from the run when it started here, else followed from its log.
    pub events: ResponseStream,
}

impl std::fmt::Debug for Submission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submission")
            .field("turn", &self.turn)
            .field("begun", &self.begun)
            .finish_non_exhaustive()
    }
}

/// A cancellation, with its reason; cloned between the run and whoever may cancel it.
#[derive(Debug, Clone)]
struct CancelToken(watch::Sender<Option<String>>);

impl CancelToken {
    fn new() -> Self {
        Self(watch::Sender::new(None))
    }

    fn cancel(&self, reason: &str) {
        self.0.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason.to_owned());
                true
            } else {
                false
            }
        });
    }

    fn reason(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    async fn cancelled(&self) -> String {
        let mut rx = self.0.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return "cancelled".into();
            }
        }
    }
}

/// The run of this agent going on in this process.
#[derive(Debug)]
struct LocalRun {
    turn: TurnId,
    cancel: CancelToken,
}

/// An agent over the database, driven by its [`AgentRuntime`].
#[derive(Debug)]
pub struct DatabaseAgent {
    runtime: Arc<AgentRuntime>,
    state: RwLock<AgentState>,
    /// A queue processor of this process delivers this agent's queue: runs here hand the claim
    /// on to the next due entry.
    serving: AtomicBool,
    /// Callers here whose triggers wait in the queue (they drive its delivery).
    waiters: AtomicUsize,
    current: StdMutex<Option<LocalRun>>,
}

/// Where a run's events go: the caller's live stream (if any) and the turn's log.
struct Recorder {
    db: pattern_db::Database,
    claim: RunClaim,
    turn: TurnId,
    live: Option<mpsc::Sender<ResponseEvent>>,
    pending: Vec<ResponseEvent>,
    since: Option<Instant>,
}

impl Recorder {
    /// Sends `event` to the live stream and keeps it for the log.
    async fn emit(&mut self, event: ResponseEvent) {
        self.live(event.clone()).await;
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        self.pending.push(event);
    }

    /// Sends `event` to the live stream only (it is in the log already, or goes with a commit).
    async fn live(&self, event: ResponseEvent) {
        if let Some(tx) = &self.live {
            let _ = tx.send(event).await;
        }
    }

    /// The kept events, for a commit, with `extra` after them.
    fn take(&mut self, extra: &[ResponseEvent]) -> Result<Vec<NewTurnEvent>> {
        self.since = None;
        let mut events = turn_log::coalesce(std::mem::take(&mut self.pending));
        events.extend(extra.iter().cloned());
        events.iter().map(turn_log::encode).collect()
    }

    /// When the kept events are due in the log.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        self.since
            .map(|t| tokio::time::Instant::from_std(t + turn_log::FLUSH_EVERY))
    }

    /// Commits the kept events to the log now.
    async fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let events = self.take(&[])?;
        self.db
            .append_turn_events(self.claim, self.turn, events)
            .await?;
        Ok(())
    }

    /// Commits one step with the kept events and `step_committed` (then sends that live).
    async fn step(&mut self, batch: BatchId, step: Vec<NewMessage>) -> Result<()> {
        let committed = ResponseEvent::StepCommitted {
            batch_id: batch,
            messages: step.len(),
        };
        let events = self.take(std::slice::from_ref(&committed))?;
        self.db
            .run_step(self.claim, batch, self.turn, step, events)
            .await?;
        self.live(committed).await;
        Ok(())
    }
}

/// How a run ended, before it is stored.
enum Ending {
    Done(DoneReason),
    Failed(ErrorKind, String),
}

impl DatabaseAgent {
    /// An agent driven by `runtime`.
    pub fn new(runtime: AgentRuntime) -> Arc<Self> {
        Arc::new(Self {
            runtime: Arc::new(runtime),
            state: RwLock::new(AgentState::Ready),
            serving: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            current: StdMutex::new(None),
        })
    }

    /// The runtime, shared.
    pub fn runtime_arc(&self) -> &Arc<AgentRuntime> {
        &self.runtime
    }

    fn db(&self) -> &pattern_db::Database {
        self.runtime.database()
    }

    /// Marks this agent served by a queue processor of this process (or not): its runs hand
    /// the claim on to the next due queue entry instead of releasing it.
    pub fn set_serving(&self, on: bool) {
        self.serving.store(on, Ordering::Release);
    }

    fn wants_more(&self) -> bool {
        self.serving.load(Ordering::Acquire) || self.waiters.load(Ordering::Acquire) > 0
    }

    /// Whether nothing of this agent goes on in this process: no run, and no caller waiting for
    /// a queued trigger.
    pub fn is_idle(&self) -> bool {
        !self.is_running() && self.waiters.load(Ordering::Acquire) == 0
    }

    /// Whether a run of this agent is going on in this process.
    pub fn is_running(&self) -> bool {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Abandons this agent's open batches whose run is dead (or, for batches begun without a
    /// claim, whose lease expired) and returns them with their triggers, to retry with
    /// [`IncomingMessage::retry`].
    pub async fn recover(&self) -> Result<Vec<pattern_db::Abandoned>> {
        Ok(self.runtime.messages().recover().await?)
    }

    /// Commits `message` and its turn, then runs it here (the agent was free) or leaves it in
    /// the agent's queue for whoever holds the agent (this process drives that delivery while
    /// the returned stream's turn is unfinished). See the module doc.
    ///
    /// The commit and the start of the run happen in a task of their own: a caller dropped
    /// while the commit is in flight (a client gone, a driver stopped) never leaves a batch
    /// claimed by this live process with no run to finish it. Its run then sees the event
    /// stream gone: a detached turn goes on, any other is cancelled (its batch abandoned).
    pub async fn submit(
        self: Arc<Self>,
        message: IncomingMessage,
        options: TurnOptions,
    ) -> Result<Submission> {
        tokio::spawn(self.submit_here(message, options))
            .await
            .map_err(|e| Error::TaskFailed(format!("submitting a turn: {e}")))?
    }

    async fn submit_here(
        self: Arc<Self>,
        message: IncomingMessage,
        options: TurnOptions,
    ) -> Result<Submission> {
        let suspended = *self.state.read().await == AgentState::Suspended;
        let submit = Submit {
            agent: self.runtime.agent_id(),
            trigger: NewMessage::new(message.role, message.content.clone()),
            batch_type: Some(message.batch_type),
            retry_of: message.retry_of,
            turn: NewTurn {
                id: options.turn.unwrap_or_default(),
                source: message.source.clone(),
                idempotency: options.idempotency,
            },
            start: !suspended,
        };
        match self.db().submit(submit).await? {
            Submitted::Started(started) => {
                let turn = started.turn.clone();
                let (tx, rx) = mpsc::channel(EVENT_BUFFER);
                self.start_chain(*started, Some(tx), options.detached);
                Ok(Submission {
                    turn,
                    begun: Begun::Started,
                    events: Box::pin(ReceiverStream::new(rx)),
                })
            }
            Submitted::Queued { turn, .. } => {
                let events: ResponseStream = if suspended {
                    let queued = turn_log::follow(
                        self.db().clone(),
                        turn.agent_id,
                        turn.id,
                        0,
                        Duration::from_secs(1),
                    )
                    .take(1)
                    .filter_map(|e| async move { e.ok().map(|(_, e)| e) });
                    Box::pin(queued.chain(futures::stream::iter([ResponseEvent::Error {
                        kind: ErrorKind::Suspended,
                        message: "the agent is suspended; the message waits in its queue".into(),
                        batch_id: None,
                    }])))
                } else {
                    self.clone().drive(turn.id);
                    self.follow(turn.id)
                };
                Ok(Submission {
                    turn,
                    begun: Begun::Queued,
                    events,
                })
            }
            Submitted::Replayed(turn) => {
                // A repeated request for a turn still waiting in the queue drives its delivery
                // like the first request did (its process may be gone).
                if turn.state == TurnState::Queued && !suspended {
                    self.clone().drive(turn.id);
                }
                Ok(Submission {
                    events: self.follow(turn.id),
                    turn,
                    begun: Begun::Replayed,
                })
            }
        }
    }

    /// The turn's events from its log (an event that cannot be read ends the stream with an
    /// error event, never silently).
    fn follow(&self, turn: TurnId) -> ResponseStream {
        let stream = turn_log::follow(
            self.db().clone(),
            self.runtime.agent_id(),
            turn,
            0,
            waiter_poll(self.db()),
        )
        .map(|item| match item {
            Ok((_, event)) => event,
            Err(e) => ResponseEvent::Error {
                kind: ErrorKind::Storage,
                message: e.to_string(),
                batch_id: None,
            },
        });
        Box::pin(stream)
    }

    /// Drives the delivery of the agent's queue from this process until `turn` is finished:
    /// whenever the agent is free it claims it and runs the oldest due entry (runs then hand
    /// the claim on while a caller here waits).
    fn drive(self: Arc<Self>, turn: TurnId) {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let agent = self.runtime.agent_id();
            let poll = waiter_poll(self.db());
            loop {
                let channel = self.db().hub().subscribe(WakeKey::Agent(agent));
                let notified = channel.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match self.db().turn(agent, turn).await {
                    Ok(info) if info.state == TurnState::Finished => break,
                    Ok(info) if info.state == TurnState::Queued => {
                        if let Err(e) = self.deliver_next().await {
                            tracing::debug!(%agent, error = %e, "delivery attempt failed; trying again");
                        }
                    }
                    Ok(_) => {}
                    Err(pattern_db::Error::Run(pattern_db::RunError::TurnNotFound { .. })) => break,
                    Err(e) => tracing::debug!(%agent, error = %e, "cannot read a waited-for turn"),
                }
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(poll) => {}
                }
            }
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Delivers this agent's oldest due queue entry if the agent is free in the database
    /// (claiming it); the run goes on in the background. `false`: nothing was started (busy,
    /// suspended, or nothing due).
    pub async fn deliver_next(self: &Arc<Self>) -> Result<bool> {
        if *self.state.read().await == AgentState::Suspended || self.is_running() {
            return Ok(false);
        }
        match self.db().claim_next(self.runtime.agent_id()).await? {
            Some(started) => {
                self.start_chain(started, None, true);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Asks `turn` to stop, in whichever process runs it (or, queued, when it is delivered).
    pub async fn cancel_turn(&self, turn: TurnId) -> Result<TurnInfo> {
        let info = self.db().cancel_turn(self.runtime.agent_id(), turn).await?;
        if let Some(run) = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|r| r.turn == turn)
        {
            run.cancel
                .cancel("the turn was cancelled; the message stays stored");
        }
        Ok(info)
    }

    /// Cancels the run going on in this process, if any (shutdown): its batch is abandoned and
    /// its message stays stored, retryable at once.
    pub fn cancel_running(&self, reason: &str) -> bool {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some(run) => {
                run.cancel.cancel(reason);
                true
            }
            None => false,
        }
    }

    /// Registers `started` as this process's run of the agent and runs it (and every run the
    /// claim is handed on to here) in the background.
    fn start_chain(
        self: &Arc<Self>,
        started: Started,
        live: Option<mpsc::Sender<ResponseEvent>>,
        detached: bool,
    ) {
        let cancel = self.set_current(&started);
        tokio::spawn(self.clone().run_chain(started, cancel, live, detached));
    }

    fn set_current(&self, started: &Started) -> CancelToken {
        let cancel = CancelToken::new();
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(LocalRun {
            turn: started.turn.id,
            cancel: cancel.clone(),
        });
        cancel
    }

    async fn run_chain(
        self: Arc<Self>,
        started: Started,
        cancel: CancelToken,
        live: Option<mpsc::Sender<ResponseEvent>>,
        detached: bool,
    ) {
        let mut next = Some((started, cancel));
        let mut live = live;
        while let Some((started, cancel)) = next.take() {
            let claim = started.claim;
            let run = fenced(
                claim,
                self.clone().run_one(started, live.take(), detached, cancel),
            );
            let handed_on = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
                Ok(next) => next,
                Err(_) => {
                    // A bug, not a failure the run could store: give the agent back (its batch
                    // abandoned, its turn interrupted) rather than hold it until this process
                    // dies.
                    tracing::error!(agent = %self.runtime.agent_name(), "a run panicked");
                    if let Err(e) = self.db().release_claim(claim, "the run panicked").await {
                        tracing::warn!(error = %e, "could not release a panicked run's claim");
                    }
                    None
                }
            };
            next = match handed_on {
                Some(n) => {
                    let cancel = self.set_current(&n);
                    Some((n, cancel))
                }
                None => {
                    *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
                    None
                }
            };
        }
        let mut state = self.state.write().await;
        if matches!(*state, AgentState::Processing { .. }) {
            *state = AgentState::Ready;
        }
        drop(state);
        // Queued work of other agents, or this one's after a release, may run now: callers
        // here waiting on this agent look again (the release woke them before this run was
        // off the books).
        self.db()
            .hub()
            .wake(WakeKey::Agent(self.runtime.agent_id()));
        self.runtime.queue_signal().notify_one();
    }

    /// One run: the loop, then its end stored in one transaction. Returns the run the claim
    /// was handed on to, if any.
    async fn run_one(
        self: Arc<Self>,
        started: Started,
        live: Option<mpsc::Sender<ResponseEvent>>,
        detached: bool,
        cancel: CancelToken,
    ) -> Option<Started> {
        let batch = started.received.batch_id;
        let span = telemetry::agent_span(
            &self.runtime.agent_id().to_string(),
            self.runtime.agent_name(),
            &batch.to_string(),
        );
        let began = Instant::now();
        let (next, outcome) = self
            .clone()
            .run_one_inner(started, live, detached, cancel)
            .instrument(span.clone())
            .await;
        telemetry::turn_ended(
            &self.runtime.agent_id().to_string(),
            outcome,
            began.elapsed(),
        );
        span.record("pattern.turn.outcome", outcome.label());
        if outcome != TurnOutcome::Completed {
            span.record("otel.status_code", "ERROR");
        }
        next
    }

    async fn run_one_inner(
        self: Arc<Self>,
        started: Started,
        live: Option<mpsc::Sender<ResponseEvent>>,
        detached: bool,
        cancel: CancelToken,
    ) -> (Option<Started>, TurnOutcome) {
        let batch = started.received.batch_id;
        let turn = started.turn.id;
        *self.state.write().await = AgentState::Processing { batch };
        let mut rec = Recorder {
            db: self.db().clone(),
            claim: started.claim,
            turn,
            live,
            pending: Vec::new(),
            since: None,
        };
        rec.live(ResponseEvent::Received {
            batch_id: batch,
            message_id: started.received.message_id,
        })
        .await;
        let watchers = self.watch_cancel(turn, rec.live.clone(), detached, &cancel);
        let ending = if started.turn.cancel_requested {
            Ending::Failed(
                ErrorKind::Cancelled,
                "the turn was cancelled before it started; the message stays stored".into(),
            )
        } else {
            self.run_loop(batch, &mut rec, &cancel).await
        };
        for w in watchers {
            w.abort();
        }
        self.finish(&started, &mut rec, ending).await
    }

    /// Tasks that cancel the run: when its caller goes away (unless detached), and when a
    /// cancellation of its turn is stored (by any process).
    fn watch_cancel(
        &self,
        turn: TurnId,
        live: Option<mpsc::Sender<ResponseEvent>>,
        detached: bool,
        cancel: &CancelToken,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let (Some(tx), false) = (live, detached) {
            let cancel = cancel.clone();
            tasks.push(tokio::spawn(async move {
                tx.closed().await;
                cancel.cancel("the caller cancelled the turn");
            }));
        }
        let db = self.db().clone();
        let agent = self.runtime.agent_id();
        let cancel = cancel.clone();
        tasks.push(tokio::spawn(async move {
            let channel = db.hub().subscribe(WakeKey::Cancel(turn));
            loop {
                let notified = channel.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Ok(info) = db.turn(agent, turn).await
                    && info.cancel_requested
                {
                    cancel.cancel("the turn was cancelled; the message stays stored");
                    return;
                }
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(CANCEL_POLL) => {}
                }
            }
        }));
        tasks
    }

    /// Stores the end of a run: complete (or, when that is refused, abandon) the batch, the
    /// turn's last events, and the claim handed on or released. Then tells the live stream.
    async fn finish(
        &self,
        started: &Started,
        rec: &mut Recorder,
        ending: Ending,
    ) -> (Option<Started>, TurnOutcome) {
        let batch = started.received.batch_id;
        let claim = started.claim;
        let (db_ending, last) = match ending {
            Ending::Done(reason) => (
                RunEnding::Complete,
                vec![
                    ResponseEvent::BatchCompleted { batch_id: batch },
                    ResponseEvent::Done {
                        batch_id: batch,
                        reason,
                    },
                ],
            ),
            Ending::Failed(kind, message) => (
                RunEnding::Abandon {
                    reason: message.clone(),
                },
                vec![ResponseEvent::Error {
                    kind,
                    message,
                    batch_id: Some(batch),
                }],
            ),
        };
        let mut result = self.store_end(rec, batch, db_ending, &last).await;
        let mut last = last;
        if let Err(e) = &result
            && !e.is_claim_lost()
            && matches!(last.first(), Some(ResponseEvent::BatchCompleted { .. }))
        {
            // The batch could not complete (a storage failure): abandon it instead.
            let message = e.to_string();
            tracing::warn!(agent = %self.runtime.agent_name(), %batch, error = %message,
                "could not complete a batch; abandoning it");
            last = vec![ResponseEvent::Error {
                kind: ErrorKind::Storage,
                message: message.clone(),
                batch_id: Some(batch),
            }];
            result = self
                .store_end(rec, batch, RunEnding::Abandon { reason: message }, &last)
                .await;
        }
        let outcome = match last.first() {
            Some(ResponseEvent::BatchCompleted { .. }) => TurnOutcome::Completed,
            Some(ResponseEvent::Error {
                kind: ErrorKind::Cancelled,
                ..
            }) => TurnOutcome::Cancelled,
            Some(ResponseEvent::Error {
                kind: ErrorKind::Interrupted,
                ..
            }) => TurnOutcome::Interrupted,
            _ => TurnOutcome::Failed,
        };
        match result {
            Ok(next) => {
                for event in last {
                    rec.live(event).await;
                }
                (next, outcome)
            }
            Err(e) if e.is_claim_lost() => {
                // Another process took the agent over and abandoned the batch.
                rec.live(ResponseEvent::Error {
                    kind: ErrorKind::Interrupted,
                    message: "the run lost its claim on the agent: another process took it over \
                        and abandoned the batch; the message stays stored"
                        .into(),
                    batch_id: Some(batch),
                })
                .await;
                (None, TurnOutcome::Interrupted)
            }
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(agent = %self.runtime.agent_name(), %batch, error = %message,
                    "could not store the end of a run; releasing its claim");
                if let Err(e) = self.db().release_claim(claim, &message).await {
                    // The claim stays until this process's registration lapses; recovery then
                    // abandons the batch.
                    tracing::warn!(agent = %self.runtime.agent_name(), error = %e,
                        "could not release a claim; recovery will");
                }
                rec.live(ResponseEvent::Error {
                    kind: ErrorKind::Storage,
                    message,
                    batch_id: Some(batch),
                })
                .await;
                (None, TurnOutcome::Failed)
            }
        }
    }

    async fn store_end(
        &self,
        rec: &mut Recorder,
        batch: BatchId,
        ending: RunEnding,
        last: &[ResponseEvent],
    ) -> Result<Option<Started>> {
        let events = rec.take(last)?;
        let finished = self
            .db()
            .finish_run(
                rec.claim,
                batch,
                rec.turn,
                ending,
                events,
                self.wants_more(),
            )
            .await?;
        Ok(finished.next.map(|n| *n))
    }

    async fn run_loop(&self, batch: BatchId, rec: &mut Recorder, cancel: &CancelToken) -> Ending {
        let config = self.runtime.config();
        let started = Instant::now();
        let mut opts = GenerateOptions {
            temperature: config.temperature,
            ..GenerateOptions::default()
        };
        let mut iterations = 0;
        let agent_label = self.runtime.agent_id().to_string();
        // Call ids already used in this batch: the store refuses a repeated id, and models (or
        // servers) do repeat them, so a repeat is renamed before anything runs or is stored.
        let mut used_ids: HashSet<String> = HashSet::new();
        loop {
            if let Some(reason) = cancel.reason() {
                return Ending::Failed(ErrorKind::Cancelled, reason);
            }
            if iterations >= config.max_iterations {
                return Ending::Done(DoneReason::MaxIterations);
            }
            if iterations > 0 && started.elapsed() >= config.max_duration {
                return Ending::Done(DoneReason::MaxDuration);
            }
            iterations += 1;
            let step_began = Instant::now();

            let ctx = tokio::select! {
                ctx = self.runtime.build_context(Some(batch)) => match ctx {
                    Ok(ctx) => ctx,
                    Err(e) => return failed(ErrorKind::Context, e),
                },
                reason = cancel.cancelled() => return Ending::Failed(ErrorKind::Cancelled, reason),
            };
            opts.tool_choice = config.tool_choice(iterations, &ctx.tools);
            let response = tokio::select! {
                r = self.call_model(&ctx, &opts, rec, &mut used_ids) => r,
                reason = cancel.cancelled() => return Ending::Failed(ErrorKind::Cancelled, reason),
            };
            let (response, mut renamed) = match response {
                Ok(r) => r,
                Err(e @ Error::Db(_)) => return failed(ErrorKind::Storage, e),
                Err(e) => return failed(ErrorKind::Provider, e),
            };
            self.runtime.counter().observe_usage(
                ctx.tokens.total(),
                usize::try_from(response.usage.input_tokens).unwrap_or(0),
            );
            rec.emit(ResponseEvent::Usage {
                usage: response.usage,
            })
            .await;

            let malformed: std::collections::HashMap<String, String> = response
                .malformed_tool_calls
                .iter()
                .map(|m| (m.id.clone(), m.error.clone()))
                .collect();
            let mut calls: Vec<ToolCall> = Vec::new();
            let mut content: Vec<ContentBlock> = Vec::with_capacity(response.content.len());
            for block in response.content {
                match block {
                    ContentBlock::Text { text } if text.is_empty() => {}
                    ContentBlock::ToolUse {
                        id,
                        name,
                        input,
                        signature,
                    } => {
                        // The id its `ToolCallStarted` announced, so every event of a call names
                        // it the same way; a call the stream did not announce is renamed here.
                        let fresh = match renamed.iter().position(|(given, _)| *given == id) {
                            Some(i) => renamed.remove(i).1,
                            None => {
                                let fresh = unique_call_id(&id, &used_ids);
                                used_ids.insert(fresh.clone());
                                fresh
                            }
                        };
                        calls.push(ToolCall {
                            id: fresh.clone(),
                            name: name.clone(),
                            input: input.clone(),
                            malformed: malformed.get(&id).cloned(),
                        });
                        content.push(ContentBlock::ToolUse {
                            id: fresh,
                            name,
                            input,
                            signature,
                        });
                    }
                    other => content.push(other),
                }
            }

            if calls.is_empty() {
                if !content.is_empty() {
                    let step = vec![NewMessage::new(Role::Assistant, content)];
                    if let Err(e) = rec.step(batch, step).await {
                        return failed(ErrorKind::Storage, e);
                    }
                }
                telemetry::step_done(&agent_label, step_began.elapsed());
                return Ending::Done(DoneReason::Completed);
            }

            for call in &calls {
                rec.emit(ResponseEvent::ToolCallFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                })
                .await;
            }
            // Followers see the calls before the tools run (they may take long).
            if let Err(e) = rec.flush().await {
                return failed(ErrorKind::Storage, e);
            }
            // Approval requests are stored in the turn's log by the approver; their notices only
            // go to the live stream here, before the results they hold up.
            let (notices, mut noticed) = mpsc::unbounded_channel();
            let running = crate::permission::with_notices(
                Some(notices),
                self.runtime.execute_calls(batch, &calls),
            );
            tokio::pin!(running);
            let outcomes = loop {
                tokio::select! {
                    o = &mut running => break o,
                    Some(event) = noticed.recv() => rec.live(event).await,
                    reason = cancel.cancelled() => {
                        return Ending::Failed(ErrorKind::Cancelled, reason);
                    }
                }
            };
            while let Ok(event) = noticed.try_recv() {
                rec.live(event).await;
            }
            for o in &outcomes {
                rec.emit(ResponseEvent::ToolResult {
                    call_id: o.call_id.clone(),
                    content: o.content.clone(),
                    is_error: o.is_error,
                })
                .await;
            }
            let step = vec![
                NewMessage::new(Role::Assistant, content),
                NewMessage::new(Role::Tool, outcomes.iter().map(|o| o.block()).collect()),
            ];
            if let Err(e) = rec.step(batch, step).await {
                return failed(ErrorKind::Storage, e);
            }
            telemetry::step_done(&agent_label, step_began.elapsed());
            let exit = outcomes.iter().any(|o| o.exit);
            let heartbeat = outcomes.iter().any(|o| o.request_heartbeat);
            if exit && !heartbeat {
                return Ending::Done(DoneReason::ExitTool);
            }
            if heartbeat
                && exit
                && let Err(e) = self.db().continue_run(rec.claim, batch).await
            {
                return failed(ErrorKind::Storage, e);
            }
        }
    }

    /// Streams one answer, forwarding deltas (and committing them to the turn's log at least
    /// every [`turn_log::FLUSH_EVERY`]). A call's id is made unique in the batch (`used`) when
    /// the call starts, so `ToolCallStarted` already names it as everything after it will;
    /// returns the answer with the `(given id, unique id)` of each started call, in order.
    async fn call_model(
        &self,
        ctx: &context_v2::MemoryContext,
        opts: &GenerateOptions,
        rec: &mut Recorder,
        used: &mut HashSet<String>,
    ) -> Result<(crate::provider::ModelResponse, Vec<(String, String)>)> {
        let model = self.runtime.model();
        let info = model.model();
        let span = telemetry::chat_span(model.name(), &info.model);
        let began = Instant::now();
        let answer = self
            .stream_answer(model.as_ref(), ctx, opts, rec, used)
            .instrument(span.clone())
            .await;
        let agent = self.runtime.agent_id().to_string();
        match &answer {
            Ok((response, _)) => {
                telemetry::record_usage(
                    &span,
                    &info.model,
                    &response.usage,
                    telemetry::finish_reason(&response.stop_reason),
                );
                telemetry::model_request(
                    &agent,
                    &info.model,
                    Some(&response.usage),
                    began.elapsed(),
                );
            }
            Err(e) => {
                telemetry::record_error(&span, e);
                telemetry::model_request(&agent, &info.model, None, began.elapsed());
            }
        }
        answer
    }

    async fn stream_answer(
        &self,
        model: &dyn crate::provider::ModelProvider,
        ctx: &context_v2::MemoryContext,
        opts: &GenerateOptions,
        rec: &mut Recorder,
        used: &mut HashSet<String>,
    ) -> Result<(crate::provider::ModelResponse, Vec<(String, String)>)> {
        let mut stream = model.stream(ctx, opts).await?;
        let mut renamed = Vec::new();
        loop {
            let flush_at = rec.deadline();
            let event = tokio::select! {
                event = stream.next() => event,
                () = async {
                    match flush_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    rec.flush().await?;
                    continue;
                }
            };
            let Some(event) = event else {
                return Err(Error::Provider(crate::provider::ProviderError::Truncated {
                    provider: model.name().to_owned(),
                }));
            };
            let forward = match event? {
                ProviderEvent::TextDelta { text } => ResponseEvent::TextDelta { text },
                ProviderEvent::ThinkingDelta { text } => ResponseEvent::ThinkingDelta { text },
                ProviderEvent::ToolCallStarted { id, name, .. } => {
                    let fresh = unique_call_id(&id, used);
                    used.insert(fresh.clone());
                    renamed.push((id, fresh.clone()));
                    ResponseEvent::ToolCallStarted {
                        call_id: fresh,
                        name,
                    }
                }
                ProviderEvent::ToolCallDelta { .. } | ProviderEvent::Usage { .. } => continue,
                ProviderEvent::Done { response } => return Ok((response, renamed)),
            };
            rec.emit(forward).await;
        }
    }
}

fn failed(kind: ErrorKind, e: impl Into<Error>) -> Ending {
    let e = e.into();
    if e.is_claim_lost() {
        return Ending::Failed(ErrorKind::Interrupted, e.to_string());
    }
    Ending::Failed(kind, e.to_string())
}

/// `id`, or `id~N` with the smallest N that is not used yet (also for an empty id).
fn unique_call_id(id: &str, used: &HashSet<String>) -> String {
    if !id.is_empty() && !used.contains(id) {
        return id.to_owned();
    }
    let base = if id.is_empty() { "call" } else { id };
    (1..)
        .map(|n| format!("{base}~{n}"))
        .find(|candidate| !used.contains(candidate))
        .unwrap_or_else(|| format!("{base}~{}", uuid::Uuid::new_v4().simple()))
}

#[async_trait]
impl Agent for DatabaseAgent {
    fn id(&self) -> AgentId {
        self.runtime.agent_id()
    }

    fn name(&self) -> &str {
        self.runtime.agent_name()
    }

    fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    /// [`DatabaseAgent::submit`] with default options: dropping the stream cancels the turn.
    async fn process(self: Arc<Self>, message: IncomingMessage) -> Result<ResponseStream> {
        Ok(self.submit(message, TurnOptions::default()).await?.events)
    }

    async fn state(&self) -> AgentState {
        self.state.read().await.clone()
    }

    async fn set_state(&self, state: AgentState) -> Result<()> {
        let mut current = self.state.write().await;
        match (&*current, &state) {
            (_, AgentState::Processing { .. }) => Err(Error::InvalidState(
                "`processing` is set by the agent's own run".into(),
            )),
            (AgentState::Processing { .. }, AgentState::Ready) => Err(Error::InvalidState(
                "the agent is processing; it becomes ready when the batch ends".into(),
            )),
            _ => {
                let resumed = *current == AgentState::Suspended && state == AgentState::Ready;
                *current = state;
                if resumed {
                    self.runtime.queue_signal().notify_one();
                }
                Ok(())
            }
        }
    }
}

/// How long [`wait_idle`] polls between checks.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// Waits until `agent` runs nothing in this process (for tests and orderly shutdown), at most
/// `limit`.
pub async fn wait_idle(agent: &DatabaseAgent, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !agent.is_running() {
            return true;
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
    false
}
