//! The SQL of search storage: archival writes, embedding jobs and vectors, the change log, and
//! the reads behind content resolution and PostgreSQL full-text search.
//!
//! Write functions run inside the writer's transaction (like the rest of `ops`, they must never
//! commit, roll back or open a transaction of their own); read functions take any connection.
//! On PostgreSQL every function that appends to `search_changes` first takes the transaction
//! advisory lock [`CHANGE_LOCK`], so log `seq` order is commit order; SQLite's single writer gives
//! that for free. Text changes are logged on SQLite only (PostgreSQL full-text is transactional).

pub(crate) mod writes;

use crate::{ArchivalError, SearchError, StorageError};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::sql::Conn;
use crate::sql::Row;
use crate::sql::instant;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    Ctx, FromStored, Insert, StoredId, StoredTime, decode_content, fixed_chunks, from_ms,
    lock_agent, now_ms, parse_uuid, placeholders, value_rows,
};
use crate::archival::{
    ARCHIVAL_COLUMNS, ArchivalEntry, ArchivalId, NewArchival, archival_from_row,
};
use crate::config::Backend;
use crate::error::Result;
use crate::model::{AgentId, ContentBlock};
use crate::search::{
    ChangeKind, ContentRef, ContentRow, ContentType, EmbeddingJob, EmbeddingModelInfo, NewVector,
    SearchChange, StoreReport, VectorRow, decode_vector, encode_vector, has_message_text,
    message_text, text_hash,
};

/// The advisory lock key under which PostgreSQL transactions append to `search_changes`.
pub(crate) const CHANGE_LOCK: i64 = 7_061_747_466;

/// Rows read per page when walking all content.
const PAGE: i64 = 1000;

/// The most messages one `messages` change (a span of an agent's positions, SQLite) covers, so
/// a page of the log expands to a bounded number of changes.
pub(crate) const SPAN_MAX: usize = 512;

/// A content id (the text of a UUID) as the `UUID` a checked PostgreSQL statement binds; text
/// that is not one is sqlx's encoding error, as when the dynamic [`crate::sql::Query`] converts it.
fn uuid_arg(text: &str) -> std::result::Result<Uuid, sqlx::Error> {
    Uuid::parse_str(text).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

/// A content id as an engine's row holds it (SQLite its text, kept as stored; PostgreSQL a
/// `UUID`), as the text a [`ContentRef`] holds.
trait ContentIdText {
    fn text(self) -> String;
}

impl ContentIdText for String {
    fn text(self) -> String {
        self
    }
}

impl ContentIdText for Uuid {
    fn text(self) -> String {
        self.to_string()
    }
}

/// A due job: its content, attempts so far and the text hash it was recorded for.
type DueJob = (ContentRef, i64, String);

/// [`FromStored`] for the search storage rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! search_from_stored {
    ($engine:ident) => {
        impl FromStored<SearchChange> for $engine::search::ChangeRow {
            fn into_domain(self) -> Result<SearchChange> {
                Ok(SearchChange {
                    seq: self.seq,
                    content: ContentRef::new(self.content_type.parse()?, self.content_id.text()),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    kind: self.kind.parse()?,
                })
            }
        }

        impl FromStored<VectorRow> for $engine::search::VectorRow {
            fn into_domain(self) -> Result<VectorRow> {
                Ok(VectorRow {
                    content: ContentRef::new(self.content_type.parse()?, self.content_id.text()),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    created_at: self.created_at.time(),
                    vector: decode_vector(&self.vector, self.dimension)?,
                })
            }
        }

        impl FromStored<EmbeddingModelInfo> for $engine::search::ModelRow {
            fn into_domain(self) -> Result<EmbeddingModelInfo> {
                let dimension = self.dimension;
                Ok(EmbeddingModelInfo {
                    name: self.name,
                    dimension: u32::try_from(dimension).map_err(|_| {
                        StorageError::Corrupt(format!("stored dimension {dimension}"))
                    })?,
                    file_hash: self.file_hash,
                })
            }
        }

        impl FromStored<DueJob> for $engine::search::DueJobRow {
            fn into_domain(self) -> Result<DueJob> {
                Ok((
                    ContentRef::new(self.content_type.parse()?, self.content_id.text()),
                    self.attempts,
                    self.text_hash,
                ))
            }
        }
    };
}

search_from_stored!(pattern_db_sqlite);
search_from_stored!(pattern_db_postgres);

/// Takes the change-log lock (PostgreSQL; held to the end of the transaction, re-entrant).
pub(crate) async fn change_lock(conn: &mut Conn<'_>, backend: Backend) -> Result<()> {
    if backend == Backend::Postgres
        && let Conn::Postgres(c) = conn
    {
        pattern_db_postgres::search::lock_changes(c, CHANGE_LOCK).await?;
    }
    Ok(())
}

/// Appends changes to the log. PostgreSQL logs no message text: its full-text indexes read new
/// and updated messages by writing transaction ([`messages_touched`]), so an acknowledgement
/// never takes the log's lock.
async fn log_changes(
    conn: &mut Conn<'_>,
    backend: Backend,
    changes: &[(ContentType, &str, AgentId, ChangeKind)],
) -> Result<()> {
    let rows: Vec<_> = changes
        .iter()
        .filter(|c| {
            backend == Backend::Sqlite || c.3 != ChangeKind::Text || c.0 != ContentType::Message
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    change_lock(conn, backend).await?;
    for chunk in fixed_chunks(&rows) {
        let chunk: Vec<_> = chunk.iter().map(|c| **c).collect();
        change_rows_query(conn, &chunk).execute(&mut *conn).await?;
    }
    Ok(())
}

/// One multi-row `INSERT` of `changes` into the log (the caller holds the change lock on
/// PostgreSQL).
fn change_rows_query(
    conn: &Conn<'_>,
    changes: &[(ContentType, &str, AgentId, ChangeKind)],
) -> crate::sql::Query {
    let sql = format!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) VALUES {}",
        value_rows(conn, changes.len(), 4)
    );
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
    for (t, id, agent, kind) in changes {
        q = q
            .bind(t.as_str())
            .bind((*id).to_owned())
            .bind(agent.to_string())
            .bind(kind.as_str());
    }
    q
}

/// What recording a job does to an existing job of the same content: it starts over.
const REFRESH_JOB: &str = "DO UPDATE SET text_hash = excluded.text_hash, agent_id = excluded.agent_id, \
    attempts = 0, next_attempt_at = excluded.next_attempt_at, claimed_until = NULL, claimed_by = NULL, \
    last_error = NULL";

/// Records (or refreshes) embedding jobs; with `refresh` an existing job takes the new hash and
/// is due and unclaimed again, without it an existing job is left alone. Returns rows written.
async fn upsert_jobs(
    conn: &mut Conn<'_>,
    jobs: &[(ContentType, &str, AgentId, String)],
    refresh: bool,
) -> Result<u64> {
    let mut written = 0;
    for q in upsert_jobs_queries(conn, jobs, refresh, Insert::Values)? {
        written += q.execute(&mut *conn).await?.rows_affected();
    }
    Ok(written)
}

