//! Schedules on both backends (decision 0012): a cron schedule's next time is computed and
//! stored with each delivery; bad input is a typed error that stores nothing; removal; two
//! processes racing to deliver fire every schedule exactly once per fire time; a wakeup whose
//! run's process died is queued again exactly once.

use pattern_db::{BatchError, ScheduleError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pattern_db::schedule::{MAX_SCHEDULES_PER_AGENT, NewSchedule, ScheduleKind, When, next_fire};
use pattern_db::{BatchState, BatchType, Database, Error, NewAgent, RunEnding};

use crate::{Kind, fresh};

fn cron(expr: &str, tz: Option<&str>) -> NewSchedule {
    NewSchedule {
        message: "tick".into(),
        when: When::Cron {
            expr: expr.into(),
            tz: tz.map(str::to_owned),
        },
        name: Some("ticker".into()),
    }
}

fn at(seconds_from_now: i64) -> NewSchedule {
    NewSchedule {
        message: "ring".into(),
        when: When::At(Utc::now() + chrono::Duration::seconds(seconds_from_now)),
        name: None,
    }
}

async fn cron_schedules_store_their_next_time(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("c")).await.unwrap().id;
    let before = Utc::now();
    let daily = db
        .add_schedule(agent, cron("30 9 * * *", Some("Europe/Berlin")))
        .await
        .unwrap();
    let after = Utc::now();
    assert_eq!(daily.kind, ScheduleKind::Cron);
    assert_eq!(daily.time_zone, "Europe/Berlin");
    assert_eq!(daily.name.as_deref(), Some("ticker"));
    assert_eq!(daily.message, "tick");
    // The stored next time is the expression's next match after the time it was added.
    let low = next_fire("30 9 * * *", Some("Europe/Berlin"), before)
        .unwrap()
        .unwrap();
    let high = next_fire("30 9 * * *", Some("Europe/Berlin"), after)
        .unwrap()
        .unwrap();
    assert!(daily.next_at >= low && daily.next_at <= high, "{daily:?}");

    // Every second: due within a second; delivery moves it to the next match after delivery.
    let secondly = db
        .add_schedule(agent, cron("* * * * * *", None))
        .await
        .unwrap();
    assert_eq!(secondly.time_zone, "UTC");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = db.claim_next(agent).await.unwrap().expect("due");
    let entry = started.entry.clone().unwrap();
    assert_eq!(entry.id, secondly.id);
    assert_eq!(started.batch_type, BatchType::SystemTrigger);
    assert_eq!(entry.deliveries, 1);
    let delivered_at = Utc::now();
    assert!(entry.deliver_at > secondly.next_at);
    assert!(entry.deliver_at <= delivered_at + chrono::Duration::seconds(1));
    assert_eq!(entry.deliver_at.timestamp_subsec_millis(), 0);
    let listed = db.schedules(agent).await.unwrap();
    assert_eq!(listed.len(), 2, "a recurring schedule stays");
    let moved = listed.iter().find(|s| s.id == secondly.id).unwrap();
    assert_eq!(moved.next_at, entry.deliver_at);
    assert_eq!(moved.last_batch, Some(started.received.batch_id));
    let trigger = db
        .messages(agent)
        .get_batch(started.received.batch_id)
        .await
        .unwrap();
    assert_eq!(trigger.messages[0].text(), "tick");

    // A one-off fires once and then is no schedule any more.
    db.finish_run(
        started.claim,
        started.received.batch_id,
        started.turn.id,
        RunEnding::Complete,
        vec![],
        false,
    )
    .await
    .unwrap();
    db.remove_schedule(agent, secondly.id).await.unwrap();
    let once = db.add_schedule(agent, at(0)).await.unwrap();
    assert_eq!(once.kind, ScheduleKind::At);
    let s = db.claim_next(agent).await.unwrap().expect("due now");
    assert_eq!(s.entry.as_ref().unwrap().id, once.id);
    let ids: Vec<_> = db
        .schedules(agent)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, [daily.id]);
    assert!(matches!(
        db.schedule(once.id).await.unwrap_err(),
        Error::Schedule(ScheduleError::NotFound(_))
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn bad_schedules_are_typed_and_store_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("b")).await.unwrap().id;
    let err = db
        .add_schedule(agent, cron("not a cron", None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::InvalidCron { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("cron"), "{err}");
    let err = db
        .add_schedule(agent, cron("61 * * * *", None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::InvalidCron { .. })),
        "{err}"
    );
    let err = db
        .add_schedule(agent, cron("* * * * *", Some("Mars/Olympus")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::UnknownTimeZone(_))),
        "{err}"
    );
    let err = db.add_schedule(agent, at(-3600)).await.unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::InPast { .. })),
        "{err}"
    );
    let err = db
        .add_schedule(
            agent,
            NewSchedule {
                message: String::new(),
                ..at(60)
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Schedule(ScheduleError::Invalid {
                field: "message",
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(err.class(), pattern_db::ErrorClass::Invalid);
    assert!(db.schedules(agent).await.unwrap().is_empty());
    assert!(db.pending_queue(agent).await.unwrap().is_empty());

    // The cap: the next one is refused, nothing stored.
    for _ in 0..MAX_SCHEDULES_PER_AGENT {
        db.add_schedule(agent, at(3600)).await.unwrap();
    }
    let err = db.add_schedule(agent, at(3600)).await.unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::TooMany { .. })),
        "{err}"
    );
    assert_eq!(err.class(), pattern_db::ErrorClass::Refused);
    assert_eq!(
        db.schedules(agent).await.unwrap().len(),
        MAX_SCHEDULES_PER_AGENT
    );
    // Unknown agent.
    let err = db
        .add_schedule(pattern_db::AgentId(uuid::Uuid::new_v4()), at(60))
        .await
        .unwrap_err();
    assert_eq!(err.class(), pattern_db::ErrorClass::NotFound, "{err}");
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn schedules_are_removed_only_by_their_agent(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("a")).await.unwrap().id;
    let b = db.create_agent(NewAgent::named("b")).await.unwrap().id;
    let s = db.add_schedule(a, cron("0 * * * *", None)).await.unwrap();
    let t = db.add_schedule(b, at(600)).await.unwrap();
    let err = db.remove_schedule(b, s.id).await.unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::NotFound(_))),
        "{err}"
    );
    assert_eq!(db.schedule(s.id).await.unwrap().agent_id, a);
    let all: BTreeSet<_> = db
        .all_schedules()
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(all, BTreeSet::from([s.id, t.id]));
    let removed = db.remove_schedule(a, s.id).await.unwrap();
    assert_eq!(removed.id, s.id);
    assert!(db.schedules(a).await.unwrap().is_empty());
    let err = db.remove_schedule(a, s.id).await.unwrap_err();
    assert!(
        matches!(err, Error::Schedule(ScheduleError::NotFound(_))),
        "{err}"
    );
    assert_eq!(err.class(), pattern_db::ErrorClass::NotFound);
    // Plain queue entries are no schedules: `remove_schedule` never cancels one.
    let q = db
        .enqueue(
            a,
            pattern_db::queue::NewQueued::now(
                BatchType::UserRequest,
                pattern_db::Role::User,
                vec![pattern_db::ContentBlock::text("hi")],
            ),
        )
        .await
        .unwrap();
    assert!(db.remove_schedule(a, q.id).await.is_err());
    assert_eq!(db.pending_queue(a).await.unwrap().len(), 1);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Two processes deliver the same agents' schedules as fast as they can for three seconds:
