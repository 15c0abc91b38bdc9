//! Regression tests for the failures that brick agents in other frameworks, each reproduced on a
//! concrete history in a real database and carried through the whole pipeline: store, recovery,
//! `ContextBuilder`, and the request body of every provider.
//!
//! - Letta #3250 / #2605: an interrupted tool call leaves a call without a result in the stored
//!   history, and every later request is rejected.
//! - LangGraph `INVALID_CHAT_HISTORY`: a cancelled run leaves an AIMessage with tool calls and no
//!   ToolMessage.
//! - OpenHands "tool_use ids were found without tool_result blocks": summarization or truncation
//!   cuts between a call and its result.
//! - Parallel tool results stored in completion order, not call order.

use context_v2::format::{RequestOptions, request};
use context_v2::{
    CompressionStrategy, ContextBuilder, ContextConfig, EstimateCounter, MemoryContext, ModelInfo,
    Provider,
};
use memory_v2::{MemoryBlock, Permission};
use pattern_db::{BeginBatch, ContentBlock, NewMessage, RecoveryScope, Role};
use serde_json::{Value, json};

use crate::support::{Agent, agent, block};

fn persona() -> MemoryBlock {
    MemoryBlock {
        permission: Permission::ReadOnly,
        ..block("persona", "A careful assistant.")
    }
}

fn call(ids: &[&str]) -> NewMessage {
    NewMessage::new(
        Role::Assistant,
        ids.iter()
            .map(|id| ContentBlock::tool_use(*id, "search", json!({"q": id})))
            .collect(),
    )
}

fn result(id: &str) -> NewMessage {
    NewMessage::new(
        Role::Tool,
        vec![ContentBlock::tool_result(id, format!("result {id}"), false)],
    )
}

/// Every provider's body for `ctx`; panics with the provider name when one is refused.
fn bodies(ctx: &MemoryContext) -> Vec<(Provider, Value)> {
    [Provider::Anthropic, Provider::OpenAi, Provider::Gemini]
        .into_iter()
        .map(|provider| {
            let model = ModelInfo {
                provider,
                model: "m".into(),
                context_window: 100_000,
                max_output_tokens: 1_000,
            };
            let body = request(ctx, &model, &RequestOptions::default())
                .unwrap_or_else(|e| panic!("{provider:?}: {e}"));
            (provider, body)
        })
        .collect()
}

/// Tool call ids that appear in a body without a result (any provider's shape).
fn unanswered(provider: Provider, body: &Value) -> Vec<String> {
    let text = body.to_string();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    match provider {
        Provider::Anthropic => {
            for m in body["messages"].as_array().unwrap() {
                for b in m["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("tool_use") => calls.push(b["id"].as_str().unwrap().to_owned()),
                        Some("tool_result") => {
                            results.push(b["tool_use_id"].as_str().unwrap().to_owned())
                        }
                        _ => {}
                    }
                }
            }
        }
        Provider::OpenAi => {
            for m in body["messages"].as_array().unwrap() {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    calls.push(c["id"].as_str().unwrap().to_owned());
                }
                if m["role"] == "tool" {
                    results.push(m["tool_call_id"].as_str().unwrap().to_owned());
                }
            }
        }
        Provider::Gemini => {
            let count = |needle: &str| text.matches(needle).count();
            assert_eq!(count("functionCall"), count("functionResponse"), "{text}");
        }
    }
    calls.into_iter().filter(|c| !results.contains(c)).collect()
}