/// The statements of [`upsert_jobs`], to run in order, taking their rows as `insert` says.
fn upsert_jobs_queries(
    conn: &Conn<'_>,
    jobs: &[(ContentType, &str, AgentId, String)],
    refresh: bool,
    insert: Insert,
) -> Result<Vec<crate::sql::Query>> {
    let now = now_ms();
    let conflict = if refresh { REFRESH_JOB } else { "DO NOTHING" };
    fixed_chunks(jobs)
        .into_iter()
        .map(|chunk| {
            let sql = format!(
                "INSERT INTO embedding_jobs (content_type, content_id, agent_id, text_hash, next_attempt_at, created_at) \
                 {} ON CONFLICT (content_type, content_id) {conflict}",
                insert.placeholders(conn, chunk.len(), 6)?
            );
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
            for (t, id, agent, hash) in chunk {
                q = q
                    .bind(t.as_str())
                    .bind((*id).to_owned())
                    .bind(agent.to_string())
                    .bind(hash.clone())
                    .bind(now)
                    .bind(now);
            }
            Ok(q)
        })
        .collect()
}

/// Content created or changed in this transaction: logs `text` changes (SQLite) and, when jobs
/// are recorded, records or refreshes each one's embedding job.
pub(crate) async fn content_written(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    items: &[(ContentType, String, AgentId, &str)],
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let changes: Vec<_> = items
        .iter()
        .map(|(t, id, agent, _)| (*t, id.as_str(), *agent, ChangeKind::Text))
        .collect();
    log_changes(conn, ctx.backend, &changes).await?;
    if ctx.record_jobs {
        let jobs: Vec<_> = items
            .iter()
            .map(|(t, id, agent, text)| (*t, id.as_str(), *agent, text_hash(text)))
            .collect();
        upsert_jobs(conn, &jobs, true).await?;
    }
    Ok(())
}

/// A message just inserted, as the search log sees it: its id, agent, position and content.
pub(crate) type WrittenMessage<'a> = (Uuid, AgentId, i64, &'a [ContentBlock]);

/// Runs of an agent's written messages, each at most [`SPAN_MAX`] messages long, that cover the
/// positions of `written` with text (agent, first, last). A run counts every message written
/// in its range, with text or not, because reading a span expands it to every message at those
/// positions: so no span reads back as more than `SPAN_MAX` changes (positions only grow, so
/// only this write's messages lie in its range). Sorted and grouped here: any order in is fine.
fn spans(mut written: Vec<(AgentId, i64, bool)>) -> Vec<(AgentId, i64, i64)> {
    written.sort_unstable_by_key(|(agent, position, _)| (agent.0, *position));
    let mut out: Vec<(AgentId, i64, i64)> = Vec::new();
    // The run being built: its agent, first and last position, length, and whether it holds text.
    let mut run: Option<(AgentId, i64, i64, usize, bool)> = None;
    for (agent, position, text) in written {
        match &mut run {
            Some((a, _, last, length, any)) if *a == agent && *length < SPAN_MAX => {
                *last = position;
                *length += 1;
                *any |= text;
            }
            _ => {
                if let Some((a, first, last, _, true)) = run {
                    out.push((a, first, last));
                }
                run = Some((agent, position, position, 1, text));
            }
        }
    }
    if let Some((a, first, last, _, true)) = run {
        out.push((a, first, last));
    }
    out
}

/// One multi-row `INSERT` of `messages` changes (SQLite only: PostgreSQL logs no text), taking
/// its rows as `insert` says.
fn span_rows_query(
    conn: &Conn<'_>,
    spans: &[(AgentId, i64, i64)],
    insert: Insert,
) -> Result<crate::sql::Query> {
    let sql = format!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind, first_position, last_position) \
         {}",
        insert.placeholders(conn, spans.len(), 6)?
    );
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
    for (agent, first, last) in spans {
        q = q
            .bind(ContentType::Message.as_str())
            .bind(String::new())
            .bind(agent.to_string())
            .bind("messages")
            .bind(*first)
            .bind(*last);
    }
    Ok(q)
}

