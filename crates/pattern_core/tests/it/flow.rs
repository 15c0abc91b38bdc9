//! The request flow end to end on both backends, with a scripted model: what is streamed, what
//! is stored, and how every failure leaves the batch.

use std::sync::Arc;
use std::time::Duration;

use pattern_core::permission::{ChannelApprover, Decision};
use pattern_core::provider::ProviderError;
use pattern_core::testkit::Turn;
use pattern_core::tool::ToolRule;
use pattern_core::{
    Agent, AgentState, DoneReason, ErrorKind, IncomingMessage, ResponseEvent, collect_response,
};
use pattern_db::{BatchState, BatchType, ContentBlock, Role};
use serde_json::json;

use crate::support::{Harness, config, last, run, tool_results};
use crate::tools::registry;

fn kinds(events: &[ResponseEvent]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match e {
            ResponseEvent::Queued { .. } => "queued",
            ResponseEvent::Received { .. } => "received",
            ResponseEvent::TextDelta { .. } => "text",
            ResponseEvent::ThinkingDelta { .. } => "thinking",
            ResponseEvent::ToolCallStarted { .. } => "call_started",
            ResponseEvent::ToolCallFinished { .. } => "call",
            ResponseEvent::ToolResult { .. } => "result",
            ResponseEvent::ApprovalRequested { .. } => "approval",
            ResponseEvent::Usage { .. } => "usage",
            ResponseEvent::StepCommitted { .. } => "step",
            ResponseEvent::BatchCompleted { .. } => "completed",
            ResponseEvent::Error { .. } => "error",
            ResponseEvent::Done { .. } => "done",
        })
        .collect()
}

async fn plain_answer_is_streamed_and_stored(kind: pattern_db::Backend) {
    let h = Harness::new(kind, vec![Turn::text("Hello there!")]).await;
    let events = h.turn("hi").await;
    assert_eq!(
        kinds(&events),
        [
            "received",
            "text",
            "text",
            "usage",
            "step",
            "completed",
            "done"
        ]
    );
    let response = collect_response(futures::stream::iter(events.clone()))
        .await
        .unwrap();
    assert_eq!(response.text, "Hello there!");
    let batches = h.batches().await;
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(b.info.state, BatchState::Complete);
    assert_eq!(b.messages.len(), 2);
    assert_eq!(b.messages[0].role, Role::User);
    assert_eq!(
        b.messages[1].content,
        vec![ContentBlock::text("Hello there!")]
    );
    // The model saw the trigger and the memory block.
    let seen = &h.provider.seen()[0];
    assert!(seen.system.iter().any(|p| p.text.contains("likes tea")));
    assert_eq!(seen.messages.len(), 1);
    // The agent is free once a turn's stream has ended: the next message starts at once.
    let again = h.turn("and again").await;
    assert_eq!(kinds(&again)[0], "received", "{again:?}");
    h.cleanup().await;
}

async fn memory_tool_call_round_trip(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "memory_append",
                json!({"label": "notes", "content": "birthday is May 2"}),
            ),
            Turn::text("Noted."),
        ],
    )
    .await;
    let events = h.turn("my birthday is May 2").await;
    assert!(matches!(
        last(&events),
        ResponseEvent::Done {
            reason: DoneReason::Completed,
            ..
        }
    ));
    assert_eq!(h.notes().await, "likes tea\nbirthday is May 2");
    let b = &h.batches().await[0];
    assert_eq!(b.info.state, BatchState::Complete);
    let roles: Vec<_> = b.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert!(b.pending_tool_calls().is_empty());
    // The second model call saw the call, its result, and the updated block.
    let second = &h.provider.seen()[1];
    assert!(
        second
            .system
            .iter()
            .any(|p| p.text.contains("birthday is May 2"))
    );
    let pair: Vec<_> = second.messages.iter().map(|m| m.role).collect();
    assert_eq!(pair, [Role::User, Role::Assistant, Role::Tool]);
    h.cleanup().await;
}

