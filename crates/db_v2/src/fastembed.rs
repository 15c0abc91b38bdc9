//! [`FastEmbedder`]: the default [`Embedder`], all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions, mean
//! pooling, at most 256 tokens) run by fastembed on ONNX Runtime loaded dynamically from a file
//! `cargo xtask setup` installed. It must never download anything, never panic on a missing file
//! or library (typed errors name `cargo xtask setup`), and never run the blocking model on an
//! async worker thread (it runs in `spawn_blocking`, behind a mutex, because fastembed's `embed`
//! takes `&mut self`). Search queries never wait behind bulk embedding: a query takes the bulk
//! session when it is idle and otherwise a session of its own (one intra-op thread), so it
//! embeds in milliseconds while the background pipeline holds the bulk session for a batch. A
//! query of a hybrid search (`embed_query_alongside`) takes the query session even when the bulk
//! one is idle: on one core, the full-text half of the search keeps the other (the bulk
//! session's threads took both, so the halves ran one after the other; decision 0021). The
//! query session is loaded in the background the first time bulk embedding runs or at the
//! second hybrid query (until it is loaded, queries take the bulk session), so a process that
//! searches once (a one-shot command) never pays for it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use sha2::{Digest, Sha256};

use crate::embedder::Embedder;
use crate::error::{Error, Result};

/// The model folder under the project's cache folder (where `cargo xtask setup` puts it).
pub const MODEL_FOLDER: &str = "models/all-minilm-l6-v2";
/// The ONNX Runtime library under the project's cache folder.
pub const RUNTIME_LIBRARY: &str = "onnxruntime/libonnxruntime.so.1.24.4";
/// Environment variable naming the model folder.
pub const MODEL_DIR_ENV: &str = "PATTERN_MODEL_DIR";
/// Environment variable naming the ONNX Runtime library file.
pub const ORT_LIBRARY_ENV: &str = "PATTERN_ORT_LIBRARY";
/// Name recorded in the database for this model.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2-int8";
/// Texts per model call.
pub const BATCH_SIZE: usize = 32;
/// Maximum tokens per text (the model's own limit; longer text is embedded from its start).
pub const MAX_TOKENS: usize = 256;

/// Where the model files and the runtime library are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// Folder with `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json`,
    /// `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// The `libonnxruntime.so.1.24.x` file.
    pub runtime_library: PathBuf,
}

impl ModelPaths {
    /// The layout `cargo xtask setup` creates under a cache folder (`<project>/.cache`).
    pub fn in_cache(cache_dir: &Path) -> Self {
        Self {
            model_dir: cache_dir.join(MODEL_FOLDER),
            runtime_library: cache_dir.join(RUNTIME_LIBRARY),
        }
    }

    /// Paths from the environment: `PATTERN_MODEL_DIR` (else `.cache/models/all-minilm-l6-v2`
    /// under the current directory, the project root) and `PATTERN_ORT_LIBRARY` (else
    /// `ORT_DYLIB_PATH`, else the library two folders above the model folder, where setup puts
    /// it). Relative paths are made absolute against the current directory.
    pub fn from_env() -> Self {
        let cwd = std::env::current_dir().unwrap_or_default();
        let model_dir = std::env::var_os(MODEL_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".cache").join(MODEL_FOLDER));
        let model_dir = cwd.join(model_dir);
        let runtime_library = std::env::var_os(ORT_LIBRARY_ENV)
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH"))
            .map(|p| cwd.join(p))
            .unwrap_or_else(|| {
                model_dir
                    .parent()
                    .and_then(Path::parent)
                    .unwrap_or(&model_dir)
                    .join(RUNTIME_LIBRARY)
            });
        Self {
            model_dir,
            runtime_library,
        }
    }
}

/// ONNX Runtime threads of the query session: one query is a short sequence, where a second
/// thread gains little and would compete with the bulk session's threads.
pub const QUERY_THREADS: usize = 1;

