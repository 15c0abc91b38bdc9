//! The one error type of `pattern_protocol`.
//!
//! The protocol's refusals (out of turn, not a participant, ended session, unknown ids, invalid
//! content) are raised by the storage layer inside the transaction that checks them, so they
//! arrive as [`pattern_db::Error`] variants; [`Error::is_out_of_turn`] and friends name the common
//! ones. This module must never print or log: callers decide what to show.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer refused or failed (including every protocol rule it checks).
    #[error(transparent)]
    Db(#[from] pattern_db::Error),
    /// [`crate::Protocol::wait_for_turn`] was asked about an async session, which has no turns.
    #[error("session {0} is async: it has no turns to wait for")]
    NoTurns(pattern_db::SessionId),
}

impl Error {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> pattern_db::ErrorClass {
        match self {
            Error::Db(e) => e.class(),
            Error::NoTurns(_) => pattern_db::ErrorClass::Invalid,
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
