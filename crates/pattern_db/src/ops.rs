//! The SQL of every write, run by the writer inside a transaction, and the row decoders shared
//! with reads.
//!
//! One SQL text serves both backends: it runs on sqlx's SQLite or PostgreSQL driver through
//! [`crate::sql`], with `$N` placeholders; the `sql` layer converts ids, times and JSON to
//! PostgreSQL's native types (decision 0026). Where the dialects differ (row locks), the
//! statement is chosen by [`Backend`]. A statement whose text is fixed may instead run as its
//! compile-time checked twins, `pattern_db_sqlite` in the `Conn::Sqlite` arm and
//! `pattern_db_postgres` (typed: `Uuid` ids, `TIMESTAMPTZ` instants) in the `Conn::Postgres` arm;
//! both engines' plain rows become the domain's types through one conversion ([`FromStored`]).
//! Every function here runs inside the caller's transaction and must never commit, roll back or
//! open a transaction of its own.

use crate::{AgentError, BatchError, ProtocolError, RunError, StorageError};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::sql::Conn;
use crate::sql::Row;
use chrono::{DateTime, TimeZone, Utc};

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::id::{SnowflakeGenerator, SnowflakeId};
use crate::legacy::{ImportPlan, LegacyMessage};
use crate::model::{
    Abandoned, ActivityEvent, Agent, AgentId, BatchId, BatchInfo, BatchState, BatchType,
    BeginBatch, ContentBlock, Message, MessageId, NewAgent, NewMessage, Received, Role,
    StepReceipt, Summary,
};
use crate::protocol::OrganizationId;
use crate::runs::RunClaim;
use crate::writer::Write as _;

pub(crate) mod agents;
pub(crate) mod approvals;
pub(crate) mod auth;
pub(crate) mod batches;
pub(crate) mod blocks;
pub(crate) mod console;
pub(crate) mod mcp;
pub(crate) mod protocol;
pub(crate) mod queue;
pub(crate) mod retention;
pub(crate) mod runs;
pub(crate) mod search;

/// What every op needs besides its arguments.
#[derive(Debug)]
pub struct Ctx {
    pub(crate) backend: Backend,
    pub(crate) ids: Arc<SnowflakeGenerator>,
    pub(crate) max_content_bytes: usize,
    /// `DbConfig::compress_content_from`.
    pub(crate) compress_from: Option<usize>,
    /// `DbConfig::compress_archived_from`.
    pub(crate) compress_archived_from: Option<usize>,
    /// `DbConfig::compress_imported_from`.
    pub(crate) compress_imported_from: Option<usize>,
    pub(crate) run_owner: String,
    pub(crate) batch_lease: Duration,
    /// Record embedding jobs with content writes (`DbConfig::record_embedding_jobs`).
    pub(crate) record_jobs: bool,
    /// How claims' holders are judged alive.
    pub(crate) judge: crate::process::Judge,
    /// This process's liveness lock key (its `processes` row).
    pub(crate) lock_key: i64,
    /// How long a process row lasts without a heartbeat.
    pub(crate) run_lease: Duration,
    /// How long a machine-id lease lasts without a heartbeat.
    pub(crate) machine_lease: Duration,
}

pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub(crate) fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

fn lease_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

// ---------------------------------------------------------------------------------------------
// agents

/// The columns [`agent_from_row`] decodes, in its order (the protocol's agent reads; the agents
/// domain's own reads are checked, `pattern_db_{sqlite,postgres}::agents`).
pub(crate) const AGENT_COLUMNS: &str =
    "id, name, metadata, created_at, organization_id, external_id";

/// The id of the organization with this external id, created when it is the local one and
/// missing (an unknown other one is [`ProtocolError::ExternalIdNotFound`]).
pub(crate) async fn organization_by_external_id(
    conn: &mut Conn<'_>,
    external_id: &str,
) -> Result<OrganizationId> {
    let row = crate::sql::query("SELECT id FROM protocol_organizations WHERE external_id = $1")
        .bind(external_id)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(row) = row {
        let id: String = row.try_get(0)?;
        return Ok(OrganizationId(parse_uuid(&id)?));
    }
    if external_id == crate::LOCAL_ORGANIZATION {
        return protocol::create_organization(conn, external_id, external_id)
            .await
            .map(|org| org.id);
    }
    Err(ProtocolError::ExternalIdNotFound {
        kind: "organization",
        external_id: external_id.to_owned(),
    }
    .into())
}

async fn create_agent(conn: &mut Conn<'_>, new: &NewAgent) -> Result<Agent> {
    crate::check_name("name", &new.name)?;
    let external_id = new.external_id.clone().unwrap_or_else(|| new.name.clone());
    crate::check_name("external_id", &external_id)?;
    let organization = match new.organization {
        Some(org) => {
            let exists = match conn {
                Conn::Sqlite(c) => {
                    pattern_db_sqlite::auth::organization_exists(c, &org.to_string()).await?
                }
                Conn::Postgres(c) => {
                    pattern_db_postgres::auth::organization_exists(c, org.0).await?
                }
            };
            if !exists {
                return Err(ProtocolError::NotFound {
                    kind: "organization",
                    id: org.0,
                }
                .into());
            }
            org
        }
        None => organization_by_external_id(conn, crate::LOCAL_ORGANIZATION).await?,
    };
    let clash = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::agents::clash(c, &organization.to_string(), &new.name, &external_id)
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::agents::clash(c, organization.0, &new.name, &external_id).await?
        }
    };
    let taken = |by_name: bool| {
        if by_name {
            Error::Agent(AgentError::NameTaken(new.name.clone()))
        } else {
            Error::Protocol(ProtocolError::ExternalIdTaken {
                kind: "agent",
                external_id: external_id.clone(),
            })
        }
    };
    if let Some(by_name) = clash {
        return Err(taken(by_name));
    }
    let agent = Agent {
        id: AgentId::new(),
        organization,
        name: new.name.clone(),
        external_id: external_id.clone(),
        metadata: new.metadata.clone(),
        created_at: from_ms(now_ms()),
    };
    let metadata = serde_json::to_string(&agent.metadata)
        .map_err(|e| BatchError::InvalidContent(e.to_string()))?;
    let created_at = agent.created_at.timestamp_millis();
    let inserted = match conn {
        Conn::Sqlite(c) => {
            let (id, org) = (agent.id.to_string(), organization.to_string());
            let row = pattern_db_sqlite::agents::NewAgent {
                id: &id,
                name: &agent.name,
                metadata: &metadata,
                created_at,
                organization_id: &org,
                external_id: &external_id,
            };
            pattern_db_sqlite::agents::insert(c, &row).await
        }
        Conn::Postgres(c) => {
            let row = pattern_db_postgres::agents::NewAgent {
                id: agent.id.0,
                name: &agent.name,
                metadata: &metadata,
                created_at: crate::sql::instant(created_at)?,
                organization_id: organization.0,
                external_id: &external_id,
            };
            pattern_db_postgres::agents::insert(c, &row).await
        }
    };
    match inserted {
        Ok(_) => Ok(agent),
        // A concurrent create of the same name or external id won the unique index.
        Err(e) if is_unique_violation(&e) => Err(taken(true)),
        Err(e) => Err(e.into()),
    }
}

async fn set_agent_metadata(
    conn: &mut Conn<'_>,
    agent: AgentId,
    metadata: &serde_json::Value,
) -> Result<Agent> {
    let text =
        serde_json::to_string(metadata).map_err(|e| BatchError::InvalidContent(e.to_string()))?;
    let row = match conn {
        Conn::Sqlite(c) => {
            let id = agent.to_string();
            if pattern_db_sqlite::agents::set_metadata(c, &id, &text).await? == 0 {
                return Err(AgentError::NotFound(agent).into());
            }
            pattern_db_sqlite::agents::by_id(c, &id)
                .await?
                .map(agent_from_plain)
        }
        Conn::Postgres(c) => {
            if pattern_db_postgres::agents::set_metadata(c, agent.0, &text).await? == 0 {
                return Err(AgentError::NotFound(agent).into());
            }
            pattern_db_postgres::agents::by_id(c, agent.0)
                .await?
                .map(agent_from_plain)
        }
    };
    // The row was updated in this transaction a statement ago (as `fetch_one` did before).
    row.ok_or(sqlx::Error::RowNotFound)?
}

pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// Whether inserting a new open batch broke `batches_one_run`: another run's batch of the agent
/// is open.
fn another_runs_batch(e: &sqlx::Error) -> bool {
    is_unique_violation(e) && e.to_string().contains("batches")
}

/// The refusal of a batch while another run's batch of `agent` is open.
fn agent_busy(agent: AgentId) -> Error {
    RunError::AgentBusy {
        agent,
        holder: "another run".into(),
    }
    .into()
}

async fn delete_agent(conn: &mut Conn<'_>, ctx: &Ctx, agent: AgentId) -> Result<()> {
    lock_agent(conn, agent).await?;
    search::agent_removed(conn, ctx, agent).await?;
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::agents::delete(c, &agent.to_string()).await?,
        Conn::Postgres(c) => pattern_db_postgres::agents::delete(c, agent.0).await?,
    };
    Ok(())
}

/// Like [`lock_agent`], and returns the agent's highest stored position, in the same statement,
/// and on SQLite the agent's number (what its messages carry: [`MessageRow::agent_num`]).
/// On PostgreSQL the writer has locked the agent in an earlier statement, so the read is current
/// (`begin_batch_postgres` says why that matters).
async fn lock_agent_position(
    conn: &mut Conn<'_>,
    agent: AgentId,
) -> Result<(Option<i64>, Option<i64>)> {
    let bumped = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::agents::bump_revision_with_position(c, &agent.to_string())
                .await?
                .map(|b| (b.max_position, Some(b.num)))
        }
        Conn::Postgres(c) => pattern_db_postgres::agents::bump_revision_with_position(c, agent.0)
            .await?
            .map(|max| (max, None)),
    };
    bumped.ok_or_else(|| AgentError::NotFound(agent).into())
}

