//! The schedule tools: a scripted model schedules its own wakeup with `schedule_wakeup`, lists
//! and refuses bad input as error results; the one-off wakeup fires once through the queue
//! processor and begins a `system_trigger` batch; `cancel_schedule` removes one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pattern_core::testkit::Turn;
use pattern_core::{Agent, QueueProcessor, ResponseEvent};
use pattern_db::{Backend, BatchState, BatchType};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{Harness, batches_of, tool_results};

async fn the_agent_schedules_its_own_wakeup(kind: Backend) {
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "schedule_wakeup",
                json!({"message": "check the oven", "at": soon, "name": "oven"}),
            ),
            Turn::call(
                "c2",
                "schedule_wakeup",
                json!({"message": "x", "cron": "61 * * * *"}),
            ),
            Turn::call("c3", "schedule_wakeup", json!({"message": "x", "at": past})),
            Turn::call(
                "c4",
                "schedule_wakeup",
                json!({"message": "x", "cron": "0 9 * * *", "tz": "Mars/Olympus"}),
            ),
            // Neither `at` nor `cron`: refused, naming the field.
            Turn::call("c5", "schedule_wakeup", json!({"message": "x"})),
            Turn::call(
                "c6",
                "schedule_wakeup",
                json!({"message": "daily review", "cron": "30 9 * * 1-5", "tz": "Europe/Berlin"}),
            ),
            Turn::call("c7", "list_schedules", json!({})),
            Turn::text("scheduled"),
            // The wakeup's turn.
            Turn::text("oven checked"),
        ],
    )
    .await;
    let events = h.turn("remind yourself about the oven").await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 7, "{events:?}");
    assert!(!results[0].1, "{:?}", results[0]);
    assert!(
        results[0].0.starts_with("scheduled: schedule "),
        "{:?}",
        results[0]
    );
    assert!(
        results[1].1 && results[1].0.contains("cron"),
        "{:?}",
        results[1]
    );
    assert!(
        results[2].1 && results[2].0.contains("past"),
        "{:?}",
        results[2]
    );
    assert!(
        results[3].1 && results[3].0.contains("Mars/Olympus"),
        "{:?}",
        results[3]
    );
    assert!(
        results[4].1 && results[4].0.contains("`at`"),
        "{:?}",
        results[4]
    );
    assert!(!results[5].1, "{:?}", results[5]);
    assert!(results[6].0.contains("check the oven") && results[6].0.contains("daily review"));
    let schedules = h.db.schedules(h.agent.id()).await.unwrap();
    assert_eq!(schedules.len(), 2, "nothing stored for the refused calls");
    let daily = schedules
        .iter()
        .find(|s| s.message == "daily review")
        .unwrap()
        .clone();
    assert_eq!(daily.time_zone, "Europe/Berlin");

    // The one-off fires through the queue processor: one system_trigger batch, once.
    let processor = QueueProcessor::new(
        h.db.clone(),
        Arc::new(Notify::new()),
        Duration::from_millis(50),
    );
    processor.register(h.agent.clone()).await;
    let task = processor.clone().spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let batches = batches_of(&h.db, h.agent.id()).await;
        if batches.iter().any(|b| {
            b.info.batch_type == BatchType::SystemTrigger && b.info.state == BatchState::Complete
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "the wakeup never fired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    processor.stop();
    task.await.unwrap();
    let batches = batches_of(&h.db, h.agent.id()).await;
    let wakeups: Vec<_> = batches
        .iter()
        .filter(|b| b.info.batch_type == BatchType::SystemTrigger)
        .collect();
    assert_eq!(wakeups.len(), 1, "{batches:?}");
    assert_eq!(wakeups[0].messages[0].text(), "check the oven");
    assert_eq!(wakeups[0].messages[0].role, pattern_db::Role::System);
    let left: Vec<_> =
        h.db.schedules(h.agent.id())
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
    assert_eq!(left, [daily.id], "the one-off is gone once fired");
    h.cleanup().await;
}

/// `cancel_schedule` removes the caller's schedule; another agent's id (on the same database)
/// and a second cancel are error results, and the other agent's schedule stays.
async fn the_agent_cancels_a_schedule(kind: Backend) {
    let h = Harness::new(kind, vec![]).await;
    let bob_model = pattern_core::testkit::ScriptedProvider::new(vec![]);
    let bob = Harness::agent(
        &h.db,
        &h.memory,
        &bob_model,
        "bob",
        crate::support::config(),
        None,
    )
    .await;
    let new = |m: &str| pattern_db::schedule::NewSchedule {
        message: m.into(),
        when: pattern_db::schedule::When::Cron {
            expr: "0 * * * *".into(),
            tz: None,
        },
        name: None,
    };
    let mine = h
        .agent
        .runtime()
        .add_schedule(new("stretch"))
        .await
        .unwrap();
    let theirs = bob.runtime().add_schedule(new("bob's")).await.unwrap();
    for (i, id) in [mine.id, theirs.id, mine.id].iter().enumerate() {
        h.provider.push(Turn::call(
            &format!("c{i}"),
            "cancel_schedule",
            json!({"id": id.to_string()}),
        ));
    }
    h.provider.push(Turn::text("done"));
    let events = h.turn("cancel it").await;
    let r = tool_results(&events);
    assert_eq!(r.len(), 3, "{events:?}");
    assert!(!r[0].1 && r[0].0.starts_with("cancelled"), "{r:?}");
    assert!(r[1].1 && r[1].0.contains("unknown schedule"), "{r:?}");
    assert!(r[2].1 && r[2].0.contains("unknown schedule"), "{r:?}");
    assert!(h.db.schedules(h.agent.id()).await.unwrap().is_empty());
    assert_eq!(h.db.schedules(bob.id()).await.unwrap().len(), 1);
    drop(bob);
    h.cleanup().await;
}

/// Every built-in tool's definition (the schedule tools included) fits the tools budget of a
/// local model's 8k window (an eighth of it), counted as the runtime counts by default: a turn
/// with the default registry is not refused as over budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_tools_fit_a_small_local_window() {
    let config = pattern_core::RuntimeConfig::new("You are a test agent.", 8192);
    let h = Harness::with(Backend::Sqlite, vec![Turn::text("fits")], config, None).await;
    let events = h.turn("hello").await;
    assert!(
        matches!(crate::support::last(&events), ResponseEvent::Done { .. }),
        "{events:?}"
    );
    h.cleanup().await;
}

conformance!(
    the_agent_schedules_its_own_wakeup,
    the_agent_cancels_a_schedule
);
