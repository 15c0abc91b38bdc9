//! [`DatabaseAgent`]: the [`Agent`] whose history lives in `pattern_db`, and its request flow.
//!
//! The flow of one turn (the incremental save of `message-flow-incremental-save.md`):
//!
//! 1. **Received.** The trigger is committed before anything else: as the first message of a new
//!    open batch when the agent is free, or to the agent's durable queue when a batch is in
//!    flight (one batch per agent at a time; later triggers wait in arrival order and begin their
//!    batch in the same transaction that marks them delivered).
//! 2. **Loop**, at most `max_iterations` model calls and `max_duration`: build the context (the
//!    open batch included), stream the model's answer (deltas are forwarded as they come), run
//!    its tool calls (admitted in call order, run concurrently, results kept in call order), and
//!    commit the answer with its results as one step. An answer without tool calls is the last
//!    step; an exit tool ends the loop unless a result asks for a heartbeat, which continues the
//!    batch (`continuation`).
//! 3. **End.** The batch is completed (every call has its result, by construction of the steps).
//!    A failure (provider, storage, context) or a cancelled stream abandons the batch: it is never
//!    sent to a provider again, its trigger stays stored and can be retried
//!    ([`IncomingMessage::retry`]). A process that dies mid-run leaves an open batch whose lease
//!    expires; recovery abandons it the same way.
//!
//! This module must never commit part of a step, never leave a stored tool call without its
//! result, and never run two batches of one agent at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use pattern_db::queue::NewQueued;
use pattern_db::{
    Abandoned, AgentId, BatchId, BeginBatch, ContentBlock, NewMessage, Received, Role, SnowflakeId,
};
use tokio::sync::{Mutex, OwnedMutexGuard, RwLock, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::agent::{
    Agent, AgentState, DoneReason, ErrorKind, IncomingMessage, ResponseEvent, ResponseStream,
};
use crate::error::{Error, Result};
use crate::provider::{GenerateOptions, ProviderEvent};
use crate::runtime::{AgentRuntime, ToolCall};

/// Events buffered between the run and a slow reader before the run waits.
const EVENT_BUFFER: usize = 256;

/// An agent over the database, driven by its [`AgentRuntime`].
#[derive(Debug)]
pub struct DatabaseAgent {
    runtime: Arc<AgentRuntime>,
    run_lock: Arc<Mutex<()>>,
    state: RwLock<AgentState>,
    /// Queue entries a caller of `process` is waiting to deliver itself.
    waiting: StdMutex<HashSet<SnowflakeId>>,
}

/// The sending half of a turn's events; a closed channel means the caller cancelled.
struct Events {
    tx: mpsc::Sender<ResponseEvent>,
}

impl Events {
    async fn send(&self, event: ResponseEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }
}

/// How a run ended, before it is reported.
enum Ending {
    Done(DoneReason),
    Failed(ErrorKind, String),
}

impl DatabaseAgent {
    /// An agent driven by `runtime`.
    pub fn new(runtime: AgentRuntime) -> Arc<Self> {
        Arc::new(Self {
            runtime: Arc::new(runtime),
            run_lock: Arc::new(Mutex::new(())),
            state: RwLock::new(AgentState::Ready),
            waiting: StdMutex::new(HashSet::new()),
        })
    }

    /// The runtime, shared.
    pub fn runtime_arc(&self) -> &Arc<AgentRuntime> {
        &self.runtime
    }

    /// Abandons this agent's open batches whose lease expired (dead runs) and returns them with
    /// their triggers, to retry with [`IncomingMessage::retry`].
    pub async fn recover(&self) -> Result<Vec<Abandoned>> {
        Ok(self.runtime.messages().recover().await?)
    }

    fn is_waited_for(&self, id: SnowflakeId) -> bool {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&id)
    }

    fn set_waiting(&self, id: SnowflakeId, on: bool) {
        let mut w = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if on {
            w.insert(id);
        } else {
            w.remove(&id);
        }
    }

    async fn begin(&self, message: &IncomingMessage) -> Result<Received> {
        let trigger = NewMessage::new(message.role, message.content.clone());
        Ok(self
            .runtime
            .messages()
            .begin_batch(
                trigger,
                BeginBatch {
                    batch_type: Some(message.batch_type),
                    parent_batch: None,
                    retry_of: message.retry_of,
                },
            )
            .await?)
    }

    async fn enqueue(&self, message: &IncomingMessage) -> Result<SnowflakeId> {
        let entry = NewQueued {
            source: message.source.clone(),
            retry_of: message.retry_of,
            ..NewQueued::now(message.batch_type, message.role, message.content.clone())
        };
        let queued = self
            .runtime
            .database()
            .enqueue(self.runtime.agent_id(), entry)
            .await?;
        Ok(queued.id)
    }

    /// Runs one batch to its end, holding the run lock.
    async fn run(self: Arc<Self>, guard: OwnedMutexGuard<()>, received: Received, events: Events) {
        let batch = received.batch_id;
        *self.state.write().await = AgentState::Processing { batch };
        let ending = if events
            .send(ResponseEvent::Received {
                batch_id: batch,
                message_id: received.message_id,
            })
            .await
        {
            self.run_loop(batch, &events).await
        } else {
            Ending::Failed(ErrorKind::Cancelled, "the caller went away".into())
        };
        let store = self.runtime.messages();
        match ending {
            Ending::Done(reason) => match store.complete_batch(batch).await {
                Ok(_) => {
                    events
                        .send(ResponseEvent::BatchCompleted { batch_id: batch })
                        .await;
                    events
                        .send(ResponseEvent::Done {
                            batch_id: batch,
                            reason,
                        })
                        .await;
                }
                Err(e) => {
                    self.fail(batch, &events, ErrorKind::Storage, e.to_string())
                        .await
                }
            },
            Ending::Failed(kind, message) => self.fail(batch, &events, kind, message).await,
        }
        let mut state = self.state.write().await;
        if matches!(*state, AgentState::Processing { .. }) {
            *state = AgentState::Ready;
        }
        drop(state);
        // Free the agent before the caller's stream ends, so that a caller who sends the next
        // message as soon as this turn's stream is over finds the agent free (not busy, queued).
        drop(guard);
        drop(events);
        // Queued work (a trigger that waited, a message from another agent) may run now.
        self.runtime.queue_signal().notify_one();
    }

    async fn fail(&self, batch: BatchId, events: &Events, kind: ErrorKind, message: String) {
        if let Err(e) = self.runtime.messages().abandon_batch(batch, &message).await {
            // The batch stays open; its lease expires and recovery abandons it.
            tracing::warn!(agent = %self.runtime.agent_name(), %batch, error = %e,
                "could not abandon a failed batch; recovery will");
        }
        events
            .send(ResponseEvent::Error {
                kind,
                message,
                batch_id: Some(batch),
            })
            .await;
    }

    async fn run_loop(&self, batch: BatchId, events: &Events) -> Ending {
        let config = self.runtime.config();
        let started = Instant::now();
        let opts = GenerateOptions {
            temperature: config.temperature,
            max_output_tokens: None,
            timeout: None,
        };
        let mut iterations = 0;
        // Call ids already used in this batch: the store refuses a repeated id, and models (or
        // servers) do repeat them, so a repeat is renamed before anything runs or is stored.
        let mut used_ids: HashSet<String> = HashSet::new();
        loop {
            if iterations >= config.max_iterations {
                return Ending::Done(DoneReason::MaxIterations);
            }
            if iterations > 0 && started.elapsed() >= config.max_duration {
                return Ending::Done(DoneReason::MaxDuration);
            }
            iterations += 1;

            let ctx = match self.runtime.build_context(Some(batch)).await {
                Ok(ctx) => ctx,
                Err(e) => return Ending::Failed(ErrorKind::Context, e.to_string()),
            };
            let response = tokio::select! {
                r = self.call_model(&ctx, &opts, events, &mut used_ids) => r,
                () = events.tx.closed() => return Ending::Failed(ErrorKind::Cancelled, "the caller cancelled the turn".into()),
            };
            let (response, mut renamed) = match response {
                Ok(Some(r)) => r,
                Ok(None) => {
                    return Ending::Failed(
                        ErrorKind::Cancelled,
                        "the caller cancelled the turn".into(),
                    );
                }
                Err(e) => return Ending::Failed(ErrorKind::Provider, e.to_string()),
            };
            self.runtime.counter().observe_usage(
                ctx.tokens.total(),
                usize::try_from(response.usage.input_tokens).unwrap_or(0),
            );
            if !events
                .send(ResponseEvent::Usage {
                    usage: response.usage,
                })
                .await
            {
                return Ending::Failed(
                    ErrorKind::Cancelled,
                    "the caller cancelled the turn".into(),
                );
            }

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
                    ContentBlock::ToolUse { id, name, input } => {
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
                        });
                    }
                    other => content.push(other),
                }
            }

            if calls.is_empty() {
                if !content.is_empty() {
                    let step = vec![NewMessage::new(Role::Assistant, content)];
                    if let Err(e) = self.commit(batch, step, events).await {
                        return e;
                    }
                }
                return Ending::Done(DoneReason::Completed);
            }

            for call in &calls {
                if !events
                    .send(ResponseEvent::ToolCallFinished {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        input: call.input.clone(),
                    })
                    .await
                {
                    return Ending::Failed(
                        ErrorKind::Cancelled,
                        "the caller cancelled the turn".into(),
                    );
                }
            }
            let outcomes = tokio::select! {
                o = self.runtime.execute_calls(batch, &calls) => o,
                () = events.tx.closed() => return Ending::Failed(ErrorKind::Cancelled, "the caller cancelled the turn".into()),
            };
            for o in &outcomes {
                events
                    .send(ResponseEvent::ToolResult {
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
            if let Err(e) = self.commit(batch, step, events).await {
                return e;
            }
            let exit = outcomes.iter().any(|o| o.exit);
            let heartbeat = outcomes.iter().any(|o| o.request_heartbeat);
            if exit && !heartbeat {
                return Ending::Done(DoneReason::ExitTool);
            }
            if heartbeat
                && exit
                && let Err(e) = self.runtime.messages().continue_batch(batch).await
            {
                return Ending::Failed(ErrorKind::Storage, e.to_string());
            }
        }
    }

    async fn commit(
        &self,
        batch: BatchId,
        step: Vec<NewMessage>,
        events: &Events,
    ) -> std::result::Result<(), Ending> {
        let n = step.len();
        match self.runtime.store_step(batch, step).await {
            Ok(_) => {
                events
                    .send(ResponseEvent::StepCommitted {
                        batch_id: batch,
                        messages: n,
                    })
                    .await;
                Ok(())
            }
            Err(e) => Err(Ending::Failed(ErrorKind::Storage, e.to_string())),
        }
    }

    /// Streams one answer, forwarding deltas. A call's id is made unique in the batch (`used`)
    /// when the call starts, so `ToolCallStarted` already names it as everything after it will;
    /// returns the answer with the `(given id, unique id)` of each started call, in order.
    /// `Ok(None)`: the caller went away.
    async fn call_model(
        &self,
        ctx: &context_v2::MemoryContext,
        opts: &GenerateOptions,
        events: &Events,
        used: &mut HashSet<String>,
    ) -> Result<Option<(crate::provider::ModelResponse, Vec<(String, String)>)>> {
        let model = self.runtime.model();
        let mut stream = model.stream(ctx, opts).await?;
        let mut renamed = Vec::new();
        while let Some(event) = stream.next().await {
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
                ProviderEvent::Done { response } => return Ok(Some((response, renamed))),
            };
            if !events.send(forward).await {
                return Ok(None);
            }
        }
        Err(Error::Provider(crate::provider::ProviderError::Truncated {
            provider: model.name().to_owned(),
        }))
    }
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

