//! The tantivy full-text index of a database: for SQLite kept in `<file>.search/` beside it and
//! shared by every handle of the file; for PostgreSQL one in memory per handle (each process
//! serving a database has its own, following the shared database; decision 0028).
//!
//! The index is derived data: it follows `search_changes` (text and delete changes) from a
//! cursor stored in its own commit payload, so a crash between a database commit and an index
//! commit is repaired by the next catch-up, which every search runs first (one indexed query when
//! nothing is new). An index without a cursor (new, or its directory dropped) is rebuilt from the
//! live content. A change re-reads the content's current state, so applying one twice is
//! harmless. A SQLite index's cursor is also recorded in `search_consumers`, so pruning the log
//! never removes a change it still needs (a PostgreSQL index, which lives no longer than its
//! process, is rebuilt when the log was pruned past it).
//!
//! PostgreSQL logs no message text (an acknowledgement never takes the log's lock): there the
//! index also reads the messages written by a transaction at or after its mark
//! ([`MessageMark`]), every catch-up, so a search sees every message acknowledged before it in
//! any process.
//!
//! Queries are never parsed: the user's text is split by the text field's analyzer (lower-case,
//! English stemming) and searched as an OR of term queries. Every hit is checked against the
//! database ([`Database::resolve_content`]) before it is returned. This module must never make the
//! database wait on the index (it only reads the database, and records its cursor through the
//! writer), and never run tantivy's blocking work on an async worker thread.
//!
//! Besides the catch-up of every search, a follower task ([`follow`]) catches up in the
//! background whenever writes pause, and an import hands its messages to the index while it
//! writes them ([`FtsIndex::index_alongside`]: the index writes and syncs its segment while the
//! database writes, and publishes it once the database committed), so the first search after an
//! import finds nothing left to index.
//!
//! Handles of several processes may share one directory: opening is serialised by a file lock
//! in it ([`open_dir`]), writers by tantivy's writer lock, each writer on the directory opened
//! afresh ([`open_writer`]) and released after its commit's merges (an import's kept a moment
//! for its next call, [`KEEP_WRITER`]); a search that meets a file another handle merged away
//! reloads. A document names its content by columns ([`Key`]): no term per document.

mod dir;
mod stem;

use crate::StorageError;
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tantivy::collector::TopDocs;
use tantivy::columnar::Column;
use tantivy::query::doc_predicate_query::{
    ConstOrVariableSegmentPredicate, DocPredicate, DocPredicateQuery, SegmentDocPredicate,
};
use tantivy::query::{
    AllScorer, BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery,
};
use tantivy::schema::{
    BytesOptions, FAST, Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::TokenStream;
use tantivy::{
    DocAddress, DocId, Index, IndexReader, IndexWriter, ReloadPolicy, SegmentReader,
    TantivyDocument, Term, doc,
};

use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::search as sql;
use crate::search::{
    ChangeKind, ContentRef, ContentRow, ContentType, SearchChange, TextHit, TextSearch,
};

/// The name under which the index records its cursor in `search_consumers`.
pub(crate) const CONSUMER: &str = "tantivy";
/// Memory budget of the index writer (shared by its threads).
const WRITER_BUDGET: usize = 50_000_000;
/// Threads the index writer tokenizes and indexes documents on, for a rebuild or an import.
const INDEXING_THREADS: usize = 2;
/// Documents below which a catch-up's writer indexes on one thread: each indexing thread that
/// receives documents writes a segment of its own (its files, a term table of 2^19 slots to
/// allocate, clear and walk, later a merge), and a search right after a write waits for that.
const ONE_THREAD_BELOW: usize = 2_000;
/// Threads merging the index's segments. tantivy's default is four, started with every writer;
/// a merge runs on one thread anyway, and more merges at once would take cores the database's
/// own work needs.
const MERGE_THREADS: usize = 1;
/// Segments of about one size merged at once (tantivy's log merge policy; its default is 8). An
/// index that keeps growing merges each document once per level, and with 16 there are fewer
/// levels: an import after a million others used 7 % less CPU (decision 0025, "Stop 51"), with
/// searches no slower (up to 15 segments a level to look a term up in, each lookup a few µs).
const MERGE_AT: usize = 16;
/// Changes applied per index commit (an import's changes are applied in few commits: each commit
/// opens a writer, writes a segment, syncs its files and waits for merges).
const CHANGES_PER_COMMIT: usize = 50_000;
/// The text field's analyzer ([`stem`]: `en_stem` with English stop words dropped). Its name is
/// in the schema, so an index written by a build whose analyzer differed (`en_stem` until stop
/// 52) has another schema and is rebuilt on open.
const TOKENIZER: &str = "en_stem_stop";

#[derive(Clone, Copy)]
struct Fields {
    key: Field,
    kind: Field,
    id_hi: Field,
    id_lo: Field,
    content_type: Field,
    agent: Field,
    created_at: Field,
    text: Field,
}

/// The fast field of a document's content type ([`Key`]).
const KIND: &str = "kind";
/// The fast fields of a UUID id's high and low 64 bits ([`Key`]).
const ID_HI: &str = "id_hi";
const ID_LO: &str = "id_lo";

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            // Queries are ORs of single terms (never phrases): positions would only cost
            // indexing time and about a third of the index's bytes.
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    // Keys and filters match whole values and are never scored: no field norms (a byte per
    // document and field).
    let keyword = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("raw")
            .set_index_option(IndexRecordOption::Basic)
            .set_fieldnorms(false),
    );
    // The content a document is ([`Key`]): for an id that is a UUID (every id this database
    // makes) columns only, the type's code and the id's two halves, read back for a hit and
    // scanned by a removal ([`Removal`]); no term, whose dictionary of one entry per document
    // was the costliest part of writing and merging segments. Any other id is a term (deletes
    // name it) and stored (hits read it back): its compact bytes ([`key_bytes`]).
    // (No field norms: a byte fields' default.)
    let key = BytesOptions::default().set_indexed().set_stored();
    let fields = Fields {
        key: b.add_bytes_field("key", key),
        kind: b.add_u64_field(KIND, FAST),
        id_hi: b.add_u64_field(ID_HI, FAST),
        id_lo: b.add_u64_field(ID_LO, FAST),
        content_type: b.add_text_field("content_type", keyword.clone()),
        agent: b.add_text_field("agent", keyword),
        // A column only: a time range is answered from it (tantivy's range query scans a fast
        // field), so no term per distinct time is indexed.
        created_at: b.add_i64_field("created_at", FAST),
        text: b.add_text_field("text", text_options),
    };
    (b.build(), fields)
}

/// How the index names a content: by columns when its id is a UUID in its canonical text (as
/// every id of this database is), else by a term of its compact bytes ([`key_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    /// The type's code ([`kind_code`]) and the id's high and low 64 bits.
    Uuid { kind: u64, hi: u64, lo: u64 },
    /// Any other id: a term.
    Text,
}

impl Key {
    fn of(content: &ContentRef) -> Self {
        match canonical_uuid(&content.id) {
            Some(id) => {
                let (hi, lo) = id.as_u64_pair();
                Key::Uuid {
                    kind: u64::from(kind_code(content.content_type)),
                    hi,
                    lo,
                }
            }
            None => Key::Text,
        }
    }

    /// The content of a document whose columns hold `kind`, `hi` and `lo`; `None` for a code
    /// no type has.
    fn content(kind: u64, hi: u64, lo: u64) -> Option<ContentRef> {
        let content_type = *ContentType::ALL.get(usize::try_from(kind).ok()?)?;
        let id = uuid::Uuid::from_u64_pair(hi, lo).hyphenated().to_string();
        Some(ContentRef::new(content_type, id))
    }
}

/// A content type's code: its place in [`ContentType::ALL`].
fn kind_code(t: ContentType) -> u8 {
    ContentType::ALL
        .iter()
        .position(|x| *x == t)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(u8::MAX)
}

/// The bytes of `content`'s key term: its type's code, then a UUID's 16 bytes (an id that is a
/// UUID in its canonical text) or the id's text after a marker, so no two contents share a key.
/// [`content_of_key`] reads it back. Only contents whose [`Key`] is text are indexed by it.
fn key_bytes(content: &ContentRef) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.push(kind_code(content.content_type));
    match canonical_uuid(&content.id) {
        Some(id) => {
            key.push(KEY_UUID);
            key.extend_from_slice(id.as_bytes());
        }
        None => {
            key.push(KEY_TEXT);
            key.extend_from_slice(content.id.as_bytes());
        }
    }
    key
}

/// `id` as a UUID when it is one in its canonical text (lower-case, hyphenated), the only form
/// that reads back the same from the UUID; compared without allocating (every document of an
/// import asks).
fn canonical_uuid(id: &str) -> Option<uuid::Uuid> {
    let uuid = uuid::Uuid::try_parse(id).ok()?;
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    (uuid.hyphenated().encode_lower(&mut text).as_bytes() == id.as_bytes()).then_some(uuid)
}

/// [`key_bytes`]'s marker of an id stored as a UUID's 16 bytes.
const KEY_UUID: u8 = 0;
/// [`key_bytes`]'s marker of an id stored as its text.
const KEY_TEXT: u8 = 1;

/// The content a key names ([`key_bytes`]); `None` for bytes no key has.
fn content_of_key(key: &[u8]) -> Option<ContentRef> {
    let (&code, rest) = key.split_first()?;
    let content_type = *ContentType::ALL.get(usize::from(code))?;
    let id = match rest.split_first()? {
        (&KEY_UUID, bytes) => uuid::Uuid::from_slice(bytes).ok()?.hyphenated().to_string(),
        (&KEY_TEXT, bytes) => std::str::from_utf8(bytes).ok()?.to_owned(),
        _ => return None,
    };
    Some(ContentRef::new(content_type, id))
}

