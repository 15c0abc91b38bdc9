//! Approvals through the real binary, with the fake model calling `memory_append` on a block
//! the agent holds with `partner` permission (every change needs approval): `chat` with piped
//! stdin prompts `approve? [y/N]` and a `y` runs the tool; `send` leaves the request pending and
//! names `pattern approvals decide`, which another process then answers (the waiting run learns
//! it through the database); `approvals list|decide` and their exit codes.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use pattern::memory::{
    BlockType, DbMemoryStore, MemoryEditor, MemoryStore, NewMemoryBlock, Permission,
};

use crate::fake_model::FakeModel;
use crate::{CONFLICT, Home, NOT_FOUND, USAGE, block_on, finish};

/// `ada` (model: the fake) and `owner`, whose block `family` is shared with `ada` as `partner`.
fn home_with(fake: &FakeModel) -> Home {
    let home = Home::init();
    home.use_model(&fake.base_url);
    home.ok(&["agent", "create", "ada", "--instructions", "Be brief."]);
    home.ok(&["agent", "create", "owner"]);
    let url = home.sqlite_url();
    block_on(async {
        let db = pattern::Database::open_url(&url).await.unwrap();
        let ada = db.agent_by_name("ada").await.unwrap();
        let owner = db.agent_by_name("owner").await.unwrap();
        let memory = DbMemoryStore::new(db.clone());
        memory
            .create_block(
                owner.id,
                NewMemoryBlock {
                    label: "family".into(),
                    description: "About the family.".into(),
                    value: "Ada".into(),
                    char_limit: 500,
                    block_type: BlockType::Core,
                },
            )
            .await
            .unwrap();
        memory
            .share(owner.id, "family", ada.id, Permission::Partner)
            .await
            .unwrap();
        db.close().await;
    });
    home
}

fn family(home: &Home) -> String {
    let url = home.sqlite_url();
    block_on(async {
        let db = pattern::Database::open_url(&url).await.unwrap();
        let owner = db.agent_by_name("owner").await.unwrap();
        let value = DbMemoryStore::new(db.clone())
            .block(owner.id, "family")
            .await
            .unwrap()
            .value;
        db.close().await;
        value
    })
}

#[test]
fn chat_asks_and_a_yes_runs_the_tool() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = home
        .command(&["chat", "ada"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"remember this, guarded\ny\n").unwrap();
    }
    let out = finish(child, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[approval needed] memory_append"),
        "{stderr}"
    );
    assert!(stderr.contains("approve? [y/N]"), "{stderr}");
    assert!(stderr.contains("approved]"), "{stderr}");
    assert!(stderr.contains("[tool result]"), "{stderr}");
    assert!(stdout.contains("after tool:"), "{stdout}");
    assert!(family(&home).contains("likes jazz"));

    let listed = home.json(&["approvals", "list", "--state", "all"]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "approved");
    assert_eq!(listed[0]["decided_by"], "cli");
    assert_eq!(listed[0]["tool"], "memory_append");
    let id = listed[0]["id"].as_str().unwrap();
    // Answering again conflicts (exit 4); unknown ids are not found (3); bad input is usage (2).
    home.fails(&["approvals", "decide", id, "deny"], CONFLICT);
    home.fails(&["approvals", "decide", "12345", "approve"], NOT_FOUND);
    home.fails(&["approvals", "decide", "abc", "approve"], USAGE);
    home.fails(
        &["approvals", "decide", id, "approve", "--reason", "x"],
        USAGE,
    );
    assert_eq!(home.ok(&["approvals", "list"]), "no approval requests\n");
}

#[test]
fn chat_takes_anything_but_yes_as_a_denial() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = home
        .command(&["chat", "ada"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"remember this, guarded\nno\n").unwrap();
    }
    let out = finish(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("denied]"), "{stderr}");
    assert!(stderr.contains("[tool error]"), "{stderr}");
    assert_eq!(family(&home), "Ada", "nothing was written");
}

/// `send` cannot ask: it names the command, and the answer from another process reaches it.
#[test]
fn send_leaves_it_pending_and_another_process_answers() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = home
        .command(&["send", "ada", "remember this, guarded"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            let _ = tx.send(line);
        }
    });
    let id = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("send names the pending request");
        if let Some(rest) = line.split("pattern approvals decide ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let pending = home.json(&["approvals", "list"]);
    assert_eq!(pending[0]["id"], id.as_str(), "{pending}");
    assert_eq!(pending[0]["state"], "pending");
    assert_eq!(
        home.ok(&["approvals", "decide", &id, "approve"]),
        format!("approval {id} approved\n")
    );
    let out = finish(child, Duration::from_secs(60));
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("after tool:"),
        "{out:?}"
    );
    assert!(family(&home).contains("likes jazz"));
}
