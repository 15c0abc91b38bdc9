//! MCP through a real server: `GET|PUT /v1/agents/{id}/mcp-servers` (checked, scoped to the
//! organization) and an agent whose turn calls a real `mcp-server-time` tool after its servers
//! were set; and the memory server over streamable HTTP (`pattern_server::mcp`) driven by an
//! `rmcp` client: no key or another organization's key is refused, append, replace, a stale
//! version refused, archival insert and search. The MCP venv comes from `cargo xtask setup`.

use std::path::PathBuf;
use std::sync::Arc;

use pattern::AgentId;
use pattern::core::mcp::memory::MemoryServer;
use pattern::core::testkit::Turn;
use pattern_db::Backend;
use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::support::Server;

fn venv_python() -> String {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mcp/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `cargo xtask setup` (it installs the MCP test servers)",
        python.display()
    );
    python.to_string_lossy().into_owned()
}

#[tokio::test]
async fn an_agents_mcp_servers_are_set_over_http_and_its_next_turn_uses_them() {
    let s = Server::start(
        Backend::Sqlite,
        vec![
            Turn::call(
                "c1",
                "time__get_current_time",
                json!({"timezone": "Asia/Tokyo"}),
            ),
            Turn::text("It is late in Tokyo."),
        ],
    )
    .await;
    let a = s.agent(&s.key_a, "helper").await;
    let path = format!("/v1/agents/{a}/mcp-servers");
    let (status, empty) = s.get(&s.key_a, &path).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty, json!({"servers": {}}));

    let body =
        json!({"servers": {"time": {"command": venv_python(), "args": ["-m", "mcp_server_time"]}}});
    let (status, set) = s.send(Method::PUT, Some(&s.key_a), &path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["servers"]["time"]["args"][1], "mcp_server_time");
    let (_, read) = s.get(&s.key_a, &path).await;
    assert_eq!(read, set);

    // Refused: a bad name or configuration (nothing changes), another organization's agent.
    for bad in [
        json!({"servers": {"Time": {"command": "x"}}}),
        json!({"servers": {"t": {"command": "x", "url": "http://h/mcp"}}}),
        json!({"servers": {"t": {}}}),
    ] {
        let (status, err) = s.send(Method::PUT, Some(&s.key_a), &path, Some(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
        assert_eq!(err["error"]["code"], "invalid_request", "{err}");
    }
    let (_, unchanged) = s.get(&s.key_a, &path).await;
    assert_eq!(unchanged, set);
    let (status, _) = s.get(&s.key_b, &path).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The turn calls the server's tool like a built-in and stores its result.
    let (status, turn) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/messages"),
            json!({"content": "time in Tokyo?"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{turn}");
    assert_eq!(turn["tool_calls"][0]["name"], "time__get_current_time");
    assert_eq!(turn["tool_results"][0]["is_error"], false, "{turn}");
    assert!(
        turn["tool_results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Asia/Tokyo"),
        "{turn}"
    );

    let (status, cleared) = s
        .send(
            Method::PUT,
            Some(&s.key_a),
            &path,
            Some(json!({"servers": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cleared, json!({"servers": {}}));
}

async fn connect(url: &str, key: Option<&str>) -> Result<RunningService<RoleClient, ()>, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(key) = key {
        config = config.auth_header(key.to_owned());
    }
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| e.to_string())
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test]
async fn the_memory_server_over_http_needs_the_organizations_key_and_refuses_stale_versions() {
    let s = Server::start(Backend::Sqlite, vec![]).await;
    let a = s.agent(&s.key_a, "helper").await;
    let (status, _) = s
        .post(
            &s.key_a,
            &format!("/v1/agents/{a}/blocks"),
            json!({"label": "notes", "value": "likes tea"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let agent: AgentId = a.parse().unwrap();
    let memory = Arc::new(s.state.pattern().memory().clone());
    let server = MemoryServer::new(agent, "helper", memory.clone(), memory);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    let router = pattern_server::mcp::memory_router(s.db.clone(), agent, server, local)
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(pattern_server::mcp::serve_memory(listener, router, async {
        let _ = stopped.await;
    }));
    let url = format!("http://{local}/mcp");

    let refused = connect(&url, None).await.unwrap_err();
    assert!(
        refused.contains("401") || refused.to_lowercase().contains("auth"),
        "{refused}"
    );
    let refused = connect(&url, Some(&s.key_b)).await.unwrap_err();
    assert!(
        refused.contains("401") || refused.to_lowercase().contains("auth"),
        "{refused}"
    );

    let client = connect(&url, Some(&s.key_a)).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 7);
    let read: Value = serde_json::from_str(&text(
        &call(&client, "block_read", json!({"label": "notes"})).await,
    ))
    .unwrap();
    assert_eq!(read["value"], "likes tea");
    let v1 = read["version"].as_i64().unwrap();
    let appended = call(
        &client,
        "block_append",
        json!({"label": "notes", "content": "and scones", "expected_version": v1}),
    )
    .await;
    assert_eq!(appended.is_error, Some(false), "{appended:?}");
    let stale = call(
        &client,
        "block_replace",
        json!({"label": "notes", "old": "tea", "new": "coffee", "expected_version": v1}),
    )
    .await;
    assert_eq!(stale.is_error, Some(true));
    assert!(
        text(&stale).contains("version conflict"),
        "{}",
        text(&stale)
    );
    let replaced = call(
        &client,
        "block_replace",
        json!({"label": "notes", "old": "tea", "new": "coffee", "expected_version": v1 + 1}),
    )
    .await;
    assert_eq!(replaced.is_error, Some(false), "{}", text(&replaced));
    let (_, block) = s
        .get(&s.key_a, &format!("/v1/agents/{a}/blocks/notes"))
        .await;
    assert_eq!(block["value"], "likes coffee\nand scones");

    call(
        &client,
        "archival_add",
        json!({"content": "the kettle is blue"}),
    )
    .await;
    let found = call(&client, "archival_find", json!({"query": "kettle"})).await;
    assert!(
        text(&found).contains("the kettle is blue"),
        "{}",
        text(&found)
    );
    let bad = call(&client, "block_replace", json!({"label": "notes"})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(text(&bad).contains("`old` is required"), "{}", text(&bad));

    drop(client);
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}
