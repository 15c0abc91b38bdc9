//! `context_v2`: builds a model request from an agent's memory and stored batches.
//!
//! - [`ContextBuilder`] reads memory blocks (through `memory_v2::MemoryStore`), the newest
//!   summary and the latest batches, counts every section with a [`TokenCounter`], compresses
//!   history that does not fit (whole batches, committed through `pattern_db`), and returns a
//!   provider-neutral [`MemoryContext`] that fits the window.
//! - [`assemble()`] turns [`pattern_db::StoredBatch`]es into a sequence of [`ContextMessage`]s
//!   (whole batches in id order; abandoned and crashed batches left out; tool results moved right
//!   after their calls; the active batch cut before a call whose tool is still running), and
//!   [`validate()`] checks, on every request, that no tool call travels without its result, the
//!   failure that otherwise bricks an agent ("tool_use ids were found without tool_result
//!   blocks").
//! - [`format`](mod@format) shapes the Anthropic, OpenAI and Gemini request bodies; [`inspect`] renders
//!   batches for debugging.
//!
//! ```
//! use context_v2::{assemble, validate};
//!
//! let history = assemble(&[], None)?;
//! assert!(history.messages.is_empty());
//! validate(&history.messages)?;
//! # Ok::<(), context_v2::Error>(())
//! ```
//!
//! This crate must never invent history (no synthesised tool results), never hand out a message
//! sequence that has not passed [`validate()`], never talk to a provider (it shapes request
//! bodies; HTTP, keys and streaming belong to `pattern_core`), and never name a database driver:
//! it reads [`pattern_db`]'s types and writes only through its `MessageStore`.

mod assemble;
mod builder;
pub mod compress;
mod error;
pub mod format;
pub mod inspect;
pub mod tokens;
mod types;
mod validate;

pub use assemble::{AssembledHistory, ContextMessage, ExclusionReason, TrimmedActive, assemble};
pub use builder::{ContextBuilder, ContextPreview, render_block, render_summary};
pub use compress::{Summarizer, importance};
pub use error::{Damage, Error, Result};
pub use tokens::{EstimateCounter, TokenCounter};
pub use types::{
    AssemblySummary, CachePoint, CachePolicy, CompressionReport, CompressionStrategy,
    ContextConfig, MemoryContext, ModelInfo, Provider, SectionBudgets, SectionTokens, SystemPart,
    SystemPartKind, ToolDefinition,
};
pub use validate::validate;
