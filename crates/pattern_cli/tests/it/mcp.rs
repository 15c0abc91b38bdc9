//! `pattern mcp add|list|remove|serve` through the binary: servers stored and listed (with
//! their tools, from a real `mcp-server-time`), config.toml's `[[mcp.servers]]`, refusals and
//! exit codes; and the memory server over stdio driven by the official Python MCP client
//! (`mcp_clients/memory_client.py`, in the venv `cargo xtask setup` installs under
//! `.cache/mcp`). A missing install fails with a message naming `cargo xtask setup`.

use std::path::PathBuf;

use serde_json::Value;

use crate::{Home, NOT_FOUND, USAGE};

fn venv_python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mcp/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `cargo xtask setup` (it installs the MCP test servers and client)",
        python.display()
    );
    python
}

#[test]
fn servers_are_added_listed_with_their_tools_and_removed() {
    let home = Home::init();
    home.ok(&["agent", "create", "helper"]);
    let python = venv_python();
    let python = python.to_str().unwrap();
    let added = home.json(&[
        "mcp",
        "add",
        "time",
        "--agent",
        "helper",
        "--env",
        "TZ=UTC",
        "--",
        python,
        "-m",
        "mcp_server_time",
    ]);
    assert_eq!(added["name"], "time");
    assert_eq!(added["config"]["command"], python);
    assert_eq!(added["config"]["args"][1], "mcp_server_time");
    assert_eq!(added["config"]["env"]["TZ"], "UTC");
    home.ok(&[
        "mcp",
        "add",
        "down",
        "--agent",
        "helper",
        "--url",
        "http://127.0.0.1:9/mcp",
    ]);

    let listed = home.json(&["mcp", "list", "--agent", "helper", "--tools"]);
    let names: Vec<&str> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["down", "time"]);
    let tools: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"time.get_current_time"), "{listed}");
    assert_eq!(listed["tools"][0]["wire_name"], "time__convert_time");
    // The server that is down is named, the rest is used.
    let problems = listed["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{listed}");
    assert!(
        problems[0].as_str().unwrap().contains("`down` left out"),
        "{listed}"
    );

    // Refusals: a bad name, neither command nor URL, an unknown server.
    let e = home.fails(
        &["mcp", "add", "My_Server", "--agent", "helper", "--", "x"],
        USAGE,
    );
    assert!(e.contains("cannot name an MCP server"), "{e}");
    let e = home.fails(&["mcp", "add", "empty", "--agent", "helper"], USAGE);
    assert!(e.contains("--url"), "{e}");
    home.ok(&["mcp", "remove", "down", "--agent", "helper"]);
    let e = home.fails(&["mcp", "remove", "down", "--agent", "helper"], NOT_FOUND);
    assert!(e.contains("no MCP server `down`"), "{e}");
    let listed = home.json(&["mcp", "list", "--agent", "helper"]);
    assert_eq!(listed["servers"].as_array().unwrap().len(), 1);
    assert_eq!(listed["tools"], Value::Null);
}

#[test]
fn config_toml_servers_are_used_and_checked() {
    let home = Home::init();
    home.ok(&["agent", "create", "helper"]);
    let python = venv_python();
    let config = home.data_dir().join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[[mcp.servers]]\nagent = \"helper\"\nname = \"clock\"\ncommand = \"{}\"\nargs = [\"-m\", \"mcp_server_time\"]\n",
        python.display()
    ));
    std::fs::write(&config, &text).unwrap();
    let listed = home.json(&["mcp", "list", "--agent", "helper", "--tools"]);
    assert_eq!(listed["servers"][0]["source"], "config");
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["wire_name"] == "clock__get_current_time"),
        "{listed}"
    );
    std::fs::write(
        &config,
        text.replace(
            "name = \"clock\"",
            "name = \"clock\"\nurl = \"http://x/mcp\"",
        ),
    )
    .unwrap();
    let e = home.fails(&["mcp", "list", "--agent", "helper"], USAGE);
    assert!(
        e.contains("[[mcp.servers]]") && e.contains("not both"),
        "{e}"
    );
}

#[test]
fn the_python_mcp_client_uses_an_agents_memory_over_stdio() {
    let home = Home::init();
    home.ok(&["agent", "create", "helper"]);
    home.ok(&[
        "memory",
        "block",
        "create",
        "notes",
        "--agent",
        "helper",
        "--limit",
        "500",
        "--value",
        "likes tea",
    ]);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_clients/memory_client.py");
    let mut cmd = std::process::Command::new(venv_python());
    cmd.arg(script)
        .arg(env!("CARGO_BIN_EXE_pattern"))
        .arg(home.data_dir())
        .arg("helper")
        .env_remove("PATTERN_DATA_DIR")
        .env_remove("PATTERN_DATABASE_URL");
    for (key, value) in crate::model_env() {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&output.stdout));
    });
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "archival_add",
            "archival_find",
            "block_append",
            "block_read",
            "block_replace",
            "blocks_list",
            "history_search"
        ]
    );
    assert_eq!(seen["read"]["value"], "likes tea");
    let read_version = seen["read"]["version"].as_i64().unwrap();
    assert_eq!(
        seen["append"]["version"].as_i64().unwrap(),
        read_version + 1
    );
    assert_eq!(seen["stale"]["is_error"], true, "{seen}");
    assert!(
        seen["stale"]["text"]
            .as_str()
            .unwrap()
            .contains("version conflict"),
        "{seen}"
    );
    assert_eq!(
        seen["replace"]["version"].as_i64().unwrap(),
        read_version + 2
    );
    assert!(seen["search"].as_str().unwrap().contains("heron"), "{seen}");
    assert_eq!(seen["unknown"]["is_error"], true, "{seen}");
    // What the client wrote is the agent's memory.
    let block = home.json(&["memory", "block", "show", "notes", "--agent", "helper"]);
    assert_eq!(block["value"], "likes tea\nfrom the python client");
}

#[test]
fn an_agent_uses_another_agents_memory_server_with_no_tool_refused() {
    let home = Home::init();
    home.ok(&["agent", "create", "helper"]);
    home.ok(&["agent", "create", "reader"]);
    let data_dir = home.data_dir();
    home.ok(&[
        "mcp",
        "add",
        "mem",
        "--agent",
        "reader",
        "--",
        env!("CARGO_BIN_EXE_pattern"),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "mcp",
        "serve",
        "--agent",
        "helper",
    ]);
    let listed = home.json(&["mcp", "list", "--agent", "reader", "--tools"]);
    assert_eq!(listed["problems"], serde_json::json!([]), "{listed}");
    let wire: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["wire_name"].as_str().unwrap())
        .collect();
    assert_eq!(wire.len(), 7, "{listed}");
    assert!(wire.contains(&"mem__archival_find"), "{listed}");
}
