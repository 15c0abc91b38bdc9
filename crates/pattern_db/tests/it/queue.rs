//! The agent queue and explicit abandonment, on both backends: entries are delivered exactly
//! once (also when deliveries race), recurring wakeups move on, cancelled entries never run.

use pattern_db::BatchError;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pattern_db::queue::NewQueued;
use pattern_db::{
    BatchState, BatchType, BeginBatch, ContentBlock, Error, NewAgent, NewMessage, Role,
};

use crate::{Kind, fresh};

fn text(t: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(t)]
}

async fn queue_delivers_once_in_arrival_order(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = Arc::new(tdb.open().await.unwrap());
    let agent = db.create_agent(NewAgent::named("q")).await.unwrap().id;
    let first = db
        .enqueue(
            agent,
            NewQueued::now(BatchType::UserRequest, Role::User, text("one")),
        )
        .await
        .unwrap();
    let second = db
        .enqueue(
            agent,
            NewQueued::now(BatchType::AgentToAgent, Role::User, text("two")),
        )
        .await
        .unwrap();
    let later = db
        .enqueue(
            agent,
            NewQueued {
                deliver_at: Some(Utc::now() + chrono::Duration::hours(1)),
                ..NewQueued::now(BatchType::SystemTrigger, Role::System, text("later"))
            },
        )
        .await
        .unwrap();
    let pending: Vec<_> = db
        .pending_queue(agent)
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert_eq!(pending, [first.id, second.id, later.id]);
    let due: Vec<_> = db
        .due_queue(Utc::now(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert_eq!(due, [first.id, second.id]);
    // Entries due already wait for their agent's claim; the next time to wake is `later`'s.
    assert_eq!(
        db.next_queue_due()
            .await
            .unwrap()
            .map(|t| t.timestamp_millis()),
        Some(later.deliver_at.timestamp_millis())
    );

    // Eight racing deliveries of the same entry: exactly one begins a batch.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let db = db.clone();
        let id = first.id;
        tasks.push(tokio::spawn(
            async move { db.begin_queued(agent, id).await },
        ));
    }
    let mut delivered = Vec::new();
    for t in tasks {
        if let Some(d) = t.await.unwrap().unwrap() {
            delivered.push(d);
        }
    }
    assert_eq!(delivered.len(), 1, "one delivery wins");
    let d = &delivered[0];
    assert_eq!(d.entry.deliveries, 1);
    assert_eq!(d.entry.delivered_batch, Some(d.received.batch_id));
    let batch = db
        .messages(agent)
        .get_batch(d.received.batch_id)
        .await
        .unwrap();
    assert_eq!(batch.info.state, BatchState::Open);
    assert_eq!(batch.info.batch_type, BatchType::UserRequest);
    assert_eq!(batch.messages[0].content, text("one"));

    // Not due yet: nothing happens. Cancelled: never delivered.
    assert!(db.begin_queued(agent, later.id).await.unwrap().is_none());
    assert!(db.cancel_queued(agent, later.id).await.unwrap());
    assert!(!db.cancel_queued(agent, later.id).await.unwrap());
    let pending: Vec<_> = db
        .pending_queue(agent)
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert_eq!(pending, [second.id]);
    let d2 = db.begin_queued(agent, second.id).await.unwrap().unwrap();
    let b2 = db
        .messages(agent)
        .batch_info(d2.received.batch_id)
        .await
        .unwrap();
    assert_eq!(b2.batch_type, BatchType::AgentToAgent);
    assert!(db.pending_queue(agent).await.unwrap().is_empty());
    tdb.cleanup().await.unwrap();
}

async fn recurring_wakeups_move_to_their_next_slot(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("w")).await.unwrap().id;
    let start = Utc::now() - chrono::Duration::seconds(25);
    let entry = db
        .enqueue(
            agent,
            NewQueued {
                deliver_at: Some(start),
                every: Some(Duration::from_secs(10)),
                source: "scheduler".into(),
                ..NewQueued::now(BatchType::SystemTrigger, Role::System, text("tick"))
            },
        )
        .await
        .unwrap();
    let d = db.begin_queued(agent, entry.id).await.unwrap().unwrap();
    // Missed slots are not replayed: the next one is the first after now.
    assert!(d.entry.deliver_at > Utc::now());
    assert!(d.entry.deliver_at <= Utc::now() + chrono::Duration::seconds(10));
    assert_eq!(
        (d.entry.deliver_at.timestamp_millis() - start.timestamp_millis()) % 10_000,
        0
    );
    assert!(
        d.entry.delivered_at.is_none(),
        "a recurring entry stays pending"
    );
    // Not due again until then.
    assert!(db.begin_queued(agent, entry.id).await.unwrap().is_none());
    assert_eq!(db.pending_queue(agent).await.unwrap().len(), 1);
    tdb.cleanup().await.unwrap();
}

async fn bad_queue_entries_are_typed(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("b")).await.unwrap().id;
    let cases = [
        NewQueued::now(BatchType::Continuation, Role::User, text("x")),
        NewQueued::now(BatchType::UserRequest, Role::Assistant, text("x")),
        NewQueued {
            every: Some(Duration::from_millis(10)),
            ..NewQueued::now(BatchType::SystemTrigger, Role::System, text("x"))
        },
        NewQueued::now(
            BatchType::UserRequest,
            Role::User,
            vec![ContentBlock::tool_result("c1", "r", false)],
        ),
    ];
    for case in cases {
        let err = db.enqueue(agent, case).await.unwrap_err();
        assert!(
            matches!(err, Error::Batch(BatchError::InvalidContent(_))),
            "{err}"
        );
    }
    assert!(db.pending_queue(agent).await.unwrap().is_empty());
    tdb.cleanup().await.unwrap();
}

