//! Turns in flight and just finished: each turn's events, kept in order so that any number of
//! clients can follow it and a client that lost its connection can resume from the last event id
//! it saw.
//!
//! A turn runs in its own task, detached from the request that started it: a client going away
//! neither cancels the turn nor loses its result (the agent keeps committing steps). Only
//! [`Turn::cancel`] cancels. A finished turn's events stay replayable for the registry's replay
//! window; after that, what the turn did is read from its stored batch. Event ids are 1-based
//! positions in the turn's event list. A turn started with an idempotency key is found again by
//! that key for as long as it is replayable. This module must never reorder, drop or invent events,
//! except the one `error` event that reports a cancellation it caused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use pattern::AgentId;
use pattern::core::{ErrorKind, ResponseEvent, ResponseStream};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

/// One turn's event log.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The turn's id (UUID v7).
    pub(crate) id: Uuid,
    /// The agent it runs on.
    pub(crate) agent: AgentId,
    log: Mutex<Log>,
    /// The number of events so far; changes wake followers.
    count: watch::Sender<usize>,
    cancel: Notify,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<ResponseEvent>,
    finished_at: Option<Instant>,
}

/// What a follower reads: events after a position, and whether more can come.
#[derive(Debug)]
pub(crate) struct Slice {
    /// `(id, event)` pairs, ids consecutive.
    pub(crate) events: Vec<(usize, ResponseEvent)>,
    /// No event will follow these.
    pub(crate) finished: bool,
}

impl Turn {
    fn new(agent: AgentId) -> Self {
        Self {
            id: Uuid::now_v7(),
            agent,
            log: Mutex::new(Log::default()),
            count: watch::Sender::new(0),
            cancel: Notify::new(),
        }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, event: ResponseEvent) {
        let count = {
            let mut log = self.log();
            log.events.push(event);
            log.events.len()
        };
        self.count.send_replace(count);
    }

    fn finish(&self) {
        let count = {
            let mut log = self.log();
            log.finished_at = Some(Instant::now());
            log.events.len()
        };
        // Wake followers even when no event came with the end.
        self.count.send_replace(count);
    }

    /// Events with ids above `after`.
    pub(crate) fn after(&self, after: usize) -> Slice {
        let log = self.log();
        let events = log
            .events
            .iter()
            .enumerate()
            .skip(after)
            .map(|(i, e)| (i + 1, e.clone()))
            .collect();
        Slice {
            events,
            finished: log.finished_at.is_some(),
        }
    }

    /// Every event so far, and whether the turn is over.
    pub(crate) fn snapshot(&self) -> (Vec<ResponseEvent>, bool) {
        let log = self.log();
        (log.events.clone(), log.finished_at.is_some())
    }

