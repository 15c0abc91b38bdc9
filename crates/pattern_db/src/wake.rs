//! Wake-ups for runs and turns: one [`tokio::sync::Notify`] per key, woken after a commit that
//! concerns it, in this process directly and, on PostgreSQL, in every process through
//! `NOTIFY pattern_runs` sent inside the writing transaction (delivered at commit only).
//!
//! Keys: a turn's log grew or it finished ([`WakeKey::Turn`]); someone asked to cancel a turn
//! ([`WakeKey::Cancel`]); an agent's claim was released or its queue grew ([`WakeKey::Agent`]);
//! some agent's queue changed ([`WakeKey::Queue`]); an approval request was decided
//! ([`WakeKey::Approval`]). A wake-up carries no data: the database is
//! the only truth, and a waiter registers before it reads and sleeps after, so nothing committed
//! in between is missed. Channels nobody holds are dropped, so the map does not grow with every
//! turn a long-lived server ever followed. On SQLite another process's commits are not
//! announced: waiters also wake at their own deadlines. This module must never hold its lock
//! across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::sql::Conn;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;
use uuid::Uuid;

use crate::config::Backend;
use crate::error::Result;
use crate::id::SnowflakeId;
use crate::model::AgentId;
use crate::runs::TurnId;

/// The PostgreSQL `NOTIFY` channel of run and turn wake-ups.
pub const RUNS_CHANNEL: &str = "pattern_runs";

/// What a waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeKey {
    /// The turn's log grew, or it finished.
    Turn(TurnId),
    /// Someone asked to cancel the turn.
    Cancel(TurnId),
    /// The agent's claim was released, or its queue grew.
    Agent(AgentId),
    /// Some agent's queue changed or a claim was released.
    Queue,
    /// An approval request was decided (or timed out, or abandoned).
    Approval(SnowflakeId),
}

impl WakeKey {
    pub(crate) fn payload(self) -> String {
        match self {
            WakeKey::Turn(t) => format!("t:{t}"),
            WakeKey::Cancel(t) => format!("c:{t}"),
            WakeKey::Agent(a) => format!("a:{a}"),
            WakeKey::Queue => "q".to_owned(),
            WakeKey::Approval(id) => format!("p:{id}"),
        }
    }

    fn parse(payload: &str) -> Option<Self> {
        if payload == "q" {
            return Some(WakeKey::Queue);
        }
        let (kind, id) = payload.split_once(':')?;
        if kind == "p" {
            return id.parse().ok().map(|n| WakeKey::Approval(SnowflakeId(n)));
        }
        let id = Uuid::parse_str(id).ok()?;
        match kind {
            "t" => Some(WakeKey::Turn(TurnId(id))),
            "c" => Some(WakeKey::Cancel(TurnId(id))),
            "a" => Some(WakeKey::Agent(AgentId(id))),
            _ => None,
        }
    }
}

