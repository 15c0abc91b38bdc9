//! Integration tests of the `pattern` binary: the real executable on a temporary data directory
//! (and once on PostgreSQL through `--database-url`), checking output, `--json` shapes and exit
//! codes. Turns (`chat`, `send`) run against a fake OpenAI-compatible model server on loopback
//! (`fake_model`); histories with shapes a model would not produce on demand (failed tools, a
//! crashed run) are seeded through `pattern_db` while no CLI process runs. The heavy tests
//! (`cluster_pg`, `cluster_sqlite`: many `pattern serve` processes killed and restarted under
//! load; `load_pg`, `load_sqlite`) are built from `harness` and `deploy` and run one at a time.
//! These tests must never touch the user's real data directory or a real model API: every
//! command gets `--data-dir` and a cleaned environment (no API keys).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod approvals;
mod basics;
mod batches;
mod chat;
mod cluster;
mod deploy;
mod fake_model;
mod harness;
mod load;
mod mcp;
mod meeting;
mod memory;
mod models;
mod observe;
mod pg;
mod schedule;
mod search;
mod serve;
mod session;
mod setup;
mod transfer;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// Exit codes, as documented in docs/cli.md.
pub const USAGE: i32 = 2;
pub const NOT_FOUND: i32 = 3;
pub const CONFLICT: i32 = 4;
pub const REFUSED: i32 = 5;

/// A temporary data directory and the commands run against it.
pub struct Home {
    dir: tempfile::TempDir,
    url: Option<String>,
    env: Vec<(String, PathBuf)>,
}

/// The embedding model `cargo xtask setup` installs in the workspace's `.cache`.
pub fn model_env() -> Vec<(String, PathBuf)> {
    let paths = pattern::search::ModelPaths::in_cache(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache"),
    );
    vec![
        (pattern::search::MODEL_DIR_ENV.to_owned(), paths.model_dir),
        (
            pattern::search::ORT_LIBRARY_ENV.to_owned(),
            paths.runtime_library,
        ),
    ]
}

impl Home {
    /// A data directory that `pattern init` has set up.
    pub fn init() -> Self {
        let home = Self::empty();
        home.ok(&["init"]);
        home
    }

    /// A data directory that does not exist yet.
    pub fn empty() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            url: None,
            env: model_env(),
        }
    }

    /// Commands use this database URL (`--database-url`).
    pub fn with_url(url: String) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            url: Some(url),
            env: model_env(),
        }
    }

    /// Commands see these environment variables (replacing the model paths).
    pub fn set_env(&mut self, env: Vec<(String, PathBuf)>) {
        self.env = env;
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The SQLite URL of the data directory's database.
    pub fn sqlite_url(&self) -> String {
        format!("sqlite://{}", self.data_dir().join("pattern.db").display())
    }

    /// Points `[model]` in config.toml at an OpenAI-compatible server (`.../v1`).
    pub fn use_model(&self, base_url: &str) {
        let config = self.data_dir().join("config.toml");
        let text = std::fs::read_to_string(&config).unwrap().replace(
            "# provider = \"llamacpp\"",
            &format!(
                "provider = \"llamacpp\"\n[model.llamacpp]\nbase_url = \"{base_url}\"\nmodel = \"fake\""
            ),
        );
        std::fs::write(&config, text).unwrap();
    }

    /// Runs `pattern --data-dir DIR ARGS...` with a clean environment.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `pattern --data-dir DIR ARGS...` with a clean environment, to run or spawn.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pattern"));
        cmd.arg("--data-dir").arg(self.data_dir());
        if let Some(url) = &self.url {
            cmd.arg("--database-url").arg(url);
        }
        cmd.args(args)
            .env_remove("PATTERN_DATA_DIR")
            .env_remove("PATTERN_DATABASE_URL")
            .env_remove("RUST_LOG")
            .env_remove("PATTERN_MODEL_DIR")
            .env_remove("PATTERN_ORT_LIBRARY")
            .env_remove("ORT_DYLIB_PATH")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("GEMINI_API_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env("NO_COLOR", "1");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "pattern {args:?} failed with {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs with `--json` and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
    }

    /// Runs, expects exit `code`, one `error: ` line on stderr and nothing on stdout; returns
    /// the message.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "pattern {args:?}: stderr {stderr}"
        );
        assert!(out.stdout.is_empty(), "stdout on failure: {:?}", out.stdout);
        if code != USAGE || stderr.starts_with("error: ") {
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "one line expected: {stderr}");
            assert!(lines[0].starts_with("error: "), "{stderr}");
        }
        stderr
    }
}

