//! Agents that converse through the protocol (migration `0015_agents_converse`, decision 0020),
//! on both backends: a session message the agents answer becomes the recipient's trigger in the
//! transaction that stores it, is marked read only when the batch that consumed it completes
//! (a crashed run's retry delivers the same message), a sync session's reply is the recipient's
//! final answer, limits end sessions (moved from `pattern_db` with the session SQL; the
//! selector meeting's chosen hand-over is in `storage`).

use pattern_db::{AgentError, ProtocolError};
use pattern_db::{
    AgentId, BatchType, Database, Delivery, Error, NewAgent, NewMessage, RunEnding, SessionOptions,
    SessionStatus, SessionType,
};
use pattern_protocol::ProtocolError as Refusal;
use pattern_protocol::store::Store;

use crate::{Kind, agents, fresh, text};

/// Claims `agent`'s next queue entry and completes its batch with `answer` as the final answer
/// (the way a run ends), returning the trigger's text.
async fn answer(db: &Database, agent: AgentId, answer: &str) -> String {
    let started = db
        .claim_next(agent)
        .await
        .unwrap()
        .expect("a queued trigger");
    assert_eq!(started.batch_type, BatchType::AgentToAgent);
    let trigger = db
        .messages(agent)
        .get_batch(started.received.batch_id)
        .await
        .unwrap()
        .messages[0]
        .text();
    db.run_step(
        started.claim,
        started.received.batch_id,
        started.turn.id,
        vec![NewMessage::assistant(answer)],
        Vec::new(),
    )
    .await
    .unwrap();
    db.finish_run(
        started.claim,
        started.received.batch_id,
        started.turn.id,
        RunEnding::Complete,
        Vec::new(),
        false,
    )
    .await
    .unwrap();
    trigger
}

