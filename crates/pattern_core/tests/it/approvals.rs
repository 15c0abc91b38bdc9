//! Approvals through the database (`DbApprover`): the live stream and the turn's log announce
//! the request, a stored approval runs the tool, a denial and an unanswered request (timed out)
//! are error results the model sees, and a wait longer than five lease lengths, while another
//! process sweeps for dead runs, keeps the batch. Deciders use a second `Database` handle (as
//! another process would).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use memory_v2::DbMemoryStore;
use pattern_core::approvals::DbApprover;
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_core::tool::ToolRule;
use pattern_core::{
    Agent, AgentRuntime, DatabaseAgent, DoneReason, IncomingMessage, ResponseEvent, RuntimeConfig,
};
use pattern_db::testkit::TestDb;
use pattern_db::{
    ApprovalDecision, ApprovalState, Backend, BatchState, Database, NewAgent, RecoveryScope,
    SnowflakeId,
};
use serde_json::json;

use crate::support::{batches_of, config, last, tool_results};
use crate::tools::registry;

struct Setup {
    tdb: TestDb,
    db: Database,
    decider: Database,
    agent: Arc<DatabaseAgent>,
}

async fn setup(kind: Backend, wait: Duration, lease: Option<Duration>) -> Setup {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let open = |lease: Option<Duration>| {
        let mut c = tdb.config();
        if let Some(l) = lease {
            c.run_lease = l;
        }
        Database::open(c)
    };
    let db = open(lease).await.unwrap();
    let decider = open(lease).await.unwrap();
    let row = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let mut c: RuntimeConfig = config();
    c.permission_timeout = wait;
    c.rules = vec![ToolRule::RequiresApproval {
        tool: "sleepy".into(),
    }];
    let model = ScriptedProvider::new(vec![
        Turn::call("c1", "sleepy", json!({"ms": 0, "tag": "ran"})),
        Turn::text("ok"),
    ]);
    let memory = Arc::new(DbMemoryStore::new(db.clone()));
    let runtime = AgentRuntime::builder(db.clone(), row, memory, Arc::new(model), c)
        .tools(registry())
        .build()
        .unwrap();
    runtime
        .permissions()
        .set_approver(Arc::new(DbApprover::with_poll(
            db.clone(),
            Duration::from_millis(100),
        )))
        .await;
    Setup {
        tdb,
        db,
        decider,
        agent: DatabaseAgent::new(runtime),
    }
}

impl Setup {
    async fn cleanup(self) {
        drop(self.agent);
        self.db.close().await;
        self.decider.close().await;
        self.tdb.cleanup().await.unwrap();
    }
}

/// Runs a turn; when its live stream announces the approval request, `answer` is called with
/// its id (after `delay`). Returns every live event.
async fn turn_answering(
    s: &Setup,
    delay: Duration,
    answer: Option<ApprovalDecision>,
) -> (Vec<ResponseEvent>, Option<SnowflakeId>) {
    let mut stream = s
        .agent
        .clone()
        .process(IncomingMessage::user("do it"))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut asked = None;
    let collect = async {
        while let Some(event) = stream.next().await {
            if let ResponseEvent::ApprovalRequested { approval_id, .. } = &event {
                asked = Some(*approval_id);
                if let Some(decision) = answer.clone() {
                    let decider = s.decider.clone();
                    let id = *approval_id;
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        decider
                            .decide_approval(None, id, decision, "test")
                            .await
                            .unwrap();
                    });
                }
            }
            events.push(event);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("turn finished");
    (events, asked)
}

