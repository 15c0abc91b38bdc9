//! `ContextBuilder` end to end on a real SQLite database: sections, budgets, the three
//! compression strategies (each committed to the database), and the bad-input errors.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use context_v2::{
    CachePoint, CompressionStrategy, ContextBuilder, ContextConfig, Error, EstimateCounter,
    ModelInfo, Provider, Summarizer, SystemPartKind, TokenCounter, ToolDefinition, validate,
};
use pattern_db::{BeginBatch, ContentBlock, NewMessage, Role, StoredBatch, Summary};
use serde_json::json;

use crate::support::{Agent, Blocks, agent, block};

/// A deterministic summarizer: lists the triggers it folds in, after the previous summary.
#[derive(Default)]
struct ListSummarizer {
    calls: Mutex<Vec<usize>>,
}

#[async_trait]
impl Summarizer for ListSummarizer {
    async fn summarize(
        &self,
        previous: Option<&Summary>,
        batches: &[StoredBatch],
        max_tokens: usize,
    ) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        assert!(max_tokens > 0);
        self.calls.lock().unwrap().push(batches.len());
        let mut out = previous
            .map(|p| format!("{} | ", p.content))
            .unwrap_or_default();
        out.push_str(
            &batches
                .iter()
                .map(|b| b.messages[0].text())
                .collect::<Vec<_>>()
                .join(", "),
        );
        Ok(out)
    }
}

async fn fixture(batches: usize, with_tools_every: usize) -> Agent {
    let f = agent(vec![
        block("persona", "I am Ada."),
        block("human", "Sam, likes tea."),
    ])
    .await;
    let store = &f.store;
    for i in 0..batches {
        let b = store
            .begin_batch(
                NewMessage::user(format!("question {i}?")),
                BeginBatch::default(),
            )
            .await
            .unwrap()
            .batch_id;
        if with_tools_every > 0 && i % with_tools_every == 0 {
            let id = format!("c{i}");
            store
                .append_step(
                    b,
                    vec![NewMessage::new(
                        Role::Assistant,
                        vec![ContentBlock::tool_use(&id, "search", json!({"q": i}))],
                    )],
                )
                .await
                .unwrap();
            store
                .append_step(
                    b,
                    vec![NewMessage::new(
                        Role::Tool,
                        vec![ContentBlock::tool_result(&id, "found", false)],
                    )],
                )
                .await
                .unwrap();
        }
        store
            .append_step(
                b,
                vec![NewMessage::assistant(format!(
                    "answer {i} {}",
                    "words ".repeat(20)
                ))],
            )
            .await
            .unwrap();
        store.complete_batch(b).await.unwrap();
    }
    f
}

fn config(window: usize, strategy: CompressionStrategy) -> ContextConfig {
    let mut c = ContextConfig::for_window("You are a helpful agent.", window);
    c.compression = strategy;
    c
}

fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "search".into(),
        description: "search memory".into(),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }]
}

#[tokio::test]
async fn builds_sections_in_order_within_the_window() {
    let f = fixture(5, 2).await;
    let counter = EstimateCounter::default();
    let config = config(100_000, CompressionStrategy::Truncate);
    let tools = tools();
    let rules = vec!["Call search before answering from memory.".to_owned()];
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .tools(&tools)
        .tool_rules(&rules)
        .build()
        .await
        .unwrap();
    let kinds: Vec<&SystemPartKind> = ctx.system.iter().map(|p| &p.kind).collect();
    assert!(matches!(kinds[0], SystemPartKind::Instructions));
    assert!(matches!(kinds[1], SystemPartKind::MemoryBlock { label } if label == "persona"));
    assert!(matches!(kinds[3], SystemPartKind::ToolRules));
    assert!(
        ctx.system[1].text.contains("chars=\"9/2000\""),
        "{}",
        ctx.system[1].text
    );
    assert_eq!(
        ctx.cache_points,
        [CachePoint::AfterTools, CachePoint::AfterSystem]
    );
    assert_eq!(ctx.assembly.included_batches.len(), 5);
    assert!(ctx.compression.is_none());
    validate(&ctx.messages).unwrap();
    assert!(ctx.tokens.total() <= 100_000 - config.response_reserve);
    assert!(ctx.tokens.system > 0 && ctx.tokens.tools > 0 && ctx.tokens.history > 0);
    f.db.close().await;
}

