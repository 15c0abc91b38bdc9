//! The SQL of every write, run by the writer inside a transaction, and the row decoders shared
//! with reads.
//!
//! One SQL text serves both backends: sqlx's `Any` driver, `$N` placeholders, portable column
//! types (TEXT ids and JSON, BIGINT times, BOOLEAN flags). Where the dialects differ (row locks),
//! the statement is chosen by [`Backend`]. Every function here runs inside the caller's
//! transaction and must never commit, roll back or open a transaction of its own.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::id::{SnowflakeGenerator, SnowflakeId};
use crate::legacy::{ImportPlan, LegacyMessage};
use crate::model::{
    Abandoned, Agent, AgentId, BatchId, BatchInfo, BatchState, BatchType, BeginBatch, ContentBlock, Message,
    MessageId, NewAgent, NewMessage, Received, RecoveryScope, Role, StepReceipt, Summary,
};

/// What every op needs besides its arguments.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) backend: Backend,
    pub(crate) ids: Arc<SnowflakeGenerator>,
    pub(crate) max_content_bytes: usize,
    pub(crate) run_owner: String,
    pub(crate) batch_lease: Duration,
}

/// A write, as queued to the writer.
#[derive(Debug)]
pub(crate) enum Op {
    CreateAgent(NewAgent),
    DeleteAgent(AgentId),
    BeginBatch { agent: AgentId, trigger: NewMessage, opts: BeginBatch },
    AppendStep { agent: AgentId, batch: BatchId, messages: Vec<NewMessage> },
    CompleteBatch { agent: AgentId, batch: BatchId },
    ContinueBatch { agent: AgentId, batch: BatchId },
    RenewLease { agent: AgentId, batch: BatchId },
    Recover { agent: Option<AgentId>, scope: RecoveryScope },
    ArchiveBefore { agent: AgentId, position: SnowflakeId },
    SummarizeAndArchive { summary: Summary },
    UpsertSummary(Summary),
    LogActivity { agent: AgentId, kind: String, payload: serde_json::Value },
    ImportLegacy { agent: AgentId, messages: Vec<LegacyMessage>, plan: ImportPlan },
}

impl Op {
    /// The agent whose row this op locks, for lock ordering across concurrent groups.
    pub(crate) fn agent_key(&self) -> Option<AgentId> {
        match self {
            Op::CreateAgent(_) | Op::Recover { agent: None, .. } => None,
            Op::DeleteAgent(agent)
            | Op::BeginBatch { agent, .. }
            | Op::AppendStep { agent, .. }
            | Op::CompleteBatch { agent, .. }
            | Op::ContinueBatch { agent, .. }
            | Op::RenewLease { agent, .. }
            | Op::Recover { agent: Some(agent), .. }
            | Op::ArchiveBefore { agent, .. }
            | Op::LogActivity { agent, .. }
            | Op::ImportLegacy { agent, .. } => Some(*agent),
            Op::SummarizeAndArchive { summary } | Op::UpsertSummary(summary) => Some(summary.agent_id),
        }
    }
}