/// every fire time of every schedule begins exactly one batch, whichever process won it.
async fn racing_processes_fire_each_schedule_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let a = Arc::new(tdb.open().await.unwrap());
    let b = Arc::new(tdb.open().await.unwrap());
    let mut agents = Vec::new();
    let mut one_offs = BTreeSet::new();
    for i in 0..4 {
        let agent = a
            .create_agent(NewAgent::named(format!("r{i}")))
            .await
            .unwrap()
            .id;
        a.add_schedule(agent, cron("* * * * * *", None))
            .await
            .unwrap();
        one_offs.insert(a.add_schedule(agent, at(1)).await.unwrap().id);
        agents.push(agent);
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for db in [a.clone(), b.clone()] {
        for &agent in &agents {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while tokio::time::Instant::now() < until {
                    match db.claim_next(agent).await? {
                        Some(s) => {
                            let entry = s.entry.clone().expect("a queue delivery");
                            got.push((entry.id, entry.deliveries, s.received.batch_id));
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
                        None => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                Ok::<_, Error>(got)
            }));
        }
    }
    let mut fired: BTreeMap<pattern_db::SnowflakeId, Vec<i64>> = BTreeMap::new();
    let mut batches = BTreeSet::new();
    for task in tasks {
        for (entry, n, batch) in task.await.unwrap().unwrap() {
            fired.entry(entry).or_default().push(n);
            assert!(batches.insert(batch));
        }
    }
    for (entry, mut ns) in fired.clone() {
        ns.sort_unstable();
        let expected: Vec<i64> = (1..=i64::try_from(ns.len()).unwrap()).collect();
        assert_eq!(
            ns, expected,
            "entry {entry}: each delivery once, none twice"
        );
    }
    for id in &one_offs {
        assert_eq!(
            fired.get(id).map(Vec::len),
            Some(1),
            "one-off {id} fired once"
        );
    }
    // Every recurring schedule fired about once a second, and the batches match.
    let mut stored = 0;
    for &agent in &agents {
        let infos = a.messages(agent).list_batches(None, 100).await.unwrap();
        stored += infos.len();
        for s in a.schedules(agent).await.unwrap() {
            assert!((2..=4).contains(&s.deliveries), "{s:?}");
        }
    }
    assert_eq!(stored, batches.len());
    Arc::into_inner(a).unwrap().close().await;
    Arc::into_inner(b).unwrap().close().await;
    tdb.cleanup().await.unwrap();
}

