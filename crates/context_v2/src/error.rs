//! The one error type of `context_v2`.
//!
//! Every way a history can fail to become a request has its own variant, naming the batch and
//! tool call involved so a caller (or an operator reading a log) can find the damaged data. This
//! module must never print, log, or turn an error into a repaired history: callers decide.

use std::fmt;

use pattern_db::{BatchId, MessageId, Role};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while building context.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer failed.
    #[error(transparent)]
    Db(#[from] pattern_db::Error),

    /// A tool call is not followed by its result: the next message is not a result message, a
    /// result for an earlier call is still due when something else comes, or the sequence ends.
    #[error(
        "tool_use `{tool_use_id}` is not followed by its tool_result: providers reject a request \
         holding a call without its result"
    )]
    UnpairedToolCall {
        /// The call left without a result.
        tool_use_id: String,
    },

    /// A tool result answers no call that is waiting for it: the call is unknown, comes later,
    /// sits in the same message, or was answered already.
    #[error("tool_result for `{tool_use_id}` answers no preceding tool_use that waits for it")]
    OrphanToolResult {
        /// The call id the result names.
        tool_use_id: String,
    },

    /// The same tool call id appears twice in one request.
    #[error("tool_use id `{tool_use_id}` appears more than once in the request")]
    DuplicateToolUse {
        /// The repeated id.
        tool_use_id: String,
    },

    /// The results of one assistant message do not come in the order of its calls.
    #[error(
        "tool results out of call order: expected the result for `{expected}`, found `{found}`"
    )]
    ResultOutOfOrder {
        /// The call whose result is due next.
        expected: String,
        /// The call whose result came instead.
        found: String,
    },

    /// A batch that must be sent whole breaks the tool pairing rules of the store (imported or
    /// damaged data). It is refused rather than sent or repaired.
    #[error("batch {batch} is damaged: tool call `{tool_use_id}`: {damage}")]
    DamagedBatch {
        /// The batch.
        batch: BatchId,
        /// The call id involved.
        tool_use_id: String,
        /// What is wrong.
        damage: Damage,
    },

    /// The memory layer failed.
    #[error(transparent)]
    Memory(#[from] memory_v2::Error),
    /// A section that must never be cut (instructions and memory blocks, tools, the newest
    /// summary, the active batch) does not fit its budget or the window.
    #[error(
        "{section} need {tokens} tokens but only {budget} are available: raise the budget or the \
         model window, or shorten the {section}"
    )]
    OverBudget {
        /// Which section.
        section: &'static str,
        /// Tokens it needs.
        tokens: usize,
        /// Tokens it may use.
        budget: usize,
    },
    /// The configuration is inconsistent (e.g. the response reserve takes the whole window).
    #[error("invalid context configuration: {0}")]
    Config(String),
    /// Compression by summarization was asked for, but no summarizer was given.
    #[error("history must be compressed by summarization, but the builder has no summarizer")]
    NoSummarizer,
    /// The summarizer failed; nothing was archived.
    #[error("summarizer failed: {0}")]
    Summarizer(String),
    /// Two input batches carry the same id.
    #[error("batch {batch} is given twice")]
    DuplicateBatch {
        /// The repeated batch id.
        batch: BatchId,
    },

    /// A message was handed in under a batch it does not belong to.
    #[error("message {message} belongs to batch {message_batch} but was given in batch {batch}")]
    ForeignMessage {
        /// The batch it was given in.
        batch: BatchId,
        /// The message.
        message: MessageId,
        /// The batch the message names.
        message_batch: BatchId,
    },

    /// The request asks the model to call a tool it is not offered (or to call a tool when
    /// none is offered): every provider refuses such a request.
    #[error("tool choice `{tool}` names no tool of the request")]
    UnknownToolChoice {
        /// The tool asked for (`*` for "any tool" with no tools offered).
        tool: String,
    },

    /// A tokenizer could not be loaded: an unknown model name, or a tokenizer file that is
    /// missing or unreadable. Nothing is fetched from the network to make up for it.
    #[error("tokenizer {what} could not be loaded: {reason}")]
    Tokenizer {
        /// Which tokenizer: the model name, encoding, or file path asked for.
        what: String,
        /// Why it could not be loaded.
        reason: String,
    },
}

/// How a batch breaks the tool pairing rules; see [`Error::DamagedBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Damage {
    /// The call has no result, but the batch is complete (only the active, open batch may wait).
    UnansweredCall,
    /// A result for a call that does not come before it in the batch.
    ResultWithoutCall,
    /// The call id is used twice in the batch.
    DuplicateCall,
    /// The call has two results.
    DuplicateResult,
    /// A tool call in a message whose role is not `assistant`.
    CallInWrongRole(Role),
    /// A tool result in a message whose role is neither `user` nor `tool`.
    ResultInWrongRole(Role),
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::UnansweredCall => {
                f.write_str("the call has no result, but the batch is complete")
            }
            Damage::ResultWithoutCall => {
                f.write_str("a result comes without an earlier call in the batch")
            }
            Damage::DuplicateCall => f.write_str("the call id is used twice in the batch"),
            Damage::DuplicateResult => f.write_str("the call has more than one result"),
            Damage::CallInWrongRole(role) => {
                write!(f, "the call sits in a {} message", role.as_str())
            }
            Damage::ResultInWrongRole(role) => {
                write!(f, "the result sits in a {} message", role.as_str())
            }
        }
    }
}
