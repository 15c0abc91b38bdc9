//! `context_v2`: builds the message history of a model request from stored batches.
//!
//! This first part is the batch assembly core: [`assemble()`] turns
//! [`pattern_db::StoredBatch`]es into a provider-neutral sequence of [`ContextMessage`]s (whole
//! batches in id order; abandoned and crashed batches left out; tool results moved right after
//! their calls; the active batch cut before a call whose tool is still running), and
//! [`validate()`] checks, on every request, that no tool call travels without its result, the
//! failure that otherwise bricks an agent ("tool_use ids were found without tool_result blocks").
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
//! sequence that has not passed [`validate()`], and never know about a particular provider's
//! request format or name a database driver: it reads [`pattern_db`]'s types only.

mod assemble;
mod error;
mod validate;

pub use assemble::{AssembledHistory, ContextMessage, ExclusionReason, TrimmedActive, assemble};
pub use error::{Damage, Error, Result};
pub use validate::validate;