/// The documents of a set of UUID-keyed contents, as a query a writer deletes by: each
/// segment's id columns are scanned, and a segment whose ids' range holds none of the set's
/// (every older segment, for new content: ids are UUIDv7, rising with time) is skipped whole.
#[derive(Debug)]
struct Removal {
    /// (high bits, low bits, type code) of each content.
    ids: Arc<HashSet<(u64, u64, u64)>>,
    /// The set's high bits, sorted and once each.
    his: Arc<Vec<u64>>,
}

impl Removal {
    /// The removal of `keys`' UUID contents (`None` when there are none).
    fn of<'k>(keys: impl IntoIterator<Item = &'k Key>) -> Option<Self> {
        let ids: HashSet<(u64, u64, u64)> = keys
            .into_iter()
            .filter_map(|k| match *k {
                Key::Uuid { kind, hi, lo } => Some((hi, lo, kind)),
                Key::Text => None,
            })
            .collect();
        if ids.is_empty() {
            return None;
        }
        let mut his: Vec<u64> = ids.iter().map(|(hi, _, _)| *hi).collect();
        his.sort_unstable();
        his.dedup();
        Some(Self {
            ids: Arc::new(ids),
            his: Arc::new(his),
        })
    }
}

/// [`Removal`] in one segment: the documents whose columns name a content of the set.
struct SegmentRemoval {
    ids: Arc<HashSet<(u64, u64, u64)>>,
    his: Arc<Vec<u64>>,
    hi: Column<u64>,
    lo: Column<u64>,
    kind: Column<u64>,
}

impl SegmentDocPredicate for SegmentRemoval {
    fn eval(&mut self, doc: DocId) -> bool {
        let Some(hi) = self.hi.first(doc) else {
            return false;
        };
        if self.his.binary_search(&hi).is_err() {
            return false;
        }
        match (self.lo.first(doc), self.kind.first(doc)) {
            (Some(lo), Some(kind)) => self.ids.contains(&(hi, lo, kind)),
            _ => false,
        }
    }

    fn cost(&self) -> u64 {
        10
    }
}

impl DocPredicate for Removal {
    type SegmentDocPredicate = SegmentRemoval;

    fn doc_predicate(
        &self,
        segment: &SegmentReader,
    ) -> tantivy::Result<ConstOrVariableSegmentPredicate<SegmentRemoval>> {
        let ff = segment.fast_fields();
        let (Some(hi), Some(lo), Some(kind)) = (
            ff.column_opt::<u64>(ID_HI)?,
            ff.column_opt::<u64>(ID_LO)?,
            ff.column_opt::<u64>(KIND)?,
        ) else {
            return Ok(ConstOrVariableSegmentPredicate::Const(false));
        };
        let first = self.his.partition_point(|h| *h < hi.min_value());
        if self.his.get(first).is_none_or(|h| *h > hi.max_value()) {
            return Ok(ConstOrVariableSegmentPredicate::Const(false));
        }
        Ok(ConstOrVariableSegmentPredicate::Variable {
            predicate: SegmentRemoval {
                ids: self.ids.clone(),
                his: self.his.clone(),
                hi,
                lo,
                kind,
            },
            necessary_condition: Box::new(AllScorer::new(segment.max_doc())),
        })
    }
}

/// The content of each of a searcher's documents, read from its columns ([`Key`]) or, for a
/// text key, its stored bytes; each segment's columns opened once.
struct KeyReader<'s> {
    searcher: &'s tantivy::Searcher,
    key: Field,
    columns: HashMap<u32, Option<[Column<u64>; 3]>>,
}

impl<'s> KeyReader<'s> {
    fn new(searcher: &'s tantivy::Searcher, key: Field) -> Self {
        Self {
            searcher,
            key,
            columns: HashMap::new(),
        }
    }

    /// The content of the document at `address` (`None`: it names none, e.g. a code no type
    /// has).
    fn content(&mut self, address: DocAddress) -> Result<Option<ContentRef>> {
        let columns = match self.columns.entry(address.segment_ord) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let ff = self
                    .searcher
                    .segment_reader(address.segment_ord)
                    .fast_fields();
                let open = |name| ff.column_opt::<u64>(name).map_err(index_error);
                v.insert(match (open(KIND)?, open(ID_HI)?, open(ID_LO)?) {
                    (Some(kind), Some(hi), Some(lo)) => Some([kind, hi, lo]),
                    _ => None,
                })
            }
        };
        if let Some([kind, hi, lo]) = columns {
            let doc = address.doc_id;
            if let (Some(k), Some(h), Some(l)) = (kind.first(doc), hi.first(doc), lo.first(doc)) {
                return Ok(Key::content(k, h, l));
            }
        }
        let d: TantivyDocument = self.searcher.doc(address).map_err(index_error)?;
        let key = d.get_first(self.key).and_then(|v| v.as_bytes());
        Ok(key.and_then(content_of_key))
    }
}

fn index_error(e: tantivy::TantivyError) -> Error {
    Error::Storage(StorageError::Index(Arc::new(e)))
}

/// Whether `e` is the index missing a file: another handle or process (each with its own view
/// of the directory) merged segments this handle still read and removed their files. A reload
/// sees the newest segments, so the operation can run again.
pub(crate) fn file_vanished(e: &Error) -> bool {
    match e {
        Error::Storage(StorageError::Index(e)) => match &**e {
            tantivy::TantivyError::IoError(io) => io.kind() == std::io::ErrorKind::NotFound,
            tantivy::TantivyError::OpenReadError(
                tantivy::directory::error::OpenReadError::FileDoesNotExist(_),
            ) => true,
            _ => false,
        },
        _ => false,
    }
}

/// An index failure that is not tantivy's own (ours, or the system's), as an index error.
fn index_failure(what: String) -> Error {
    index_error(tantivy::TantivyError::SystemError(what))
}

fn join_error(e: tokio::task::JoinError) -> Error {
    index_failure(format!("index task failed: {e}"))
}

/// How long writes must pause before the follower catches up. A steady stream of writes (an
/// agent acknowledging as fast as it can) never pauses that long, so the index's commits, which
/// sync files on the same disk, never compete with acknowledgements; such a backlog is applied
/// by the next pause or the next search, as before the follower.
const FOLLOW_QUIET: std::time::Duration = std::time::Duration::from_millis(50);

/// Keeps the index current in the background: woken after writes (`nudge`), it waits for a
/// pause in the writes ([`FOLLOW_QUIET`]) and applies the new changes in bulk, so a search after
/// a burst of writes finds little or nothing to catch up. Writes never wait for it: it only reads
/// the database and records its cursor through the writer like any search's catch-up. Ends when
/// `db` returns `None` (every handle dropped); errors are logged and retried at the next nudge.
pub(crate) async fn follow(
    nudge: Arc<tokio::sync::Notify>,
    db: impl Fn() -> Option<Database> + Send + 'static,
) {
    loop {
        nudge.notified().await;
        while tokio::time::timeout(FOLLOW_QUIET, nudge.notified())
            .await
            .is_ok()
        {}
        let Some(db) = db() else { return };
        let caught_up = match db.fts_to_follow().await {
            Ok(Some(fts)) => fts.catch_up(&db).await,
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = caught_up
            && !matches!(e, Error::Storage(StorageError::Closed))
        {
            tracing::warn!(error = %e, "the full-text index could not catch up; it will try again");
        }
    }
}

/// Takes the index's writer lock, waiting while another handle or process holds it (the writer
/// is held only while changes are applied).
///
/// tantivy's directory keeps the list of files it may delete (`.managed.json`) in memory from
/// the moment the index is opened, and writes that list back whole: a writer on a long-opened
/// index would drop what other handles registered since (their segments, once merged away,
/// never deleted) and never delete them itself. So for an index on disk each writer opens the
/// directory afresh, and keeps the writer only when, with the lock held, its list is the one on
/// disk (otherwise another writer came between the open and the lock: open again).
fn open_writer(index: &Index, dir: Option<&Path>, threads: usize) -> Result<IndexWriter> {
    let threads = threads.max(1);
    let options = tantivy::indexer::IndexWriterOptions::builder()
        .num_worker_threads(threads)
        .num_merge_threads(MERGE_THREADS)
        .memory_budget_per_thread(WRITER_BUDGET / threads)
        .build();
    let mut waited = 0;
    loop {
        let fresh = match dir {
            Some(dir) => {
                let fresh = open_index(dir).map_err(index_error)?;
                fresh.tokenizers().register(TOKENIZER, stem::analyzer());
                fresh
            }
            None => index.clone(),
        };
        let writer = fresh.writer_with_options(options.clone()).inspect(|w| {
            let mut policy = tantivy::merge_policy::LogMergePolicy::default();
            policy.set_min_num_segments(MERGE_AT);
            w.set_merge_policy(Box::new(policy));
        });
        match writer {
            Ok(w) if dir.is_none() => return Ok(w),
            Ok(w) if managed_list_current(&fresh)? => {
                // A writer killed mid-commit leaves files its commit never published, among
                // them delete files named by segment and operation stamp: this writer counts
                // from the same published stamp and would find its own names taken
                // (`FileAlreadyExists` on every commit, so the index never moved again). They
                // are registered before they are written, so collecting what the published
                // index does not use removes them. A collection that fails (its lock, a file
                // it cannot delete) fails only a commit that meets such a leftover, and the
                // next writer collects again, so it does not stop this one.
                if let Err(e) = w.garbage_collect_files().wait() {
                    tracing::warn!(error = %e, "the full-text index could not collect unused files");
                }
                return Ok(w);
            }
            Ok(w) if waited < 600 => {
                drop(w);
                waited += 1;
            }
            Err(tantivy::TantivyError::LockFailure(
                tantivy::directory::error::LockError::LockBusy,
                _,
            )) if waited < 600 => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                waited += 1;
            }
            Ok(_) => {
                return Err(index_failure(
                    "the full-text index's file list kept changing under its writer lock".into(),
                ));
            }
            Err(e) => return Err(index_error(e)),
        }
    }
}