/// Bumps the agent's `revision` (readers' caches key on it) and so, on PostgreSQL, takes the
/// agent's row lock until the transaction ends. Unknown agent: [`AgentError::NotFound`].
pub(crate) async fn lock_agent(conn: &mut Conn<'_>, agent: AgentId) -> Result<()> {
    let changed = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::agents::bump_revision(c, &agent.to_string()).await?,
        Conn::Postgres(c) => pattern_db_postgres::agents::bump_revision(c, agent.0).await?,
    };
    if changed == 0 {
        return Err(AgentError::NotFound(agent).into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// positions and content

/// `count` fresh positions, each greater than `max` (the agent's highest stored position), so the
/// history stays in order across restarts, clock steps and other processes.
fn positions_after(ctx: &Ctx, max: Option<i64>, count: usize) -> Result<Vec<SnowflakeId>> {
    let mut first = ctx.ids.next_id()?;
    if let Some(max) = max
        && first.get() <= max
    {
        ctx.ids.observe(SnowflakeId(max))?;
        first = ctx.ids.next_id()?;
    }
    let mut out = Vec::with_capacity(count);
    out.push(first);
    for _ in 1..count {
        out.push(ctx.ids.next_id()?);
    }
    Ok(out)
}

/// Checks a message's shape and size and serializes its content.
pub(crate) fn encode_content(ctx_limit: usize, message: &NewMessage) -> Result<String> {
    message.validate_shape()?;
    let json = serde_json::to_string(&message.content)
        .map_err(|e| BatchError::InvalidContent(e.to_string()))?;
    if json.len() > ctx_limit {
        return Err(BatchError::ContentTooLarge {
            size: json.len(),
            limit: ctx_limit,
        }
        .into());
    }
    Ok(json)
}

/// The text SQLite stores for a message whose content is `blocks` (migration 0030): the text
/// of a message of one text block, unless it starts with `[`; `None` for any other content,
/// stored as its JSON (an array, so it starts with `[`). [`decode_content`] reads both.
fn sqlite_text(blocks: &[ContentBlock]) -> Option<&str> {
    match blocks {
        [ContentBlock::Text { text }] if !text.starts_with('[') => Some(text),
        _ => None,
    }
}

struct MessageRow<'a> {
    id: MessageId,
    agent: AgentId,
    /// SQLite: the agent's number when the write knows it already (bound as it is; otherwise
    /// each row looks it up by the agent's id).
    agent_num: Option<i64>,
    position: SnowflakeId,
    batch: BatchId,
    seq: i64,
    batch_type: BatchType,
    role: Role,
    /// The content's JSON (empty for an import's message SQLite stores as `text`: see
    /// [`PreparedContent::Text`]).
    content: &'a str,
    /// The length of the content's JSON (what the token estimate counts).
    json_len: usize,
    /// What SQLite stores instead of the JSON ([`sqlite_text`]).
    text: Option<&'a str>,
    /// The content the JSON encodes (what the search log reads the text of).
    blocks: &'a [ContentBlock],
    created_at: i64,
    /// SQLite: the stored text already compressed (an import's old history,
    /// `DbConfig::compress_imported_from`), stored instead of it.
    compressed: Option<&'a [u8]>,
}

impl<'a> MessageRow<'a> {
    /// The trigger of a new batch at `position` (its first message, sequence 0), whose content
    /// `prepare_trigger` serialized as `content`.
    fn trigger(
        id: MessageId,
        agent: AgentId,
        position: SnowflakeId,
        batch_type: BatchType,
        trigger: &'a NewMessage,
        content: &'a str,
        now: i64,
    ) -> Self {
        Self {
            id,
            agent,
            agent_num: None,
            position,
            batch: position,
            seq: 0,
            batch_type,
            role: trigger.role,
            content,
            json_len: content.len(),
            text: sqlite_text(&trigger.content),
            blocks: &trigger.content,
            created_at: now,
            compressed: None,
        }
    }
}

/// `(` `$a, $b, ...` `)` groups for a multi-row VALUES or an IN list, in the numbered form both
/// engines read (sqlx's `QueryBuilder` is typed to one engine; one SQL text serves both here).
pub(crate) fn placeholders(rows: usize, columns: usize, first: usize) -> String {
    let mut out = String::with_capacity(rows * columns * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..columns {
            if c > 0 {
                out.push_str(", ");
            }
            out.push('$');
            out.push_str(&(first + r * columns + c).to_string());
        }
        out.push(')');
    }
    out
}

/// The `VALUES` rows of a statement whose only parameters they are: anonymous `?` on SQLite,
/// `$1, $2, ...` on PostgreSQL. sqlx binds a numbered SQLite parameter by looking its name up,
/// and SQLite finds a name by walking the statement's list of names, so numbered parameters cost
/// O(n^2) per statement (a fifth of an import's time at 64 rows of 12 columns); anonymous ones
/// are bound by position. Only for statements with no other parameter: sqlx numbers anonymous
/// parameters from 1 regardless of numbered ones before them.
pub(crate) fn value_rows(conn: &Conn<'_>, rows: usize, columns: usize) -> String {
    if conn.backend() != Backend::Sqlite {
        return placeholders(rows, columns, 1);
    }
    let row = format!("({})", vec!["?"; columns].join(", "));
    vec![row; rows].join(", ")
}

/// Splits `rows` into chunks of 64, 16, 4 and 1 rows: few statements, and few distinct SQL texts,
/// so the prepared statements stay in the connection's cache (a fresh text per group size would
/// be parsed and planned every time). 64 rows x 12 columns stays far below every backend's
/// parameter limit.
pub(crate) fn fixed_chunks<T>(mut rows: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    for size in [64, 16, 4, 1] {
        while rows.len() >= size {
            let (head, tail) = rows.split_at(size);
            out.push(head);
            rows = tail;
        }
    }
    out
}

async fn insert_messages(conn: &mut Conn<'_>, ctx: &Ctx, rows: &[MessageRow<'_>]) -> Result<()> {
    let mut script = crate::sql::Script::new();
    message_inserts(conn, ctx, rows, &mut script)?;
    Ok(script.execute(conn).await?)
}

/// The statements that insert `rows` into `messages` and log them for search (see
/// [`search::messages_written`]), added to `script`.
fn message_inserts(
    conn: &Conn<'_>,
    ctx: &Ctx,
    rows: &[MessageRow<'_>],
    script: &mut crate::sql::Script,
) -> Result<()> {
    for chunk in fixed_chunks(rows) {
        script.push(message_rows_query(conn, ctx, chunk, Insert::Values)?);
    }
    let written: Vec<_> = rows
        .iter()
        .map(|r| (r.id.0, r.agent, r.position.get(), r.blocks))
        .collect();
    for q in search::messages_written(conn, ctx, &written)? {
        script.push(q);
    }
    Ok(())
}

/// The condition that picks the messages of the `agents` row a statement is at: SQLite's
/// messages carry the agent's number (migration 0030), PostgreSQL's its id.
fn messages_of_agents_row(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "m.agent = agents.num",
        Backend::Postgres => "m.agent_id = agents.id",
    }
}

/// One multi-row `INSERT` of `rows` into `messages`. SQLite's layout (migration 0030,
/// `pattern_db_sqlite::messages`): the id as its 16 bytes, the agent as its number (one lookup
/// of `agents` by its unique id per row, inside the statement; an unknown agent leaves it NULL,
/// which `NOT NULL` refuses as PostgreSQL's foreign key does), role and batch type as codes, a
/// one-text message's text instead of its JSON.
fn message_rows_query(
    conn: &Conn<'_>,
    ctx: &Ctx,
    rows: &[MessageRow<'_>],
    insert: Insert,
) -> Result<crate::sql::Query> {
    let sqlite = conn.backend() == Backend::Sqlite;
    // Every row's agent number known: bound as it is, no lookup per row.
    let numbered = rows.iter().all(|r| r.agent_num.is_some());
    let sql = if sqlite {
        let row = if numbered {
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
        } else {
            "?, (SELECT num FROM agents WHERE id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
        };
        format!(
            "INSERT INTO messages (id, agent, position, batch_id, sequence_num, batch_type, role, \
             content, token_estimate, archived, deleted, created_at) {}",
            insert.rows(row, rows.len())?
        )
    } else {
        if insert != Insert::Values {
            return Err(StorageError::Database(sqlx::Error::Protocol(
                "a guarded insert is SQLite's".into(),
            ))
            .into());
        }
        format!(
            "INSERT INTO messages (id, agent_id, position, batch_id, sequence_num, batch_type, role, content, \
             token_estimate, archived, deleted, created_at) VALUES {}",
            value_rows(conn, rows.len(), 12)
        )
    };
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
    for row in rows {
        let (id, batch_type, role, content): (
            crate::sql::Arg,
            crate::sql::Arg,
            crate::sql::Arg,
            crate::sql::Arg,
        ) = if sqlite {
            use pattern_db_sqlite::messages::{
                BATCH_TYPES, ContentToStore, ROLES, content_to_store,
            };
            let stored = row.text.unwrap_or(row.content);
            (
                row.id.0.as_bytes().as_slice().into(),
                sqlite_code(&BATCH_TYPES, row.batch_type.as_str())?.into(),
                sqlite_code(&ROLES, row.role.as_str())?.into(),
                match row.compressed {
                    Some(bytes) => bytes.to_vec().into(),
                    None => match ctx.compress_from.map(|from| content_to_store(stored, from)) {
                        Some(ContentToStore::Compressed(bytes)) => bytes.into(),
                        _ => stored.to_owned().into(),
                    },
                },
            )
        } else {
            (
                row.id.to_string().into(),
                row.batch_type.as_str().into(),
                row.role.as_str().into(),
                row.content.to_owned().into(),
            )
        };
        let agent: crate::sql::Arg = match row.agent_num {
            Some(num) if sqlite && numbered => num.into(),
            _ => row.agent.to_string().into(),
        };
        q = q
            .bind(id)
            .bind(agent)
            .bind(row.position.get())
            .bind(row.batch.get())
            .bind(row.seq)
            .bind(batch_type)
            .bind(role)
            .bind(content)
            .bind(NewMessage::estimate_tokens(row.json_len))
            .bind(false)
            .bind(false)
            .bind(row.created_at);
    }
    Ok(q)
}

/// SQLite's stored code of `name` among `names`; every role and batch type has one.
fn sqlite_code(names: &[&str], name: &str) -> Result<i64> {
    pattern_db_sqlite::messages::code(names, name).ok_or_else(|| {
        Error::Storage(StorageError::Corrupt(format!(
            "`{name}` has no stored code among {names:?}"
        )))
    })
}

/// A new batch row.
struct BatchRow {
    id: BatchId,
    agent: AgentId,
    batch_type: BatchType,
    state: BatchState,
    parent: Option<BatchId>,
    owner: Option<String>,
    lease_expires_at: Option<i64>,
    next_sequence: i64,
    started_at: i64,
    completed_at: Option<i64>,
    retried_at: Option<i64>,
    claim_token: Option<i64>,
}

async fn insert_batches(conn: &mut Conn<'_>, rows: &[BatchRow]) -> Result<()> {
    let mut script = crate::sql::Script::new();
    batch_inserts(conn, rows, &mut script)?;
    Ok(script.execute(conn).await?)
}

/// The statements that insert `rows` into `batches`, added to `script`.
fn batch_inserts(
    conn: &Conn<'_>,
    rows: &[BatchRow],
    script: &mut crate::sql::Script,
) -> Result<()> {
    for chunk in fixed_chunks(rows) {
        script.push(batch_rows_query(conn, chunk, Insert::Values)?);
    }
    Ok(())
}

/// One multi-row `INSERT` of `rows` into `batches`.
fn batch_rows_query(
    conn: &Conn<'_>,
    rows: &[BatchRow],
    insert: Insert,
) -> Result<crate::sql::Query> {
    let tail = insert.placeholders(conn, rows.len(), 14)?;
    let sql = format!(
        "INSERT INTO batches (id, agent_id, batch_type, state, parent_batch, run_owner, lease_expires_at, \
         next_sequence, continuations, archived, started_at, completed_at, retried_at, claim_token) {tail}"
    );
    let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
    for row in rows {
        q = q
            .bind(row.id.get())
            .bind(row.agent.to_string())
            .bind(row.batch_type.as_str())
            .bind(row.state.as_str())
            .bind(row.parent.map(SnowflakeId::get))
            .bind(row.owner.clone())
            .bind(row.lease_expires_at)
            .bind(row.next_sequence)
            .bind(0_i64)
            .bind(false)
            .bind(row.started_at)
            .bind(row.completed_at)
            .bind(row.retried_at)
            .bind(row.claim_token);
    }
    Ok(q)
}

/// How a multi-row `INSERT` takes its rows ([`batch_rows_query`], [`message_rows_query`],
/// `search::span_rows_query`, `search::upsert_jobs_queries`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// `VALUES` of every row.
    Values,
    /// SQLite, one row: `SELECT` of it `WHERE changes() = 1`, inserted only when the statement
    /// before it in the same text changed exactly one row (see [`begin_batch_alone`]).
    IfOneChanged,
}

impl Insert {
    /// The rows' clause of `count` rows whose values are `row` (no parentheses).
    fn rows(self, row: &str, count: usize) -> Result<String> {
        match self {
            Self::Values => Ok(format!(
                "VALUES {}",
                vec![format!("({row})"); count].join(", ")
            )),
            Self::IfOneChanged if count == 1 => Ok(format!("SELECT {row} WHERE changes() = 1")),
            Self::IfOneChanged => Err(StorageError::Database(sqlx::Error::Protocol(format!(
                "a guarded insert takes one row, not {count}"
            )))
            .into()),
        }
    }

    /// The rows' clause of `count` rows of `columns` parameters each, the statement's only
    /// parameters ([`value_rows`] for `VALUES`). A guarded insert is SQLite's.
    pub(crate) fn placeholders(
        self,
        conn: &Conn<'_>,
        count: usize,
        columns: usize,
    ) -> Result<String> {
        match self {
            Self::Values => Ok(format!("VALUES {}", value_rows(conn, count, columns))),
            Self::IfOneChanged if conn.backend() != Backend::Sqlite => Err(StorageError::Database(
                sqlx::Error::Protocol("a guarded insert is SQLite's".into()),
            )
            .into()),
            Self::IfOneChanged => self.rows(&vec!["?"; columns].join(", "), count),
        }
    }
}

/// A tool call row: `(batch, call id, call position, ordinal in its message, result position)`.
type CallRow = (BatchId, String, SnowflakeId, i64, Option<SnowflakeId>);