/// A write's outcome.
#[derive(Debug)]
pub(crate) enum Done {
    Agent(Agent),
    Unit,
    Received(Received),
    Step(StepReceipt),
    Batch(BatchInfo),
    Abandoned(Vec<Abandoned>),
    Count(u64),
    Id(SnowflakeId),
    Batches(Vec<BatchId>),
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

/// Runs one op inside the open transaction `conn`.
pub(crate) async fn apply(conn: &mut AnyConnection, ctx: &Ctx, op: &Op) -> Result<Done> {
    match op {
        Op::CreateAgent(new) => create_agent(conn, new).await.map(Done::Agent),
        Op::DeleteAgent(agent) => delete_agent(conn, ctx, *agent).await.map(|()| Done::Unit),
        Op::BeginBatch { agent, trigger, opts } => begin_batch(conn, ctx, *agent, trigger, opts).await.map(Done::Received),
        Op::AppendStep { agent, batch, messages } => append_step(conn, ctx, *agent, *batch, messages).await.map(Done::Step),
        Op::CompleteBatch { agent, batch } => complete_batch(conn, ctx, *agent, *batch).await.map(Done::Batch),
        Op::ContinueBatch { agent, batch } => continue_batch(conn, ctx, *agent, *batch).await.map(Done::Batch),
        Op::RenewLease { agent, batch } => renew_lease(conn, ctx, *agent, *batch).await.map(Done::Batch),
        Op::Recover { agent, scope } => recover(conn, ctx, *agent, *scope).await.map(Done::Abandoned),
        Op::ArchiveBefore { agent, position } => archive_before(conn, ctx, *agent, *position).await.map(Done::Count),
        Op::SummarizeAndArchive { summary } => summarize_and_archive(conn, ctx, summary).await.map(Done::Batches),
        Op::UpsertSummary(summary) => upsert_summary(conn, ctx, summary).await.map(|()| Done::Unit),
        Op::LogActivity { agent, kind, payload } => {
            log_activity(conn, ctx, *agent, kind, payload).await.map(Done::Id)
        }
        Op::ImportLegacy { agent, messages, plan } => {
            import_legacy(conn, ctx, *agent, messages, plan).await.map(Done::Batches)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// agents

fn validate_agent_name(name: &str) -> Result<()> {
    let len = name.chars().count();
    if len == 0 || len > 200 {
        return Err(Error::InvalidContent(format!("agent name must be 1 to 200 characters, got {len}")));
    }
    if name.chars().any(char::is_control) || name.trim() != name {
        return Err(Error::InvalidContent(
            "agent name must not contain control characters or leading/trailing spaces".into(),
        ));
    }
    Ok(())
}

async fn create_agent(conn: &mut AnyConnection, new: &NewAgent) -> Result<Agent> {
    validate_agent_name(&new.name)?;
    let taken = sqlx::query("SELECT id FROM agents WHERE name = $1").bind(&new.name).fetch_optional(&mut *conn).await?;
    if taken.is_some() {
        return Err(Error::AgentNameTaken(new.name.clone()));
    }
    let agent = Agent {
        id: AgentId::new(),
        name: new.name.clone(),
        metadata: new.metadata.clone(),
        created_at: from_ms(now_ms()),
    };
    let metadata = serde_json::to_string(&agent.metadata).map_err(|e| Error::InvalidContent(e.to_string()))?;
    let inserted = sqlx::query("INSERT INTO agents (id, name, metadata, created_at) VALUES ($1, $2, $3, $4)")
        .bind(agent.id.to_string())
        .bind(&agent.name)
        .bind(metadata)
        .bind(agent.created_at.timestamp_millis())
        .execute(&mut *conn)
        .await;
    match inserted {
        Ok(_) => Ok(agent),
        Err(e) if is_unique_violation(&e) => Err(Error::AgentNameTaken(new.name.clone())),
        Err(e) => Err(e.into()),
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

async fn delete_agent(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId) -> Result<()> {
    lock_agent(conn, ctx, agent).await?;
    sqlx::query("DELETE FROM agents WHERE id = $1").bind(agent.to_string()).execute(&mut *conn).await?;
    Ok(())
}

/// Fails with [`Error::AgentNotFound`] unless the agent exists; on PostgreSQL also takes the
/// agent's row lock, which serialises every write of one agent across processes.
async fn lock_agent(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId) -> Result<()> {
    let sql = match ctx.backend {
        Backend::Sqlite => "SELECT id FROM agents WHERE id = $1",
        Backend::Postgres => "SELECT id FROM agents WHERE id = $1 FOR NO KEY UPDATE",
    };
    match sqlx::query(sql).bind(agent.to_string()).fetch_optional(&mut *conn).await? {
        Some(_) => Ok(()),
        None => Err(Error::AgentNotFound(agent)),
    }
}

// ---------------------------------------------------------------------------------------------
// positions and content

/// `count` fresh positions for `agent`, each greater than every stored one (so the history stays
/// in order across restarts, clock steps and other processes).
async fn next_positions(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId, count: usize) -> Result<Vec<SnowflakeId>> {
    let max: Option<i64> =
        sqlx::query("SELECT position FROM messages WHERE agent_id = $1 ORDER BY position DESC LIMIT 1")
            .bind(agent.to_string())
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| r.try_get::<i64, _>(0))
            .transpose()?;
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
    let json = serde_json::to_string(&message.content).map_err(|e| Error::InvalidContent(e.to_string()))?;
    if json.len() > ctx_limit {
        return Err(Error::ContentTooLarge { size: json.len(), limit: ctx_limit });
    }
    Ok(json)
}

struct MessageRow<'a> {
    id: MessageId,
    position: SnowflakeId,
    batch: BatchId,
    seq: i64,
    batch_type: BatchType,
    role: Role,
    content: &'a str,
    created_at: i64,
}

/// `(` `$a, $b, ...` `)` groups for a multi-row VALUES or an IN list. sqlx's `QueryBuilder`
/// writes `?` placeholders for the `Any` driver, which PostgreSQL rejects, so the numbered form
/// is built here.
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

async fn insert_messages(conn: &mut AnyConnection, agent: AgentId, rows: &[MessageRow<'_>]) -> Result<()> {
    let agent = agent.to_string();
    // 100 rows x 12 columns per statement keeps far below every backend's parameter limit.
    for chunk in rows.chunks(100) {
        let sql = format!(
            "INSERT INTO messages (id, agent_id, position, batch_id, sequence_num, batch_type, role, content, \
             token_estimate, archived, deleted, created_at) VALUES {}",
            placeholders(chunk.len(), 12, 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for row in chunk {
            q = q
                .bind(row.id.to_string())
                .bind(agent.clone())
                .bind(row.position.get())
                .bind(row.batch.get())
                .bind(row.seq)
                .bind(row.batch_type.as_str())
                .bind(row.role.as_str())
                .bind(row.content.to_owned())
                .bind(NewMessage::estimate_tokens(row.content.len()))
                .bind(false)
                .bind(false)
                .bind(row.created_at);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// batches

const BATCH_COLUMNS: &str = "b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, \
    b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at";

pub(crate) fn batch_select(tail: &str) -> String {
    format!("SELECT {BATCH_COLUMNS} FROM batches b {tail}")
}

async fn load_batch(conn: &mut AnyConnection, agent: AgentId, batch: BatchId) -> Result<BatchInfo> {
    let sql = batch_select("WHERE b.id = $1 AND b.agent_id = $2");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(batch.get())
        .bind(agent.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        Some(row) => batch_from_row(&row),
        None => Err(Error::BatchNotFound { agent, batch }),
    }
}

async fn batch_contents(conn: &mut AnyConnection, batch: BatchId) -> Result<Vec<Vec<ContentBlock>>> {
    let rows = sqlx::query("SELECT content FROM messages WHERE batch_id = $1 ORDER BY sequence_num")
        .bind(batch.get())
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            let text: String = r.try_get(0)?;
            decode_content(&text)
        })
        .collect()
}

async fn batch_continuations(conn: &mut AnyConnection, batch: BatchId) -> Result<i64> {
    Ok(sqlx::query("SELECT continuations FROM batches WHERE id = $1")
        .bind(batch.get())
        .fetch_one(&mut *conn)
        .await?
        .try_get::<i64, _>(0)?)
}

async fn begin_batch(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    trigger: &NewMessage,
    opts: &BeginBatch,
) -> Result<Received> {
    if !matches!(trigger.role, Role::User | Role::System) {
        return Err(Error::InvalidContent(format!(
            "a batch starts with a user or system message, not {}",
            trigger.role.as_str()
        )));
    }
    let content = encode_content(ctx.max_content_bytes, trigger)?;
    if let Some(id) = trigger.tool_result_ids().next() {
        return Err(Error::InvalidContent(format!("a trigger cannot answer tool call `{id}`: it opens a new batch")));
    }
    lock_agent(conn, ctx, agent).await?;
    if let Some(parent) = opts.parent_batch {
        load_batch(conn, agent, parent).await?;
    }
    let batch_type = opts.batch_type.unwrap_or(match trigger.role {
        Role::System => BatchType::SystemTrigger,
        _ => BatchType::UserRequest,
    });
    if batch_type == BatchType::Continuation {
        return Err(Error::InvalidContent(
            "a new batch cannot have type continuation: continue the existing batch instead".into(),
        ));
    }
    let position = next_positions(conn, ctx, agent, 1).await?[0];
    let now = now_ms();
    sqlx::query(
        "INSERT INTO batches (id, agent_id, batch_type, state, parent_batch, run_owner, lease_expires_at, \
         next_sequence, continuations, archived, started_at, completed_at) \
         VALUES ($1, $2, $3, 'open', $4, $5, $6, 1, 0, $7, $8, NULL)",
    )
    .bind(position.get())
    .bind(agent.to_string())
    .bind(batch_type.as_str())
    .bind(opts.parent_batch.map(SnowflakeId::get))
    .bind(&ctx.run_owner)
    .bind(now + lease_ms(ctx.batch_lease))
    .bind(false)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    let message_id = MessageId::new();
    let row = MessageRow {
        id: message_id,
        position,
        batch: position,
        seq: 0,
        batch_type,
        role: trigger.role,
        content: &content,
        created_at: now,
    };
    insert_messages(conn, agent, std::slice::from_ref(&row)).await?;
    Ok(Received { batch_id: position, message_id })
}

/// Checks that `step` keeps the batch's tool pairing valid given what the batch holds already.
pub(crate) fn check_step_pairing(
    batch: BatchId,
    existing: &[Vec<ContentBlock>],
    step: &[NewMessage],
) -> Result<()> {
    let mut calls: HashSet<&str> = HashSet::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for blocks in existing {
        for block in blocks {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    calls.insert(id);
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    answered.insert(tool_use_id);
                }
                _ => {}
            }
        }
    }
    for message in step {
        for id in message.tool_use_ids() {
            if !calls.insert(id) {
                return Err(Error::DuplicateToolUse { batch, tool_use_id: id.to_owned() });
            }
        }
        for id in message.tool_result_ids() {
            if !calls.contains(id) {
                return Err(Error::UnpairedToolResult { batch, tool_use_id: id.to_owned() });
            }
            if !answered.insert(id) {
                return Err(Error::DuplicateToolResult { batch, tool_use_id: id.to_owned() });
            }
        }
    }
    Ok(())
}

async fn append_step(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    batch: BatchId,
    messages: &[NewMessage],
) -> Result<StepReceipt> {
    if messages.is_empty() {
        return Err(Error::EmptyStep);
    }
    let contents = messages.iter().map(|m| encode_content(ctx.max_content_bytes, m)).collect::<Result<Vec<_>>>()?;
    lock_agent(conn, ctx, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Open {
        return Err(Error::BatchNotOpen { batch, state: info.state });
    }
    let existing = batch_contents(conn, batch).await?;
    check_step_pairing(batch, &existing, messages)?;
    let batch_type =
        if batch_continuations(conn, batch).await? > 0 { BatchType::Continuation } else { info.batch_type };
    let positions = next_positions(conn, ctx, agent, messages.len()).await?;
    let first_seq = info.message_count;
    let now = now_ms();
    let rows: Vec<MessageRow<'_>> = messages
        .iter()
        .zip(&contents)
        .zip(&positions)
        .enumerate()
        .map(|(i, ((m, content), position))| MessageRow {
            id: MessageId::new(),
            position: *position,
            batch,
            seq: first_seq + i as i64,
            batch_type,
            role: m.role,
            content,
            created_at: now,
        })
        .collect();
    insert_messages(conn, agent, &rows).await?;
    sqlx::query("UPDATE batches SET next_sequence = next_sequence + $1, lease_expires_at = $2 WHERE id = $3")
        .bind(messages.len() as i64)
        .bind(now + lease_ms(ctx.batch_lease))
        .bind(batch.get())
        .execute(&mut *conn)
        .await?;
    Ok(StepReceipt { batch_id: batch, stored: rows.iter().map(|r| (r.id, r.position, r.seq)).collect() })
}

async fn complete_batch(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId, batch: BatchId) -> Result<BatchInfo> {
    lock_agent(conn, ctx, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    match info.state {
        BatchState::Complete => return Ok(info),
        BatchState::Abandoned => {
            return Err(Error::InvalidBatchState { batch, state: info.state, action: "completing it" });
        }
        BatchState::Open => {}
    }
    let contents = batch_contents(conn, batch).await?;
    let pending = crate::model::pending_calls(contents.iter().map(|c| &c[..]));
    if !pending.is_empty() {
        return Err(Error::PendingToolCalls { batch, pending });
    }
    sqlx::query(
        "UPDATE batches SET state = 'complete', completed_at = $1, run_owner = NULL, lease_expires_at = NULL \
         WHERE id = $2",
    )
    .bind(now_ms())
    .bind(batch.get())
    .execute(&mut *conn)
    .await?;
    load_batch(conn, agent, batch).await
}

async fn continue_batch(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId, batch: BatchId) -> Result<BatchInfo> {
    lock_agent(conn, ctx, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state == BatchState::Abandoned {
        return Err(Error::InvalidBatchState { batch, state: info.state, action: "continuing it" });
    }
    if info.archived {
        return Err(Error::InvalidBatchState { batch, state: info.state, action: "continuing an archived batch" });
    }
    sqlx::query(
        "UPDATE batches SET state = 'open', completed_at = NULL, run_owner = $1, lease_expires_at = $2, \
         continuations = continuations + 1 WHERE id = $3",
    )
    .bind(&ctx.run_owner)
    .bind(now_ms() + lease_ms(ctx.batch_lease))
    .bind(batch.get())
    .execute(&mut *conn)
    .await?;
    load_batch(conn, agent, batch).await
}

async fn renew_lease(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId, batch: BatchId) -> Result<BatchInfo> {
    lock_agent(conn, ctx, agent).await?;
    let info = load_batch(conn, agent, batch).await?;
    if info.state != BatchState::Open {
        return Err(Error::BatchNotOpen { batch, state: info.state });
    }
    sqlx::query("UPDATE batches SET lease_expires_at = $1, run_owner = $2 WHERE id = $3")
        .bind(now_ms() + lease_ms(ctx.batch_lease))
        .bind(&ctx.run_owner)
        .bind(batch.get())
        .execute(&mut *conn)
        .await?;
    load_batch(conn, agent, batch).await
}

async fn recover(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: Option<AgentId>,
    scope: RecoveryScope,
) -> Result<Vec<Abandoned>> {
    let now = now_ms();
    // One statement decides and flips: on PostgreSQL a batch whose run renews its lease at this
    // moment is re-checked after that run commits, and is then no longer expired.
    let mut sql = String::from("UPDATE batches SET state = 'abandoned', completed_at = $1 WHERE state = 'open'");
    if scope == RecoveryScope::ExpiredLeases {
        sql.push_str(" AND lease_expires_at < $1");
    }
    if agent.is_some() {
        sql.push_str(" AND agent_id = $2");
    }
    sql.push_str(" RETURNING id");
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now);
    if let Some(agent) = agent {
        q = q.bind(agent.to_string());
    }
    let mut ids: Vec<i64> = q.fetch_all(&mut *conn).await?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    ids.sort_unstable();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let row = sqlx::query(sqlx::AssertSqlSafe(batch_select("WHERE b.id = $1")))
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
        let batch = batch_from_row(&row)?;
        let trigger = sqlx::query(sqlx::AssertSqlSafe(message_select("WHERE m.batch_id = $1 AND m.sequence_num = 0")))
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
        let trigger = message_from_row(&trigger)?;
        let payload = serde_json::json!({ "batch_id": id, "run_owner": batch.run_owner });
        log_activity(conn, ctx, batch.agent_id, "batch_abandoned", &payload).await?;
        out.push(Abandoned { batch, trigger });
    }
    Ok(out)
}

/// Marks whole batches archived (and their messages); returns the number of messages archived.
async fn archive_batches(conn: &mut AnyConnection, batches: &[i64]) -> Result<u64> {
    let mut archived = 0;
    for chunk in batches.chunks(500) {
        let list = placeholders(1, chunk.len(), 2);
        for table in ["batches", "messages"] {
            let column = if table == "batches" { "id" } else { "batch_id" };
            let sql = format!("UPDATE {table} SET archived = $1 WHERE {column} IN {list}");
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(true);
            for id in chunk {
                q = q.bind(*id);
            }
            let done = q.execute(&mut *conn).await?;
            if table == "messages" {
                archived += done.rows_affected();
            }
        }
    }
    Ok(archived)
}

async fn archive_before(conn: &mut AnyConnection, ctx: &Ctx, agent: AgentId, position: SnowflakeId) -> Result<u64> {
    lock_agent(conn, ctx, agent).await?;
    // Whole batches only: a batch that has any message at or after `position` stays, and so does
    // an open one.
    let ids: Vec<i64> = sqlx::query(
        "SELECT b.id FROM batches b WHERE b.agent_id = $1 AND b.id < $2 AND b.state <> 'open' AND NOT b.archived \
         AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.batch_id = b.id AND m.position >= $2) ORDER BY b.id",
    )
    .bind(agent.to_string())
    .bind(position.get())
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|r| r.try_get(0))
    .collect::<Result<_, _>>()?;
    archive_batches(conn, &ids).await
}

async fn summarize_and_archive(conn: &mut AnyConnection, ctx: &Ctx, summary: &Summary) -> Result<Vec<BatchId>> {
    lock_agent(conn, ctx, summary.agent_id).await?;
    if summary.from_batch > summary.through_batch {
        return Err(Error::InvalidContent("summary covers an empty range (from_batch > through_batch)".into()));
    }
    let rows = sqlx::query(
        "SELECT id, state FROM batches WHERE agent_id = $1 AND id >= $2 AND id <= $3 AND NOT archived ORDER BY id",
    )
    .bind(summary.agent_id.to_string())
    .bind(summary.from_batch.get())
    .bind(summary.through_batch.get())
    .fetch_all(&mut *conn)
    .await?;
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: i64 = row.try_get(0)?;
        let state: String = row.try_get(1)?;
        if state == "open" {
            return Err(Error::InvalidBatchState {
                batch: SnowflakeId(id),
                state: BatchState::Open,
                action: "summarizing an open batch",
            });
        }
        ids.push(id);
    }
    upsert_summary(conn, ctx, summary).await?;
    archive_batches(conn, &ids).await?;
    Ok(ids.into_iter().map(SnowflakeId).collect())
}

async fn upsert_summary(conn: &mut AnyConnection, ctx: &Ctx, s: &Summary) -> Result<()> {
    lock_agent(conn, ctx, s.agent_id).await?;
    if s.from_batch > s.through_batch {
        return Err(Error::InvalidContent("summary covers an empty range (from_batch > through_batch)".into()));
    }
    if s.content.len() > ctx.max_content_bytes {
        return Err(Error::ContentTooLarge { size: s.content.len(), limit: ctx.max_content_bytes });
    }
    sqlx::query(
        "INSERT INTO summaries (id, agent_id, content, from_batch, through_batch, message_count, depth, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET content = excluded.content, from_batch = excluded.from_batch, \
         through_batch = excluded.through_batch, message_count = excluded.message_count, depth = excluded.depth",
    )
    .bind(s.id.get())
    .bind(s.agent_id.to_string())
    .bind(&s.content)
    .bind(s.from_batch.get())
    .bind(s.through_batch.get())
    .bind(s.message_count)
    .bind(s.depth)
    .bind(s.created_at.timestamp_millis())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn log_activity(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    kind: &str,
    payload: &serde_json::Value,
) -> Result<SnowflakeId> {
    if kind.is_empty() || kind.len() > 100 {
        return Err(Error::InvalidContent("activity kind must be 1 to 100 bytes".into()));
    }
    let payload = serde_json::to_string(payload).map_err(|e| Error::InvalidContent(e.to_string()))?;
    if payload.len() > ctx.max_content_bytes {
        return Err(Error::ContentTooLarge { size: payload.len(), limit: ctx.max_content_bytes });
    }
    let id = ctx.ids.next_id()?;
    let inserted = sqlx::query("INSERT INTO activity_events (id, agent_id, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(id.get())
        .bind(agent.to_string())
        .bind(kind)
        .bind(payload)
        .bind(now_ms())
        .execute(&mut *conn)
        .await;
    match inserted {
        Ok(_) => Ok(id),
        Err(e) if e.as_database_error().is_some_and(|d| d.kind() == sqlx::error::ErrorKind::ForeignKeyViolation) => {
            Err(Error::AgentNotFound(agent))
        }
        Err(e) => Err(e.into()),
    }
}

async fn import_legacy(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    messages: &[LegacyMessage],
    plan: &ImportPlan,
) -> Result<Vec<BatchId>> {
    lock_agent(conn, ctx, agent).await?;
    let contents = messages
        .iter()
        .map(|m| encode_content(ctx.max_content_bytes, &NewMessage::new(m.role, m.content.clone())))
        .collect::<Result<Vec<_>>>()?;
    // Positions follow the input order, so the history reads as it was written.
    let positions = next_positions(conn, ctx, agent, messages.len()).await?;
    let now = now_ms();
    let mut batch_ids = Vec::with_capacity(plan.batches.len());
    let mut rows = Vec::with_capacity(messages.len());
    for planned in &plan.batches {
        let Some(&first) = planned.messages.first() else { continue };
        let batch = positions[first];
        let started = messages[first].created_at.map_or(now, |t| t.timestamp_millis());
        let last = planned.messages.last().copied().unwrap_or(first);
        let ended = messages[last].created_at.map_or(now, |t| t.timestamp_millis());
        sqlx::query(
            "INSERT INTO batches (id, agent_id, batch_type, state, parent_batch, run_owner, lease_expires_at, \
             next_sequence, continuations, archived, started_at, completed_at) \
             VALUES ($1, $2, $3, $4, NULL, NULL, NULL, $5, 0, $6, $7, $8)",
        )
        .bind(batch.get())
        .bind(agent.to_string())
        .bind(planned.batch_type.as_str())
        .bind(planned.state.as_str())
        .bind(planned.messages.len() as i64)
        .bind(false)
        .bind(started)
        .bind(if planned.state == BatchState::Open { None } else { Some(ended) })
        .execute(&mut *conn)
        .await?;
        for (seq, &index) in planned.messages.iter().enumerate() {
            rows.push(MessageRow {
                id: MessageId::new(),
                position: positions[index],
                batch,
                seq: seq as i64,
                batch_type: planned.batch_type,
                role: messages[index].role,
                content: &contents[index],
                created_at: messages[index].created_at.map_or(now, |t| t.timestamp_millis()),
            });
        }
        batch_ids.push(batch);
    }
    insert_messages(conn, agent, &rows).await?;
    Ok(batch_ids)
}

// ---------------------------------------------------------------------------------------------
// row decoding, shared with reads

const MESSAGE_COLUMNS: &str = "m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, \
    m.content, m.token_estimate, m.archived, m.deleted, m.created_at";

pub(crate) fn message_select(tail: &str) -> String {
    format!("SELECT {MESSAGE_COLUMNS} FROM messages m {tail}")
}

pub(crate) fn decode_content(text: &str) -> Result<Vec<ContentBlock>> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("message content does not decode: {e}")))
}

fn parse_uuid(text: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(text).map_err(|e| Error::Corrupt(format!("stored id `{text}` is not a UUID: {e}")))
}

/// Reads a flag column: BOOLEAN on PostgreSQL, INTEGER 0/1 on SQLite (the `Any` driver decodes
/// neither as the other).
fn flag(row: &AnyRow, index: usize) -> Result<bool> {
    match row.try_get::<bool, _>(index) {
        Ok(v) => Ok(v),
        Err(_) => Ok(row.try_get::<i64, _>(index)? != 0),
    }
}

pub(crate) fn message_from_row(row: &AnyRow) -> Result<Message> {
    let id: String = row.try_get(0)?;
    let agent: String = row.try_get(1)?;
    let batch_type: String = row.try_get(5)?;
    let role: String = row.try_get(6)?;
    let content: String = row.try_get(7)?;
    Ok(Message {
        id: MessageId(parse_uuid(&id)?),
        agent_id: AgentId(parse_uuid(&agent)?),
        position: SnowflakeId(row.try_get(2)?),
        batch_id: SnowflakeId(row.try_get(3)?),
        sequence_num: row.try_get(4)?,
        batch_type: batch_type.parse()?,
        role: role.parse().map_err(|_| Error::Corrupt(format!("unknown stored role `{role}`")))?,
        content: decode_content(&content)?,
        token_estimate: row.try_get(8)?,
        archived: flag(row, 9)?,
        deleted: flag(row, 10)?,
        created_at: from_ms(row.try_get(11)?),
    })
}

pub(crate) fn batch_from_row(row: &AnyRow) -> Result<BatchInfo> {
    let agent: String = row.try_get(1)?;
    let batch_type: String = row.try_get(2)?;
    let state: String = row.try_get(3)?;
    Ok(BatchInfo {
        id: SnowflakeId(row.try_get(0)?),
        agent_id: AgentId(parse_uuid(&agent)?),
        batch_type: batch_type.parse()?,
        state: state.parse()?,
        parent_batch: row.try_get::<Option<i64>, _>(4)?.map(SnowflakeId),
        run_owner: row.try_get(5)?,
        lease_expires_at: row.try_get::<Option<i64>, _>(6)?.map(from_ms),
        message_count: row.try_get(7)?,
        archived: flag(row, 8)?,
        started_at: from_ms(row.try_get(9)?),
        completed_at: row.try_get::<Option<i64>, _>(10)?.map(from_ms),
    })
}

pub(crate) fn agent_from_row(row: &AnyRow) -> Result<Agent> {
    let id: String = row.try_get(0)?;
    let metadata: String = row.try_get(2)?;
    Ok(Agent {
        id: AgentId(parse_uuid(&id)?),
        name: row.try_get(1)?,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| Error::Corrupt(format!("agent metadata does not decode: {e}")))?,
        created_at: from_ms(row.try_get(3)?),
    })
}

pub(crate) fn summary_from_row(row: &AnyRow) -> Result<Summary> {
    let agent: String = row.try_get(1)?;
    Ok(Summary {
        id: SnowflakeId(row.try_get(0)?),
        agent_id: AgentId(parse_uuid(&agent)?),
        content: row.try_get(2)?,
        from_batch: SnowflakeId(row.try_get(3)?),
        through_batch: SnowflakeId(row.try_get(4)?),
        message_count: row.try_get(5)?,
        depth: row.try_get(6)?,
        created_at: from_ms(row.try_get(7)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_placeholders() {
        assert_eq!(placeholders(2, 3, 1), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(placeholders(1, 2, 2), "($2, $3)");
    }
}
