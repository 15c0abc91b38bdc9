//! Approval requests: exactly one of concurrent deciders wins (the others get `AlreadyDecided`),
//! organization walls (`ApprovalError::NotFound`), timeouts, the turn event stored with a request, and
//! pending requests ended with their batch, also when its process died (never approved later).

use pattern_db::ApprovalError;
use std::time::Duration;

use chrono::Utc;
use pattern_db::{
    ApprovalDecision, ApprovalFilter, ApprovalState, Error, NewAgent, NewApproval, NewMessage,
    NewTurn, RunEnding, Submit, Submitted, WakeKey,
};

use crate::{Kind, fresh};

fn new_approval(agent: pattern_db::AgentId, batch: Option<pattern_db::BatchId>) -> NewApproval {
    NewApproval {
        agent,
        batch,
        tool: "dangerous".into(),
        call_id: Some("call_1".into()),
        input: serde_json::json!({"x": 1}),
        reason: "this tool needs approval".into(),
        deadline: Utc::now() + chrono::Duration::seconds(60),
    }
}

/// Eight deciders race (two database handles, as two processes): exactly one wins, every other
/// one is told `AlreadyDecided` with the winning state; the waiter's wake-up fires.
async fn one_decision_wins_among_concurrent_deciders(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let other = tdb.open().await.unwrap();
    let org = db.create_organization("acme", "Acme").await.unwrap();
    let ada = db
        .create_org_agent(org.id, NewAgent::named("ada"))
        .await
        .unwrap();
    for round in 0..5 {
        let asked = db
            .request_approval(new_approval(ada.id, None))
            .await
            .unwrap();
        assert_eq!(asked.state, ApprovalState::Pending);
        assert_eq!(asked.organization, Some(org.id));
        // The winner's handle wakes its own waiters; on PostgreSQL every handle's are woken
        // (`NOTIFY`), so the first handle's waiter must wake whoever won.
        let channel = db.hub().subscribe(WakeKey::Approval(asked.id));
        let woken = channel.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let other_channel = other.hub().subscribe(WakeKey::Approval(asked.id));
        let other_woken = other_channel.notified();
        tokio::pin!(other_woken);
        other_woken.as_mut().enable();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let handle = if i % 2 == 0 {
                db.clone()
            } else {
                other.clone()
            };
            let id = asked.id;
            tasks.push(tokio::spawn(async move {
                let decision = if i % 3 == 0 {
                    ApprovalDecision::Deny {
                        reason: format!("no {i}"),
                    }
                } else {
                    ApprovalDecision::Approve
                };
                handle
                    .decide_approval(Some(org.id), id, decision, &format!("decider-{i}"))
                    .await
            }));
        }
        let mut wins = Vec::new();
        let mut losses = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(a) => wins.push(a),
                Err(Error::Approval(ApprovalError::AlreadyDecided { id, state })) => {
                    assert_eq!(id, asked.id);
                    losses.push(state);
                }
                Err(e) => panic!("round {round}: unexpected {e}"),
            }
        }
        assert_eq!(wins.len(), 1, "round {round}: exactly one decision wins");
        assert_eq!(losses.len(), 7);
        let won = &wins[0];
        assert!(losses.iter().all(|s| *s == won.state));
        let stored = other.approval(Some(org.id), asked.id).await.unwrap();
        assert_eq!(stored.state, won.state);
        assert_eq!(stored.decided_by, won.decided_by);
        assert!(stored.decided_at.is_some());
        let wait = Duration::from_secs(5);
        if kind == Kind::Postgres {
            tokio::time::timeout(wait, woken.as_mut())
                .await
                .expect("the first handle's waiter is woken");
        } else {
            tokio::time::timeout(wait, async {
                tokio::select! {
                    () = woken.as_mut() => {}
                    () = other_woken.as_mut() => {}
                }
            })
            .await
            .expect("the winner's waiter is woken");
        }
    }
    // A late answer after all of them: still refused, the state unchanged.
    let listed = db
        .approvals(
            Some(org.id),
            ApprovalFilter {
                state: Some(ApprovalState::Pending),
                limit: 100,
            },
        )
        .await
        .unwrap();
    assert!(listed.is_empty(), "nothing is pending: {listed:?}");
    let all = db
        .approvals(
            Some(org.id),
            ApprovalFilter {
                state: None,
                limit: 3,
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    db.close().await;
    other.close().await;
}

/// Another organization's request (or an unknown id) is not found, read or decided, and the
/// attempt changes nothing; the owner's organization decides it.
async fn another_organizations_request_is_not_found(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let evil = db.create_organization("evil", "Evil").await.unwrap();
    let ada = db
        .create_org_agent(acme.id, NewAgent::named("ada"))
        .await
        .unwrap();
    let asked = db
        .request_approval(new_approval(ada.id, None))
        .await
        .unwrap();
    assert!(matches!(
        db.approval(Some(evil.id), asked.id).await,
        Err(Error::Approval(ApprovalError::NotFound(id))) if id == asked.id
    ));
    let e = db
        .decide_approval(Some(evil.id), asked.id, ApprovalDecision::Approve, "http")
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Approval(ApprovalError::NotFound(_))),
        "{e}"
    );
    assert_eq!(e.class(), pattern_db::ErrorClass::NotFound);
    let unknown = pattern_db::SnowflakeId(asked.id.get() + 12345);
    assert!(matches!(
        db.decide_approval(None, unknown, ApprovalDecision::Approve, "cli")
            .await,
        Err(Error::Approval(ApprovalError::NotFound(_)))
    ));
    let evil_list = db
        .approvals(
            Some(evil.id),
            ApprovalFilter {
                state: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    assert!(evil_list.is_empty());
    assert_eq!(
        db.approval(None, asked.id).await.unwrap().state,
        ApprovalState::Pending,
        "the refused answer changed nothing"
    );
    let decided = db
        .decide_approval(
            Some(acme.id),
            asked.id,
            ApprovalDecision::Deny {
                reason: "not today".into(),
            },
            "http",
        )
        .await
        .unwrap();
    assert_eq!(decided.state, ApprovalState::Denied);
    assert_eq!(decided.denial_reason.as_deref(), Some("not today"));
    let again = db
        .decide_approval(Some(acme.id), asked.id, ApprovalDecision::Approve, "http")
        .await
        .unwrap_err();
    assert_eq!(again.class(), pattern_db::ErrorClass::Conflict);
    db.close().await;
}

/// Expiring marks a pending request `timed_out` once; a decision after it is refused, and an
/// expiry after a decision leaves the decision.
async fn timeouts_are_marked_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let asked = db
        .request_approval(new_approval(ada.id, None))
        .await
        .unwrap();
    assert_eq!(asked.organization, Some(ada.organization));
    let expired = db.expire_approval(asked.id).await.unwrap();
    assert_eq!(expired.state, ApprovalState::TimedOut);
    assert_eq!(expired.decided_by.as_deref(), Some("timeout"));
    assert!(matches!(
        db.decide_approval(None, asked.id, ApprovalDecision::Approve, "cli")
            .await,
        Err(Error::Approval(ApprovalError::AlreadyDecided {
            state: ApprovalState::TimedOut,
            ..
        }))
    ));
    let approved = db
        .request_approval(new_approval(ada.id, None))
        .await
        .unwrap();
    db.decide_approval(None, approved.id, ApprovalDecision::Approve, "cli")
        .await
        .unwrap();
    let after = db.expire_approval(approved.id).await.unwrap();
    assert_eq!(after.state, ApprovalState::Approved, "the decision stays");
    db.close().await;
}