async fn insert_calls(conn: &mut Conn<'_>, rows: &[CallRow]) -> Result<()> {
    for chunk in fixed_chunks(rows) {
        let sql = format!(
            "INSERT INTO tool_calls (batch_id, tool_use_id, call_position, ordinal, result_position) VALUES {} \
             ON CONFLICT (batch_id, tool_use_id) DO NOTHING",
            value_rows(&*conn, chunk.len(), 5)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (batch, id, position, ordinal, result) in chunk {
            q = q
                .bind(batch.get())
                .bind(id.clone())
                .bind(position.get())
                .bind(*ordinal)
                .bind(result.map(SnowflakeId::get));
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// batches

const BATCH_COLUMNS: &str = "b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, \
    b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, \
    b.claim_token";

/// How many columns [`BATCH_COLUMNS`] has (where a joined message's columns start).
pub(crate) const BATCH_COLUMN_COUNT: usize = 14;

/// Batches with their messages in one statement, PostgreSQL's read (SQLite's is one JSON
/// document, [`batches_from_json`]): the batches `pick` selects (a `SELECT` of
/// whole `batches` rows), each batch's columns followed by one of its live messages'
/// (NULL for a batch without any). Each batch's messages are one lookup of `messages_by_batch`.
/// The rows come in no particular order (an `ORDER BY` here made SQLite copy every joined row,
/// content included, into a sorter): [`batches_from_joined_rows`] orders them.
pub(crate) fn batches_with_messages(pick: &str) -> String {
    format!(
        "SELECT {BATCH_COLUMNS}, {MESSAGE_COLUMNS} FROM ({pick}) b \
         LEFT JOIN messages m ON m.batch_id = b.id AND NOT m.deleted"
    )
}

/// Rows of [`batches_with_messages`], grouped: each batch once, oldest first, with its messages
/// in sequence order. A batch's columns are decoded from its first row only (the join repeats
/// them on every message: decoding them each time cost a fifth of `get_recent`, measured).
pub(crate) fn batches_from_joined_rows(rows: &[Row]) -> Result<Vec<crate::model::StoredBatch>> {
    let mut batches = Grouped::default();
    for row in rows {
        let batch = batches.batch(row.try_get(0)?, || batch_from_row(row))?;
        if !row.is_null(BATCH_COLUMN_COUNT)? {
            batch.messages.push(message_from_plain(message_row_at(
                row,
                BATCH_COLUMN_COUNT,
            )?)?);
        }
    }
    Ok(batches.finish())
}

/// Batches read one row per message (a batch's columns repeated on each), gathered: each batch
/// once, decoded from its first row.
#[derive(Default)]
struct Grouped(std::collections::BTreeMap<i64, crate::model::StoredBatch>);

impl Grouped {
    /// Batch `id`, decoded by `info` the first time it is seen.
    fn batch(
        &mut self,
        id: i64,
        info: impl FnOnce() -> Result<BatchInfo>,
    ) -> Result<&mut crate::model::StoredBatch> {
        Ok(match self.0.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(crate::model::StoredBatch {
                info: info()?,
                messages: Vec::new(),
            }),
        })
    }

    /// The batches oldest first, each one's messages in sequence order.
    fn finish(self) -> Vec<crate::model::StoredBatch> {
        let mut out: Vec<_> = self.0.into_values().collect();
        for batch in &mut out {
            batch.messages.sort_by_key(|m| m.sequence_num);
        }
        out
    }
}

/// One element of `pattern_db_sqlite::batches::revision_and_newest_json`'s document.
#[derive(serde::Deserialize)]
struct RecentRow(
    i64,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
    i64,
    i64,
    Option<i64>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

/// The batches of a `pattern_db_sqlite::batches` JSON document (`revision_and_newest_json`,
/// `live_before_json`), oldest first, each with its messages in sequence order.
pub(crate) fn batches_from_json(doc: &str) -> Result<Vec<crate::model::StoredBatch>> {
    let rows: Vec<RecentRow> = serde_json::from_str(doc).map_err(|e| {
        Error::Storage(StorageError::Corrupt(format!(
            "stored batches read as JSON do not decode: {e}"
        )))
    })?;
    let mut batches = Grouped::default();
    for r in rows {
        let batch = batches.batch(r.0, || {
            batch_from_plain(pattern_db_sqlite::BatchRow {
                id: r.0,
                agent_id: r.1.clone(),
                batch_type: r.2.clone(),
                state: r.3.clone(),
                parent_batch: r.4,
                run_owner: r.5.clone(),
                lease_expires_at: r.6,
                next_sequence: r.7,
                archived: r.8 != 0,
                started_at: r.9,
                completed_at: r.10,
                continuations: r.11,
                retried_at: r.12,
                claim_token: r.13,
            })
        })?;
        // A batch without a live message has one element, the message's columns null.
        let (
            Some(id),
            Some(position),
            Some(sequence_num),
            Some(role),
            Some(content),
            Some(token_estimate),
            Some(archived),
            Some(created_at),
            Some(batch_type),
        ) = (r.14, r.15, r.16, r.17, r.18, r.19, r.20, r.21, r.22)
        else {
            continue;
        };
        // A compressed content comes as the hex of its bytes (migration 0031).
        let content = if r.23 == Some(1) {
            pattern_db_sqlite::messages::text_from_hex(&content).map_err(|e| {
                Error::Storage(StorageError::Corrupt(format!(
                    "message {id} in stored batch {}: {e}",
                    r.0
                )))
            })?
        } else {
            content
        };
        batch
            .messages
            .push(message_from_plain(pattern_db_sqlite::MessageRow {
                id,
                agent_id: r.1,
                position,
                batch_id: r.0,
                sequence_num,
                batch_type,
                role,
                content: pattern_db_sqlite::messages::StoredText(content),
                token_estimate,
                archived: archived != 0,
                deleted: false,
                created_at,
            })?);
    }
    Ok(batches.finish())
}

pub(crate) async fn load_batch(
    conn: &mut Conn<'_>,
    agent: AgentId,
    batch: BatchId,
) -> Result<BatchInfo> {
    let info = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::batches::by_id(c, batch.get(), &agent.to_string())
            .await?
            .map(batch_from_plain),
        Conn::Postgres(c) => pattern_db_postgres::batches::by_id(c, batch.get(), agent.0)
            .await?
            .map(batch_from_plain),
    };
    info.unwrap_or_else(|| Err(BatchError::NotFound { agent, batch }.into()))
}

/// The message that opened `batch` (sequence 0).
pub(crate) async fn batch_trigger(conn: &mut Conn<'_>, batch: BatchId) -> Result<Message> {
    match conn {
        Conn::Sqlite(c) => {
            message_from_plain(pattern_db_sqlite::messages::trigger_of_batch(c, batch.get()).await?)
        }
        Conn::Postgres(c) => message_from_plain(
            pattern_db_postgres::messages::trigger_of_batch(c, batch.get()).await?,
        ),
    }
}

/// Checks what can be checked of a trigger without the database, and serializes it.
fn prepare_trigger(
    ctx: &Ctx,
    trigger: &NewMessage,
    opts: &BeginBatch,
) -> Result<(String, BatchType)> {
    if !matches!(trigger.role, Role::User | Role::System) {
        return Err(BatchError::InvalidContent(format!(
            "a batch starts with a user or system message, not {}",
            trigger.role.as_str()
        ))
        .into());
    }
    let content = encode_content(ctx.max_content_bytes, trigger)?;
    if let Some(id) = trigger.tool_result_ids().next() {
        return Err(BatchError::InvalidContent(format!(
            "a trigger cannot answer tool call `{id}`: it opens a new batch"
        ))
        .into());
    }
    let batch_type = opts.batch_type.unwrap_or(match trigger.role {
        Role::System => BatchType::SystemTrigger,
        _ => BatchType::UserRequest,
    });
    if batch_type == BatchType::Continuation {
        return Err(BatchError::InvalidContent(
            "a new batch cannot have type continuation: continue the existing batch instead".into(),
        )
        .into());
    }
    Ok((content, batch_type))
}

/// A new open batch: under a run's claim (`claim_token`; its claim, not a lease, keeps it
/// alive) or without one (alive while its lease holds).
fn open_batch_row(
    ctx: &Ctx,
    agent: AgentId,
    id: BatchId,
    batch_type: BatchType,
    parent: Option<BatchId>,
    now: i64,
    claim_token: Option<i64>,
) -> BatchRow {
    BatchRow {
        id,
        agent,
        batch_type,
        state: BatchState::Open,
        parent,
        owner: Some(ctx.run_owner.clone()),
        lease_expires_at: match claim_token {
            Some(_) => None,
            None => Some(now + lease_ms(ctx.batch_lease)),
        },
        next_sequence: 1,
        started_at: now,
        completed_at: None,
        retried_at: None,
        claim_token,
    }
}

/// Begins a batch: under the run claim `claim_token` (the caller holds it), or without a claim,
/// which is refused while a live run holds the agent.
pub(crate) async fn begin_batch(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    trigger: &NewMessage,
    opts: &BeginBatch,
    claim_token: Option<i64>,
) -> Result<Received> {
    let (content, batch_type) = prepare_trigger(ctx, trigger, opts)?;
    let (max, holder) = match conn {
        Conn::Postgres(c) => {
            let trigger = Trigger::new(ctx, agent, trigger, &content, batch_type);
            return begin_batch_postgres(c, ctx, &trigger, opts, claim_token).await;
        }
        Conn::Sqlite(c) => {
            // One statement: the revision bump, the newest position and (without a claim) the
            // run holder. SQLite's write lock is held since `BEGIN IMMEDIATE`, so it is current.
            let id = agent.to_string();
            let bumped = if claim_token.is_none() {
                pattern_db_sqlite::agents::bump_revision_with_holder(c, &id).await?
            } else {
                pattern_db_sqlite::agents::bump_revision_with_position(c, &id).await?
            };
            let bumped = bumped.ok_or(AgentError::NotFound(agent))?;
            (bumped.max_position, bumped.run_holder)
        }
    };
    if let Some(holder) = holder {
        refuse_while_claimed(conn, ctx, agent, holder).await?;
    }
    if let Some(parent) = opts.parent_batch {
        load_batch(conn, agent, parent).await?;
    }
    let position = positions_after(ctx, max, 1)?[0];
    let now = now_ms();
    if let Some(abandoned) = opts.retry_of {
        claim_retry(conn, agent, abandoned, now).await?;
    }
    let batch_row = open_batch_row(
        ctx,
        agent,
        position,
        batch_type,
        opts.parent_batch,
        now,
        claim_token,
    );
    let message_id = MessageId::new();
    let row = MessageRow::trigger(
        message_id, agent, position, batch_type, trigger, &content, now,
    );
    // SQLite (without embedding jobs to record): the batch row, the message and its search
    // change in one round trip to the connection's worker.
    let written = [(
        message_id.0,
        agent,
        position.get(),
        trigger.content.as_slice(),
    )];
    if let Some(change) = search::message_change_query(conn, ctx, &written)? {
        let mut script = crate::sql::Script::new();
        script.push(batch_rows_query(
            conn,
            std::slice::from_ref(&batch_row),
            Insert::Values,
        )?);
        script.push(message_rows_query(
            conn,
            ctx,
            std::slice::from_ref(&row),
            Insert::Values,
        )?);
        script.push(change);
        return match script.execute(conn).await {
            // `batches_one_run`: another run's batch of this agent is open.
            Err(e) if another_runs_batch(&e) => Err(agent_busy(agent)),
            Err(e) => Err(e.into()),
            Ok(()) => Ok(Received {
                batch_id: position,
                message_id,
            }),
        };
    }
    match insert_batches(conn, std::slice::from_ref(&batch_row)).await {
        // `batches_one_run`: another run's batch of this agent is open.
        Err(Error::Storage(StorageError::Database(e))) if is_unique_violation(&e) => {
            return Err(agent_busy(agent));
        }
        other => other?,
    }
    insert_messages(conn, ctx, std::slice::from_ref(&row)).await?;
    Ok(Received {
        batch_id: position,
        message_id,
    })
}

/// A trigger ready to store: checked and serialized by `prepare_trigger`.
struct Trigger<'a> {
    agent: AgentId,
    role: Role,
    content: &'a str,
    batch_type: BatchType,
    /// Its embedding job's text hash, when jobs are recorded and it has text.
    job_hash: Option<String>,
}

impl<'a> Trigger<'a> {
    /// `message` of `agent`, whose content `prepare_trigger` serialized as `content`.
    fn new(
        ctx: &Ctx,
        agent: AgentId,
        message: &NewMessage,
        content: &'a str,
        batch_type: BatchType,
    ) -> Self {
        Self {
            agent,
            role: message.role,
            content,
            batch_type,
            job_hash: search::message_job_hash(ctx, &message.content),
        }
    }
}

/// `begin_batch` on PostgreSQL, inside the writer's transaction. The batch and its trigger are
/// stored by one call of `pattern_open_batch` (migration 0024), which locks the agent's row and
/// then reads its newest position and run holder in statements of their own, so what it reads was
/// committed before the lock was granted. (A statement that waits for a row lock keeps the
/// snapshot it started with under `READ COMMITTED`: reading them in the locking statement, as
/// stop 29 did, could miss another process's message or run claim committed while it waited;
/// decision 0025, "Stop 30".) A parent batch or a retry is checked under the agent's lock first.
/// When the call finds a position at or above the one it was given, or a holder, it stores
/// nothing and says so: the holder is judged, the generator moves past the position, and it runs
/// again under the same lock.
async fn begin_batch_postgres(
    c: &mut sqlx::PgConnection,
    ctx: &Ctx,
    trigger: &Trigger<'_>,
    opts: &BeginBatch,
    claim_token: Option<i64>,
) -> Result<Received> {
    let agent = trigger.agent;
    let now = now_ms();
    if opts.parent_batch.is_some() || opts.retry_of.is_some() {
        lock_agent(&mut Conn::Postgres(&mut *c), agent).await?;
    }
    if let Some(parent) = opts.parent_batch {
        load_batch(&mut Conn::Postgres(&mut *c), agent, parent).await?;
    }
    if let Some(abandoned) = opts.retry_of {
        claim_retry(&mut Conn::Postgres(&mut *c), agent, abandoned, now).await?;
    }
    let message_id = MessageId::new();
    let mut check_holder = claim_token.is_none();
    let mut max = None;
    // At most: a holder to judge, then a position to move past, then the insert.
    for _ in 0..3 {
        let open = OpenPostgres {
            trigger,
            parent: opts.parent_batch,
            claim_token,
            message_id,
            now,
        };
        let (position, attempt) = open_postgres(c, ctx, &open, max, check_holder).await?;
        if attempt.inserted {
            return Ok(Received {
                batch_id: position,
                message_id,
            });
        }
        if let Some(holder) = attempt.run_holder {
            refuse_while_claimed(&mut Conn::Postgres(&mut *c), ctx, agent, holder).await?;
            // The holder's process is gone: its claim does not refuse this batch.
            check_holder = false;
        }
        max = attempt.max_position;
    }
    Err(Error::Storage(StorageError::Corrupt(format!(
        "begin_batch for agent {agent} found a newer position or a run holder three times under \
         the agent's lock"
    ))))
}

/// A lone `begin_batch` without a run's claim, parent or retry, in one round trip. PostgreSQL:
/// one call of `pattern_open_batch` autocommitted on a connection outside any transaction (the
/// call is atomic on its own and commits when it returns). SQLite: one text of statements run
/// as a transaction of its own ([`crate::sql::Pooled::sqlite_transaction`]): the agent's
/// revision is bumped only when no run holds the agent and no message of it sits at or above the
/// new position, each insert runs only when the statement before it changed one row, and the
/// last statement says whether the trigger was stored. Either way `Ok(None)` when it stored
/// nothing because a run holds the agent, a newer position exists or the agent is unknown: the
/// caller then runs the write on its transactional path ([`begin_batch`]), which judges the
/// holder, moves the generator on, or says the agent is unknown.
pub(crate) async fn begin_batch_alone(
    pooled: &mut crate::sql::Pooled,
    ctx: &Ctx,
    agent: AgentId,
    trigger: &NewMessage,
    opts: &BeginBatch,
) -> Result<Option<Received>> {
    if opts.parent_batch.is_some() || opts.retry_of.is_some() {
        return Ok(None);
    }
    let (content, batch_type) = prepare_trigger(ctx, trigger, opts)?;
    let message_id = MessageId::new();
    let now = now_ms();
    if let crate::sql::Pooled::Postgres(c) = pooled {
        let trigger = Trigger::new(ctx, agent, trigger, &content, batch_type);
        let open = OpenPostgres {
            trigger: &trigger,
            parent: None,
            claim_token: None,
            message_id,
            now,
        };
        let (position, attempt) = open_postgres(c, ctx, &open, None, true).await?;
        return Ok(attempt.inserted.then_some(Received {
            batch_id: position,
            message_id,
        }));
    }
    let position = positions_after(ctx, None, 1)?[0];
    let batch = open_batch_row(ctx, agent, position, batch_type, None, now, None);
    let row = MessageRow::trigger(
        message_id, agent, position, batch_type, trigger, &content, now,
    );
    let mut script = crate::sql::Script::new();
    script.push(
        crate::sql::query(
            "UPDATE agents SET revision = revision + 1 WHERE id = ? \
             AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.agent_id = agents.id AND r.holder IS NOT NULL) \
             AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.agent = agents.num AND m.position >= ?)",
        )
        .bind(agent.to_string())
        .bind(position.get()),
    );
    let guard = Insert::IfOneChanged;
    script.push(batch_rows_query(
        &pooled.conn(),
        std::slice::from_ref(&batch),
        guard,
    )?);
    script.push(message_rows_query(
        &pooled.conn(),
        ctx,
        std::slice::from_ref(&row),
        guard,
    )?);
    for log in search::message_written_guarded(
        &pooled.conn(),
        ctx,
        agent,
        position.get(),
        message_id.0,
        &trigger.content,
    )? {
        script.push(log);
    }
    script.push(
        crate::sql::query("SELECT EXISTS (SELECT 1 FROM messages WHERE id = ?)")
            .bind(message_id.0.as_bytes().as_slice()),
    );
    let rows = match pooled.sqlite_transaction(script.into_query()?).await {
        // `batches_one_run`: another run's batch of this agent is open.
        Err(e) if another_runs_batch(&e) => return Err(agent_busy(agent)),
        other => other?,
    };
    let stored = match rows.last() {
        Some(row) => row.try_get::<bool, _>(0)?,
        None => false,
    };
    Ok(stored.then_some(Received {
        batch_id: position,
        message_id,
    }))
}

/// A lone `complete_batch` without a run's claim on SQLite, in one round trip: one text of
/// statements run as a transaction of its own ([`crate::sql::Pooled::sqlite_transaction`]). The
/// agent's revision is bumped only when the batch is open, begun without a claim, not an
/// `agent_to_agent` batch (whose completion marks a session message read) and waits for no
/// tool result and no approval; the batch is completed only when that bump changed one row, and
/// read back only when the completion did. `Ok(None)` when it stored nothing (the batch is in
/// another state, a run's, an `agent_to_agent` one, waiting, unknown; or PostgreSQL, whose
/// transactional path it leaves alone): the caller then runs the write on its transactional path
/// ([`complete_batch`]), which answers or refuses as always.
pub(crate) async fn complete_batch_alone(
    pooled: &mut crate::sql::Pooled,
    agent: AgentId,
    batch: BatchId,
) -> Result<Option<BatchInfo>> {
    if pooled.conn().backend() != Backend::Sqlite {
        return Ok(None);
    }
    let mut script = crate::sql::Script::new();
    script.push(
        crate::sql::query(
            "UPDATE agents SET revision = revision + 1 WHERE id = ? AND EXISTS (SELECT 1 FROM batches b \
             WHERE b.id = ? AND b.agent_id = agents.id AND b.state = 'open' AND b.claim_token IS NULL \
             AND b.batch_type <> 'agent_to_agent' \
             AND NOT EXISTS (SELECT 1 FROM tool_calls t WHERE t.batch_id = b.id AND t.result_position IS NULL) \
             AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.batch_id = b.id AND p.state = 'pending'))",
        )
        .bind(agent.to_string())
        .bind(batch.get()),
    );
    // What `pattern_db_sqlite::batches::mark_complete` stores.
    script.push(
        crate::sql::query(
            "UPDATE batches SET state = 'complete', completed_at = ?, run_owner = NULL, \
             lease_expires_at = NULL WHERE id = ? AND changes() = 1",
        )
        .bind(now_ms())
        .bind(batch.get()),
    );
    script.push(
        crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {BATCH_COLUMNS} FROM batches b WHERE b.id = ? AND changes() = 1"
        )))
        .bind(batch.get()),
    );
    let rows = pooled.sqlite_transaction(script.into_query()?).await?;
    rows.last().map(batch_from_row).transpose()
}

