//! Runs fenced in the database, from the agent's side: a step that outlasts many lease lengths
//! while another process sweeps for dead runs, a trigger queued in one process and run by the
//! process holding the agent (its caller still gets the real answer), a tool whose writes are
//! refused once its run lost the agent, and a shutdown that cancels a run cleanly. Two
//! `Database` handles over one database stand for two processes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use memory_v2::{DbMemoryStore, MemoryStore};
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use pattern_core::{
    Agent, AgentRuntime, DatabaseAgent, DoneReason, ErrorKind, IncomingMessage, ResponseEvent,
    TurnOptions,
};
use pattern_db::testkit::TestDb;
use pattern_db::{
    Backend, BatchState, ContentBlock, Database, RecoveryScope, TurnOutcome, TurnState,
};
use serde_json::{Value, json};

use crate::support::{batches_of, config, last};

async fn open(tdb: &TestDb, lease: Duration) -> Database {
    let mut c = tdb.config();
    c.run_lease = lease;
    Database::open(c).await.unwrap()
}

fn agent_on(
    db: &Database,
    row: pattern_db::Agent,
    model: &ScriptedProvider,
    tools: Option<Arc<ToolRegistry>>,
) -> Arc<DatabaseAgent> {
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let mut b = AgentRuntime::builder(db.clone(), row, memory, Arc::new(model.clone()), config());
    if let Some(tools) = tools {
        b = b.tools(tools);
    }
    DatabaseAgent::new(b.build().unwrap())
}

