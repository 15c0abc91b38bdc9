//! The one error type of `pattern_core`.
//!
//! Lower layers' errors are wrapped as variants; provider failures carry a [`ProviderError`] that
//! says whether a retry can help. This module must never log, retry or repair: callers decide.

use crate::provider::ProviderError;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while an agent runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer failed.
    #[error(transparent)]
    Db(#[from] pattern_db::Error),

    /// Memory (blocks, archival, search) failed.
    #[error(transparent)]
    Memory(#[from] memory_v2::Error),

    /// Context building failed.
    #[error(transparent)]
    Context(#[from] context_v2::Error),

    /// A model provider failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),

    /// A tool (or a rule about one) cannot be registered.
    #[error("tool `{name}` refused: {reason}")]
    InvalidTool {
        /// The tool's name.
        name: String,
        /// Why.
        reason: String,
    },

    /// A message has nowhere to go.
    #[error("no endpoint for {0}")]
    NoEndpoint(String),

    /// An endpoint failed to deliver.
    #[error(transparent)]
    Endpoint(#[from] crate::endpoint::EndpointError),

    /// The local model server could not be started.
    #[error(transparent)]
    LocalServer(#[from] crate::local_server::LocalServerError),

    /// The agent-to-agent protocol refused or failed.
    #[error(transparent)]
    Protocol(#[from] pattern_protocol::Error),
    /// A task of the runtime ended without an answer (it panicked or was cancelled).
    #[error("internal task failed: {0}")]
    TaskFailed(String),
    /// A meeting that cannot be run as asked (a bad plan, an agent not driven here).
    #[error("meeting: {0}")]
    InvalidMeeting(String),
    /// No archival memory or search is configured for this agent.
    #[error("this agent has no archival memory or search configured")]
    SearchNotConfigured,

    /// An MCP server's configuration is not usable (decision 0015).
    #[error("invalid MCP server configuration: {0}")]
    InvalidMcpConfig(String),

    /// An MCP server could not be started, reached or understood.
    #[error("MCP server `{server}`: {reason}")]
    Mcp {
        /// The server's name.
        server: String,
        /// What went wrong.
        reason: String,
    },

    /// The agent cannot take this state change now.
    #[error("invalid agent state change: {0}")]
    InvalidState(String),

    /// A turn's stored event could not be written or read back.
    #[error("turn log: {0}")]
    TurnLog(String),
}

impl Error {
    /// Whether the run's claim on its agent was taken over ([`pattern_db::RunError::ClaimLost`]):
    /// the run was interrupted, not failed.
    pub(crate) fn is_claim_lost(&self) -> bool {
        matches!(
            self,
            Error::Db(pattern_db::Error::Run(
                pattern_db::RunError::ClaimLost { .. }
            ))
        )
    }

    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> pattern_db::ErrorClass {
        use pattern_db::ErrorClass as C;
        match self {
            Error::Db(e) => e.class(),
            Error::Memory(e) => e.class(),
            Error::Context(_) | Error::SearchNotConfigured => C::Refused,
            Error::Provider(_) | Error::NoEndpoint(_) | Error::Endpoint(_) => C::Unavailable,
            Error::InvalidTool { .. } | Error::InvalidMcpConfig(_) | Error::InvalidMeeting(_) => {
                C::Invalid
            }
            Error::Mcp { .. } => C::Unavailable,
            Error::Protocol(e) => e.class(),
            Error::InvalidState(_) => C::Conflict,
            Error::LocalServer(_) | Error::TurnLog(_) | Error::TaskFailed(_) => C::Internal,
        }
    }
}
