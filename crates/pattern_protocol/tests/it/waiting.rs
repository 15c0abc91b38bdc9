//! `next_message` and `wait_for_turn`: woken by sends through the handle well before their
//! timeout, `None`/`false` on timeout, and a send from another handle (standing in for another
//! process) seen at the latest at the timeout's re-check.

use std::time::{Duration, Instant};

use pattern_protocol::{Error, NewProtocolMessage, Protocol, SessionType};
use serde_json::json;

use crate::{Kind, agent, fresh, protocol};

const LONG: Duration = Duration::from_secs(20);
/// A woken waiter must return this much before its timeout at least.
const WELL_BEFORE: Duration = Duration::from_secs(5);

fn say(text: &str) -> NewProtocolMessage {
    NewProtocolMessage::new("chat", json!({ "text": text }))
}

async fn next_message_wakes_on_send(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let s = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();

    let waiter = {
        let p = p.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let got = p.next_message(b.id, LONG).await.unwrap();
            (got, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = p.send(s.id, a.id, say("wake up")).await.unwrap();
    let (got, waited) = waiter.await.unwrap();
    assert_eq!(got, Some(sent.clone()));
    assert!(waited < WELL_BEFORE, "woken after {waited:?}");

    // Not marked read: returned again at once, until marked.
    let again = p.next_message(b.id, LONG).await.unwrap();
    assert_eq!(again.as_ref().map(|m| m.id), Some(sent.id));
    assert_eq!(p.mark_read(b.id, &[sent.id]).await.unwrap(), 1);
    assert_eq!(p.unread_count(b.id).await.unwrap(), 0);
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn next_message_times_out_with_none(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let s = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    // A message for someone else does not count.
    p.send(s.id, b.id, say("for ada")).await.unwrap();
    let start = Instant::now();
    let got = p
        .next_message(b.id, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(got, None);
    assert!(start.elapsed() >= Duration::from_millis(300));

    // A send through another handle (another process, as far as the notifier knows): on SQLite
    // not a wake-up, but the re-check at the timeout sees it; on PostgreSQL its NOTIFY wakes the
    // waiter (the multi-process case is in `races`).
    let other = Protocol::new(p.db().clone()).await.unwrap();
    let waiter = {
        let p = p.clone();
        tokio::spawn(async move { p.next_message(b.id, Duration::from_millis(800)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = other.send(s.id, a.id, say("from afar")).await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), Some(sent));
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

async fn wait_for_turn_wakes_when_the_other_side_speaks(kind: Kind) {
    let tdb = fresh(kind).await;
    let p = protocol(&tdb).await;
    let (a, b) = (agent(&p, "ada").await, agent(&p, "bob").await);
    let s = p.open_session(a.id, b.id, SessionType::Sync).await.unwrap();
    // The opener holds the turn: no wait.
    assert!(p.wait_for_turn(s.id, a.id, LONG).await.unwrap());
    assert!(
        !p.wait_for_turn(s.id, b.id, Duration::from_millis(200))
            .await
            .unwrap()
    );

    let waiter = {
        let p = p.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let turn = p.wait_for_turn(s.id, b.id, LONG).await.unwrap();
            (turn, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.send(s.id, a.id, say("your turn")).await.unwrap();
    let (turn, waited) = waiter.await.unwrap();
    assert!(turn);
    assert!(waited < WELL_BEFORE, "woken after {waited:?}");
    let refused = p.send(s.id, a.id, say("again")).await.unwrap_err();
    assert!(refused.is_out_of_turn(), "{refused}");

    // Ending wakes the waiter, which learns the session is over.
    let waiter = {
        let p = p.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            (p.wait_for_turn(s.id, a.id, LONG).await, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.end_session(s.id, b.id).await.unwrap();
    let (ended, waited) = waiter.await.unwrap();
    assert!(ended.unwrap_err().is_session_ended());
    assert!(waited < WELL_BEFORE, "woken after {waited:?}");

    let inbox = p
        .open_session(a.id, b.id, SessionType::Async)
        .await
        .unwrap();
    assert!(matches!(
        p.wait_for_turn(inbox.id, a.id, LONG).await,
        Err(Error::NoTurns(_))
    ));
    let eve = agent(&p, "eve").await;
    assert!(
        p.wait_for_turn(s.id, eve.id, LONG)
            .await
            .unwrap_err()
            .is_not_participant()
    );
    p.db().clone().close().await;
    tdb.cleanup().await.unwrap();
}

macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::Kind::Postgres).await
                }
            )*
        }
    };
}

on_both!(
    next_message_wakes_on_send,
    next_message_times_out_with_none,
    wait_for_turn_wakes_when_the_other_side_speaks,
);
