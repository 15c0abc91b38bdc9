//! `pattern schedule add|list|remove` through the binary (shapes, exit codes), and a schedule
//! firing exactly once across a restart of `pattern serve` (SIGTERM before it is due, then a
//! second `serve` fires it).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fake_model::FakeModel;
use crate::{Home, NOT_FOUND, USAGE};

#[test]
fn schedules_are_added_listed_and_removed() {
    let home = Home::init();
    home.ok(&["agent", "create", "helper"]);
    home.ok(&["agent", "create", "other"]);
    let daily = home.json(&[
        "schedule",
        "add",
        "--agent",
        "helper",
        "--cron",
        "30 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--name",
        "review",
        "daily review",
    ]);
    assert_eq!(daily["kind"], "cron");
    assert_eq!(daily["cron"], "30 9 * * 1-5");
    assert_eq!(daily["tz"], "Europe/Berlin");
    assert_eq!(daily["agent"], "helper");
    assert_eq!(daily["name"], "review");
    assert_eq!(daily["message"], "daily review");
    assert_eq!(daily["deliveries"], 0);
    let id = daily["id"]
        .as_str()
        .expect("ids are decimal strings")
        .to_owned();
    let at = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let once = home.json(&["schedule", "add", "--agent", "other", "--at", &at, "ring"]);
    assert_eq!(once["kind"], "at");
    assert_eq!(once["tz"], "UTC");
    assert_eq!(once["cron"], Value::Null);

    // Refused input: usage errors (2), nothing stored; an unknown agent: 3.
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let e = home.fails(
        &["schedule", "add", "--agent", "helper", "--at", &past, "x"],
        USAGE,
    );
    assert!(e.contains("past"), "{e}");
    let e = home.fails(
        &[
            "schedule",
            "add",
            "--agent",
            "helper",
            "--cron",
            "61 * * * *",
            "x",
        ],
        USAGE,
    );
    assert!(e.contains("cron"), "{e}");
    let e = home.fails(
        &[
            "schedule",
            "add",
            "--agent",
            "helper",
            "--cron",
            "* * * * *",
            "--tz",
            "Mars/Olympus",
            "x",
        ],
        USAGE,
    );
    assert!(e.contains("Mars/Olympus"), "{e}");
    home.fails(
        &["schedule", "add", "--agent", "helper", "--at", "soon", "x"],
        USAGE,
    );
    // Argument errors are clap's (exit 2, its usage text on stderr).
    for args in [
        vec!["schedule", "add", "--agent", "helper", "x"],
        vec![
            "schedule",
            "add",
            "--agent",
            "helper",
            "--at",
            &at,
            "--cron",
            "* * * * *",
            "x",
        ],
        vec![
            "schedule", "add", "--agent", "helper", "--at", &at, "--tz", "UTC", "x",
        ],
    ] {
        let out = home.run(&args);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}");
        assert!(out.stdout.is_empty());
    }
    home.fails(
        &["schedule", "add", "--agent", "nobody", "--at", &at, "x"],
        NOT_FOUND,
    );

    let all = home.json(&["schedule", "list"]);
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    let mine = home.json(&["schedule", "list", "--agent", "helper"]);
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["id"], id.as_str());
    assert!(mine[0]["next_at"].as_str().is_some());
    let text = home.ok(&["schedule", "list"]);
    assert!(text.contains(&id) && text.contains("next "), "{text}");
    home.fails(&["schedule", "list", "--agent", "nobody"], NOT_FOUND);

    let removed = home.json(&["schedule", "remove", &id]);
    assert_eq!(removed["removed"]["id"], id.as_str());
    home.fails(&["schedule", "remove", &id], NOT_FOUND);
    home.fails(&["schedule", "remove", "not-a-number"], USAGE);
    let all = home.json(&["schedule", "list"]);
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(
        home.ok(&["schedule", "list", "--agent", "helper"]).trim(),
        "no schedules"
    );
}

/// Starts `pattern serve` on a free port; returns it once it announced its address.
fn serve(home: &Home) -> Child {
    let mut child = home
        .command(&["serve", "--listen", "127.0.0.1:0", "--drain-secs", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut announced = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !announced && line.contains("serving the Pattern API on ") {
                announced = true;
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("serve announced its address");
    child
}

fn sigterm(mut child: Child) {
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
}

fn wakeups(home: &Home) -> Vec<Value> {
    home.json(&["batches", "list", "--agent", "helper"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["batch_type"] == "system_trigger")
        .cloned()
        .collect()
}

#[test]
fn a_schedule_fires_once_across_a_restart() {
    let model = FakeModel::start();
    let home = Home::init();
    home.use_model(&model.base_url);
    home.ok(&["agent", "create", "helper"]);
    // Far enough ahead that starting and stopping the first serve fits before it on a loaded
    // 2-core machine (4 s did not, under parallel builds).
    let due = chrono::Utc::now() + chrono::Duration::seconds(12);
    let added = home.json(&[
        "schedule",
        "add",
        "--agent",
        "helper",
        "--at",
        &due.to_rfc3339(),
        "wake up",
    ]);
    let id = added["id"].as_str().unwrap().to_owned();

    // The first serve stops before the schedule is due: nothing fires, it stays.
    let first = serve(&home);
    sigterm(first);
    assert!(
        chrono::Utc::now() < due,
        "the first serve ran past the due time"
    );
    assert!(wakeups(&home).is_empty());
    let pending = home.json(&["schedule", "list"]);
    assert_eq!(pending[0]["id"], id.as_str());

    // The second serve fires it, once.
    let second = serve(&home);
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let done = wakeups(&home).iter().any(|b| b["state"] == "complete");
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the schedule never fired: {:?}",
            wakeups(&home)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    sigterm(second);
    // A third start fires nothing more.
    let third = serve(&home);
    std::thread::sleep(Duration::from_millis(1000));
    sigterm(third);
    let fired = wakeups(&home);
    assert_eq!(fired.len(), 1, "{fired:?}");
    let batch = home.json(&[
        "batches",
        "show",
        fired[0]["id"].as_str().unwrap(),
        "--agent",
        "helper",
    ]);
    assert_eq!(batch["messages"][0]["role"], "system");
    assert_eq!(batch["messages"][0]["text"], "wake up");
    assert_eq!(home.json(&["schedule", "list"]), serde_json::json!([]));
}
