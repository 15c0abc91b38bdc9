//! Runs fenced in the database: claims, takeovers, fencing tokens, turns and their logs,
//! idempotency keys, cancellation, fair delivery, machine ids of dead processes, and the lock
//! order of write groups under concurrent writers. Two `Database` handles over one database
//! stand for two processes (each registers itself with its own liveness lock); `crash()` stops
//! one as a kill would.

use pattern_db::{BatchError, RunError, StorageError};
use std::time::Duration;

use pattern_db::queue::NewQueued;
use pattern_db::runs::{fenced, lifecycle};
use pattern_db::{
    BatchState, BatchType, BeginBatch, Database, Error, Idempotency, NewAgent, NewMessage, NewTurn,
    RecoveryScope, RunEnding, Started, Submit, Submitted, TurnOutcome, TurnState,
};

use crate::{Kind, fresh};

fn submit(agent: pattern_db::AgentId, text: &str) -> Submit {
    Submit {
        agent,
        trigger: NewMessage::user(text),
        batch_type: None,
        retry_of: None,
        turn: NewTurn::new("test"),
        start: true,
    }
}

fn started(s: Submitted) -> Started {
    match s {
        Submitted::Started(s) => *s,
        other => panic!("expected a start, got {other:?}"),
    }
}

fn event(kind: &str) -> pattern_db::NewTurnEvent {
    pattern_db::NewTurnEvent {
        kind: kind.into(),
        data: serde_json::json!({"type": kind}).to_string(),
    }
}