async fn bad_calls_become_error_results(kind: pattern_db::Backend) {
    let h = Harness::with(
        kind,
        vec![
            Turn::Answer(vec![
                ContentBlock::tool_use("c1", "no_such_tool", json!({})),
                ContentBlock::tool_use("c2", "memory_append", json!({"label": 5})),
                ContentBlock::tool_use(
                    "c3",
                    "memory_append",
                    json!({"label": "nope", "content": "x"}),
                ),
                ContentBlock::tool_use("c4", "panicky", json!({})),
                ContentBlock::tool_use("c5", "sleepy", json!({"ms": 10_000, "tag": "late"})),
                ContentBlock::tool_use(
                    "c6",
                    "memory_append",
                    json!({"label": "notes", "content": "x".repeat(500)}),
                ),
            ]),
            Turn::Malformed {
                id: "c7".into(),
                name: "memory_append".into(),
                raw: "{\"label\": \"notes\", \"content\": ".into(),
            },
            Turn::text("ok"),
        ],
        config(),
        Some(registry()),
    )
    .await;
    let events = h.turn("go").await;
    assert!(
        matches!(last(&events), ResponseEvent::Done { .. }),
        "{:?}",
        last(&events)
    );
    let r = tool_results(&events);
    assert_eq!(r.len(), 7);
    assert!(r.iter().all(|(_, is_error)| *is_error), "{r:?}");
    assert!(r[0].0.contains("unknown tool `no_such_tool`"), "{}", r[0].0);
    assert!(r[1].0.contains("invalid arguments"), "{}", r[1].0);
    assert!(
        r[2].0.contains("no memory block labelled `nope`"),
        "{}",
        r[2].0
    );
    assert!(r[3].0.contains("crashed: tool blew up"), "{}", r[3].0);
    assert!(r[4].0.contains("did not finish within"), "{}", r[4].0);
    assert!(
        r[5].0.contains("holds at most 200 characters"),
        "{}",
        r[5].0
    );
    assert!(r[6].0.contains("not a JSON object"), "{}", r[6].0);
    assert_eq!(
        h.notes().await,
        "likes tea",
        "nothing was cut or half-written"
    );
    let b = &h.batches().await[0];
    assert_eq!(b.info.state, BatchState::Complete);
    assert!(b.pending_tool_calls().is_empty());
    // Failures are audited.
    let audited = h
        .agent
        .runtime()
        .messages()
        .recent_activity(50)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "tool_failed")
        .count();
    assert_eq!(audited, 7);
    h.cleanup().await;
}

async fn parallel_results_are_stored_in_call_order(kind: pattern_db::Backend) {
    let calls: Vec<_> = (0..6)
        .map(|i| {
            ContentBlock::tool_use(
                format!("c{i}"),
                "sleepy",
                json!({"ms": rand::random_range(0..150u64), "tag": format!("t{i}")}),
            )
        })
        .collect();
    let h = Harness::with(
        kind,
        vec![Turn::Answer(calls), Turn::text("ok")],
        config(),
        Some(registry()),
    )
    .await;
    let started = std::time::Instant::now();
    let events = h.turn("go").await;
    assert!(
        started.elapsed() < Duration::from_millis(6 * 150),
        "calls ran concurrently"
    );
    let b = &h.batches().await[0];
    let tool = b.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    let ids: Vec<_> = tool
        .content
        .iter()
        .map(|c| match c {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => (tool_use_id.clone(), content.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let want: Vec<_> = (0..6).map(|i| (format!("c{i}"), format!("t{i}"))).collect();
    assert_eq!(ids, want);
    assert_eq!(tool_results(&events).len(), 6);
    h.cleanup().await;
}

async fn runaway_loop_ends_at_the_iteration_limit(kind: pattern_db::Backend) {
    let mut c = config();
    c.max_iterations = 3;
    let h = Harness::with(kind, vec![], c, Some(registry())).await;
    let h = Harness {
        provider: h.provider.with_fallback(Turn::call(
            "loop",
            "sleepy",
            json!({"ms": 0, "tag": "again"}),
        )),
        ..h
    };
    let events = h.turn("loop forever").await;
    assert!(
        matches!(
            last(&events),
            ResponseEvent::Done {
                reason: DoneReason::MaxIterations,
                ..
            }
        ),
        "{:?}",
        last(&events)
    );
    assert_eq!(h.provider.calls(), 3);
    let b = &h.batches().await[0];
    assert_eq!(b.info.state, BatchState::Complete);
    assert!(b.pending_tool_calls().is_empty());
    h.cleanup().await;
}

async fn provider_failure_abandons_and_keeps_the_trigger(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::Fail(ProviderError::Server {
                provider: "scripted".into(),
                status: 529,
                attempts: 3,
                message: "overloaded".into(),
            }),
            Turn::text("second time lucky"),
        ],
    )
    .await;
    let events = h.turn("hello?").await;
    let err = collect_response(futures::stream::iter(events))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Provider);
    let batches = h.batches().await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.state, BatchState::Abandoned);
    assert_eq!(
        batches[0].messages.len(),
        1,
        "the trigger, and nothing else"
    );
    // Retry from the abandoned batch's trigger.
    let abandoned = pattern_db::Abandoned {
        batch: batches[0].info.clone(),
        trigger: batches[0].messages[0].clone(),
    };
    let events = run(&h.agent, IncomingMessage::retry(&abandoned)).await;
    let ok = collect_response(futures::stream::iter(events))
        .await
        .unwrap();
    assert_eq!(ok.text, "second time lucky");
    // The abandoned batch is never sent again.
    let seen = h.provider.seen();
    assert_eq!(seen.last().unwrap().messages.len(), 1);
    h.cleanup().await;
}