/// How long a handle keeps the writer of a write indexed alongside (an import's call) after its
/// commit, for its next one ([`FtsIndex::committed`]): the calls of an import each find it open
/// (opening one costs about 10 ms: the directory, its file list, collecting unused files) and
/// never wait for the merges the previous call started (a merge of eight calls' segments takes
/// about half a second, and holds the writer's lock). Other handles and processes wait for the
/// lock at most this long after the import's last call (and its merges). Catch-ups never keep
/// their writer: a process searching after every write would hold the lock for good.
const KEEP_WRITER: std::time::Duration = std::time::Duration::from_millis(250);

/// The writer of a handle's last commit, while it is kept ([`KEEP_WRITER`]).
#[derive(Default)]
struct Kept {
    /// The writer and its indexing threads.
    writer: Option<(IndexWriter, usize)>,
    /// Counts commits, so a release meant for one commit's writer never takes a later one's.
    generation: u64,
}

/// A writer with at least `threads` indexing threads: the one this handle kept from its last
/// commit, or a new one ([`open_writer`]; one kept with fewer threads is released first, waiting
/// for its merges as a new writer would wait for its lock). With the threads it has.
fn take_writer(
    index: &Index,
    dir: Option<&Path>,
    kept: &std::sync::Mutex<Kept>,
    threads: usize,
) -> Result<(IndexWriter, usize)> {
    let taken = kept
        .lock()
        .map_err(|_| index_failure("the full-text index's kept writer was poisoned".into()))?
        .writer
        .take();
    if let Some((w, has)) = taken {
        if has >= threads {
            return Ok((w, has));
        }
        if let Err(e) = w.wait_merging_threads() {
            tracing::debug!(error = %e, "merging the full-text index's segments failed");
        }
    }
    Ok((open_writer(index, dir, threads)?, threads))
}

/// Indexing threads for a writer that takes `docs` documents.
fn threads_for(docs: usize) -> usize {
    if docs < ONE_THREAD_BELOW {
        1
    } else {
        INDEXING_THREADS
    }
}

/// Indexing threads for a writer that takes `docs` documents while a write of the same content
/// runs ([`FtsIndex::index_alongside`]): one core is left to the write (the database's worker
/// and the statements it runs), so on two cores the index takes one thread and writes one
/// segment rather than two, which also leaves fewer segments to merge.
fn alongside_threads(docs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    threads_for(docs).min(cores.saturating_sub(1)).max(1)
}

/// Whether `index`'s in-memory list of managed files is the one on disk.
fn managed_list_current(index: &Index) -> Result<bool> {
    use tantivy::Directory;
    let on_disk: HashSet<PathBuf> = match index.directory().atomic_read(Path::new(".managed.json"))
    {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            index_failure(format!(
                "the full-text index's file list cannot be read: {e}"
            ))
        })?,
        Err(tantivy::directory::error::OpenReadError::FileDoesNotExist(_)) => HashSet::new(),
        Err(e) => return Err(index_error(e.into())),
    };
    Ok(index.directory().list_managed_files() == on_disk)
}

/// A document to (re)index: the content's live state.
pub(crate) struct Doc {
    content: ContentRef,
    agents: Vec<AgentId>,
    created_at: i64,
    text: String,
}

impl Doc {
    /// The document of a message about to be written (`None` when it has no searchable text:
    /// the write logs no change for it either).
    pub(crate) fn message(
        id: crate::MessageId,
        agent: AgentId,
        created_at: i64,
        content: &[crate::ContentBlock],
    ) -> Option<Self> {
        let text = crate::search::message_text(content);
        (!text.is_empty()).then(|| Self {
            content: ContentRef::new(ContentType::Message, id.to_string()),
            agents: vec![agent],
            created_at,
            text,
        })
    }
}

/// The index of one database.
pub(crate) struct FtsIndex {
    index: Index,
    /// Its directory (`None`: in memory), which each writer opens afresh ([`open_writer`]).
    dir: Option<PathBuf>,
    reader: IndexReader,
    fields: Fields,
    /// One catch-up or rebuild at a time.
    catching_up: tokio::sync::Mutex<()>,
    /// The writer of the last commit, kept a while for the next one ([`KEEP_WRITER`]); taken
    /// only under `catching_up`, released by the task [`FtsIndex::committed`] starts.
    kept: Arc<std::sync::Mutex<Kept>>,
    /// PostgreSQL: how far the index has read messages by writing transaction (`None`: SQLite,
    /// whose log holds its messages). Changed only under `catching_up`.
    messages: Option<std::sync::Mutex<MessageMark>>,
    /// The `meta.json` the reader's segments were loaded from, and its cursor (see
    /// [`FtsIndex::reload_with_cursor`]).
    loaded: std::sync::Mutex<Option<Loaded>>,
}

/// The commit a reader reads: the bytes of its `meta.json` and the cursor in its payload.
/// Equal bytes are the same commit (a commit's opstamp only grows and its segments' ids are
/// random), so a reader loaded from them reads exactly what they list.
struct Loaded {
    meta: Vec<u8>,
    cursor: Option<i64>,
}

/// How far a PostgreSQL index has read messages by writing transaction (migration 0029).
///
/// Every message written by a transaction below `mark` is in the index: `mark` is the `xmin` of
/// a snapshot that read them (every transaction below it had ended, so no row below it can
/// appear or change later without a newer transaction writing it). Rows of later transactions
/// that a catch-up saw are applied too, without moving the mark, and remembered in `tail` with
/// the transaction that wrote them, so the next catch-up re-reads only what was written again;
/// a long transaction elsewhere holding `xmin` back costs each catch-up one index range scan,
/// not a re-index.
#[derive(Debug, Default)]
struct MessageMark {
    /// `None` until the index is built (the rebuild sets it).
    mark: Option<i64>,
    /// Messages at or after `mark` already applied, as (id, writing transaction).
    tail: HashSet<(String, i64)>,
}

impl std::fmt::Debug for FtsIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtsIndex").finish_non_exhaustive()
    }
}

/// The index directory of a SQLite URL: `<file>.search`.
pub(crate) fn dir_for(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//");
    let path = path.split('?').next()?;
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    Some(PathBuf::from(format!("{path}.search")))
}

/// The file in an index directory that serialises opening it: handles of this and other
/// processes take it exclusively (an OS file lock, released when the handle closes) while they
/// open, create or recreate the index, so none recreates a directory another is creating.
const OPEN_LOCK: &str = ".pattern-open.lock";

fn dir_error(dir: &Path, what: &str, e: std::io::Error) -> Error {
    index_failure(format!(
        "cannot {what} index directory {}: {e}",
        dir.display()
    ))
}

/// Opens the index in `dir`, creating it when there is none. An index with another schema
/// (written by another version) or one tantivy cannot open is recreated empty (derived data: the
/// next catch-up rebuilds it). Holds [`OPEN_LOCK`] throughout, so two handles opening at once
/// never both create, and a missing `meta.json` seen while another handle creates it is never
/// taken for damage.
fn open_dir(dir: &Path, schema: &Schema) -> Result<Index> {
    std::fs::create_dir_all(dir).map_err(|e| dir_error(dir, "create", e))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(OPEN_LOCK))
        .map_err(|e| dir_error(dir, "lock", e))?;
    lock.lock().map_err(|e| dir_error(dir, "lock", e))?;
    if dir.join("meta.json").exists() {
        match open_index(dir) {
            Ok(index) if index.schema() == *schema => return Ok(index),
            Ok(_) => {
                tracing::warn!(dir = %dir.display(), "full-text index has another schema; rebuilding it")
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "full-text index cannot be opened; rebuilding it")
            }
        }
        clear_dir(dir).map_err(|e| dir_error(dir, "clear", e))?;
    }
    let created = dir::SyncAtPublish::open(dir)
        .and_then(|d| Index::create(d, schema.clone(), tantivy::IndexSettings::default()))
        .map_err(index_error);
    // Released only now, with the new index complete on disk.
    drop(lock);
    created
}

/// The index in `dir`, on a directory that syncs a commit's files together ([`dir`]).
fn open_index(dir: &Path) -> tantivy::Result<Index> {
    Index::open(dir::SyncAtPublish::open(dir)?)
}