/// What one call of `pattern_open_batch` stores, but for the position.
struct OpenPostgres<'a> {
    trigger: &'a Trigger<'a>,
    parent: Option<BatchId>,
    claim_token: Option<i64>,
    message_id: MessageId,
    now: i64,
}

/// One call of `pattern_open_batch` at a fresh position above `max`: the position and what the
/// call found. An unknown agent is `AgentError::NotFound`; another run's open batch is
/// `RunError::AgentBusy`.
async fn open_postgres(
    c: &mut sqlx::PgConnection,
    ctx: &Ctx,
    open: &OpenPostgres<'_>,
    max: Option<i64>,
    check_holder: bool,
) -> Result<(BatchId, pattern_db_postgres::batches::OpenAttempt)> {
    let trigger = open.trigger;
    let agent = trigger.agent;
    let position = positions_after(ctx, max, 1)?[0];
    let batch_row = open_batch_row(
        ctx,
        agent,
        position,
        trigger.batch_type,
        open.parent,
        open.now,
        open.claim_token,
    );
    let row = pattern_db_postgres::batches::OpenWithTrigger {
        id: position.get(),
        agent_id: agent.0,
        batch_type: trigger.batch_type.as_str(),
        parent_batch: batch_row.parent.map(SnowflakeId::get),
        run_owner: batch_row.owner.as_deref(),
        lease_expires_at: batch_row
            .lease_expires_at
            .map(crate::sql::instant)
            .transpose()?,
        claim_token: open.claim_token,
        now: crate::sql::instant(open.now)?,
        message_id: open.message_id.0,
        role: trigger.role.as_str(),
        content: trigger.content,
        token_estimate: NewMessage::estimate_tokens(trigger.content.len()),
        job_hash: trigger.job_hash.as_deref(),
    };
    let attempt = match pattern_db_postgres::batches::open_batch(c, &row, check_holder).await {
        // `batches_one_run`: another run's batch of this agent is open.
        Err(e) if another_runs_batch(&e) => return Err(agent_busy(agent)),
        other => other?,
    };
    if !attempt.agent_found {
        return Err(AgentError::NotFound(agent).into());
    }
    Ok((position, attempt))
}

/// Marks abandoned batch `batch` of `agent` retried, inside the transaction that stores the
/// retry's trigger (its batch or its queue entry), after the agent's lock. A batch that is not
/// abandoned, or was retried already (by this caller or a concurrent one: on PostgreSQL the row
/// lock makes the second claim wait and then find `retried_at` set), refuses the whole write.
pub(crate) async fn claim_retry(
    conn: &mut Conn<'_>,
    agent: AgentId,
    batch: BatchId,
    now: i64,
) -> Result<()> {
    let claimed = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::claim_retry(c, batch.get(), &agent.to_string(), now).await?
        }
        Conn::Postgres(c) => {
            let now = crate::sql::instant(now)?;
            pattern_db_postgres::batches::claim_retry(c, batch.get(), agent.0, now).await?
        }
    };
    if claimed == 1 {
        return Ok(());
    }
    let info = load_batch(conn, agent, batch).await?;
    Err(match info.retried_at {
        Some(retried_at) => Error::Batch(BatchError::AlreadyRetried { batch, retried_at }),
        None => Error::Batch(BatchError::InvalidState {
            batch,
            state: info.state,
            action: "a retry (only an abandoned batch can be retried)",
        }),
    })
}

/// Refuses a batch begun without a claim while `holder`, the live run holding `agent`'s claim,
/// is alive.
async fn refuse_while_claimed(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    holder: String,
) -> Result<()> {
    if ctx.judge.status(conn, &holder).await? == crate::process::HolderStatus::Alive {
        return Err(RunError::AgentBusy { agent, holder }.into());
    }
    Ok(())
}

