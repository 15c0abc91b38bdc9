//! The one error type of `pattern_db`.
//!
//! Every failure a caller can act on has its own variant with the facts needed to act; the driver's
//! own error is kept as a source, never flattened into a string. This module must never print or
//! log: callers decide what to show.

use crate::archival::ArchivalId;
use crate::id::SnowflakeId;
use crate::model::{AgentId, BatchState};
use crate::protocol::{MeetingId, SessionId};
use crate::search::{ContentRef, EmbeddingModelInfo};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database URL could not be understood.
    #[error("invalid database url `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given (with any password removed).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to {backend} database at `{url}`: {source}")]
    Connect {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The URL (with any password removed).
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The bundled SQLite is older than the version this crate requires.
    #[error("SQLite {found} is older than the required {required} (WAL-reset bug fixed in 3.51.3)")]
    SqliteTooOld {
        /// Version found at run time.
        found: String,
        /// Minimum version.
        required: &'static str,
    },
    /// A migration already applied to this database differs from the one shipped in this build.
    #[error(
        "migration {version} was applied to this database but its file has changed since \
         (checksum mismatch); restore the original migration or migrate a copy"
    )]
    MigrationChecksumMismatch {
        /// The migration version.
        version: i64,
    },
    /// The database has a migration this build does not know (it was opened by a newer build).
    #[error("database has migration {version}, which this build does not know: upgrade Pattern")]
    MigrationUnknown {
        /// The migration version.
        version: i64,
    },
    /// A migration run with foreign keys off left rows whose foreign keys point nowhere; it was
    /// rolled back whole.
    #[error(
        "migration {version} left {rows} rows with dangling foreign keys (first in table `{table}`); rolled back"
    )]
    MigrationForeignKeys {
        /// The migration version.
        version: i64,
        /// The first table with a dangling row.
        table: String,
        /// How many rows dangle.
        rows: usize,
    },
    /// A name or external id that breaks the naming rule ([`crate::check_name`]).
    #[error("`{field}` {reason}")]
    InvalidName {
        /// The refused field (`name`, `external_id`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The agents are in different organizations, and nothing crosses an organization's wall.
    #[error("agent {other} is not in the organization of agent {agent}")]
    OtherOrganization {
        /// The acting agent.
        agent: AgentId,
        /// The agent of another organization.
        other: AgentId,
    },
    /// Any other migration failure.
    #[error("migration failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// An id string could not be parsed.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidId {
        /// What kind of id.
        what: &'static str,
        /// The text given.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// No agent with this id.
    #[error("unknown agent {0}")]
    AgentNotFound(AgentId),
    /// No agent with this name.
    #[error("unknown agent `{0}`")]
    AgentNameNotFound(String),
    /// An agent with this name exists already.
    #[error("an agent named `{0}` exists already")]
    AgentNameTaken(String),
    /// No batch with this id for this agent.
    #[error("unknown batch {batch} for agent {agent}")]
    BatchNotFound {
        /// The agent.
        agent: AgentId,
        /// The batch asked for.
        batch: SnowflakeId,
    },
    /// The batch is not open, so nothing can be appended to it.
    #[error("batch {batch} is {state}, not open: nothing can be appended to it")]
    BatchNotOpen {
        /// The batch.
        batch: SnowflakeId,
        /// Its state.
        state: BatchState,
    },
    /// The operation needs a batch in another state.
    #[error("batch {batch} is {state}: {action} is not possible")]
    InvalidBatchState {
        /// The batch.
        batch: SnowflakeId,
        /// Its state.
        state: BatchState,
        /// What was attempted.
        action: &'static str,
    },
    /// The abandoned batch was retried already: its trigger is stored again elsewhere.
    #[error("batch {batch} was retried already at {retried_at}: its message is not stored twice")]
    AlreadyRetried {
        /// The batch.
        batch: SnowflakeId,
        /// When the earlier retry was stored.
        retried_at: chrono::DateTime<chrono::Utc>,
    },
    /// A tool result names a tool call that is not in its batch.
    #[error("tool_result for `{tool_use_id}` has no matching tool_use in batch {batch}")]
    UnpairedToolResult {
        /// The batch.
        batch: SnowflakeId,
        /// The unknown call id.
        tool_use_id: String,
    },
    /// A tool call id is used twice in one batch.
    #[error("tool_use id `{tool_use_id}` appears twice in batch {batch}")]
    DuplicateToolUse {
        /// The batch.
        batch: SnowflakeId,
        /// The repeated id.
        tool_use_id: String,
    },
    /// A tool call already has its result.
    #[error("tool_use `{tool_use_id}` in batch {batch} already has a result")]
    DuplicateToolResult {
        /// The batch.
        batch: SnowflakeId,
        /// The call id.
        tool_use_id: String,
    },
    /// The batch cannot complete while tool calls wait for results.
    #[error("batch {batch} still waits for tool results: {pending:?}")]
    PendingToolCalls {
        /// The batch.
        batch: SnowflakeId,
        /// Calls without results, in call order.
        pending: Vec<String>,
    },
    /// A step must hold at least one message.
    #[error("a step needs at least one message")]
    EmptyStep,
    /// A message's content is larger than the configured limit.
    #[error("message content is {size} bytes, over the limit of {limit} bytes")]
    ContentTooLarge {
        /// Size of the serialized content.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Content does not have a valid shape.
    #[error("invalid message content: {0}")]
    InvalidContent(String),
    /// A schedule's cron expression cannot be parsed, or never fires.
    #[error("`cron`: invalid cron expression `{expr}`: {reason}")]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A schedule names a time zone the IANA database does not know.
    #[error("`tz`: unknown time zone `{0}` (an IANA name such as `Europe/Berlin`, or `UTC`)")]
    UnknownTimeZone(String),
    /// A one-off schedule's time has passed (beyond the grace of [`crate::schedule::AT_GRACE`]).
    #[error("`at`: {at} is in the past (now is {now})")]
    ScheduleInPast {
        /// The time asked for.
        at: chrono::DateTime<chrono::Utc>,
        /// The time it was checked at.
        now: chrono::DateTime<chrono::Utc>,
    },
    /// A schedule's other fields are not valid (which field, and why).
    #[error("`{field}`: {reason}")]
    InvalidSchedule {
        /// The field: `message`, `name`, `at`/`cron`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The agent has as many live schedules as it may have.
    #[error("agent {agent} has {limit} schedules already, the most it may have; remove one first")]
    TooManySchedules {
        /// The agent.
        agent: AgentId,
        /// The cap ([`crate::schedule::MAX_SCHEDULES_PER_AGENT`]).
        limit: usize,
    },
    /// The agent has no MCP server of this name.
    #[error("agent {agent} has no MCP server `{name}`")]
    McpServerNotFound {
        /// The agent.
        agent: AgentId,
        /// The name asked for.
        name: String,
    },
    /// No live schedule with this id (of this agent, when an agent was given).
    #[error("unknown schedule {0}")]
    ScheduleNotFound(SnowflakeId),
    /// A legacy history could not be imported.
    #[error("legacy import: message {index}: {reason}")]
    LegacyImport {
        /// Index of the offending message in the input.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// No memory block with this label is visible to this agent.
    #[error("no memory block labelled `{label}` for agent {agent}")]
    BlockNotFound {
        /// The agent.
        agent: AgentId,
        /// The label asked for.
        label: String,
    },
    /// The agent's permission on the block does not allow this change.
    #[error("permission `{permission}` on block `{label}` does not allow this change")]
    PermissionDenied {
        /// The block's label.
        label: String,
        /// The agent's permission.
        permission: String,
    },
    /// A value longer than the block's limit (never cut to fit).
    #[error("block `{label}` holds at most {limit} characters; the new value has {chars}")]
    BlockOverLimit {
        /// The block's label.
        label: String,
        /// Characters (Unicode scalar values) in the refused value.
        chars: usize,
        /// The block's limit.
        limit: usize,
    },
    /// The block changed since the version the write was based on.
    #[error(
        "block `{label}` is at version {current}, not {expected}: read it again and redo the change"
    )]
    VersionConflict {
        /// The block's label.
        label: String,
        /// The version the write expected.
        expected: i64,
        /// The version stored.
        current: i64,
    },
    /// The agent already sees another block under this label.
    #[error("agent {agent} already has a memory block labelled `{label}`")]
    BlockLabelTaken {
        /// The agent.
        agent: AgentId,
        /// The label.
        label: String,
    },
    /// A block label is malformed.
    #[error("invalid block label `{label}`: {reason}")]
    InvalidBlockLabel {
        /// The label given.
        label: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A block field or request is invalid (limit, type, permission, change kind).
    #[error("invalid memory block request: {0}")]
    InvalidBlock(String),
    /// The block has no earlier version to go back to.
    #[error("block `{label}` is at version {version}, which has no earlier version to undo to")]
    NothingToUndo {
        /// The block's label.
        label: String,
        /// Its current version.
        version: i64,
    },
    /// A stored row does not decode (written by something else, or damaged).
    #[error("stored data is damaged: {0}")]
    Corrupt(String),
    /// The clock is outside the range snowflake ids can encode.
    #[error("clock error: {0}")]
    Clock(String),
    /// Every machine id (0..=1023) is leased by a live process: each lease is unexpired and its
    /// holder's liveness lock is held (dead holders' leases are taken over at once).
    #[error(
        "no free machine id: all 1024 are leased by live processes ({live} checked alive); stop \
         some, or give this one a fixed machine id"
    )]
    MachineIdsExhausted {
        /// Leases whose holders were checked alive.
        live: usize,
    },
    /// Another run (in this or another process) holds the agent now; the caller's trigger was
    /// not stored by this call.
    #[error("agent {agent} is busy: a run of process `{holder}` holds it")]
    AgentBusy {
        /// The agent.
        agent: AgentId,
        /// The process whose run holds it.
        holder: String,
    },
    /// The run's claim on its agent was taken over (its process was judged dead, or recovery
    /// fenced it): the write carrying the old token was refused and nothing of it was stored.
    #[error(
        "the run of agent {agent} lost its claim (token {token}): the agent was taken over; \
         nothing was written"
    )]
    ClaimLost {
        /// The agent.
        agent: AgentId,
        /// The token the write carried.
        token: i64,
    },
    /// No turn with this id for this agent.
    #[error("unknown turn {turn} for agent {agent}")]
    TurnNotFound {
        /// The agent.
        agent: AgentId,
        /// The turn asked for.
        turn: crate::runs::TurnId,
    },
    /// No approval request with this id (or not the caller's organization's).
    #[error("unknown approval request {0}")]
    ApprovalNotFound(crate::id::SnowflakeId),
    /// The approval request is not pending any more: another answer (or its deadline, or the
    /// end of its run) decided it first.
    #[error("approval request {id} is already decided ({state})")]
    AlreadyDecided {
        /// The request.
        id: crate::id::SnowflakeId,
        /// What decided it.
        state: crate::approvals::ApprovalState,
    },
    /// The turn is over: nothing more is appended to it.
    #[error("turn {0} is finished")]
    TurnFinished(crate::runs::TurnId),
    /// An idempotency key was used again for a different request.
    #[error("idempotency key `{key}` was used for a different request (turn {turn})")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The turn its first use started.
        turn: crate::runs::TurnId,
    },
    /// A lock was poisoned by a panic in another thread.
    #[error("internal lock `{0}` poisoned by an earlier panic")]
    Poisoned(&'static str),
    /// The transaction that held this write could not commit; the write was not performed.
    #[error("the write was not committed: {0}")]
    Commit(#[source] std::sync::Arc<sqlx::Error>),
    /// The database was closed; the write was not performed.
    #[error("the database is closed")]
    Closed,
    /// An organization or protocol agent with this external id exists already.
    #[error("a {kind} with external id `{external_id}` exists already")]
    ExternalIdTaken {
        /// `organization` or `protocol agent`.
        kind: &'static str,
        /// The external id.
        external_id: String,
    },
    /// No organization or protocol agent with this external id.
    #[error("unknown {kind} with external id `{external_id}`")]
    ExternalIdNotFound {
        /// `organization` or `protocol agent`.
        kind: &'static str,
        /// The external id.
        external_id: String,
    },
    /// No protocol row (organization, protocol agent, session) with this id.
    #[error("unknown {kind} {id}")]
    ProtocolNotFound {
        /// `organization`, `protocol agent` or `session`.
        kind: &'static str,
        /// The id asked for.
        id: uuid::Uuid,
    },
    /// A session needs two different agents.
    #[error("protocol agent {0} cannot open a session with itself")]
    SelfSession(AgentId),
    /// The agent is not one of the session's two participants.
    #[error("protocol agent {agent} is not a participant of session {session}")]
    NotParticipant {
        /// The session.
        session: SessionId,
        /// The agent.
        agent: AgentId,
    },
    /// A sync session's turn belongs to the other agent: nothing was stored.
    #[error("protocol agent {agent} cannot send in session {session}: it is not its turn")]
    OutOfTurn {
        /// The session.
        session: SessionId,
        /// The agent that tried to send.
        agent: AgentId,
        /// Whose turn it is.
        turn: Option<AgentId>,
    },
    /// The session has ended: nothing more can be sent or ended.
    #[error("session {0} has ended")]
    SessionEnded(SessionId),
    /// A protocol message, external id or name is not acceptable (e.g. content that is not JSON).
    #[error("invalid protocol message: {0}")]
    InvalidProtocolMessage(String),
    /// No archival passage with this id for this agent.
    #[error("no archival passage {id} for agent {agent}")]
    ArchivalNotFound {
        /// The agent.
        agent: AgentId,
        /// The id asked for.
        id: ArchivalId,
    },
    /// An archival passage or listing request is invalid (empty content, bad tags or key).
    #[error("invalid archival memory request: {0}")]
    InvalidArchival(String),
    /// No live content (not deleted, not archived) with this reference.
    #[error("no live content {0}")]
    ContentNotFound(ContentRef),
    /// The database holds vectors of another embedding model.
    #[error(
        "the database holds vectors of embedding model {stored}, not {requested}: mixing them \
         would make search meaningless. Use the stored model, or re-embed everything with the \
         new one (the re-embed command, `Database::reset_embeddings`: it deletes the stored \
         vectors and queues every live content for embedding)"
    )]
    EmbeddingModelMismatch {
        /// The model the stored vectors belong to.
        stored: EmbeddingModelInfo,
        /// The model asked for.
        requested: EmbeddingModelInfo,
    },
    /// Vectors cannot be stored before an embedding model is registered.
    #[error("no embedding model is registered: register one before storing vectors")]
    EmbeddingModelNotRegistered,
    /// A vector's length is not the registered model's dimension.
    #[error("vector for {content} has {got} dimensions; the registered model has {expected}")]
    EmbeddingDimension {
        /// The content the vector is for.
        content: ContentRef,
        /// The registered dimension.
        expected: u32,
        /// The vector's length.
        got: usize,
    },
    /// A vector or model description is invalid (non-finite values, empty name).
    #[error("invalid embedding: {0}")]
    InvalidEmbedding(String),
    /// A search query with no words.
    #[error("the search query is empty")]
    EmptyQuery,
    /// A search query longer than allowed (never cut to fit).
    #[error("the search query is {bytes} bytes, over the limit of {limit} bytes")]
    QueryTooLong {
        /// The query's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Search options are invalid (limit, empty time range).
    #[error("invalid search: {0}")]
    InvalidSearch(String),
    /// The full-text index (tantivy) failed; it is derived data, rebuilt by `reindex`.
    #[error("full-text index error: {0}")]
    Index(#[source] std::sync::Arc<tantivy::TantivyError>),
    /// The meeting has ended: nothing more happens in it.
    #[error("meeting {0} has ended")]
    MeetingEnded(MeetingId),
    /// Only the meeting's host may do this.
    #[error("protocol agent {agent} is not the host of meeting {meeting}")]
    NotHost {
        /// The meeting.
        meeting: MeetingId,
        /// The agent that tried.
        agent: AgentId,
    },
    /// The agent has not joined the meeting (or has left it).
    #[error("protocol agent {agent} is not present in meeting {meeting}")]
    NotMeetingParticipant {
        /// The meeting.
        meeting: MeetingId,
        /// The agent.
        agent: AgentId,
    },
    /// The agent is already invited to or present in the meeting.
    #[error("protocol agent {agent} is already in meeting {meeting}")]
    AlreadyParticipant {
        /// The meeting.
        meeting: MeetingId,
        /// The agent.
        agent: AgentId,
    },
    /// Only the current speaker may speak or pass: nothing was stored.
    #[error("protocol agent {agent} cannot speak in meeting {meeting}: it is not the speaker")]
    NotSpeaker {
        /// The meeting.
        meeting: MeetingId,
        /// The agent that tried.
        agent: AgentId,
        /// Who speaks now.
        speaker: Option<AgentId>,
    },
    /// The meeting is not in a state that allows this (e.g. starting one that is not ready).
    #[error("meeting {meeting} is {status}; this needs it {needed}")]
    MeetingState {
        /// The meeting.
        meeting: MeetingId,
        /// Its status.
        status: &'static str,
        /// What the operation needs.
        needed: &'static str,
    },
    /// A retention policy that would delete what it must keep (a zero age, keeping zero
    /// versions).
    #[error("invalid retention policy: {0}")]
    InvalidRetention(String),
    /// An agent import that cannot be written as given (see `Database::import_agent`).
    #[error("import refused: {0}")]
    InvalidImport(String),
    /// No API key with this id in the organization.
    #[error("no API key {0} in this organization")]
    ApiKeyNotFound(crate::auth::ApiKeyId),
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        use sqlx::migrate::MigrateError as M;
        match e {
            M::VersionMismatch(version) => Error::MigrationChecksumMismatch { version },
            M::VersionMissing(version) => Error::MigrationUnknown { version },
            other => Error::Migrate(other),
        }
    }
}

