//! Wake-ups of the agent-to-agent protocol across processes: the PostgreSQL `NOTIFY` channel
//! every protocol write sends on inside its transaction ([`crate::protocol::notify`]), what a
//! notification names ([`Wakeup`]), and the dedicated listening connection
//! ([`Database::protocol_wakeups`]). They stay here because sessions (whose message store a
//! batch completion writes) send them too; `pattern_protocol`'s handle listens.
//!
//! This module must never wake anyone itself: a `NOTIFY` is delivered at commit only.

use std::fmt;

use crate::StorageError;
use crate::config::Backend;
use crate::db::Database;
use crate::error::Result;
use crate::model::AgentId;
use crate::protocol::MeetingId;

/// The PostgreSQL `NOTIFY` channel of protocol wake-ups.
pub const WAKEUP_CHANNEL: &str = "pattern_protocol";

/// A protocol wake-up received from PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// Something concerns this agent (a message for it, a session of it ended).
    Agent(AgentId),
    /// Something happened in this meeting.
    Meeting(MeetingId),
    /// The connection was lost and re-established: wake-ups may have been missed, so every
    /// waiter should look again.
    Lost,
}

impl Wakeup {
    /// The notification's payload (what the listener reads back).
    pub fn payload(self) -> String {
        match self {
            Wakeup::Agent(a) => format!("a:{a}"),
            Wakeup::Meeting(m) => format!("m:{m}"),
            Wakeup::Lost => "lost".to_owned(),
        }
    }

    fn parse(payload: &str) -> Option<Self> {
        let (kind, id) = payload.split_once(':')?;
        let id = uuid::Uuid::parse_str(id).ok()?;
        match kind {
            "a" => Some(Wakeup::Agent(AgentId(id))),
            "m" => Some(Wakeup::Meeting(MeetingId(id))),
            _ => None,
        }
    }
}

/// A dedicated PostgreSQL connection listening for protocol wake-ups (`LISTEN`).
pub struct WakeupListener {
    inner: sqlx::postgres::PgListener,
}

impl fmt::Debug for WakeupListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeupListener").finish_non_exhaustive()
    }
}

impl WakeupListener {
    /// The next wake-up. After a lost connection it reconnects, re-listens and returns
    /// [`Wakeup::Lost`]; an error means it could not reconnect (call again to retry).
    pub async fn next(&mut self) -> Result<Wakeup> {
        loop {
            match self.inner.try_recv().await? {
                None => return Ok(Wakeup::Lost),
                Some(n) => {
                    if let Some(w) = Wakeup::parse(n.payload()) {
                        return Ok(w);
                    }
                }
            }
        }
    }
}

impl Database {
    /// A listener for protocol wake-ups on PostgreSQL (a dedicated connection that has run
    /// `LISTEN` before this returns, so no wake-up committed afterwards is missed); `None` on
    /// SQLite, which has no cross-process notifications.
    pub async fn protocol_wakeups(&self) -> Result<Option<WakeupListener>> {
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        let mut inner = sqlx::postgres::PgListener::connect(self.url())
            .await
            .map_err(|source| StorageError::Connect {
                backend: "postgres",
                url: crate::error::redact_url(self.url()),
                source,
            })?;
        inner.listen(WAKEUP_CHANNEL).await?;
        Ok(Some(WakeupListener { inner }))
    }
}
