//! `session create|send|read|show|end` over the protocol.

use crate::{CONFLICT, Home, NOT_FOUND, USAGE};

#[test]
fn sync_session_takes_turns_and_delivers_to_the_inbox() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    let s = home.json(&["session", "create", "ada", "bob", "--sync"]);
    assert_eq!(s["session_type"], "sync");
    assert_eq!(s["status"], "active");
    assert_eq!(s["turn"], "ada");
    let id = s["id"].as_str().unwrap().to_owned();
    // One live session per pair: creating again returns it.
    assert_eq!(
        home.json(&["session", "create", "ada", "bob", "--sync"])["id"],
        id
    );

    let err = home.fails(&["session", "send", &id, "--from", "bob", "hi"], CONFLICT);
    assert!(
        err.contains("`bob` cannot send") && err.contains("ada's"),
        "{err}"
    );
    let sent = home.json(&["session", "send", &id, "--from", "ada", "hello bob"]);
    assert_eq!(sent["from"], "ada");
    assert_eq!(sent["to"], "bob");
    assert_eq!(sent["content"], "hello bob");
    assert_eq!(home.json(&["session", "show", &id])["turn"], "bob");
    home.json(&[
        "session",
        "send",
        &id,
        "--from",
        "bob",
        "--raw",
        "--type",
        "status",
        r#"{"ok":true}"#,
    ]);
    home.fails(
        &[
            "session",
            "send",
            &id,
            "--from",
            "ada",
            "--raw",
            "{not json",
        ],
        USAGE,
    );

    let all = home.json(&["session", "read", &id]);
    assert_eq!(all.as_array().unwrap().len(), 2);
    assert_eq!(all[1]["message_type"], "status");
    assert_eq!(all[1]["content"]["ok"], true);
    let inbox = home.json(&["session", "read", "--agent", "bob", "--mark-read"]);
    assert_eq!(inbox.as_array().unwrap().len(), 1);
    assert_eq!(
        home.json(&["session", "read", "--agent", "bob"]),
        serde_json::json!([])
    );
    home.fails(&["session", "read"], USAGE);

    let live = home.json(&["session", "list"]);
    assert_eq!(live.as_array().unwrap().len(), 1);
    assert_eq!(live[0]["id"], id.as_str());
    assert_eq!(
        home.json(&["session", "list", "--agent", "bob"])[0]["id"],
        id.as_str()
    );
    home.ok(&["agent", "create", "cy"]);
    assert_eq!(
        home.json(&["session", "list", "--agent", "cy"]),
        serde_json::json!([])
    );
    let err = home.fails(&["session", "list", "--agent", "nobody"], NOT_FOUND);
    assert!(err.contains("nobody"), "{err}");
    let ended = home.json(&["session", "end", &id, "--by", "ada"]);
    assert_eq!(ended["status"], "ended");
    home.fails(&["session", "send", &id, "--from", "bob", "late"], CONFLICT);
    assert_eq!(home.json(&["session", "list"]), serde_json::json!([]));
    home.fails(
        &["session", "show", "00000000-0000-7000-8000-000000000000"],
        NOT_FOUND,
    );
    home.fails(&["session", "create", "ada", "nobody"], NOT_FOUND);
}

/// Two agents on the real local model hold a sync session by themselves: ada's first message is
/// bob's turn, bob's final answer goes back as his reply, and so on until the limit of four
/// messages ends it; every message is read, every batch whole.
#[test]
fn two_agents_exchange_four_messages_on_the_local_model() {
    let home = Home::init();
    for name in ["ada", "bob"] {
        home.ok(&[
            "agent",
            "create",
            name,
            "--instructions",
            &format!("You are {name}. Answer the other agent in one short plain sentence."),
        ]);
    }
    let out = home.run(&[
        "--json",
        "session",
        "start",
        "ada",
        "bob",
        "--sync",
        "--max-messages",
        "4",
        "--wait-seconds",
        "300",
        "-m",
        "Hello bob, what is your favourite colour?",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ended"], true, "{report}");
    let messages = report["messages"].as_array().unwrap();
    let senders: Vec<&str> = messages
        .iter()
        .map(|m| m["from"].as_str().unwrap())
        .collect();
    assert_eq!(senders, ["ada", "bob", "ada", "bob"], "{report}");
    for m in messages {
        assert!(m["read_at"].is_string(), "read once answered: {m}");
        assert!(
            !m["content"]["text"].as_str().unwrap().trim().is_empty(),
            "{m}"
        );
    }
    let id = report["session"].as_str().unwrap();
    let shown = home.json(&["session", "show", id]);
    assert_eq!(shown["status"], "ended");
    assert_eq!(shown["delivery"], "agents");
    assert_eq!(shown["messages_sent"], 4);
    // Bob answered twice, ada twice (her last answer had nowhere to go: the session ended).
    for agent in ["ada", "bob"] {
        let batches = home.json(&["batches", "list", "--agent", agent]);
        let batches = batches.as_array().unwrap();
        assert_eq!(batches.len(), 2, "{agent}: {batches:?}");
        for b in batches {
            assert_eq!(b["batch_type"], "agent_to_agent");
            assert_eq!(b["state"], "complete", "{agent}: {b}");
        }
    }
}

#[test]
fn session_start_refuses_bad_input_with_nothing_stored() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    let err = home.fails(&["session", "start", "ada", "ada", "-m", "hi"], USAGE);
    assert!(err.contains("itself"), "{err}");
    let err = home.fails(
        &["session", "start", "ada", "nobody", "-m", "hi"],
        NOT_FOUND,
    );
    assert!(err.contains("nobody"), "{err}");
    let err = home.fails(
        &[
            "session",
            "start",
            "ada",
            "bob",
            "--max-messages",
            "0",
            "-m",
            "hi",
        ],
        USAGE,
    );
    assert!(err.contains("--max-messages"), "{err}");
    assert_eq!(home.json(&["session", "list"]), serde_json::json!([]));
}
