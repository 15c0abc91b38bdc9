//! Statements on `messages` rows: a batch's live messages in order, its trigger (the message at
//! sequence 0), a page of an agent's history, and the count of its live messages.
//!
//! It must never decode a message's content or judge its role: the content comes back as
//! stored, the role and batch type as their names.
//!
//! A message's role and batch type are stored as codes, their index in [`ROLES`] and
//! [`BATCH_TYPES`] (migration 0030); the statements here turn them back into names
//! ([`ROLE_NAME`], [`BATCH_TYPE_NAME`]), and a writer stores [`code`]s.

use sqlx::SqliteConnection;

/// Roles by stored code.
pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Batch types by stored code.
pub const BATCH_TYPES: [&str; 4] = [
    "user_request",
    "agent_to_agent",
    "system_trigger",
    "continuation",
];

/// The SQL that names the role of the message `m` (the statements of this module spell it out:
/// sqlx's checked statements are literals).
pub const ROLE_NAME: &str = "CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END";

/// The SQL that names the batch type of the message `m`.
pub const BATCH_TYPE_NAME: &str = "CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END";

/// The SQL that gives the id of the message `m` as a UUID's text (lower case, hyphenated):
/// SQLite stores it as its 16 bytes (migration 0030), which sort as the text does.
pub const ID_TEXT: &str = "lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21))";

/// The stored code of `name` among `names` ([`ROLES`] or [`BATCH_TYPES`]); `None` for a name
/// that is not one of them.
pub fn code(names: &[&str], name: &str) -> Option<i64> {
    names
        .iter()
        .position(|n| *n == name)
        .and_then(|i| i64::try_from(i).ok())
}

/// A `messages` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `position`.
    pub position: i64,
    /// `batch_id`.
    pub batch_id: i64,
    /// `sequence_num`.
    pub sequence_num: i64,
    /// `batch_type`.
    pub batch_type: String,
    /// `role`.
    pub role: String,
    /// `content` (JSON text).
    pub content: String,
    /// `token_estimate`.
    pub token_estimate: i64,
    /// `archived`.
    pub archived: bool,
    /// `deleted`.
    pub deleted: bool,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// The live (not deleted) messages of batch `batch`, in sequence order.
pub async fn live_of_batch(
    conn: &mut SqliteConnection,
    batch: i64,
) -> sqlx::Result<Vec<MessageRow>> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) AS "id!: String", b.agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content, m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM messages m JOIN batches b ON b.id = m.batch_id WHERE m.batch_id = $1 AND NOT m.deleted ORDER BY m.sequence_num"#,
        batch
    )
    .fetch_all(conn)
    .await
}

/// The message that opened batch `batch` (sequence 0); [`sqlx::Error::RowNotFound`] when there
/// is none.
pub async fn trigger_of_batch(conn: &mut SqliteConnection, batch: i64) -> sqlx::Result<MessageRow> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) AS "id!: String", b.agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content, m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM messages m JOIN batches b ON b.id = m.batch_id WHERE m.batch_id = $1 AND m.sequence_num = 0"#,
        batch
    )
    .fetch_one(conn)
    .await
}

/// `agent`'s live messages after position `after`, in position order, at most `limit`; archived
/// ones only when `include_archived`.
pub async fn page_after(
    conn: &mut SqliteConnection,
    agent: &str,
    after: i64,
    limit: i64,
    include_archived: bool,
) -> sqlx::Result<Vec<MessageRow>> {
    if include_archived {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) AS "id!: String", a.id AS agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content, m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position > $2 AND NOT m.deleted ORDER BY m.position LIMIT $3 + 0"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    } else {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) AS "id!: String", a.id AS agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content, m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position > $2 AND NOT m.deleted AND NOT m.archived ORDER BY m.position LIMIT $3 + 0"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    }
}

/// How many of `agent`'s messages are live (neither archived nor deleted), counted from the
/// agent's `live_from` (every message below it is in an archived batch, migration 0027).
pub async fn count_live(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position >= a.live_from AND NOT m.archived AND NOT m.deleted"#,
        agent
    )
    .fetch_one(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the SQL gives back are the codes' names, in order.
    #[test]
    fn codes_and_names_agree() {
        for (names, sql, column) in [
            (&ROLES, ROLE_NAME, "m.role"),
            (&BATCH_TYPES, BATCH_TYPE_NAME, "m.batch_type"),
        ] {
            let cases: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("WHEN {i} THEN '{n}'"))
                .collect();
            assert_eq!(sql, format!("CASE {column} {} END", cases.join(" ")));
            for (i, n) in names.iter().enumerate() {
                assert_eq!(code(names.as_slice(), n), Some(i as i64));
            }
        }
        assert_eq!(code(&ROLES, "robot"), None);
    }

    /// The checked statements of this module spell the names as the constants do.
    #[test]
    fn statements_use_the_names() {
        let source = include_str!("messages.rs");
        // Every row-returning statement here reads a whole message; the constants appear once
        // more, where they are defined.
        let statements = source.matches(concat!("query_as", "!(")).count();
        assert_eq!(statements, 4);
        assert_eq!(source.matches(ROLE_NAME).count(), statements + 1);
        assert_eq!(source.matches(ID_TEXT).count(), statements + 1);
        assert_eq!(source.matches(BATCH_TYPE_NAME).count(), statements + 1);
    }
}