/// A request of a run's batch stores the turn's `approval_requested` event with it; when the
/// batch is abandoned, its pending request is marked abandoned and can never be approved.
async fn a_request_ends_with_its_batch(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let Submitted::Started(started) = db
        .submit(Submit {
            agent: ada.id,
            trigger: NewMessage::user("go"),
            batch_type: None,
            retry_of: None,
            turn: NewTurn::new("test"),
            start: true,
        })
        .await
        .unwrap()
    else {
        panic!("not started")
    };
    let batch = started.received.batch_id;
    let asked = pattern_db::runs::fenced(
        started.claim,
        db.request_approval(new_approval(ada.id, Some(batch))),
    )
    .await
    .unwrap();
    assert_eq!(asked.turn_id, Some(started.turn.id));
    let events = db.turn_events(started.turn.id, 0, 100).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "approval_requested");
    let data: serde_json::Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(data["approval_id"], asked.id.get());
    assert_eq!(data["tool"], "dangerous");
    assert_eq!(data["call_id"], "call_1");

    db.finish_run(
        started.claim,
        batch,
        started.turn.id,
        RunEnding::Abandon {
            reason: "cancelled".into(),
        },
        Vec::new(),
        false,
    )
    .await
    .unwrap();
    let ended = db.approval(None, asked.id).await.unwrap();
    assert_eq!(ended.state, ApprovalState::Abandoned);
    assert!(matches!(
        db.decide_approval(None, asked.id, ApprovalDecision::Approve, "cli")
            .await,
        Err(Error::Approval(ApprovalError::AlreadyDecided {
            state: ApprovalState::Abandoned,
            ..
        }))
    ));
    db.close().await;
}

/// The process running the run dies while its request is pending: recovery in another process
/// abandons the batch and marks the request `abandoned` in the same transaction, so a late
/// answer can never approve it.
async fn a_dead_runs_request_is_abandoned_never_approved(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = tdb.open().await.unwrap();
    let ada = a.create_agent(NewAgent::named("ada")).await.unwrap();
    let Submitted::Started(started) = a
        .submit(Submit {
            agent: ada.id,
            trigger: NewMessage::user("go"),
            batch_type: None,
            retry_of: None,
            turn: NewTurn::new("test"),
            start: true,
        })
        .await
        .unwrap()
    else {
        panic!("not started")
    };
    let batch = started.received.batch_id;
    let asked = pattern_db::runs::fenced(
        started.claim,
        a.request_approval(new_approval(ada.id, Some(batch))),
    )
    .await
    .unwrap();
    a.crash().await;

    let b = tdb.open().await.unwrap();
    let recovered = b
        .recover_runs(pattern_db::RecoveryScope::ExpiredLeases)
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1, "the dead run's batch is abandoned");
    assert_eq!(recovered[0].batch.id, batch);
    let ended = b.approval(None, asked.id).await.unwrap();
    assert_eq!(ended.state, ApprovalState::Abandoned);
    assert_eq!(ended.decided_by.as_deref(), Some("recovery"));
    assert!(matches!(
        b.decide_approval(None, asked.id, ApprovalDecision::Approve, "http")
            .await,
        Err(Error::Approval(ApprovalError::AlreadyDecided {
            state: ApprovalState::Abandoned,
            ..
        }))
    ));
    b.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    a_dead_runs_request_is_abandoned_never_approved,
    one_decision_wins_among_concurrent_deciders,
    another_organizations_request_is_not_found,
    timeouts_are_marked_once,
    a_request_ends_with_its_batch,
);