/// Sends SIGINT, as Ctrl-C in a terminal does.
pub fn interrupt(child: &Child) {
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits for the child's exit and output, killing it (and failing) after `limit`.
pub fn finish(child: Child, limit: Duration) -> Output {
    let pid = child.id().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
            panic!("pattern did not exit within {limit:?}");
        }
    }
}

/// Runs `f` on a fresh Tokio runtime (the tests themselves are synchronous: they run processes).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Moves everything stored in the database at `url` `days` days into the past (the testkit's
/// `backdate`), so retention with a real age finds it old.
pub fn backdate(url: &str, days: u64) {
    block_on(async {
        let db = pattern::Database::open_url(url).await.unwrap();
        pattern_db::testkit::backdate(&db, std::time::Duration::from_secs(days * 86_400))
            .await
            .unwrap();
        db.close().await;
    });
}

/// Seeds the agent `name` (which must exist) with a typical history through the library:
/// a plain exchange, one with a tool call and its result, one with a failed tool, and one
/// abandoned (never answered, then recovered). Returns the batch ids, oldest first.
pub fn seed_history(url: &str, name: &str) -> Vec<i64> {
    use pattern::{BeginBatch, ContentBlock, NewMessage, RecoveryScope, Role};
    block_on(async {
        let db = pattern::Database::open_url(url).await.unwrap();
        let agent = db.agent_by_name(name).await.unwrap();
        let store = db.messages(agent.id);
        let mut ids = Vec::new();

        let r = store
            .begin_batch(NewMessage::user("hello"), BeginBatch::default())
            .await
            .unwrap();
        store
            .append_step(
                r.batch_id,
                vec![NewMessage::assistant("hi, how can I help?")],
            )
            .await
            .unwrap();
        store.complete_batch(r.batch_id).await.unwrap();
        ids.push(r.batch_id.get());

        for (call, is_error) in [("call-1", false), ("call-2", true)] {
            let r = store
                .begin_batch(
                    NewMessage::user("what's the weather?"),
                    BeginBatch::default(),
                )
                .await
                .unwrap();
            store
                .append_step(
                    r.batch_id,
                    vec![NewMessage::new(
                        Role::Assistant,
                        vec![
                            ContentBlock::text("let me look"),
                            ContentBlock::tool_use(
                                call,
                                "weather",
                                serde_json::json!({"city": "Paris"}),
                            ),
                        ],
                    )],
                )
                .await
                .unwrap();
            store
                .append_step(
                    r.batch_id,
                    vec![NewMessage::new(
                        Role::Tool,
                        vec![ContentBlock::ToolResult {
                            tool_use_id: call.to_owned(),
                            content: "sunny, 21 C".to_owned(),
                            is_error,
                        }],
                    )],
                )
                .await
                .unwrap();
            store
                .append_step(r.batch_id, vec![NewMessage::assistant("It is sunny.")])
                .await
                .unwrap();
            store.complete_batch(r.batch_id).await.unwrap();
            ids.push(r.batch_id.get());
        }

        let r = store
            .begin_batch(NewMessage::user("are you there?"), BeginBatch::default())
            .await
            .unwrap();
        db.recover_all(RecoveryScope::AllOpen).await.unwrap();
        ids.push(r.batch_id.get());
        db.close().await;
        ids
    })
}

/// Reads a file.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}
