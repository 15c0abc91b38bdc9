//! `db_v2`: search over `pattern_db`.
//!
//! - [`Embedder`]: text to vectors; [`FastEmbedder`] (default feature `fastembed`) runs
//!   all-MiniLM-L6-v2 offline on ONNX Runtime loaded from the files `cargo xtask setup` installs.
//! - [`VectorIndex`]: the in-process vector index (normalised vectors, int8 pre-selection and
//!   exact re-ranking, filters on agent, content kind and time).
//! - [`weighted_rank_fusion`]: the hybrid ranking (weights per query by [`hybrid_weights`], k
//!   [`HYBRID_K`], best hit 1.0); [`content_words`]: full-text queries without function words;
//!   [`term_coverage`]: how much of a question a passage says in its words.
//!
//! This crate is the only one naming `fastembed` and `ort`. It must never write SQL (storage is
//! `pattern_db`'s), never block a writer on embedding, and never mix vectors of two models.

mod constellation;
mod dates;
mod embedder;
mod error;
#[cfg(feature = "fastembed")]
mod fastembed;
mod fusion;
pub mod index;
mod options;
mod query;

pub use constellation::{
    BackfillReport, ConstellationDb, EmbedConfig, EmbedRun, EmbedStatus, Progress,
};
pub use dates::{QueryDate, date_in_query};
pub use embedder::Embedder;
pub use error::{Error, Result};
#[cfg(feature = "fastembed")]
pub use fastembed::{
    BATCH_SIZE, FastEmbedder, MAX_TOKENS, MODEL_DIR_ENV, MODEL_FOLDER, MODEL_NAME, ModelPaths,
    ORT_LIBRARY_ENV, QUERY_THREADS, RUNTIME_LIBRARY,
};
pub use fusion::{
    COVERAGE_HITS, FTS_WEIGHT_FLOOR, FTS_WEIGHT_SPAN, HYBRID_K, IDENTIFIER_WEIGHTS, RRF_K,
    VECTOR_WEIGHT, fts_weight, hybrid_weights, reciprocal_rank_fusion, weighted_rank_fusion,
};
pub use index::{EntryMeta, IndexFilter, SIGN_SCAN_MIN, SignScan, VectorIndex};
pub use options::{SearchHit, SearchMode, SearchOptions};
pub use query::{content_words, has_identifier, is_stop_word, term_coverage, words_found};
