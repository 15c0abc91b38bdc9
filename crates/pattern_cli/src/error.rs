//! The CLI's error: a one-line cause and the exit code its kind maps to.
//!
//! Exit codes (documented in `docs/cli.md`): 0 success, 1 other failure (I/O, database), 2 usage
//! or invalid input, 3 not found, 4 conflict (exists already, stale version, out of turn, ended),
//! 5 refused data (a value over its limit, a damaged or unsupported export file). This module
//! must never print: `main` prints the message once, to stderr.

use std::fmt;
use std::process::ExitCode;

use pattern::db::Error as DbError;
use pattern::memory::Error as MemoryError;

/// What kind of failure, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Anything else: I/O, the database, a bug.
    Other,
    /// Bad arguments or values.
    Usage,
    /// The named thing does not exist.
    NotFound,
    /// The thing exists already, or changed underneath, or the protocol refuses the order.
    Conflict,
    /// Data refused as it is: over a limit, damaged, or of an unsupported format.
    Refused,
}

impl Kind {
    /// The process exit code of this kind.
    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::Other => 1,
            Kind::Usage => 2,
            Kind::NotFound => 3,
            Kind::Conflict => 4,
            Kind::Refused => 5,
        }
    }
}

/// A failure of a command.
#[derive(Debug)]
pub(crate) struct CliError {
    /// Which kind.
    pub(crate) kind: Kind,
    /// The one-line cause.
    pub(crate) message: String,
}

/// Result alias for commands.
pub(crate) type Result<T, E = CliError> = std::result::Result<T, E>;

impl CliError {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Kind::Usage, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, message)
    }

    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Self::new(Kind::Refused, message)
    }

    pub(crate) fn other(message: impl Into<String>) -> Self {
        Self::new(Kind::Other, message)
    }

    /// The exit code.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.kind.code())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line: causes with newlines are folded.
        f.write_str(&self.message.replace('\n', " "))
    }
}

/// The message of an error and all its sources, `: `-joined, without repeating a source whose
/// text the outer message already contains.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// The kind of a storage error.
pub(crate) fn db_kind(e: &DbError) -> Kind {
    match e {
        DbError::AgentNotFound(_)
        | DbError::AgentNameNotFound(_)
        | DbError::BatchNotFound { .. }
        | DbError::BlockNotFound { .. }
        | DbError::ExternalIdNotFound { .. }
        | DbError::ProtocolNotFound { .. } => Kind::NotFound,
        DbError::AgentNameTaken(_)
        | DbError::VersionConflict { .. }
        | DbError::BlockLabelTaken { .. }
        | DbError::ExternalIdTaken { .. }
        | DbError::OutOfTurn { .. }
        | DbError::SessionEnded(_)
        | DbError::NotParticipant { .. }
        | DbError::NothingToUndo { .. }
        | DbError::InvalidBatchState { .. }
        | DbError::BatchNotOpen { .. }
        | DbError::MeetingEnded(_)
        | DbError::NotHost { .. }
        | DbError::NotMeetingParticipant { .. }
        | DbError::AlreadyParticipant { .. }
        | DbError::NotSpeaker { .. }
        | DbError::MeetingState { .. } => Kind::Conflict,
        DbError::BlockOverLimit { .. }
        | DbError::ContentTooLarge { .. }
        | DbError::PermissionDenied { .. } => Kind::Refused,
        DbError::InvalidUrl { .. }
        | DbError::Config(_)
        | DbError::InvalidId { .. }
        | DbError::InvalidBlockLabel { .. }
        | DbError::InvalidBlock(_)
        | DbError::InvalidContent(_)
        | DbError::InvalidProtocolMessage(_)
        | DbError::InvalidArchival(_)
        | DbError::InvalidSearch(_)
        | DbError::SelfSession(_) => Kind::Usage,
        _ => Kind::Other,
    }
}

impl From<DbError> for CliError {
    fn from(e: DbError) -> Self {
        Self::new(db_kind(&e), chain(&e))
    }
}

impl From<MemoryError> for CliError {
    fn from(e: MemoryError) -> Self {
        let kind = match &e {
            MemoryError::UnknownBlock { .. } => Kind::NotFound,
            MemoryError::Conflict { .. }
            | MemoryError::LabelTaken { .. }
            | MemoryError::NothingToUndo { .. } => Kind::Conflict,
            MemoryError::OverLimit { .. }
            | MemoryError::PermissionDenied { .. }
            | MemoryError::NeedsApproval { .. } => Kind::Refused,
            MemoryError::TextNotFound { .. }
            | MemoryError::LineOutOfRange { .. }
            | MemoryError::Invalid(_) => Kind::Usage,
            MemoryError::Db(db) => db_kind(db),
            _ => Kind::Other,
        };
        Self::new(kind, chain(&e))
    }
}

impl From<pattern::protocol::Error> for CliError {
    fn from(e: pattern::protocol::Error) -> Self {
        match e {
            pattern::protocol::Error::Db(db) => db.into(),
            other => Self::new(Kind::Conflict, chain(&other)),
        }
    }
}

impl From<pattern::Error> for CliError {
    fn from(e: pattern::Error) -> Self {
        match e {
            pattern::Error::Db(db) => db.into(),
            pattern::Error::NonUtf8Path(_) => Self::usage(e.to_string()),
            other => Self::other(chain(&other)),
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        Self::other(format!("JSON: {e}"))
    }
}

/// An I/O error about `path`, as a CLI error (a missing file is "not found").
pub(crate) fn io(path: &std::path::Path, e: &std::io::Error) -> CliError {
    let kind = if e.kind() == std::io::ErrorKind::NotFound {
        Kind::NotFound
    } else {
        Kind::Other
    };
    CliError::new(kind, format!("{}: {e}", path.display()))
}
