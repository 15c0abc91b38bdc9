//! `export` / `import`: round trip equality, integrity checks, name conflicts, atomicity.

use std::collections::HashMap;

use pattern::db::Summary;
use pattern::{BeginBatch, NewMessage};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{CONFLICT, Home, NOT_FOUND, REFUSED, block_on, read, seed_history};

/// An agent with instructions, two blocks with history, two archival passages, the seeded
/// batches, and a summary that archived the first batch.
fn rich_agent(home: &Home) -> Vec<i64> {
    home.ok(&["agent", "create", "ada", "--instructions", "Be brief."]);
    let a = ["--agent", "ada"];
    home.ok(&[
        &[
            "memory",
            "block",
            "create",
            "persona",
            "--limit",
            "100",
            "--description",
            "me",
        ][..],
        &a,
    ]
    .concat());
    home.ok(&[
        &["memory", "block", "append", "persona", "I like engines."][..],
        &a,
    ]
    .concat());
    home.ok(&[
        &["memory", "block", "set", "persona", "Ada, engineer."][..],
        &a,
    ]
    .concat());
    home.ok(&[&["memory", "block", "undo", "persona"][..], &a].concat());
    home.ok(&[
        &[
            "memory", "block", "create", "task", "--limit", "50", "--type", "working", "--value",
            "export",
        ][..],
        &a,
    ]
    .concat());
    home.ok(&[
        &[
            "archival",
            "insert",
            "Ada wrote the first program",
            "--tag",
            "history",
        ][..],
        &a,
    ]
    .concat());
    home.ok(&[
        &[
            "archival",
            "insert",
            "The analytical engine used punched cards",
            "--key",
            "cards",
        ][..],
        &a,
    ]
    .concat());
    let ids = seed_history(&home.sqlite_url(), "ada");
    let url = home.sqlite_url();
    block_on(async {
        let db = pattern::Database::open_url(&url).await.unwrap();
        let agent = db.agent_by_name("ada").await.unwrap();
        let store = db.messages(agent.id);
        let first = pattern::SnowflakeId(ids[0]);
        store
            .summarize_and_archive(Summary {
                id: store.new_summary_id().unwrap(),
                agent_id: agent.id,
                content: "Ada greeted the user.".into(),
                from_batch: first,
                through_batch: first,
                message_count: 2,
                depth: 0,
                created_at: chrono::Utc::now(),
            })
            .await
            .unwrap();
        db.close().await;
    });
    ids
}

/// The body of an export with everything a re-import legitimately changes taken out: the name,
/// batch ids (replaced by their index), times of rows the import writes anew.
fn normalised(file: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(file).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["format"], "pattern-agent-export");
    assert_eq!(header["version"], 1);
    let mut sections: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut index = HashMap::new();
    let mut n = 0;
    for s in &mut sections {
        let kind = s["section"].as_str().unwrap().to_owned();
        let data = &mut s["data"];
        match kind.as_str() {
            "agent" => {
                data["name"] = Value::Null;
                data["created_at"] = Value::Null;
            }
            "block" => {
                for v in data["history"].as_array_mut().unwrap() {
                    v["created_at"] = Value::Null;
                }
            }
            "batch" => {
                index.insert(data["id"].as_i64().unwrap(), n);
                data["id"] = n.into();
                data["started_at"] = Value::Null;
                data["completed_at"] = Value::Null;
                n += 1;
            }
            _ => {}
        }
    }
    for s in &mut sections {
        if s["section"] == "summary" {
            let data = &mut s["data"];
            for key in ["from_batch", "through_batch"] {
                data[key] = index[&data[key].as_i64().unwrap()].into();
            }
            data["created_at"] = Value::Null;
        }
    }
    sections
}

