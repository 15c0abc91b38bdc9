//! The in-process notifier: one [`tokio::sync::Notify`] per protocol agent and per meeting, woken
//! when something concerning it is committed, and (on PostgreSQL) the task that turns
//! `LISTEN/NOTIFY` wake-ups from every process into the same in-process wake-ups.
//!
//! Waiters register (`enable`) before they check the database and sleep only after, so a wake-up
//! that comes between the check and the sleep is not lost. A wake-up carries no data: the
//! database is the only truth. This module must never hold a lock across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pattern_db::{MeetingId, ProtocolAgentId, Wakeup, WakeupListener};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What a waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Agent(ProtocolAgentId),
    Meeting(MeetingId),
}

/// Wake-up channels by key.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    channels: Mutex<HashMap<Key, Arc<Notify>>>,
}

impl Notifier {
    /// The channel of `key` (created on first use).
    pub(crate) fn channel(&self, key: Key) -> Arc<Notify> {
        let mut channels = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        channels.entry(key).or_default().clone()
    }

    /// Wakes every current waiter of `key`.
    pub(crate) fn wake(&self, key: Key) {
        let channel = {
            let channels = self
                .channels
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            channels.get(&key).cloned()
        };
        if let Some(channel) = channel {
            channel.notify_waiters();
        }
    }

    /// Wakes every waiter (after wake-ups may have been lost).
    pub(crate) fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = {
            let channels = self
                .channels
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            channels.values().cloned().collect()
        };
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
        let a = Key::Agent(ProtocolAgentId::new());
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
}