/// Many `begin_batch` calls of one write group in a handful of statements: one statement bumps
/// the agents' revisions and returns their newest positions and run holders (on PostgreSQL the
/// writer has locked them up front, in agent order), then every batch row and every trigger is
/// inserted by one multi-row statement each. The outer error means the statements
/// failed and the caller must redo the calls one by one; the inner results are per call.
pub(crate) async fn begin_batches_bulk(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    calls: &[(AgentId, &NewMessage, &BeginBatch)],
) -> Result<Vec<Result<Received>>> {
    let mut out: Vec<Result<Received>> = Vec::with_capacity(calls.len());
    let mut prepared = Vec::with_capacity(calls.len());
    for (agent, trigger, opts) in calls {
        match prepare_trigger(ctx, trigger, opts) {
            Ok(p) => {
                prepared.push(Some(p));
                out.push(Err(Error::Agent(AgentError::NotFound(*agent))));
            }
            Err(e) => {
                prepared.push(None);
                out.push(Err(e));
            }
        }
    }
    let mut agents: Vec<AgentId> = calls
        .iter()
        .zip(&prepared)
        .filter(|(_, p)| p.is_some())
        .map(|((a, _, _), _)| *a)
        .collect();
    agents.sort_unstable();
    agents.dedup();
    if agents.is_empty() {
        return Ok(out);
    }
    // One statement per chunk bumps each agent's revision and returns its newest position and
    // its run's holder. On PostgreSQL the writer locked these agents' rows up front, in agent
    // order, before this statement took its snapshot, so the positions it reads are current.
    let mut max: std::collections::HashMap<AgentId, Option<i64>> = std::collections::HashMap::new();
    for chunk in agents.chunks(256) {
        // The IN list is padded (repeating the last id) to one of a few lengths, so the statement
        // text repeats and stays prepared; a repeated id updates its row once.
        let width = [1, 4, 16, 64, 256]
            .into_iter()
            .find(|w| *w >= chunk.len())
            .unwrap_or(256);
        let sql = format!(
            "UPDATE agents SET revision = revision + 1 WHERE id IN {} RETURNING id, \
             (SELECT m.position FROM messages m WHERE {} ORDER BY m.position DESC LIMIT 1), \
             (SELECT r.holder FROM agent_runs r WHERE r.agent_id = agents.id AND r.holder IS NOT NULL)",
            placeholders(1, width, 1),
            messages_of_agents_row(conn.backend()),
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for i in 0..width {
            q = q.bind(chunk[i.min(chunk.len() - 1)].to_string());
        }
        for row in q.fetch_all(&mut *conn).await? {
            let id = AgentId(parse_uuid(&row.try_get::<String, _>(0)?)?);
            // Agents that ever ran under a claim take the one-by-one path, which checks the
            // claim (the caller rolls this statement back with the rest).
            if let Some(holder) = row.try_get::<Option<String>, _>(2)? {
                return Err(RunError::AgentBusy {
                    agent: id,
                    holder: format!("{holder} (checked one by one)"),
                }
                .into());
            }
            max.insert(id, row.try_get::<Option<i64>, _>(1)?);
        }
    }
    let now = now_ms();
    let mut batch_rows = Vec::new();
    let mut message_ids = Vec::new();
    for (i, ((agent, _, _), prep)) in calls.iter().zip(&prepared).enumerate() {
        let (Some((_, batch_type)), Some(agent_max)) = (prep, max.get_mut(agent)) else {
            continue;
        };
        let position = positions_after(ctx, *agent_max, 1)?[0];
        *agent_max = Some(position.get());
        batch_rows.push(open_batch_row(
            ctx,
            *agent,
            position,
            *batch_type,
            None,
            now,
            None,
        ));
        let message_id = MessageId::new();
        message_ids.push((i, message_id, position, *batch_type));
        out[i] = Ok(Received {
            batch_id: position,
            message_id,
        });
    }
    let rows: Vec<MessageRow<'_>> = message_ids
        .iter()
        .filter_map(|&(i, id, position, batch_type)| {
            let (content, _) = prepared[i].as_ref()?;
            let (agent, trigger, _) = calls[i];
            Some(MessageRow::trigger(
                id, agent, position, batch_type, trigger, content, now,
            ))
        })
        .collect();
    // The batches, the triggers and their search logs: one text, one round trip on SQLite.
    let mut script = crate::sql::Script::new();
    batch_inserts(conn, &batch_rows, &mut script)?;
    message_inserts(conn, ctx, &rows, &mut script)?;
    script.execute(conn).await?;
    Ok(out)
}

/// Checks that `step` keeps the batch's tool pairing valid. `known` maps each call id the step
/// mentions that the batch already holds to whether it has its result.
pub(crate) fn check_step_pairing(
    batch: BatchId,
    known: &std::collections::HashMap<String, bool>,
    step: &[NewMessage],
) -> Result<()> {
    let mut calls: HashSet<&str> = known.keys().map(String::as_str).collect();
    let mut answered: HashSet<&str> = known
        .iter()
        .filter(|(_, a)| **a)
        .map(|(id, _)| id.as_str())
        .collect();
    for message in step {
        for id in message.tool_use_ids() {
            if !calls.insert(id) {
                return Err(BatchError::DuplicateToolUse {
                    batch,
                    tool_use_id: id.to_owned(),
                }
                .into());
            }
        }
        for id in message.tool_result_ids() {
            if !calls.contains(id) {
                return Err(BatchError::UnpairedToolResult {
                    batch,
                    tool_use_id: id.to_owned(),
                }
                .into());
            }
            if !answered.insert(id) {
                return Err(BatchError::DuplicateToolResult {
                    batch,
                    tool_use_id: id.to_owned(),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// What the batch holds of the given call ids: id -> has its result.
async fn known_calls(
    conn: &mut Conn<'_>,
    batch: BatchId,
    ids: &[&str],
) -> Result<std::collections::HashMap<String, bool>> {
    let mut known = std::collections::HashMap::new();
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT tool_use_id, result_position FROM tool_calls WHERE batch_id = $1 AND tool_use_id IN {}",
            placeholders(1, chunk.len(), 2)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(batch.get());
        for id in chunk {
            q = q.bind(*id);
        }
        for row in q.fetch_all(&mut *conn).await? {
            known.insert(
                row.try_get::<String, _>(0)?,
                row.try_get::<Option<i64>, _>(1)?.is_some(),
            );
        }
    }
    Ok(known)
}

async fn append_step(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    messages: &[NewMessage],
    fence: Option<&RunClaim>,
) -> Result<StepReceipt> {
    if messages.is_empty() {
        return Err(BatchError::EmptyStep.into());
    }
    let contents = messages
        .iter()
        .map(|m| encode_content(ctx.max_content_bytes, m))
        .collect::<Result<Vec<_>>>()?;
    let (max, agent_num) = lock_agent_position(conn, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Open {
        return Err(BatchError::NotOpen {
            batch,
            state: info.state,
        }
        .into());
    }
    runs::check_batch_owner(&info, fence)?;
    let mentioned: Vec<&str> = messages
        .iter()
        .flat_map(|m| m.tool_use_ids().chain(m.tool_result_ids()))
        .collect();
    let known = if mentioned.is_empty() {
        Default::default()
    } else {
        known_calls(conn, batch, &mentioned).await?
    };
    check_step_pairing(batch, &known, messages)?;
    let batch_type = if info.continuations > 0 {
        BatchType::Continuation
    } else {
        info.batch_type
    };
    let positions = positions_after(ctx, max, messages.len())?;
    let first_seq = info.message_count;
    let now = now_ms();
    let rows: Vec<MessageRow<'_>> = messages
        .iter()
        .zip(&contents)
        .zip(&positions)
        .enumerate()
        .map(|(i, ((m, content), position))| MessageRow {
            id: MessageId::new(),
            agent,
            agent_num,
            position: *position,
            batch,
            seq: first_seq + i as i64,
            batch_type,
            role: m.role,
            content,
            json_len: content.len(),
            text: sqlite_text(&m.content),
            blocks: &m.content,
            created_at: now,
            compressed: None,
        })
        .collect();
    insert_messages(conn, ctx, &rows).await?;
    let mut calls: Vec<CallRow> = Vec::new();
    let mut results: Vec<(&str, SnowflakeId)> = Vec::new();
    for (m, position) in messages.iter().zip(&positions) {
        for (ordinal, id) in m.tool_use_ids().enumerate() {
            calls.push((batch, id.to_owned(), *position, ordinal as i64, None));
        }
        results.extend(m.tool_result_ids().map(|id| (id, *position)));
    }
    insert_calls(conn, &calls).await?;
    for (id, position) in results {
        match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::tool_calls::set_result_position(
                    c,
                    batch.get(),
                    id,
                    position.get(),
                )
                .await?;
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::tool_calls::set_result_position(
                    c,
                    batch.get(),
                    id,
                    position.get(),
                )
                .await?;
            }
        }
    }
    let appended = messages.len() as i64;
    let lease = info
        .claim_token
        .is_none()
        .then(|| now + lease_ms(ctx.batch_lease));
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::advance_sequence(c, batch.get(), appended, lease).await?;
        }
        Conn::Postgres(c) => {
            let lease = lease.map(crate::sql::instant).transpose()?;
            pattern_db_postgres::batches::advance_sequence(c, batch.get(), appended, lease).await?;
        }
    }
    Ok(StepReceipt {
        batch_id: batch,
        stored: rows.iter().map(|r| (r.id, r.position, r.seq)).collect(),
    })
}

/// Call ids of the batch still waiting for a result, in call order.
pub(crate) async fn pending_calls(conn: &mut Conn<'_>, batch: BatchId) -> Result<Vec<String>> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::tool_calls::pending(c, batch.get()).await?,
        Conn::Postgres(c) => pattern_db_postgres::tool_calls::pending(c, batch.get()).await?,
    })
}

pub(crate) async fn complete_batch(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    fence: Option<&RunClaim>,
) -> Result<BatchInfo> {
    lock_agent(conn, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Complete {
        runs::check_batch_owner(&info, fence)?;
    }
    match info.state {
        BatchState::Complete => return Ok(info),
        BatchState::Abandoned => {
            return Err(BatchError::InvalidState {
                batch,
                state: info.state,
                action: "completing it",
            }
            .into());
        }
        BatchState::Open => {}
    }
    let pending = pending_calls(conn, batch).await?;
    if !pending.is_empty() {
        return Err(BatchError::PendingToolCalls { batch, pending }.into());
    }
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::mark_complete(c, batch.get(), now).await?;
        }
        Conn::Postgres(c) => {
            let now = crate::sql::instant(now)?;
            pattern_db_postgres::batches::mark_complete(c, batch.get(), now).await?;
        }
    }
    // Only a queue entry's agent_to_agent batch can have delivered a session message.
    if info.batch_type == BatchType::AgentToAgent {
        protocol::complete_delivery(conn, ctx, agent, batch).await?;
    }
    approvals::end_batch(
        conn,
        ctx,
        batch,
        "abandoned",
        "the run ended before an answer",
    )
    .await?;
    // The row as `mark_complete` left it (nothing since writes this batch's row): the row read
    // above, complete now, without owner or lease. No second read, one round trip less.
    Ok(BatchInfo {
        state: BatchState::Complete,
        completed_at: Some(from_ms(now)),
        run_owner: None,
        lease_expires_at: None,
        ..info
    })
}

async fn continue_batch(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    fence: Option<&RunClaim>,
) -> Result<BatchInfo> {
    lock_agent(conn, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    runs::check_batch_owner(&info, fence)?;
    if info.state == BatchState::Abandoned {
        return Err(BatchError::InvalidState {
            batch,
            state: info.state,
            action: "continuing it",
        }
        .into());
    }
    if info.archived {
        return Err(BatchError::InvalidState {
            batch,
            state: info.state,
            action: "continuing an archived batch",
        }
        .into());
    }
    let lease = info
        .claim_token
        .is_none()
        .then(|| now_ms() + lease_ms(ctx.batch_lease));
    let reopened = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::reopen(c, batch.get(), &ctx.run_owner, lease).await
        }
        Conn::Postgres(c) => {
            let lease = lease.map(crate::sql::instant).transpose()?;
            pattern_db_postgres::batches::reopen(c, batch.get(), &ctx.run_owner, lease).await
        }
    };
    match reopened {
        // `batches_one_run`: a newer batch of the run is open; an old one is not reopened.
        Err(e) if is_unique_violation(&e) => {
            return Err(BatchError::InvalidState {
                batch,
                state: info.state,
                action: "continuing it while another batch of the agent is open",
            }
            .into());
        }
        other => other?,
    };
    load_batch(conn, agent, batch).await
}

async fn renew_lease(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    fence: Option<&RunClaim>,
) -> Result<BatchInfo> {
    lock_agent(conn, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Open {
        return Err(BatchError::NotOpen {
            batch,
            state: info.state,
        }
        .into());
    }
    runs::check_batch_owner(&info, fence)?;
    if info.claim_token.is_some() {
        // A run's batch lives as long as its claim: nothing to renew.
        return Ok(info);
    }
    let lease = now_ms() + lease_ms(ctx.batch_lease);
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::renew_lease(c, batch.get(), lease, &ctx.run_owner).await?;
        }
        Conn::Postgres(c) => {
            let lease = crate::sql::instant(lease)?;
            pattern_db_postgres::batches::renew_lease(c, batch.get(), lease, &ctx.run_owner)
                .await?;
        }
    }
    load_batch(conn, agent, batch).await
}