/// Removes everything in `dir` but the open lock (which the caller holds).
fn clear_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == OPEN_LOCK {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

impl FtsIndex {
    /// Opens (or creates) the index in `dir`; in RAM without one. An index with another schema
    /// (written by another version) is recreated empty, and so rebuilt by the next catch-up.
    /// `per_process`: the index of a PostgreSQL database (no directory: in RAM), which also
    /// follows messages by writing transaction and records no cursor in the database.
    pub(crate) async fn open(dir: Option<PathBuf>, per_process: bool) -> Result<Self> {
        let mut index = tokio::task::spawn_blocking(move || Self::open_blocking(dir.as_deref()))
            .await
            .map_err(join_error)??;
        if per_process {
            index.messages = Some(std::sync::Mutex::new(MessageMark::default()));
        }
        Ok(index)
    }

    fn open_blocking(dir: Option<&Path>) -> Result<Self> {
        let (schema, fields) = schema();
        let index = match dir {
            None => Index::create_in_ram(schema.clone()),
            Some(dir) => open_dir(dir, &schema)?,
        };
        // Before any writer or query takes it from the manager.
        index.tokenizers().register(TOKENIZER, stem::analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(index_error)?;
        Ok(Self {
            index,
            dir: dir.map(Path::to_path_buf),
            reader,
            fields,
            catching_up: tokio::sync::Mutex::new(()),
            kept: Arc::default(),
            messages: None,
            loaded: std::sync::Mutex::new(None),
        })
    }

    /// Records the index's cursor in `search_consumers` (an index shared through a file; a
    /// PostgreSQL process's own index records none: it ends with its process, and a log pruned
    /// past it has it rebuilt).
    async fn record_cursor(&self, db: &Database, cursor: i64) -> Result<()> {
        if self.messages.is_some() {
            return Ok(());
        }
        db.set_search_cursor(CONSUMER, cursor).await
    }

    /// The message mark, locked (a poisoned lock is an index failure, never a panic).
    fn marks(&self) -> Result<Option<std::sync::MutexGuard<'_, MessageMark>>> {
        self.messages
            .as_ref()
            .map(|m| {
                m.lock().map_err(|_| {
                    index_failure("the full-text index's message mark was poisoned".into())
                })
            })
            .transpose()
    }

    /// PostgreSQL: applies the messages written since the mark (see [`MessageMark`]) and moves
    /// the mark to the snapshot's `xmin`. Called with `catching_up` held, after the log's
    /// changes up to `cursor` (kept as the commit's cursor).
    async fn catch_up_messages(self: &Arc<Self>, db: &Database, cursor: i64) -> Result<()> {
        let Some(mark) = self.marks()?.and_then(|m| m.mark) else {
            return Ok(());
        };
        let (xmin, touched) = {
            let mut pooled = db.reader().acquire().await?;
            let mut conn = pooled.conn();
            sql::messages_touched(&mut conn, mark).await?
        };
        let fresh: Vec<ContentRef> = {
            let Some(marks) = self.marks()? else {
                return Ok(());
            };
            let mut seen = HashSet::new();
            touched
                .iter()
                .filter(|t| !marks.tail.contains(*t))
                .filter(|(id, _)| seen.insert(id.clone()))
                .map(|(id, _)| ContentRef::new(ContentType::Message, id.clone()))
                .collect()
        };
        for refs in fresh.chunks(CHANGES_PER_COMMIT) {
            let docs = load_docs(db, refs).await?;
            self.apply(refs.to_vec(), docs, cursor, cursor).await?;
        }
        if let Some(mut marks) = self.marks()? {
            let mark = marks.mark.map_or(xmin, |m| m.max(xmin));
            marks.mark = Some(mark);
            marks.tail = touched.into_iter().filter(|(_, t)| *t >= mark).collect();
        }
        Ok(())
    }

    /// The cursor of the commit on disk now; `None` for an index never built.
    #[cfg(test)]
    fn cursor(&self) -> Result<Option<i64>> {
        let metas = self.index.load_metas().map_err(index_error)?;
        Ok(metas.payload.and_then(|p| p.parse().ok()))
    }

    /// Reloads the reader and returns the cursor of exactly the commit it now reads (`None`: an
    /// index never built). Another handle may commit between reading `meta.json` and reloading;
    /// a cursor newer than the reader's documents would skip changes a search then misses, so
    /// the two are read again until the reader's segments are the ones `meta.json` lists.
    ///
    /// A reload opens every segment afresh (tantivy reuses none, and takes the directory's
    /// meta lock to do it), so it is skipped while `meta.json` holds the bytes the reader was
    /// loaded from: reading the file is all a search pays when nothing was committed since
    /// (decision 0025, "Stop 43"). The bytes are recorded only when they read the same before
    /// and after a reload that loaded exactly the segments they list.
    fn reload_with_cursor(&self) -> Result<Option<i64>> {
        let meta = self.meta_bytes()?;
        if let Some(loaded) = self.loaded()?.as_ref()
            && meta.as_deref() == Some(loaded.meta.as_slice())
        {
            return Ok(loaded.cursor);
        }
        let mut before = meta;
        for _ in 0..100 {
            let metas = self.index.load_metas().map_err(index_error)?;
            self.reader.reload().map_err(index_error)?;
            let searcher = self.reader.searcher();
            let loaded = searcher.generation().segments();
            let same = metas.segments.len() == loaded.len()
                && metas
                    .segments
                    .iter()
                    .all(|s| loaded.get(&s.id()) == Some(&s.delete_opstamp()));
            let after = self.meta_bytes()?;
            let cursor = metas.payload.and_then(|p| p.parse().ok());
            if same {
                *self.loaded()? = match (before, after) {
                    (Some(b), Some(a)) if a == b => Some(Loaded { meta: a, cursor }),
                    _ => None,
                };
                return Ok(cursor);
            }
            before = after;
        }
        Err(index_failure(
            "the full-text index kept changing while it was read".into(),
        ))
    }

    /// The bytes of the index's `meta.json` (`None`: no commit yet).
    fn meta_bytes(&self) -> Result<Option<Vec<u8>>> {
        use tantivy::Directory;
        match self.index.directory().atomic_read(Path::new("meta.json")) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(tantivy::directory::error::OpenReadError::FileDoesNotExist(_)) => Ok(None),
            Err(e) => Err(index_error(e.into())),
        }
    }

    /// The commit the reader was last loaded from, locked (a poisoned lock is an index
    /// failure, never a panic).
    fn loaded(&self) -> Result<std::sync::MutexGuard<'_, Option<Loaded>>> {
        self.loaded
            .lock()
            .map_err(|_| index_failure("the full-text index's reader state was poisoned".into()))
    }

    /// Makes the next catch-up reload the reader whatever `meta.json` holds (a search met a
    /// segment file removed under it).
    pub(crate) fn forget_loaded(&self) -> Result<()> {
        *self.loaded()? = None;
        Ok(())
    }

    /// Applies every change after the index's cursor (rebuilding first if it has none), until
    /// the reader reads a commit whose cursor has no change after it. Other handles commit to
    /// the same directory meanwhile (even rebuild it from an older head), so each round starts
    /// from the cursor of the commit the reader reads, never from one remembered.
    pub(crate) async fn catch_up(self: &Arc<Self>, db: &Database) -> Result<()> {
        let _one = self.catching_up.lock().await;
        // The cursor is recorded when it moved from the first one read, or after a rebuild
        // (even with nothing after it, so pruning the log knows this follower).
        let (mut first, mut rebuilt) = (None, false);
        let mut stalled = 0;
        loop {
            // Another handle's rebuild or recreation can move the cursor back under this one;
            // a run of rounds without progress is an error, not a loop.
            if stalled > 16 {
                return Err(index_failure(
                    "the full-text index's cursor kept moving back".into(),
                ));
            }
            let cursor = match self.reload_with_cursor()? {
                Some(c) => c,
                None => {
                    self.rebuild_locked(db).await?;
                    rebuilt = true;
                    stalled += 1;
                    continue;
                }
            };
            let started = *first.get_or_insert(cursor);
            let Some(changes) = changes_since(db, cursor).await? else {
                tracing::warn!(
                    cursor,
                    "the search log was pruned past the full-text index's cursor; rebuilding it"
                );
                self.rebuild_locked(db).await?;
                rebuilt = true;
                stalled += 1;
                continue;
            };
            let Some(last) = changes.last().map(|c| c.seq) else {
                if rebuilt || started != cursor {
                    self.record_cursor(db, cursor).await?;
                }
                return self.catch_up_messages(db, cursor).await;
            };
            let refs = changed_refs(&changes);
            let docs = load_docs(db, &refs).await?;
            let committed = self.apply(refs, docs, cursor, last).await?;
            stalled = if committed.is_some_and(|c| c > cursor) {
                0
            } else {
                stalled + 1
            };
        }
    }

    /// Rebuilds the index from the live content; returns the number of documents.
    pub(crate) async fn rebuild(self: &Arc<Self>, db: &Database) -> Result<u64> {
        let _one = self.catching_up.lock().await;
        let (cursor, n) = self.rebuild_locked(db).await?;
        self.record_cursor(db, cursor).await?;
        Ok(n)
    }

    async fn rebuild_locked(self: &Arc<Self>, db: &Database) -> Result<(i64, u64)> {
        // The head is read first: anything committed after it is in the log tail and is applied
        // again by the next catch-up (harmless: changes re-read the current state). So is the
        // message mark (PostgreSQL): messages of transactions at or after it are read again.
        let mark = match self.messages {
            Some(_) => {
                let mut pooled = db.reader().acquire().await?;
                sql::snapshot_xmin(&mut pooled.conn()).await?
            }
            None => 0,
        };
        let head = db.search_changes_head().await?;
        // The writer takes each page while the next is read, so the rebuild holds two pages of
        // documents at a time, not the whole database's (every PostgreSQL process rebuilds on
        // its first search).
        let (index, dir, f) = (self.index.clone(), self.dir.clone(), self.fields);
        let kept = self.kept.clone();
        let (pages, mut taken) = tokio::sync::mpsc::channel::<Vec<Doc>>(2);
        let writing = tokio::task::spawn_blocking(move || -> Result<(IndexWriter, usize)> {
            let (mut w, threads) = take_writer(&index, dir.as_deref(), &kept, INDEXING_THREADS)?;
            w.delete_all_documents().map_err(index_error)?;
            while let Some(docs) = taken.blocking_recv() {
                add(&mut w, f, &[], docs)?;
            }
            Ok((w, threads))
        });
        let read = async {
            let mut n = 0u64;
            let mut pooled = db.reader().acquire().await?;
            let mut conn = pooled.conn();
            for t in ContentType::ALL {
                let mut after = String::new();
                loop {
                    let page = sql::live_page(&mut conn, t, &after, 2000).await?;
                    let Some(last) = page.last() else { break };
                    after = last.content.id.clone();
                    let full = page.len() == 2000;
                    let docs = with_agents(&mut conn, page).await?;
                    n += docs.len() as u64;
                    if pages.send(docs).await.is_err() {
                        // The writer failed: its error is the answer.
                        return Ok(n);
                    }
                    if !full {
                        break;
                    }
                }
            }
            Ok::<u64, Error>(n)
        }
        .await;
        drop(pages);
        let writer = writing.await.map_err(join_error)?;
        let (n, (mut w, threads)) = match (read, writer) {
            (Ok(n), Ok(w)) => (n, w),
            (Err(e), Ok((w, _))) => {
                roll_back(w).await;
                return Err(e);
            }
            (_, Err(e)) => return Err(e),
        };
        let w = tokio::task::spawn_blocking(move || commit_at(&mut w, head).map(|_| w))
            .await
            .map_err(join_error)??;
        self.committed(w, threads, false)?;
        if let Some(mut marks) = self.marks()? {
            marks.mark = Some(mark);
            marks.tail.clear();
        }
        Ok((head, n))
    }

    /// Deletes the documents of `remove`, adds `docs` (those of the changes after `from` up to
    /// `cursor`) and commits the cursor [`commit`] finds safe. Returns the cursor committed
    /// (`None`: nothing committed, the index was recreated meanwhile).
    async fn apply(
        self: &Arc<Self>,
        remove: Vec<ContentRef>,
        docs: Vec<Doc>,
        from: i64,
        cursor: i64,
    ) -> Result<Option<i64>> {
        let (index, dir, kept) = (self.index.clone(), self.dir.clone(), self.kept.clone());
        let f = self.fields;
        let (writer, threads, committed) = tokio::task::spawn_blocking(move || {
            let wanted = threads_for(docs.len());
            let (mut w, threads) = take_writer(&index, dir.as_deref(), &kept, wanted)?;
            add(&mut w, f, &remove, docs)?;
            let committed = commit(&mut w, from, cursor)?;
            Ok::<_, Error>((w, threads, committed))
        })
        .await
        .map_err(join_error)??;
        self.committed(writer, threads, false)?;
        Ok(committed)
    }

    /// After a commit: the commit is visible now. The writer (with its `threads`) is released
    /// on its own thread ([`release`]): merging the segments its commits started can take
    /// seconds on a large index and no search needs it, so that thread waits for the merges,
    /// drops the writer (its lock released) and then reloads the reader under the catch-up
    /// lock, so opening the merged segments (milliseconds for a large one) is not left to the
    /// next search. A catch-up with nothing new never needs the writer. With `keep` (a write
    /// indexed alongside: the next call of an import is likely on its way) the writer is kept
    /// for the next commit of this handle first ([`KEEP_WRITER`]).
    fn committed(self: &Arc<Self>, writer: IndexWriter, threads: usize, keep: bool) -> Result<()> {
        if keep {
            self.keep(writer, threads)?;
        } else {
            let index = Arc::downgrade(self);
            std::mem::drop(tokio::task::spawn_blocking(move || release(writer, &index)));
        }
        self.reload_with_cursor().map(|_| ())
    }

    /// Keeps `writer` (with its `threads`) for the next commit, and starts the task that releases
    /// it when none took it ([`FtsIndex::committed`]).
    fn keep(self: &Arc<Self>, writer: IndexWriter, threads: usize) -> Result<()> {
        let (generation, earlier) = {
            let mut kept = self.kept.lock().map_err(|_| {
                index_failure("the full-text index's kept writer was poisoned".into())
            })?;
            kept.generation += 1;
            (kept.generation, kept.writer.replace((writer, threads)))
        };
        // Never one kept already (every writer is taken from the slot under the catch-up lock);
        // were there one, it is released like any other, not dropped on this async thread.
        if let Some((earlier, _)) = earlier {
            let index = Arc::downgrade(self);
            std::mem::drop(tokio::task::spawn_blocking(move || {
                release(earlier, &index)
            }));
        }
        let (kept, index) = (self.kept.clone(), Arc::downgrade(self));
        std::mem::drop(tokio::spawn(async move {
            tokio::time::sleep(KEEP_WRITER).await;
            let writer = match kept.lock() {
                Ok(mut kept) if kept.generation == generation => kept.writer.take(),
                _ => None,
            };
            if let Some((writer, _)) = writer {
                let _ = tokio::task::spawn_blocking(move || release(writer, &index)).await;
            }
        }));
        Ok(())
    }

    /// The end of an indexing thread whose commit was aborted (or never prepared): its writer
    /// kept, its error the answer.
    async fn after_abort(
        self: &Arc<Self>,
        indexing: tokio::task::JoinHandle<Result<(IndexWriter, usize, Option<i64>)>>,
    ) -> Result<()> {
        let (w, threads, _) = indexing.await.map_err(join_error)??;
        self.keep(w, threads)
    }

    /// Runs `write`, a write that stores new content (the documents `docs` makes, with ids no
    /// document has yet; about `expected` of them) and returns the first and last search change
    /// it logged, while the index takes the documents on a thread of its own: it indexes them,
    /// writes their segment and syncs its files ([`tantivy::PreparedCommit`]) while the database
    /// writes, then waits for the write's outcome. Once the write has committed, the changes
    /// before it that the index had not applied are applied too, and the index commits with the
    /// write's last change as its cursor. So the index is current when the write returns, at the
    /// cost of the longer of the two rather than their sum (an import: the first search after it
    /// does not index it), and publishing it after the database commits costs little more than
    /// writing `meta.json`.
    ///
    /// The write's result is the caller's answer: a failed write discards the documents (the
    /// prepared commit is aborted), and an index that fails after the write committed is left to
    /// the next catch-up (its cursor did not move), logged, never reported as a failed write.
    /// Holds the catch-up lock throughout, so no catch-up applies the write's changes twice.
    pub(crate) async fn index_alongside<T>(
        self: &Arc<Self>,
        db: &Database,
        expected: usize,
        docs: impl FnOnce() -> Vec<Doc> + Send + 'static,
        write: impl std::future::Future<Output = Result<(T, Option<(i64, i64)>)>>,
    ) -> Result<T> {
        let _one = self.catching_up.lock().await;
        let cursor = match self.reload_with_cursor() {
            Ok(Some(cursor)) => cursor,
            // Never built (the next catch-up rebuilds it from the database) or unreadable.
            _ => return write.await.map(|(out, _)| out),
        };
        let (decide, decision) = tokio::sync::oneshot::channel();
        let (index, dir, kept) = (self.index.clone(), self.dir.clone(), self.kept.clone());
        let (f, wanted) = (self.fields, alongside_threads(expected));
        let indexing = tokio::task::spawn_blocking(move || {
            let (mut w, threads) = take_writer(&index, dir.as_deref(), &kept, wanted)?;
            add(&mut w, f, &[], docs())?;
            let committed = commit_prepared(&mut w, decision)?;
            Ok::<_, Error>((w, threads, committed))
        });
        let written = write.await;
        let (out, logged) = match written {
            Ok(done) => done,
            Err(e) => {
                // Dropping the decision aborts the prepared commit.
                drop(decide);
                if let Err(e) = self.after_abort(indexing).await {
                    tracing::debug!(error = %e, "the full-text index's writer failed beside a failed write");
                }
                return Err(e);
            }
        };
        let indexed = match logged {
            Some((first, last)) => {
                self.finish_alongside(db, indexing, decide, cursor, first, last)
                    .await
            }
            None => {
                drop(decide);
                self.after_abort(indexing).await
            }
        };
        if let Err(e) = indexed {
            tracing::warn!(error = %e, "the full-text index could not take the written content; \
                the next catch-up will");
        }
        Ok(out)
    }

    /// The rest of [`FtsIndex::index_alongside`] once the write committed its changes
    /// `first..=last` and `indexing` holds their documents' prepared commit, started from the
    /// index at `from`. Without changes between `from` and `first` (no other write came between
    /// the index's last commit and this one) the prepared commit is published with `last` as the
    /// cursor. Otherwise it is published without moving the cursor, and the documents of those
    /// changes are added and committed with `last` (a crash between the two commits re-applies
    /// the write's changes: harmless, a change re-reads its content).
    async fn finish_alongside(
        self: &Arc<Self>,
        db: &Database,
        indexing: tokio::task::JoinHandle<Result<(IndexWriter, usize, Option<i64>)>>,
        decide: tokio::sync::oneshot::Sender<Commit>,
        from: i64,
        first: i64,
        last: i64,
    ) -> Result<()> {
        let before = if from < first - 1 {
            changes_since(db, from).await
        } else {
            Ok(Some(Vec::new()))
        };
        let before: Vec<SearchChange> = match before {
            Ok(Some(changes)) => changes.into_iter().filter(|c| c.seq < first).collect(),
            // Pruned past the cursor (the next catch-up rebuilds the index), or unreadable:
            // dropping the decision aborts the prepared commit.
            other => {
                drop(decide);
                self.after_abort(indexing).await?;
                return other.map(|_| ());
            }
        };
        let done = if before.is_empty() { last } else { from };
        // A writer that failed already has its error in `indexing`.
        let _ = decide.send(Commit { from, last: done });
        let (w, threads, committed) = indexing.await.map_err(join_error)??;
        let Some(committed) = committed else {
            // Recreated by another handle meanwhile: the next catch-up rebuilds it.
            return self.committed(w, threads, true);
        };
        if before.is_empty() {
            self.committed(w, threads, true)?;
            return self.record_cursor(db, committed).await;
        }
        self.commit_changes_before(db, (w, threads), before, from, first, last)
            .await
    }

    /// Adds the documents of the changes after `from` and before `first` (the first page of
    /// them is `page`) to `w` and commits them with `last` as the cursor: the changes of
    /// `first..=last` are already committed by `w`.
    async fn commit_changes_before(
        self: &Arc<Self>,
        db: &Database,
        (mut w, threads): (IndexWriter, usize),
        mut page: Vec<SearchChange>,
        from: i64,
        first: i64,
        last: i64,
    ) -> Result<()> {
        let f = self.fields;
        while let Some(end) = page.last().map(|c| c.seq) {
            let refs = changed_refs(&page);
            let docs = match load_docs(db, &refs).await {
                Ok(docs) => docs,
                Err(e) => {
                    roll_back(w).await;
                    return Err(e);
                }
            };
            w = tokio::task::spawn_blocking(move || add(&mut w, f, &refs, docs).map(|()| w))
                .await
                .map_err(join_error)??;
            if end >= first - 1 {
                break;
            }
            page = match changes_since(db, end).await {
                Ok(Some(changes)) => changes.into_iter().filter(|c| c.seq < first).collect(),
                // Pruned past the cursor: the next catch-up rebuilds the index.
                Ok(None) => {
                    roll_back(w).await;
                    return Ok(());
                }
                Err(e) => {
                    roll_back(w).await;
                    return Err(e);
                }
            };
        }
        let (w, committed) =
            tokio::task::spawn_blocking(move || commit(&mut w, from, last).map(|c| (w, c)))
                .await
                .map_err(join_error)??;
        self.committed(w, threads, true)?;
        match committed {
            Some(cursor) => self.record_cursor(db, cursor).await,
            None => Ok(()),
        }
    }

    /// Searches the index (already caught up) and checks every hit against the database.
    pub(crate) async fn search(
        &self,
        db: &Database,
        query: &str,
        opts: &TextSearch,
    ) -> Result<Vec<TextHit>> {
        let Some(q) = self.build_query(query, opts) else {
            return Ok(Vec::new());
        };
        let q: Arc<dyn Query> = Arc::from(q);
        let mut fetch = (opts.limit + 16).min(opts.limit * 4);
        loop {
            let searcher = self.reader.searcher();
            let f = self.fields;
            let q2 = q.clone();
            let hits: Vec<(f32, ContentRef)> = tokio::task::spawn_blocking(move || {
                let top = searcher
                    .search(&*q2, &TopDocs::with_limit(fetch).order_by_score())
                    .map_err(index_error)?;
                let mut out = Vec::with_capacity(top.len());
                let mut keys = KeyReader::new(&searcher, f.key);
                for (score, address) in top {
                    if let Some(content) = keys.content(address)? {
                        out.push((score, content));
                    }
                }
                Ok::<_, Error>(out)
            })
            .await
            .map_err(join_error)??;
            let exhausted = hits.len() < fetch;
            let refs: Vec<ContentRef> = hits.iter().map(|(_, r)| r.clone()).collect();
            let rows = db.resolve_content(&refs, opts.agent).await?;
            let mut by_ref: HashMap<ContentRef, ContentRow> =
                rows.into_iter().map(|r| (r.content.clone(), r)).collect();
            let mut out = Vec::new();
            for (score, r) in hits {
                let Some(row) = by_ref.remove(&r) else {
                    continue;
                };
                if !opts.wants(r.content_type) || !opts.in_range(row.created_at) {
                    continue;
                }
                out.push(TextHit {
                    content: row.content,
                    agent_id: row.agent_id,
                    score,
                    created_at: row.created_at,
                    text: row.text,
                });
                if out.len() == opts.limit {
                    break;
                }
            }
            if out.len() == opts.limit || exhausted || fetch >= 100_000 {
                return Ok(out);
            }
            fetch *= 4;
        }
    }

    /// The user's words as an OR of term queries, with the filters as zero-score conditions.
    /// `None` when the text has no searchable word (e.g. only punctuation).
    fn build_query(&self, query: &str, opts: &TextSearch) -> Option<Box<dyn Query>> {
        let f = self.fields;
        let mut analyzer = self.index.tokenizers().get(TOKENIZER)?;
        let mut terms = Vec::new();
        let mut seen = HashSet::new();
        let mut stream = analyzer.token_stream(query);
        while stream.advance() {
            let text = stream.token().text.clone();
            if seen.insert(text.clone()) {
                terms.push(Term::from_field_text(f.text, &text));
            }
        }
        if terms.is_empty() {
            return None;
        }
        let words: Vec<(Occur, Box<dyn Query>)> = terms
            .into_iter()
            .map(|t| {
                (
                    Occur::Should,
                    Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs)) as Box<dyn Query>,
                )
            })
            .collect();
        let mut clauses: Vec<(Occur, Box<dyn Query>)> =
            vec![(Occur::Must, Box::new(BooleanQuery::new(words)))];
        let filter = |q: Box<dyn Query>| {
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(q, 0.0)) as Box<dyn Query>,
            )
        };
        if !opts.content_types.is_empty() {
            let types: Vec<(Occur, Box<dyn Query>)> = opts
                .content_types
                .iter()
                .map(|t| {
                    (
                        Occur::Should,
                        Box::new(TermQuery::new(
                            Term::from_field_text(f.content_type, t.as_str()),
                            IndexRecordOption::Basic,
                        )) as Box<dyn Query>,
                    )
                })
                .collect();
            clauses.push(filter(Box::new(BooleanQuery::new(types))));
        }
        if let Some(agent) = opts.agent {
            clauses.push(filter(Box::new(TermQuery::new(
                Term::from_field_text(f.agent, &agent.to_string()),
                IndexRecordOption::Basic,
            ))));
        }
        if opts.from.is_some() || opts.to.is_some() {
            let lower = opts.from.map_or(Bound::Unbounded, |t| {
                Bound::Included(Term::from_field_i64(f.created_at, t.timestamp_millis()))
            });
            let upper = opts.to.map_or(Bound::Unbounded, |t| {
                Bound::Excluded(Term::from_field_i64(f.created_at, t.timestamp_millis()))
            });
            clauses.push(filter(Box::new(RangeQuery::new(lower, upper))));
        }
        Some(Box::new(BooleanQuery::new(clauses)))
    }
}

