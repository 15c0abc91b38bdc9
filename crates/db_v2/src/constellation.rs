//! [`ConstellationDb`]: `pattern_db` plus an optional [`Embedder`], a background embedding
//! worker, an in-process [`VectorIndex`] kept current from the database's change log, and
//! full-text, vector and hybrid search.
//!
//! Embedding never blocks a writer: `pattern_db` records the job in the content's own
//! transaction (`DbConfig::record_embedding_jobs`), and the writer only `try_send`s a wake-up on a
//! bounded channel (a full channel is fine: the job is durable and the worker also polls). The
//! worker claims jobs in batches under a lease (so several processes share the work and a crash
//! leaves them for the next claim), embeds, and stores vectors only for unchanged text (the
//! content hash). Failures are retried with capped exponential backoff, counted and logged.
//!
//! It must never write SQL itself (everything goes through `pattern_db`), never block a write on
//! the embedder, never acknowledge a vector it did not store, and never return content that
//! `pattern_db::Database::resolve_content` does not confirm as live and visible.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use pattern_db::search::MAX_QUERY_BYTES;
use pattern_db::search::MAX_SEARCH_LIMIT;
use pattern_db::{
    AgentId, ArchivalEntry, ArchivalId, ChangeKind, ContentRef, ContentType, Database, DbConfig,
    EmbeddingJob, EmbeddingModelInfo, ListArchival, NewArchival, NewVector, TextSearch, VectorRow,
};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;

use crate::dates::date_in_query;
use crate::embedder::{Embedder, check_output};
use crate::error::{Error, Result};
use crate::fusion::{HYBRID_K, hybrid_weights, weighted_rank_fusion};
use crate::index::{EntryMeta, IndexFilter, VectorIndex};
use crate::options::{SearchHit, SearchMode, SearchOptions};
use crate::query::{content_words, words_found};

/// Rows per page when loading the vector index or reading the change log.
const PAGE: usize = 1000;

/// How many of full text's best hits by the index's relevance are ordered by how many of the
/// query's words they hold (decision 0021, section 8; chosen from 10, 30 and 60).
const COVERAGE_POOL: usize = 30;

/// How much of a full-text hit's text [`words_found`] reads: a block can hold a million
/// characters, and counting the words of thirty such hits would cost more than the search.
const COVERAGE_TEXT_BYTES: usize = 64 * 1024;

/// The first [`COVERAGE_TEXT_BYTES`] of `text` (cut at a character boundary).
fn coverage_text(text: &str) -> &str {
    let mut end = text.len().min(COVERAGE_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or(text)
}

/// Tuning of the embedding pipeline.
#[derive(Debug, Clone)]
pub struct EmbedConfig {
    /// Capacity of the wake-up channel (a full channel drops the wake-up, never the job).
    pub channel_capacity: usize,
    /// Jobs claimed and embedded together.
    pub batch_size: usize,
    /// How long a claim holds a job before another worker may take it (crash recovery time).
    pub lease: Duration,
    /// Longest one embedder call may take before it counts as failed.
    pub embed_timeout: Duration,
    /// First retry delay after a failure; doubles per attempt.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// How often the worker looks for jobs and changes without a wake-up (jobs written by other
    /// processes, retries that became due).
    pub poll_interval: Duration,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        Self {
            channel_capacity: 256,
            batch_size: 32,
            lease: Duration::from_secs(120),
            embed_timeout: Duration::from_secs(60),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// What the embedding pipeline is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedStatus {
    /// Jobs waiting in the database (claimed or not), all processes.
    pub pending_jobs: u64,
    /// Vectors stored by this process since it opened.
    pub embedded: u64,
    /// Failed embedder calls (batches) in this process since it opened.
    pub failures: u64,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Vectors in the in-process index.
    pub indexed: u64,
}

/// Progress of [`ConstellationDb::reembed`] and [`ConstellationDb::backfill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Jobs finished (by anyone: this call, the worker, other processes).
    pub done: u64,
    /// Jobs there were to do at the start (more may arrive meanwhile).
    pub total: u64,
}

/// What [`ConstellationDb::backfill`] did, every number counted, none guessed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackfillReport {
    /// Jobs freed from claims of processes that are not alive (they would otherwise wait for
    /// their lease).
    pub reclaimed: u64,
    /// Jobs waiting before this call queued any (from imports, writes, other runs).
    pub already_pending: u64,
    /// New jobs queued for live content without a vector of its current text.
    pub queued: u64,
    /// Vectors stored by this process during the call (its worker included).
    pub embedded: u64,
    /// Jobs still waiting when the call returned (claimed by another live process, or written
    /// meanwhile); 0 on a quiet database.
    pub pending: u64,
}