async fn truncated_stream_is_a_provider_error(kind: pattern_db::Backend) {
    let h = Harness::new(kind, vec![Turn::Truncate("half an ans".into())]).await;
    let events = h.turn("hi").await;
    assert!(matches!(
        last(&events),
        ResponseEvent::Error {
            kind: ErrorKind::Provider,
            ..
        }
    ));
    assert_eq!(h.batches().await[0].info.state, BatchState::Abandoned);
    h.cleanup().await;
}

async fn rules_are_enforced(kind: pattern_db::Backend) {
    let mut c = config();
    c.rules = vec![
        pattern_core::tool::ToolRule::StartWith {
            tool: "sleepy".into(),
        },
        ToolRule::MaxCallsPerBatch {
            tool: "sleepy".into(),
            max: 2,
        },
        ToolRule::ExitLoop {
            tool: "finish".into(),
        },
    ];
    let h = Harness::with(
        kind,
        vec![
            Turn::call(
                "c1",
                "memory_append",
                json!({"label": "notes", "content": "x"}),
            ),
            Turn::call("c2", "sleepy", json!({"ms": 0, "tag": "a"})),
            Turn::call("c3", "sleepy", json!({"ms": 0, "tag": "b"})),
            Turn::call("c4", "sleepy", json!({"ms": 0, "tag": "c"})),
            Turn::call("c5", "finish", json!({})),
            Turn::text("never asked"),
        ],
        c,
        Some(registry()),
    )
    .await;
    let events = h.turn("go").await;
    let r = tool_results(&events);
    assert!(
        r[0].1 && r[0].0.contains("first call of a turn must be `sleepy`"),
        "{r:?}"
    );
    assert_eq!(r[1], ("a".into(), false));
    assert_eq!(r[2], ("b".into(), false));
    assert!(r[3].1 && r[3].0.contains("at most 2 calls"), "{r:?}");
    assert_eq!(r[4], ("finished".into(), false));
    assert!(matches!(
        last(&events),
        ResponseEvent::Done {
            reason: DoneReason::ExitTool,
            ..
        }
    ));
    assert_eq!(h.provider.calls(), 5, "the exit tool ended the loop");
    // The rules are shown to the model.
    let system = &h.provider.seen()[0].system;
    assert!(system.iter().any(|p| p.text.contains("must be `sleepy`")));
    h.cleanup().await;
}

async fn heartbeat_continues_the_batch(kind: pattern_db::Backend) {
    let mut c = config();
    c.rules = vec![ToolRule::ExitLoop {
        tool: "finish".into(),
    }];
    let h = Harness::with(
        kind,
        vec![
            Turn::call("c1", "finish", json!({"again": true})),
            Turn::text("and one more thing"),
        ],
        c,
        Some(registry()),
    )
    .await;
    let events = h.turn("go").await;
    assert!(matches!(
        last(&events),
        ResponseEvent::Done {
            reason: DoneReason::Completed,
            ..
        }
    ));
    let b = &h.batches().await[0];
    assert_eq!(b.info.state, BatchState::Complete);
    let last_msg = b.messages.last().unwrap();
    assert_eq!(last_msg.batch_type, BatchType::Continuation);
    assert_eq!(
        last_msg.content,
        vec![ContentBlock::text("and one more thing")]
    );
    h.cleanup().await;
}

