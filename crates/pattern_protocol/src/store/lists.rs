//! Organization-scoped lists of sessions and meetings, newest first, paged by id (ids are UUID
//! v7, so their text order is their creation order): what a front door serving several
//! organizations lists (the HTTP server's `GET /v1/sessions` and `GET /v1/meetings`).
//!
//! A session is the organization's when both its agents are; a meeting when its host is. Each
//! choice of rows (all, live, ended) and cursor (first page or not) is its own checked statement
//! (`pattern_db_sqlite::protocol::lists`, `pattern_db_postgres::protocol::lists`), so each keeps
//! its plan. This module must never list a row of another organization.

use pattern_db::storage::Conn;
use pattern_db::{MeetingId, OrganizationId, Result, Session, SessionId};

use super::Store;
use super::meetings::converted;
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

/// One page from the statement of its rows and cursor (`$q` one engine's `lists` module; the
/// engine's organization, cursor and limit values).
macro_rules! page {
    ($q:ident, $c:expr, $org:expr, $before:expr, $liveness:expr, $limit:expr,
     $all:ident, $all_before:ident, $live:ident, $live_before:ident, $ended:ident,
     $ended_before:ident) => {
        match ($liveness, $before) {
            (Liveness::All, None) => $q::$all($c, $org, $limit).await?,
            (Liveness::All, Some(b)) => $q::$all_before($c, $org, b, $limit).await?,
            (Liveness::Live, None) => $q::$live($c, $org, $limit).await?,
            (Liveness::Live, Some(b)) => $q::$live_before($c, $org, b, $limit).await?,
            (Liveness::Ended, None) => $q::$ended($c, $org, $limit).await?,
            (Liveness::Ended, Some(b)) => $q::$ended_before($c, $org, b, $limit).await?,
        }
    };
}

impl Store<'_> {
    /// The organization's sessions (both agents its own), newest first.
    pub async fn org_sessions(
        &self,
        org: OrganizationId,
        page: ListPage<SessionId>,
    ) -> Result<Vec<Session>> {
        let limit = i64::from(page.limit);
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                use pattern_db_sqlite::protocol::lists as q;
                let (org, before) = (org.to_string(), page.before.map(|b| b.to_string()));
                converted(page!(
                    q,
                    c,
                    &org,
                    before.as_deref(),
                    page.liveness,
                    limit,
                    org_sessions,
                    org_sessions_before,
                    org_live_sessions,
                    org_live_sessions_before,
                    org_ended_sessions,
                    org_ended_sessions_before
                ))
            }
            Conn::Postgres(c) => {
                use pattern_db_postgres::protocol::lists as q;
                converted(page!(
                    q,
                    c,
                    org.0,
                    page.before.map(|b| b.0),
                    page.liveness,
                    limit,
                    org_sessions,
                    org_sessions_before,
                    org_live_sessions,
                    org_live_sessions_before,
                    org_ended_sessions,
                    org_ended_sessions_before
                ))
            }
        }
    }

    /// The organization's meetings (hosted by its agents), newest first.
    pub async fn org_meetings(
        &self,
        org: OrganizationId,
        page: ListPage<MeetingId>,
    ) -> Result<Vec<Meeting>> {
        let limit = i64::from(page.limit);
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                use pattern_db_sqlite::protocol::lists as q;
                let (org, before) = (org.to_string(), page.before.map(|b| b.to_string()));
                converted(page!(
                    q,
                    c,
                    &org,
                    before.as_deref(),
                    page.liveness,
                    limit,
                    org_meetings,
                    org_meetings_before,
                    org_live_meetings,
                    org_live_meetings_before,
                    org_ended_meetings,
                    org_ended_meetings_before
                ))
            }
            Conn::Postgres(c) => {
                use pattern_db_postgres::protocol::lists as q;
                converted(page!(
                    q,
                    c,
                    org.0,
                    page.before.map(|b| b.0),
                    page.liveness,
                    limit,
                    org_meetings,
                    org_meetings_before,
                    org_live_meetings,
                    org_live_meetings_before,
                    org_ended_meetings,
                    org_ended_meetings_before
                ))
            }
        }
    }
}
