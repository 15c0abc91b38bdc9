//! Turn logs: a turn's [`ResponseEvent`]s as `pattern_db` stores them, and [`follow`], which
//! reads a turn's log from any process: the events after a cursor, then each new one as it is
//! committed, until the turn is over.
//!
//! The log is the truth about a turn: the events a run commits (with its steps, at its end, and
//! in between at least every [`FLUSH_EVERY`]), the lifecycle events `pattern_db` writes itself
//! (`queued`, `received`, and an `error` of kind `interrupted` when recovery abandons a dead
//! run's batch), with sequence numbers 1, 2, ... that never change. A follower registers for
//! the turn's wake-up before it reads and sleeps after (and wakes at least every `poll`, for
//! commits of other processes on SQLite), so it never misses an event and never sees one
//! twice. This module must never yield an event that is not committed, and never skip one it
//! cannot read (it yields the error instead).

use std::time::Duration;

use futures::Stream;
use pattern_db::{AgentId, Database, NewTurnEvent, TurnEvent, TurnId, TurnState, WakeKey};

use crate::agent::ResponseEvent;
use crate::error::{Error, Result};

/// Longest a run keeps streamed events before it commits them to the turn's log (they also go
/// with every step and with the end of the run). Adjacent text deltas committed together are
/// joined into one event.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Events read per query while following.
const PAGE: usize = 256;

/// An event as the log stores it.
pub fn encode(event: &ResponseEvent) -> Result<NewTurnEvent> {
    Ok(NewTurnEvent {
        kind: event.name().to_owned(),
        data: serde_json::to_string(event).map_err(|e| Error::TurnLog(e.to_string()))?,
    })
}

/// A stored event, read back.
pub fn decode(event: &TurnEvent) -> Result<ResponseEvent> {
    serde_json::from_str(&event.data).map_err(|e| {
        Error::TurnLog(format!(
            "event {} (`{}`) does not decode: {e}",
            event.seq, event.kind
        ))
    })
}

/// `events` with each run of adjacent text (and thinking) deltas joined into one event: what a
/// reader of the log sees is the same text in fewer events.
pub fn coalesce(events: Vec<ResponseEvent>) -> Vec<ResponseEvent> {
    let mut out: Vec<ResponseEvent> = Vec::with_capacity(events.len());
    for event in events {
        match (out.last_mut(), event) {
            (Some(ResponseEvent::TextDelta { text }), ResponseEvent::TextDelta { text: more }) => {
                text.push_str(&more);
            }
            (
                Some(ResponseEvent::ThinkingDelta { text }),
                ResponseEvent::ThinkingDelta { text: more },
            ) => text.push_str(&more),
            (_, event) => out.push(event),
        }
    }
    out
}

/// Follows `turn` of `agent` from after event `after`: `(sequence number, event)` in order,
/// ending after the turn's last event once it is finished. An unknown turn (or another agent's)
/// is an error item, then the end.
pub fn follow(
    db: Database,
    agent: AgentId,
    turn: TurnId,
    after: u64,
    poll: Duration,
) -> impl Stream<Item = Result<(u64, ResponseEvent)>> + Send + 'static {
    struct Cursor {
        db: Database,
        seen: u64,
        queue: std::collections::VecDeque<(u64, ResponseEvent)>,
        done: bool,
        /// The turn was found to be `agent`'s.
        owned: bool,
    }
    let start = Cursor {
        db,
        seen: after,
        queue: std::collections::VecDeque::new(),
        done: false,
        owned: false,
    };
    futures::stream::unfold(start, move |mut c| async move {
        loop {
            if let Some(item) = c.queue.pop_front() {
                return Some((Ok(item), c));
            }
            if c.done {
                return None;
            }
            let channel = c.db.hub().subscribe(WakeKey::Turn(turn));
            let notified = channel.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !c.owned {
                // Another agent's turn is not found, like an unknown one.
                if let Err(e) = c.db.turn(agent, turn).await {
                    c.done = true;
                    return Some((Err(e.into()), c));
                }
                c.owned = true;
            }
            let events = match c.db.turn_events(turn, c.seen, PAGE).await {
                Ok(events) => events,
                Err(e) => {
                    c.done = true;
                    return Some((Err(e.into()), c));
                }
            };
            if !events.is_empty() {
                for event in &events {
                    c.seen = event.seq;
                    match decode(event) {
                        Ok(decoded) => c.queue.push_back((event.seq, decoded)),
                        Err(e) => {
                            c.done = true;
                            return Some((Err(e), c));
                        }
                    }
                }
                continue;
            }
            // Nothing new: is the turn over? (Events committed after the read above show in
            // `last_seq`, and the loop reads them first.)
            let info = match c.db.turn(agent, turn).await {
                Ok(info) => info,
                Err(e) => {
                    c.done = true;
                    return Some((Err(e.into()), c));
                }
            };
            if info.state == TurnState::Finished && c.seen >= info.last_seq {
                return None;
            }
            if c.seen < info.last_seq {
                continue;
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pattern_db::SnowflakeId;

    #[test]
    fn adjacent_deltas_join() {
        let events = vec![
            ResponseEvent::TextDelta { text: "a".into() },
            ResponseEvent::TextDelta { text: "b".into() },
            ResponseEvent::ThinkingDelta { text: "x".into() },
            ResponseEvent::ThinkingDelta { text: "y".into() },
            ResponseEvent::TextDelta { text: "c".into() },
            ResponseEvent::StepCommitted {
                batch_id: SnowflakeId(1),
                messages: 1,
            },
        ];
        assert_eq!(
            coalesce(events),
            vec![
                ResponseEvent::TextDelta { text: "ab".into() },
                ResponseEvent::ThinkingDelta { text: "xy".into() },
                ResponseEvent::TextDelta { text: "c".into() },
                ResponseEvent::StepCommitted {
                    batch_id: SnowflakeId(1),
                    messages: 1,
                },
            ]
        );
    }

    #[test]
    fn the_lifecycle_events_pattern_db_writes_decode() {
        use pattern_db::runs::lifecycle;
        let received = pattern_db::Received {
            batch_id: SnowflakeId(42),
            message_id: pattern_db::MessageId::new(),
        };
        let stored = |e: NewTurnEvent| TurnEvent {
            seq: 1,
            kind: e.kind,
            data: e.data,
            created_at: chrono::Utc::now(),
        };
        assert_eq!(
            decode(&stored(lifecycle::queued(SnowflakeId(7)))).unwrap(),
            ResponseEvent::Queued {
                queue_id: SnowflakeId(7)
            }
        );
        assert_eq!(
            decode(&stored(lifecycle::received(&received))).unwrap(),
            ResponseEvent::Received {
                batch_id: received.batch_id,
                message_id: received.message_id
            }
        );
        let interrupted = decode(&stored(lifecycle::interrupted(Some(SnowflakeId(42))))).unwrap();
        assert_eq!(
            interrupted,
            ResponseEvent::Error {
                kind: crate::ErrorKind::Interrupted,
                message: lifecycle::INTERRUPTED_MESSAGE.into(),
                batch_id: Some(SnowflakeId(42)),
            }
        );
        // Every event round-trips, and its stored kind is its name.
        let e = ResponseEvent::ToolResult {
            call_id: "c".into(),
            content: "r".into(),
            is_error: false,
        };
        let encoded = encode(&e).unwrap();
        assert_eq!(encoded.kind, "tool_result");
        assert_eq!(decode(&stored(encoded)).unwrap(), e);
    }
}