#[tokio::test]
async fn letta_3250_interrupted_tool_call_never_bricks_the_agent() {
    let Agent {
        tdb: _tdb,
        db,
        store,
        memory,
    } = agent(vec![persona()]).await;
    let counter = EstimateCounter::default();
    let config = ContextConfig::for_window("Be helpful.", 50_000);
    // The run calls a tool and dies before the result is stored.
    let crashed = store
        .begin_batch(NewMessage::user("look this up"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(crashed, vec![call(&["t1"])])
        .await
        .unwrap();
    // Before recovery (lease still valid) and after it, the next request is well formed.
    for recovered in [false, true] {
        if recovered {
            let abandoned = store.recover_scope(RecoveryScope::AllOpen).await.unwrap();
            assert_eq!(
                abandoned[0].trigger.text(),
                "look this up",
                "the trigger is offered for retry"
            );
        }
        let next = store
            .begin_batch(NewMessage::user("are you there?"), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        let ctx = ContextBuilder::new(&memory, &store, &config, &counter)
            .active_batch(Some(next))
            .build()
            .await
            .unwrap();
        assert!(!ctx.assembly.included_batches.contains(&crashed));
        for (provider, body) in bodies(&ctx) {
            assert!(
                unanswered(provider, &body).is_empty(),
                "{provider:?}: {body}"
            );
            assert!(
                !body.to_string().contains("\"t1\""),
                "{provider:?} carries the dangling call"
            );
        }
        store
            .append_step(next, vec![NewMessage::assistant("yes")])
            .await
            .unwrap();
        store.complete_batch(next).await.unwrap();
    }
    db.close().await;
}

#[tokio::test]
async fn langgraph_invalid_chat_history_a_cancelled_run_is_cut_at_its_running_call() {
    let Agent {
        tdb: _tdb,
        db,
        store,
        memory,
    } = agent(vec![persona()]).await;
    let counter = EstimateCounter::default();
    let config = ContextConfig::for_window("Be helpful.", 50_000);
    // The active run has one finished call and one still running: the request keeps the finished
    // step and stops before the running call.
    let b = store
        .begin_batch(NewMessage::user("two things"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(b, vec![call(&["done"]), result("done")])
        .await
        .unwrap();
    store
        .append_step(b, vec![call(&["running"])])
        .await
        .unwrap();
    let ctx = ContextBuilder::new(&memory, &store, &config, &counter)
        .active_batch(Some(b))
        .build()
        .await
        .unwrap();
    assert_eq!(
        ctx.assembly.trimmed_active.as_ref().unwrap().pending_calls,
        ["running"]
    );
    for (provider, body) in bodies(&ctx) {
        assert!(
            unanswered(provider, &body).is_empty(),
            "{provider:?}: {body}"
        );
        assert!(
            body.to_string().contains("result done"),
            "{provider:?} lost the finished step"
        );
    }
    db.close().await;
}

#[tokio::test]
async fn openhands_compression_never_cuts_between_call_and_result() {
    let Agent {
        tdb: _tdb,
        db,
        store,
        memory,
    } = agent(vec![persona()]).await;
    let counter = EstimateCounter::default();
    // Long tool loops: every batch is call, result, call, result, answer.
    for i in 0..30 {
        let b = store
            .begin_batch(NewMessage::user(format!("task {i}")), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        for k in 0..2 {
            let id = format!("c{i}-{k}");
            store
                .append_step(b, vec![call(&[id.as_str()])])
                .await
                .unwrap();
            store.append_step(b, vec![result(&id)]).await.unwrap();
        }
        store
            .append_step(b, vec![NewMessage::assistant(format!("task {i} done"))])
            .await
            .unwrap();
        store.complete_batch(b).await.unwrap();
    }
    for window in [700, 900, 1_300, 2_000] {
        for strategy in [
            CompressionStrategy::Truncate,
            CompressionStrategy::ImportanceBased,
        ] {
            let mut config = ContextConfig::for_window("Be helpful.", window);
            config.compression = strategy;
            let ctx = ContextBuilder::new(&memory, &store, &config, &counter)
                .build()
                .await
                .unwrap();
            assert!(ctx.tokens.total() <= window - config.response_reserve);
            for (provider, body) in bodies(&ctx) {
                assert!(
                    unanswered(provider, &body).is_empty(),
                    "{provider:?} at {window}: {body}"
                );
            }
        }
    }
    db.close().await;
}

#[tokio::test]
async fn parallel_results_stored_in_completion_order_are_sent_in_call_order() {
    let Agent {
        tdb: _tdb,
        db,
        store,
        memory,
    } = agent(vec![persona()]).await;
    let counter = EstimateCounter::default();
    let config = ContextConfig::for_window("Be helpful.", 50_000);
    let b = store
        .begin_batch(NewMessage::user("three lookups"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store
        .append_step(b, vec![call(&["a", "b", "c"])])
        .await
        .unwrap();
    store.append_step(b, vec![result("c")]).await.unwrap();
    store.append_step(b, vec![result("a")]).await.unwrap();
    store
        .append_step(b, vec![result("b"), NewMessage::assistant("all three")])
        .await
        .unwrap();
    store.complete_batch(b).await.unwrap();
    let ctx = ContextBuilder::new(&memory, &store, &config, &counter)
        .build()
        .await
        .unwrap();
    let order: Vec<&str> = ctx
        .messages
        .iter()
        .flat_map(|m| m.tool_result_ids())
        .collect();
    assert_eq!(order, ["a", "b", "c"]);
    for (provider, body) in bodies(&ctx) {
        assert!(
            unanswered(provider, &body).is_empty(),
            "{provider:?}: {body}"
        );
        let text = body.to_string();
        let (pa, pb, pc) = (
            text.find("result a").unwrap(),
            text.find("result b").unwrap(),
            text.find("result c").unwrap(),
        );
        assert!(
            pa < pb && pb < pc,
            "{provider:?} sends results out of call order"
        );
    }
    db.close().await;
}
