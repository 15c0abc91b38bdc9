//! The model summarizer: what the model is asked, and the checks on what it answers.

use std::sync::Arc;

use context_v2::{EstimateCounter, Summarizer};
use pattern_core::ModelSummarizer;
use pattern_core::testkit::{ScriptedProvider, Turn};
use pattern_db::testkit::TestDb;
use pattern_db::{BeginBatch, ContentBlock, NewAgent, NewMessage, Role};
use serde_json::json;

#[tokio::test]
async fn summaries_fold_the_transcript_and_respect_the_budget() {
    let tdb = TestDb::sqlite().unwrap();
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("s")).await.unwrap();
    let store = db.messages(agent.id);
    let r = store
        .begin_batch(
            NewMessage::user("my cat is called Miso"),
            BeginBatch::default(),
        )
        .await
        .unwrap();
    store
        .append_step(
            r.batch_id,
            vec![
                NewMessage::new(
                    Role::Assistant,
                    vec![ContentBlock::tool_use(
                        "c1",
                        "memory_append",
                        json!({"label": "pets"}),
                    )],
                ),
                NewMessage::new(
                    Role::Tool,
                    vec![ContentBlock::tool_result("c1", "appended", false)],
                ),
                NewMessage::assistant("Miso is a lovely name."),
            ],
        )
        .await
        .unwrap();
    store.complete_batch(r.batch_id).await.unwrap();
    let batches = vec![store.get_batch(r.batch_id).await.unwrap()];

    let model = ScriptedProvider::new(vec![
        Turn::text("The user's cat is Miso."),
        Turn::text(&"far too long ".repeat(200)),
        Turn::text("  "),
    ]);
    let summarizer = ModelSummarizer::new(
        Arc::new(model.clone()),
        Arc::new(EstimateCounter::default()),
    );
    let summary = summarizer.summarize(None, &batches, 100).await.unwrap();
    assert_eq!(summary, "The user's cat is Miso.");
    let asked = &model.seen()[0];
    let prompt = match &asked.messages[0].content[0] {
        ContentBlock::Text { text } => text.clone(),
        other => panic!("{other:?}"),
    };
    assert!(prompt.contains("user: my cat is called Miso"), "{prompt}");
    assert!(prompt.contains("(calls memory_append"), "{prompt}");
    assert!(prompt.contains("(tool result) appended"), "{prompt}");
    assert!(prompt.contains("at most 100 tokens"), "{prompt}");
    assert!(
        asked
            .messages
            .iter()
            .all(|m| m.tool_use_ids().next().is_none())
    );

    let too_long = summarizer.summarize(None, &batches, 100).await.unwrap_err();
    assert!(too_long.to_string().contains("budget is 100"), "{too_long}");
    let empty = summarizer.summarize(None, &batches, 100).await.unwrap_err();
    assert!(empty.to_string().contains("empty summary"), "{empty}");
    tdb.cleanup().await.unwrap();
}