#[test]
fn export_then_import_round_trips_the_whole_agent() {
    let home = Home::init();
    rich_agent(&home);
    let file = home.path("ada.jsonl");
    let exported = home.json(&["export", "ada", file.to_str().unwrap()]);
    assert_eq!(exported["blocks"], 2);
    assert_eq!(exported["batches"], 4);
    assert_eq!(exported["messages"], 11);
    assert_eq!(exported["summaries"], 1);
    assert_eq!(exported["archival"], 2);
    let original = read(&file);

    let err = home.fails(&["import", file.to_str().unwrap()], CONFLICT);
    assert!(err.contains("--rename"), "{err}");
    let imported = home.json(&["import", file.to_str().unwrap(), "--rename", "ada2"]);
    assert_eq!(imported["agent"], "ada2");
    assert_eq!(imported["batches"], 4);
    assert_eq!(imported["archival"], 2);

    let again = home.path("ada2.jsonl");
    home.ok(&["export", "ada2", again.to_str().unwrap()]);
    assert_eq!(normalised(&original), normalised(&read(&again)));

    // The imported agent works like the original in every view.
    let show = home.json(&["agent", "show", "ada2"]);
    assert_eq!(show["instructions"], "Be brief.");
    assert_eq!(show["blocks"], serde_json::json!(["persona", "task"]));
    let history = home.json(&["memory", "block", "history", "persona", "--agent", "ada2"]);
    assert_eq!(history.as_array().unwrap().len(), 4);
    assert_eq!(history[0]["change"], "undo");
    let batches = home.json(&["batches", "list", "--agent", "ada2"]);
    let archived: Vec<bool> = batches
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["archived"].as_bool().unwrap())
        .collect();
    assert_eq!(archived, [false, false, false, true]);
    // Archival passages came along, with tags and keys, and are found by search.
    let passages = home.json(&["archival", "list", "--agent", "ada2"]);
    assert_eq!(passages.as_array().unwrap().len(), 2);
    assert_eq!(passages[0]["key"], "cards");
    assert_eq!(passages[1]["tags"], serde_json::json!(["history"]));
    let hits = home.json(&["archival", "search", "punched", "--agent", "ada2"]);
    assert_eq!(hits[0]["text"], "The analytical engine used punched cards");

    // Importing into another data directory under the original name.
    let other = Home::init();
    other.ok(&["import", file.to_str().unwrap()]);
    other.ok(&["export", "ada", other.path("x.jsonl").to_str().unwrap()]);
    assert_eq!(
        normalised(&original),
        normalised(&read(&other.path("x.jsonl")))
    );
}

#[test]
fn damaged_truncated_or_foreign_files_are_refused_and_nothing_is_imported() {
    let home = Home::init();
    rich_agent(&home);
    let file = home.path("ada.jsonl");
    home.ok(&["export", "ada", file.to_str().unwrap()]);
    let good = read(&file);
    let bad = home.path("bad.jsonl");
    let try_import = |bytes: &[u8]| {
        std::fs::write(&bad, bytes).unwrap();
        home.fails(
            &["import", bad.to_str().unwrap(), "--rename", "copy"],
            REFUSED,
        )
    };

    let err = try_import(&good[..good.len() - 40]);
    assert!(
        err.contains("damaged export file") && err.contains("checksum"),
        "{err}"
    );
    let mut flipped = good.clone();
    let at = good.len() / 2;
    flipped[at] = if flipped[at] == b'a' { b'b' } else { b'a' };
    let err = try_import(&flipped);
    assert!(err.contains("checksum"), "{err}");
    let cut_at_line = good.iter().position(|&b| b == b'\n').unwrap() + 1;
    let err = try_import(&good[..cut_at_line]);
    assert!(err.contains("damaged"), "{err}");
    let err = try_import(b"");
    assert!(err.contains("damaged"), "{err}");
    let err = try_import(b"{\"hello\": 1}\n");
    assert!(err.contains("not a Pattern export"), "{err}");
    // An archival line altered, with the checksum made to match: refused by line number.
    let text = String::from_utf8(good.clone()).unwrap();
    let (head, body) = text.split_once('\n').unwrap();
    let (at, line) = body
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("\"section\":\"archival\""))
        .unwrap();
    let altered_line = line.replace("\"content\"", "\"contents\"");
    let altered_body = body.replacen(line, &altered_line, 1);
    let mut header: Value = serde_json::from_str(head).unwrap();
    header["body_sha256"] = format!("{:x}", Sha256::digest(altered_body.as_bytes())).into();
    let err = try_import(format!("{header}\n{altered_body}").as_bytes());
    assert!(err.contains(&format!("line {}", at + 2)), "{err}");

    home.fails(
        &["import", home.path("missing.jsonl").to_str().unwrap()],
        NOT_FOUND,
    );
    let agents = home.json(&["agent", "list"]);
    assert_eq!(
        agents.as_array().unwrap().len(),
        1,
        "nothing imported: {agents}"
    );
}