#[tokio::test]
async fn recalled_passages_come_last_and_only_as_many_as_fit() {
    let f = fixture(2, 0).await;
    let counter = EstimateCounter::default();
    let mut config = config(100_000, CompressionStrategy::Truncate);
    let recalled = vec![
        "The first hive was started in April 2024.".to_owned(),
        "Sam keeps two beehives in Lyon.".to_owned(),
    ];
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .recalled(&recalled)
        .build()
        .await
        .unwrap();
    let last = ctx.system.last().unwrap();
    assert_eq!(last.kind, SystemPartKind::Recalled);
    assert!(
        last.text
            .contains("- The first hive was started in April 2024.")
            && last.text.contains("- Sam keeps two beehives in Lyon."),
        "{}",
        last.text
    );

    // A system budget with room for one passage keeps the best one only; none, none at all:
    // recall never makes a context over budget.
    let without = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap();
    let header = "Memories recalled for this message (your archival memory):";
    config.budgets.system = without.tokens.system
        + counter.count_text(header)
        + 4
        + counter.count_text(&format!("\n- {}", recalled[0]))
        + 1;
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .recalled(&recalled)
        .build()
        .await
        .unwrap();
    let last = ctx.system.last().unwrap();
    assert_eq!(last.kind, SystemPartKind::Recalled);
    assert!(
        last.text.contains("April 2024") && !last.text.contains("Lyon"),
        "{}",
        last.text
    );
    config.budgets.system = without.tokens.system;
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .recalled(&recalled)
        .build()
        .await
        .unwrap();
    assert!(
        ctx.system
            .iter()
            .all(|p| p.kind != SystemPartKind::Recalled)
    );
    f.db.close().await;
}

#[tokio::test]
async fn memory_blocks_are_never_cut_to_fit() {
    let f = fixture(1, 0).await;
    let counter = EstimateCounter::default();
    let agent = f.store.agent_id();
    let big = Blocks(HashMap::from([(
        agent,
        vec![block("persona", &"x".repeat(20_000))],
    )]));
    let config = config(8_000, CompressionStrategy::Truncate);
    let err = ContextBuilder::new(&big, &f.store, &config, &counter)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OverBudget {
                section: "instructions and memory blocks",
                ..
            }
        ),
        "{err}"
    );
    let mut bad = config.clone();
    bad.response_reserve = bad.model_window;
    assert!(matches!(
        ContextBuilder::new(&f.memory, &f.store, &bad, &counter)
            .build()
            .await,
        Err(Error::Config(_))
    ));
    f.db.close().await;
}

#[tokio::test]
async fn truncation_archives_whole_old_batches_and_sticks() {
    let f = fixture(40, 3).await;
    let counter = EstimateCounter::default();
    let config = config(1_200, CompressionStrategy::Truncate);
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap();
    let report = ctx
        .compression
        .clone()
        .expect("history of 40 batches must not fit 1.2k tokens");
    assert!(!report.archived_batches.is_empty());
    assert!(report.history_tokens_after < report.history_tokens_before);
    assert!(ctx.tokens.total() <= config.model_window - config.response_reserve);
    validate(&ctx.messages).unwrap();
    // The archive is committed: the store's live history lost exactly those batches.
    for b in &report.archived_batches {
        assert!(f.store.batch_info(*b).await.unwrap().archived);
    }
    let live: Vec<_> = f
        .store
        .get_recent(1000)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id)
        .collect();
    assert_eq!(live, ctx.assembly.included_batches);
    // The next build fits without compressing again.
    let again = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap();
    assert!(again.compression.is_none());
    assert_eq!(again.messages, ctx.messages);
    f.db.close().await;
}