/// The changes after `cursor` (whole log entries, about [`CHANGES_PER_COMMIT`]), or `None` when
/// the log was pruned past `cursor` (changes the index needs are gone: it must be rebuilt).
///
/// Pruning never deletes the newest change and `seq` has no gaps on SQLite (rows leave the log
/// only by pruning, oldest first), so the prune mark is read only when the first change is not
/// `cursor + 1`: none after `cursor` means the newest is at or before it, and `cursor + 1`
/// still logged means nothing after `cursor` went. The mark is read after the changes, so a
/// prune between the two reads is seen.
async fn changes_since(db: &Database, cursor: i64) -> Result<Option<Vec<SearchChange>>> {
    let mut pooled = db.reader().acquire().await?;
    let mut conn = pooled.conn();
    let changes = sql::changes_after(&mut conn, cursor, CHANGES_PER_COMMIT).await?;
    if changes.first().is_none_or(|c| c.seq == cursor + 1) {
        return Ok(Some(changes));
    }
    let pruned = sql::pruned_through(&mut conn).await?;
    Ok((pruned <= cursor).then_some(changes))
}

/// The content whose documents `changes` replace or remove, once each.
fn changed_refs(changes: &[SearchChange]) -> Vec<ContentRef> {
    let mut seen = HashSet::new();
    changes
        .iter()
        .filter(|c| matches!(c.kind, ChangeKind::Text | ChangeKind::Delete))
        .filter(|c| seen.insert(c.content.clone()))
        .map(|c| c.content.clone())
        .collect()
}

