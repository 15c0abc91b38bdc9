//! `send` and `chat` through the real binary, against a fake OpenAI-compatible model server:
//! answers in text and JSON, exit codes of failed and cancelled turns, failed turns that do not
//! end a chat, and Ctrl-C (SIGINT) during a turn and at the prompt. After each, the stored
//! batches say what happened (a cancelled or failed turn is `abandoned`, its message kept).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::fake_model::FakeModel;
use crate::{Home, NOT_FOUND, finish, interrupt};

/// A data directory with the agent `ada`, whose model is `fake`.
fn home_with(fake: &FakeModel) -> Home {
    let home = Home::init();
    home.use_model(&fake.base_url);
    home.ok(&["agent", "create", "ada", "--instructions", "Be brief."]);
    home
}

/// The batches of `ada`, newest first.
fn batches(home: &Home) -> Vec<Value> {
    home.json(&["batches", "list", "--agent", "ada"])
        .as_array()
        .unwrap()
        .clone()
}

/// The text of a batch's first message (its trigger).
fn trigger(home: &Home, batch: &Value) -> String {
    let id = batch["id"].as_str().unwrap();
    let shown = home.json(&["batches", "show", id, "--agent", "ada"]);
    shown["messages"][0]["text"].as_str().unwrap().to_owned()
}

/// `pattern chat ada` with stdin, stdout and stderr piped.
fn spawn_chat(home: &Home) -> Child {
    home.command(&["chat", "ada"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn send_answers_in_text_and_json() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    assert_eq!(
        home.ok(&["send", "ada", "hello there"]),
        "echo: hello there\n"
    );

    let report = home.json(&["send", "ada", "and in JSON"]);
    let batch = report["batch_id"].as_str().unwrap();
    assert!(batch.parse::<i64>().is_ok(), "{report}");
    assert_eq!(report["text"], "echo: and in JSON");
    assert_eq!(report["tool_calls"], serde_json::json!([]));
    assert_eq!(report["tool_results"], serde_json::json!([]));
    assert_eq!(report["reason"], "completed");
    let mut fields: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["batch_id", "reason", "text", "tool_calls", "tool_results"]
    );

    let stored = batches(&home);
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0]["id"], batch);
    assert!(
        stored.iter().all(|b| b["state"] == "complete"),
        "{stored:?}"
    );
    assert_eq!(trigger(&home, &stored[1]), "hello there");
}

#[test]
fn a_message_the_agent_sends_the_user_reaches_the_terminal() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let out = home.ok(&["send", "ada", "notify me"]);
    assert!(out.contains("[ada to you] the kettle is on\n"), "{out}");
    assert!(out.ends_with("after tool: sent\n"), "{out}");
    // With --json, stdout stays one JSON document; the message goes to stderr.
    let output = home
        .command(&["--json", "send", "ada", "notify me"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["tool_results"][0]["content"], "sent", "{report}");
    assert!(text(&output.stderr).contains("[ada to you] the kettle is on"));
}

#[test]
fn send_to_an_unknown_agent_exits_3() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let err = home.fails(&["send", "nobody", "hello"], NOT_FOUND);
    assert!(err.contains("nobody"), "{err}");
    home.fails(&["--json", "send", "nobody", "hello"], NOT_FOUND);
}

#[test]
fn a_failing_model_fails_send_and_keeps_the_message_in_an_abandoned_batch() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let err = home.fails(&["send", "ada", "please fail"], 1);
    assert!(err.contains("the fake model refuses"), "{err}");
    assert!(err.contains("abandoned"), "{err}");
    // With --json too: nothing on stdout, one line on stderr.
    home.fails(&["--json", "send", "ada", "fail again"], 1);

    let stored = batches(&home);
    assert_eq!(stored.len(), 2);
    assert!(
        stored.iter().all(|b| b["state"] == "abandoned"),
        "{stored:?}"
    );
    assert_eq!(trigger(&home, &stored[0]), "fail again");
    assert_eq!(trigger(&home, &stored[1]), "please fail");
}

#[test]
fn chat_answers_each_line_and_a_failed_turn_does_not_end_it() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = spawn_chat(&home);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"first line\nplease fail\n\nsecond line\n")
        .unwrap();
    // stdin is closed here: end of input leaves after the last turn.
    let out = finish(child, Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert_eq!(stdout, "echo: first line\necho: second line\n", "{stderr}");
    assert_eq!(
        stderr.matches("the turn failed").count(),
        1,
        "one line for the failed turn: {stderr}"
    );
    assert!(stderr.contains("the fake model refuses"), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");

    let stored = batches(&home);
    let states: Vec<&str> = stored
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["complete", "abandoned", "complete"]);
    assert_eq!(trigger(&home, &stored[1]), "please fail");
}

#[test]
fn ctrl_c_cancels_a_chat_turn_and_the_session_goes_on() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = spawn_chat(&home);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"a slow question\nafter that\n")
        .unwrap();
    fake.wait_slow();
    // Mid-turn: the first words of the answer are on stdout.
    let mut answer = child.stdout.take().unwrap();
    let mut start = [0u8; 8];
    answer.read_exact(&mut start).unwrap();
    assert_eq!(&start, b"thinking");
    interrupt(&child);
    let out = finish(child, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.contains("[cancelled"), "{stderr}");
    let mut rest = String::new();
    answer.read_to_string(&mut rest).unwrap();
    // The cancelled answer's line is ended; the next line is answered in full.
    assert!(rest.ends_with("\necho: after that\n"), "{rest}");

    let stored = batches(&home);
    let states: Vec<&str> = stored
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["complete", "abandoned"]);
    assert_eq!(trigger(&home, &stored[1]), "a slow question");
    assert_eq!(trigger(&home, &stored[0]), "after that");
}

#[test]
fn ctrl_c_during_send_cancels_the_turn_with_exit_130() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let child = home
        .command(&["--json", "send", "ada", "a slow one"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fake.wait_slow();
    interrupt(&child);
    let out = finish(child, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(out.stdout.is_empty(), "{:?}", text(&out.stdout));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: cancelled"), "{stderr}");

    let stored = batches(&home);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["state"], "abandoned");
    assert_eq!(trigger(&home, &stored[0]), "a slow one");
}

#[test]
fn ctrl_c_at_the_chat_prompt_leaves() {
    let fake = FakeModel::start();
    let home = home_with(&fake);
    let mut child = spawn_chat(&home);
    // stdin stays open: only Ctrl-C can end the session.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "echo: hello\n");
    // The answer is complete; the prompt waits for the next line.
    std::thread::sleep(Duration::from_millis(500));
    interrupt(&child);
    let out = finish(child, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    drop(stdin);
    let stored = batches(&home);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["state"], "complete");
}
