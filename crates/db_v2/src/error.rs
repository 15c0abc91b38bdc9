//! The one error type of `db_v2`. It must never hide which file, model or query a failure is
//! about, and never turn a storage error into something else: `pattern_db` errors are wrapped.

use std::path::PathBuf;
use std::time::Duration;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong embedding, indexing or searching.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file of the embedding model is missing.
    #[error(
        "embedding model file {} is missing: run `pattern setup` (or set PATTERN_MODEL_DIR to a folder holding model.onnx, tokenizer.json, config.json, special_tokens_map.json and tokenizer_config.json)",
        path.display()
    )]
    ModelFilesMissing {
        /// The file looked for.
        path: PathBuf,
    },
    /// The ONNX Runtime library could not be loaded.
    #[error(
        "ONNX Runtime library {} could not be loaded ({reason}): run `pattern setup` (or set PATTERN_ORT_LIBRARY)",
        path.display()
    )]
    RuntimeLibraryMissing {
        /// The library path tried.
        path: PathBuf,
        /// Why loading failed.
        reason: String,
    },
    /// The model could not be loaded from its files.
    #[error("loading the embedding model from {}: {reason}", dir.display())]
    ModelLoad {
        /// The model folder.
        dir: PathBuf,
        /// What the runtime said.
        reason: String,
    },
    /// Embedding failed.
    #[error("embedding failed: {0}")]
    Embed(String),
    /// Embedding took longer than allowed.
    #[error("embedding timed out after {0:?}")]
    EmbedTimeout(Duration),
    /// The embedder returned a vector of the wrong size or count.
    #[error("embedder {model} returned {got}, expected {expected}")]
    EmbedderContract {
        /// The embedder's name.
        model: String,
        /// What was expected.
        expected: String,
        /// What came back.
        got: String,
    },
    /// A vector search without an embedder.
    #[error("vector search is not configured: open the database with an embedder (or use Fts)")]
    VectorSearchNotConfigured,
    /// An empty or whitespace-only query.
    #[error("the search query is empty")]
    EmptyQuery,
    /// A query longer than allowed (never cut).
    #[error("the search query has {bytes} bytes; at most {max} are allowed")]
    QueryTooLong {
        /// Bytes in the query.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A limit of 0 or above the maximum.
    #[error("search limit {limit} is out of range 1..={max}")]
    InvalidLimit {
        /// The limit asked for.
        limit: usize,
        /// The maximum.
        max: usize,
    },
    /// A vector whose dimension does not match the index.
    #[error("vector has {got} dimensions; the index holds {expected}")]
    DimensionMismatch {
        /// The index dimension.
        expected: usize,
        /// The vector's.
        got: usize,
    },
    /// A vector with a NaN or infinite component, or all zeros (no direction).
    #[error("vector is not usable (zero, NaN or infinite components)")]
    InvalidVector,
    /// The database holds vectors of another model.
    #[error(
        "the database holds embeddings of model {stored}, not {requested}: run `pattern embed --reembed` to re-embed everything with the new model, or open it with the stored model"
    )]
    EmbeddingModelMismatch {
        /// The stored model (name, dimension, hash).
        stored: String,
        /// The model this process brings.
        requested: String,
    },
    /// The blocking task scanning the vector index did not finish (it panicked or the runtime is
    /// shutting down).
    #[error("the vector index scan failed: {0}")]
    ScanTask(String),
    /// The background worker is not running (shut down).
    #[error("the embedding worker has shut down")]
    WorkerStopped,
    /// The storage layer failed.
    #[error(transparent)]
    Db(#[from] pattern_db::Error),
}

impl Error {
    /// What kind of failure this is (see [`pattern_db::ErrorClass`]).
    pub fn class(&self) -> pattern_db::ErrorClass {
        use pattern_db::ErrorClass as C;
        match self {
            Error::EmptyQuery
            | Error::QueryTooLong { .. }
            | Error::InvalidLimit { .. }
            | Error::DimensionMismatch { .. }
            | Error::InvalidVector => C::Invalid,
            Error::VectorSearchNotConfigured => C::Refused,
            Error::EmbeddingModelMismatch { .. } => C::Conflict,
            Error::EmbedTimeout(_) | Error::WorkerStopped => C::Unavailable,
            Error::Db(e) => e.class(),
            _ => C::Internal,
        }
    }
}
