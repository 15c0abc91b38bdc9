//! The CLI's error: a one-line cause and the exit code its kind maps to.
//!
//! Exit codes (documented in `docs/cli.md`): 0 success, 1 other failure (I/O, database), 2 usage
//! or invalid input, 3 not found, 4 conflict (exists already, stale version, out of turn, ended),
//! 5 refused data (a value over its limit, a damaged or unsupported export file), 130 a turn
//! cancelled by Ctrl-C. This module must never print: `main` prints the message once, to stderr.

use std::fmt;
use std::process::ExitCode;

use pattern::ErrorClass;
use pattern::db::Error as DbError;
use pattern::memory::Error as MemoryError;
use pattern_api::one_line as chain;

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
    /// Interrupted by Ctrl-C (128 + SIGINT, as shells report it).
    Interrupted,
    /// Everything ran, but the agent did not do what it was asked (`demo`: it did not store
    /// or did not recall the fact).
    AgentFailed,
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
            Kind::AgentFailed => 6,
            Kind::Interrupted => 130,
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

    pub(crate) fn interrupted(message: impl Into<String>) -> Self {
        Self::new(Kind::Interrupted, message)
    }

    pub(crate) fn agent_failed(message: impl Into<String>) -> Self {
        Self::new(Kind::AgentFailed, message)
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

/// The exit kind of an error class (shared with the HTTP server's statuses).
pub(crate) fn class_kind(class: ErrorClass) -> Kind {
    match class {
        ErrorClass::NotFound => Kind::NotFound,
        ErrorClass::Conflict => Kind::Conflict,
        ErrorClass::Refused => Kind::Refused,
        ErrorClass::Invalid => Kind::Usage,
        _ => Kind::Other,
    }
}

impl From<DbError> for CliError {
    fn from(e: DbError) -> Self {
        Self::new(class_kind(e.class()), chain(&e))
    }
}

impl From<MemoryError> for CliError {
    fn from(e: MemoryError) -> Self {
        Self::new(class_kind(e.class()), chain(&e))
    }
}

impl From<pattern::protocol::Error> for CliError {
    fn from(e: pattern::protocol::Error) -> Self {
        Self::new(class_kind(e.class()), chain(&e))
    }
}

impl From<pattern::core::Error> for CliError {
    fn from(e: pattern::core::Error) -> Self {
        Self::new(class_kind(e.class()), chain(&e))
    }
}

impl From<pattern::Error> for CliError {
    fn from(e: pattern::Error) -> Self {
        Self::new(class_kind(e.class()), chain(&e))
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
