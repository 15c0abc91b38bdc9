//! `pattern_protocol`: the agent-to-agent protocol of Pattern.
//!
//! Agents belong to organizations and talk in one-to-one sessions, stored by `pattern_db`
//! (migration `0003_protocol`):
//!
//! - a **sync** session alternates strictly: the opener speaks first, only the agent holding the
//!   turn may send ([`pattern_db::Error::OutOfTurn`], wrapped in [`Error::Db`], otherwise; nothing stored), and the turn passes to the
//!   other agent in the transaction that stores the message;
//! - an **async** session is an inbox: either agent sends whenever it likes;
//! - every session message lands unread in the other participant's inbox, in arrival order;
//!   [`Protocol::mark_read`] marks it read (only the recipient can, and marking twice is harmless).
//!
//! [`Protocol`] is the handle: the operations above with the domain types ([`Organization`],
//! [`ProtocolAgent`], [`Session`], [`SessionType`], [`ProtocolMessage`]), and waiting without
//! polling: [`Protocol::next_message`] and [`Protocol::wait_for_turn`] sleep on an in-process
//! notifier that sends made through the same handle (or its clones) wake. A waiter always checks
//! the database before sleeping and again on timeout, so nothing is missed; a send made by
//! another process is seen at the latest when the waiter's timeout expires.
//!
//! Not here yet: meetings and their event log, cross-process wake-ups (PostgreSQL
//! LISTEN/NOTIFY, which will wake the same notifier), and retention of old messages.
//!
//! ```no_run
//! # async fn demo() -> pattern_protocol::Result<()> {
//! use std::time::Duration;
//! use pattern_protocol::{NewProtocolAgent, NewProtocolMessage, Protocol, SessionType};
//! let db = pattern_db::Database::open_url("sqlite:///tmp/pattern-protocol.db").await?;
//! let protocol = Protocol::new(db);
//! let org = protocol.create_organization("acme", "Acme").await?;
//! let ada = protocol.create_agent(NewProtocolAgent {
//!     external_id: "ada".into(), organization: org.id, name: "Ada".into(), agent: None,
//! }).await?;
//! let bob = protocol.create_agent(NewProtocolAgent {
//!     external_id: "bob".into(), organization: org.id, name: "Bob".into(), agent: None,
//! }).await?;
//! let session = protocol.open_session(ada.id, bob.id, SessionType::Sync).await?;
//! protocol.send(session.id, ada.id, NewProtocolMessage::from_json_str("chat", r#""hi""#)?).await?;
//! if let Some(message) = protocol.next_message(bob.id, Duration::from_secs(5)).await? {
//!     protocol.mark_read(bob.id, &[message.id]).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! This crate must never name `sqlx` or hold SQL: storage is `pattern_db`'s.

mod error;
mod notify;
mod protocol;

pub use error::{Error, Result};
pub use pattern_db::{
    NewProtocolAgent, NewProtocolMessage, Organization, OrganizationId, ProtocolAgent,
    ProtocolAgentId, ProtocolMessage, ProtocolMessageId, Session, SessionId, SessionStatus,
    SessionType,
};
pub use protocol::Protocol;
