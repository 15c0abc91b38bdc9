//! The one error type of `memory_v2`. It must never hide which block or agent a failure is about.

use crate::block::Permission;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading or writing memory. Every refusal an agent can act on has its own
/// variant with the facts it needs (the block, the numbers, the permission).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No block with this label is visible to the agent.
    #[error("no memory block labelled `{label}` for agent {agent}")]
    UnknownBlock {
        /// The agent.
        agent: pattern_db::AgentId,
        /// The label asked for.
        label: String,
    },
    /// A value longer than the block's limit (never cut to fit).
    #[error("block `{label}` holds at most {limit} characters; the new value has {chars}")]
    OverLimit {
        /// The block.
        label: String,
        /// Characters in the rejected value.
        chars: usize,
        /// The block's limit.
        limit: usize,
    },
    /// The block changed since the version the change was based on: read it again and redo.
    #[error(
        "block `{label}` is at version {current}, not {expected}: read it again and redo the change"
    )]
    Conflict {
        /// The block.
        label: String,
        /// The version the change expected.
        expected: i64,
        /// The version stored.
        current: i64,
    },
    /// The agent's permission does not allow this change.
    #[error("permission `{}` on block `{label}` does not allow {operation}", permission.as_str())]
    PermissionDenied {
        /// The block.
        label: String,
        /// The agent's permission.
        permission: Permission,
        /// What was attempted.
        operation: &'static str,
    },
    /// The change is allowed only with a human's approval; call again with
    /// [`WriteAuth::Approved`](crate::WriteAuth::Approved) once it is given.
    #[error("changing block `{label}` needs approval (permission `{}`)", permission.as_str())]
    NeedsApproval {
        /// The block.
        label: String,
        /// The agent's permission (`partner` or `human`).
        permission: Permission,
    },
    /// The text to replace is not in the block.
    #[error("block `{label}` does not contain the text to replace: {text:?}")]
    TextNotFound {
        /// The block.
        label: String,
        /// The text looked for.
        text: String,
    },
    /// An insert position past the end of the block.
    #[error("block `{label}` has {lines} lines; cannot insert as line {line}")]
    LineOutOfRange {
        /// The block.
        label: String,
        /// The position asked for (0-based).
        line: usize,
        /// Lines the block has.
        lines: usize,
    },
    /// The block has no earlier version to go back to.
    #[error("block `{label}` is at its first version: nothing to undo")]
    NothingToUndo {
        /// The block.
        label: String,
    },
    /// The agent already sees a block under this label.
    #[error("agent {agent} already has a memory block labelled `{label}`")]
    LabelTaken {
        /// The agent.
        agent: pattern_db::AgentId,
        /// The label.
        label: String,
    },
    /// A malformed label, limit or other block field.
    #[error("invalid memory block request: {0}")]
    Invalid(String),
    /// No archival passage with this id for this agent.
    #[error("no archival passage {id} for agent {agent}")]
    UnknownPassage {
        /// The agent.
        agent: pattern_db::AgentId,
        /// The passage id asked for.
        id: pattern_db::ArchivalId,
    },
    /// A document larger than the ingestion limit; nothing of it was read past the limit.
    #[error("{path} is {bytes} bytes; documents over {max} bytes are refused (split it first)")]
    DocumentTooLarge {
        /// The document.
        path: String,
        /// Its size (at least this many bytes).
        bytes: u64,
        /// The limit ([`crate::ingest::MAX_DOCUMENT_BYTES`]).
        max: u64,
    },
    /// A document that cannot be opened or read.
    #[error("cannot read {path}: {reason}")]
    DocumentUnreadable {
        /// The document.
        path: String,
        /// What the system said.
        kind: std::io::ErrorKind,
        /// The message.
        reason: String,
    },
    /// A file of a kind ingestion does not take (by extension), or not a regular file.
    #[error("{path}: {reason}")]
    UnsupportedDocument {
        /// The document.
        path: String,
        /// Why, naming the kinds that are taken.
        reason: String,
    },
    /// A text, Markdown or HTML document that is not UTF-8 text (a binary file, another
    /// encoding).
    #[error("{path} is not UTF-8 text (byte {offset} is not): a binary file or another encoding")]
    NotText {
        /// The document.
        path: String,
        /// Offset of the first byte that is not text.
        offset: usize,
    },
    /// A PDF that cannot be parsed.
    #[error("{path} is not a readable PDF: {reason}")]
    CorruptDocument {
        /// The document.
        path: String,
        /// What the parser said.
        reason: String,
    },
    /// A PDF whose pages carry no text (scanned images): it would need OCR first.
    #[error("{path} has {pages} page(s) but no text layer (scanned?): run OCR on it first")]
    NoTextLayer {
        /// The document.
        path: String,
        /// Pages in it.
        pages: usize,
    },
    /// A document with no text at all.
    #[error("{path} holds no text")]
    EmptyDocument {
        /// The document.
        path: String,
    },
    /// Search or embedding failed (empty query, vector search without an embedder, ...).
    #[error(transparent)]
    Search(db_v2::Error),
    /// The storage layer failed.
    #[error(transparent)]
    Db(pattern_db::Error),
}