async fn approval_is_asked_and_recorded(kind: pattern_db::Backend) {
    let mut c = config();
    c.rules = vec![ToolRule::RequiresApproval {
        tool: "sleepy".into(),
    }];
    let h = Harness::with(
        kind,
        vec![
            Turn::call("c1", "sleepy", json!({"ms": 0, "tag": "one"})),
            Turn::call("c2", "sleepy", json!({"ms": 0, "tag": "two"})),
            Turn::text("ok"),
        ],
        c,
        Some(registry()),
    )
    .await;
    // No approver yet: the first call is denied. Then an approver says yes.
    let (approver, mut requests) = ChannelApprover::new(4);
    let runtime = h.agent.runtime_arc().clone();
    let answered = tokio::spawn(async move {
        let mut n = 0;
        while let Some(p) = requests.recv().await {
            assert_eq!(p.request.tool, "sleepy");
            let _ = p.reply.send(Decision::Approved);
            n += 1;
        }
        n
    });
    let first = h.turn("one").await;
    assert!(
        tool_results(&first)[0].0.contains("no approver"),
        "{:?}",
        tool_results(&first)
    );
    runtime.permissions().set_approver(Arc::new(approver)).await;
    h.provider
        .push(Turn::call("c3", "sleepy", json!({"ms": 0, "tag": "three"})));
    h.provider.push(Turn::text("done"));
    let second = h.turn("two").await;
    assert!(
        tool_results(&second)
            .iter()
            .any(|(c, e)| c == "three" && !e),
        "{:?}",
        tool_results(&second)
    );
    runtime.permissions().clear_approver().await;
    let decisions: Vec<_> = runtime
        .messages()
        .recent_activity(50)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "permission_decision")
        .map(|e| {
            e.payload["decision"]["decision"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        decisions.contains(&"approved".to_owned()) && decisions.contains(&"denied".to_owned()),
        "{decisions:?}"
    );
    drop(runtime);
    let approved = tokio::time::timeout(Duration::from_secs(5), answered)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        approved, 1,
        "the approver answered the one guarded call it saw"
    );
    h.cleanup().await;
}

async fn concurrent_triggers_are_serialised(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::Slow(
                Duration::from_millis(300),
                vec![ContentBlock::text("first")],
            ),
            Turn::text("second"),
        ],
    )
    .await;
    let a = h
        .agent
        .clone()
        .process(IncomingMessage::user("user says hi"))
        .await
        .unwrap();
    let b = h
        .agent
        .clone()
        .process(IncomingMessage::system("heartbeat"))
        .await
        .unwrap();
    let (ea, eb) = tokio::join!(
        futures::StreamExt::collect::<Vec<_>>(a),
        futures::StreamExt::collect::<Vec<_>>(b)
    );
    assert_eq!(kinds(&eb)[0], "queued", "the heartbeat waited, durably");
    assert!(matches!(last(&ea), ResponseEvent::Done { .. }));
    assert!(matches!(last(&eb), ResponseEvent::Done { .. }));
    let batches = h.batches().await;
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].info.batch_type, BatchType::UserRequest);
    assert_eq!(batches[1].info.batch_type, BatchType::SystemTrigger);
    // No overlap: the second batch began after the first completed.
    assert!(batches[0].info.completed_at.unwrap() <= batches[1].messages[0].created_at);
    // The second model call saw the first batch whole.
    assert_eq!(h.provider.seen()[1].messages.len(), 3);
    assert!(h.db.pending_queue(h.agent.id()).await.unwrap().is_empty());
    h.cleanup().await;
}

async fn cancelling_a_turn_abandons_it(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![Turn::Slow(
            Duration::from_secs(5),
            vec![ContentBlock::text("too late")],
        )],
    )
    .await;
    let mut stream = h
        .agent
        .clone()
        .process(IncomingMessage::user("hi"))
        .await
        .unwrap();
    let first = futures::StreamExt::next(&mut stream).await.unwrap();
    assert!(matches!(first, ResponseEvent::Received { .. }));
    drop(stream); // Ctrl-C
    assert!(pattern_core::db_agent::wait_idle(&h.agent, Duration::from_secs(10)).await);
    let b = &h.batches().await[0];
    assert_eq!(b.info.state, BatchState::Abandoned);
    assert_eq!(b.messages.len(), 1);
    assert_eq!(h.agent.state().await, AgentState::Ready);
    h.cleanup().await;
}

