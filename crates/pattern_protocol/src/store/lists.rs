//! Organization-scoped lists of sessions and meetings, newest first, paged by id (ids are UUID
//! v7, so their text order is their creation order): what a front door serving several
//! organizations lists (the HTTP server's `GET /v1/sessions` and `GET /v1/meetings`).
//!
//! A session is the organization's when both its agents are; a meeting when its host is. This
//! module must never list a row of another organization.

use pattern_db::sql::Row;

use pattern_db::protocol::{SESSION_COLUMNS, session_from_row};
use pattern_db::{MeetingId, OrganizationId, Result, Session, SessionId};

use super::Store;
use super::meetings::{MEETING_COLUMNS, meeting_from_row};
use crate::meeting::Meeting;

/// Which rows a list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Liveness {
    /// Every row.
    #[default]
    All,
    /// Those not ended.
    Live,
    /// Those ended.
    Ended,
}

impl Liveness {
    fn condition(self, alias: &str) -> String {
        match self {
            Liveness::All => String::new(),
            Liveness::Live => format!(" AND {alias}.status <> 'ended'"),
            Liveness::Ended => format!(" AND {alias}.status = 'ended'"),
        }
    }
}

/// One page of a list: at most `limit` rows older than `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListPage<Id> {
    /// Which rows.
    pub liveness: Liveness,
    /// Only rows created before this one (the last id of the previous page).
    pub before: Option<Id>,
    /// Most rows.
    pub limit: u32,
}

fn prefixed(columns: &str, alias: &str) -> String {
    columns
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store<'_> {
    /// The organization's sessions (both agents its own), newest first.
    pub async fn org_sessions(
        &self,
        org: OrganizationId,
        page: ListPage<SessionId>,
    ) -> Result<Vec<Session>> {
        // Parameters in the order they appear: $1 the organization, then the cursor, the limit.
        let (before, limit) = if page.before.is_some() {
            (" AND s.id < $2", "$3")
        } else {
            ("", "$2")
        };
        let sql = format!(
            "SELECT {} FROM protocol_sessions s \
             JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id \
             WHERE a.organization_id = $1 AND b.organization_id = $1{}{before} \
             ORDER BY s.id DESC LIMIT {limit}",
            prefixed(SESSION_COLUMNS, "s"),
            page.liveness.condition("s"),
        );
        let mut query = pattern_db::sql::query(sqlx::AssertSqlSafe(sql)).bind(org.to_string());
        if let Some(before) = page.before {
            query = query.bind(before.to_string());
        }
        query = query.bind(i64::from(page.limit));
        rows(query.fetch_all(self.db.reader()).await?, session_from_row)
    }

    /// The organization's meetings (hosted by its agents), newest first.
    pub async fn org_meetings(
        &self,
        org: OrganizationId,
        page: ListPage<MeetingId>,
    ) -> Result<Vec<Meeting>> {
        // Parameters in the order they appear: $1 the organization, then the cursor, the limit.
        let (before, limit) = if page.before.is_some() {
            (" AND m.id < $2", "$3")
        } else {
            ("", "$2")
        };
        let sql = format!(
            "SELECT {} FROM protocol_meetings m JOIN agents h ON h.id = m.host_id \
             WHERE h.organization_id = $1{}{before} ORDER BY m.id DESC LIMIT {limit}",
            prefixed(MEETING_COLUMNS, "m"),
            page.liveness.condition("m"),
        );
        let mut query = pattern_db::sql::query(sqlx::AssertSqlSafe(sql)).bind(org.to_string());
        if let Some(before) = page.before {
            query = query.bind(before.to_string());
        }
        query = query.bind(i64::from(page.limit));
        rows(query.fetch_all(self.db.reader()).await?, meeting_from_row)
    }
}

fn rows<T>(rows: Vec<Row>, from_row: impl Fn(&Row) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(from_row).collect()
}
