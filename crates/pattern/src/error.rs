//! The one error type of the `pattern` facade: a lower layer's error, or the data directory that
//! could not be prepared. This module must never print or log: callers decide what to show.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while wiring the layers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer refused or failed (bad URL, connection, migration, ...).
    #[error(transparent)]
    Db(#[from] pattern_db::Error),
    /// The search layer (embedder, vector index) failed.
    #[error(transparent)]
    Search(#[from] db_v2::Error),
    /// The agent runtime refused or failed.
    #[error(transparent)]
    Core(Box<pattern_core::Error>),
    /// The agent-to-agent protocol failed to start.
    #[error(transparent)]
    Protocol(#[from] pattern_protocol::Error),
    /// The data directory could not be created or read.
    #[error("data directory `{path}`: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A model named for an agent is malformed (unknown provider, bad name or base URL).
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// A model cannot be reached from this process (no key, no local server).
    #[error("model unavailable: {0}")]
    ModelUnavailable(String),
    /// A path that cannot be turned into a database URL.
    #[error("path `{0}` is not valid UTF-8 and cannot name a database")]
    NonUtf8Path(PathBuf),
}

impl From<pattern_core::Error> for Error {
    fn from(e: pattern_core::Error) -> Self {
        Error::Core(Box::new(e))
    }
}

impl Error {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> pattern_db::ErrorClass {
        match self {
            Error::Db(e) => e.class(),
            Error::Search(e) => e.class(),
            Error::Core(e) => e.class(),
            Error::Protocol(e) => e.class(),
            Error::NonUtf8Path(_) | Error::InvalidModel(_) => pattern_db::ErrorClass::Invalid,
            Error::ModelUnavailable(_) => pattern_db::ErrorClass::Unavailable,
            Error::DataDir { .. } => pattern_db::ErrorClass::Internal,
        }
    }
}