/// The spans logging these written messages (see [`spans`]).
fn spans_of(rows: &[WrittenMessage<'_>]) -> Vec<(AgentId, i64, i64)> {
    spans(
        rows.iter()
            .map(|(_, a, p, content)| (*a, *p, has_message_text(content)))
            .collect(),
    )
}

/// The one statement that logs the search change of a message about to be inserted, when that
/// is all [`messages_written`] would do: SQLite without embedding jobs to record. `None`
/// otherwise (then call [`messages_written`] after the insert), and when it has no text.
pub(crate) fn message_change_query(
    conn: &Conn<'_>,
    ctx: &Ctx,
    rows: &[WrittenMessage<'_>],
) -> Result<Option<crate::sql::Query>> {
    if ctx.backend != Backend::Sqlite || ctx.record_jobs || rows.len() > 1 {
        return Ok(None);
    }
    let spans = spans_of(rows);
    if spans.is_empty() {
        return Ok(None);
    }
    span_rows_query(conn, &spans, Insert::Values).map(Some)
}

/// SQLite: what [`messages_written`] does for one new message, as statements to join into the
/// script that inserts it, each running only when the statement before it changed exactly one
/// row (`changes() = 1`): so placed right after the message's `INSERT ... SELECT`, they log
/// nothing when that inserted nothing. The message's search change (a span of its one position)
/// when it has text, then its embedding job when jobs are recorded; none without text.
pub(crate) fn message_written_guarded(
    conn: &Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    position: i64,
    message_id: Uuid,
    content: &[ContentBlock],
) -> Result<Vec<crate::sql::Query>> {
    let text = message_text(content);
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let guard = Insert::IfOneChanged;
    let mut out = vec![span_rows_query(
        conn,
        &[(agent, position, position)],
        guard,
    )?];
    if ctx.record_jobs {
        let id = message_id.to_string();
        let job = (ContentType::Message, id.as_str(), agent, text_hash(&text));
        out.extend(upsert_jobs_queries(conn, &[job], true, guard)?);
    }
    Ok(out)
}

/// The embedding job's text hash for a new message of `content` (what [`messages_written`]
/// records for it), when jobs are recorded and the message has text.
pub(crate) fn message_job_hash(ctx: &Ctx, content: &[ContentBlock]) -> Option<String> {
    if !ctx.record_jobs {
        return None;
    }
    let text = message_text(content);
    (!text.is_empty()).then(|| text_hash(&text))
}

/// Messages just inserted: on SQLite the searchable ones are logged as spans of their
/// positions (one `messages` change per run of an agent's messages, not one per message), and
/// when jobs are recorded each gets its embedding job. The statements that do it, to run in
/// order after the insert (in the same text, where the caller joins them).
pub(crate) fn messages_written(
    conn: &Conn<'_>,
    ctx: &Ctx,
    rows: &[WrittenMessage<'_>],
) -> Result<Vec<crate::sql::Query>> {
    let mut out = Vec::new();
    if ctx.backend == Backend::Postgres && !ctx.record_jobs {
        return Ok(out);
    }
    if ctx.backend == Backend::Sqlite {
        let spans = spans_of(rows);
        for chunk in fixed_chunks(&spans) {
            out.push(span_rows_query(conn, chunk, Insert::Values)?);
        }
    }
    if ctx.record_jobs {
        let texts: Vec<(String, AgentId, String)> = rows
            .iter()
            .map(|(id, agent, _, content)| (id.to_string(), *agent, message_text(content)))
            .filter(|(_, _, text)| !text.is_empty())
            .collect();
        let jobs: Vec<_> = texts
            .iter()
            .map(|(id, agent, text)| (ContentType::Message, id.as_str(), *agent, text_hash(text)))
            .collect();
        out.extend(upsert_jobs_queries(conn, &jobs, true, Insert::Values)?);
    }
    Ok(out)
}

/// Content deleted (or archived out of live history) in this transaction: its vector and job go,
/// and a `delete` change is logged.
pub(crate) async fn content_removed(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    items: &[(ContentType, String, AgentId)],
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let changes: Vec<_> = items
        .iter()
        .map(|(t, id, agent)| (*t, id.as_str(), *agent, ChangeKind::Delete))
        .collect();
    log_changes(conn, ctx.backend, &changes).await?;
    // Their vectors and embedding jobs: two statements per content type and chunk, not two
    // per content (archiving 100k messages made 200k round trips).
    let mut by_type: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (t, id, _) in items {
        by_type.entry(t.as_str()).or_default().push(id.as_str());
    }
    for (t, ids) in by_type {
        for chunk in ids.chunks(REMOVED_CHUNK) {
            match conn {
                Conn::Sqlite(c) => {
                    let list = serde_json::to_string(chunk)
                        .map_err(|e| StorageError::Corrupt(format!("content ids as JSON: {e}")))?;
                    pattern_db_sqlite::search::delete_vectors(c, t, &list).await?;
                    pattern_db_sqlite::search::delete_jobs(c, t, &list).await?;
                }
                Conn::Postgres(c) => {
                    let list = chunk
                        .iter()
                        .map(|id| uuid_arg(id))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    pattern_db_postgres::search::delete_vectors(c, t, &list).await?;
                    pattern_db_postgres::search::delete_jobs(c, t, &list).await?;
                }
            }
        }
    }
    Ok(())
}

/// The most contents one statement deletes the vectors or jobs of.
const REMOVED_CHUNK: usize = 1000;

/// The live messages of these batches are about to be archived.
pub(crate) async fn batches_archived(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    batches: &[i64],
) -> Result<()> {
    for chunk in batches.chunks(500) {
        let list = value_rows(conn, 1, chunk.len());
        let sql = format!(
            "SELECT {}, b.agent_id FROM messages m JOIN batches b ON b.id = m.batch_id \
             WHERE m.batch_id IN {list} AND NOT m.archived AND NOT m.deleted",
            message_id_text(conn.backend())
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind(*id);
        }
        let mut items = Vec::new();
        for row in q.fetch_all(&mut *conn).await? {
            let id: String = row.try_get(0)?;
            let agent: String = row.try_get(1)?;
            items.push((ContentType::Message, id, AgentId(parse_uuid(&agent)?)));
        }
        content_removed(conn, ctx, &items).await?;
    }
    Ok(())
}

/// Who sees a block changed (share, unshare): its full-text document changes.
pub(crate) async fn block_access_changed(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    block: Uuid,
    owner: AgentId,
) -> Result<()> {
    let id = block.to_string();
    log_changes(
        conn,
        ctx.backend,
        &[(ContentType::Block, id.as_str(), owner, ChangeKind::Text)],
    )
    .await
}

/// The agent is about to be deleted with everything it owns: log `delete` for what derived
/// indexes may hold (its vectors, every live content), and `text` for blocks of others it could
/// see.
pub(crate) async fn agent_removed(conn: &mut Conn<'_>, ctx: &Ctx, agent: AgentId) -> Result<()> {
    change_lock(conn, ctx.backend).await?;
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::search as q;
            let a = agent.to_string();
            q::log_vectors_deleted_of_agent(c, &a).await?;
            q::log_messages_deleted_of_agent(c, &a).await?;
            q::log_archival_deleted_of_agent(c, &a).await?;
            q::log_blocks_deleted_of_agent(c, &a).await?;
            q::log_shared_blocks_changed_of_agent(c, &a).await?;
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::search as q;
            q::log_vectors_deleted_of_agent(c, agent.0).await?;
            q::log_messages_deleted_of_agent(c, agent.0).await?;
            q::log_archival_deleted_of_agent(c, agent.0).await?;
            q::log_blocks_deleted_of_agent(c, agent.0).await?;
            q::log_shared_blocks_changed_of_agent(c, agent.0).await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// archival

pub(crate) async fn insert_archival(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    entries: &[NewArchival],
) -> Result<Vec<ArchivalEntry>> {
    lock_agent(conn, agent).await?;
    for entry in entries {
        entry.validate(ctx.max_content_bytes)?;
    }
    // Entries already stored under their dedupe keys, read in a few statements.
    let mut keys: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.dedupe_key.as_deref())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut existing: HashMap<String, ArchivalEntry> = HashMap::new();
    for chunk in fixed_chunks(&keys) {
        let sql = format!(
            "SELECT {ARCHIVAL_COLUMNS} FROM archival_memories a WHERE a.agent_id = $1 AND a.dedupe_key IN {}",
            placeholders(1, chunk.len(), 2)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(agent.to_string());
        for key in chunk {
            q = q.bind((*key).to_owned());
        }
        for row in q.fetch_all(&mut *conn).await? {
            let entry = archival_from_row(&row)?;
            if let Some(key) = entry.dedupe_key.clone() {
                existing.insert(key, entry);
            }
        }
    }
    let now = from_ms(now_ms());
    let mut out: Vec<ArchivalEntry> = Vec::with_capacity(entries.len());
    // (index in `out`, metadata JSON, tags JSON) of the rows to insert.
    let mut new_rows: Vec<(usize, String, String)> = Vec::new();
    for entry in entries {
        if let Some(key) = &entry.dedupe_key
            && let Some(found) = existing.get(key)
        {
            out.push(found.clone());
            continue;
        }
        let stored = ArchivalEntry {
            id: ArchivalId(Uuid::now_v7()),
            agent_id: agent,
            content: entry.content.clone(),
            metadata: entry.metadata.clone(),
            tags: entry.tags.clone(),
            dedupe_key: entry.dedupe_key.clone(),
            created_at: entry.occurred_at()?.unwrap_or(now),
        };
        let metadata = serde_json::to_string(&stored.metadata)
            .map_err(|e| ArchivalError::Invalid(e.to_string()))?;
        let tags = serde_json::to_string(&stored.tags)
            .map_err(|e| ArchivalError::Invalid(e.to_string()))?;
        if let Some(key) = &stored.dedupe_key {
            existing.insert(key.clone(), stored.clone());
        }
        new_rows.push((out.len(), metadata, tags));
        out.push(stored);
    }
    for chunk in fixed_chunks(&new_rows) {
        let sql = format!(
            "INSERT INTO archival_memories (id, agent_id, content, metadata, tags, dedupe_key, created_at) VALUES {}",
            value_rows(&*conn, chunk.len(), 7)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (i, metadata, tags) in chunk {
            let e = &out[*i];
            q = q
                .bind(e.id.to_string())
                .bind(agent.to_string())
                .bind(e.content.clone())
                .bind(metadata.clone())
                .bind(tags.clone())
                .bind(e.dedupe_key.clone())
                .bind(e.created_at.timestamp_millis());
        }
        q.execute(&mut *conn).await?;
    }
    let tag_rows: Vec<(String, &str)> = new_rows
        .iter()
        .flat_map(|(i, _, _)| {
            let e = &out[*i];
            e.tags.iter().map(move |t| (e.id.to_string(), t.as_str()))
        })
        .collect();
    for chunk in fixed_chunks(&tag_rows) {
        let sql = format!(
            "INSERT INTO archival_tags (archival_id, agent_id, tag) VALUES {}",
            value_rows(&*conn, chunk.len(), 3)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (id, tag) in chunk {
            q = q
                .bind(id.clone())
                .bind(agent.to_string())
                .bind((*tag).to_owned());
        }
        q.execute(&mut *conn).await?;
    }
    let items: Vec<_> = new_rows
        .iter()
        .map(|(i, _, _)| {
            let e = &out[*i];
            (
                ContentType::Archival,
                e.id.to_string(),
                agent,
                e.content.as_str(),
            )
        })
        .collect();
    content_written(conn, ctx, &items).await?;
    Ok(out)
}

pub(crate) async fn delete_archival(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    id: ArchivalId,
) -> Result<u64> {
    lock_agent(conn, agent).await?;
    let done = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::archival::delete(c, &id.to_string(), &agent.to_string()).await?
        }
        Conn::Postgres(c) => pattern_db_postgres::archival::delete(c, id.0, agent.0).await?,
    };
    if done > 0 {
        // Explicitly, not by cascade (SQLite cascades only with foreign_keys on).
        match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::archival::delete_tags(c, &id.to_string()).await?,
            Conn::Postgres(c) => pattern_db_postgres::archival::delete_tags(c, id.0).await?,
        };
        content_removed(conn, ctx, &[(ContentType::Archival, id.to_string(), agent)]).await?;
    }
    Ok(done)
}

// ---------------------------------------------------------------------------------------------
// content reads

fn row_agent(row: &Row, index: usize) -> Result<AgentId> {
    let text: String = row.try_get(index)?;
    Ok(AgentId(parse_uuid(&text)?))
}

/// `SELECT id, agent, created_at, text-source FROM ...` for one content type; `tail` follows.
fn content_select(backend: Backend, t: ContentType) -> String {
    match t {
        // A message's agent is its batch's (SQLite's messages carry the agent's number), and
        // SQLite stores its id as 16 bytes (migration 0030), read as its hex digits.
        ContentType::Message => format!(
            "SELECT {}, b.agent_id, m.created_at, m.content FROM messages m \
             JOIN batches b ON b.id = m.batch_id WHERE NOT m.archived AND NOT m.deleted",
            match backend {
                Backend::Sqlite => pattern_db_sqlite::messages::ID_HEX,
                Backend::Postgres => "m.id",
            }
        ),
        ContentType::Block => {
            "SELECT m.id, m.owner_agent_id, m.created_at, m.value FROM memory_blocks m WHERE 1 = 1"
                .to_owned()
        }
        ContentType::Archival => {
            "SELECT m.id, m.agent_id, m.created_at, m.content FROM archival_memories m WHERE 1 = 1"
                .to_owned()
        }
    }
}

/// The condition `column IN` the ids of one JSON array, the statement's first parameter: the
/// whole list is one statement of one text whatever its length, so a search's few dozen hits
/// are one round trip and one cached statement, not one per fixed-size chunk. SQLite compares
/// `unhex` of each element when the column holds a message id's 16 bytes (`bytes`);
/// PostgreSQL's ids are `UUID`s.
fn in_id_list(backend: Backend, column: &str, bytes: bool) -> String {
    match (backend, bytes) {
        (Backend::Sqlite, true) => format!("{column} IN (SELECT unhex(value) FROM json_each(?))"),
        (Backend::Sqlite, false) => format!("{column} IN (SELECT value FROM json_each(?))"),
        (Backend::Postgres, _) => format!(
            "{column} IN (SELECT CAST(value AS UUID) FROM jsonb_array_elements_text(CAST($1 AS JSONB)))"
        ),
    }
}

/// The id of the message `m` as a UUID's text: SQLite stores its 16 bytes (migration 0030).
fn message_id_text(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => pattern_db_sqlite::messages::ID_TEXT,
        Backend::Postgres => "m.id",
    }
}

/// A message id (a UUID's text) as SQLite stores it: its 16 bytes (migration 0030).
fn sqlite_message_id(id: &str) -> Result<Vec<u8>> {
    Ok(uuid_arg(id)?.as_bytes().to_vec())
}

fn content_from_row(t: ContentType, row: &Row) -> Result<ContentRow> {
    let id: String = row.try_get(0)?;
    // Any content type's text column reads as stored text: only a message's may be compressed.
    let raw = row
        .try_get::<pattern_db_sqlite::messages::StoredText, _>(3)?
        .into_string();
    let (id, text) = match t {
        // SQLite gives a message's id as its hex digits: the ref holds the hyphenated text.
        ContentType::Message => (
            uuid_arg(&id)?.to_string(),
            message_text(&decode_content(&raw)?),
        ),
        _ => (id, raw),
    };
    Ok(ContentRow {
        content: ContentRef::new(t, id),
        agent_id: row_agent(row, 1)?,
        created_at: from_ms(row.try_get(2)?),
        text,
    })
}

/// The live rows among `refs` (visible to `agent` when given), keyed by ref: one statement per
/// content type present (and one for the access of the blocks found, with `agent`).
pub(crate) async fn load_live(
    conn: &mut Conn<'_>,
    refs: &[ContentRef],
    agent: Option<AgentId>,
) -> Result<HashMap<ContentRef, ContentRow>> {
    let backend = conn.backend();
    let mut out = HashMap::with_capacity(refs.len());
    for t in ContentType::ALL {
        // Ids are UUIDs: text that is not one names no content (and PostgreSQL's UUID column
        // would refuse to compare with it). SQLite's message ids are compared as their bytes.
        let mut ids: Vec<String> = refs
            .iter()
            .filter(|r| r.content_type == t)
            .filter_map(|r| {
                let id = Uuid::parse_str(&r.id).ok()?;
                Some(match (backend, t) {
                    (Backend::Sqlite, ContentType::Message) => id.simple().to_string(),
                    _ => r.id.clone(),
                })
            })
            .collect();
        if ids.is_empty() {
            continue;
        }
        ids.sort_unstable();
        ids.dedup();
        let sql = format!(
            "{} AND {}",
            content_select(backend, t),
            in_id_list(backend, "m.id", t == ContentType::Message)
        );
        let rows = crate::sql::query(sqlx::AssertSqlSafe(sql))
            .bind(serde_json::Value::from(ids).to_string())
            .fetch_all(&mut *conn)
            .await?;
        for row in rows {
            let row = content_from_row(t, &row)?;
            out.insert(row.content.clone(), row);
        }
    }
    if let Some(agent) = agent {
        let blocks: Vec<&str> = out
            .keys()
            .filter(|r| r.content_type == ContentType::Block)
            .map(|r| r.id.as_str())
            .collect();
        let mut visible = HashSet::new();
        if !blocks.is_empty() {
            // The list is the first parameter, the agent the second.
            let sql = format!(
                "SELECT block_id FROM memory_block_access WHERE {} AND agent_id = {}",
                in_id_list(backend, "block_id", false),
                match backend {
                    Backend::Sqlite => "?",
                    Backend::Postgres => "$2",
                }
            );
            let rows = crate::sql::query(sqlx::AssertSqlSafe(sql))
                .bind(serde_json::Value::from(blocks).to_string())
                .bind(agent.to_string())
                .fetch_all(&mut *conn)
                .await?;
            for row in rows {
                visible.insert(row.try_get::<String, _>(0)?);
            }
        }
        out.retain(|r, row| match r.content_type {
            ContentType::Block => visible.contains(&r.id),
            _ => row.agent_id == agent,
        });
    }
    Ok(out)
}

/// Every agent with access to each of these blocks.
pub(crate) async fn block_agents(
    conn: &mut Conn<'_>,
    blocks: &[&str],
) -> Result<HashMap<String, Vec<AgentId>>> {
    let mut out: HashMap<String, Vec<AgentId>> = HashMap::new();
    for chunk in fixed_chunks(blocks) {
        let sql = format!(
            "SELECT block_id, agent_id FROM memory_block_access WHERE block_id IN {}",
            placeholders(1, chunk.len(), 1)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind((*id).to_owned());
        }
        for row in q.fetch_all(&mut *conn).await? {
            out.entry(row.try_get(0)?)
                .or_default()
                .push(row_agent(&row, 1)?);
        }
    }
    Ok(out)
}

/// Live content of one type after id `after`, in id order.
pub(crate) async fn live_page(
    conn: &mut Conn<'_>,
    t: ContentType,
    after: &str,
    limit: i64,
) -> Result<Vec<ContentRow>> {
    // An empty `after` is the start: every id sorts after the empty text (SQLite) and the nil
    // UUID (PostgreSQL), which no content has. One fixed statement per content type, checked in
    // each engine's crate.
    use ContentType::{Archival, Block, Message};
    use pattern_db_postgres::search as pg;
    use pattern_db_sqlite::search as lite;
    match conn {
        Conn::Sqlite(c) => {
            let rows = match t {
                Message => {
                    // SQLite stores a message's id as its 16 bytes (migration 0030).
                    let after = if after.is_empty() {
                        Vec::new()
                    } else {
                        sqlite_message_id(after)?
                    };
                    lite::live_messages_after(c, &after, limit).await?
                }
                Block => lite::live_blocks_after(c, after, limit).await?,
                Archival => lite::live_archival_after(c, after, limit).await?,
            };
            rows.into_iter()
                .map(|r| live_content(t, r.id, r.agent_id, r.created_at, r.text))
                .collect()
        }
        Conn::Postgres(c) => {
            let after = if after.is_empty() {
                Uuid::nil()
            } else {
                uuid_arg(after)?
            };
            let rows = match t {
                Message => pg::live_messages_after(c, after, limit).await?,
                Block => pg::live_blocks_after(c, after, limit).await?,
                Archival => pg::live_archival_after(c, after, limit).await?,
            };
            rows.into_iter()
                .map(|r| live_content(t, r.id, r.agent_id, r.created_at, r.text))
                .collect()
        }
    }
}

/// A content row of type `t` from either engine's checked row: its id, owner, time and raw text
/// (a message's content JSON, reduced to its text here).
fn live_content(
    t: ContentType,
    id: impl ContentIdText,
    agent: impl StoredId,
    created_at: impl StoredTime,
    raw: String,
) -> Result<ContentRow> {
    let text = match t {
        ContentType::Message => message_text(&decode_content(&raw)?),
        _ => raw,
    };
    Ok(ContentRow {
        content: ContentRef::new(t, id.text()),
        agent_id: AgentId(agent.uuid()?),
        created_at: created_at.time(),
        text,
    })
}

// ---------------------------------------------------------------------------------------------
// embedding model and jobs

pub(crate) async fn load_model(conn: &mut Conn<'_>) -> Result<Option<EmbeddingModelInfo>> {
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::model(c)
            .await?
            .map(FromStored::into_domain)
            .transpose(),
        Conn::Postgres(c) => pattern_db_postgres::search::model(c)
            .await?
            .map(FromStored::into_domain)
            .transpose(),
    }
}

fn check_model(info: &EmbeddingModelInfo) -> Result<()> {
    if info.name.is_empty() || info.dimension == 0 || info.file_hash.is_empty() {
        return Err(SearchError::InvalidEmbedding(
            "a model needs a name, a positive dimension and a file hash".into(),
        )
        .into());
    }
    Ok(())
}

async fn store_model(conn: &mut Conn<'_>, info: &EmbeddingModelInfo) -> Result<()> {
    let (name, dimension, hash) = (&info.name, i64::from(info.dimension), &info.file_hash);
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::search::put_model(c, name, dimension, hash, now).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::search::put_model(c, name, dimension, hash, instant(now)?).await?
        }
    };
    Ok(())
}