/// Turns one open batch of `agent` into `abandoned` (its run gave up: the model failed, the
/// caller cancelled), logs why, and returns it with its trigger for retry.
pub(crate) async fn abandon_batch(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    reason: &str,
    fence: Option<&RunClaim>,
) -> Result<Abandoned> {
    lock_agent(conn, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Open {
        return Err(BatchError::InvalidState {
            batch,
            state: info.state,
            action: "abandoning",
        }
        .into());
    }
    runs::check_batch_owner(&info, fence)?;
    mark_abandoned(conn, batch, now_ms()).await?;
    approvals::end_batch(
        conn,
        ctx,
        batch,
        "abandoned",
        &format!("the run ended before an answer: {reason}"),
    )
    .await?;
    let info = load_batch(conn, agent, batch).await?;
    let trigger = batch_trigger(conn, batch).await?;
    let payload = serde_json::json!({ "batch_id": batch.get(), "reason": reason });
    log_activity(conn, ctx, agent, "batch_abandoned", &payload).await?;
    Ok(Abandoned {
        batch: info,
        trigger,
    })
}

/// Marks `batch` abandoned at `now` (the caller has judged it).
pub(crate) async fn mark_abandoned(conn: &mut Conn<'_>, batch: BatchId, now: i64) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::mark_abandoned(c, batch.get(), now).await?;
        }
        Conn::Postgres(c) => {
            let now = crate::sql::instant(now)?;
            pattern_db_postgres::batches::mark_abandoned(c, batch.get(), now).await?;
        }
    }
    Ok(())
}

/// Marks whole batches of `agent` archived (and their messages), then moves the agent's
/// `live_from` past them (migration 0027); returns the number of messages archived. The caller
/// holds the agent's lock.
async fn archive_batches(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batches: &[i64],
) -> Result<u64> {
    search::batches_archived(conn, ctx, batches).await?;
    let mut archived = 0;
    for chunk in batches.chunks(500) {
        pack_archived(conn, ctx, chunk).await?;
        // The ids are the statement's only parameters ([`value_rows`]: anonymous on SQLite).
        let list = value_rows(conn, 1, chunk.len());
        for table in ["batches", "messages"] {
            let column = if table == "batches" { "id" } else { "batch_id" };
            let sql = format!("UPDATE {table} SET archived = TRUE WHERE {column} IN {list}");
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                q = q.bind(*id);
            }
            let done = q.execute(&mut *conn).await?;
            if table == "messages" {
                archived += done.rows_affected();
            }
        }
    }
    if !batches.is_empty() {
        match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::batches::advance_live_from(c, &agent.to_string()).await?;
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::batches::advance_live_from(c, agent.0).await?;
            }
        }
    }
    Ok(archived)
}

/// The most messages one statement moves (three arguments each).
const PACK_CHUNK: usize = 250;

/// SQLite: moves these batches' messages (being archived) to the end of the `messages` table, their
/// stored text compressed where that pays (`DbConfig::compress_archived_from`,
/// [`pattern_db_sqlite::messages::content_to_store`]), in the archiving transaction. Rewriting a
/// row in place would leave the bytes it saved as free space inside its page, which the table
/// (appended in rowid order) never fills again: each row gets a new rowid past the largest instead,
/// so the archived rows are packed together and the pages they leave are emptied onto the free
/// list, which later writes take first. Nothing refers to a message's rowid (its id is its key);
/// the text read back is the same, so no cache, index or embedding changes. Compressing runs on
/// tokio's blocking pool, not on the writer's task, and never fails the archive: when it cannot
/// run, the rows stay as they were. A run of [`PACK_CHUNK`] rows none of which shrinks (an
/// imported history stored compressed already, `DbConfig::compress_imported_from`; short
/// messages) stays where it is. PostgreSQL: nothing (it compresses large values itself and
/// reuses a page's free space).
async fn pack_archived(conn: &mut Conn<'_>, ctx: &Ctx, batches: &[i64]) -> Result<()> {
    let Some(from) = ctx.compress_archived_from else {
        return Ok(());
    };
    if ctx.backend != Backend::Sqlite || batches.is_empty() {
        return Ok(());
    }
    let list = batches
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let rows = crate::sql::query(
        "SELECT id, CASE WHEN typeof(content) = 'text' AND length(CAST(content AS BLOB)) >= $2 \
         THEN content END FROM messages \
         WHERE batch_id IN (SELECT value FROM json_each($1)) ORDER BY agent, position",
    )
    .bind(format!("[{list}]"))
    .bind(i64::try_from(from).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut texts = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(row.try_get::<Vec<u8>, _>(0)?);
        texts.push(row.try_get::<Option<String>, _>(1)?);
    }
    drop(rows);
    if ids.is_empty() {
        return Ok(());
    }
    let count = ids.len();
    let compressed = compress_texts(texts, from)
        .await
        .unwrap_or_else(|| vec![None; count]);
    let last = crate::sql::query("SELECT COALESCE(MAX(rowid), 0) FROM messages")
        .fetch_all(&mut *conn)
        .await?;
    let mut next = match last.first() {
        Some(row) => row.try_get::<i64, _>(0)?,
        None => 0,
    };
    let mut rest = ids.into_iter().zip(compressed).peekable();
    while rest.peek().is_some() {
        let chunk: Vec<_> = rest.by_ref().take(PACK_CHUNK).collect();
        // Rows none of which shrinks now (stored compressed when imported, or too short) are
        // left where they are: moving them would free nothing, and their pages lose no row.
        if chunk.iter().all(|(_, bytes)| bytes.is_none()) {
            continue;
        }
        let sql = format!(
            "UPDATE messages SET rowid = v.column2, content = COALESCE(v.column3, messages.content) \
             FROM (VALUES {}) AS v WHERE messages.id = v.column1",
            value_rows(conn, chunk.len(), 3)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for (id, bytes) in chunk {
            next += 1;
            q = q.bind(id).bind(next).bind(bytes);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn archive_before(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    position: SnowflakeId,
) -> Result<u64> {
    lock_agent(conn, agent).await?;
    // Whole batches only: a batch that has any message at or after `position` stays, and so does
    // an open one.
    let ids = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::batches::archivable_before(c, &agent.to_string(), position.get())
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::batches::archivable_before(c, agent.0, position.get()).await?
        }
    };
    archive_batches(conn, ctx, agent, &ids).await
}

/// Archives the given whole batches of `agent`; refuses (changing nothing) if any is unknown,
/// another agent's, or open.
async fn archive_chosen(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batches: &[BatchId],
) -> Result<u64> {
    lock_agent(conn, agent).await?;
    let mut ids = Vec::with_capacity(batches.len());
    for &batch in batches {
        let info = load_batch(conn, agent, batch).await?;
        if info.state == BatchState::Open {
            return Err(BatchError::InvalidState {
                batch,
                state: info.state,
                action: "archiving an open batch",
            }
            .into());
        }
        if !info.archived {
            ids.push(batch.get());
        }
    }
    archive_batches(conn, ctx, agent, &ids).await
}

async fn summarize_and_archive(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    summary: &Summary,
) -> Result<Vec<BatchId>> {
    lock_agent(conn, summary.agent_id).await?;
    if summary.from_batch > summary.through_batch {
        return Err(BatchError::InvalidContent(
            "summary covers an empty range (from_batch > through_batch)".into(),
        )
        .into());
    }
    let (from, through) = (summary.from_batch.get(), summary.through_batch.get());
    let rows = match conn {
        Conn::Sqlite(c) => {
            let agent = summary.agent_id.to_string();
            pattern_db_sqlite::batches::unarchived_in_range(c, &agent, from, through).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::batches::unarchived_in_range(c, summary.agent_id.0, from, through)
                .await?
        }
    };
    // Open batches in the range stay live: a run may still be writing them (or recovery will
    // abandon them); the summary covers the closed ones.
    let ids: Vec<i64> = rows
        .into_iter()
        .filter(|(_, state)| state != "open")
        .map(|(id, _)| id)
        .collect();
    upsert_summary(conn, ctx, summary).await?;
    archive_batches(conn, ctx, summary.agent_id, &ids).await?;
    Ok(ids.into_iter().map(SnowflakeId).collect())
}

async fn upsert_summary(conn: &mut Conn<'_>, ctx: &Ctx, s: &Summary) -> Result<()> {
    lock_agent(conn, s.agent_id).await?;
    if s.from_batch > s.through_batch {
        return Err(BatchError::InvalidContent(
            "summary covers an empty range (from_batch > through_batch)".into(),
        )
        .into());
    }
    if s.content.len() > ctx.max_content_bytes {
        return Err(BatchError::ContentTooLarge {
            size: s.content.len(),
            limit: ctx.max_content_bytes,
        }
        .into());
    }
    let created_at = s.created_at.timestamp_millis();
    match conn {
        Conn::Sqlite(c) => {
            let agent = s.agent_id.to_string();
            let row = pattern_db_sqlite::summaries::NewSummary {
                id: s.id.get(),
                agent_id: &agent,
                content: &s.content,
                from_batch: s.from_batch.get(),
                through_batch: s.through_batch.get(),
                message_count: s.message_count,
                depth: s.depth,
                created_at,
            };
            pattern_db_sqlite::summaries::upsert(c, &row).await?
        }
        Conn::Postgres(c) => {
            let row = pattern_db_postgres::summaries::NewSummary {
                id: s.id.get(),
                agent_id: s.agent_id.0,
                content: &s.content,
                from_batch: s.from_batch.get(),
                through_batch: s.through_batch.get(),
                message_count: s.message_count,
                depth: s.depth,
                created_at: crate::sql::instant(created_at)?,
            };
            pattern_db_postgres::summaries::upsert(c, &row).await?
        }
    };
    Ok(())
}

pub(crate) async fn log_activity(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    kind: &str,
    payload: &serde_json::Value,
) -> Result<SnowflakeId> {
    if kind.is_empty() || kind.len() > 100 {
        return Err(
            BatchError::InvalidContent("activity kind must be 1 to 100 bytes".into()).into(),
        );
    }
    let payload =
        serde_json::to_string(payload).map_err(|e| BatchError::InvalidContent(e.to_string()))?;
    if payload.len() > ctx.max_content_bytes {
        return Err(BatchError::ContentTooLarge {
            size: payload.len(),
            limit: ctx.max_content_bytes,
        }
        .into());
    }
    let id = ctx.ids.next_id()?;
    let now = now_ms();
    let inserted = match conn {
        Conn::Sqlite(c) => {
            let agent = agent.to_string();
            pattern_db_sqlite::activity::insert(c, id.get(), &agent, kind, &payload, now).await
        }
        Conn::Postgres(c) => {
            let now = crate::sql::instant(now)?;
            pattern_db_postgres::activity::insert(c, id.get(), agent.0, kind, &payload, now).await
        }
    };
    match inserted {
        Ok(_) => Ok(id),
        Err(e)
            if e.as_database_error()
                .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::ForeignKeyViolation) =>
        {
            Err(AgentError::NotFound(agent).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes a planned agent import (see `crate::import`): every part through the same functions
/// as the single writes, inside the one transaction.
async fn import_agent(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    planned: &crate::import::PlannedImport,
) -> Result<crate::import::ImportedAgent> {
    let import = &planned.import;
    let agent = create_agent(conn, &import.agent).await?;
    for b in &import.blocks {
        let Some((first, rest)) = b.versions.split_first() else {
            continue;
        };
        // The same writes as single ones, composed inside this transaction.
        blocks::CreateBlock {
            owner: agent.id,
            new: crate::blocks::NewBlock {
                label: b.label.clone(),
                description: first.description.clone(),
                value: first.value.clone(),
                char_limit: b.char_limit,
                block_type: b.block_type.clone(),
            },
        }
        .apply(conn, ctx, None)
        .await?;
        for (i, v) in rest.iter().enumerate() {
            blocks::SetValue {
                agent: agent.id,
                owner: agent.id,
                label: b.label.clone(),
                expected: i64::try_from(i).unwrap_or(i64::MAX - 1) + 1,
                value: Some(v.value.clone()),
                change: v.change.clone(),
                allowed: vec!["admin".to_owned()],
            }
            .apply(conn, ctx, None)
            .await?;
        }
    }
    let batches = if planned.messages.is_empty() {
        Vec::new()
    } else {
        let ids: Vec<MessageId> = planned.messages.iter().map(|_| MessageId::new()).collect();
        let legacy = Legacy {
            agent: agent.id,
            messages: &planned.messages,
            plan: &planned.plan,
            ids: &ids,
            prepared: &planned.prepared,
            now: now_ms(),
        };
        import_legacy(conn, ctx, &legacy).await?.0
    };
    if batches.len() != import.batches.len() {
        return Err(AgentError::InvalidImport(format!(
            "{} batches stored, {} given",
            batches.len(),
            import.batches.len()
        ))
        .into());
    }
    let archived: Vec<BatchId> = import
        .batches
        .iter()
        .zip(&batches)
        .filter(|(b, _)| b.archived)
        .map(|(_, id)| *id)
        .collect();
    if !archived.is_empty() {
        archive_chosen(conn, ctx, agent.id, &archived).await?;
    }
    for (b, id) in import.batches.iter().zip(&batches) {
        let Some(retried_at) = b.retried_at else {
            continue;
        };
        if b.state != BatchState::Abandoned {
            return Err(AgentError::InvalidImport(format!(
                "batch {id} is {} but carries a retry time: only an abandoned batch is retried",
                b.state.as_str()
            ))
            .into());
        }
        let at = retried_at.timestamp_millis();
        match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::batches::set_retried_at(c, id.get(), at).await?,
            Conn::Postgres(c) => {
                let at = crate::sql::instant(at)?;
                pattern_db_postgres::batches::set_retried_at(c, id.get(), at).await?
            }
        };
    }
    for (s, id) in import.summaries.iter().zip(&planned.summary_ids) {
        upsert_summary(
            conn,
            ctx,
            &Summary {
                id: *id,
                agent_id: agent.id,
                content: s.content.clone(),
                from_batch: batches[s.from_batch],
                through_batch: batches[s.through_batch],
                message_count: s.message_count,
                depth: s.depth,
                created_at: s.created_at,
            },
        )
        .await?;
    }
    let passages: Vec<crate::archival::NewArchival> =
        import.archival.iter().map(|p| p.passage.clone()).collect();
    let stored = search::insert_archival(conn, ctx, agent.id, &passages).await?;
    for (entry, given) in stored.iter().zip(&import.archival) {
        let at = given.created_at.timestamp_millis();
        match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::archival::set_created_at(c, &entry.id.to_string(), at).await?
            }
            Conn::Postgres(c) => {
                let at = crate::sql::instant(at)?;
                pattern_db_postgres::archival::set_created_at(c, entry.id.0, at).await?
            }
        };
    }
    Ok(crate::import::ImportedAgent {
        agent,
        batches,
        archival: stored.len(),
    })
}

/// A batch-less history to store as batches (see [`import_legacy`]).
pub(crate) struct Legacy<'a> {
    pub(crate) agent: AgentId,
    pub(crate) messages: &'a [LegacyMessage],
    pub(crate) plan: &'a ImportPlan,
    /// One id per message.
    pub(crate) ids: &'a [MessageId],
    /// The messages encoded (and compressed) ahead of the transaction ([`prepare_legacy`]).
    pub(crate) prepared: &'a PreparedLegacy,
    /// The time of messages that carry none (ms).
    pub(crate) now: i64,
}

/// An import's messages made ready to store before its transaction begins
/// ([`prepare_legacy`]), so the writer, which every other write waits for, spends its time on
/// the statements alone.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreparedLegacy {
    /// Each message's content (its shape and size checked).
    contents: Vec<PreparedContent>,
    /// SQLite: by message index, the stored text of each message of the old history (every
    /// batch but the newest [`crate::config::IMPORT_PLAIN_BATCHES`]) compressed, where that pays
    /// (`DbConfig::compress_imported_from`; [`pattern_db_sqlite::messages::content_to_store`]);
    /// `None` for the rest, stored as any message is. Empty when nothing is compressed, and on
    /// PostgreSQL (it compresses large values itself).
    compressed: Vec<Option<Vec<u8>>>,
}

