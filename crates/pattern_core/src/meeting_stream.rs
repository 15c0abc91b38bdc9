//! A meeting as it happens, agents' output included: [`follow`] merges the meeting's event log
//! (`pattern_protocol`'s [`Follower`]) with the turn log of each
//! speaker's run (the run a [`MeetingDriver`](crate::meeting::MeetingDriver) submits for the
//! turn, keyed `meeting:{id}:turn:{seq}:{attempt}`), from a [`MeetingCursor`] that resumes
//! exactly where a reader stopped.
//!
//! Order: a `turn_passed` event, then the output of that turn's runs (attempt 1, then 2), then
//! the meeting's next events. The output phase of a turn ends when its runs are over and the
//! meeting has moved past the turn, or when the meeting moved on and no run was ever started for
//! it (a meeting whose turns people take by hand). This module only reads: it must never change
//! a meeting or a turn, and never yield an event that is not committed.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use futures::Stream;
use pattern_db::{AgentId, MeetingId, TurnState};
use pattern_protocol::{Follower, Protocol};
use pattern_protocol::{MeetingEvent, MeetingEventType};
use serde::Serialize;

use crate::agent::ResponseEvent;
use crate::error::{Error, Result};

/// How often a turn in progress is read again for new output.
const OUTPUT_POLL: Duration = Duration::from_millis(100);
/// Turn-log events read per query.
const PAGE: usize = 256;
/// Runs a turn may have (the driver's attempts).
const ATTEMPTS: u32 = 2;

/// The idempotency key of the run of meeting `id`'s turn begun by event `seq`, attempt
/// `attempt` (1 or 2): the key [`crate::meeting::MeetingDriver`] submits the speaker's run with.
pub fn turn_key(id: MeetingId, seq: u64, attempt: u32) -> String {
    format!("meeting:{id}:turn:{seq}:{attempt}")
}

/// Where a reader stands: after meeting event `seq`, and, inside the output of the turn that
/// event began, after event `n` of attempt `attempt`. Written `S` or `S:A:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MeetingCursor {
    /// The last meeting event seen (0: none).
    pub seq: u64,
    /// Inside a turn's output: the attempt and the last turn-log event seen.
    pub output: Option<(u32, u64)>,
}

impl fmt::Display for MeetingCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.output {
            None => write!(f, "{}", self.seq),
            Some((attempt, n)) => write!(f, "{}:{attempt}:{n}", self.seq),
        }
    }
}

impl FromStr for MeetingCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidMeeting(format!(
                "`{text}` is not a meeting cursor (`SEQ` or `SEQ:ATTEMPT:N`)"
            ))
        };
        let mut parts = text.trim().split(':');
        let seq = parts
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(bad)?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => Ok(Self { seq, output: None }),
            (Some(a), Some(n), None) => {
                let attempt = a.parse::<u32>().ok().filter(|a| (1..=ATTEMPTS).contains(a));
                let n = n.parse::<u64>().ok();
                match (attempt, n) {
                    (Some(a), Some(n)) => Ok(Self {
                        seq,
                        output: Some((a, n)),
                    }),
                    _ => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }
}

/// One thing that happened in a meeting.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MeetingItem {
    /// An event of the meeting's log.
    Event {
        /// The event.
        event: MeetingEvent,
    },
    /// Output of the run of a speaker's turn, as its turn log stores it.
    Output {
        /// The speaker.
        speaker: AgentId,
        /// The `turn_passed` event that began the turn.
        turn: u64,
        /// The run's attempt (1, or 2 after a failed first run).
        attempt: u32,
        /// The event.
        event: ResponseEvent,
    },
}

/// The output phase of one turn.
struct Output {
    turn: u64,
    speaker: AgentId,
    attempt: u32,
    after: u64,
}

struct State {
    protocol: Protocol,
    meeting: MeetingId,
    follower: Follower,
    cursor: MeetingCursor,
    output: Option<Output>,
    ready: VecDeque<(MeetingCursor, MeetingItem)>,
    started: bool,
}