async fn a_sync_session_is_held_by_the_agents(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (_, ids) = agents(&db, &["ada", "bob"]).await;
    let (ada, bob) = (ids[0], ids[1]);
    let (session, first) = store
        .open_session_with(
            ada,
            bob,
            SessionType::Sync,
            SessionOptions::agents(Some(4)),
            Some(text("ping 1")),
        )
        .await
        .unwrap();
    let first = first.unwrap();
    assert_eq!(session.delivery, Delivery::Agents);
    assert_eq!(session.turn, Some(bob));
    // The message is bob's trigger, queued in the same write, and unread until bob's batch ends.
    let queued = db.pending_queue(bob).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].protocol_message, Some(first.id));
    assert_eq!(queued[0].source, format!("session:{}", session.id));
    assert_eq!(store.unread(bob).await.unwrap().len(), 1);

    let trigger = answer(&db, bob, "pong 1").await;
    assert!(
        trigger.starts_with("[message from agent ada in sync session")
            && trigger.ends_with("ping 1"),
        "{trigger}"
    );
    assert!(
        store.unread(bob).await.unwrap().is_empty(),
        "read on completion"
    );
    // Bob's final answer went back into the session as his reply: ada's turn, ada's trigger.
    let now = store.session(session.id).await.unwrap();
    assert_eq!((now.turn, now.messages_sent), (Some(ada), 2));
    answer(&db, ada, "ping 2").await;
    answer(&db, bob, "pong 2").await;
    // The fourth message reached the limit: the session ended in that write.
    let ended = store.session(session.id).await.unwrap();
    assert_eq!(ended.status, SessionStatus::Ended);
    assert_eq!(ended.messages_sent, 4);
    // Ada still gets the last message; her answer goes nowhere (the session ended).
    answer(&db, ada, "bye").await;
    let said: Vec<(AgentId, String)> = store
        .session_messages(session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.sender, m.content["text"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        said,
        [
            (ada, "ping 1".to_owned()),
            (bob, "pong 1".to_owned()),
            (ada, "ping 2".to_owned()),
            (bob, "pong 2".to_owned()),
        ]
    );
    assert!(store.unread(ada).await.unwrap().is_empty());
    assert!(store.unread(bob).await.unwrap().is_empty());
    assert!(db.claim_next(ada).await.unwrap().is_none());
    assert!(db.claim_next(bob).await.unwrap().is_none());
    // Past the limit nothing more is stored.
    let err = store
        .send_session_message(session.id, ada, text("more"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Protocol(ProtocolError::SessionEnded(_))),
        "{err}"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn a_crashed_delivery_is_retried_and_read_only_when_answered(kind: Kind) {
    let tdb = fresh(kind).await;
    let first = tdb.open().await.unwrap();
    let (_, ids) = agents(&first, &["ada", "bob"]).await;
    let (ada, bob) = (ids[0], ids[1]);
    let (session, _) = Store::new(&first)
        .open_session_with(
            ada,
            bob,
            SessionType::Async,
            SessionOptions::agents(None),
            Some(text("are you there?")),
        )
        .await
        .unwrap();
    let started = first.claim_next(bob).await.unwrap().unwrap();
    first.crash().await;

    // The next process abandons the dead run and queues the same message once more.
    let second = tdb.open().await.unwrap();
    second.messages(bob).recover().await.unwrap();
    assert_eq!(
        Store::new(&second).unread(bob).await.unwrap().len(),
        1,
        "not read yet"
    );
    let retry = second.pending_queue(bob).await.unwrap();
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].retry_of, Some(started.received.batch_id));
    assert!(retry[0].protocol_message.is_some());
    let trigger = answer(&second, bob, "yes").await;
    assert!(trigger.ends_with("are you there?"), "{trigger}");
    assert!(Store::new(&second).unread(bob).await.unwrap().is_empty());
    // An async session takes no automatic reply.
    assert_eq!(
        Store::new(&second)
            .session_messages(session.id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(second.pending_queue(ada).await.unwrap().is_empty());
    second.close().await;
    tdb.cleanup().await.unwrap();
}

async fn sessions_refuse_bad_opens_with_nothing_stored(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let store = Store::new(&db);
    let (_, ids) = agents(&db, &["ada", "bob"]).await;
    let other = db.create_organization("globex", "Globex").await.unwrap();
    let stranger = db
        .create_agent(NewAgent::named("eve").in_organization(other.id))
        .await
        .unwrap()
        .id;
    let refusals = [
        store
            .open_session_with(
                ids[0],
                stranger,
                SessionType::Sync,
                SessionOptions::agents(Some(4)),
                Some(text("hi")),
            )
            .await
            .unwrap_err(),
        store
            .open_session_with(
                ids[0],
                ids[0],
                SessionType::Sync,
                SessionOptions::agents(Some(4)),
                Some(text("hi")),
            )
            .await
            .unwrap_err(),
        store
            .open_session_with(
                ids[0],
                ids[1],
                SessionType::Sync,
                SessionOptions::agents(Some(0)),
                Some(text("hi")),
            )
            .await
            .unwrap_err(),
    ];
    assert!(
        matches!(
            refusals[0],
            Error::Agent(AgentError::OtherOrganization { .. })
        ),
        "{}",
        refusals[0]
    );
    assert!(
        matches!(Refusal::of(&refusals[1]), Some(Refusal::SelfSession(_))),
        "{}",
        refusals[1]
    );
    assert!(
        matches!(
            refusals[2],
            Error::Protocol(ProtocolError::InvalidMessage(_))
        ),
        "{}",
        refusals[2]
    );
    for id in [ids[0], ids[1], stranger] {
        assert!(db.pending_queue(id).await.unwrap().is_empty());
        assert!(store.unread(id).await.unwrap().is_empty());
    }
    assert!(store.active_conversations().await.unwrap().is_empty());
    // An inbox session (outside clients) queues nothing; opened again for agents, it becomes one.
    let inbox = store
        .open_session(ids[0], ids[1], SessionType::Async)
        .await
        .unwrap();
    store
        .send_session_message(inbox.id, ids[0], text("for the inbox"))
        .await
        .unwrap();
    assert!(db.pending_queue(ids[1]).await.unwrap().is_empty());
    let (upgraded, _) = store
        .open_session_with(
            ids[0],
            ids[1],
            SessionType::Async,
            SessionOptions::agents(Some(3)),
            Some(text("now for bob himself")),
        )
        .await
        .unwrap();
    assert_eq!(upgraded.id, inbox.id);
    assert_eq!(upgraded.delivery, Delivery::Agents);
    assert_eq!(
        upgraded.message_limit,
        Some(4),
        "counted from the messages already sent"
    );
    assert_eq!(db.pending_queue(ids[1]).await.unwrap().len(), 1);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    a_sync_session_is_held_by_the_agents,
    a_crashed_delivery_is_retried_and_read_only_when_answered,
    sessions_refuse_bad_opens_with_nothing_stored,
);
