//! The one error type of `memory_v2`. It must never hide which block or agent a failure is about.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading or writing memory.
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
    /// The storage layer failed.
    #[error(transparent)]
    Db(#[from] pattern_db::Error),
}
