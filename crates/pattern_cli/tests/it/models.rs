//! Per-agent models through the real binary, on SQLite and on PostgreSQL: `agent create --model`
//! and `agent set-model` store an agent's model, `send` uses it (two fake OpenAI-compatible
//! endpoints, each recording the model every request names), a model the endpoint does not know
//! fails the turn with its reason and keeps the message, and one `pattern serve` with no default
//! model serves an agent of its own model while the turns of an agent without one fail with a
//! line naming what to configure.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use pattern_db::Backend;
use pattern_db::testkit::TestDb;
use serde_json::{Value, json};

use crate::fake_model::FakeModel;
use crate::{Home, USAGE, block_on};

fn cli_agents_run_on_their_own_models(home: &Home) {
    let (a, b) = (FakeModel::start(), FakeModel::start());
    let created = home.json(&[
        "agent",
        "create",
        "ann",
        "--model",
        "openai_compatible/model-a",
        "--base-url",
        &a.base_url,
    ]);
    assert_eq!(created["metadata"]["model"]["model"], "model-a");
    home.ok(&[
        "agent",
        "create",
        "bob",
        "--model",
        "openai_compatible/model-b",
        "--base-url",
        &b.base_url,
    ]);
    // Malformed models are refused, nothing stored.
    home.fails(&["agent", "create", "cy", "--model", "nope/x"], USAGE);
    home.fails(&["agent", "create", "cy", "--model", "no-slash"], USAGE);
    home.fails(
        &["agent", "create", "cy", "--model", "openai_compatible/x"],
        USAGE,
    );
    assert_eq!(home.json(&["agent", "list"]).as_array().unwrap().len(), 2);

    assert_eq!(home.ok(&["send", "ann", "hello"]), "echo: hello\n");
    assert_eq!(home.ok(&["send", "bob", "hi"]), "echo: hi\n");
    assert_eq!(a.models_seen(), ["model-a"]);
    assert_eq!(b.models_seen(), ["model-b"]);

    // A model the endpoint refuses: the turn fails with its reason, the message is kept.
    home.ok(&[
        "agent",
        "set-model",
        "ann",
        "openai_compatible/missing-model",
        "--base-url",
        &a.base_url,
    ]);
    let err = home.fails(&["send", "ann", "remember the milk"], 1);
    assert!(err.contains("missing-model"), "{err}");
    let batches = home.json(&["batches", "list", "--agent", "ann"]);
    assert_eq!(batches[0]["state"], "abandoned", "{batches}");
    let id = batches[0]["id"].as_str().unwrap();
    let shown = home.json(&["batches", "show", id, "--agent", "ann"]);
    assert_eq!(shown["messages"][0]["text"], "remember the milk");

    // Set right (to B now), the agent runs again.
    home.ok(&[
        "agent",
        "set-model",
        "ann",
        "openai_compatible/model-b",
        "--base-url",
        &b.base_url,
    ]);
    assert_eq!(home.ok(&["send", "ann", "again"]), "echo: again\n");
    assert_eq!(a.models_seen(), ["model-a", "missing-model"]);
    assert_eq!(b.models_seen(), ["model-b", "model-b"]);
    home.ok(&["agent", "set-model", "ann", "--default"]);
    let shown = home.json(&["agent", "show", "ann"]);
    assert!(shown["metadata"].get("model").is_none(), "{shown}");
}

#[test]
fn cli_agents_run_on_their_own_models_on_sqlite() {
    cli_agents_run_on_their_own_models(&Home::init());
}

#[test]
fn cli_agents_run_on_their_own_models_on_postgres() {
    let tdb = block_on(TestDb::fresh(Backend::Postgres)).unwrap();
    let home = Home::with_url(tdb.config().url);
    home.ok(&["init"]);
    cli_agents_run_on_their_own_models(&home);
}

#[test]
fn serve_without_a_default_model_serves_agents_of_their_own() {
    let home = Home::init();
    let fake = FakeModel::start();
    home.ok(&["org", "create", "acme"]);
    let secret = home
        .ok(&["key", "create", "--org", "acme"])
        .trim()
        .to_owned();
    let mut child = home
        .command(&["serve", "--listen", "127.0.0.1:0", "--drain-secs", "1"])
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
    assert!(
        seen.iter().any(|l| l.contains("no default model")),
        "{seen:?}"
    );
    block_on(async {
        let http = reqwest::Client::new();
        let create = |body: Value| {
            let request = http
                .post(format!("{base}/v1/agents"))
                .bearer_auth(&secret)
                .json(&body);
            async move {
                let created: Value = request.send().await.unwrap().json().await.unwrap();
                created["id"].as_str().unwrap().to_owned()
            }
        };
        let own = create(json!({"name": "own", "model": {
            "provider": "openai_compatible", "model": "model-x", "base_url": fake.base_url,
        }}))
        .await;
        let none = create(json!({"name": "none"})).await;
        let send = |agent: String| {
            let request = http
                .post(format!("{base}/v1/agents/{agent}/messages"))
                .bearer_auth(&secret)
                .json(&json!({"content": "hello"}));
            async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            }
        };
        let (status, body) = send(own).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["text"], "echo: hello");
        let (status, body) = send(none).await;
        assert!(status >= 500, "{status} {body}");
        assert_eq!(body["error"]["details"]["message_saved"], true, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("no model is configured"), "{body}");
    });
    assert_eq!(fake.models_seen(), ["model-x"]);
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(child.wait().unwrap().success());
}