pub(crate) async fn register_model(conn: &mut Conn<'_>, info: &EmbeddingModelInfo) -> Result<()> {
    check_model(info)?;
    match load_model(conn).await? {
        Some(stored) if &stored == info => Ok(()),
        Some(stored) => Err(SearchError::EmbeddingModelMismatch {
            stored,
            requested: info.clone(),
        }
        .into()),
        None => store_model(conn, info).await,
    }
}

/// Queues jobs for live content of every type; `skip_current` leaves out content whose vector
/// already matches its text. Returns jobs written.
async fn queue_all(conn: &mut Conn<'_>, skip_current: bool) -> Result<u64> {
    let mut queued = 0;
    for t in ContentType::ALL {
        let mut after = String::new();
        loop {
            let page = live_page(conn, t, &after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.content.id.clone();
            let mut current: HashMap<String, String> = HashMap::new();
            if skip_current {
                let ids: Vec<&str> = page.iter().map(|r| r.content.id.as_str()).collect();
                for chunk in fixed_chunks(&ids) {
                    let sql = format!(
                        "SELECT content_id, text_hash FROM embeddings WHERE content_type = $1 AND content_id IN {}",
                        placeholders(1, chunk.len(), 2)
                    );
                    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(t.as_str());
                    for id in chunk {
                        q = q.bind((*id).to_owned());
                    }
                    for row in q.fetch_all(&mut *conn).await? {
                        current.insert(row.try_get(0)?, row.try_get(1)?);
                    }
                }
            }
            let jobs: Vec<_> = page
                .iter()
                .filter(|r| !(t == ContentType::Message && r.text.is_empty()))
                .filter_map(|r| {
                    let hash = text_hash(&r.text);
                    (current.get(&r.content.id) != Some(&hash)).then_some((
                        t,
                        r.content.id.as_str(),
                        r.agent_id,
                        hash,
                    ))
                })
                .collect();
            queued += upsert_jobs(conn, &jobs, false).await?;
            if (page.len() as i64) < PAGE {
                break;
            }
        }
    }
    Ok(queued)
}

pub(crate) async fn reset_embeddings(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    info: &EmbeddingModelInfo,
) -> Result<u64> {
    check_model(info)?;
    change_lock(conn, ctx.backend).await?;
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::search as q;
            q::log_all_vectors_deleted(c).await?;
            q::delete_all_vectors(c).await?;
            q::delete_all_jobs(c).await?;
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::search as q;
            q::log_all_vectors_deleted(c).await?;
            q::delete_all_vectors(c).await?;
            q::delete_all_jobs(c).await?;
        }
    }
    store_model(conn, info).await?;
    queue_all(conn, false).await
}