#[tokio::test]
async fn recursive_summaries_are_committed_with_their_archive_and_folded_forward() {
    let f = fixture(30, 0).await;
    let counter = EstimateCounter::default();
    let mut config = config(1_200, CompressionStrategy::RecursiveSummarization);
    config.budgets.summaries = 400;
    // Without a summarizer the build refuses and archives nothing.
    let err = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoSummarizer), "{err}");
    assert_eq!(f.store.get_recent(1000).await.unwrap().len(), 30);

    let summarizer = ListSummarizer::default();
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .summarizer(&summarizer)
        .build()
        .await
        .unwrap();
    let report = ctx.compression.clone().unwrap();
    let summary = f.store.get_summary().await.unwrap().unwrap();
    assert_eq!(Some(summary.id), report.summary);
    assert!(summary.content.starts_with("question 0?"));
    assert_eq!(summary.depth, 0);
    assert_eq!(ctx.cache_points.last(), Some(&CachePoint::AfterSummaries));
    assert!(matches!(
        ctx.system.last().unwrap().kind,
        SystemPartKind::Summary
    ));
    assert!(ctx.system.last().unwrap().text.contains("question 0?"));
    assert!(ctx.tokens.total() <= config.model_window - config.response_reserve);

    // More history: the next compression folds the first summary into a deeper one.
    for i in 30..60 {
        let b = f
            .store
            .begin_batch(
                NewMessage::user(format!("question {i}?")),
                BeginBatch::default(),
            )
            .await
            .unwrap()
            .batch_id;
        f.store
            .append_step(
                b,
                vec![NewMessage::assistant(format!(
                    "answer {i} {}",
                    "words ".repeat(20)
                ))],
            )
            .await
            .unwrap();
        f.store.complete_batch(b).await.unwrap();
    }
    let ctx2 = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .summarizer(&summarizer)
        .build()
        .await
        .unwrap();
    let newest = f.store.get_summary().await.unwrap().unwrap();
    assert_eq!(Some(newest.id), ctx2.compression.unwrap().summary);
    assert_eq!(newest.depth, 1);
    assert!(
        newest.content.starts_with(&summary.content),
        "the previous summary is carried forward"
    );
    assert_eq!(newest.from_batch, summary.from_batch);
    assert!(newest.message_count > summary.message_count);
    assert_eq!(summarizer.calls.lock().unwrap().len(), 2);

    // A summarizer that overruns its room is refused before anything is archived.
    for i in 60..90 {
        let b = f
            .store
            .begin_batch(
                NewMessage::user(format!("question {i}?")),
                BeginBatch::default(),
            )
            .await
            .unwrap()
            .batch_id;
        f.store
            .append_step(
                b,
                vec![NewMessage::assistant(format!(
                    "answer {i} {}",
                    "words ".repeat(20)
                ))],
            )
            .await
            .unwrap();
        f.store.complete_batch(b).await.unwrap();
    }
    let live_before = f.store.get_recent(1000).await.unwrap().len();
    let mut tight = config.clone();
    tight.budgets.summaries = 60;
    let err = ContextBuilder::new(&f.memory, &f.store, &tight, &counter)
        .summarizer(&summarizer)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OverBudget { .. }), "{err}");
    assert_eq!(
        f.store.get_recent(1000).await.unwrap().len(),
        live_before,
        "nothing archived"
    );
    assert_eq!(f.store.get_summary().await.unwrap().unwrap().id, newest.id);
    f.db.close().await;
}

#[tokio::test]
async fn importance_keeps_batches_where_the_agent_acted() {
    let f = fixture(24, 2).await;
    let counter = EstimateCounter::default();
    let config = config(1_200, CompressionStrategy::ImportanceBased);
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap();
    let report = ctx.compression.clone().unwrap();
    let archived: Vec<StoredBatch> = {
        let mut out = Vec::new();
        for id in &report.archived_batches {
            out.push(f.store.get_batch(*id).await.unwrap());
        }
        out
    };
    let kept = f.store.get_recent(1000).await.unwrap();
    let calls = |b: &StoredBatch| {
        b.messages
            .iter()
            .map(|m| m.tool_use_ids().count())
            .sum::<usize>()
    };
    let archived_with_calls = archived.iter().filter(|b| calls(b) > 0).count();
    let kept_with_calls = kept.iter().filter(|b| calls(b) > 0).count();
    assert!(
        archived_with_calls * 2 < archived.len().max(1),
        "mostly quiet batches go first"
    );
    assert!(
        kept_with_calls * 2 >= kept.len(),
        "batches with tool calls are kept"
    );
    assert!(ctx.tokens.total() <= config.model_window - config.response_reserve);
    validate(&ctx.messages).unwrap();
    f.db.close().await;
}