/// Channels by key, and (PostgreSQL) the task that turns other processes' `NOTIFY`s into the
/// same wake-ups.
#[derive(Debug)]
pub struct Hub {
    channels: Mutex<Channels>,
    backend: Backend,
    url: String,
    listener: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Channels {
    map: HashMap<WakeKey, Weak<Notify>>,
    /// Size after the last sweep of dropped channels.
    swept: usize,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

impl Hub {
    pub(crate) fn new(backend: Backend, url: String) -> Self {
        Self {
            channels: Mutex::new(Channels::default()),
            backend,
            url,
            listener: Mutex::new(None),
        }
    }

    /// The channel of `key`, created on first use (and, on PostgreSQL, the listener started).
    /// Hold it while waiting: a channel nobody holds is dropped.
    pub fn subscribe(self: &Arc<Self>, key: WakeKey) -> Arc<Notify> {
        self.ensure_listener();
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(live) = channels.map.get(&key).and_then(Weak::upgrade) {
            return live;
        }
        let fresh = Arc::new(Notify::new());
        channels.map.insert(key, Arc::downgrade(&fresh));
        if channels.map.len() > 256 && channels.map.len() > 2 * channels.swept {
            channels.map.retain(|_, w| w.strong_count() > 0);
            channels.swept = channels.map.len();
        }
        fresh
    }

    /// Channels currently held by someone (for tests and the soak benchmark).
    pub fn channels(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Wakes every current waiter of `key` in this process.
    pub fn wake(&self, key: WakeKey) {
        let channel = self
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .get(&key)
            .and_then(Weak::upgrade);
        if let Some(channel) = channel {
            channel.notify_waiters();
        }
    }

    /// Wakes every waiter on a turn or a cancellation (after recovery finished turns).
    pub fn wake_turns(&self) {
        self.wake_matching(|k| matches!(k, WakeKey::Turn(_) | WakeKey::Cancel(_)));
    }

    /// Wakes every waiter (after wake-ups may have been lost).
    pub fn wake_all(&self) {
        self.wake_matching(|_| true);
    }

    fn wake_matching(&self, pick: impl Fn(&WakeKey) -> bool) {
        let all: Vec<Arc<Notify>> = self
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .iter()
            .filter(|(k, _)| pick(k))
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for channel in all {
            channel.notify_waiters();
        }
    }

    fn ensure_listener(self: &Arc<Self>) {
        if self.backend != Backend::Postgres {
            return;
        }
        let mut slot = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let weak = Arc::downgrade(self);
        let url = self.url.clone();
        *slot = Some(tokio::spawn(listen(weak, url)));
    }
}

async fn listen(hub: Weak<Hub>, url: String) {
    loop {
        let listener = async {
            let mut l = sqlx::postgres::PgListener::connect(&url).await?;
            l.listen(RUNS_CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        let mut listener = match listener {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot listen for run wake-ups; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                if hub.strong_count() == 0 {
                    return;
                }
                continue;
            }
        };
        // Anything committed before the listener was up may have been missed.
        match hub.upgrade() {
            Some(h) => h.wake_all(),
            None => return,
        }
        loop {
            let next = listener.try_recv().await;
            let Some(h) = hub.upgrade() else { return };
            match next {
                Ok(Some(n)) => {
                    if let Some(key) = WakeKey::parse(n.payload()) {
                        h.wake(key);
                    }
                }
                // The connection was lost and re-established: wake everyone to look again.
                Ok(None) => h.wake_all(),
                Err(e) => {
                    warn!(error = %e, "run wake-up listener failed; reconnecting");
                    h.wake_all();
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// On PostgreSQL, queues `NOTIFY`s for `keys` inside the current transaction (delivered when,
/// and only if, it commits). Nothing on SQLite.
pub(crate) async fn notify(conn: &mut Conn<'_>, backend: Backend, keys: &[WakeKey]) -> Result<()> {
    if backend != Backend::Postgres {
        return Ok(());
    }
    if let Conn::Postgres(c) = conn {
        for key in keys {
            pattern_db_postgres::wake::notify(c, RUNS_CHANNEL, &key.payload()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        for key in [
            WakeKey::Turn(TurnId::new()),
            WakeKey::Cancel(TurnId::new()),
            WakeKey::Agent(AgentId::new()),
            WakeKey::Queue,
            WakeKey::Approval(SnowflakeId(1234567890123)),
        ] {
            assert_eq!(WakeKey::parse(&key.payload()), Some(key));
        }
        assert_eq!(WakeKey::parse("x:1"), None);
    }

    #[tokio::test]
    async fn channels_nobody_holds_are_dropped() {
        let hub = Arc::new(Hub::new(Backend::Sqlite, String::new()));
        let kept = hub.subscribe(WakeKey::Queue);
        for _ in 0..2000 {
            drop(hub.subscribe(WakeKey::Turn(TurnId::new())));
        }
        assert!(
            hub.channels.lock().unwrap().map.len() < 600,
            "dropped channels are swept"
        );
        assert_eq!(hub.channels(), 1);
        let mut waiting = std::pin::pin!(kept.notified());
        waiting.as_mut().enable();
        hub.wake(WakeKey::Queue);
        assert!(futures::poll!(waiting.as_mut()).is_ready());
    }
}