impl From<db_v2::Error> for Error {
    /// Storage errors keep their block and passage variants; the rest are [`Error::Search`].
    fn from(e: db_v2::Error) -> Self {
        match e {
            db_v2::Error::Db(inner) => inner.into(),
            other => Error::Search(other),
        }
    }
}

impl From<pattern_db::Error> for Error {
    /// Maps the storage layer's block refusals to this crate's variants, keeping their facts.
    fn from(e: pattern_db::Error) -> Self {
        use pattern_db::Error as D;
        match e {
            D::Block(pattern_db::BlockError::NotFound { agent, label }) => {
                Error::UnknownBlock { agent, label }
            }
            D::Block(pattern_db::BlockError::OverLimit {
                label,
                chars,
                limit,
            }) => Error::OverLimit {
                label,
                chars,
                limit,
            },
            D::Block(pattern_db::BlockError::VersionConflict {
                label,
                expected,
                current,
            }) => Error::Conflict {
                label,
                expected,
                current,
            },
            D::Block(pattern_db::BlockError::PermissionDenied { label, permission }) => {
                match permission.parse::<Permission>() {
                    Ok(permission) => Error::PermissionDenied {
                        label,
                        permission,
                        operation: "this change",
                    },
                    Err(e) => e,
                }
            }
            D::Block(pattern_db::BlockError::LabelTaken { agent, label }) => {
                Error::LabelTaken { agent, label }
            }
            D::Block(pattern_db::BlockError::NothingToUndo { label, .. }) => {
                Error::NothingToUndo { label }
            }
            D::Block(pattern_db::BlockError::InvalidLabel { label, reason }) => {
                Error::Invalid(format!("label `{label}`: {reason}"))
            }
            D::Block(pattern_db::BlockError::Invalid(reason)) => Error::Invalid(reason),
            D::Archival(pattern_db::ArchivalError::NotFound { agent, id }) => {
                Error::UnknownPassage { agent, id }
            }
            D::Archival(pattern_db::ArchivalError::Invalid(reason)) => Error::Invalid(reason),
            other => Error::Db(other),
        }
    }
}

impl Error {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> pattern_db::ErrorClass {
        use pattern_db::ErrorClass as C;
        match self {
            Error::UnknownBlock { .. } | Error::UnknownPassage { .. } => C::NotFound,
            Error::Conflict { .. } | Error::LabelTaken { .. } | Error::NothingToUndo { .. } => {
                C::Conflict
            }
            Error::OverLimit { .. }
            | Error::PermissionDenied { .. }
            | Error::NeedsApproval { .. } => C::Refused,
            Error::TextNotFound { .. } | Error::LineOutOfRange { .. } | Error::Invalid(_) => {
                C::Invalid
            }
            Error::DocumentTooLarge { .. } => C::Refused,
            Error::DocumentUnreadable { kind, .. } => match kind {
                std::io::ErrorKind::NotFound => C::NotFound,
                std::io::ErrorKind::PermissionDenied => C::Refused,
                _ => C::Unavailable,
            },
            Error::UnsupportedDocument { .. }
            | Error::NotText { .. }
            | Error::CorruptDocument { .. }
            | Error::NoTextLayer { .. }
            | Error::EmptyDocument { .. } => C::Invalid,
            Error::Search(e) => e.class(),
            Error::Db(e) => e.class(),
        }
    }
}