async fn storage_failure_rolls_the_step_back(kind: pattern_db::Backend) {
    // Scenario B of the incremental-save design: the database refuses the final save.
    let h = Harness::new(kind, vec![Turn::text("this answer cannot be saved")]).await;
    pattern_db::testkit::refuse_inserts(&h.db, "messages", "role", "assistant")
        .await
        .unwrap();
    let events = h.turn("please remember me").await;
    match last(&events) {
        ResponseEvent::Error { kind, message, .. } => {
            assert_eq!(*kind, ErrorKind::Storage);
            assert!(message.contains("injected"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let b = &h.batches().await[0];
    assert_eq!(b.messages.len(), 1, "the step rolled back whole");
    assert_eq!(
        b.messages[0].content,
        vec![ContentBlock::text("please remember me")]
    );
    assert_eq!(b.info.state, BatchState::Abandoned);
    // Once storage works again, a retry succeeds.
    pattern_db::testkit::allow_inserts(&h.db, "messages")
        .await
        .unwrap();
    h.provider.push(Turn::text("saved now"));
    let abandoned = pattern_db::Abandoned {
        batch: b.info.clone(),
        trigger: b.messages[0].clone(),
    };
    let ok = collect_response(futures::stream::iter(
        run(&h.agent, IncomingMessage::retry(&abandoned)).await,
    ))
    .await
    .unwrap();
    assert_eq!(ok.text, "saved now");
    h.cleanup().await;
}

async fn suspended_agents_queue_their_triggers(kind: pattern_db::Backend) {
    let h = Harness::new(kind, vec![Turn::text("back")]).await;
    h.agent.set_state(AgentState::Suspended).await.unwrap();
    let events = h.turn("are you there?").await;
    assert_eq!(kinds(&events), ["queued", "error"]);
    assert_eq!(h.db.pending_queue(h.agent.id()).await.unwrap().len(), 1);
    assert!(
        h.agent
            .set_state(AgentState::Processing {
                batch: pattern_db::SnowflakeId(1)
            })
            .await
            .is_err()
    );
    h.agent.set_state(AgentState::Ready).await.unwrap();
    // Delivered by claiming the agent, as the queue processor does.
    assert!(h.agent.deliver_next().await.unwrap());
    assert!(pattern_core::db_agent::wait_idle(&h.agent, Duration::from_secs(10)).await);
    assert!(h.db.pending_queue(h.agent.id()).await.unwrap().is_empty());
    let batches = h.batches().await;
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].info.state, BatchState::Complete);
    // The turn the caller got when the trigger was queued ended with the run.
    let turns = h.db.turns(h.agent.id(), 10).await.unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].state, pattern_db::TurnState::Finished);
    assert_eq!(turns[0].outcome, Some(pattern_db::TurnOutcome::Done));
    // Nothing is left to deliver.
    assert!(!h.agent.deliver_next().await.unwrap());
    assert_eq!(h.batches().await.len(), 1);
    h.cleanup().await;
}

async fn archival_tools_store_and_find(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "archival_insert",
                json!({"content": "The spare key is under the blue flowerpot.", "tags": ["home"]}),
            ),
            Turn::call(
                "c2",
                "archival_search",
                json!({"query": "where is the spare key"}),
            ),
            Turn::call(
                "c3",
                "search",
                json!({"query": "flowerpot", "scope": "messages"}),
            ),
            Turn::text("Under the blue flowerpot."),
        ],
    )
    .await;
    let events = h.turn("remember where the key is, then tell me").await;
    let r = tool_results(&events);
    assert!(r[0].0.starts_with("stored passage"), "{r:?}");
    assert!(
        r[1].0.contains("[archival,") && r[1].0.contains("blue flowerpot"),
        "{r:?}"
    );
    // The stored tool call that mentioned the flowerpot is in the agent's searchable history.
    assert!(!r[2].1, "{r:?}");
    assert!(r.iter().all(|(_, e)| !e), "{r:?}");
    h.cleanup().await;
}