#[tokio::test]
async fn active_batch_is_kept_and_trimmed_while_its_tools_run() {
    let f = fixture(3, 0).await;
    let counter = EstimateCounter::default();
    let b = f
        .store
        .begin_batch(NewMessage::user("look it up"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    f.store
        .append_step(
            b,
            vec![NewMessage::new(
                Role::Assistant,
                vec![ContentBlock::tool_use("run", "search", json!({}))],
            )],
        )
        .await
        .unwrap();
    let config = config(100_000, CompressionStrategy::Truncate);
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .active_batch(Some(b))
        .build()
        .await
        .unwrap();
    let trimmed = ctx.assembly.trimmed_active.clone().unwrap();
    assert_eq!(trimmed.pending_calls, ["run"]);
    assert_eq!(
        ctx.messages.last().unwrap().content,
        vec![ContentBlock::text("look it up")]
    );
    // Not active: the crashed-looking batch is left out entirely.
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build()
        .await
        .unwrap();
    assert!(!ctx.assembly.included_batches.contains(&b));
    f.db.close().await;
}

#[tokio::test]
async fn model_limits_narrow_the_window() {
    let f = fixture(40, 0).await;
    let counter = EstimateCounter::default();
    let config = config(1_000_000, CompressionStrategy::Truncate);
    let model = ModelInfo {
        provider: Provider::Anthropic,
        model: "small".into(),
        context_window: 1_500,
        max_output_tokens: 300,
    };
    let ctx = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build_for_model(&model)
        .await
        .unwrap();
    assert!(ctx.compression.is_some());
    assert!(ctx.tokens.total() <= 1_200);
    f.db.close().await;
}

#[tokio::test]
async fn a_preview_reports_history_over_budget_and_compresses_nothing() {
    let f = fixture(40, 3).await;
    let counter = EstimateCounter::default();
    let config = config(1_000_000, CompressionStrategy::Truncate);
    let model = ModelInfo {
        provider: Provider::Anthropic,
        model: "small".into(),
        context_window: 1_500,
        max_output_tokens: 300,
    };
    let before: Vec<_> = f
        .store
        .get_recent(1000)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id)
        .collect();
    let preview = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .preview_for_model(&model)
        .await
        .unwrap();
    assert!(preview.history_over_budget);
    assert_eq!((preview.window, preview.reserve), (1_500, 300));
    assert!(preview.context.tokens.history > preview.history_budget);
    assert!(preview.context.compression.is_none());
    assert_eq!(preview.context.assembly.included_batches, before);
    // Nothing was archived: the live history is what it was.
    let after: Vec<_> = f
        .store
        .get_recent(1000)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id)
        .collect();
    assert_eq!(after, before);
    // A real build then compresses, and a preview after it fits.
    let built = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .build_for_model(&model)
        .await
        .unwrap();
    assert!(built.compression.is_some());
    let preview = ContextBuilder::new(&f.memory, &f.store, &config, &counter)
        .preview_for_model(&model)
        .await
        .unwrap();
    assert!(!preview.history_over_budget);
    assert_eq!(preview.context.messages, built.messages);
    f.db.close().await;
}

/// Compression at any budget: the build either fits the window, validated, with every batch
/// whole, or fails with a typed over-budget error; never anything else.
#[test]
fn any_budget_gives_a_valid_fitting_context_or_a_typed_error() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runner = proptest::test_runner::Config {
        cases: 24,
        ..Default::default()
    };
    let strategy = (1usize..25, 0usize..4, 300usize..3_000, 0u8..3);
    proptest!(runner, |((batches, tools_every, window, which) in strategy)| {
        rt.block_on(async {
            let f = fixture(batches, tools_every).await;
            let counter = EstimateCounter::default();
            let strategy = match which {
                0 => CompressionStrategy::Truncate,
                1 => CompressionStrategy::ImportanceBased,
                _ => CompressionStrategy::RecursiveSummarization,
            };
            let mut config = config(window, strategy);
            config.budgets.summaries = window / 4;
            let summarizer = ListSummarizer::default();
            let before: usize = f.store.get_recent(1000).await.unwrap().iter().map(|b| b.messages.len()).sum();
            match ContextBuilder::new(&f.memory, &f.store, &config, &counter).summarizer(&summarizer).build().await {
                Ok(ctx) => {
                    assert!(ctx.tokens.total() <= window - config.response_reserve, "{:?}", ctx.tokens);
                    validate(&ctx.messages).unwrap();
                    // Every provider accepts it: the formatters re-check pairing and alternation.
                    for provider in [Provider::Anthropic, Provider::OpenAi, Provider::Gemini] {
                        let model = ModelInfo { provider, model: "m".into(), context_window: window, max_output_tokens: 10 };
                        context_v2::format::request(&ctx, &model, &Default::default()).unwrap();
                    }
                    // Every included batch is whole: as many messages as the store holds for it.
                    for id in &ctx.assembly.included_batches {
                        let stored = f.store.get_batch(*id).await.unwrap();
                        let sent: std::collections::HashSet<_> =
                            ctx.messages.iter().filter(|m| m.batch_id == *id).map(|m| m.position).collect();
                        assert_eq!(sent.len(), stored.messages.len(), "batch {id} cut");
                    }
                }
                Err(Error::OverBudget { .. }) => {
                    // Nothing was archived by a refused build.
                    let after: usize = f.store.get_recent(1000).await.unwrap().iter().map(|b| b.messages.len()).sum();
                    assert_eq!(after, before);
                }
                Err(other) => panic!("unexpected error {other}"),
            }
            f.db.close().await;
        });
    });
}