/// The stored log of the agent's only turn has the request before the tool's result.
async fn logged_kinds(db: &Database, agent: pattern_db::AgentId) -> Vec<String> {
    let turns = db.turns(agent, 10).await.unwrap();
    assert_eq!(turns.len(), 1);
    db.turn_events(turns[0].id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

async fn an_approved_call_runs(kind: Backend) {
    let s = setup(kind, Duration::from_secs(30), None).await;
    let (events, asked) = turn_answering(
        &s,
        Duration::from_millis(200),
        Some(ApprovalDecision::Approve),
    )
    .await;
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
    assert_eq!(tool_results(&events), [("ran".to_owned(), false)]);
    let approval = s.db.approval(None, asked.unwrap()).await.unwrap();
    assert_eq!(approval.state, ApprovalState::Approved);
    assert_eq!(approval.tool, "sleepy");
    assert_eq!(approval.call_id.as_deref(), Some("c1"));
    assert_eq!(approval.input["tag"], "ran");
    let kinds = logged_kinds(&s.db, s.agent.id()).await;
    let asked_at = kinds.iter().position(|k| k == "approval_requested");
    let result_at = kinds.iter().position(|k| k == "tool_result");
    assert!(
        asked_at.is_some() && asked_at < result_at,
        "the log has the request before the result: {kinds:?}"
    );
    let decisions: Vec<_> = s
        .agent
        .runtime()
        .messages()
        .recent_activity(50)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "permission_decision")
        .collect();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].payload["decision"]["decision"], "approved");
    s.cleanup().await;
}

async fn a_denied_call_is_an_error_result(kind: Backend) {
    let s = setup(kind, Duration::from_secs(30), None).await;
    let (events, asked) = turn_answering(
        &s,
        Duration::from_millis(100),
        Some(ApprovalDecision::Deny {
            reason: "not on a friday".into(),
        }),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{events:?}");
    assert!(results[0].1, "an error result");
    assert!(results[0].0.contains("not on a friday"), "{results:?}");
    assert!(matches!(last(&events), ResponseEvent::Done { .. }));
    let approval = s.db.approval(None, asked.unwrap()).await.unwrap();
    assert_eq!(approval.state, ApprovalState::Denied);
    s.cleanup().await;
}

async fn an_unanswered_request_times_out_as_a_denial(kind: Backend) {
    let s = setup(kind, Duration::from_millis(700), None).await;
    let (events, asked) = turn_answering(&s, Duration::ZERO, None).await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{events:?}");
    assert!(results[0].1);
    assert!(
        results[0].0.contains("no answer before the deadline"),
        "{results:?}"
    );
    let id = asked.unwrap();
    let approval = s.db.approval(None, id).await.unwrap();
    assert_eq!(approval.state, ApprovalState::TimedOut);
    // Too late now: the answer is refused.
    assert!(matches!(
        s.decider
            .decide_approval(None, id, ApprovalDecision::Approve, "test")
            .await,
        Err(pattern_db::Error::Approval(
            pattern_db::ApprovalError::AlreadyDecided { .. }
        ))
    ));
    s.cleanup().await;
}

/// The answer comes after six lease lengths while another process sweeps for dead runs every
/// 100 ms: the run keeps its agent and its batch completes with the tool's result.
async fn a_wait_longer_than_five_leases_keeps_the_batch(kind: Backend) {
    let lease = Duration::from_millis(500);
    let s = setup(kind, Duration::from_secs(60), Some(lease)).await;
    let sweeper = tokio::spawn({
        let b = s.decider.clone();
        async move {
            loop {
                let abandoned = b
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
    let (events, asked) = turn_answering(&s, lease * 6, Some(ApprovalDecision::Approve)).await;
    assert!(!sweeper.is_finished(), "the sweep abandoned nothing");
    sweeper.abort();
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
    assert_eq!(tool_results(&events), [("ran".to_owned(), false)]);
    let approval = s.db.approval(None, asked.unwrap()).await.unwrap();
    assert!(
        approval.decided_at.unwrap() - approval.requested_at
            >= chrono::Duration::from_std(lease * 5).unwrap()
    );
    let batches = batches_of(&s.db, s.agent.id()).await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.state, BatchState::Complete);
    s.cleanup().await;
}

conformance!(
    an_approved_call_runs,
    a_denied_call_is_an_error_result,
    an_unanswered_request_times_out_as_a_denial,
    a_wait_longer_than_five_leases_keeps_the_batch,
);