/// A well-formed file (right checksum) whose history cannot be stored as exported: the import is
/// refused as a whole and writes nothing.
#[test]
fn an_import_whose_history_cannot_be_reproduced_writes_nothing() {
    let home = Home::init();
    let batch = serde_json::json!({"section": "batch", "data": {
    "id": 1, "batch_type": "user_request", "state": "complete", "archived": false,
    "started_at": "2026-01-01T00:00:00Z", "completed_at": "2026-01-01T00:00:01Z",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "one"}], "created_at": "2026-01-01T00:00:00Z"},
        {"role": "user", "content": [{"type": "text", "text": "two"}], "created_at": "2026-01-01T00:00:00Z"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "created_at": "2026-01-01T00:00:01Z"}
    ]}});
    let agent = serde_json::json!({"section": "agent", "data": {
        "name": "odd", "metadata": null, "created_at": "2026-01-01T00:00:00Z"}});
    let block = serde_json::json!({"section": "block", "data": {
        "label": "notes", "description": "", "value": "v", "char_limit": 10, "block_type": "core",
        "version": 1, "history": [{"version": 1, "value": "v", "description": "", "change": "create",
        "created_at": "2026-01-01T00:00:00Z"}]}});
    let body = format!("{agent}\n{block}\n{batch}\n");
    let header = serde_json::json!({
        "format": "pattern-agent-export", "version": 1, "producer": "test",
        "exported_at": "2026-01-01T00:00:00Z", "agent": "odd",
        "sections": {"agent": 1, "block": 1, "batch": 1}, "body_lines": 3,
        "body_sha256": format!("{:x}", Sha256::digest(body.as_bytes())),
    });
    let file = home.path("odd.jsonl");
    std::fs::write(&file, format!("{header}\n{body}")).unwrap();
    let err = home.fails(&["import", file.to_str().unwrap()], REFUSED);
    assert!(
        err.contains("nothing was written") && err.contains("does not reproduce"),
        "{err}"
    );
    assert_eq!(home.json(&["agent", "list"]), serde_json::json!([]));
}

#[test]
fn an_agent_with_an_open_batch_is_not_exported() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    let url = home.sqlite_url();
    block_on(async {
        let db = pattern::Database::open_url(&url).await.unwrap();
        let agent = db.agent_by_name("ada").await.unwrap();
        db.messages(agent.id)
            .begin_batch(NewMessage::user("working..."), BeginBatch::default())
            .await
            .unwrap();
        db.close().await;
    });
    let file = home.path("ada.jsonl");
    let err = home.fails(&["export", "ada", file.to_str().unwrap()], CONFLICT);
    assert!(err.contains("open batch"), "{err}");
    assert!(!file.exists());
    home.fails(&["export", "nobody", file.to_str().unwrap()], NOT_FOUND);
}

