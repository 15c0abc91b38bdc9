//! `pattern_protocol`: the agent-to-agent protocol of Pattern.
//!
//! Agents (the one identity of `pattern_db`: the agents the CLI and the HTTP API see) belong to
//! exactly one organization and talk in one-to-one sessions with agents of the same organization,
//! in the tables of `pattern_db`'s migrations (`0003_protocol`, participants as agents since
//! `0012`):
//!
//! - a **sync** session alternates strictly: the opener speaks first, only the agent holding the
//!   turn may send ([`ProtocolError::OutOfTurn`](pattern_db::ProtocolError::OutOfTurn), wrapped
//!   in [`Error::Db`], otherwise; nothing stored), and the turn passes to the other agent in the
//!   transaction that stores the message;
//! - an **async** session is an inbox: either agent sends whenever it likes;
//! - every session message lands unread in the other participant's inbox, in arrival order;
//!   [`Protocol::mark_read`] marks it read (only the recipient can, and marking twice is harmless).
//!
//! Meetings (migration `0005_meetings`) gather many agents: the host creates one (and joins),
//! others join (invited or not), the meeting is ready with two present, the host starts it, and
//! the speaker goes round-robin by join order, skipping those who left and wrapping around. Only
//! the speaker speaks ([`Protocol::speak`]) or passes; with a turn duration a silent speaker is
//! timed out (`agent_timed_out`) by the next write, by a waiter, or by
//! [`Protocol::sweep_timeouts`], even if nobody watched at that moment. The host ends it. Every
//! change is an event in the meeting's log with a dense sequence number:
//! [`Protocol::events_after`] reads after a cursor and [`Protocol::follow`] ([`Follower`]) waits
//! for new ones, without gaps or repeats across reconnects.
//!
//! [`Protocol`] is the handle: the operations above with the domain types, the seed's views as
//! queries ([`Protocol::active_conversations`], [`Protocol::active_meetings`],
//! [`Protocol::unread_per_agent`]), retention with a dry run ([`Protocol::retention`],
//! [`RetentionReport`]), and waiting without polling: [`Protocol::next_message`],
//! [`Protocol::wait_for_turn`] and [`Protocol::wait_for_meeting_turn`] sleep on a notifier that
//! writes through the same handle (or its clones) wake, and on PostgreSQL also writes of every
//! other process (`LISTEN/NOTIFY`; the `NOTIFY` is sent inside the write's transaction, so it
//! arrives after the commit). A waiter always checks the database before sleeping and again on
//! timeout, so nothing is missed.
//!
//! ```no_run
//! # async fn demo() -> pattern_protocol::Result<()> {
//! use std::time::Duration;
//! use pattern_protocol::{NewAgent, NewProtocolMessage, Protocol, SessionType};
//! let db = pattern_db::Database::open_url("sqlite:///tmp/pattern-protocol.db").await?;
//! let protocol = Protocol::new(db).await?;
//! let org = protocol.create_organization("acme", "Acme").await?;
//! let ada = protocol.create_agent(NewAgent::named("Ada").in_organization(org.id)).await?;
//! let bob = protocol.create_agent(NewAgent::named("Bob").in_organization(org.id)).await?;
//! let session = protocol.open_session(ada.id, bob.id, SessionType::Sync).await?;
//! protocol.send(session.id, ada.id, NewProtocolMessage::from_json_str("chat", r#""hi""#)?).await?;
//! if let Some(message) = protocol.next_message(bob.id, Duration::from_secs(5)).await? {
//!     protocol.mark_read(bob.id, &[message.id]).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The protocol's SQL is this crate's own, in one module, [`store`] (the only place here that
//! names `sqlx`), written through `pattern_db`'s writer by its public extension point
//! ([`pattern_db::storage`]); what other domains write in their own transactions (organizations,
//! the session message store a batch completion replies through, the wake-up channel) stays in
//! `pattern_db::protocol` (decision 0023). No other module of this crate may hold SQL.

mod error;
mod follow;
pub mod meeting;
mod notify;
mod protocol;
pub mod store;

pub use error::{Error, ProtocolError, Result};
pub use follow::Follower;
pub use meeting::{
    ActiveConversation, ActiveMeeting, MAX_TURN_DURATION, Meeting, MeetingEvent, MeetingEventType,
    MeetingPolicy, MeetingStatus, MeetingUpdate, Participant, ParticipantStatus, RetentionPolicy,
    RetentionReport, UnreadSummary,
};
pub use pattern_db::{
    Agent, AgentId, Delivery, MeetingId, NewAgent, NewProtocolMessage, Organization,
    OrganizationId, ProtocolMessage, ProtocolMessageId, Session, SessionId, SessionOptions,
    SessionStatus, SessionType,
};
pub use protocol::Protocol;
pub use store::{ListPage, Liveness, Store};