/// One message of an import, made ready to store ([`prepare_legacy`]).
#[derive(Debug, Clone, PartialEq)]
enum PreparedContent {
    /// Its content's JSON.
    Json(String),
    /// SQLite, a message of one text block: stored as its text ([`sqlite_text`]), so its JSON
    /// is never written; only its length counts (the size limit, the token estimate).
    Text {
        /// The length its JSON has ([`text_json_len`]).
        json_len: usize,
    },
}

impl PreparedContent {
    /// `message` checked (`ContentTooLarge` past `limit` bytes of JSON, its shape) and, unless
    /// `sqlite` stores it as its text, encoded.
    fn of(message: &LegacyMessage, sqlite: bool, limit: usize) -> Result<Self> {
        match sqlite.then(|| sqlite_text(&message.content)).flatten() {
            // One text block passes every shape check; its size is its JSON's.
            Some(text) => match text_json_len(text) {
                size if size > limit => Err(BatchError::ContentTooLarge { size, limit }.into()),
                json_len => Ok(Self::Text { json_len }),
            },
            None => encode_content(
                limit,
                &NewMessage::new(message.role, message.content.clone()),
            )
            .map(Self::Json),
        }
    }

    /// The JSON, empty for [`PreparedContent::Text`] (stored as its text).
    fn json(&self) -> &str {
        match self {
            PreparedContent::Json(json) => json,
            PreparedContent::Text { .. } => "",
        }
    }

    fn json_len(&self) -> usize {
        match self {
            PreparedContent::Json(json) => json.len(),
            PreparedContent::Text { json_len } => *json_len,
        }
    }
}

/// The length of the JSON serde_json writes for a content of one text block `text`
/// (`[{"type":"text","text":"…"}]`), without writing it: `"` and `\` and the control
/// characters are escaped (`\n`-style where JSON has a short form, `\u00XX` for the rest).
fn text_json_len(text: &str) -> usize {
    const WRAPPER: usize = r#"[{"type":"text","text":""}]"#.len();
    let escaped = |b: &u8| *b < 0x20 || *b == b'"' || *b == b'\\';
    // Prose has nothing to escape: one counting pass (which compilers vectorize; an early
    // exit would not be), then the rest only if needed.
    if text.as_bytes().iter().filter(|b| escaped(b)).count() == 0 {
        return WRAPPER + text.len();
    }
    let escapes: usize = text
        .bytes()
        .filter(escaped)
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            _ => 5,
        })
        .sum();
    WRAPPER + text.len() + escapes
}

/// Encodes and checks every message of an import (`ContentTooLarge`, shapes) and, on SQLite,
/// compresses its old history (see [`PreparedLegacy`]), on tokio's blocking pool: neither an
/// async worker nor the writer spends the time (about 5 µs a message).
pub(crate) async fn prepare_legacy(
    ctx: &Ctx,
    messages: Arc<Vec<LegacyMessage>>,
    plan: &ImportPlan,
) -> Result<PreparedLegacy> {
    let from = match (ctx.compress_from, ctx.compress_imported_from) {
        _ if ctx.backend != Backend::Sqlite => None,
        (Some(any), Some(imported)) => Some(any.min(imported)),
        (None, Some(imported)) => Some(imported),
        (_, None) => None,
    };
    let stored: Vec<&[usize]> = plan
        .batches
        .iter()
        .map(|b| b.messages.as_slice())
        .filter(|m| !m.is_empty())
        .collect();
    let old = stored
        .len()
        .saturating_sub(crate::config::IMPORT_PLAIN_BATCHES);
    let old: Vec<usize> = match from {
        Some(_) => stored[..old]
            .iter()
            .flat_map(|m| m.iter().copied())
            .collect(),
        None => Vec::new(),
    };
    let limit = ctx.max_content_bytes;
    let sqlite = ctx.backend == Backend::Sqlite;
    let prepared = tokio::task::spawn_blocking(move || -> Result<PreparedLegacy> {
        let contents = messages
            .iter()
            .map(|m| PreparedContent::of(m, sqlite, limit))
            .collect::<Result<Vec<_>>>()?;
        let mut compressed = Vec::new();
        if let (Some(from), false) = (from, old.is_empty()) {
            compressed.resize(messages.len(), None);
            for i in old {
                let text = sqlite_text(&messages[i].content).unwrap_or(contents[i].json());
                compressed[i] = compressed_text(text, from);
            }
        }
        Ok(PreparedLegacy {
            contents,
            compressed,
        })
    })
    .await;
    match prepared {
        Ok(prepared) => prepared,
        // As if it had run here: a panic goes on, a runtime shutting down closed the database.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(StorageError::Closed.into()),
    }
}

/// SQLite: `text` compressed when that pays ([`pattern_db_sqlite::messages::content_to_store`]
/// from `from` bytes); `None` when it is stored as it is. CPU work: on a blocking thread.
fn compressed_text(text: &str, from: usize) -> Option<Vec<u8>> {
    use pattern_db_sqlite::messages::{ContentToStore, content_to_store};
    match content_to_store(text, from) {
        ContentToStore::Compressed(bytes) => Some(bytes),
        ContentToStore::Text(_) => None,
    }
}

/// SQLite: each text compressed where that pays ([`pattern_db_sqlite::messages::content_to_store`]
/// from `from` bytes), `None` for the rest and for `None`; on tokio's blocking pool, not on the
/// writer's task. `None` (logged) when the pool cannot run it: callers store the texts as they
/// are, so compression never fails a write.
async fn compress_texts(texts: Vec<Option<String>>, from: usize) -> Option<Vec<Option<Vec<u8>>>> {
    let done = tokio::task::spawn_blocking(move || {
        texts
            .iter()
            .map(|text| text.as_deref().and_then(|t| compressed_text(t, from)))
            .collect()
    })
    .await;
    match done {
        Ok(done) => Some(done),
        Err(e) => {
            tracing::warn!(error = %e, "messages stored uncompressed: compressing failed");
            None
        }
    }
}

