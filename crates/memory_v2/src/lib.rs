//! `memory_v2`: what an agent remembers besides its message history: memory blocks (always in
//! context, size-limited, permissioned) and archival memory (searched on demand).
//!
//! This first part is the contract: the block model and the [`MemoryStore`] trait through which
//! every higher layer reads memory. `context_v2` reads blocks only through it, so it never needs
//! another way in. The implementation over `db_v2` (versioned writes, shared blocks, archival
//! memory, search) arrives with the memory issue; until then callers supply their own store.
//!
//! This crate must never build prompts or talk to a model, and a store must never cut a block's
//! value to fit its limit: a write over the limit is an error the agent can act on.

mod block;
mod error;
mod store;

pub use block::{BlockType, MemoryBlock, Permission};
pub use error::{Error, Result};
pub use store::MemoryStore;
