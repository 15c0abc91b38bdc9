//! Strict alternation as a property: for any sequence of send attempts by the two agents of a
//! sync session, the stored messages alternate senders starting with the opener, every accepted
//! attempt is stored in order, and every refused attempt was out of turn.

use pattern_protocol::{NewProtocolMessage, Protocol, SessionType};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;

use crate::{Kind, agent, fresh, protocol};

fn alternation(kind: Kind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tdb = rt.block_on(fresh(kind));
    let p: Protocol = rt.block_on(protocol(&tdb));
    let case = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    let attempts = prop::collection::vec((any::<bool>(), "[a-z]{0,8}"), 0..24);
    runner
        .run(&attempts, |attempts| {
            case.set(case.get() + 1);
            rt.block_on(check(&p, case.get(), attempts));
            Ok(())
        })
        .unwrap();
    rt.block_on(async {
        p.db().clone().close().await;
        tdb.cleanup().await.unwrap();
    });
}

/// `attempts`: (sent by the opener?, text).
async fn check(p: &Protocol, case: u32, attempts: Vec<(bool, String)>) {
    let opener = agent(p, &format!("opener-{case}")).await;
    let other = agent(p, &format!("other-{case}")).await;
    let s = p
        .open_session(opener.id, other.id, SessionType::Sync)
        .await
        .unwrap();
    let mut accepted = Vec::new();
    for (by_opener, text) in attempts {
        let sender = if by_opener { opener.id } else { other.id };
        let before = p.session(s.id).await.unwrap().turn;
        match p
            .send(s.id, sender, NewProtocolMessage::new("say", json!(text)))
            .await
        {
            Ok(m) => {
                assert_eq!(before, Some(sender), "a send out of turn was accepted");
                accepted.push((sender, m.content));
            }
            Err(e) => {
                assert!(e.is_out_of_turn(), "refused for another reason: {e}");
                assert_ne!(before, Some(sender), "a send in turn was refused");
            }
        }
    }
    let stored = p.session_messages(s.id).await.unwrap();
    let stored: Vec<_> = stored.into_iter().map(|m| (m.sender, m.content)).collect();
    assert_eq!(stored, accepted);
    for (i, (sender, _)) in stored.iter().enumerate() {
        let expected = if i % 2 == 0 { opener.id } else { other.id };
        assert_eq!(*sender, expected, "message {i} breaks the alternation");
    }
}

#[test]
fn sqlite_sync_sessions_alternate_strictly() {
    alternation(Kind::Sqlite);
}

#[test]
fn postgres_sync_sessions_alternate_strictly() {
    alternation(Kind::Postgres);
}