/// With `recall` set, a later run's context holds the passages the agent stored earlier that
/// match its trigger, after the memory blocks; without it, none.
async fn recall_brings_back_what_the_agent_stored(kind: pattern_db::Backend) {
    let mut with_recall = config();
    with_recall.recall = 3;
    let h = Harness::with(
        kind,
        vec![
            Turn::call(
                "c1",
                "archival_insert",
                json!({"content": "The first hive was started in April 2024."}),
            ),
            Turn::text("Noted."),
            Turn::text("In April 2024."),
        ],
        with_recall,
        None,
    )
    .await;
    h.turn("my first hive was started in April 2024").await;
    h.turn("when did I start my first hive?").await;
    let seen = h.provider.seen();
    let recalled = |ctx: &context_v2::MemoryContext| {
        ctx.system
            .iter()
            .find(|p| p.kind == context_v2::SystemPartKind::Recalled)
            .map(|p| p.text.clone())
    };
    // The first run stored nothing yet when it started.
    assert_eq!(recalled(&seen[0]), None);
    let second = recalled(&seen[2]).expect("recalled passages in the second run");
    assert!(second.contains("April 2024"), "{second}");
    assert_eq!(
        seen[2].system.last().map(|p| &p.kind),
        Some(&context_v2::SystemPartKind::Recalled)
    );
    h.cleanup().await;

    // Off by default.
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "archival_insert",
                json!({"content": "The first hive was started in April 2024."}),
            ),
            Turn::text("Noted."),
            Turn::text("I do not know."),
        ],
    )
    .await;
    h.turn("my first hive was started in April 2024").await;
    h.turn("when did I start my first hive?").await;
    assert!(h.provider.seen().iter().all(|c| recalled(c).is_none()));
    h.cleanup().await;
}

/// Models repeat call ids across steps; the store refuses a repeat in one batch, so the agent
/// renames it, and every event of the call (started, finished, result) and the stored tool_use
/// name it the same way.
async fn a_repeated_call_id_is_renamed_alike_in_every_event(kind: pattern_db::Backend) {
    let h = Harness::new(
        kind,
        vec![
            Turn::call(
                "c1",
                "memory_append",
                json!({"label": "notes", "content": "one"}),
            ),
            Turn::call(
                "c1",
                "memory_append",
                json!({"label": "notes", "content": "two"}),
            ),
            Turn::text("Both noted."),
        ],
    )
    .await;
    let events = h.turn("note two things").await;
    assert!(matches!(last(&events), ResponseEvent::Done { .. }));
    let ids = |pick: fn(&ResponseEvent) -> Option<&String>| -> Vec<String> {
        events.iter().filter_map(pick).cloned().collect()
    };
    let started = ids(|e| match e {
        ResponseEvent::ToolCallStarted { call_id, .. } => Some(call_id),
        _ => None,
    });
    assert_eq!(started, ["c1", "c1~1"]);
    let finished = ids(|e| match e {
        ResponseEvent::ToolCallFinished { call_id, .. } => Some(call_id),
        _ => None,
    });
    let answered = ids(|e| match e {
        ResponseEvent::ToolResult { call_id, .. } => Some(call_id),
        _ => None,
    });
    assert_eq!(finished, started);
    assert_eq!(answered, started);
    let b = &h.batches().await[0];
    let stored: Vec<String> = b
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|c| match c {
            ContentBlock::ToolUse { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(stored, started);
    assert!(b.pending_tool_calls().is_empty());
    assert_eq!(h.notes().await, "likes tea\none\ntwo");
    h.cleanup().await;
}

conformance!(
    a_repeated_call_id_is_renamed_alike_in_every_event,
    recall_brings_back_what_the_agent_stored,
    archival_tools_store_and_find,
    plain_answer_is_streamed_and_stored,
    memory_tool_call_round_trip,
    bad_calls_become_error_results,
    parallel_results_are_stored_in_call_order,
    runaway_loop_ends_at_the_iteration_limit,
    provider_failure_abandons_and_keeps_the_trigger,
    truncated_stream_is_a_provider_error,
    rules_are_enforced,
    heartbeat_continues_the_batch,
    approval_is_asked_and_recorded,
    concurrent_triggers_are_serialised,
    cancelling_a_turn_abandons_it,
    storage_failure_rolls_the_step_back,
    suspended_agents_queue_their_triggers,
);
