//! The shapes as a contract, over a real (SQLite) store: the field names `docs/cli.md` and the
//! OpenAPI document promise, and the values carried from the stored rows. A renamed or removed
//! field fails here before it reaches a client.

use pattern::db::{BeginBatch, Database, NewAgent, NewMessage};
use pattern_api::views::{AgentView, BatchDetail, BatchView};
use serde_json::Value;

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys
}

#[test]
fn agent_and_batch_shapes_keep_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = Database::open_url(&url).await.unwrap();
        let mut new = NewAgent::named("ada");
        new.metadata = serde_json::json!({"instructions": "be brief"});
        let agent = db.create_agent(new).await.unwrap();
        let view = serde_json::to_value(AgentView::from(&agent)).unwrap();
        assert_eq!(
            keys(&view),
            [
                "created_at",
                "external_id",
                "id",
                "instructions",
                "metadata",
                "name"
            ]
        );
        assert_eq!(view["instructions"], "be brief");
        assert_eq!(view["id"], agent.id.to_string());

        let store = db.messages(agent.id);
        let received = store
            .begin_batch(NewMessage::user("hello"), BeginBatch::default())
            .await
            .unwrap();
        store
            .append_step(received.batch_id, vec![NewMessage::assistant("hi!")])
            .await
            .unwrap();
        store.complete_batch(received.batch_id).await.unwrap();

        let info = store.batch_info(received.batch_id).await.unwrap();
        let view = serde_json::to_value(BatchView::from(&info)).unwrap();
        assert_eq!(
            keys(&view),
            [
                "archived",
                "batch_type",
                "completed_at",
                "continuations",
                "duration_ms",
                "id",
                "lease_expires_at",
                "message_count",
                "parent_batch",
                "retried_at",
                "run_owner",
                "started_at",
                "state",
            ]
        );
        assert_eq!(view["state"], "complete");
        assert_eq!(view["message_count"], 2);
        assert_eq!(view["id"], received.batch_id.to_string());

        let batch = store.get_batch(received.batch_id).await.unwrap();
        let detail = serde_json::to_value(BatchDetail::from(&batch)).unwrap();
        let texts: Vec<String> = detail["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(texts.len(), 2);
        assert!(texts[0].contains("hello") && texts[1].contains("hi!"));
        db.close().await;
    });
}
