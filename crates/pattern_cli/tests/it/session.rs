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