/// The first trigger claims the agent and begins its batch; the next one queues; finishing the
/// first hands the claim on to it (one transaction), and finishing that releases the claim.
async fn a_busy_agent_queues_and_the_run_hands_on(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let first = started(db.submit(submit(ada.id, "one")).await.unwrap());
    assert_eq!(first.turn.state, TurnState::Running);
    assert_eq!(first.turn.last_seq, 1, "the `received` event");
    let claim = db.run_claim(ada.id).await.unwrap().unwrap();
    assert_eq!(claim.token, first.claim.token);
    assert_eq!(claim.holder.as_deref(), Some(db.run_owner()));
    assert_eq!(claim.batch_id, Some(first.received.batch_id));

    let second = db.submit(submit(ada.id, "two")).await.unwrap();
    let Submitted::Queued { entry, turn } = second else {
        panic!("{second:?}")
    };
    assert_eq!(turn.state, TurnState::Queued);
    assert_eq!(turn.queue_id, Some(entry.id));
    let events = db.turn_events(turn.id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "queued");
    // A claimless batch cannot start while the run holds the agent.
    assert!(matches!(
        db.messages(ada.id)
            .begin_batch(NewMessage::user("sneaky"), BeginBatch::default())
            .await,
        Err(Error::Run(RunError::AgentBusy { .. }))
    ));

    db.run_step(
        first.claim,
        first.received.batch_id,
        first.turn.id,
        vec![NewMessage::assistant("hi")],
        vec![event("text_delta"), event("step_committed")],
    )
    .await
    .unwrap();
    let finished = db
        .finish_run(
            first.claim,
            first.received.batch_id,
            first.turn.id,
            RunEnding::Complete,
            vec![event("batch_completed"), event("done")],
            true,
        )
        .await
        .unwrap();
    assert_eq!(finished.batch.state, BatchState::Complete);
    assert_eq!(finished.turn.state, TurnState::Finished);
    assert_eq!(finished.turn.outcome, Some(TurnOutcome::Done));
    let seqs: Vec<u64> = db
        .turn_events(first.turn.id, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5], "dense and in order");
    let next = *finished.next.expect("handed on to the queued trigger");
    assert_eq!(next.claim, first.claim, "the same claim goes on");
    assert_eq!(next.turn.id, turn.id);
    assert_eq!(next.turn.state, TurnState::Running);
    assert_eq!(next.turn.batch_id, Some(next.received.batch_id));
    assert!(db.pending_queue(ada.id).await.unwrap().is_empty());
    // A finished turn takes nothing more.
    assert!(matches!(
        db.append_turn_events(first.claim, first.turn.id, vec![event("late")])
            .await,
        Err(Error::Run(RunError::TurnFinished(_)))
    ));
    let end = db
        .finish_run(
            next.claim,
            next.received.batch_id,
            next.turn.id,
            RunEnding::Abandon {
                reason: "test".into(),
            },
            vec![event("error")],
            true,
        )
        .await
        .unwrap();
    assert!(end.next.is_none());
    assert_eq!(end.turn.outcome, Some(TurnOutcome::Failed));
    assert_eq!(end.batch.state, BatchState::Abandoned);
    let claim = db.run_claim(ada.id).await.unwrap().unwrap();
    assert_eq!(claim.holder, None, "released");
    assert!(db.claims_held().await.unwrap().is_empty());
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Another process takes a run's agent over (recovery with every run fenced): the old run's
/// step, events, end and every write its task makes are refused, and nothing of them is stored.
async fn a_run_that_lost_its_claim_writes_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let run = started(a.submit(submit(ada.id, "one")).await.unwrap());
    let abandoned = b.recover_runs(RecoveryScope::AllOpen).await.unwrap();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].batch.id, run.received.batch_id);
    let turn = b.turn(ada.id, run.turn.id).await.unwrap();
    assert_eq!(turn.outcome, Some(TurnOutcome::Interrupted));
    let last = b.turn_events(run.turn.id, 0, 10).await.unwrap();
    assert_eq!(last.last().unwrap().kind, "error");
    assert!(last.last().unwrap().data.contains("interrupted"));

    fn lost<T>(r: Result<T, Error>) -> bool {
        matches!(r, Err(Error::Run(RunError::ClaimLost { .. })))
    }
    assert!(lost(
        a.run_step(
            run.claim,
            run.received.batch_id,
            run.turn.id,
            vec![NewMessage::assistant("too late")],
            vec![],
        )
        .await
    ));
    assert!(lost(
        a.append_turn_events(run.claim, run.turn.id, vec![event("x")])
            .await
    ));
    assert!(lost(
        a.finish_run(
            run.claim,
            run.received.batch_id,
            run.turn.id,
            RunEnding::Complete,
            vec![],
            false
        )
        .await
    ));
    // Whatever the run's task writes is fenced too (here: a queue entry for itself).
    let fenced_write = fenced(
        run.claim,
        a.enqueue(
            ada.id,
            NewQueued::now(
                BatchType::SystemTrigger,
                pattern_db::Role::System,
                vec![pattern_db::ContentBlock::text("wake")],
            ),
        ),
    )
    .await;
    assert!(lost(fenced_write));
    assert!(a.pending_queue(ada.id).await.unwrap().is_empty());
    let batch = a
        .messages(ada.id)
        .get_batch(run.received.batch_id)
        .await
        .unwrap();
    assert_eq!(batch.messages.len(), 1, "only the trigger");
    assert!(!a.release_claim(run.claim, "gone").await.unwrap());
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// A process that dies holding a run is seen dead at once (its liveness lock is gone): the next
/// trigger takes the agent over, the dead run's batch is abandoned and its turn ends
/// `interrupted`, and the dead process's machine id is free again.
async fn a_dead_process_is_taken_over_at_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let dead_machine = a.machine_id();
    let run = started(a.submit(submit(ada.id, "one")).await.unwrap());
    a.crash().await;

    let b = tdb.open().await.unwrap();
    assert_eq!(
        b.machine_id(),
        dead_machine,
        "the lowest machine id, held by a dead process, is free at once"
    );
    let next = started(b.submit(submit(ada.id, "two")).await.unwrap());
    assert!(next.claim.token > run.claim.token);
    let old = b
        .messages(ada.id)
        .batch_info(run.received.batch_id)
        .await
        .unwrap();
    assert_eq!(old.state, BatchState::Abandoned);
    let turn = b.turn(ada.id, run.turn.id).await.unwrap();
    assert_eq!(turn.outcome, Some(TurnOutcome::Interrupted));
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// A live process's run is never taken over: recovery leaves it, and a second process's
/// trigger waits in the queue.
async fn a_live_run_is_never_taken_over(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let run = started(a.submit(submit(ada.id, "one")).await.unwrap());
    assert!(
        b.recover_runs(RecoveryScope::ExpiredLeases)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        b.submit(submit(ada.id, "two")).await.unwrap(),
        Submitted::Queued { .. }
    ));
    assert!(b.claim_next(ada.id).await.unwrap().is_none());
    assert_eq!(
        a.messages(ada.id)
            .batch_info(run.received.batch_id)
            .await
            .unwrap()
            .state,
        BatchState::Open
    );
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// An idempotency key stored with its turn: the same request again finds the first turn (from
/// any handle), another request with it is refused, and nothing is stored twice.
async fn idempotency_keys_find_the_first_turn(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let keyed = |fingerprint: &str| {
        let mut s = submit(ada.id, "order two coffees");
        s.turn.idempotency = Some(Idempotency {
            key: "k-1".into(),
            fingerprint: fingerprint.into(),
        });
        s
    };
    let first = started(a.submit(keyed("f1")).await.unwrap());
    let again = b.submit(keyed("f1")).await.unwrap();
    let Submitted::Replayed(turn) = again else {
        panic!("{again:?}")
    };
    assert_eq!(turn.id, first.turn.id);
    assert!(matches!(
        b.submit(keyed("f2")).await,
        Err(Error::Run(RunError::IdempotencyKeyReused { .. }))
    ));
    assert_eq!(
        a.turn_by_key(ada.id, "k-1").await.unwrap().unwrap().id,
        first.turn.id
    );
    let batches = a.messages(ada.id).list_batches(None, 10).await.unwrap();
    assert_eq!(batches.len(), 1, "stored once");
    assert!(a.pending_queue(ada.id).await.unwrap().is_empty());
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// Cancelling a turn is stored for whoever runs it; a queued turn keeps its cancellation until
/// it is delivered. Bad input to the turn log is refused with nothing stored.
async fn cancellations_and_bad_events(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let run = started(db.submit(submit(ada.id, "one")).await.unwrap());
    let Submitted::Queued { turn: queued, .. } = db.submit(submit(ada.id, "two")).await.unwrap()
    else {
        panic!()
    };
    assert!(
        db.cancel_turn(ada.id, run.turn.id)
            .await
            .unwrap()
            .cancel_requested
    );
    assert!(
        db.cancel_turn(ada.id, queued.id)
            .await
            .unwrap()
            .cancel_requested
    );
    let other = db.create_agent(NewAgent::named("bob")).await.unwrap();
    assert!(matches!(
        db.cancel_turn(other.id, run.turn.id).await,
        Err(Error::Run(RunError::TurnNotFound { .. }))
    ));
    for bad in [
        pattern_db::NewTurnEvent {
            kind: String::new(),
            data: "{}".into(),
        },
        pattern_db::NewTurnEvent {
            kind: "x".into(),
            data: "[1]".into(),
        },
        pattern_db::NewTurnEvent {
            kind: "x".into(),
            data: "not json".into(),
        },
    ] {
        assert!(matches!(
            db.append_turn_events(run.claim, run.turn.id, vec![event("ok"), bad])
                .await,
            Err(Error::Batch(BatchError::InvalidContent(_)))
        ));
    }
    assert_eq!(db.turn(ada.id, run.turn.id).await.unwrap().last_seq, 1);
    let finished = db
        .finish_run(
            run.claim,
            run.received.batch_id,
            run.turn.id,
            RunEnding::Abandon {
                reason: "cancelled".into(),
            },
            vec![event("error")],
            true,
        )
        .await
        .unwrap();
    let next = finished.next.unwrap();
    assert_eq!(next.turn.id, queued.id);
    assert!(next.turn.cancel_requested, "the run sees it at once");
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// One agent's backlog takes one row of a delivery pass, so it never delays another agent's
/// entry by more than one pass; agents whose claim is live are not offered.
async fn delivery_is_fair_across_agents(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let busy = db.create_agent(NewAgent::named("busy")).await.unwrap();
    let quiet = db.create_agent(NewAgent::named("quiet")).await.unwrap();
    let backlog = db.create_agent(NewAgent::named("backlog")).await.unwrap();
    let entry = |text: &str| {
        NewQueued::now(
            BatchType::UserRequest,
            pattern_db::Role::User,
            vec![pattern_db::ContentBlock::text(text)],
        )
    };
    for i in 0..1000 {
        db.enqueue(backlog.id, entry(&format!("old {i}")))
            .await
            .unwrap();
    }
    let _run = started(db.submit(submit(busy.id, "working")).await.unwrap());
    db.enqueue(busy.id, entry("later")).await.unwrap();
    db.enqueue(quiet.id, entry("new")).await.unwrap();
    let offered = db.deliverable_agents(2).await.unwrap();
    assert_eq!(offered, vec![backlog.id, quiet.id], "one row per agent");
    let first = db.claim_next(quiet.id).await.unwrap().unwrap();
    assert_eq!(first.batch_type, BatchType::UserRequest);
    assert_eq!(first.turn.source, "");
    assert!(db.claim_next(busy.id).await.unwrap().is_none(), "busy");
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Many writers in two processes writing overlapping agents in every order (bulk begins, steps,
/// completions, claims, queue entries) never deadlock into a failed write: the write groups
/// lock agents in one order, and a conflict that still happens runs again inside the writer.
async fn concurrent_writers_never_fail_on_lock_order(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let b = tdb.open().await.unwrap();
    let mut agents = Vec::new();
    for i in 0..6 {
        agents.push(
            a.create_agent(NewAgent::named(format!("a{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let mut tasks = Vec::new();
    for t in 0..48usize {
        let db: Database = if t % 2 == 0 { a.clone() } else { b.clone() };
        let order: Vec<_> = if t % 3 == 0 {
            agents.iter().rev().copied().collect()
        } else {
            agents.iter().cycle().skip(t % 6).take(6).copied().collect()
        };
        tasks.push(tokio::spawn(async move {
            for (i, agent) in order.into_iter().enumerate() {
                let store = db.messages(agent);
                match (t + i) % 3 {
                    0 => {
                        // Claimless batches (the bulk path groups them).
                        match store
                            .begin_batch(NewMessage::user("x"), BeginBatch::default())
                            .await
                        {
                            Ok(r) => {
                                store
                                    .append_step(r.batch_id, vec![NewMessage::assistant("y")])
                                    .await?;
                                store.complete_batch(r.batch_id).await?;
                            }
                            Err(Error::Run(RunError::AgentBusy { .. })) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    1 => {
                        if let Submitted::Started(s) = db.submit(submit(agent, "z")).await? {
                            db.finish_run(
                                s.claim,
                                s.received.batch_id,
                                s.turn.id,
                                RunEnding::Complete,
                                vec![],
                                false,
                            )
                            .await?;
                        }
                    }
                    _ => {
                        if let Some(s) = db.claim_next(agent).await? {
                            db.finish_run(
                                s.claim,
                                s.received.batch_id,
                                s.turn.id,
                                RunEnding::Complete,
                                vec![],
                                false,
                            )
                            .await?;
                        }
                    }
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// The lifecycle events of the log have the documented JSON.
#[test]
fn lifecycle_events_are_documented_json() {
    let queued: serde_json::Value =
        serde_json::from_str(&lifecycle::queued(pattern_db::SnowflakeId(7)).data).unwrap();
    assert_eq!(queued, serde_json::json!({"type": "queued", "queue_id": 7}));
    let interrupted: serde_json::Value =
        serde_json::from_str(&lifecycle::interrupted(None).data).unwrap();
    assert_eq!(interrupted["type"], "error");
    assert_eq!(interrupted["kind"], "interrupted");
    assert_eq!(interrupted["batch_id"], serde_json::Value::Null);
}

/// Every machine id leased by a live process: the error says so, with the count.
#[tokio::test]
async fn machine_ids_run_out_only_when_live_processes_hold_them() {
    let tdb = fresh(Kind::Sqlite).await;
    let db = tdb.open().await.unwrap();
    // Fill the table with leases of a holder that is this live process under other names is
    // not possible; a live holder's row is what counts: lease all ids to this handle's holder
    // except its own, through raw SQL, and check that a new process finds none free.
    let holder = db.run_owner().to_owned();
    let mine = db.machine_id();
    for id in 0..=1023i64 {
        if id != i64::from(mine) {
            pattern_db::testkit::execute_raw(
                &db,
                &format!(
                    "INSERT INTO machine_leases (machine_id, holder, expires_at) VALUES ({id}, '{holder}', 99999999999999)"
                ),
            )
            .await
            .unwrap();
        }
    }
    let err = Database::open(tdb.config()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage(StorageError::MachineIdsExhausted { live: 1024 })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("live processes"), "{err}");
    db.close().await;
    // Once the holder is gone, every id is free again at once.
    let again = Database::open(tdb.config()).await.unwrap();
    assert_eq!(again.machine_id(), 0);
    again.close().await;
    tdb.cleanup().await.unwrap();
}

/// Processes register on open and leave on close; a restarted process sees a crashed one's
/// claims dead and its queue delivered.
#[tokio::test]
async fn waits_for_nothing_after_a_clean_close() {
    let tdb = fresh(Kind::Sqlite).await;
    let a = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let run = started(a.submit(submit(ada.id, "one")).await.unwrap());
    let Submitted::Queued { .. } = a.submit(submit(ada.id, "two")).await.unwrap() else {
        panic!()
    };
    a.close().await;
    let b = tdb.open().await.unwrap();
    let t = std::time::Instant::now();
    let next = b.claim_next(ada.id).await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(
        b.messages(ada.id)
            .batch_info(run.received.batch_id)
            .await
            .unwrap()
            .state,
        BatchState::Abandoned
    );
    assert_eq!(
        next.entry.unwrap().content[0],
        pattern_db::ContentBlock::text("two")
    );
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// Claimless batches submitted together for many agents, one of them held by a live run: the
/// held agent's call is refused and writes nothing, every other call commits (whether the writer
/// grouped them into one bulk statement, which then runs them one by one, or not).
async fn a_held_agent_in_a_group_is_refused_alone(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let held = db.create_agent(NewAgent::named("held")).await.unwrap();
    let started = started(db.submit(submit(held.id, "one")).await.unwrap());
    let mut free = Vec::new();
    for i in 0..12 {
        free.push(
            db.create_agent(NewAgent::named(format!("free-{i}")))
                .await
                .unwrap(),
        );
    }
    let before = db.messages(held.id).get_recent(10).await.unwrap();
    for _ in 0..3 {
        let mut calls = Vec::new();
        for (i, agent) in free.iter().enumerate() {
            if i == free.len() / 2 {
                calls.push((held.id, db.messages(held.id)));
            }
            calls.push((agent.id, db.messages(agent.id)));
        }
        let outcomes = futures::future::join_all(calls.iter().map(|(_, store)| {
            store.begin_batch(NewMessage::user("together"), BeginBatch::default())
        }))
        .await;
        for ((agent, _), outcome) in calls.iter().zip(outcomes) {
            if *agent == held.id {
                assert!(
                    matches!(outcome, Err(Error::Run(RunError::AgentBusy { .. }))),
                    "{outcome:?}"
                );
            } else {
                outcome.unwrap();
            }
        }
    }
    assert_eq!(db.messages(held.id).get_recent(10).await.unwrap(), before);
    for agent in &free {
        assert_eq!(db.messages(agent.id).get_recent(10).await.unwrap().len(), 3);
    }
    assert_eq!(
        db.run_claim(held.id).await.unwrap().unwrap().token,
        started.claim.token
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    a_held_agent_in_a_group_is_refused_alone,
    a_busy_agent_queues_and_the_run_hands_on,
    a_run_that_lost_its_claim_writes_nothing,
    a_dead_process_is_taken_over_at_once,
    a_live_run_is_never_taken_over,
    idempotency_keys_find_the_first_turn,
    cancellations_and_bad_events,
    delivery_is_fair_across_agents,
    concurrent_writers_never_fail_on_lock_order,
);