impl Error {
    /// Whether retrying the same call later may succeed (connection trouble, lock timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Closed | Error::Commit(_) => true,
            Error::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::WorkerCrashed
                ) || e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .is_some_and(|c| {
                        // SQLITE_BUSY / SQLITE_LOCKED; PostgreSQL serialization failure, deadlock.
                        matches!(c.as_ref(), "5" | "6" | "517" | "40001" | "40P01")
                    })
            }
            _ => false,
        }
    }

    /// A PostgreSQL deadlock or serialization failure: the transaction was rolled back whole,
    /// and running it again may succeed. The writer retries these itself.
    pub(crate) fn is_lock_conflict(&self) -> bool {
        match self {
            Error::Database(e) => sqlx_lock_conflict(e),
            Error::Commit(e) => sqlx_lock_conflict(e),
            _ => false,
        }
    }

    /// What kind of failure this is, for front doors that map errors to exit codes or HTTP
    /// statuses (the CLI and the server share this one classification).
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::AgentNotFound(_)
            | Error::AgentNameNotFound(_)
            | Error::BatchNotFound { .. }
            | Error::BlockNotFound { .. }
            | Error::ExternalIdNotFound { .. }
            | Error::ProtocolNotFound { .. }
            | Error::ArchivalNotFound { .. }
            | Error::ApiKeyNotFound(_)
            | Error::TurnNotFound { .. }
            | Error::ApprovalNotFound(_)
            | Error::ContentNotFound(_)
            | Error::ScheduleNotFound(_)
            | Error::McpServerNotFound { .. } => ErrorClass::NotFound,
            Error::AgentNameTaken(_)
            | Error::VersionConflict { .. }
            | Error::BlockLabelTaken { .. }
            | Error::ExternalIdTaken { .. }
            | Error::OutOfTurn { .. }
            | Error::SessionEnded(_)
            | Error::NotParticipant { .. }
            | Error::NothingToUndo { .. }
            | Error::InvalidBatchState { .. }
            | Error::AlreadyRetried { .. }
            | Error::BatchNotOpen { .. }
            | Error::MeetingEnded(_)
            | Error::NotHost { .. }
            | Error::NotMeetingParticipant { .. }
            | Error::AlreadyParticipant { .. }
            | Error::NotSpeaker { .. }
            | Error::AgentBusy { .. }
            | Error::ClaimLost { .. }
            | Error::TurnFinished(_)
            | Error::AlreadyDecided { .. }
            | Error::IdempotencyKeyReused { .. }
            | Error::MeetingState { .. } => ErrorClass::Conflict,
            Error::OtherOrganization { .. } => ErrorClass::NotFound,
            Error::BlockOverLimit { .. }
            | Error::InvalidImport(_)
            | Error::ContentTooLarge { .. }
            | Error::PermissionDenied { .. }
            | Error::TooManySchedules { .. } => ErrorClass::Refused,
            Error::InvalidUrl { .. }
            | Error::Config(_)
            | Error::InvalidId { .. }
            | Error::InvalidBlockLabel { .. }
            | Error::InvalidBlock(_)
            | Error::InvalidContent(_)
            | Error::InvalidProtocolMessage(_)
            | Error::InvalidArchival(_)
            | Error::InvalidRetention(_)
            | Error::InvalidSearch(_)
            | Error::EmptyQuery
            | Error::QueryTooLong { .. }
            | Error::EmptyStep
            | Error::UnpairedToolResult { .. }
            | Error::DuplicateToolUse { .. }
            | Error::DuplicateToolResult { .. }
            | Error::PendingToolCalls { .. }
            | Error::SelfSession(_)
            | Error::InvalidName { .. }
            | Error::InvalidCron { .. }
            | Error::UnknownTimeZone(_)
            | Error::ScheduleInPast { .. }
            | Error::InvalidSchedule { .. } => ErrorClass::Invalid,
            e if e.is_transient() => ErrorClass::Unavailable,
            _ => ErrorClass::Internal,
        }
    }
}

/// Whether a driver error is a PostgreSQL deadlock (`40P01`) or serialization failure (`40001`).
pub(crate) fn sqlx_lock_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| matches!(c.as_ref(), "40001" | "40P01"))
}

/// The kinds of failure callers act on differently: what a CLI exit code or an HTTP status
/// says. Every crate's error maps onto these through its `class()` method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// What was named does not exist (or is not visible to the caller).
    NotFound,
    /// It exists, but its state forbids this now: taken names, stale versions, out of turn.
    Conflict,
    /// The request itself is malformed: ids, labels, content, queries.
    Invalid,
    /// Well-formed but refused: over a limit, not permitted.
    Refused,
    /// A dependency is away (connection, lock timeout, shutting down); retrying later may work.
    Unavailable,
    /// Anything else: a fault on our side.
    Internal,
}

/// Removes a password from a URL before it goes into an error message.
pub(crate) fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((creds, host)) = rest.split_once('@')
        && let Some((user, _password)) = creds.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}
