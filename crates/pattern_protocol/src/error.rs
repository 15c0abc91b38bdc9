//! The errors of `pattern_protocol`: [`Error`], the one type the handle returns, and
//! [`ProtocolError`], the protocol's own refusals (a session with oneself; the meetings': host,
//! speaker, state, participants).
//!
//! The protocol's refusals are raised inside the transaction that checks them, in a write run by
//! `pattern_db`'s writer, so they travel through it as
//! [`pattern_db::Error::Extension`] (the [`ProtocolError`], boxed, with its class) and
//! [`Error`]'s conversion takes them back: a caller of [`crate::Protocol`] matches
//! [`Error::Protocol`]. A caller of [`crate::store::Store`] gets `pattern_db`'s error and finds
//! the refusal with [`ProtocolError::of`]. What stays in `pattern_db` (organizations, the session
//! message store: out of turn, not a participant, ended) keeps `pattern_db::ProtocolError`'s
//! variants, wrapped in [`Error::Db`]; [`Error::is_out_of_turn`] and friends name the common
//! ones. This module must never print or log: callers decide what to show.

use pattern_db::storage::ExtensionError;
use pattern_db::{AgentId, ErrorClass, MeetingId};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer refused or failed (including the rules of what stays there:
    /// organizations, the session message store).
    #[error(transparent)]
    Db(pattern_db::Error),
    /// The protocol refused (a session with oneself, the meetings' rules).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// [`crate::Protocol::wait_for_turn`] was asked about an async session, which has no turns.
    #[error("session {0} is async: it has no turns to wait for")]
    NoTurns(pattern_db::SessionId),
}

impl From<pattern_db::Error> for Error {
    /// Takes the protocol's own refusals back out of the storage layer's error.
    fn from(e: pattern_db::Error) -> Self {
        match e {
            pattern_db::Error::Extension(ext) => match ext.downcast::<ProtocolError>() {
                Ok(refusal) => Error::Protocol(refusal),
                Err(ext) => Error::Db(pattern_db::Error::Extension(ext)),
            },
            other => Error::Db(other),
        }
    }
}

impl Error {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Db(e) => e.class(),
            Error::Protocol(e) => e.class(),
            Error::NoTurns(_) => ErrorClass::Invalid,
        }
    }

    /// Whether this is a sync session's refusal of an agent that does not hold the turn.
    pub fn is_out_of_turn(&self) -> bool {
        matches!(
            self,
            Error::Db(pattern_db::Error::Protocol(
                pattern_db::ProtocolError::OutOfTurn { .. }
            ))
        )
    }

    /// Whether the session has ended.
    pub fn is_session_ended(&self) -> bool {
        matches!(
            self,
            Error::Db(pattern_db::Error::Protocol(
                pattern_db::ProtocolError::SessionEnded(_)
            ))
        )
    }

    /// Whether the agent is not a participant of the session.
    pub fn is_not_participant(&self) -> bool {
        matches!(
            self,
            Error::Db(pattern_db::Error::Protocol(
                pattern_db::ProtocolError::NotParticipant { .. }
            ))
        )
    }
}

/// The protocol's own refusals: a session with oneself, and the meetings' rules (host, speaker,
/// state, participants). Raised inside a write (nothing stored, except an expired turn applied
/// first), they reach a caller of [`crate::Protocol`] as [`Error::Protocol`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A session needs two different agents.
    #[error("protocol agent {0} cannot open a session with itself")]
    SelfSession(AgentId),
    /// The meeting has ended: nothing more happens in it.
    #[error("meeting {0} has ended")]
    MeetingEnded(MeetingId),
    /// Only the meeting's host may do this.
    #[error("protocol agent {agent} is not the host of meeting {meeting}")]
    NotHost {
        /// The meeting.
        meeting: MeetingId,
        /// The agent that tried.
        agent: AgentId,
    },
    /// The agent has not joined the meeting (or has left it).
    #[error("protocol agent {agent} is not present in meeting {meeting}")]
    NotMeetingParticipant {
        /// The meeting.
        meeting: MeetingId,
        /// The agent.
        agent: AgentId,
    },
    /// The agent is already invited to or present in the meeting.
    #[error("protocol agent {agent} is already in meeting {meeting}")]
    AlreadyParticipant {
        /// The meeting.
        meeting: MeetingId,
        /// The agent.
        agent: AgentId,
    },
    /// Only the current speaker may speak or pass: nothing was stored.
    #[error("protocol agent {agent} cannot speak in meeting {meeting}: it is not the speaker")]
    NotSpeaker {
        /// The meeting.
        meeting: MeetingId,
        /// The agent that tried.
        agent: AgentId,
        /// Who speaks now.
        speaker: Option<AgentId>,
    },
    /// The meeting is not in a state that allows this (e.g. starting one that is not ready).
    #[error("meeting {meeting} is {status}; this needs it {needed}")]
    MeetingState {
        /// The meeting.
        meeting: MeetingId,
        /// Its status.
        status: &'static str,
        /// What the operation needs.
        needed: &'static str,
    },
}

impl ProtocolError {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            ProtocolError::MeetingEnded(_)
            | ProtocolError::NotHost { .. }
            | ProtocolError::NotMeetingParticipant { .. }
            | ProtocolError::AlreadyParticipant { .. }
            | ProtocolError::NotSpeaker { .. }
            | ProtocolError::MeetingState { .. } => ErrorClass::Conflict,
            ProtocolError::SelfSession(_) => ErrorClass::Invalid,
        }
    }

    /// The protocol's refusal inside a storage error, if it carries one (what a caller of
    /// [`crate::store::Store`] matches).
    pub fn of(e: &pattern_db::Error) -> Option<&ProtocolError> {
        match e {
            pattern_db::Error::Extension(ext) => ext.downcast_ref(),
            _ => None,
        }
    }
}

impl From<ProtocolError> for pattern_db::Error {
    /// Carries the refusal through `pattern_db`'s writer (see the module doc).
    fn from(e: ProtocolError) -> Self {
        let class = e.class();
        pattern_db::Error::Extension(ExtensionError::new(class, e))
    }
}