/// What [`ConstellationDb::embed_pending`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EmbedRun {
    /// Jobs waiting at the start.
    pub total: u64,
    /// Vectors stored by this process during the call (its worker included).
    pub embedded: u64,
    /// Jobs still waiting when the call returned.
    pub pending: u64,
}

/// Bit of a content kind in [`IndexFilter::kinds`].
fn kind_bit(t: ContentType) -> u8 {
    match t {
        ContentType::Message => 0,
        ContentType::Block => 1,
        ContentType::Archival => 2,
    }
}

fn meta_of(row: &VectorRow) -> EntryMeta {
    EntryMeta {
        // A block is visible to every agent with an access row: decided by resolve_content.
        agent: match row.content.content_type {
            ContentType::Block => None,
            _ => Some(row.agent_id),
        },
        kind: kind_bit(row.content.content_type),
        created_at_ms: row.created_at.timestamp_millis(),
    }
}

struct Inner {
    db: Database,
    embedder: Option<Arc<dyn Embedder>>,
    config: EmbedConfig,
    index: RwLock<VectorIndex<ContentRef>>,
    /// Last change-log entry applied to the index; the mutex serialises catch-ups.
    cursor: Mutex<i64>,
    wake: mpsc::Sender<()>,
    embedded: AtomicU64,
    failures: AtomicU64,
    last_error: StdMutex<Option<String>>,
    /// Set to a deadline by `shutdown`: finish what can be finished by then, then stop.
    stop: watch::Sender<Option<Instant>>,
    worker: StdMutex<Option<JoinHandle<()>>>,
}

/// `pattern_db` with embeddings and search. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ConstellationDb {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConstellationDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstellationDb")
            .field("backend", &self.inner.db.backend())
            .field("embedder", &self.inner.embedder.as_ref().map(|e| e.name()))
            .finish_non_exhaustive()
    }
}

impl ConstellationDb {
    /// Open the database at `config` with embedding jobs recorded when an embedder is given
    /// (`record_embedding_jobs` is set accordingly), then [`open`](Self::open) it.
    pub async fn connect(
        mut config: DbConfig,
        embedder: Option<Arc<dyn Embedder>>,
        embed: EmbedConfig,
    ) -> Result<Self> {
        config.record_embedding_jobs = embedder.is_some();
        let db = Database::open(config).await?;
        Self::open(db, embedder, embed).await
    }

    /// Wrap an open database without an embedder: full-text search and archival memory only
    /// (Vector and Hybrid are [`Error::VectorSearchNotConfigured`]; Auto is full-text).
    pub fn fts_only(db: Database) -> Self {
        let config = EmbedConfig::default();
        let (wake, _) = mpsc::channel(1);
        let (stop, _) = watch::channel(None);
        Self {
            inner: Arc::new(Inner {
                db,
                embedder: None,
                config,
                index: RwLock::new(VectorIndex::new(0)),
                cursor: Mutex::new(0),
                wake,
                embedded: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                last_error: StdMutex::new(None),
                stop,
                worker: StdMutex::new(None),
            }),
        }
    }

    /// Wrap an open database. With an embedder: registers (or checks) its model, so vectors of
    /// two models never mix ([`Error::EmbeddingModelMismatch`] names the re-embed command),
    /// loads the vector index and starts the worker, which first picks up jobs left by a crash.
    /// `db` should have been opened with `record_embedding_jobs` (see [`connect`](Self::connect));
    /// otherwise only [`queue_embedding`](Self::queue_embedding) and
    /// [`backfill`](Self::backfill) create jobs.
    pub async fn open(
        db: Database,
        embedder: Option<Arc<dyn Embedder>>,
        config: EmbedConfig,
    ) -> Result<Self> {
        let Some(e) = embedder.as_ref() else {
            return Ok(Self::fts_only(db));
        };
        let dimension = e.dimension();
        {
            db.register_embedding_model(model_info(e.as_ref())?)
                .await
                .map_err(map_mismatch)?;
        }
        let (wake, wake_rx) = mpsc::channel(config.channel_capacity.max(1));
        let (stop, stop_rx) = watch::channel(None);
        let inner = Arc::new(Inner {
            db,
            embedder,
            config,
            index: RwLock::new(VectorIndex::new(dimension)),
            cursor: Mutex::new(0),
            wake,
            embedded: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_error: StdMutex::new(None),
            stop,
            worker: StdMutex::new(None),
        });
        let this = Self { inner };
        this.load_index().await?;
        let worker = tokio::spawn(worker_loop(Arc::clone(&this.inner), wake_rx, stop_rx));
        *lock(&this.inner.worker) = Some(worker);
        Ok(this)
    }

