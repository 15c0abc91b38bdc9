//! `memory_v2`: what an agent remembers besides its message history: memory blocks (always in
//! context, size-limited, permissioned) and archival memory (searched on demand).
//!
//! The block model, the [`MemoryStore`] trait through which every higher layer reads and changes
//! memory (`context_v2` reads blocks only through it), and [`DbMemoryStore`], the store over
//! `pattern_db`: versioned writes with optimistic concurrency, full history and undo, shared
//! blocks with per-agent permissions (rules in the `db_store` module). [`ArchivalMemory`]:
//! archival passages and search (full-text, vector, hybrid) through `db_v2`. [`ingest`]:
//! Markdown, text, HTML and PDF documents cut into archival passages.
//!
//! This crate must never build prompts or talk to a model, and a store must never cut a block's
//! value to fit its limit: a write over the limit is an error the agent can act on.

mod block;
mod db_store;
mod error;
pub mod ingest;
mod store;

pub use block::{BlockType, BlockVersion, MemoryBlock, NewMemoryBlock, Permission, WriteAuth};
pub use db_store::DbMemoryStore;
pub use db_v2::{SearchHit, SearchMode, SearchOptions};
pub use error::{Error, Result};
pub use pattern_db::{
    ArchivalEntry, ArchivalId, ContentRef, ContentType, ListArchival, NewArchival,
};
pub use store::{ArchivalMemory, MemoryEditor, MemoryStore};