/// Releases a writer no longer kept (on a blocking thread): waits for its merges, drops it (its
/// lock released) and reloads `index`'s reader, so the merged segments are open before a search
/// needs them.
fn release(writer: IndexWriter, index: &std::sync::Weak<FtsIndex>) {
    if let Err(e) = writer.wait_merging_threads() {
        tracing::debug!(error = %e, "merging the full-text index's segments failed");
    }
    let Some(index) = index.upgrade() else { return };
    let _one = index.catching_up.blocking_lock();
    if let Err(e) = index.reload_with_cursor() {
        tracing::debug!(error = %e, "the full-text index's reader could not reload");
    }
}

/// Deletes the documents of `remove` and adds `docs` (on a blocking thread).
///
/// A UUID-keyed content is removed by one [`Removal`] for all of them (a scan of the segments
/// whose ids' range holds one), any other by its key term.
fn add(w: &mut IndexWriter, f: Fields, remove: &[ContentRef], docs: Vec<Doc>) -> Result<()> {
    let keys: Vec<Key> = remove.iter().map(Key::of).collect();
    for (r, key) in remove.iter().zip(&keys) {
        if *key == Key::Text {
            w.delete_term(Term::from_field_bytes(f.key, &key_bytes(r)));
        }
    }
    if let Some(removal) = Removal::of(&keys) {
        // `delete_query` is hidden from tantivy's documentation but public, and what
        // `delete_term` itself calls.
        w.delete_query(Box::new(DocPredicateQuery::from(removal)))
            .map_err(index_error)?;
    }
    for d in docs {
        let mut document = doc!(
            f.content_type => d.content.content_type.as_str(),
            f.created_at => d.created_at,
            f.text => d.text,
        );
        match Key::of(&d.content) {
            Key::Uuid { kind, hi, lo } => {
                document.add_u64(f.kind, kind);
                document.add_u64(f.id_hi, hi);
                document.add_u64(f.id_lo, lo);
            }
            Key::Text => {
                document.add_u64(f.kind, u64::from(kind_code(d.content.content_type)));
                document.add_bytes(f.key, &key_bytes(&d.content));
            }
        }
        for a in d.agents {
            document.add_text(f.agent, a.to_string());
        }
        w.add_document(document).map_err(index_error)?;
    }
    Ok(())
}

/// Commits what `w` holds, the documents of the changes after `from` up to `last` re-read
/// (on a blocking thread), and returns the cursor it recorded, or `None` (rolled back) when the
/// index has no cursor (recreated by another handle: the next catch-up rebuilds it).
fn commit(w: &mut IndexWriter, from: i64, last: i64) -> Result<Option<i64>> {
    match cursor_to_commit(base_cursor(w)?, from, last) {
        Some(cursor) => commit_at(w, cursor).map(Some),
        None => {
            w.rollback().map_err(index_error)?;
            Ok(None)
        }
    }
}

/// The cursor of the commit `w` started from (`None`: the index has none, recreated by
/// another handle). Read under the writer lock, so it is the last commit before `w`'s.
fn base_cursor(w: &IndexWriter) -> Result<Option<i64>> {
    let base = w.index().load_metas().map_err(index_error)?.payload;
    Ok(base.and_then(|p| p.parse::<i64>().ok()))
}

/// The cursor a commit records when it holds the documents of the changes after `from` up to
/// `last` and starts from a commit at `base` ([`base_cursor`]); `None` without a base.
///
/// The base may be another handle's commit: one at or after `from` holds every change up to
/// `from`, so with the new documents every change up to `last` is in (when it is past `last`,
/// the new documents may be older than its own: recording `last` has its later changes applied
/// again); one before `from` (a rebuild from an older head) lacks the changes between them, so
/// its cursor is kept.
fn cursor_to_commit(base: Option<i64>, from: i64, last: i64) -> Option<i64> {
    base.map(|base| if base >= from { last } else { base })
}