/// Stores a planned legacy history; returns its batches and, on SQLite, the first and last
/// search change it logged.
pub(crate) async fn import_legacy(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    import: &Legacy<'_>,
) -> Result<(Vec<BatchId>, Option<(i64, i64)>)> {
    let (agent, messages, plan, now) = (import.agent, import.messages, import.plan, import.now);
    if import.ids.len() != messages.len() {
        return Err(Error::Storage(StorageError::Corrupt(format!(
            "an import of {} messages was given {} ids",
            messages.len(),
            import.ids.len()
        ))));
    }
    let (contents, compressed) = (&import.prepared.contents, &import.prepared.compressed);
    if contents.len() != messages.len()
        || !(compressed.is_empty() || compressed.len() == messages.len())
    {
        return Err(Error::Storage(StorageError::Corrupt(format!(
            "an import of {} messages was prepared as {}",
            messages.len(),
            contents.len()
        ))));
    }
    let (max, agent_num) = lock_agent_position(conn, agent).await?;
    // Positions follow the input order, so the history reads as it was written.
    let positions = positions_after(ctx, max, messages.len())?;
    let at = |index: usize| {
        messages[index]
            .created_at
            .map_or(now, |t| t.timestamp_millis())
    };
    let mut batch_rows = Vec::with_capacity(plan.batches.len());
    let mut rows = Vec::with_capacity(messages.len());
    let mut calls: Vec<CallRow> = Vec::new();
    for planned in &plan.batches {
        let (Some(&first), Some(&last)) = (planned.messages.first(), planned.messages.last())
        else {
            continue;
        };
        let batch = positions[first];
        batch_rows.push(BatchRow {
            id: batch,
            agent,
            batch_type: planned.batch_type,
            state: planned.state,
            parent: None,
            owner: None,
            lease_expires_at: None,
            next_sequence: planned.messages.len() as i64,
            started_at: at(first),
            completed_at: (planned.state != BatchState::Open).then(|| at(last)),
            retried_at: None,
            claim_token: None,
        });
        let mut open_calls: std::collections::HashMap<&str, usize> =
            std::collections::HashMap::new();
        let first_call = calls.len();
        for (seq, &index) in planned.messages.iter().enumerate() {
            let message = &messages[index];
            rows.push(MessageRow {
                id: import.ids[index],
                agent,
                agent_num,
                position: positions[index],
                batch,
                seq: seq as i64,
                batch_type: planned.batch_type,
                role: message.role,
                content: contents[index].json(),
                json_len: contents[index].json_len(),
                text: sqlite_text(&message.content),
                blocks: &message.content,
                created_at: at(index),
                compressed: compressed.get(index).and_then(|c| c.as_deref()),
            });
            for block in &message.content {
                match block {
                    ContentBlock::ToolUse { id, .. } if !open_calls.contains_key(id.as_str()) => {
                        let ordinal = (calls.len() - first_call) as i64;
                        open_calls.insert(id, calls.len());
                        calls.push((batch, id.clone(), positions[index], ordinal, None));
                    }
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        if let Some(&k) = open_calls.get(tool_use_id.as_str()) {
                            calls[k].4.get_or_insert(positions[index]);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // On SQLite the log's numbers are handed out in commit order and this transaction holds the
    // write lock, so the changes it logs are exactly those after the head read here.
    let head = match ctx.backend {
        Backend::Sqlite => Some(search::changes_head(conn).await?),
        Backend::Postgres => None,
    };
    let mut script = crate::sql::Script::new();
    batch_inserts(conn, &batch_rows, &mut script)?;
    message_inserts(conn, ctx, &rows, &mut script)?;
    script.execute(conn).await?;
    insert_calls(conn, &calls).await?;
    let logged = match head {
        Some(before) => {
            let after = search::changes_head(conn).await?;
            (after > before).then_some((before + 1, after))
        }
        None => None,
    };
    Ok((batch_rows.iter().map(|b| b.id).collect(), logged))
}

// ---------------------------------------------------------------------------------------------
// row decoding, shared with reads

/// A message's columns on PostgreSQL, for a statement that joins its batch as `b` (SQLite reads
/// batches with their messages as one JSON document: `batches_from_json`).
const MESSAGE_COLUMNS: &str = "m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, \
    m.content, m.token_estimate, m.archived, m.deleted, m.created_at";

/// A message's stored content: its JSON (an array of blocks), or on SQLite the text of a message
/// of one text block ([`sqlite_text`]), which never starts with `[`.
pub(crate) fn decode_content(text: &str) -> Result<Vec<ContentBlock>> {
    if !text.starts_with('[') {
        return Ok(vec![ContentBlock::Text {
            text: text.to_owned(),
        }]);
    }
    serde_json::from_str(text).map_err(|e| {
        Error::Storage(StorageError::Corrupt(format!(
            "message content does not decode: {e}"
        )))
    })
}

pub(crate) fn parse_uuid(text: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(text).map_err(|e| {
        Error::Storage(StorageError::Corrupt(format!(
            "stored id `{text}` is not a UUID: {e}"
        )))
    })
}

/// Reads a flag column: BOOLEAN on PostgreSQL, INTEGER 0/1 on SQLite.
fn flag(row: &Row, index: usize) -> Result<bool> {
    Ok(row.try_get::<bool, _>(index)?)
}

/// The plain row of a message whose [`MESSAGE_COLUMNS`] start at column `at` (after a batch's,
/// in a join).
pub(crate) fn message_row_at(row: &Row, at: usize) -> Result<pattern_db_sqlite::MessageRow> {
    Ok(pattern_db_sqlite::MessageRow {
        id: row.try_get(at)?,
        agent_id: row.try_get(at + 1)?,
        position: row.try_get(at + 2)?,
        batch_id: row.try_get(at + 3)?,
        sequence_num: row.try_get(at + 4)?,
        batch_type: row.try_get(at + 5)?,
        role: row.try_get(at + 6)?,
        content: row.try_get(at + 7)?,
        token_estimate: row.try_get(at + 8)?,
        archived: flag(row, at + 9)?,
        deleted: flag(row, at + 10)?,
        created_at: row.try_get(at + 11)?,
    })
}

/// A message from its stored row (either engine's: [`FromStored`]).
pub(crate) fn message_from_plain(row: impl FromStored<Message>) -> Result<Message> {
    row.into_domain()
}

pub(crate) fn batch_from_row(row: &Row) -> Result<BatchInfo> {
    batch_from_plain(batch_row(row)?)
}

/// The plain row of a batch whose [`BATCH_COLUMNS`] start at column 0.
fn batch_row(row: &Row) -> Result<pattern_db_sqlite::BatchRow> {
    Ok(pattern_db_sqlite::BatchRow {
        id: row.try_get(0)?,
        agent_id: row.try_get(1)?,
        batch_type: row.try_get(2)?,
        state: row.try_get(3)?,
        parent_batch: row.try_get(4)?,
        run_owner: row.try_get(5)?,
        lease_expires_at: row.try_get(6)?,
        next_sequence: row.try_get(7)?,
        archived: flag(row, 8)?,
        started_at: row.try_get(9)?,
        completed_at: row.try_get(10)?,
        continuations: row.try_get(11)?,
        retried_at: row.try_get(12)?,
        claim_token: row.try_get(13)?,
    })
}

/// A batch from its stored row (either engine's: [`FromStored`]).
pub(crate) fn batch_from_plain(row: impl FromStored<BatchInfo>) -> Result<BatchInfo> {
    row.into_domain()
}

pub(crate) fn agent_from_row(row: &Row) -> Result<Agent> {
    let id: String = row.try_get(0)?;
    let metadata: String = row.try_get(2)?;
    let organization: String = row.try_get(4)?;
    Ok(Agent {
        id: AgentId(parse_uuid(&id)?),
        organization: OrganizationId(parse_uuid(&organization)?),
        name: row.try_get(1)?,
        external_id: row.try_get(5)?,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| StorageError::Corrupt(format!("agent metadata does not decode: {e}")))?,
        created_at: from_ms(row.try_get(3)?),
    })
}

/// An agent from its stored row (either engine's: [`FromStored`]).
pub(crate) fn agent_from_plain(row: impl FromStored<Agent>) -> Result<Agent> {
    row.into_domain()
}

/// An activity event from its stored row (either engine's: [`FromStored`]).
pub(crate) fn activity_from_plain(row: impl FromStored<ActivityEvent>) -> Result<ActivityEvent> {
    row.into_domain()
}

/// A summary from its stored row (either engine's: [`FromStored`]).
pub(crate) fn summary_from_plain(row: impl FromStored<Summary>) -> Result<Summary> {
    row.into_domain()
}

/// A plain row of either engine's checked statements (`pattern_db_sqlite`'s or
/// `pattern_db_postgres`'s: the same fields, in each engine's id and time types) as the domain's
/// type `T`. Implemented once, by [`from_stored!`], for both engines' rows.
pub(crate) trait FromStored<T> {
    /// The domain's value; an id that is not a UUID or an unknown kind is a corrupt row.
    fn into_domain(self) -> Result<T>;
}

/// An id as an engine's row holds it: SQLite the UUID's text, PostgreSQL a `UUID`. Public
/// through [`crate::storage`] for the storage modules above this crate (`pattern_protocol`).
pub trait StoredId {
    /// The id as a UUID; text that is not one is a corrupt row.
    fn uuid(self) -> Result<uuid::Uuid>;
}

impl StoredId for String {
    fn uuid(self) -> Result<uuid::Uuid> {
        parse_uuid(&self)
    }
}

impl StoredId for uuid::Uuid {
    fn uuid(self) -> Result<uuid::Uuid> {
        Ok(self)
    }
}

/// An instant as an engine's row holds it: SQLite Unix milliseconds, PostgreSQL a `TIMESTAMPTZ`.
/// Public through [`crate::storage`], as [`StoredId`].
pub trait StoredTime {
    /// The instant.
    fn time(self) -> DateTime<Utc>;
}

impl StoredTime for i64 {
    fn time(self) -> DateTime<Utc> {
        from_ms(self)
    }
}

impl StoredTime for DateTime<Utc> {
    fn time(self) -> DateTime<Utc> {
        self
    }
}

/// [`FromStored`] for the message, batch, agent, activity and summary rows of one engine's
/// crate of checked statements: one conversion, written once, for both engines.
macro_rules! from_stored {
    ($engine:ident) => {
        impl FromStored<Message> for $engine::MessageRow {
            fn into_domain(self) -> Result<Message> {
                let role = self.role;
                Ok(Message {
                    id: MessageId(self.id.uuid()?),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    position: SnowflakeId(self.position),
                    batch_id: SnowflakeId(self.batch_id),
                    sequence_num: self.sequence_num,
                    batch_type: self.batch_type.parse()?,
                    role: role.parse().map_err(|_| {
                        StorageError::Corrupt(format!("unknown stored role `{role}`"))
                    })?,
                    content: decode_content(self.content.as_ref())?,
                    token_estimate: self.token_estimate,
                    archived: self.archived,
                    deleted: self.deleted,
                    created_at: self.created_at.time(),
                })
            }
        }

        impl FromStored<BatchInfo> for $engine::BatchRow {
            fn into_domain(self) -> Result<BatchInfo> {
                Ok(BatchInfo {
                    id: SnowflakeId(self.id),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    batch_type: self.batch_type.parse()?,
                    state: self.state.parse()?,
                    parent_batch: self.parent_batch.map(SnowflakeId),
                    run_owner: self.run_owner,
                    lease_expires_at: self.lease_expires_at.map(StoredTime::time),
                    message_count: self.next_sequence,
                    archived: self.archived,
                    started_at: self.started_at.time(),
                    completed_at: self.completed_at.map(StoredTime::time),
                    continuations: self.continuations,
                    retried_at: self.retried_at.map(StoredTime::time),
                    claim_token: self.claim_token,
                })
            }
        }

        impl FromStored<Agent> for $engine::agents::AgentRow {
            fn into_domain(self) -> Result<Agent> {
                Ok(Agent {
                    id: AgentId(self.id.uuid()?),
                    organization: OrganizationId(self.organization_id.uuid()?),
                    name: self.name,
                    external_id: self.external_id,
                    metadata: serde_json::from_str(&self.metadata).map_err(|e| {
                        StorageError::Corrupt(format!("agent metadata does not decode: {e}"))
                    })?,
                    created_at: self.created_at.time(),
                })
            }
        }

        impl FromStored<ActivityEvent> for $engine::activity::ActivityRow {
            fn into_domain(self) -> Result<ActivityEvent> {
                Ok(ActivityEvent {
                    id: SnowflakeId(self.id),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    kind: self.kind,
                    payload: serde_json::from_str(&self.payload).map_err(|e| {
                        StorageError::Corrupt(format!("activity payload does not decode: {e}"))
                    })?,
                    created_at: self.created_at.time(),
                })
            }
        }

        impl FromStored<Summary> for $engine::SummaryRow {
            fn into_domain(self) -> Result<Summary> {
                Ok(Summary {
                    id: SnowflakeId(self.id),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    content: self.content,
                    from_batch: SnowflakeId(self.from_batch),
                    through_batch: SnowflakeId(self.through_batch),
                    message_count: self.message_count,
                    depth: self.depth,
                    created_at: self.created_at.time(),
                })
            }
        }
    };
}

from_stored!(pattern_db_sqlite);
from_stored!(pattern_db_postgres);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// What SQLite stores for a message (its text or its JSON) reads back as the blocks
        /// written, whatever the texts hold (`[` first, quotes, escapes, nothing).
        #[test]
        fn stored_content_reads_back(texts in proptest::collection::vec("\\PC{0,12}|\\[.{0,5}|", 0..3),
                                     tool in any::<bool>()) {
            let mut blocks: Vec<ContentBlock> = texts.iter().map(|t| ContentBlock::text(t.as_str())).collect();
            if tool {
                blocks.push(ContentBlock::tool_result("c", "done", false));
            }
            let json = serde_json::to_string(&blocks).unwrap();
            let stored = sqlite_text(&blocks).unwrap_or(&json);
            prop_assert_eq!(decode_content(stored).unwrap(), blocks.clone());
            prop_assert_eq!(sqlite_text(&blocks).is_some(),
                blocks.len() == 1 && !tool && !texts[0].starts_with('['));
        }

        /// An import's text messages are measured, not encoded: the length must be the JSON's
        /// to the byte (the size limit and the token estimate count it), whatever the text holds.
        #[test]
        fn text_json_len_is_the_json_length(text in "(\\PC|[\\x00-\\x1f\"\\\\\u{7f}\u{2028}\u{2029}é😀])*") {
            let json = serde_json::to_string(&[ContentBlock::text(text.as_str())]).unwrap();
            prop_assert_eq!(text_json_len(&text), json.len(), "{}", json);
        }
    }

    #[test]
    fn numbered_placeholders() {
        assert_eq!(placeholders(2, 3, 1), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(placeholders(1, 2, 2), "($2, $3)");
    }

    #[test]
    fn chunks_cover_every_row_once_with_few_sizes() {
        for n in 0..300usize {
            let rows: Vec<usize> = (0..n).collect();
            let chunks = fixed_chunks(&rows);
            assert_eq!(chunks.concat(), rows);
            assert!(chunks.iter().all(|c| [64, 16, 4, 1].contains(&c.len())));
            assert!(chunks.len() <= n / 64 + 3 + 3 + 3);
        }
    }
}
