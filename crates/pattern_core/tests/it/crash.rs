//! Scenario A of the incremental-save design: the process dies in the middle of a turn (the
//! model answered, a tool is running) and is killed with SIGKILL. Afterwards the user's message
//! is stored and visible, no part of the step is stored, recovery abandons the batch and offers
//! the trigger, a retry works, and no later request carries the dead run's tool call.
//!
//! The child is this test binary re-run with `PATTERN_CORE_CRASH_CHILD` set.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use memory_v2::DbMemoryStore;
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::{
    Agent, AgentRuntime, DatabaseAgent, IncomingMessage, ResponseEvent, collect_response,
};
use pattern_db::testkit::TestDb;
use pattern_db::{Backend, BatchState, Database, DbConfig, RecoveryScope, Role};
use serde_json::json;

use crate::support::{Harness, batches_of, config};
use crate::tools::registry;

/// Entry point of the child; a no-op in a normal test run.
#[test]
fn crash_child() {
    let Ok(url) = std::env::var("PATTERN_CORE_CRASH_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut c = DbConfig::new(url);
        c.batch_lease = Duration::from_secs(1);
        let db = Database::open(c).await.unwrap();
        let row = db.agent_by_name("ada").await.unwrap();
        let provider = ScriptedProvider::new(vec![Turn::call(
            "c1",
            "sleepy",
            json!({"ms": 60_000, "tag": "never"}),
        )]);
        let mut cfg = config();
        cfg.tool_timeout = Duration::from_secs(120);
        let runtime = AgentRuntime::builder(
            db.clone(),
            row,
            Arc::new(DbMemoryStore::new(db.clone())),
            Arc::new(provider),
            cfg,
        )
        .tools(registry())
        .build()
        .unwrap();
        let agent = DatabaseAgent::new(runtime);
        let mut stream = agent
            .process(IncomingMessage::user("remember my order: two coffees"))
            .await
            .unwrap();
        let mut out = std::io::stdout().lock();
        while let Some(event) = stream.next().await {
            match event {
                ResponseEvent::Received { batch_id, .. } => {
                    writeln!(out, "@@RECEIVED {}", batch_id.get()).unwrap();
                }
                ResponseEvent::ToolCallFinished { .. } => writeln!(out, "@@TOOL").unwrap(),
                _ => {}
            }
            out.flush().unwrap();
        }
    });
}

async fn killed_mid_tool(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let db = tdb.open().await.unwrap();
    // The agent and its memory block, as a previous run left them.
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let setup = Harness::agent(
        &db,
        &memory,
        &ScriptedProvider::new(vec![]),
        "ada",
        config(),
        None,
    )
    .await;
    drop(setup);
    let url = tdb.config().url;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PATTERN_CORE_CRASH_CHILD", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut received = None;
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        // libtest may print its own prefix on the same line.
        if let Some((_, id)) = line.split_once("@@RECEIVED ") {
            received = Some(id.trim().parse::<i64>().unwrap());
        }
        if line.contains("@@TOOL") {
            break;
        }
    }
    let received = received.unwrap_or_else(|| panic!("the child acknowledged nothing: {seen:?}"));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let agent_row = db.agent_by_name("ada").await.unwrap();
    let store = db.messages(agent_row.id);
    // The message is stored and visible; nothing of the step is.
    let batch = store
        .get_batch(pattern_db::SnowflakeId(received))
        .await
        .unwrap();
    assert_eq!(batch.messages.len(), 1);
    assert_eq!(batch.messages[0].role, Role::User);
    assert_eq!(batch.info.state, BatchState::Open);
    // Once the dead run's lease has expired, recovery abandons it and offers the trigger.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let abandoned = db.recover_all(RecoveryScope::ExpiredLeases).await.unwrap();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].trigger.id, batch.messages[0].id);

    // Retry in a fresh runtime: the request carries no unpaired call, the answer is stored.
    let provider = ScriptedProvider::new(vec![Turn::text("Two coffees, noted.")]);
    let runtime = AgentRuntime::builder(
        db.clone(),
        agent_row.clone(),
        Arc::new(DbMemoryStore::new(db.clone())),
        Arc::new(provider.clone()),
        config(),
    )
    .tools(registry())
    .build()
    .unwrap();
    let agent = DatabaseAgent::new(runtime);
    let events: Vec<_> = agent
        .clone()
        .process(IncomingMessage::retry(&abandoned[0]))
        .await
        .unwrap()
        .collect()
        .await;
    let ok = collect_response(futures::stream::iter(events))
        .await
        .unwrap();
    assert_eq!(ok.text, "Two coffees, noted.");
    let seen = provider.seen();
    assert_eq!(seen[0].messages.len(), 1, "only the retried trigger");
    assert!(
        seen[0]
            .messages
            .iter()
            .all(|m| m.tool_use_ids().next().is_none())
    );
    let all = batches_of(&db, agent_row.id).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].info.state, BatchState::Abandoned);
    assert_eq!(all[1].info.state, BatchState::Complete);
    drop(agent);
    tdb.cleanup().await.unwrap();
}

conformance!(killed_mid_tool);
