//! The in-process notifier: one [`tokio::sync::Notify`] per protocol agent and per meeting, woken
//! when something concerning it is committed, and (on PostgreSQL) the task that turns
//! `LISTEN/NOTIFY` wake-ups from every process into the same in-process wake-ups.
//!
//! Waiters register (`enable`) before they check the database and sleep only after, so a wake-up
//! that comes between the check and the sleep is not lost. A wake-up carries no data: the
//! database is the only truth. A channel lives while a waiter holds it: channels of meetings and
//! agents nobody waits for any more are dropped, so a server that runs for months does not keep
//! one per meeting it ever followed. This module must never hold a lock across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use pattern_db::{AgentId, MeetingId, Wakeup, WakeupListener};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What a waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Agent(AgentId),
    Meeting(MeetingId),
}

/// Wake-up channels by key, each held by its waiters only.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    channels: Mutex<Channels>,
}

#[derive(Debug, Default)]
struct Channels {
    map: HashMap<Key, Weak<Notify>>,
    /// Size after the last sweep of dropped channels.
    swept: usize,
}

impl Notifier {
    /// The channel of `key` (created on first use). Hold it while waiting.
    pub(crate) fn channel(&self, key: Key) -> Arc<Notify> {
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

    /// Channels kept now (held by a waiter, or dropped since the last sweep).
    pub(crate) fn kept(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .len()
    }

    /// Wakes every current waiter of `key`.
    pub(crate) fn wake(&self, key: Key) {
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

    /// Wakes every waiter (after wake-ups may have been lost).
    pub(crate) fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for channel in all {
            channel.notify_waiters();
        }
    }
}

/// The PostgreSQL listener task; stopped when dropped (with the last protocol handle).
#[derive(Debug)]
pub(crate) struct ListenerTask(JoinHandle<()>);

impl Drop for ListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the task that forwards `listener`'s wake-ups to `notifier`.
pub(crate) fn spawn_listener(listener: WakeupListener, notifier: &Arc<Notifier>) -> ListenerTask {
    let weak = Arc::downgrade(notifier);
    ListenerTask(tokio::spawn(forward(listener, weak)))
}

async fn forward(mut listener: WakeupListener, notifier: Weak<Notifier>) {
    loop {
        let next = listener.next().await;
        let Some(notifier) = notifier.upgrade() else {
            return;
        };
        match next {
            Ok(Wakeup::Agent(agent)) => notifier.wake(Key::Agent(agent)),
            Ok(Wakeup::Meeting(meeting)) => notifier.wake(Key::Meeting(meeting)),
            Ok(Wakeup::Lost) => notifier.wake_all(),
            Err(e) => {
                // Could not reconnect: waiters fall back on their deadlines; try again shortly.
                tracing::warn!(error = %e, "protocol wake-up listener lost its connection");
                notifier.wake_all();
                drop(notifier);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wake_reaches_only_its_key_and_wake_all_reaches_every_key() {
        let n = Notifier::default();
        let a = Key::Agent(AgentId::new());
        let m = Key::Meeting(MeetingId::new());
        let (ca, cm) = (n.channel(a), n.channel(m));
        let mut wa = std::pin::pin!(ca.notified());
        let mut wm = std::pin::pin!(cm.notified());
        wa.as_mut().enable();
        wm.as_mut().enable();
        n.wake(a);
        assert!(futures::poll!(wa.as_mut()).is_ready());
        assert!(futures::poll!(wm.as_mut()).is_pending());
        n.wake_all();
        assert!(futures::poll!(wm.as_mut()).is_ready());
    }

    #[test]
    fn channels_nobody_waits_on_are_dropped() {
        let n = Notifier::default();
        let held = n.channel(Key::Meeting(MeetingId::new()));
        for _ in 0..5000 {
            drop(n.channel(Key::Meeting(MeetingId::new())));
        }
        assert!(n.kept() < 600, "{} channels kept", n.kept());
        assert!(Arc::strong_count(&held) >= 1);
    }
}
