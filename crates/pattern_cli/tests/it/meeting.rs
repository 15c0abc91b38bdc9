//! `pattern meeting run` through the real binary: three agents hold a two-round meeting on the
//! real local model (the llama.cpp server `cargo xtask setup` installs); a meeting run is killed
//! with SIGKILL at random points and resumed with `--resume` until it ends, and every turn is
//! in the log once, in order, with no batch left open; bad input is refused with nothing stored.
//!
//! The kill loop kills `PATTERN_MEETING_KILLS` times (default 12; the long form sets 100 or
//! more).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fake_model::FakeModel;
use crate::{Home, NOT_FOUND, USAGE};

/// The `meeting events` log of `id`, whole.
fn events(home: &Home, id: &str) -> Vec<Value> {
    home.json(&["meeting", "events", id, "--limit", "1000"])
        .as_array()
        .unwrap()
        .clone()
}

/// The agents the turns went to, in order (`turn_passed` events). A turn handed on by the last
/// speech and closed at once by the end (the next round would be past the plan) is not a turn.
fn turns(events: &[Value]) -> Vec<String> {
    let mut events = events.to_vec();
    let n = events.len();
    if n >= 2
        && events[n - 1]["event_type"] == "meeting_ended"
        && events[n - 2]["event_type"] == "turn_passed"
    {
        events.remove(n - 2);
    }
    events
        .iter()
        .filter(|e| e["event_type"] == "turn_passed")
        .map(|e| e["agent"].as_str().unwrap().to_owned())
        .collect()
}