pub(crate) async fn backfill(conn: &mut Conn<'_>) -> Result<u64> {
    queue_all(conn, true).await
}

pub(crate) async fn enqueue(conn: &mut Conn<'_>, content: &ContentRef) -> Result<()> {
    let live = load_live(conn, std::slice::from_ref(content), None).await?;
    let Some(row) = live.get(content) else {
        return Err(SearchError::ContentNotFound(content.clone()).into());
    };
    upsert_jobs(
        conn,
        &[(
            content.content_type,
            content.id.as_str(),
            row.agent_id,
            text_hash(&row.text),
        )],
        true,
    )
    .await?;
    Ok(())
}

fn lease_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// A leading parameter of a [`for_each_type`] statement.
#[derive(Debug, Clone, Copy)]
enum Lead<'a> {
    Int(i64),
    Text(&'a str),
}

/// Runs `head` (a statement ending in `content_type = $k AND content_id IN`, whose first
/// parameters are `leading`) for the ids of each content type in `refs`, a few ids at a time.
async fn for_each_type(
    conn: &mut Conn<'_>,
    head: &str,
    leading: &[Lead<'_>],
    refs: &[&ContentRef],
) -> Result<()> {
    for t in ContentType::ALL {
        let ids: Vec<&str> = refs
            .iter()
            .filter(|r| r.content_type == t)
            .map(|r| r.id.as_str())
            .collect();
        for chunk in fixed_chunks(&ids) {
            let sql = format!("{head} {}", placeholders(1, chunk.len(), leading.len() + 2));
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
            for value in leading {
                q = match *value {
                    Lead::Int(n) => q.bind(n),
                    Lead::Text(text) => q.bind(text.to_owned()),
                };
            }
            q = q.bind(t.as_str());
            for id in chunk {
                q = q.bind((*id).to_owned());
            }
            q.execute(&mut *conn).await?;
        }
    }
    Ok(())
}

pub(crate) async fn claim(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    limit: usize,
    lease: Duration,
) -> Result<Vec<EmbeddingJob>> {
    let now = now_ms();
    reclaim_from_dead(conn, ctx, now).await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // PostgreSQL's statement locks the rows it returns and skips those another claim locked.
    let due = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::due_jobs(c, now, limit)
            .await?
            .into_iter()
            .map(FromStored::into_domain)
            .collect::<Result<Vec<DueJob>>>()?,
        Conn::Postgres(c) => pattern_db_postgres::search::due_jobs(c, instant(now)?, limit)
            .await?
            .into_iter()
            .map(FromStored::into_domain)
            .collect::<Result<Vec<DueJob>>>()?,
    };
    let refs: Vec<ContentRef> = due.iter().map(|(c, _, _)| c.clone()).collect();
    let live = load_live(conn, &refs, None).await?;
    let until = now + lease_ms(lease);
    let mut out = Vec::with_capacity(due.len());
    let mut gone = Vec::new();
    for (content, attempts, stored_hash) in due {
        let Some(row) = live.get(&content) else {
            gone.push(content);
            continue;
        };
        let hash = text_hash(&row.text);
        if hash != stored_hash {
            // The text changed without its job being refreshed: the job follows the text, so
            // storing the vector of this text completes it.
            let t = content.content_type.as_str();
            match conn {
                Conn::Sqlite(c) => {
                    pattern_db_sqlite::search::set_job_hash(c, &hash, t, &content.id).await?
                }
                Conn::Postgres(c) => {
                    let id = uuid_arg(&content.id)?;
                    pattern_db_postgres::search::set_job_hash(c, &hash, t, id).await?
                }
            };
        }
        out.push(EmbeddingJob {
            content,
            agent_id: row.agent_id,
            text: row.text.clone(),
            text_hash: hash,
            attempts,
        });
    }
    let gone: Vec<&ContentRef> = gone.iter().collect();
    for_each_type(
        conn,
        "DELETE FROM embedding_jobs WHERE content_type = $1 AND content_id IN",
        &[],
        &gone,
    )
    .await?;
    let claimed: Vec<&ContentRef> = out.iter().map(|j| &j.content).collect();
    for_each_type(
        conn,
        "UPDATE embedding_jobs SET claimed_until = $1, claimed_by = $2 \
         WHERE content_type = $3 AND content_id IN",
        &[Lead::Int(until), Lead::Text(&ctx.judge.me)],
        &claimed,
    )
    .await?;
    Ok(out)
}

