//! Shared by the provider tests: building small contexts, loading cassettes (recorded or written
//! wire-format traffic, see `tests/cassettes/README.md`) and replaying them from a loopback
//! `wiremock` server, collecting a stream, and the recording proxy used once to capture real
//! llama.cpp traffic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use context_v2::{
    AssemblySummary, ContextMessage, MemoryContext, SystemPart, SystemPartKind, ToolDefinition,
};
use futures::StreamExt;
use pattern_core::provider::{ProviderError, ProviderEvent, ProviderStream, RetryPolicy};
use pattern_db::{ContentBlock, Role, SnowflakeId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub(crate) fn msg(position: i64, role: Role, content: Vec<ContentBlock>) -> ContextMessage {
    ContextMessage {
        batch_id: SnowflakeId(1),
        position: SnowflakeId(position),
        role,
        content,
    }
}

pub(crate) fn weather_tool() -> ToolDefinition {
    ToolDefinition {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        input_schema: json!({
            "type": "object",
            "properties": { "city": { "type": "string" } },
            "required": ["city"]
        }),
    }
}

pub(crate) fn context(
    system: &str,
    tools: Vec<ToolDefinition>,
    messages: Vec<ContextMessage>,
) -> MemoryContext {
    MemoryContext {
        system: if system.is_empty() {
            vec![]
        } else {
            vec![SystemPart {
                kind: SystemPartKind::Instructions,
                text: system.into(),
            }]
        },
        tools,
        messages,
        cache_points: vec![],
        tokens: Default::default(),
        assembly: AssemblySummary {
            included_batches: vec![SnowflakeId(1)],
            excluded: vec![],
            trimmed_active: None,
        },
        compression: None,
    }
}

/// "What is the weather in Paris?" with the weather tool.
pub(crate) fn weather_question() -> MemoryContext {
    context(
        "You are a helpful assistant. Use tools when they help.",
        vec![weather_tool()],
        vec![msg(
            2,
            Role::User,
            vec![ContentBlock::text(
                "What is the weather in Paris? Use the tool.",
            )],
        )],
    )
}

/// A fast retry policy for replayed failures.
pub(crate) fn quick_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    }
}

/// Every item of a stream, stopping after the first error.
pub(crate) async fn collect(stream: ProviderStream) -> (Vec<ProviderEvent>, Option<ProviderError>) {
    let mut events = Vec::new();
    let mut stream = stream;
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

/// The text of all `TextDelta`s.
pub(crate) fn streamed_text(events: &[ProviderEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A cassette: the requests a provider must send and what the server answered, in order.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Cassette {
    /// Where the traffic comes from (recorded from which server, or which documentation).
    pub(crate) source: String,
    pub(crate) interactions: Vec<Interaction>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Interaction {
    pub(crate) request: RecordedRequest,
    pub(crate) response: RecordedResponse,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RecordedRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Headers the request must carry (a subset).
    #[serde(default)]
    pub(crate) headers: serde_json::Map<String, Value>,
    /// JSON the body must contain (a subset; recorded cassettes hold the whole body).
    #[serde(default)]
    pub(crate) body: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RecordedResponse {
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) headers: serde_json::Map<String, Value>,
    /// The body verbatim, in a file beside the cassette (SSE bodies)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_file: Option<String>,
    /// ...or inline (error bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<String>,
}

pub(crate) fn cassette_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cassettes")
}

pub(crate) fn load(name: &str) -> (Cassette, PathBuf) {
    let file = cassette_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let cassette: Cassette =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    (cassette, file.parent().unwrap().to_path_buf())
}

/// A loopback server answering the cassette's interactions in order, each exactly once.
pub(crate) async fn replay(name: &str) -> MockServer {
    let (cassette, dir) = load(name);
    let server = MockServer::start().await;
    for (i, interaction) in cassette.interactions.iter().enumerate() {
        let req = &interaction.request;
        let mut mock = Mock::given(method(req.method.as_str())).and(path(req.path.as_str()));
        for (name, value) in &req.headers {
            mock = mock.and(header(name.as_str(), value.as_str().unwrap()));
        }
        if let Some(body) = &req.body {
            mock = mock.and(body_partial_json(body.clone()));
        }
        let res = &interaction.response;
        let body = match (&res.body_file, &res.body) {
            (Some(file), _) => std::fs::read(dir.join(file)).unwrap(),
            (None, Some(text)) => text.clone().into_bytes(),
            (None, None) => Vec::new(),
        };
        let mut template = ResponseTemplate::new(res.status);
        for (name, value) in &res.headers {
            template = template.insert_header(name.as_str(), value.as_str().unwrap());
        }
        // `set_body_raw` sets the content type; a header above of the same name is replaced.
        let content_type = res
            .headers
            .get("content-type")
            .and_then(Value::as_str)
            .unwrap_or("application/json")
            .to_owned();
        template = template.set_body_raw(body, &content_type);
        mock.respond_with(template)
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .expect(1)
            .named(format!("{name} #{i}"))
            .mount(&server)
            .await;
    }
    server
}

/// Requests the replay server received.
pub(crate) async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.unwrap_or_default().len()
}
