//! MCP servers' tools, against real servers installed by `cargo xtask setup` under `.cache/mcp`:
//! `mcp-server-time` and the Python SDK's small test servers in `mcp_servers/` (stdio),
//! `@modelcontextprotocol/server-everything` (stdio and streamable HTTP). A missing install
//! fails the test with a message naming `cargo xtask setup`; nothing is skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use pattern_core::mcp::client::{McpConnection, McpProblem, add_servers};
use pattern_core::mcp::{McpServerConfig, McpTransport};
use pattern_core::testkit::Turn;
use pattern_core::tool::{ToolRegistry, builtin};
use pattern_core::{DoneReason, ResponseEvent};
use pattern_db::{Backend, ContentBlock};
use serde_json::{Value, json};

use crate::support::{Harness, config, tool_results};

fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mcp")
}

fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask setup` (it installs the MCP test servers)",
        path.display()
    );
    path
}

fn python() -> String {
    installed(cache().join("venv/bin/python"))
        .to_string_lossy()
        .into_owned()
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/mcp_servers")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn stdio(name: &str, command: String, args: Vec<String>) -> McpServerConfig {
    McpServerConfig::new(
        name,
        McpTransport::Stdio {
            command,
            args,
            env: Default::default(),
        },
    )
    .unwrap()
}

fn time_server() -> McpServerConfig {
    stdio(
        "time",
        python(),
        vec![
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
    )
}

fn everything_js() -> String {
    installed(
        cache().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    )
    .to_string_lossy()
    .into_owned()
}

fn everything_server() -> McpServerConfig {
    stdio(
        "everything",
        "node".into(),
        vec![everything_js(), "stdio".into()],
    )
}

fn flaky_server() -> McpServerConfig {
    stdio("flaky", python(), vec![fixture("flaky.py")])
}

async fn registry_with(servers: &[McpServerConfig]) -> (ToolRegistry, Vec<McpProblem>) {
    let mut registry = builtin::registry().unwrap();
    let problems = add_servers(&mut registry, servers, Duration::from_secs(20)).await;
    (registry, problems)
}

/// Runs one scripted turn that calls `calls` in order (one step each), then answers.
async fn run_calls(
    registry: ToolRegistry,
    calls: Vec<(&str, Value)>,
    tool_timeout: Duration,
) -> (Harness, Vec<ResponseEvent>) {
    let mut turns: Vec<Turn> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, input))| Turn::call(&format!("c{i}"), name, input))
        .collect();
    turns.push(Turn::text("done"));
    let mut cfg = config();
    cfg.tool_timeout = tool_timeout;
    let h = Harness::with(Backend::Sqlite, turns, cfg, Some(Arc::new(registry))).await;
    let events = h.turn("go").await;
    (h, events)
}

#[tokio::test]
async fn the_time_servers_tools_are_listed_and_called_over_stdio() {
    let (registry, problems) = registry_with(&[time_server()]).await;
    assert!(problems.is_empty(), "{problems:?}");
    assert!(
        registry.get("time__get_current_time").is_some(),
        "{:?}",
        registry.names()
    );
    let def = registry
        .definitions()
        .into_iter()
        .find(|d| d.name == "time__get_current_time")
        .unwrap();
    assert!(
        def.description.starts_with("[time.get_current_time]"),
        "{}",
        def.description
    );
    assert_eq!(def.input_schema["type"], "object");
    let (h, events) = run_calls(
        registry,
        vec![(
            "time__get_current_time",
            json!({"timezone": "Europe/Paris"}),
        )],
        Duration::from_secs(20),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    assert!(!results[0].1, "{results:?}");
    assert!(results[0].0.contains("Europe/Paris"), "{results:?}");
    h.cleanup().await;
}

#[tokio::test]
async fn server_everything_echoes_and_adds_over_stdio() {
    let (registry, problems) = registry_with(&[everything_server()]).await;
    assert!(problems.is_empty(), "{problems:?}");
    let (h, events) = run_calls(
        registry,
        vec![
            ("everything__echo", json!({"message": "hello mcp"})),
            ("everything__get-sum", json!({"a": 2, "b": 40})),
        ],
        Duration::from_secs(20),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 2, "{events:?}");
    assert!(
        results[0].0.contains("hello mcp") && !results[0].1,
        "{results:?}"
    );
    assert!(results[1].0.contains("42") && !results[1].1, "{results:?}");
    h.cleanup().await;
}

#[tokio::test]
async fn a_schema_mismatch_never_reaches_the_server() {
    let (registry, _) = registry_with(&[everything_server()]).await;
    let err = registry
        .check("everything__get-sum", &json!({"a": "two"}))
        .unwrap_err();
    assert!(err.to_string().contains("invalid arguments"), "{err}");
}

#[tokio::test]
async fn server_everything_is_reached_over_streamable_http() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new("node")
        .args([everything_js(), "streamableHttp".into()])
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait until it listens.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let server = McpServerConfig::new(
        "web",
        McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
        },
    )
    .unwrap();
    let (registry, problems) = registry_with(&[server]).await;
    assert!(problems.is_empty(), "{problems:?}");
    let (h, events) = run_calls(
        registry,
        vec![("web__echo", json!({"message": "over http"}))],
        Duration::from_secs(20),
    )
    .await;
    let results = tool_results(&events);
    assert!(
        results[0].0.contains("over http") && !results[0].1,
        "{results:?}"
    );
    h.cleanup().await;
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_server_killed_mid_call_is_an_error_result_and_the_next_call_restarts_it() {
    let conn = McpConnection::new(flaky_server(), Duration::from_secs(20));
    let first = conn.call("pid", Default::default()).await.unwrap();
    let pid: i32 = first.content[0].as_text().unwrap().text.parse().unwrap();
    let slow = {
        let conn = conn.clone();
        tokio::spawn(async move {
            let mut args = serde_json::Map::new();
            args.insert("seconds".into(), json!(30));
            conn.call("slow", args).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .expect("a killed server never hangs the call")
        .unwrap();
    let err = killed.unwrap_err().to_string();
    assert!(
        err.contains("flaky") && err.contains("started again"),
        "{err}"
    );
    let again = conn.call("pid", Default::default()).await.unwrap();
    let new_pid: i32 = again.content[0].as_text().unwrap().text.parse().unwrap();
    assert_ne!(new_pid, pid, "a new server process answers");
}

#[tokio::test]
async fn a_hung_call_times_out_as_an_error_result_and_the_agent_keeps_working() {
    let (registry, _) = registry_with(&[flaky_server()]).await;
    let (h, events) = run_calls(
        registry,
        vec![
            ("flaky__slow", json!({"seconds": 60})),
            ("flaky__pid", json!({})),
        ],
        // Room for the second call to start the server again on a loaded machine.
        Duration::from_secs(8),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results.len(), 2, "{events:?}");
    assert!(
        results[0].1 && results[0].0.contains("did not finish"),
        "{results:?}"
    );
    assert!(
        !results[1].1 && results[1].0.parse::<i32>().is_ok(),
        "{results:?}"
    );
    assert!(matches!(
        events.last(),
        Some(ResponseEvent::Done {
            reason: DoneReason::Completed,
            ..
        })
    ));
    h.cleanup().await;
}

#[tokio::test]
async fn a_tool_named_like_a_built_in_is_refused_and_the_rest_is_used() {
    let (registry, problems) = registry_with(&[flaky_server()]).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].tool.as_deref(), Some("send_message"));
    assert!(
        problems[0].to_string().contains("built-in"),
        "{}",
        problems[0]
    );
    assert!(registry.get("flaky__send_message").is_none());
    assert!(registry.get("flaky__pid").is_some());
    assert!(registry.get("send_message").is_some(), "the built-in stays");
}

#[tokio::test]
async fn garbage_instead_of_json_rpc_is_a_clear_error() {
    let garbage = stdio("junk", python(), vec![fixture("garbage.py")]);
    let mut registry = builtin::registry().unwrap();
    let before = registry.names().len();
    let problems = add_servers(&mut registry, &[garbage], Duration::from_secs(5)).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    let text = problems[0].to_string();
    assert!(text.contains("MCP server `junk` left out"), "{text}");
    assert!(text.contains("handshake"), "{text}");
    assert_eq!(registry.names().len(), before);
}

#[tokio::test]
async fn a_server_that_is_not_installed_is_left_out_with_a_clear_error() {
    let missing = stdio("gone", "/nonexistent/mcp-server".into(), vec![]);
    let exits = stdio(
        "quits",
        python(),
        vec!["-c".into(), "import sys; sys.exit(3)".into()],
    );
    let (registry, problems) = registry_with(&[missing, exits, time_server()]).await;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].reason.contains("could not be started"),
        "{}",
        problems[0]
    );
    assert_eq!(problems[1].server, "quits");
    assert!(registry.get("time__get_current_time").is_some());
}

#[tokio::test]
async fn an_mcp_result_is_stored_paired_with_its_call() {
    let (registry, _) = registry_with(&[everything_server()]).await;
    let (h, events) = run_calls(
        registry,
        vec![("everything__echo", json!({"message": "kept"}))],
        Duration::from_secs(20),
    )
    .await;
    assert!(matches!(
        events.last(),
        Some(ResponseEvent::Done {
            reason: DoneReason::Completed,
            ..
        })
    ));
    let batches = h.batches().await;
    let messages = &batches[0].messages;
    let call_at = messages
        .iter()
        .position(|m| {
            m.content.iter().any(
                |b| matches!(b, ContentBlock::ToolUse { name, .. } if name == "everything__echo"),
            )
        })
        .expect("the call is stored");
    let result = messages[call_at + 1]
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .expect("its result follows it");
    assert_eq!(result.0, "c0");
    assert!(result.1.contains("kept") && !result.2, "{result:?}");
    h.cleanup().await;
}