/// Frees the unexpired claims of holders that are not alive (gone: their liveness lock is free
/// or their row missing; expired: no heartbeat for a whole lease), so their jobs are due at once
/// rather than when the dead holder's lease would have passed. Claims recorded before migration
/// 0014 (no holder) keep their lease. Returns how many jobs were freed.
pub(crate) async fn reclaim_from_dead(conn: &mut Conn<'_>, ctx: &Ctx, now: i64) -> Result<u64> {
    let me = ctx.judge.me.as_str();
    let holders = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::claim_holders(c, now, me).await?,
        Conn::Postgres(c) => {
            pattern_db_postgres::search::claim_holders(c, instant(now)?, me).await?
        }
    };
    let mut freed = 0;
    for holder in holders {
        if ctx.judge.status(conn, &holder).await? == crate::process::HolderStatus::Alive {
            continue;
        }
        freed += release_claims_of(conn, &holder).await?;
    }
    Ok(freed)
}

/// Frees every claim `holder` holds. Returns how many jobs were freed.
pub(crate) async fn release_claims_of(conn: &mut Conn<'_>, holder: &str) -> Result<u64> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::release_claims_of(c, holder).await?,
        Conn::Postgres(c) => pattern_db_postgres::search::release_claims_of(c, holder).await?,
    })
}