/// A Letta agent file written from Letta's published schema (`AgentFileSchema`: `agents`,
/// `blocks`, `files`, `sources`, `tools`, `groups`, `mcp_servers`, `metadata`).
fn letta_file() -> Value {
    serde_json::json!({
        "agents": [{
            "id": "agent-0",
            "name": "Sam",
            "agent_type": "memgpt_v2_agent",
            "system": "You are Sam, a helpful assistant.",
            "block_ids": ["block-0", "block-1"],
            "tool_ids": ["tool-0"],
            "tool_rules": [{"tool_name": "send_message", "type": "exit_loop"}],
            "llm_config": {"model": "gpt-4o-mini", "context_window": 32000},
            "in_context_message_ids": ["message-0", "message-1"],
            "messages": [
                {"id": "message-0", "role": "system", "content": [{"type": "text", "text": "You are Sam."}],
                 "created_at": "2025-03-01T10:00:00Z"},
                {"id": "message-1", "role": "user", "content": [{"type": "text", "text": "What's the weather in Oslo?"}],
                 "created_at": "2025-03-01T10:00:01Z"},
                {"id": "message-2", "role": "assistant",
                 "content": [{"type": "reasoning", "reasoning": "look it up"}],
                 "tool_calls": [{"id": "call-1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}],
                 "created_at": "2025-03-01T10:00:02Z"},
                {"id": "message-3", "role": "tool", "tool_call_id": "call-1",
                 "content": [{"type": "text", "text": "{\"status\": \"OK\", \"message\": \"4 C, rain\"}"}],
                 "created_at": "2025-03-01T10:00:03Z"},
                {"id": "message-4", "role": "assistant", "content": [{"type": "text", "text": "Rainy, 4 C."}],
                 "created_at": "2025-03-01T10:00:04Z"},
                {"id": "message-5", "role": "user", "content": "And Bergen?",
                 "created_at": "2025-03-01T11:00:00Z"},
                {"id": "message-6", "role": "assistant", "content": [],
                 "tool_calls": [{"id": "call-2", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Bergen\"}"}}],
                 "created_at": "2025-03-01T11:00:01Z"}
            ],
            "files_agents": [],
            "group_ids": []
        }],
        "groups": [],
        "blocks": [
            {"id": "block-0", "label": "persona", "value": "I am Sam.", "limit": 5000,
             "description": "Who I am", "metadata": {}},
            {"id": "block-1", "label": "Human Notes", "value": "Lives in Oslo.", "limit": 5000,
             "metadata": {}}
        ],
        "files": [{"id": "file-0", "source_id": "source-0", "file_name": "trip.txt",
                   "content": "The ferry leaves at nine.\n\nBring a raincoat."}],
        "sources": [{"id": "source-0", "name": "notes"}],
        "tools": [{"id": "tool-0", "name": "get_weather"}],
        "mcp_servers": [],
        "metadata": {"revision_id": "5b804970e6a0"},
        "created_at": "2025-03-02T00:00:00Z"
    })
}

/// `import --letta`: the agent, its system prompt, blocks, messages (in batches, the pair of
/// call and return kept together, the unanswered call reported) and files arrive; what Pattern
/// does not take is listed; an older single-agent file is a clear refusal, nothing stored.
#[test]
fn letta_agent_file_round_trip_of_what_it_claims() {
    let home = Home::init();
    let file = home.path("sam.af");
    std::fs::write(&file, serde_json::to_vec(&letta_file()).unwrap()).unwrap();
    let out = home.run(&["--json", "import", "--letta", file.to_str().unwrap()]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["agent"], "Sam");
    assert_eq!(report["blocks"], 2);
    // The system message is the instructions; the rest is 6 messages in 2 batches.
    assert_eq!(report["messages"], 6, "{report}");
    assert_eq!(report["batches"], 2);
    assert_eq!(report["complete"], 1);
    assert_eq!(report["abandoned"], 1);
    assert_eq!(report["anomalies"][0]["kind"], "unfinished");
    assert_eq!(report["anomalies"][0]["pending"][0], "call-2");
    assert_eq!(report["archival"], 1);
    let not: Vec<&str> = report["not_carried"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for expected in ["1 tool(s)", "1 tool rule(s)", "1 reasoning content part(s)"] {
        assert!(
            not.iter().any(|n| n == &expected),
            "{expected} missing from {not:?}"
        );
    }
    assert!(
        not.iter().any(|n| n.starts_with("the model settings")),
        "{not:?}"
    );
    assert!(stderr.contains("not paired"), "{stderr}");

    let agent = home.json(&["agent", "show", "Sam"]);
    assert_eq!(
        agent["agent"]["instructions"]
            .as_str()
            .or(agent["instructions"].as_str()),
        Some("You are Sam, a helpful assistant."),
        "{agent}"
    );
    let persona = home.json(&["memory", "block", "show", "persona", "--agent", "Sam"]);
    assert_eq!(persona["value"], "I am Sam.");
    assert_eq!(persona["description"], "Who I am");
    let notes = home.json(&["memory", "block", "show", "human_notes", "--agent", "Sam"]);
    assert_eq!(notes["value"], "Lives in Oslo.");
    let batches = home.json(&["batches", "list", "--agent", "Sam"]);
    let rows = batches.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // Oldest: the weather question with its paired call and return, complete.
    assert_eq!(rows[1]["state"], "complete");
    assert_eq!(rows[1]["message_count"], 4);
    assert_eq!(rows[0]["state"], "abandoned");
    let passages = home.json(&["archival", "list", "--agent", "Sam"]);
    assert_eq!(
        passages[0]["content"],
        "The ferry leaves at nine.\n\nBring a raincoat."
    );
    assert_eq!(passages[0]["metadata"]["source"], "trip.txt");

    // The single-agent format of older Letta versions: refused by name, nothing stored.
    let old = home.path("old.af");
    std::fs::write(
        &old,
        r#"{"agent_type": "memgpt_agent", "core_memory": [], "messages": [], "name": "Old", "version": "0.6.4"}"#,
    )
    .unwrap();
    let err = home.fails(&["import", "--letta", old.to_str().unwrap()], REFUSED);
    assert!(err.contains("unknown Letta agent file version"), "{err}");
    assert!(err.contains("0.6.4"), "{err}");
    home.fails(&["agent", "show", "Old"], NOT_FOUND);
    // The same file again: the name is taken (exit 4), and the first import is intact.
    home.fails(&["import", "--letta", file.to_str().unwrap()], CONFLICT);
    assert_eq!(
        home.json(&["batches", "list", "--agent", "Sam"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
}