async fn crashed_run(db: &Database, agent: pattern_db::AgentId) -> pattern_db::Started {
    let s = db.claim_next(agent).await.unwrap().expect("due");
    assert_eq!(
        db.messages(agent)
            .batch_info(s.received.batch_id)
            .await
            .unwrap()
            .state,
        BatchState::Open
    );
    s
}

/// A scheduled wakeup whose run's process died is queued again once, marked as the retry of
/// the abandoned batch; when the retry's process dies too, nothing is queued again.
async fn a_crashed_wakeup_is_retried_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let first = tdb.open().await.unwrap();
    let agent = first.create_agent(NewAgent::named("w")).await.unwrap().id;
    let schedule = first.add_schedule(agent, at(0)).await.unwrap();
    let run = crashed_run(&first, agent).await;
    assert_eq!(run.entry.as_ref().unwrap().id, schedule.id);
    first.crash().await;

    // The next process takes the agent over: the batch is abandoned and the wakeup queued again.
    let second = tdb.open().await.unwrap();
    let retry = crashed_run(&second, agent).await;
    let entry = retry.entry.clone().unwrap();
    assert_eq!(entry.retry_of, Some(run.received.batch_id));
    assert_eq!(retry.batch_type, BatchType::SystemTrigger);
    let old = second
        .messages(agent)
        .batch_info(run.received.batch_id)
        .await
        .unwrap();
    assert_eq!(old.state, BatchState::Abandoned);
    assert!(old.retried_at.is_some(), "marked retried in the same write");
    let text = second
        .messages(agent)
        .get_batch(retry.received.batch_id)
        .await
        .unwrap()
        .messages[0]
        .text();
    assert_eq!(text, "ring");
    second.crash().await;

    // The retry's run dies too: recovery abandons it and queues nothing more.
    let third = tdb.open().await.unwrap();
    let abandoned = third.messages(agent).recover().await.unwrap();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].batch.id, retry.received.batch_id);
    assert!(third.claim_next(agent).await.unwrap().is_none());
    assert!(third.pending_queue(agent).await.unwrap().is_empty());
    assert_eq!(third.queue_retries(agent).await.unwrap().len(), 1);
    // A user's explicit retry of the first batch is refused: it was retried already.
    let err = third
        .messages(agent)
        .begin_batch(
            pattern_db::NewMessage::user("again"),
            pattern_db::BeginBatch {
                retry_of: Some(run.received.batch_id),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Batch(BatchError::AlreadyRetried { .. })),
        "{err}"
    );
    third.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    cron_schedules_store_their_next_time,
    bad_schedules_are_typed_and_store_nothing,
    schedules_are_removed_only_by_their_agent,
    racing_processes_fire_each_schedule_once,
    a_crashed_wakeup_is_retried_once,
);