pub(crate) async fn store(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    vectors: &[NewVector],
) -> Result<StoreReport> {
    let Some(model) = load_model(conn).await? else {
        return Err(SearchError::EmbeddingModelNotRegistered.into());
    };
    for v in vectors {
        if v.vector.len() != model.dimension as usize {
            return Err(SearchError::EmbeddingDimension {
                content: v.content.clone(),
                expected: model.dimension,
                got: v.vector.len(),
            }
            .into());
        }
        if v.vector.iter().any(|x| !x.is_finite()) {
            return Err(SearchError::InvalidEmbedding(format!(
                "vector for {} has a non-finite value",
                v.content
            ))
            .into());
        }
    }
    change_lock(conn, ctx.backend).await?;
    let refs: Vec<ContentRef> = vectors.iter().map(|v| v.content.clone()).collect();
    let live = load_live(conn, &refs, None).await?;
    let mut report = StoreReport::default();
    // The last vector given for a content wins.
    let mut keep: HashMap<&ContentRef, (&NewVector, &ContentRow)> = HashMap::new();
    let mut order: Vec<&ContentRef> = Vec::new();
    for v in vectors {
        let Some(row) = live.get(&v.content) else {
            report.gone.push(v.content.clone());
            continue;
        };
        if text_hash(&row.text) != v.text_hash {
            report.stale.push(v.content.clone());
            continue;
        }
        if keep.insert(&v.content, (v, row)).is_none() {
            order.push(&v.content);
        }
    }
    let gone: Vec<&ContentRef> = report.gone.iter().collect();
    for_each_type(
        conn,
        "DELETE FROM embedding_jobs WHERE content_type = $1 AND content_id IN",
        &[],
        &gone,
    )
    .await?;
    // A stale job stays, unclaimed, for its new text.
    let stale: Vec<&ContentRef> = report.stale.iter().collect();
    for_each_type(
        conn,
        "UPDATE embedding_jobs SET claimed_until = NULL, claimed_by = NULL WHERE content_type = $1 AND content_id IN",
        &[],
        &stale,
    )
    .await?;
    let rows: Vec<(&NewVector, &ContentRow)> =
        order.iter().filter_map(|c| keep.get(c).copied()).collect();
    for chunk in fixed_chunks(&rows) {
        let sql = format!(
            "INSERT INTO embeddings (content_type, content_id, agent_id, text_hash, dimension, vector, created_at) \
             VALUES {} ON CONFLICT (content_type, content_id) DO UPDATE SET \
             agent_id = excluded.agent_id, text_hash = excluded.text_hash, dimension = excluded.dimension, \
             vector = excluded.vector, created_at = excluded.created_at",
            value_rows(&*conn, chunk.len(), 7)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (v, row) in chunk {
            q = q
                .bind(v.content.content_type.as_str())
                .bind(v.content.id.clone())
                .bind(row.agent_id.to_string())
                .bind(v.text_hash.clone())
                .bind(v.vector.len() as i64)
                .bind(encode_vector(&v.vector))
                .bind(row.created_at.timestamp_millis());
        }
        q.execute(&mut *conn).await?;
        // A job is done only if it is still for this text (a concurrent write may have refreshed
        // it for a newer one).
        // PostgreSQL reads a VALUES list's parameters as text: its ids are cast to the column's UUID.
        let sql = match conn.backend() {
            Backend::Sqlite => format!(
                "DELETE FROM embedding_jobs WHERE (content_type, content_id, text_hash) IN (VALUES {})",
                value_rows(&*conn, chunk.len(), 3)
            ),
            Backend::Postgres => format!(
                "DELETE FROM embedding_jobs WHERE (content_type, content_id, text_hash) IN \
                 (SELECT v.t, v.i::uuid, v.h FROM (VALUES {}) AS v(t, i, h))",
                value_rows(&*conn, chunk.len(), 3)
            ),
        };
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (v, _) in chunk {
            q = q
                .bind(v.content.content_type.as_str())
                .bind(v.content.id.clone())
                .bind(v.text_hash.clone());
        }
        q.execute(&mut *conn).await?;
    }
    let changes: Vec<_> = rows
        .iter()
        .map(|(v, row)| {
            (
                v.content.content_type,
                v.content.id.as_str(),
                row.agent_id,
                ChangeKind::Vector,
            )
        })
        .collect();
    log_changes(conn, ctx.backend, &changes).await?;
    report.stored = rows.iter().map(|(v, _)| v.content.clone()).collect();
    Ok(report)
}

pub(crate) async fn fail(
    conn: &mut Conn<'_>,
    failures: &[(ContentRef, String)],
    retry_at: DateTime<Utc>,
) -> Result<u64> {
    let retry_ms = retry_at.timestamp_millis();
    let mut n = 0;
    for (content, error) in failures {
        let t = content.content_type.as_str();
        n += match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::search::fail_job(c, error, retry_ms, t, &content.id).await?
            }
            Conn::Postgres(c) => {
                let (at, id) = (instant(retry_ms)?, uuid_arg(&content.id)?);
                pattern_db_postgres::search::fail_job(c, error, at, t, id).await?
            }
        };
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// change log and vectors

pub(crate) async fn changes_after(
    conn: &mut Conn<'_>,
    cursor: i64,
    limit: usize,
) -> Result<Vec<SearchChange>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    match conn {
        Conn::Sqlite(c) => {
            // A span expands to at most `SPAN_MAX` changes: asking for that many more than
            // `limit` and dropping the last entry's changes when the answer is full leaves
            // whole entries only (at least `limit` changes), so a follower that moves its cursor
            // to the last change's `seq` never skips part of a span.
            let most = limit.saturating_add(SPAN_MAX as i64);
            let mut rows = pattern_db_sqlite::search::changes_after(c, cursor, limit, most).await?;
            if i64::try_from(rows.len()).is_ok_and(|n| n >= most)
                && let Some(last) = rows.last().map(|r| r.seq)
            {
                rows.retain(|r| r.seq != last);
                // Writers keep a span to `SPAN_MAX` messages; should one entry still expand to
                // more (a span written by another version), it is read whole on its own rather
                // than handed out as an empty page, which would stop every follower at it.
                if rows.is_empty() {
                    rows = pattern_db_sqlite::search::changes_after(c, cursor, 1, i64::MAX).await?;
                }
            }
            rows.into_iter().map(FromStored::into_domain).collect()
        }
        Conn::Postgres(c) => pattern_db_postgres::search::changes_after(c, cursor, limit)
            .await?
            .into_iter()
            .map(FromStored::into_domain)
            .collect(),
    }
}

pub(crate) async fn changes_head(conn: &mut Conn<'_>) -> Result<i64> {
    let head = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::changes_head(c).await?,
        Conn::Postgres(c) => pattern_db_postgres::search::changes_head(c).await?,
    };
    Ok(head.unwrap_or(0))
}

/// The `search_consumers` row that records how far the log was pruned (not a follower: it
/// never holds pruning back). A follower that keeps its cursor only in memory (the vector index
/// of `db_v2`) reloads when this passes its cursor, so a prune never makes it miss a change.
pub(crate) const PRUNED_MARK: &str = "_pruned";