/// What [`FtsIndex::index_alongside`]'s indexing thread is told once the write committed: commit
/// the documents as those of the changes after `from` up to `last` ([`cursor_to_commit`]).
struct Commit {
    from: i64,
    last: i64,
}

/// Prepares the commit of what `w` holds (its segments written, their files synced) and, once
/// `decision` says so, publishes it ([`Commit`]); aborts it when the decision is dropped (the
/// write failed, or logged nothing). Returns the cursor committed; `None` when nothing was
/// (aborted, or the index has no cursor). On a blocking thread: it waits for the write.
fn commit_prepared(
    w: &mut IndexWriter,
    decision: tokio::sync::oneshot::Receiver<Commit>,
) -> Result<Option<i64>> {
    let base = base_cursor(w)?;
    let directory = w.index().directory().clone();
    let mut prepared = w.prepare_commit().map_err(index_error)?;
    // The new segments' files synced now, while the database writes: publishing then syncs only
    // what is left (`fts::dir`). A failed sync is tried again when the commit is published.
    if let Err(e) = tantivy::Directory::sync_directory(&directory) {
        tracing::debug!(error = %e, "the full-text index's new files could not be synced yet");
    }
    let cursor = match decision.blocking_recv() {
        Ok(Commit { from, last }) => cursor_to_commit(base, from, last),
        Err(_) => None,
    };
    let Some(cursor) = cursor else {
        prepared.abort().map_err(index_error)?;
        return Ok(None);
    };
    prepared.set_payload(&cursor.to_string());
    prepared.commit().map_err(index_error)?;
    Ok(Some(cursor))
}

/// Commits what `w` holds with `cursor` as the index's payload (on a blocking thread).
fn commit_at(w: &mut IndexWriter, cursor: i64) -> Result<i64> {
    let mut prepared = w.prepare_commit().map_err(index_error)?;
    prepared.set_payload(&cursor.to_string());
    prepared.commit().map_err(index_error)?;
    Ok(cursor)
}

/// Discards what `w` holds since its last commit and releases its lock.
async fn roll_back(mut w: IndexWriter) {
    let undone = tokio::task::spawn_blocking(move || w.rollback().map(|_| ())).await;
    if !matches!(undone, Ok(Ok(()))) {
        tracing::debug!("rolling back the full-text index's writer failed; it is dropped");
    }
}

/// The live state of `refs` as documents (gone content has none).
async fn load_docs(db: &Database, refs: &[ContentRef]) -> Result<Vec<Doc>> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let mut pooled = db.reader().acquire().await?;
    let mut conn = pooled.conn();
    let live = sql::load_live(&mut conn, refs, None).await?;
    let rows: Vec<ContentRow> = crate::search::in_order(refs, live);
    with_agents(&mut conn, rows).await
}