fn single(events: Vec<ResponseEvent>) -> ResponseStream {
    Box::pin(futures::stream::iter(events))
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

    async fn process(self: Arc<Self>, message: IncomingMessage) -> Result<ResponseStream> {
        let agent = self.runtime.agent_id();
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let events = Events { tx };
        let suspended = *self.state.read().await == AgentState::Suspended;

        if let Some(queue_id) = message.queue_id {
            // Delivering a queue entry: skip it when a caller waits to deliver it itself.
            if suspended || self.is_waited_for(queue_id) {
                return Ok(single(vec![ResponseEvent::Error {
                    kind: if suspended {
                        ErrorKind::Suspended
                    } else {
                        ErrorKind::QueueEntryGone
                    },
                    message: "the entry is not delivered now".into(),
                    batch_id: None,
                }]));
            }
            let guard = self.run_lock.clone().lock_owned().await;
            let delivered = self
                .runtime
                .database()
                .begin_queued(agent, queue_id)
                .await?;
            let Some(delivered) = delivered else {
                return Ok(single(vec![ResponseEvent::Error {
                    kind: ErrorKind::QueueEntryGone,
                    message: format!("queue entry {queue_id} was delivered already or is not due"),
                    batch_id: None,
                }]));
            };
            tokio::spawn(self.run(guard, delivered.received, events));
            return Ok(Box::pin(ReceiverStream::new(rx)));
        }

        if !suspended && let Ok(guard) = self.run_lock.clone().try_lock_owned() {
            let received = self.begin(&message).await?;
            tokio::spawn(self.run(guard, received, events));
            return Ok(Box::pin(ReceiverStream::new(rx)));
        }

        // Busy or suspended: commit the trigger to the queue first (the durable "received"),
        // then wait for the agent and deliver it ourselves.
        let queue_id = self.enqueue(&message).await?;
        if suspended {
            self.runtime.queue_signal().notify_one();
            return Ok(single(vec![
                ResponseEvent::Queued { queue_id },
                ResponseEvent::Error {
                    kind: ErrorKind::Suspended,
                    message: "the agent is suspended; the message waits in its queue".into(),
                    batch_id: None,
                },
            ]));
        }
        self.set_waiting(queue_id, true);
        let _ = events.send(ResponseEvent::Queued { queue_id }).await;
        let this = self.clone();
        tokio::spawn(async move {
            let guard = this.run_lock.clone().lock_owned().await;
            let delivered = this.runtime.database().begin_queued(agent, queue_id).await;
            this.set_waiting(queue_id, false);
            match delivered {
                Ok(Some(d)) => this.run(guard, d.received, events).await,
                Ok(None) => {
                    events
                        .send(ResponseEvent::Error {
                            kind: ErrorKind::QueueEntryGone,
                            message: format!("queue entry {queue_id} was delivered elsewhere"),
                            batch_id: None,
                        })
                        .await;
                }
                Err(e) => {
                    // Still pending in the queue: the queue processor delivers it later.
                    events
                        .send(ResponseEvent::Error {
                            kind: ErrorKind::Storage,
                            message: e.to_string(),
                            batch_id: None,
                        })
                        .await;
                    this.runtime.queue_signal().notify_one();
                }
            }
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
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

/// Waits until `agent` holds no batch (for tests and orderly shutdown), at most `limit`.
pub async fn wait_idle(agent: &DatabaseAgent, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if agent.run_lock.try_lock().is_ok() {
            return true;
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
    false
}