pub(crate) async fn prune_changes(conn: &mut Conn<'_>, upto: i64) -> Result<u64> {
    let floor = followers_floor(conn).await?;
    let upto = floor.map_or(upto, |f| f.min(upto));
    // The newest change always stays: on SQLite `seq` is a rowid (migration 0022), which an
    // empty table would hand out again from 1.
    let pruned = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::prune_changes(c, upto).await?,
        Conn::Postgres(c) => pattern_db_postgres::search::prune_changes(c, upto).await?,
    };
    if pruned > 0 {
        let now = now_ms();
        match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::search::raise_cursor(c, PRUNED_MARK, upto, now).await?
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::search::raise_cursor(c, PRUNED_MARK, upto, instant(now)?)
                    .await?
            }
        };
    }
    Ok(pruned)
}

/// The slowest registered follower's cursor (`None`: no follower; [`PRUNED_MARK`] is none).
pub(crate) async fn followers_floor(conn: &mut Conn<'_>) -> Result<Option<i64>> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::followers_floor(c, PRUNED_MARK).await?,
        Conn::Postgres(c) => pattern_db_postgres::search::followers_floor(c, PRUNED_MARK).await?,
    })
}

/// How far the log was pruned (0: never).
pub(crate) async fn pruned_through(conn: &mut Conn<'_>) -> Result<i64> {
    let seq = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::cursor(c, PRUNED_MARK).await?,
        Conn::Postgres(c) => pattern_db_postgres::search::cursor(c, PRUNED_MARK).await?,
    };
    Ok(seq.unwrap_or(0))
}

pub(crate) async fn set_cursor(conn: &mut Conn<'_>, name: &str, seq: i64) -> Result<()> {
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::search::set_cursor(c, name, seq, now).await?,
        Conn::Postgres(c) => {
            pattern_db_postgres::search::set_cursor(c, name, seq, instant(now)?).await?
        }
    };
    Ok(())
}

fn vector_from_row(row: &Row) -> Result<VectorRow> {
    let t: String = row.try_get(0)?;
    let bytes: Vec<u8> = row.try_get(5)?;
    Ok(VectorRow {
        content: ContentRef::new(t.parse()?, row.try_get::<String, _>(1)?),
        agent_id: row_agent(row, 2)?,
        created_at: from_ms(row.try_get(3)?),
        vector: decode_vector(&bytes, row.try_get(4)?)?,
    })
}

const VECTOR_COLUMNS: &str = "content_type, content_id, agent_id, created_at, dimension, vector";

pub(crate) async fn vectors_page(
    conn: &mut Conn<'_>,
    after: Option<&ContentRef>,
    limit: usize,
) -> Result<Vec<VectorRow>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::search as q;
            match after {
                Some(a) => q::vectors_after(c, a.content_type.as_str(), &a.id, limit).await?,
                None => q::vectors_first(c, limit).await?,
            }
            .into_iter()
            .map(FromStored::into_domain)
            .collect()
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::search as q;
            match after {
                Some(a) => {
                    let id = uuid_arg(&a.id)?;
                    q::vectors_after(c, a.content_type.as_str(), id, limit).await?
                }
                None => q::vectors_first(c, limit).await?,
            }
            .into_iter()
            .map(FromStored::into_domain)
            .collect()
        }
    }
}

pub(crate) async fn vectors_for(
    conn: &mut Conn<'_>,
    contents: &[ContentRef],
) -> Result<Vec<VectorRow>> {
    let mut found: HashMap<ContentRef, VectorRow> = HashMap::new();
    for t in ContentType::ALL {
        let ids: Vec<&str> = contents
            .iter()
            .filter(|c| c.content_type == t)
            .map(|c| c.id.as_str())
            .collect();
        for chunk in fixed_chunks(&ids) {
            let sql = format!(
                "SELECT {VECTOR_COLUMNS} FROM embeddings WHERE content_type = $1 AND content_id IN {}",
                placeholders(1, chunk.len(), 2)
            );
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(t.as_str());
            for id in chunk {
                q = q.bind((*id).to_owned());
            }
            for row in q.fetch_all(&mut *conn).await? {
                let v = vector_from_row(&row)?;
                found.insert(v.content.clone(), v);
            }
        }
    }
    Ok(contents.iter().filter_map(|c| found.remove(c)).collect())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: messages by writing transaction

/// PostgreSQL: the `xmin` of the statement's snapshot and the messages (id, writing transaction)
/// it sees written by a transaction at or after `mark` (see migration 0029). Empty elsewhere.
pub(crate) async fn messages_touched(
    conn: &mut Conn<'_>,
    mark: i64,
) -> Result<(i64, Vec<(String, i64)>)> {
    match conn {
        Conn::Postgres(c) => {
            let (xmin, rows) = pattern_db_postgres::search::messages_touched_since(c, mark).await?;
            Ok((
                xmin,
                rows.into_iter()
                    .map(|r| (r.id.to_string(), r.txid))
                    .collect(),
            ))
        }
        Conn::Sqlite(_) => Ok((0, Vec::new())),
    }
}

/// PostgreSQL: the `xmin` of the current snapshot (0 elsewhere).
pub(crate) async fn snapshot_xmin(conn: &mut Conn<'_>) -> Result<i64> {
    match conn {
        Conn::Postgres(c) => Ok(pattern_db_postgres::search::snapshot_xmin(c).await?),
        Conn::Sqlite(_) => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::{SPAN_MAX, spans};
    use crate::model::AgentId;
    use proptest::prelude::*;

    proptest! {
        /// Spans cover every position given with text and nothing of another agent; each
        /// holds at most `SPAN_MAX` positions given (with text or not) and at least one with
        /// text; an agent whose positions all have text takes `ceil(n / SPAN_MAX)` spans.
        #[test]
        fn spans_cover_exactly_what_was_written(
            written in prop::collection::btree_map((0u8..3, 0i64..5_000), any::<bool>(), 0..2_000),
            all_text in any::<bool>(),
        ) {
            let agents: Vec<AgentId> = (0..3).map(|_| AgentId::new()).collect();
            let positions: Vec<(AgentId, i64, bool)> = written
                .iter()
                .map(|((a, p), t)| (agents[usize::from(*a)], *p, *t || all_text))
                .collect();
            let out = spans(positions.clone());
            for (agent, position, text) in &positions {
                let covered = out.iter().any(|(a, f, l)| a == agent && f <= position && position <= l);
                prop_assert!(covered || !text);
            }
            for (agent, first, last) in &out {
                prop_assert!(first <= last);
                let inside: Vec<bool> = positions
                    .iter()
                    .filter(|(a, p, _)| a == agent && first <= p && p <= last)
                    .map(|(_, _, t)| *t)
                    .collect();
                prop_assert!((1..=SPAN_MAX).contains(&inside.len()));
                prop_assert!(inside.iter().any(|t| *t));
            }
            if all_text {
                for agent in &agents {
                    let n = positions.iter().filter(|(a, _, _)| a == agent).count();
                    let taken = out.iter().filter(|(a, _, _)| a == agent).count();
                    prop_assert_eq!(taken, n.div_ceil(SPAN_MAX));
                }
            }
        }
    }
}
