//! `batches list|show` and `recover` on a history seeded through the library.

use pattern::{BeginBatch, NewMessage};

use crate::{Home, NOT_FOUND, USAGE, block_on, seed_history};

#[test]
fn list_and_show_batches_with_tool_pairs_and_timings() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let ids = seed_history(&home.sqlite_url(), "ada");

    let list = home.json(&["batches", "list", "--agent", "ada"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    // Newest first.
    let listed: Vec<i64> = rows
        .iter()
        .map(|b| b["id"].as_str().unwrap().parse().unwrap())
        .collect();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(listed, newest_first);
    assert_eq!(rows[0]["state"], "abandoned");
    assert_eq!(rows[1]["state"], "complete");
    assert_eq!(rows[1]["batch_type"], "user_request");
    assert_eq!(rows[1]["message_count"], 4);
    assert!(rows[1]["duration_ms"].as_i64().unwrap() >= 0);
    assert!(rows[0]["completed_at"].is_null() || rows[0]["state"] == "abandoned");
    let limited = home.json(&["batches", "list", "--agent", "ada", "--limit", "2"]);
    assert_eq!(limited.as_array().unwrap().len(), 2);

    let id = ids[2].to_string();
    let show = home.json(&["batches", "show", &id, "--agent", "ada"]);
    assert_eq!(show["id"], id);
    assert_eq!(show["state"], "complete");
    let roles: Vec<&str> = show["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(show["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(
        show["tool_pairs"],
        serde_json::json!([{
            "tool_use_id": "call-2", "name": "weather", "call_sequence": 1,
            "result_sequence": 2, "is_error": true
        }])
    );
    assert_eq!(show["pending_tool_calls"], serde_json::json!([]));
    let text = home.ok(&["batches", "show", &id, "--agent", "ada"]);
    assert!(
        text.contains("tool call-2 `weather`: call #1 -> result #2 (error)"),
        "{text}"
    );

    home.fails(&["batches", "show", "12345", "--agent", "ada"], NOT_FOUND);
    home.fails(
        &["batches", "show", "not-a-number", "--agent", "ada"],
        USAGE,
    );
}

#[test]
fn recover_reports_what_it_abandoned() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let url = home.sqlite_url();
    let batch = block_on(async {
        let db = pattern::Database::open_url(&url).await.unwrap();
        let agent = db.agent_by_name("ada").await.unwrap();
        let r = db
            .messages(agent.id)
            .begin_batch(NewMessage::user("did you crash?"), BeginBatch::default())
            .await
            .unwrap();
        db.close().await;
        r.batch_id.get()
    });
    // The run lease has not expired: the default scope leaves the batch alone.
    assert_eq!(home.json(&["recover"]), serde_json::json!([]));
    let recovered = home.json(&["recover", "--all-open"]);
    let list = recovered.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["agent"], "ada");
    assert_eq!(list[0]["batch"]["id"], batch.to_string());
    assert_eq!(list[0]["batch"]["state"], "abandoned");
    assert_eq!(list[0]["trigger"]["text"], "did you crash?");
    assert!(
        home.ok(&["recover", "--all-open"])
            .contains("nothing to recover")
    );
}

/// `import --legacy`: a batch-less history goes into batches by the library's planner; what could
/// not be paired is reported (and stored abandoned, never sent); a bad line refuses the whole
/// file, nothing stored.
#[test]
fn legacy_history_is_split_into_batches_with_a_report() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let file = home.path("history.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"role": "user", "content": [{"type": "text", "text": "weather?"}], "created_at": "2024-05-01T10:00:00Z"}"#, "\n",
            r#"{"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "weather", "input": {}}]}"#, "\n",
            r#"{"role": "tool", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "sunny"}]}"#, "\n",
            r#"{"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}"#, "\n",
            "\n",
            r#"{"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}"#, "\n",
            r#"{"role": "assistant", "content": [{"type": "tool_use", "id": "c2", "name": "weather", "input": {}}]}"#, "\n",
            r#"{"role": "user", "content": [{"type": "text", "text": "never mind"}]}"#, "\n",
            r#"{"role": "tool", "content": [{"type": "tool_result", "tool_use_id": "ghost", "content": "?"}]}"#, "\n",
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = home.run(&["--json", "import", "--legacy", file, "--agent", "ada"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["messages"], 8);
    assert_eq!(report["batches"], 3, "{report}");
    assert_eq!(report["complete"], 1);
    assert_eq!(report["abandoned"], 2);
    let kinds: Vec<&str> = report["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"orphan_tool_result"), "{kinds:?}");
    assert!(kinds.contains(&"unfinished"), "{kinds:?}");
    assert!(stderr.contains("not paired"), "{stderr}");
    let list = home.json(&["batches", "list", "--agent", "ada"]);
    assert_eq!(list.as_array().unwrap().len(), 3);

    // One bad line: nothing of the file is stored.
    let bad = home.path("bad.jsonl");
    std::fs::write(
        &bad,
        concat!(
            r#"{"role": "user", "content": [{"type": "text", "text": "hi"}]}"#,
            "\n",
            r#"{"role": "robot", "content": []}"#,
            "\n",
        ),
    )
    .unwrap();
    let err = home.fails(
        &[
            "import",
            "--legacy",
            bad.to_str().unwrap(),
            "--agent",
            "ada",
        ],
        5,
    );
    assert!(err.contains("bad.jsonl:2:"), "{err}");
    assert_eq!(
        home.json(&["batches", "list", "--agent", "ada"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // --legacy needs --agent (clap's usage error).
    let out = home.run(&["import", "--legacy", file]);
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(String::from_utf8(out.stderr).unwrap().contains("--agent"));
}