/// A model step that takes five lease lengths while another process sweeps for dead runs every
/// 100 ms: the run keeps its agent (its process is alive) and its batch completes.
async fn a_step_longer_than_five_leases_completes(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let lease = Duration::from_millis(600);
    let a = open(&tdb, lease).await;
    let b = open(&tdb, lease).await;
    let row = a
        .create_agent(pattern_db::NewAgent::named("ada"))
        .await
        .unwrap();
    let model = ScriptedProvider::new(vec![Turn::Slow(
        lease * 5,
        vec![ContentBlock::text("finally")],
    )]);
    let agent = agent_on(&a, row, &model, None);
    let sweeper = tokio::spawn({
        let b = b.clone();
        async move {
            let mut abandoned = 0;
            loop {
                abandoned += b
                    .recover_runs(RecoveryScope::ExpiredLeases)
                    .await
                    .unwrap()
                    .len();
                if abandoned > 0 {
                    return abandoned;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let events = crate::support::run(&agent, IncomingMessage::user("take your time")).await;
    assert!(
        matches!(
            last(&events),
            ResponseEvent::Done {
                reason: DoneReason::Completed,
                ..
            }
        ),
        "{events:?}"
    );
    assert!(!sweeper.is_finished(), "the sweep abandoned nothing");
    sweeper.abort();
    let batches = batches_of(&a, agent.id()).await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.state, BatchState::Complete);
    drop(agent);
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// Process B's trigger arrives while process A's run holds the agent: it is queued, A's run
/// hands the claim on to it and runs it, and B's caller follows the turn's log to its real end.
async fn a_trigger_queued_elsewhere_gets_its_real_answer(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let a = open(&tdb, Duration::from_secs(5)).await;
    let b = open(&tdb, Duration::from_secs(5)).await;
    let row = a
        .create_agent(pattern_db::NewAgent::named("ada"))
        .await
        .unwrap();
    let model_a = ScriptedProvider::new(vec![
        Turn::Slow(
            Duration::from_millis(800),
            vec![ContentBlock::text("first")],
        ),
        Turn::text("second, from A"),
    ]);
    let model_b = ScriptedProvider::new(vec![]);
    let in_a = agent_on(&a, row.clone(), &model_a, None);
    in_a.set_serving(true);
    let in_b = agent_on(&b, row, &model_b, None);
    let first = in_a
        .clone()
        .submit(IncomingMessage::user("one"), TurnOptions::default())
        .await
        .unwrap();
    let second = in_b
        .clone()
        .submit(IncomingMessage::user("two"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(second.begun, pattern_core::Begun::Queued);
    let events: Vec<ResponseEvent> =
        tokio::time::timeout(Duration::from_secs(30), second.events.collect::<Vec<_>>())
            .await
            .unwrap();
    let names: Vec<&str> = events.iter().map(ResponseEvent::name).collect();
    assert_eq!(names.first(), Some(&"queued"), "{names:?}");
    assert!(names.contains(&"received"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ResponseEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "second, from A");
    assert_eq!(model_b.calls(), 0, "process A ran it");
    drop(first);
    assert!(pattern_core::db_agent::wait_idle(&in_a, Duration::from_secs(10)).await);
    let batches = batches_of(&a, in_a.id()).await;
    assert_eq!(batches.len(), 2);
    assert!(batches.iter().all(|b| b.info.state == BatchState::Complete));
    assert!(a.claims_held().await.unwrap().is_empty());
    drop((in_a, in_b));
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// A tool that waits, then writes a memory block.
#[derive(Debug)]
struct SlowWrite;

#[async_trait::async_trait]
impl Tool for SlowWrite {
    fn name(&self) -> &str {
        "slow_write"
    }
    fn description(&self) -> &str {
        "waits, then appends to the notes block"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    async fn execute(&self, ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let runtime = &ctx.runtime;
        let block = runtime
            .memory()
            .block(runtime.agent_id(), "notes")
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        runtime
            .memory()
            .append(
                runtime.agent_id(),
                "notes",
                " and coffee",
                block.version,
                memory_v2::WriteAuth::Agent,
            )
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput {
            content: "written".into(),
            request_heartbeat: false,
        })
    }
}

/// Another process fences the run while its tool works: the tool's memory write is refused,
/// the step is not stored, and the caller is told the run was interrupted.
async fn a_tool_of_a_run_that_lost_its_agent_writes_nothing(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let a = open(&tdb, Duration::from_secs(5)).await;
    let b = open(&tdb, Duration::from_secs(5)).await;
    let row = a
        .create_agent(pattern_db::NewAgent::named("ada"))
        .await
        .unwrap();
    let memory = DbMemoryStore::new(a.clone());
    memory_v2::MemoryEditor::create_block(
        &memory,
        row.id,
        memory_v2::NewMemoryBlock {
            label: "notes".into(),
            description: "notes".into(),
            value: "likes tea".into(),
            char_limit: 200,
            block_type: memory_v2::BlockType::Core,
        },
    )
    .await
    .unwrap();
    let mut tools = pattern_core::tool::builtin::registry().unwrap();
    tools.register(Arc::new(SlowWrite)).unwrap();
    let model = ScriptedProvider::new(vec![
        Turn::call("c1", "slow_write", json!({})),
        Turn::text("never"),
    ]);
    let agent = agent_on(&a, row.clone(), &model, Some(Arc::new(tools)));
    let mut stream = agent
        .clone()
        .process(IncomingMessage::user("remember coffee"))
        .await
        .unwrap();
    // Once the tool runs, process B fences every run.
    while let Some(e) = stream.next().await {
        if matches!(e, ResponseEvent::ToolCallFinished { .. }) {
            break;
        }
    }
    b.recover_runs(RecoveryScope::AllOpen).await.unwrap();
    let rest: Vec<ResponseEvent> = stream.collect().await;
    assert!(
        matches!(
            last(&rest),
            ResponseEvent::Error {
                kind: ErrorKind::Interrupted,
                ..
            }
        ),
        "{rest:?}"
    );
    let notes = memory.block(row.id, "notes").await.unwrap();
    assert_eq!(notes.value, "likes tea", "the tool's write was refused");
    let batches = batches_of(&a, row.id).await;
    assert_eq!(batches[0].info.state, BatchState::Abandoned);
    assert_eq!(batches[0].messages.len(), 1, "no step of the lost run");
    drop(agent);
    a.close().await;
    b.close().await;
    tdb.cleanup().await.unwrap();
}

/// A shutdown cancels the run going on: its batch is abandoned, its turn ends `cancelled`, the
/// agent is free at once, and the message can be retried at once.
async fn a_cancelled_run_is_retryable_at_once(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let a = open(&tdb, Duration::from_secs(5)).await;
    let row = a
        .create_agent(pattern_db::NewAgent::named("ada"))
        .await
        .unwrap();
    let model = ScriptedProvider::new(vec![
        Turn::Slow(Duration::from_secs(60), vec![ContentBlock::text("never")]),
        Turn::text("retried"),
    ]);
    let agent = agent_on(&a, row, &model, None);
    let submission = agent
        .clone()
        .submit(
            IncomingMessage::user("slow"),
            TurnOptions {
                detached: true,
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    drop(submission.events);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(agent.cancel_running("shutting down"));
    assert!(pattern_core::db_agent::wait_idle(&agent, Duration::from_secs(10)).await);
    let turn = a.turn(agent.id(), submission.turn.id).await.unwrap();
    assert_eq!(turn.state, TurnState::Finished);
    assert_eq!(turn.outcome, Some(TurnOutcome::Failed));
    let events = a.turn_events(turn.id, 0, 100).await.unwrap();
    let last_event = pattern_core::turn_log::decode(events.last().unwrap()).unwrap();
    assert!(
        matches!(
            &last_event,
            ResponseEvent::Error { kind: ErrorKind::Cancelled, message, .. } if message == "shutting down"
        ),
        "{last_event:?}"
    );
    assert!(a.claims_held().await.unwrap().is_empty());
    let batches = batches_of(&a, agent.id()).await;
    let abandoned = pattern_db::Abandoned {
        batch: batches[0].info.clone(),
        trigger: batches[0].messages[0].clone(),
    };
    let retried = crate::support::run(&agent, IncomingMessage::retry(&abandoned)).await;
    assert!(matches!(last(&retried), ResponseEvent::Done { .. }));
    drop(agent);
    a.close().await;
    tdb.cleanup().await.unwrap();
}

/// Following a turn is only for its own agent: another agent's turn id reads as unknown.
async fn another_agents_turn_is_not_followed(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let a = open(&tdb, Duration::from_secs(5)).await;
    let ada = a
        .create_agent(pattern_db::NewAgent::named("ada"))
        .await
        .unwrap();
    let bob = a
        .create_agent(pattern_db::NewAgent::named("bob"))
        .await
        .unwrap();
    let model = ScriptedProvider::new(vec![Turn::text("hi")]);
    let agent = agent_on(&a, ada, &model, None);
    let submission = agent
        .clone()
        .submit(IncomingMessage::user("hello"), TurnOptions::default())
        .await
        .unwrap();
    let turn = submission.turn.id;
    let _: Vec<_> = submission.events.collect().await;
    let mine: Vec<_> =
        pattern_core::turn_log::follow(a.clone(), agent.id(), turn, 0, Duration::from_millis(100))
            .collect()
            .await;
    assert!(mine.iter().all(Result::is_ok));
    assert_eq!(mine.last().unwrap().as_ref().unwrap().1.name(), "done");
    let theirs: Vec<_> =
        pattern_core::turn_log::follow(a.clone(), bob.id, turn, 0, Duration::from_millis(100))
            .collect()
            .await;
    assert_eq!(theirs.len(), 1);
    assert!(matches!(
        &theirs[0],
        Err(pattern_core::Error::Db(pattern_db::Error::Run(
            pattern_db::RunError::TurnNotFound { .. }
        )))
    ));
    drop(agent);
    a.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    another_agents_turn_is_not_followed,
    a_step_longer_than_five_leases_completes,
    a_trigger_queued_elsewhere_gets_its_real_answer,
    a_tool_of_a_run_that_lost_its_agent_writes_nothing,
    a_cancelled_run_is_retryable_at_once,
);
