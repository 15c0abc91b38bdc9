//! [`Follower`]: reading a meeting's event log from a cursor, waiting for new events.
//!
//! The log's sequence numbers are dense and become visible in order (they are assigned under the
//! meeting's row lock), so reading "after the last seen number" never skips or repeats an event;
//! a follower that reconnects (a new `Follower` from the saved [`Follower::cursor`]) continues
//! exactly where it stopped. This module must never advance the cursor past an event it has not
//! handed out.

use std::collections::VecDeque;
use std::pin::pin;

use futures::Stream;
use pattern_db::MeetingId;

use crate::meeting::{MeetingEvent, MeetingEventType};

use crate::error::Result;
use crate::protocol::Protocol;

/// Events read per database round trip.
const PAGE: u32 = 256;

/// Follows one meeting's event log. `next` is cancel-safe: dropping its future loses nothing.
#[derive(Debug)]
pub struct Follower {
    protocol: Protocol,
    meeting: MeetingId,
    cursor: u64,
    buffer: VecDeque<MeetingEvent>,
    ended: bool,
}

impl Follower {
    pub(crate) fn new(protocol: Protocol, meeting: MeetingId, cursor: u64) -> Self {
        Self {
            protocol,
            meeting,
            cursor,
            buffer: VecDeque::new(),
            ended: false,
        }
    }

    /// The sequence number of the last event handed out (save it to resume later).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next event, waiting (without polling) until there is one; `None` once the
    /// `meeting_ended` event has been handed out and nothing follows it.
    pub async fn next(&mut self) -> Result<Option<MeetingEvent>> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                self.cursor = event.seq;
                if event.event_type == MeetingEventType::MeetingEnded {
                    self.ended = true;
                }
                return Ok(Some(event));
            }
            let channel = self.protocol.meeting_channel(self.meeting);
            let mut woken = pin!(channel.notified());
            woken.as_mut().enable();
            let page = self
                .protocol
                .events_after(self.meeting, self.cursor, PAGE)
                .await?;
            if !page.is_empty() {
                self.buffer.extend(page);
                continue;
            }
            if self.ended {
                return Ok(None);
            }
            woken.await;
        }
    }

    /// The events as a stream (ends after `meeting_ended`).
    pub fn into_stream(self) -> impl Stream<Item = Result<MeetingEvent>> {
        futures::stream::unfold(self, |mut follower| async move {
            match follower.next().await {
                Ok(Some(event)) => Some((Ok(event), follower)),
                Ok(None) => None,
                Err(e) => Some((Err(e), follower)),
            }
        })
    }
}
