//! Per-agent MCP servers (migration `0013_mcp_servers`) on both backends: stored, replaced by
//! name, listed by name, the whole set replaced in one write, removed (an unknown one is
//! `McpError::ServerNotFound`), refused input stores nothing, and an agent's servers go with it.

use pattern_db::{AgentError, BatchError, McpError};
use pattern_db::{Error, NewAgent};
use serde_json::json;

use crate::{Kind, fresh};

async fn servers_are_stored_replaced_and_removed(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let bob = db.create_agent(NewAgent::named("bob")).await.unwrap();
    let time = json!({"command": "python", "args": ["-m", "mcp_server_time"]});
    let row = db.put_mcp_server(ada.id, "time", &time).await.unwrap();
    assert_eq!(row.name, "time");
    assert_eq!(row.config, time);
    db.put_mcp_server(ada.id, "web", &json!({"url": "http://127.0.0.1:1/mcp"}))
        .await
        .unwrap();
    // Same name: replaced, not added.
    let newer = json!({"command": "mcp-server-time"});
    db.put_mcp_server(ada.id, "time", &newer).await.unwrap();
    let listed = db.mcp_servers(ada.id).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["time", "web"]);
    assert_eq!(listed[0].config, newer);
    assert!(db.mcp_servers(bob.id).await.unwrap().is_empty());

    // Refused input stores nothing.
    for (name, config) in [
        ("My_Server", json!({"command": "x"})),
        ("ok", json!("not an object")),
        ("big", json!({"command": "x".repeat(70_000)})),
    ] {
        let err = db.put_mcp_server(ada.id, name, &config).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Batch(BatchError::InvalidContent(_))
                    | Error::Batch(BatchError::ContentTooLarge { .. })
            ),
            "{name}: {err}"
        );
    }
    let twice = [
        ("a".to_owned(), json!({"command": "x"})),
        ("a".to_owned(), json!({"command": "y"})),
    ];
    assert!(db.set_mcp_servers(ada.id, &twice).await.is_err());
    assert_eq!(db.mcp_servers(ada.id).await.unwrap().len(), 2);

    // The whole set at once.
    let set = db
        .set_mcp_servers(ada.id, &[("only".to_owned(), json!({"command": "x"}))])
        .await
        .unwrap();
    assert_eq!(set.len(), 1);
    let listed = db.mcp_servers(ada.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "only");

    db.remove_mcp_server(ada.id, "only").await.unwrap();
    assert!(matches!(
        db.remove_mcp_server(ada.id, "only").await,
        Err(Error::Mcp(McpError::ServerNotFound { .. }))
    ));
    assert!(matches!(
        db.put_mcp_server(pattern_db::AgentId::new(), "x", &json!({"command": "x"}))
            .await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));

    // An agent's servers go with it.
    db.put_mcp_server(bob.id, "time", &time).await.unwrap();
    db.delete_agent(bob.id).await.unwrap();
    assert!(db.mcp_servers(bob.id).await.unwrap().is_empty());
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(servers_are_stored_replaced_and_removed);