/// Follows meeting `id` from `cursor` until it ended and every turn's output was read. Each item
/// comes with the cursor that resumes right after it. A cursor inside a turn's output that the
/// log cannot place (its event is not a `turn_passed`) is an error.
pub fn follow(
    protocol: Protocol,
    id: MeetingId,
    cursor: MeetingCursor,
) -> impl Stream<Item = Result<(MeetingCursor, MeetingItem)>> + Send {
    let state = State {
        follower: protocol.follow(id, cursor.seq),
        protocol,
        meeting: id,
        cursor,
        output: None,
        ready: VecDeque::new(),
        started: false,
    };
    futures::stream::unfold(Some(state), |state| async move {
        let mut state = state?;
        match state.next().await {
            Ok(Some(item)) => Some((Ok(item), Some(state))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    })
}

impl State {
    async fn next(&mut self) -> Result<Option<(MeetingCursor, MeetingItem)>> {
        if !self.started {
            self.started = true;
            if self.cursor.output.is_some() {
                // Resuming inside a turn's output: the turn is the event at the cursor.
                self.output = Some(self.resume_output().await?);
            } else if self.cursor.seq > 0 {
                // A bare cursor after a `turn_passed` still owes that turn's output.
                self.output = self.turn_at(self.cursor.seq).await?;
            }
        }
        loop {
            if let Some(item) = self.ready.pop_front() {
                self.cursor = item.0;
                return Ok(Some(item));
            }
            if let Some(output) = self.output.take() {
                if let Some(output) = self.read_output(output).await? {
                    self.output = Some(output);
                    if self.ready.is_empty() {
                        tokio::time::sleep(OUTPUT_POLL).await;
                    }
                }
                continue;
            }
            let Some(event) = self.follower.next().await? else {
                return Ok(None);
            };
            let cursor = MeetingCursor {
                seq: event.seq,
                output: None,
            };
            if event.event_type == MeetingEventType::TurnPassed
                && let Some(speaker) = event.agent
            {
                self.output = Some(Output {
                    turn: event.seq,
                    speaker,
                    attempt: 1,
                    after: 0,
                });
            }
            self.ready.push_back((cursor, MeetingItem::Event { event }));
        }
    }

    /// The output phase of the turn begun by event `seq`, if that event began one.
    async fn turn_at(&self, seq: u64) -> Result<Option<Output>> {
        let events = self
            .protocol
            .events_after(self.meeting, seq.saturating_sub(1), 1)
            .await?;
        Ok(events
            .into_iter()
            .find(|e| e.seq == seq && e.event_type == MeetingEventType::TurnPassed)
            .and_then(|e| e.agent)
            .map(|speaker| Output {
                turn: seq,
                speaker,
                attempt: 1,
                after: 0,
            }))
    }

    async fn resume_output(&self) -> Result<Output> {
        let (attempt, after) = self.cursor.output.unwrap_or((1, 0));
        let turn = self.turn_at(self.cursor.seq).await?.ok_or_else(|| {
            Error::InvalidMeeting(format!(
                "cursor {}: event {} of meeting {} began no turn",
                self.cursor, self.cursor.seq, self.meeting
            ))
        })?;
        Ok(Output {
            attempt,
            after,
            ..turn
        })
    }

    /// Queues what the turn's current run stored since the last read; returns the phase to go on
    /// with, or `None` when the turn's output is complete.
    async fn read_output(&mut self, mut output: Output) -> Result<Option<Output>> {
        let db = self.protocol.db();
        let key = turn_key(self.meeting, output.turn, output.attempt);
        let run = db.turn_by_key(output.speaker, &key).await?;
        if let Some(run) = &run {
            let events = db.turn_events(run.id, output.after, PAGE).await?;
            for stored in &events {
                let event = crate::turn_log::decode(stored)?;
                output.after = stored.seq;
                self.ready.push_back((
                    MeetingCursor {
                        seq: output.turn,
                        output: Some((output.attempt, stored.seq)),
                    },
                    MeetingItem::Output {
                        speaker: output.speaker,
                        turn: output.turn,
                        attempt: output.attempt,
                        event,
                    },
                ));
            }
            if !events.is_empty() {
                return Ok(Some(output));
            }
        }
        let finished = run.as_ref().is_some_and(|r| r.state == TurnState::Finished);
        // Once the meeting moved past the turn, what its runs stored is all there is to read
        // (a run a dead process left is not waited for).
        let moved_on = self.protocol.meeting(self.meeting).await?.last_event_seq > output.turn;
        if run.is_some() && !finished && !moved_on {
            return Ok(Some(output));
        }
        // The run is over (or there is none): a second attempt may follow while the meeting
        // still stands at this turn.
        if output.attempt < ATTEMPTS {
            let next = turn_key(self.meeting, output.turn, output.attempt + 1);
            if db.turn_by_key(output.speaker, &next).await?.is_some() {
                output.attempt += 1;
                output.after = 0;
                return Ok(Some(output));
            }
        }
        if moved_on {
            return Ok(None);
        }
        Ok(Some(output))
    }
}