/// Checks what every meeting must satisfy: at most one speech per turn, by its speaker; the
/// meeting's messages are exactly the speeches; it ended.
fn check_log(home: &Home, id: &str) -> Vec<String> {
    let events = events(home, id);
    let mut speaker: Option<String> = None;
    let mut spoke_this_turn = false;
    let mut speeches = Vec::new();
    for e in &events {
        match e["event_type"].as_str().unwrap() {
            "turn_passed" => {
                speaker = e["agent"].as_str().map(str::to_owned);
                spoke_this_turn = false;
            }
            "agent_spoke" => {
                assert!(!spoke_this_turn, "two speeches in one turn: {events:#?}");
                assert_eq!(e["agent"].as_str(), speaker.as_deref(), "out of turn");
                spoke_this_turn = true;
                speeches.push(e["agent"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    assert_eq!(
        events.last().unwrap()["event_type"],
        "meeting_ended",
        "{events:#?}"
    );
    let shown = home.json(&["meeting", "show", id]);
    let messages: Vec<String> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["from"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(messages, speeches, "the transcript and the log agree");
    speeches
}

/// No batch of any of `agents` is open, and each holds only whole batches of its turns.
fn no_open_batches(home: &Home, agents: &[&str]) {
    for agent in agents {
        let batches = home.json(&["batches", "list", "--agent", agent, "--limit", "1000"]);
        for b in batches.as_array().unwrap() {
            assert_ne!(b["state"], "open", "{agent}: {b}");
        }
    }
}

#[test]
fn three_agents_hold_a_two_round_meeting_on_the_local_model() {
    let home = Home::init();
    for name in ["ada", "bob", "carol"] {
        home.ok(&[
            "agent",
            "create",
            name,
            "--instructions",
            &format!(
                "You are {name}, a colleague in a team meeting. Answer in one or two plain \
                 sentences."
            ),
        ]);
    }
    let out = home.run(&[
        "--json",
        "meeting",
        "run",
        "--topic",
        "Pick a name for the office cat",
        "--agents",
        "ada,bob,carol",
        "--rounds",
        "2",
        "--turn-seconds",
        "120",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = report["meeting"].as_str().unwrap();
    // The live stream: one JSON object per line on stderr, a turn_started per turn.
    let started: Vec<String> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "turn_started")
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        started,
        ["ada", "bob", "carol", "ada", "bob", "carol"],
        "{stderr}"
    );
    let log = events(&home, id);
    assert_eq!(
        turns(&log),
        ["ada", "bob", "carol", "ada", "bob", "carol"],
        "each speaks in join order"
    );
    let speeches = check_log(&home, id);
    let transcript: Vec<String> = report["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["speaker"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(transcript, speeches);
    assert!(!speeches.is_empty(), "the local model said something");
    // Each agent's history holds its two turns, each a whole, finished agent_to_agent batch.
    for agent in ["ada", "bob", "carol"] {
        let batches = home.json(&["batches", "list", "--agent", agent]);
        let batches = batches.as_array().unwrap();
        assert_eq!(batches.len(), 2, "{agent}: {batches:?}");
        for b in batches {
            assert_eq!(b["batch_type"], "agent_to_agent");
            assert_eq!(b["state"], "complete", "{agent}: {b}");
        }
    }
}

/// A tiny deterministic generator (xorshift), seeded from the clock or `PATTERN_MEETING_SEED`.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn a_killed_meeting_resumes_with_every_turn_once() {
    let kills: usize = std::env::var("PATTERN_MEETING_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("PATTERN_MEETING_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("meeting kill loop: {kills} kills, PATTERN_MEETING_SEED={seed}");
    let mut rng = Rng(seed);
    let model = FakeModel::start();
    let home = Home::init();
    home.use_model(&model.base_url);
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    let rounds = (kills / 2 + 4).to_string();
    let mut args: Vec<String> = [
        "meeting",
        "run",
        "--topic",
        "name the cat",
        "--agents",
        "ada,bob",
        "--rounds",
        rounds.as_str(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut id: Option<String> = None;
    let mut killed = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        assert!(Instant::now() < deadline, "the meeting never finished");
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = home
            .command(&argv)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The meeting's id is the first line on stderr after the model line.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("meeting ") {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
            }
        });
        if id.is_none() {
            id = Some(
                rx.recv_timeout(Duration::from_secs(60))
                    .expect("meeting run announced its id"),
            );
        }
        if killed < kills {
            std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
            let _ = child.kill(); // SIGKILL
            let status = child.wait().unwrap();
            if status.success() {
                break; // it ended before the kill
            }
            killed += 1;
        } else {
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "the last resume ended the meeting: {status:?}"
            );
            break;
        }
        args = vec![
            "meeting".into(),
            "run".into(),
            "--resume".into(),
            id.clone().unwrap_or_default(),
        ];
    }
    let id = id.unwrap();
    let speeches = check_log(&home, &id);
    let order = turns(&events(&home, &id));
    for pair in order.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "turns alternate between the two agents: {order:?}"
        );
    }
    assert!(
        order.len() <= 2 * (kills / 2 + 4),
        "no turn beyond the planned rounds: {order:?}"
    );
    assert!(!speeches.is_empty());
    no_open_batches(&home, &["ada", "bob"]);
    eprintln!(
        "{killed} kills, {} turns, {} speeches",
        order.len(),
        speeches.len()
    );
}

#[test]
fn bad_meetings_are_refused_with_nothing_stored() {
    let model = FakeModel::start();
    let home = Home::init();
    home.use_model(&model.base_url);
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    home.ok(&["org", "create", "other"]);
    home.ok(&["--org", "other", "agent", "create", "eve"]);
    let base = ["meeting", "run", "--topic", "t"];
    for (extra, code) in [
        (vec!["--agents", "ada"], USAGE),
        (vec!["--agents", "ada,ada"], USAGE),
        (vec!["--agents", "ada,bob", "--rounds", "0"], USAGE),
        (vec!["--agents", "ada,bob", "--turn-seconds", "0"], USAGE),
        (vec!["--agents", "ada,nobody"], NOT_FOUND),
        // Another organization's agent is unknown here.
        (vec!["--agents", "ada,eve"], NOT_FOUND),
        (vec!["--agents", "ada,bob", "--policy", "chaos"], USAGE),
    ] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra.iter().copied());
        home.fails(&args, code);
    }
    home.fails(
        &[
            "meeting",
            "run",
            "--resume",
            "01890000-0000-7000-8000-000000000000",
        ],
        NOT_FOUND,
    );
    home.fails(&["meeting", "run", "--resume", "nope"], USAGE);
    for agent in ["ada", "bob"] {
        let batches = home.json(&["batches", "list", "--agent", agent]);
        assert!(batches.as_array().unwrap().is_empty(), "nothing ran");
    }
}
