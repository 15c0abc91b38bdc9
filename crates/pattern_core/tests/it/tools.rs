//! Tools for tests only: one that sleeps and echoes (parallel order, timeouts, crashes
//! mid-tool), one that panics, one that ends the turn and may ask for a heartbeat.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pattern_core::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, builtin};
use serde_json::{Value, json};

#[derive(Debug)]
struct Sleepy;

#[async_trait]
impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn description(&self) -> &str {
        "Sleeps `ms` then echoes `tag`."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}, "tag": {"type": "string"}}, "required": ["ms", "tag"]})
    }
    async fn execute(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let ms = input["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(ToolOutput::text(
            input["tag"].as_str().unwrap_or("").to_owned(),
        ))
    }
}

#[derive(Debug)]
struct Panicky;

#[async_trait]
impl Tool for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }
    fn description(&self) -> &str {
        "Panics."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _ctx: ToolContext, _input: Value) -> Result<ToolOutput, ToolError> {
        panic!("tool blew up")
    }
}

#[derive(Debug)]
struct Finish;

#[async_trait]
impl Tool for Finish {
    fn name(&self) -> &str {
        "finish"
    }
    fn description(&self) -> &str {
        "Ends the turn; `again` asks for another."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"again": {"type": "boolean"}}})
    }
    async fn execute(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            content: "finished".into(),
            request_heartbeat: input["again"].as_bool().unwrap_or(false),
        })
    }
}

pub fn registry() -> Arc<ToolRegistry> {
    let mut r = builtin::registry().unwrap();
    r.register(Arc::new(Sleepy)).unwrap();
    r.register(Arc::new(Panicky)).unwrap();
    r.register(Arc::new(Finish)).unwrap();
    Arc::new(r)
}