    /// Waits until there are more than `seen` events or the turn is over.
    pub(crate) async fn changed(&self, seen: usize) {
        let mut rx = self.count.subscribe();
        loop {
            if *rx.borrow_and_update() > seen || self.log().finished_at.is_some() {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits for the end of the turn and returns all its events.
    pub(crate) async fn finished(&self) -> Vec<ResponseEvent> {
        loop {
            let (events, done) = self.snapshot();
            if done {
                return events;
            }
            self.changed(events.len()).await;
        }
    }

    /// Asks the turn to stop; its batch is abandoned and the user message stays stored.
    pub(crate) fn cancel(&self) {
        self.cancel.notify_one();
    }

    fn expired(&self, window: Duration) -> bool {
        self.log()
            .finished_at
            .is_some_and(|at| at.elapsed() > window)
    }
}

/// Every turn still replayable.
#[derive(Debug)]
pub(crate) struct Turns {
    turns: Mutex<HashMap<Uuid, Arc<Turn>>>,
    /// Idempotency keys of turns still replayable: (agent, key) -> (body fingerprint, turn).
    keys: Mutex<HashMap<(AgentId, String), (u64, Uuid)>>,
    /// Held while a turn with an idempotency key starts, so two requests with one key never
    /// both start a turn.
    keyed_start: tokio::sync::Mutex<()>,
    replay_window: Duration,
}

impl Turns {
    pub(crate) fn new(replay_window: Duration) -> Self {
        Self {
            turns: Mutex::new(HashMap::new()),
            keys: Mutex::new(HashMap::new()),
            keyed_start: tokio::sync::Mutex::new(()),
            replay_window,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Arc<Turn>>> {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts following `stream` (whose trigger is already stored) as a new turn of `agent`.
    pub(crate) fn start(&self, agent: AgentId, stream: ResponseStream) -> Arc<Turn> {
        let turn = Arc::new(Turn::new(agent));
        {
            let mut map = self.map();
            map.retain(|_, t| !t.expired(self.replay_window));
            map.insert(turn.id, turn.clone());
            self.keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|_, (_, id)| map.contains_key(id));
        }
        tokio::spawn(run(turn.clone(), stream));
        turn
    }

    /// The turn `id` of `agent`, if it is still replayable.
    pub(crate) fn get(&self, agent: AgentId, id: Uuid) -> Option<Arc<Turn>> {
        let map = self.map();
        map.get(&id)
            .filter(|t| t.agent == agent && !t.expired(self.replay_window))
            .cloned()
    }

    /// Serialises the start of turns that carry an idempotency key.
    pub(crate) async fn keyed_start(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.keyed_start.lock().await
    }

    /// The replayable turn `agent` started with idempotency `key`, and its body fingerprint.
    pub(crate) fn by_key(&self, agent: AgentId, key: &str) -> Option<(u64, Arc<Turn>)> {
        let found = self
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(agent, key.to_owned()))
            .copied();
        let (fingerprint, id) = found?;
        self.get(agent, id).map(|turn| (fingerprint, turn))
    }

    /// Remembers that `turn` was started with idempotency `key`.
    pub(crate) fn remember(&self, turn: &Turn, key: String, fingerprint: u64) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((turn.agent, key), (fingerprint, turn.id));
    }

    /// Cancels every running turn (server shutdown): their batches are abandoned, so recovery
    /// has nothing to wait for.
    pub(crate) fn cancel_all(&self) {
        for turn in self.map().values() {
            turn.cancel();
        }
    }
}

/// Moves the agent's events into the turn's log until the stream ends or the turn is cancelled.
async fn run(turn: Arc<Turn>, mut stream: ResponseStream) {
    let mut batch = None;
    loop {
        tokio::select! {
            biased;
            () = turn.cancel.notified() => {
                // Dropping the stream is how a caller cancels: the agent abandons the batch.
                drop(stream);
                turn.push(ResponseEvent::Error {
                    kind: ErrorKind::Cancelled,
                    message: "the turn was cancelled; the message stays stored".into(),
                    batch_id: batch,
                });
                break;
            }
            event = stream.next() => match event {
                Some(event) => {
                    match &event {
                        ResponseEvent::Received { batch_id, .. } => batch = Some(*batch_id),
                        // The cause of a failure is logged here, once per turn; clients get a
                        // stable code and, for storage and context failures, a generic message.
                        ResponseEvent::Error { kind, message, batch_id } => tracing::warn!(
                            turn = %turn.id, agent = %turn.agent.0, ?kind,
                            batch = ?batch_id.or(batch).map(|b| b.to_string()),
                            cause = %message, "a turn failed"),
                        _ => {}
                    }
                    turn.push(event);
                }
                None => break,
            },
        }
    }
    turn.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use pattern::SnowflakeId;
    use pattern::core::DoneReason;

    fn agent() -> AgentId {
        AgentId(Uuid::now_v7())
    }

    #[tokio::test]
    async fn followers_see_every_event_in_order_and_resume_after_an_id() {
        let turns = Turns::new(Duration::from_secs(60));
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let stream: ResponseStream = Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        let a = agent();
        let turn = turns.start(a, stream);
        tx.send(ResponseEvent::TextDelta { text: "a".into() })
            .await
            .unwrap();
        tx.send(ResponseEvent::TextDelta { text: "b".into() })
            .await
            .unwrap();
        turn.changed(1).await;
        let done = ResponseEvent::Done {
            batch_id: SnowflakeId(7),
            reason: DoneReason::Completed,
        };
        tx.send(done.clone()).await.unwrap();
        drop(tx);
        let all = turn.finished().await;
        assert_eq!(all.len(), 3);
        let rest = turn.after(1);
        assert!(rest.finished);
        assert_eq!(
            rest.events.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(rest.events[1].1, done);
        assert!(turns.get(a, turn.id).is_some());
        assert!(
            turns.get(agent(), turn.id).is_none(),
            "another agent's turn"
        );
    }

    #[tokio::test]
    async fn cancelling_ends_the_turn_with_one_cancelled_error() {
        let turns = Turns::new(Duration::from_secs(60));
        let (tx, rx) = tokio::sync::mpsc::channel::<ResponseEvent>(8);
        let turn = turns.start(
            agent(),
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)),
        );
        turn.cancel();
        let events = turn.finished().await;
        assert!(matches!(
            events.as_slice(),
            [ResponseEvent::Error {
                kind: ErrorKind::Cancelled,
                ..
            }]
        ));
        assert!(tx.is_closed(), "the agent's stream was dropped");
    }

    #[tokio::test]
    async fn finished_turns_expire_after_the_replay_window() {
        let turns = Turns::new(Duration::from_millis(10));
        let (tx, rx) = tokio::sync::mpsc::channel::<ResponseEvent>(1);
        drop(tx);
        let a = agent();
        let turn = turns.start(a, Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)));
        turn.finished().await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(turns.get(a, turn.id).is_none());
    }
}