#[tokio::test]
async fn inspection_renders_batches_as_text_and_json() {
    let f = fixture(2, 1).await;
    let b = f
        .store
        .begin_batch(NewMessage::user("still going"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    f.store
        .append_step(
            b,
            vec![NewMessage::new(
                Role::Assistant,
                vec![ContentBlock::tool_use("p1", "search", json!({"q": "x"}))],
            )],
        )
        .await
        .unwrap();
    let batches = f.store.get_recent(10).await.unwrap();
    let text = context_v2::inspect::batches_text(&batches);
    assert!(text.contains("UserRequest complete"), "{text}");
    assert!(text.contains("call search({\"q\":0}) [c0]"), "{text}");
    assert!(text.contains("result for [c0]: found"), "{text}");
    assert!(text.contains("waiting for p1"), "{text}");
    let value = context_v2::inspect::batches_json(&batches);
    let last = &value.as_array().unwrap()[2];
    assert_eq!(last["batch"]["state"], "open");
    assert_eq!(last["pending_tool_calls"], json!(["p1"]));
    assert_eq!(last["tool_pairs"][0]["result_seq"], json!(null));
    assert_eq!(value[0]["tool_pairs"][0]["result_seq"], json!(2));
    f.db.close().await;
}

/// Live batches older than the window the builder reads (`max_batches`) never leave the request
/// silently, even when the window fits the budget: with recursive summarization they are
/// summarised in chunks folded into one chain (each summary's range holds only batches some
/// summary saw) and reported; under truncation they are archived and reported.
#[tokio::test]
async fn batches_beyond_the_window_are_summarised_or_reported() {
    let f = fixture(130, 0).await;
    let counter = EstimateCounter::default();
    let mut cfg = config(100_000, CompressionStrategy::RecursiveSummarization);
    cfg.max_batches = 20;
    cfg.budgets.summaries = 20_000;
    let ids: Vec<_> = f
        .store
        .get_recent(1000)
        .await
        .unwrap()
        .iter()
        .map(|b| b.info.id)
        .collect();
    // Without a summarizer nothing is archived.
    let err = ContextBuilder::new(&f.memory, &f.store, &cfg, &counter)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoSummarizer), "{err}");
    assert_eq!(f.store.get_recent(1000).await.unwrap().len(), 130);

    let summarizer = ListSummarizer::default();
    let ctx = ContextBuilder::new(&f.memory, &f.store, &cfg, &counter)
        .summarizer(&summarizer)
        .build()
        .await
        .unwrap();
    let report = ctx.compression.clone().unwrap();
    // The 110 oldest: in three chunks (50, 50, 10), oldest first, folded into one chain.
    assert_eq!(report.archived_batches, ids[..110]);
    assert_eq!(*summarizer.calls.lock().unwrap(), [50, 50, 10]);
    let summary = f.store.get_summary().await.unwrap().unwrap();
    assert_eq!(Some(summary.id), report.summary);
    assert_eq!(
        (summary.from_batch, summary.through_batch),
        (ids[0], ids[109])
    );
    assert_eq!(summary.depth, 2);
    assert!(summary.content.starts_with("question 0?"));
    assert!(summary.content.contains("question 109?"));
    assert_eq!(ctx.assembly.included_batches, ids[110..]);
    assert!(ctx.system.last().unwrap().text.contains("question 109?"));
    // Every archived batch lies in the newest summary's range: retention may delete it.
    for b in &report.archived_batches {
        assert!(f.store.batch_info(*b).await.unwrap().archived);
    }
    // Nothing beyond the window any more: the next build changes nothing.
    let again = ContextBuilder::new(&f.memory, &f.store, &cfg, &counter)
        .summarizer(&summarizer)
        .build()
        .await
        .unwrap();
    assert!(again.compression.is_none());
    assert_eq!(summarizer.calls.lock().unwrap().len(), 3);
    f.db.close().await;

    // Truncation archives them and says so.
    let f = fixture(30, 0).await;
    let mut cfg = config(100_000, CompressionStrategy::Truncate);
    cfg.max_batches = 20;
    let ctx = ContextBuilder::new(&f.memory, &f.store, &cfg, &counter)
        .build()
        .await
        .unwrap();
    let report = ctx.compression.clone().unwrap();
    assert_eq!(report.archived_batches.len(), 10);
    assert_eq!(ctx.assembly.included_batches.len(), 20);
    assert_eq!(f.store.get_recent(1000).await.unwrap().len(), 20);
    f.db.close().await;
}