async fn abandon_batch_offers_the_trigger(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("x")).await.unwrap().id;
    let store = db.messages(agent);
    let r = store
        .begin_batch(
            NewMessage::new(Role::User, text("hello")),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    let abandoned = store
        .abandon_batch(r.batch_id, "model failed")
        .await
        .unwrap();
    assert_eq!(abandoned.batch.state, BatchState::Abandoned);
    assert_eq!(abandoned.trigger.id, r.message_id);
    let err = store.abandon_batch(r.batch_id, "again").await.unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::InvalidState { .. })),
        "{err}"
    );
    let events = store.recent_activity(5).await.unwrap();
    assert_eq!(events[0].kind, "batch_abandoned");
    assert_eq!(events[0].payload["reason"], "model failed");
    tdb.cleanup().await.unwrap();
}

/// An abandoned batch is retried once: the retry's trigger (a new batch or a queue entry) and the
/// mark on the abandoned batch are one write, so a repeated or concurrent retry stores nothing.
async fn an_abandoned_batch_is_retried_at_most_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = Arc::new(tdb.open().await.unwrap());
    let agent = db.create_agent(NewAgent::named("r")).await.unwrap().id;
    let store = db.messages(agent);
    let first = store
        .begin_batch(NewMessage::user("do it"), BeginBatch::default())
        .await
        .unwrap();
    // Not abandoned yet: refused, and the open batch is untouched.
    let retry_of = |batch| BeginBatch {
        retry_of: Some(batch),
        ..BeginBatch::default()
    };
    let err = store
        .begin_batch(NewMessage::user("do it"), retry_of(first.batch_id))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::InvalidState { .. })),
        "{err}"
    );
    store
        .abandon_batch(first.batch_id, "model failed")
        .await
        .unwrap();
    let live = store.count_live().await.unwrap();

    // Eight concurrent retries: exactly one stores its trigger.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let db = db.clone();
        let batch = first.batch_id;
        tasks.push(tokio::spawn(async move {
            db.messages(agent)
                .begin_batch(
                    NewMessage::user("do it"),
                    BeginBatch {
                        retry_of: Some(batch),
                        ..BeginBatch::default()
                    },
                )
                .await
        }));
    }
    let mut won = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(received) => won.push(received),
            Err(e) => assert!(
                matches!(e, Error::Batch(BatchError::AlreadyRetried { .. })),
                "{e}"
            ),
        }
    }
    assert_eq!(won.len(), 1, "exactly one retry begins a batch");
    assert_eq!(store.count_live().await.unwrap(), live + 1);
    let abandoned = store.get_batch(first.batch_id).await.unwrap();
    assert!(abandoned.info.retried_at.is_some());
    assert_eq!(abandoned.info.state, BatchState::Abandoned);
    // The queue path claims the same mark: refused too, and no entry is left behind.
    let err = db
        .enqueue(
            agent,
            NewQueued {
                retry_of: Some(first.batch_id),
                ..NewQueued::now(BatchType::UserRequest, Role::User, text("do it"))
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::AlreadyRetried { .. })),
        "{err}"
    );
    assert!(db.pending_queue(agent).await.unwrap().is_empty());

    // A second abandoned batch retried through the queue: the entry and the mark are one write.
    store.complete_batch(won[0].batch_id).await.unwrap();
    let second = store
        .begin_batch(NewMessage::user("again"), BeginBatch::default())
        .await
        .unwrap();
    store
        .abandon_batch(second.batch_id, "cancelled")
        .await
        .unwrap();
    let entry = db
        .enqueue(
            agent,
            NewQueued {
                retry_of: Some(second.batch_id),
                ..NewQueued::now(BatchType::UserRequest, Role::User, text("again"))
            },
        )
        .await
        .unwrap();
    assert!(
        store
            .get_batch(second.batch_id)
            .await
            .unwrap()
            .info
            .retried_at
            .is_some()
    );
    let err = store
        .begin_batch(NewMessage::user("again"), retry_of(second.batch_id))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::AlreadyRetried { .. })),
        "{err}"
    );
    assert_eq!(db.pending_queue(agent).await.unwrap(), vec![entry]);
    // A recurring retry makes no sense: refused before anything is written.
    let err = db
        .enqueue(
            agent,
            NewQueued {
                retry_of: Some(second.batch_id),
                every: Some(Duration::from_secs(60)),
                ..NewQueued::now(BatchType::UserRequest, Role::User, text("again"))
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::InvalidContent(_))),
        "{err}"
    );
    // Unknown batches are not found.
    let err = store
        .begin_batch(NewMessage::user("x"), retry_of(pattern_db::SnowflakeId(42)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::NotFound { .. })),
        "{err}"
    );
    tdb.cleanup().await.unwrap();
}

conformance!(
    an_abandoned_batch_is_retried_at_most_once,
    queue_delivers_once_in_arrival_order,
    recurring_wakeups_move_to_their_next_slot,
    bad_queue_entries_are_typed,
    abandon_batch_offers_the_trigger,
);
