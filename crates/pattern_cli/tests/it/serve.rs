//! `pattern org`, `pattern key` and `pattern serve`: organizations and keys through the binary,
//! and the real server process answering HTTP on loopback until SIGTERM, applying stored
//! retention policies on its own.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::{CONFLICT, Home, NOT_FOUND, USAGE, block_on};

#[test]
fn organizations_and_keys() {
    let home = Home::init();
    let org = home.json(&["org", "create", "acme", "--name", "Acme Inc"]);
    assert_eq!(org["external_id"], "acme");
    assert_eq!(org["name"], "Acme Inc");
    home.fails(&["org", "create", "acme"], CONFLICT);
    home.ok(&["org", "create", "other"]);
    let listed = home.json(&["org", "list"]);
    let external: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["external_id"].as_str().unwrap())
        .collect();
    // `local` holds the CLI's own agents.
    assert_eq!(external, ["acme", "local", "other"]);

    let issued = home.json(&["key", "create", "--org", "acme", "--name", "ci"]);
    let secret = issued["secret"].as_str().unwrap();
    assert!(secret.starts_with("pat_") && secret.len() == 68, "{secret}");
    assert!(secret.starts_with(issued["prefix"].as_str().unwrap()));
    assert_eq!(issued["org"], "acme");
    assert_eq!(issued["revoked_at"], Value::Null);
    // Plain output is the secret alone (for scripts).
    let plain = home.ok(&["key", "create", "--org", "acme"]);
    assert!(plain.trim().starts_with("pat_"));

    let keys = home.json(&["key", "list", "--org", "acme"]);
    assert_eq!(keys.as_array().unwrap().len(), 2);
    let text = keys.to_string();
    assert!(!text.contains(secret), "a listing never shows a secret");
    assert!(keys[0].get("secret").is_none());

    let id = issued["id"].as_str().unwrap();
    // Another organization's key is not found through it, and stays live.
    home.fails(&["key", "revoke", "--org", "other", id], NOT_FOUND);
    let revoked = home.json(&["key", "revoke", "--org", "acme", id]);
    assert_ne!(revoked["revoked_at"], Value::Null);
    home.fails(&["key", "revoke", "--org", "acme", "not-a-uuid"], USAGE);
    home.fails(
        &[
            "key",
            "revoke",
            "--org",
            "acme",
            "01890000-0000-7000-8000-000000000000",
        ],
        NOT_FOUND,
    );
    home.fails(&["key", "create", "--org", "nobody"], NOT_FOUND);
}

#[test]
fn serve_answers_http_until_sigterm() {
    let home = Home::init();
    // A model that is never called: no turn is made here.
    let config = home.data_dir().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "# provider = \"llamacpp\"",
        "provider = \"llamacpp\"\n[model.llamacpp]\nbase_url = \"http://127.0.0.1:9/v1\"",
    );
    std::fs::write(&config, text).unwrap();
    home.ok(&["org", "create", "acme"]);
    let secret = home
        .ok(&["key", "create", "--org", "acme"])
        .trim()
        .to_owned();
    home.fails(&["serve", "--listen", "not-an-address"], USAGE);

    let mut child = Command::new(env!("CARGO_BIN_EXE_pattern"))
        .arg("--data-dir")
        .arg(home.data_dir())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("PATTERN_DATABASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut base = None;
    let mut seen = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.split("serving the Pattern API on ").nth(1) {
            base = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
        seen.push(line);
    }
    let base = base.unwrap_or_else(|| panic!("no address announced: {seen:?}"));
    let agent_id = block_on(async {
        let http = reqwest::Client::new();
        let health = http.get(format!("{base}/health")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        let denied = http.get(format!("{base}/v1/agents")).send().await.unwrap();
        assert_eq!(denied.status(), 401);
        let created: Value = http
            .post(format!("{base}/v1/agents"))
            .bearer_auth(&secret)
            .json(&json!({"name": "helper", "instructions": "Be brief."}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(created["name"], "helper");
        let listed: Value = http
            .get(format!("{base}/v1/agents"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed[0]["id"], created["id"]);
        created["id"].as_str().unwrap().to_owned()
    });
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
    // One identity: the CLI sees the agent the API created by the same name in the same
    // organization, and not in another one.
    let agents = home.json(&["--org", "acme", "agent", "list"]);
    let stored = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == agent_id.as_str())
        .expect("the agent is stored in acme");
    assert_eq!(stored["name"], "helper");
    let shown = home.json(&["--org", "acme", "agent", "show", "helper"]);
    assert_eq!(shown["id"], agent_id.as_str());
    home.fails(&["agent", "show", "helper"], NOT_FOUND);
    home.fails(&["--org", "nobody", "agent", "list"], NOT_FOUND);
    // ... and an agent the CLI makes in acme is the API's too: a second `helper` is refused.
    home.ok(&["--org", "acme", "agent", "create", "writer"]);
    home.fails(&["--org", "acme", "agent", "create", "helper"], CONFLICT);
    home.ok(&["agent", "create", "helper"]);
    home.fails(&["agent", "create", "a/b"], USAGE);
    home.fails(&["agent", "create", "evil\u{202e}name"], USAGE);
    let listed = home.json(&["--org", "acme", "agent", "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["helper", "writer"]);
}

/// `pattern serve` applies stored retention policies by itself (the first pass ten seconds
/// after start): an agent's old abandoned batch goes, its live batches and the agent without a
/// policy are untouched.
#[test]
fn serve_applies_stored_retention_policies() {
    let home = Home::init();
    home.ok(&["agent", "create", "ada"]);
    home.ok(&["agent", "create", "bob"]);
    let url = home.sqlite_url();
    let ada = crate::seed_history(&url, "ada");
    let bob = crate::seed_history(&url, "bob");
    crate::backdate(&url, 3);
    home.json(&[
        "retention",
        "policy",
        "set",
        "--agent",
        "ada",
        "--batches-older-than-days",
        "1",
    ]);
    let abandoned = ada.last().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pattern"))
        .arg("--data-dir")
        .arg(home.data_dir())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("PATTERN_DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut gone = false;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(500));
        if home
            .run(&["batches", "show", &abandoned, "--agent", "ada"])
            .status
            .code()
            == Some(NOT_FOUND)
        {
            gone = true;
            break;
        }
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    assert!(
        gone,
        "the server did not apply ada's policy within a minute"
    );
    for id in &ada[..ada.len() - 1] {
        home.json(&["batches", "show", &id.to_string(), "--agent", "ada"]);
    }
    for id in &bob {
        home.json(&["batches", "show", &id.to_string(), "--agent", "bob"]);
    }
}