/// all-MiniLM-L6-v2 through fastembed.
pub struct FastEmbedder {
    /// Bulk embedding (the pipeline, backfills): every core.
    model: Arc<Mutex<TextEmbedding>>,
    /// Search queries while the bulk session is busy, one at a time: [`QUERY_THREADS`]. Empty
    /// until bulk embedding first runs (then loaded on a thread of its own).
    queries: Arc<OnceLock<Mutex<TextEmbedding>>>,
    /// Set once the query session's loading has started (it is tried once per process).
    queries_started: Arc<AtomicBool>,
    /// Queries asked for on one core so far (`embed_query_alongside`).
    one_core_queries: AtomicUsize,
    paths: ModelPaths,
    dimension: usize,
    hash: String,
    timeout: Duration,
}

impl std::fmt::Debug for FastEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastEmbedder")
            .field("dimension", &self.dimension)
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl FastEmbedder {
    /// Load the runtime and the model's bulk session (about 0.6 s), then embed a probe sentence
    /// to learn the dimension and prove the model runs. `timeout` bounds every later `embed`
    /// call. The query session is loaded later, when bulk embedding first runs.
    pub async fn load(paths: &ModelPaths, timeout: Duration) -> Result<Self> {
        let owned = paths.clone();
        let loaded = tokio::task::spawn_blocking(move || load_blocking(&owned))
            .await
            .map_err(|e| Error::Embed(format!("model loading task failed: {e}")))??;
        let (model, dimension, hash) = loaded;
        Ok(Self {
            model: Arc::new(Mutex::new(model)),
            queries: Arc::new(OnceLock::new()),
            queries_started: Arc::new(AtomicBool::new(false)),
            one_core_queries: AtomicUsize::new(0),
            paths: paths.clone(),
            dimension,
            hash,
            timeout,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|_| Error::ModelFilesMissing {
        path: path.to_path_buf(),
    })
}

/// Reads the model files and builds one session (`threads`: ONNX Runtime's intra-op threads,
/// `None` for every core); returns it with the sha256 of the model file.
fn session(paths: &ModelPaths, threads: Option<usize>) -> Result<(TextEmbedding, String)> {
    let dir = &paths.model_dir;
    let onnx = read(&dir.join("model.onnx"))?;
    let tokenizer_files = TokenizerFiles {
        tokenizer_file: read(&dir.join("tokenizer.json"))?,
        config_file: read(&dir.join("config.json"))?,
        special_tokens_map_file: read(&dir.join("special_tokens_map.json"))?,
        tokenizer_config_file: read(&dir.join("tokenizer_config.json"))?,
    };
    let hash = hex(&Sha256::digest(&onnx));
    let model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(Pooling::Mean);
    let mut options = InitOptionsUserDefined::new().with_max_length(MAX_TOKENS);
    if let Some(threads) = threads {
        options = options.with_intra_threads(threads);
    }
    let embedding =
        TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| Error::ModelLoad {
            dir: dir.clone(),
            reason: e.to_string(),
        })?;
    Ok((embedding, hash))
}

fn load_blocking(paths: &ModelPaths) -> Result<(TextEmbedding, usize, String)> {
    let dir = &paths.model_dir;
    if !paths.runtime_library.is_file() {
        return Err(Error::RuntimeLibraryMissing {
            path: paths.runtime_library.clone(),
            reason: "no such file".to_owned(),
        });
    }
    // Loads the library once per process; a second call with the library already loaded is a
    // no-op. The returned builder is not needed: sessions use the default environment.
    ort::init_from(&paths.runtime_library).map_err(|e| Error::RuntimeLibraryMissing {
        path: paths.runtime_library.clone(),
        reason: e.to_string(),
    })?;
    let (mut embedding, hash) = session(paths, None)?;
    let probe = embedding
        .embed(["dimension probe"], Some(1))
        .map_err(|e| Error::ModelLoad {
            dir: dir.clone(),
            reason: format!("probe embedding failed: {e}"),
        })?;
    let dimension = probe.first().map_or(0, Vec::len);
    if dimension == 0 {
        return Err(Error::ModelLoad {
            dir: dir.clone(),
            reason: "the model returned no vector".to_owned(),
        });
    }
    Ok((embedding, dimension, hash))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[async_trait]
impl Embedder for FastEmbedder {
    fn name(&self) -> &str {
        MODEL_NAME
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model_hash(&self) -> &str {
        &self.hash
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.run(Session::Bulk, texts.to_vec()).await
    }

    async fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        self.run_query(Session::QueryOrIdleBulk, query).await
    }

    async fn embed_query_alongside(&self, query: &str) -> Result<Vec<f32>> {
        self.run_query(Session::OneCore, query).await
    }
}

impl FastEmbedder {
    /// Whether the query session (one core) is loaded: until then every query takes the bulk
    /// session.
    pub fn query_session_loaded(&self) -> bool {
        self.queries.get().is_some()
    }

    /// Loads the query session on a thread of its own, once per process (bulk embedding calls
    /// this: only then can a query find the bulk session busy). The session must be of the same
    /// model file as the bulk one; otherwise, or when loading fails, it stays unloaded (logged)
    /// and queries wait for the bulk session as they would without it.
    fn start_query_session(&self) {
        if self.queries_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (paths, queries, hash) = (
            self.paths.clone(),
            Arc::clone(&self.queries),
            self.hash.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("embed-query-session".to_owned())
            .spawn(move || match session(&paths, Some(QUERY_THREADS)) {
                Ok((loaded, h)) if h == hash => {
                    let _ = queries.set(Mutex::new(loaded));
                }
                Ok(_) => tracing::warn!(
                    "the model file changed since it was loaded: no query session; queries share \
                     the bulk session"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "could not load the query session; queries share the bulk session"
                ),
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start loading the query session");
        }
    }
}

/// Which session a call runs on.
#[derive(Debug, Clone, Copy)]
enum Session {
    /// The bulk session, waiting for it if busy.
    Bulk,
    /// The bulk session when it is idle (all cores: fastest for one query), else the query
    /// session at once: a query never waits for the pipeline's batch.
    QueryOrIdleBulk,
    /// The query session (one core) once it is loaded, else the bulk session: a query whose
    /// search runs other work at the same time.
    OneCore,
}

impl FastEmbedder {
    /// The vector of one query embedded on `session`.
    async fn run_query(&self, session: Session, query: &str) -> Result<Vec<f32>> {
        let mut vectors = self.run(session, vec![query.to_owned()]).await?;
        match (vectors.pop(), vectors.is_empty()) {
            (Some(v), true) => Ok(v),
            _ => Err(Error::Embed(
                "the query session returned other than one vector".to_owned(),
            )),
        }
    }

    /// Embed `texts` on `session`, off the async workers, within the timeout.
    async fn run(&self, session: Session, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        // A hybrid query starts the query session's loading from the second one on: a process
        // that makes one (a one-shot command) does not pay for a session it would not use.
        let later_query = matches!(session, Session::OneCore)
            && self.one_core_queries.fetch_add(1, Ordering::AcqRel) > 0;
        if matches!(session, Session::Bulk) || later_query {
            self.start_query_session();
        }
        let bulk = Arc::clone(&self.model);
        let queries = Arc::clone(&self.queries);
        let task = tokio::task::spawn_blocking(move || {
            let poisoned = |_| Error::Embed("a previous embedding call panicked".to_owned());
            let mut guard = match session {
                Session::Bulk => bulk.lock().map_err(poisoned)?,
                Session::QueryOrIdleBulk => match (bulk.try_lock(), queries.get()) {
                    (Ok(idle), _) => idle,
                    (Err(_), Some(query_session)) => query_session.lock().map_err(poisoned)?,
                    // Not loaded yet (or failed to load): wait for the bulk session.
                    (Err(_), None) => bulk.lock().map_err(poisoned)?,
                },
                Session::OneCore => match queries.get() {
                    Some(query_session) => query_session.lock().map_err(poisoned)?,
                    // Not loaded yet (or failed to load): the bulk session.
                    None => bulk.lock().map_err(poisoned)?,
                },
            };
            guard
                .embed(&texts, Some(BATCH_SIZE))
                .map_err(|e| Error::Embed(e.to_string()))
        });
        // A timed-out call keeps running on its blocking thread (ONNX Runtime cannot be
        // interrupted); the mutex makes the next call wait for it.
        match tokio::time::timeout(self.timeout, task).await {
            Err(_) => Err(Error::EmbedTimeout(self.timeout)),
            Ok(Err(e)) => Err(Error::Embed(format!("embedding task failed: {e}"))),
            Ok(Ok(result)) => result,
        }
    }
}