    /// The database underneath (for messages, blocks and everything else). Writes made through
    /// it record embedding jobs too; call [`wake_worker`](Self::wake_worker) after them to embed
    /// without waiting for the next poll.
    pub fn db(&self) -> &Database {
        &self.inner.db
    }

    /// The embedder, if configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.inner.embedder.as_ref()
    }

    /// Signal the worker that jobs are waiting. Never blocks: a full channel means a wake-up is
    /// already pending.
    pub fn wake_worker(&self) {
        let _ = self.inner.wake.try_send(());
    }

    /// Record (or refresh) the embedding job of existing content and signal the worker.
    pub async fn queue_embedding(&self, content: ContentRef) -> Result<()> {
        self.inner.db.enqueue_embedding(content).await?;
        self.wake_worker();
        Ok(())
    }

    // -- archival memory ------------------------------------------------------------------------

    /// Store an archival passage (its embedding job is in the same transaction) and signal the
    /// worker. A repeated `dedupe_key` returns the stored entry.
    pub async fn insert_archival(&self, agent: AgentId, new: NewArchival) -> Result<ArchivalEntry> {
        let entry = self.inner.db.insert_archival(agent, new).await?;
        self.wake_worker();
        Ok(entry)
    }

    /// Store several passages in one transaction and signal the worker.
    pub async fn insert_archival_many(
        &self,
        agent: AgentId,
        new: Vec<NewArchival>,
    ) -> Result<Vec<ArchivalEntry>> {
        let entries = self.inner.db.insert_archival_many(agent, new).await?;
        self.wake_worker();
        Ok(entries)
    }

    /// One passage.
    pub async fn archival(&self, agent: AgentId, id: ArchivalId) -> Result<ArchivalEntry> {
        Ok(self.inner.db.archival(agent, id).await?)
    }

    /// Passages newest first.
    pub async fn list_archival(
        &self,
        agent: AgentId,
        list: ListArchival,
    ) -> Result<Vec<ArchivalEntry>> {
        Ok(self.inner.db.list_archival(agent, list).await?)
    }

    /// How many passages the agent has.
    pub async fn count_archival(&self, agent: AgentId) -> Result<u64> {
        Ok(self.inner.db.count_archival(agent).await?)
    }

    /// Delete a passage (and its vector); true if it existed.
    pub async fn delete_archival(&self, agent: AgentId, id: ArchivalId) -> Result<bool> {
        let deleted = self.inner.db.delete_archival(agent, id).await?;
        if deleted {
            write(&self.inner.index).remove(&ContentRef::archival(id));
        }
        Ok(deleted)
    }

    // -- search ---------------------------------------------------------------------------------

    /// Search. Fts: `pattern_db`'s full-text search of the query's content words
    /// ([`content_words`]), its best hits ordered by how many of those words each holds
    /// ([`words_found`]), then by the backend's relevance. Vector: the query's embedding
    /// against the index, hits confirmed live and visible by `resolve_content`. Hybrid: both,
    /// fused by weighted rank fusion with weights chosen per query ([`hybrid_weights`];
    /// [`HYBRID_K`]; best hit 1.0). Auto: Hybrid with an embedder, else Fts.
    /// With `read_dates`, a date the query names ([`date_in_query`]) narrows the time range and
    /// the rest of the query is searched; when that finds nothing, the whole query is searched.
    /// Empty and over-long queries and bad limits are typed errors.
    pub async fn search(&self, query: &str, opts: &SearchOptions) -> Result<Vec<SearchHit>> {
        check_query(query, opts)?;
        let mode = match (opts.mode, self.inner.embedder.is_some()) {
            (SearchMode::Auto, true) => SearchMode::Hybrid,
            (SearchMode::Auto, false) => SearchMode::Fts,
            (SearchMode::Vector | SearchMode::Hybrid, false) => {
                return Err(Error::VectorSearchNotConfigured);
            }
            (mode, _) => mode,
        };
        if opts.read_dates
            && let Some(date) = date_in_query(query)
            && !date.rest.trim().is_empty()
        {
            let from = match (opts.from, date.from) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            let to = match (opts.to, date.to) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let dated = SearchOptions {
                from,
                to,
                ..opts.clone()
            };
            let empty_range = matches!((from, to), (Some(f), Some(t)) if f >= t);
            if !empty_range {
                let hits = self.search_mode(mode, &date.rest, &dated).await?;
                if !hits.is_empty() {
                    return Ok(hits);
                }
            }
        }
        self.search_mode(mode, query, opts).await
    }

    async fn search_mode(
        &self,
        mode: SearchMode,
        query: &str,
        opts: &SearchOptions,
    ) -> Result<Vec<SearchHit>> {
        match mode {
            SearchMode::Fts => self.fts(query, opts, opts.limit).await,
            SearchMode::Vector => self.vector(query, opts, opts.limit, false).await,
            _ => self.hybrid(query, opts).await,
        }
    }

    /// Full text's `limit` best hits: the index's best [`COVERAGE_POOL`] (or `limit`, if more)
    /// by its relevance, ordered by how many of the query's content words each holds
    /// ([`words_found`]), then by that relevance. A hit's score is that count plus its
    /// relevance `r` as `r / (1 + r)` (below 1), so scores fall as the order does.
    async fn fts(&self, query: &str, opts: &SearchOptions, limit: usize) -> Result<Vec<SearchHit>> {
        let text = TextSearch {
            content_types: opts.content_types.clone(),
            agent: opts.agent,
            from: opts.from,
            to: opts.to,
            limit: limit.clamp(COVERAGE_POOL, MAX_SEARCH_LIMIT),
        };
        let words = content_words(query);
        let hits = self.inner.db.search_text(&words, &text).await?;
        let mut hits: Vec<SearchHit> = hits
            .into_iter()
            .map(|h| {
                let relevance = if h.score.is_finite() {
                    h.score.max(0.0)
                } else {
                    0.0
                };
                let (found, _) = words_found(query, coverage_text(&h.text));
                SearchHit {
                    content: h.content,
                    agent_id: h.agent_id,
                    // Below 1 even where `f32` would round a huge relevance's share up to it.
                    score: found as f32 + (relevance / (1.0 + relevance)).min(0.999),
                    text: h.text,
                    created_at: h.created_at,
                }
            })
            .collect();
        // Stable: hits holding as many words keep the index's order.
        hits.sort_by(|a, b| b.score.floor().total_cmp(&a.score.floor()));
        hits.truncate(limit);
        Ok(hits)
    }

    /// The vector search's hits; `alongside`: the query is embedded while the full-text half
    /// of a hybrid search runs ([`Embedder::embed_query_alongside`]).
    async fn vector(
        &self,
        query: &str,
        opts: &SearchOptions,
        limit: usize,
        alongside: bool,
    ) -> Result<Vec<SearchHit>> {
        let embedder = self
            .inner
            .embedder
            .as_ref()
            .ok_or(Error::VectorSearchNotConfigured)?;
        let embedding = async {
            if alongside {
                embedder.embed_query_alongside(query).await
            } else {
                embedder.embed_query(query).await
            }
        };
        let vectors = [
            tokio::time::timeout(self.inner.config.embed_timeout, embedding)
                .await
                .map_err(|_| Error::EmbedTimeout(self.inner.config.embed_timeout))??,
        ];
        check_output(embedder.as_ref(), 1, &vectors)?;
        let [q] = vectors;
        self.catch_up().await?;
        let filter = IndexFilter {
            agent: opts.agent,
            kinds: opts
                .content_types
                .iter()
                .fold(0u8, |m, t| m | (1 << kind_bit(*t))),
            from_ms: opts.from.map(|t| t.timestamp_millis()),
            to_ms: opts.to.map(|t| t.timestamp_millis()),
        };
        // Ask for more than needed: resolve_content drops what is gone or invisible.
        let mut want = (limit * 2 + 8).min(MAX_SEARCH_LIMIT * 2);
        loop {
            // The scan is CPU work (milliseconds at 100k vectors): off the async workers.
            let inner = self.inner.clone();
            let query = q.clone();
            let ranked = tokio::task::spawn_blocking(move || {
                read(&inner.index).search(&query, want, &filter)
            })
            .await
            .map_err(|e| Error::ScanTask(e.to_string()))??;
            let exhausted = ranked.len() < want;
            let refs: Vec<ContentRef> = ranked.iter().map(|(k, _)| k.clone()).collect();
            let rows = self.inner.db.resolve_content(&refs, opts.agent).await?;
            let mut live: HashMap<ContentRef, pattern_db::ContentRow> =
                rows.into_iter().map(|r| (r.content.clone(), r)).collect();
            let hits: Vec<SearchHit> = ranked
                .into_iter()
                .filter_map(|(k, score)| {
                    live.remove(&k).map(|r| SearchHit {
                        content: r.content,
                        agent_id: r.agent_id,
                        score,
                        text: r.text,
                        created_at: r.created_at,
                    })
                })
                .take(limit)
                .collect();
            if hits.len() >= limit || exhausted || want >= MAX_SEARCH_LIMIT * 8 {
                return Ok(hits);
            }
            want *= 4;
        }
    }

    async fn hybrid(&self, query: &str, opts: &SearchOptions) -> Result<Vec<SearchHit>> {
        // Deeper lists than the limit, so fusion sees agreement beyond the top few.
        let depth = (opts.limit * 2).clamp(20, MAX_SEARCH_LIMIT);
        let (fts, vector) = tokio::join!(
            self.fts(query, opts, depth),
            self.vector(query, opts, depth, true)
        );
        let (fts, vector) = (fts?, vector?);
        // The same bounded prefix as the full-text order counts words in.
        let weights = hybrid_weights(query, fts.iter().map(|h| coverage_text(&h.text)));
        let mut by_ref: HashMap<ContentRef, SearchHit> = HashMap::new();
        let [fts_list, vector_list]: [Vec<ContentRef>; 2] = [fts, vector].map(|list| {
            list.into_iter()
                .map(|h| {
                    let k = h.content.clone();
                    by_ref.entry(k.clone()).or_insert(h);
                    k
                })
                .collect()
        });
        let lists = [
            (fts_list.as_slice(), weights[0]),
            (vector_list.as_slice(), weights[1]),
        ];
        Ok(weighted_rank_fusion(&lists, HYBRID_K)
            .into_iter()
            .take(opts.limit)
            .filter_map(|(k, score)| {
                by_ref.remove(&k).map(|mut h| {
                    h.score = score;
                    h
                })
            })
            .collect())
    }

    // -- index maintenance ----------------------------------------------------------------------

    async fn load_index(&self) -> Result<()> {
        let mut cursor = self.inner.cursor.lock().await;
        load(&self.inner, &mut cursor).await
    }

    /// Apply the change log's tail to the vector index (vectors stored and content deleted by
    /// any process). Called by the worker on every round and before every vector search.
    pub async fn catch_up(&self) -> Result<()> {
        catch_up(&self.inner).await
    }

    // -- status, backfill, re-embed, shutdown ---------------------------------------------------

    /// Counters of the pipeline.
    pub async fn status(&self) -> Result<EmbedStatus> {
        Ok(EmbedStatus {
            pending_jobs: self.inner.db.pending_embedding_jobs().await?,
            embedded: self.inner.embedded.load(Ordering::Relaxed),
            failures: self.inner.failures.load(Ordering::Relaxed),
            last_error: lock(&self.inner.last_error).clone(),
            indexed: read(&self.inner.index).len() as u64,
        })
    }

    /// Free the claims of dead processes, queue jobs for all live content lacking a vector of
    /// its current text, then embed until none is left, reporting progress.
    pub async fn backfill(
        &self,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<BackfillReport> {
        if self.inner.embedder.is_none() {
            return Err(Error::VectorSearchNotConfigured);
        }
        let reclaimed = self.inner.db.reclaim_embedding_jobs().await?;
        let already_pending = self.inner.db.pending_embedding_jobs().await?;
        let queued = self.inner.db.backfill_embedding_jobs().await?;
        let run = self.embed_pending(progress).await?;
        Ok(BackfillReport {
            reclaimed,
            already_pending,
            queued,
            embedded: run.embedded,
            pending: run.pending,
        })
    }

    /// Re-embed everything with this process's embedder (after a model change): in one
    /// transaction drop every vector and register the new model, then embed all live content,
    /// reporting progress. Returns how many jobs were queued.
    pub async fn reembed(&self, progress: &mut (dyn FnMut(Progress) + Send)) -> Result<u64> {
        let embedder = self
            .inner
            .embedder
            .as_ref()
            .ok_or(Error::VectorSearchNotConfigured)?;
        let queued = self
            .inner
            .db
            .reset_embeddings(model_info(embedder.as_ref())?)
            .await?;
        self.catch_up().await?;
        let total = self.inner.db.pending_embedding_jobs().await?;
        self.run_to_completion(total, progress).await?;
        Ok(queued)
    }

    /// Embed in the foreground until no job is left (the worker helps; claims keep them apart).
    /// Progress is measured on the database (jobs left), so work done by the worker or another
    /// process counts too. Without an embedder it is `VectorSearchNotConfigured`.
    pub async fn embed_pending(
        &self,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<EmbedRun> {
        if self.inner.embedder.is_none() {
            return Err(Error::VectorSearchNotConfigured);
        }
        let before = self.inner.embedded.load(Ordering::Relaxed);
        let total = self.inner.db.pending_embedding_jobs().await?;
        self.run_to_completion(total, progress).await?;
        Ok(EmbedRun {
            total,
            embedded: self.inner.embedded.load(Ordering::Relaxed) - before,
            pending: self.inner.db.pending_embedding_jobs().await?,
        })
    }

    async fn run_to_completion(
        &self,
        total: u64,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<()> {
        progress(Progress { done: 0, total });
        loop {
            let round = run_round(&self.inner).await?;
            let pending = self.inner.db.pending_embedding_jobs().await?;
            progress(Progress {
                done: total.saturating_sub(pending),
                total,
            });
            if pending == 0 {
                break;
            }
            if round.failed {
                // The jobs stay queued with their backoff; the worker keeps retrying them.
                return Err(Error::Embed(
                    lock(&self.inner.last_error)
                        .clone()
                        .unwrap_or_else(|| "embedding failed".to_owned()),
                ));
            }
            if round.claimed == 0 {
                // Jobs claimed by another worker or not yet due: wait for them.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.catch_up().await
    }

    /// Wait until no embedding job is pending (or `timeout` passes: then false). For tests and
    /// tools that need every vector before they go on.
    pub async fn wait_idle(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.inner.db.pending_embedding_jobs().await? == 0 {
                self.catch_up().await?;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            self.wake_worker();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop the worker: it embeds what it can until `deadline` passes, then stops; jobs not
    /// done stay in the database for the next start, and this process's claims are released so
    /// they are due at once (a process killed before this is seen dead by the next claimer).
    pub async fn shutdown(&self, deadline: Duration) {
        let until = Instant::now() + deadline;
        let _ = self.inner.stop.send(Some(until));
        self.wake_worker();
        let handle = lock(&self.inner.worker).take();
        if let Some(mut handle) = handle {
            // Grace for the call in flight past the deadline, then abort it.
            let grace = deadline + Duration::from_millis(500);
            if tokio::time::timeout(grace, &mut handle).await.is_err() {
                handle.abort();
            }
        }
        if self.inner.embedder.is_some()
            && let Err(e) = self.inner.db.release_embedding_claims().await
        {
            tracing::warn!(error = %e, "embedding claims not released; the next claimer frees them");
        }
    }
}

fn model_info(e: &dyn Embedder) -> Result<EmbeddingModelInfo> {
    Ok(EmbeddingModelInfo {
        name: e.name().to_owned(),
        dimension: u32::try_from(e.dimension()).map_err(|_| Error::EmbedderContract {
            model: e.name().to_owned(),
            expected: "a dimension below 2^32".to_owned(),
            got: e.dimension().to_string(),
        })?,
        file_hash: e.model_hash().to_owned(),
    })
}

fn map_mismatch(e: pattern_db::Error) -> Error {
    match e {
        pattern_db::Error::Search(pattern_db::SearchError::EmbeddingModelMismatch {
            stored,
            requested,
        }) => Error::EmbeddingModelMismatch {
            stored: stored.to_string(),
            requested: requested.to_string(),
        },
        other => Error::Db(other),
    }
}

fn check_query(query: &str, opts: &SearchOptions) -> Result<()> {
    if query.trim().is_empty() {
        return Err(Error::EmptyQuery);
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::QueryTooLong {
            bytes: query.len(),
            max: MAX_QUERY_BYTES,
        });
    }
    if opts.limit == 0 || opts.limit > MAX_SEARCH_LIMIT {
        return Err(Error::InvalidLimit {
            limit: opts.limit,
            max: MAX_SEARCH_LIMIT,
        });
    }
    Ok(())
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Loads the index from the stored vectors and sets `cursor` to the log head read first.
async fn load(inner: &Inner, cursor: &mut i64) -> Result<()> {
    // Read the log head first: changes committed during the load are applied again later
    // (upsert and remove are idempotent), so nothing is missed.
    let head = inner.db.search_changes_head().await?;
    let dimension = inner.embedder.as_ref().map_or(0, |e| e.dimension());
    let mut fresh = VectorIndex::new(dimension);
    let mut after = None;
    loop {
        let page = inner.db.vectors_page(after.clone(), PAGE).await?;
        let full = page.len() == PAGE;
        fresh.reserve(page.len());
        for row in page {
            after = Some(row.content.clone());
            let meta = meta_of(&row);
            fresh.upsert(row.content, meta, row.vector)?;
        }
        if !full {
            break;
        }
    }
    *write(&inner.index) = fresh;
    *cursor = head;
    Ok(())
}

async fn catch_up(inner: &Inner) -> Result<()> {
    if inner.embedder.is_none() {
        return Ok(());
    }
    let mut cursor = inner.cursor.lock().await;
    loop {
        let changes = inner.db.search_changes_after(*cursor, PAGE).await?;
        // Changes pruned from the log past the cursor (a retention pass, maybe another
        // process's) are gone: load again. The mark is read after the changes, so a prune
        // between the two reads is seen (read before, a prune in between would leave a page
        // with a hole in it, applied as if whole).
        if inner.db.search_pruned_through().await? > *cursor {
            load(inner, &mut cursor).await?;
            continue;
        }
        if changes.is_empty() {
            return Ok(());
        }
        // A page may hold more changes than asked for (one log entry can stand for several
        // messages); at least `PAGE` means more may follow.
        let full = changes.len() >= PAGE;
        let wanted: Vec<ContentRef> = changes
            .iter()
            .filter(|c| c.kind == ChangeKind::Vector)
            .map(|c| c.content.clone())
            .collect();
        // The current vectors (a later delete or replacement is applied in log order below).
        let mut current: HashMap<ContentRef, VectorRow> = inner
            .db
            .vectors_for(&wanted)
            .await?
            .into_iter()
            .map(|r| (r.content.clone(), r))
            .collect();
        {
            let mut index = write(&inner.index);
            for change in &changes {
                match change.kind {
                    ChangeKind::Vector => {
                        if let Some(row) = current.remove(&change.content) {
                            let meta = meta_of(&row);
                            if let Err(e) = index.upsert(row.content, meta, row.vector) {
                                tracing::warn!(content = %change.content, error = %e,
                                    "stored vector not indexed");
                            }
                        }
                    }
                    ChangeKind::Delete => {
                        index.remove(&change.content);
                    }
                    ChangeKind::Text => {}
                }
            }
        }
        if let Some(last) = changes.last() {
            *cursor = last.seq;
        }
        if !full {
            return Ok(());
        }
    }
}

/// What one claim-embed-store round did.
struct Round {
    claimed: u64,
    failed: bool,
}

fn backoff(config: &EmbedConfig, attempts: i64) -> Duration {
    let shift = u32::try_from(attempts.clamp(0, 20)).unwrap_or(20);
    config
        .backoff_base
        .saturating_mul(1u32 << shift)
        .min(config.backoff_max)
}

/// Claim one batch, embed it, store the vectors (or record the failure).
async fn run_round(inner: &Inner) -> Result<Round> {
    let Some(embedder) = inner.embedder.as_ref() else {
        return Ok(Round {
            claimed: 0,
            failed: false,
        });
    };
    let jobs: Vec<EmbeddingJob> = inner
        .db
        .claim_embedding_jobs(inner.config.batch_size.max(1), inner.config.lease)
        .await?;
    if jobs.is_empty() {
        return Ok(Round {
            claimed: 0,
            failed: false,
        });
    }
    let claimed = jobs.len() as u64;
    let texts: Vec<String> = jobs.iter().map(|j| j.text.clone()).collect();
    let outcome = match tokio::time::timeout(inner.config.embed_timeout, embedder.embed(&texts))
        .await
    {
        Err(_) => Err(Error::EmbedTimeout(inner.config.embed_timeout)),
        Ok(Err(e)) => Err(e),
        Ok(Ok(vectors)) => check_output(embedder.as_ref(), texts.len(), &vectors).map(|()| vectors),
    };
    match outcome {
        Ok(vectors) => {
            let new: Vec<NewVector> = jobs
                .into_iter()
                .zip(vectors)
                .map(|(job, vector)| NewVector {
                    content: job.content,
                    text_hash: job.text_hash,
                    vector,
                })
                .collect();
            let report = inner.db.store_embeddings(new).await?;
            inner
                .embedded
                .fetch_add(report.stored.len() as u64, Ordering::Relaxed);
            Ok(Round {
                claimed,
                failed: false,
            })
        }
        Err(e) => {
            let message = e.to_string();
            inner.failures.fetch_add(1, Ordering::Relaxed);
            *lock(&inner.last_error) = Some(message.clone());
            tracing::warn!(error = %message, jobs = jobs.len(), "embedding failed; will retry");
            // One retry time per attempt count (each job backs off by its own attempts).
            let mut groups: HashMap<i64, Vec<(ContentRef, String)>> = HashMap::new();
            for job in jobs {
                groups
                    .entry(job.attempts)
                    .or_default()
                    .push((job.content, message.clone()));
            }
            for (attempts, failures) in groups {
                let delay = backoff(&inner.config, attempts);
                let retry_at =
                    Utc::now() + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
                inner.db.fail_embedding_jobs(failures, retry_at).await?;
            }
            Ok(Round {
                claimed,
                failed: true,
            })
        }
    }
}

async fn worker_loop(
    inner: Arc<Inner>,
    mut wake: mpsc::Receiver<()>,
    mut stop: watch::Receiver<Option<Instant>>,
) {
    loop {
        let deadline = *stop.borrow_and_update();
        // Embed until nothing is claimable (or a failure: wait for the backoff), or the
        // shutdown deadline passes.
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            match run_round(&inner).await {
                Ok(r) if r.claimed > 0 && !r.failed => continue,
                Ok(_) => break,
                Err(e) => {
                    inner.failures.fetch_add(1, Ordering::Relaxed);
                    *lock(&inner.last_error) = Some(e.to_string());
                    tracing::warn!(error = %e, "embedding worker round failed");
                    break;
                }
            }
        }
        if let Err(e) = catch_up(&inner).await {
            tracing::warn!(error = %e, "vector index catch-up failed");
        }
        if deadline.is_some() {
            return;
        }
        tokio::select! {
            _ = wake.recv() => {
                // Coalesce a burst of wake-ups into one round.
                while wake.try_recv().is_ok() {}
            }
            _ = stop.changed() => {}
            () = tokio::time::sleep(inner.config.poll_interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of the pure helpers.

    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let c = EmbedConfig {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            ..EmbedConfig::default()
        };
        assert_eq!(backoff(&c, 0), Duration::from_millis(100));
        assert_eq!(backoff(&c, 1), Duration::from_millis(200));
        assert_eq!(backoff(&c, 3), Duration::from_millis(800));
        assert_eq!(backoff(&c, 4), Duration::from_secs(1));
        assert_eq!(backoff(&c, 1000), Duration::from_secs(1));
        assert_eq!(backoff(&c, -5), Duration::from_millis(100));
    }

    #[test]
    fn coverage_reads_a_bounded_prefix_cut_at_a_character() {
        assert_eq!(coverage_text("short"), "short");
        // 'é' is two bytes: the cap falls inside one and the cut moves back before it.
        let long = format!("a{}", "é".repeat(COVERAGE_TEXT_BYTES));
        let cut = coverage_text(&long);
        assert_eq!(cut.len(), COVERAGE_TEXT_BYTES - 1);
        assert!(long.starts_with(cut));
    }

    #[test]
    fn queries_are_checked() {
        let o = SearchOptions::default();
        assert!(matches!(check_query("  \n", &o), Err(Error::EmptyQuery)));
        let long = "a".repeat(MAX_QUERY_BYTES + 1);
        assert!(matches!(
            check_query(&long, &o),
            Err(Error::QueryTooLong { .. })
        ));
        assert!(matches!(
            check_query("x", &o.clone().with_limit(0)),
            Err(Error::InvalidLimit { .. })
        ));
        assert!(check_query("multi-agent \"unbalanced AND (", &o).is_ok());
    }
}