/// Adds who sees each row: its agent, or for a block every agent with an access row.
async fn with_agents(conn: &mut crate::sql::Conn<'_>, rows: Vec<ContentRow>) -> Result<Vec<Doc>> {
    let blocks: Vec<&str> = rows
        .iter()
        .filter(|r| r.content.content_type == ContentType::Block)
        .map(|r| r.content.id.as_str())
        .collect();
    let mut access = if blocks.is_empty() {
        HashMap::new()
    } else {
        sql::block_agents(conn, &blocks).await?
    };
    Ok(rows
        .into_iter()
        .map(|r| {
            let agents = match r.content.content_type {
                ContentType::Block => access.remove(&r.content.id).unwrap_or_default(),
                _ => vec![r.agent_id],
            };
            Doc {
                created_at: r.created_at.timestamp_millis(),
                content: r.content,
                agents,
                text: r.text,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vanished_segment_file_is_recognised() {
        let gone = |e: tantivy::TantivyError| {
            file_vanished(&Error::Storage(StorageError::Index(Arc::new(e))))
        };
        assert!(gone(tantivy::TantivyError::IoError(Arc::new(
            std::io::Error::from(std::io::ErrorKind::NotFound)
        ))));
        assert!(gone(tantivy::TantivyError::OpenReadError(
            tantivy::directory::error::OpenReadError::FileDoesNotExist("x.idx".into())
        )));
        assert!(!gone(tantivy::TantivyError::IoError(Arc::new(
            std::io::Error::from(std::io::ErrorKind::PermissionDenied)
        ))));
        assert!(!file_vanished(&Error::Storage(StorageError::Closed)));
    }

    /// Every content's key reads back as that content, and different contents (of one type or
    /// another, UUID ids or not) never share a key.
    #[test]
    fn keys_name_one_content_each() {
        let id = uuid::Uuid::now_v7();
        let ids = [
            id.hyphenated().to_string(),
            id.simple().to_string(),
            id.hyphenated().to_string().to_uppercase(),
            "1".to_owned(),
            String::new(),
            "\u{0}x".to_owned(),
        ];
        let mut seen = HashSet::new();
        for t in ContentType::ALL {
            for id in &ids {
                let content = ContentRef::new(t, id.clone());
                let key = key_bytes(&content);
                assert_eq!(content_of_key(&key), Some(content.clone()));
                assert!(seen.insert(key), "{content} shares its key");
                // Only the canonical text of a UUID is named by columns, and they read back.
                match Key::of(&content) {
                    Key::Uuid { kind, hi, lo } => {
                        assert_eq!(*id, ids[0]);
                        assert_eq!(Key::content(kind, hi, lo), Some(content.clone()));
                    }
                    Key::Text => assert_ne!(*id, ids[0]),
                }
            }
        }
        assert_eq!(
            key_bytes(&ContentRef::new(ContentType::Message, ids[0].clone())).len(),
            18
        );
        assert_eq!(content_of_key(&[]), None);
        assert_eq!(content_of_key(&[9, KEY_TEXT]), None);
        assert_eq!(content_of_key(&[0, 7]), None);
        assert_eq!(content_of_key(&[0, KEY_UUID, 1, 2]), None);
        assert_eq!(Key::content(u64::from(u8::MAX), 1, 2), None);
    }

    /// Documents to add: one per content, each with the same text.
    fn docs_of(contents: &[ContentRef]) -> Vec<Doc> {
        contents
            .iter()
            .map(|c| Doc {
                content: c.clone(),
                agents: Vec::new(),
                created_at: 0,
                text: "turn".to_owned(),
            })
            .collect()
    }

    /// The contents a searcher's documents name ([`KeyReader`]), every live document read.
    fn live_contents(h: &FtsIndex) -> Vec<ContentRef> {
        h.reader.reload().unwrap();
        let searcher = h.reader.searcher();
        let mut keys = KeyReader::new(&searcher, h.fields.key);
        let mut out = Vec::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            for doc in segment.doc_ids_alive() {
                let address = DocAddress::new(u32::try_from(ord).unwrap(), doc);
                out.push(keys.content(address).unwrap().unwrap());
            }
        }
        out.sort_by(|a, b| (a.content_type, &a.id).cmp(&(b.content_type, &b.id)));
        out
    }

    /// A removal finds its contents in any segment (an old one, the newest, one written in the
    /// same commit before it), by columns for UUID ids and by the term for any other, and leaves
    /// every other document, including another type's with the same id; a segment whose ids'
    /// range holds none of the removal's is skipped without reading a document.
    #[test]
    fn removals_find_their_contents_in_every_segment() {
        let h = FtsIndex::open_blocking(None).unwrap();
        let f = h.fields;
        let message = |id: &uuid::Uuid| ContentRef::new(ContentType::Message, id.to_string());
        // UUIDv7s a second apart (ids made within one millisecond share their high bits).
        let ids: Vec<uuid::Uuid> = (0..9)
            .map(|i| {
                let at = uuid::Timestamp::from_unix(uuid::NoContext, 1_700_000_000 + i, 0);
                uuid::Uuid::new_v7(at)
            })
            .collect();
        let mut all: Vec<ContentRef> = ids.iter().map(message).collect();
        let archival = ContentRef::new(ContentType::Archival, ids[4].to_string());
        let text = ContentRef::new(ContentType::Archival, "1");
        all.extend([archival.clone(), text.clone()]);
        // Three commits, three segments: ids 0-2, 3-5 (and the other type's and the text id),
        // 6-8.
        for chunk in [&all[0..3], &[&all[3..6], &all[9..11]].concat(), &all[6..9]] {
            let mut w = open_writer(&h.index, None, 1).unwrap();
            add(&mut w, f, &[], docs_of(chunk)).unwrap();
            commit_at(&mut w, 1).unwrap();
            w.wait_merging_threads().unwrap();
        }
        let gone = [all[1].clone(), all[4].clone(), all[8].clone(), text];
        let mut w = open_writer(&h.index, None, 1).unwrap();
        // Re-adding content 8 in the removal's commit keeps one copy of it.
        add(&mut w, f, &gone, docs_of(&all[8..9])).unwrap();
        commit_at(&mut w, 2).unwrap();
        w.wait_merging_threads().unwrap();

        let mut expected: Vec<ContentRef> = all
            .iter()
            .filter(|c| !gone[..3].contains(c) && c.id != "1")
            .cloned()
            .chain([all[8].clone()])
            .collect();
        expected.sort_by(|a, b| (a.content_type, &a.id).cmp(&(b.content_type, &b.id)));
        assert_eq!(live_contents(&h), expected);
        assert!(expected.contains(&archival));

        // The first segment's ids are all older than content 8's: skipped whole.
        let searcher = h.reader.searcher();
        let removal = Removal::of(&[Key::of(&all[8])]).unwrap();
        let skipped = searcher
            .segment_readers()
            .iter()
            .filter(|s| {
                matches!(
                    removal.doc_predicate(s).unwrap(),
                    ConstOrVariableSegmentPredicate::Const(false)
                )
            })
            .count();
        assert!(skipped >= 1, "no segment was skipped");
        assert_eq!(Removal::of(&[Key::Text]).map(|_| ()), None);
    }

    #[test]
    fn index_lives_beside_the_file() {
        assert_eq!(
            dir_for("sqlite:///tmp/x.db?mode=rwc"),
            Some(PathBuf::from("/tmp/x.db.search"))
        );
        assert_eq!(
            dir_for("sqlite://rel.db"),
            Some(PathBuf::from("rel.db.search"))
        );
        assert_eq!(dir_for("postgres://h/db"), None);
    }

    /// Handles (of this or other processes) opening a new index at once all end up on one index:
    /// none takes the directory another is creating for damage and clears it under the others.
    #[test]
    fn handles_opening_at_once_share_one_index() {
        for _ in 0..10 {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("db.search");
            let start = Arc::new(std::sync::Barrier::new(6));
            let opening: Vec<_> = (0..6)
                .map(|_| {
                    let (dir, start) = (dir.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        FtsIndex::open_blocking(Some(&dir))
                    })
                })
                .collect();
            let handles: Vec<FtsIndex> = opening
                .into_iter()
                .map(|t| t.join().unwrap().unwrap())
                .collect();
            let f = handles[0].fields;
            let mut w = open_writer(&handles[0].index, handles[0].dir.as_deref(), 1).unwrap();
            w.add_document(doc!(f.key => key_bytes(&ContentRef::new(ContentType::Archival, "1")), f.text => "shared"))
                .unwrap();
            commit_at(&mut w, 1).unwrap();
            drop(w);
            for h in &handles {
                h.reader.reload().unwrap();
                assert_eq!(h.reader.searcher().num_docs(), 1);
                assert_eq!(h.cursor().unwrap(), Some(1));
            }
        }
    }

    #[test]
    fn a_damaged_or_foreign_index_is_recreated_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db.search");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("meta.json"), b"not json").unwrap();
        let h = FtsIndex::open_blocking(Some(&dir)).unwrap();
        assert_eq!(h.cursor().unwrap(), None);
        assert_eq!(h.reader.searcher().num_docs(), 0);
        drop(h);
        // Another schema (an index of some other version) is replaced too.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut other = Schema::builder();
        other.add_text_field("title", tantivy::schema::STORED);
        drop(Index::create_in_dir(&dir, other.build()).unwrap());
        let h = FtsIndex::open_blocking(Some(&dir)).unwrap();
        assert_eq!(h.index.schema(), schema().0);
    }

    /// A writer lock that cannot be taken for another reason than a holder (its directory gone)
    /// fails at once instead of being waited for.
    #[test]
    fn a_vanished_directory_fails_the_writer_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db.search");
        let h = FtsIndex::open_blocking(Some(&dir)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let began = std::time::Instant::now();
        assert!(open_writer(&h.index, h.dir.as_deref(), 1).is_err());
        // The busy-lock wait is 30 s; anything near it means the error was waited on.
        assert!(began.elapsed() < std::time::Duration::from_secs(10));
    }

    /// The segment files in `dir` (tantivy names them `<segment id>.<component>`).
    fn segment_files(dir: &Path) -> HashSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let (id, _) = name.split_once('.')?;
                (!id.is_empty() && id != "meta").then(|| id.to_owned())
            })
            .collect()
    }

    /// Commits one document (`archival:{n}`) through a writer of `h` with `cursor` as its
    /// cursor, and waits for its merges.
    fn commit_one(h: &FtsIndex, n: i64, cursor: i64) {
        let f = h.fields;
        let mut w = open_writer(&h.index, h.dir.as_deref(), 1).unwrap();
        w.add_document(doc!(f.key => key_bytes(&ContentRef::new(ContentType::Archival, n.to_string())), f.text => "turn"))
            .unwrap();
        commit_at(&mut w, cursor).unwrap();
        w.wait_merging_threads().unwrap();
    }

    /// Two handles (two processes) writing the same index in turn, then one alone after the
    /// other closed: each writer session sees the files the other registered, so segments merged
    /// away are deleted whoever wrote them, and the directory keeps only the live segments' files.
    #[test]
    fn handles_writing_in_turn_leave_no_dead_segments() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db.search");
        let first = FtsIndex::open_blocking(Some(&dir)).unwrap();
        let second = FtsIndex::open_blocking(Some(&dir)).unwrap();
        let write = |h: &FtsIndex, n: i64| commit_one(h, n, n);
        for n in 0..40 {
            write(if n % 2 == 0 { &first } else { &second }, n);
        }
        drop(first);
        for n in 40..80 {
            write(&second, n);
        }
        let live: HashSet<String> = second
            .index
            .searchable_segment_ids()
            .unwrap()
            .iter()
            .map(|id| id.uuid_string())
            .collect();
        assert!(live.len() < 40, "segments were merged: {}", live.len());
        assert_eq!(segment_files(&dir), live);
        second.reader.reload().unwrap();
        assert_eq!(second.reader.searcher().num_docs(), 80);
    }

    /// A commit whose files were written and whose publication was never made, then the same
    /// delete again: the next writer starts from the same published commit, so its delete file
    /// gets the same name. It must commit instead of failing with `FileAlreadyExists` on every
    /// try. `list_lost`: the crash also lost the rewrite of tantivy's list of managed files
    /// (the machine's, `fts::dir` writes that list without a sync between commits).
    fn an_unpublished_commit_blocks_no_later_one(list_lost: bool) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db.search");
        let h = FtsIndex::open_blocking(Some(&dir)).unwrap();
        let f = h.fields;
        // One segment of ten documents (one indexing thread).
        let mut w = h.index.writer_with_num_threads(1, WRITER_BUDGET).unwrap();
        for n in 1..=10 {
            w.add_document(doc!(f.key => key_bytes(&ContentRef::new(ContentType::Archival, n.to_string())), f.text => "kept"))
                .unwrap();
        }
        commit_at(&mut w, 1).unwrap();
        w.wait_merging_threads().unwrap();
        let published = std::fs::read(dir.join("meta.json")).unwrap();
        let managed = std::fs::read(dir.join(".managed.json")).unwrap();
        let delete_one = || {
            let mut w = open_writer(&h.index, h.dir.as_deref(), 1)?;
            w.delete_term(Term::from_field_bytes(
                f.key,
                &key_bytes(&ContentRef::new(ContentType::Archival, "1")),
            ));
            commit_at(&mut w, 2)?;
            w.wait_merging_threads().map_err(index_error)
        };
        delete_one().unwrap();
        std::fs::write(dir.join("meta.json"), &published).unwrap();
        if list_lost {
            std::fs::write(dir.join(".managed.json"), &managed).unwrap();
        }
        assert!(
            std::fs::read_dir(&dir).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".del")),
            "the unpublished commit left its delete file"
        );
        delete_one().unwrap();
        h.reader.reload().unwrap();
        assert_eq!(h.reader.searcher().num_docs(), 9);
        assert_eq!(h.cursor().unwrap(), Some(2));
    }

    /// A process killed during a commit: the orphan, listed as managed, is collected first.
    #[test]
    fn a_commit_killed_before_it_was_published_blocks_no_later_one() {
        an_unpublished_commit_blocks_no_later_one(false);
    }

    /// A machine crash that also lost the list: the orphan, unknown to tantivy's collection,
    /// is replaced by the directory when the next commit writes under its name.
    #[test]
    fn a_commit_lost_with_its_file_list_blocks_no_later_one() {
        an_unpublished_commit_blocks_no_later_one(true);
    }

    /// An incremental commit records its last change when it started from a commit holding
    /// every change it read after, and that commit's cursor when it started from an older one
    /// (another handle's rebuild); none on an index without a cursor.
    #[test]
    fn an_incremental_commit_never_records_past_its_base() {
        let h = FtsIndex::open_blocking(None).unwrap();
        let mut w = open_writer(&h.index, None, 1).unwrap();
        assert_eq!(commit(&mut w, 0, 5).unwrap(), None);
        assert_eq!(h.cursor().unwrap(), None);
        assert_eq!(commit_at(&mut w, 10).unwrap(), 10);
        assert_eq!(commit(&mut w, 10, 15).unwrap(), Some(15));
        // Another handle got further meanwhile: its later changes are applied again.
        assert_eq!(commit_at(&mut w, 30).unwrap(), 30);
        assert_eq!(commit(&mut w, 15, 20).unwrap(), Some(20));
        // Another handle's rebuild from head 3.
        assert_eq!(commit_at(&mut w, 3).unwrap(), 3);
        assert_eq!(commit(&mut w, 20, 25).unwrap(), Some(3));
        assert_eq!(h.cursor().unwrap(), Some(3));
    }

    /// A reader is reloaded only when `meta.json` changed: searches with nothing committed
    /// since keep the searcher they have (no segment reopened), and another handle's commit,
    /// even one that leaves the cursor where it was, is read by the next reload.
    #[test]
    fn the_reader_is_reloaded_only_for_a_new_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db.search");
        let first = FtsIndex::open_blocking(Some(&dir)).unwrap();
        let second = FtsIndex::open_blocking(Some(&dir)).unwrap();
        let generation = |h: &FtsIndex| h.reader.searcher().generation().generation_id();
        commit_one(&first, 1, 1);
        assert_eq!(second.reload_with_cursor().unwrap(), Some(1));
        let loaded = generation(&second);
        for _ in 0..3 {
            assert_eq!(second.reload_with_cursor().unwrap(), Some(1));
        }
        assert_eq!(generation(&second), loaded, "nothing new: no reload");
        commit_one(&first, 2, 1);
        assert_eq!(second.reload_with_cursor().unwrap(), Some(1));
        assert_ne!(generation(&second), loaded);
        assert_eq!(second.reader.searcher().num_docs(), 2);
        // Forgotten: the next reload opens the segments again.
        let loaded = generation(&second);
        second.forget_loaded().unwrap();
        assert_eq!(second.reload_with_cursor().unwrap(), Some(1));
        assert_ne!(generation(&second), loaded);
    }
}
