//! Records the llama.cpp cassettes (`tests/cassettes/llama_*.json`): starts the real local
//! server, puts a recording proxy between it and the provider under test, and writes what went
//! over the wire (request body as JSON, response status, content type and body verbatim).
//!
//! A tool, not a check: it is `#[ignore]`d and run by hand after `cargo xtask setup`:
//! `cargo test -p pattern_core --test it -- --ignored record_llama_cassettes`. The replay tests
//! in `provider_cassettes` then check the providers against these files without a server.

use std::sync::{Arc, Mutex};

use context_v2::Provider;
use pattern_core::local_server::{LocalModel, LocalModelServer, LocalServerConfig};
use pattern_core::provider::{GenerateOptions, ProviderConfig, complete};
use pattern_db::{ContentBlock, Role};
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::provider_support::{
    Cassette, Interaction, RecordedRequest, RecordedResponse, cassette_dir, context, msg,
    weather_question,
};

/// One exchange: the request, and the response's status, content type and body.
type Exchange = (RecordedRequest, u16, String, Vec<u8>);

/// A loopback proxy to `upstream` that keeps every exchange.
struct Recorder {
    base: String,
    log: Arc<Mutex<Vec<Exchange>>>,
}

async fn read_request(
    stream: &mut tokio::net::TcpStream,
) -> (String, String, Vec<(String, String)>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let start: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        body.extend_from_slice(&chunk[..n]);
    }
    (start[0].to_owned(), start[1].to_owned(), headers, body)
}

impl Recorder {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let (method, path, headers, body) = read_request(&mut stream).await;
                let mut forward = client.post(format!("{upstream}{path}")).body(body.clone());
                let mut kept_headers = Map::new();
                for (k, v) in &headers {
                    if matches!(k.as_str(), "content-type" | "anthropic-version") {
                        forward = forward.header(k, v);
                        kept_headers.insert(k.clone(), Value::String(v.clone()));
                    }
                }
                let response = forward.send().await.unwrap();
                let status = response.status().as_u16();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("application/json")
                    .to_owned();
                let bytes = response.bytes().await.unwrap().to_vec();
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    bytes.len()
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.write_all(&bytes).await.unwrap();
                stream.shutdown().await.ok();
                let request = RecordedRequest {
                    method,
                    path,
                    headers: kept_headers,
                    body: serde_json::from_slice(&body).ok(),
                };
                kept.lock()
                    .unwrap()
                    .push((request, status, content_type, bytes));
            }
        });
        Self { base, log }
    }

    /// Writes what was recorded since the last call as cassette `name`.
    fn save(&self, name: &str, source: &str) {
        let dir = cassette_dir();
        let mut interactions = Vec::new();
        for (i, (request, status, content_type, bytes)) in
            self.log.lock().unwrap().drain(..).enumerate()
        {
            let file = format!("{name}.{i}.sse");
            std::fs::write(dir.join(&file), &bytes).unwrap();
            let mut headers = Map::new();
            headers.insert("content-type".into(), Value::String(content_type));
            interactions.push(Interaction {
                request,
                response: RecordedResponse {
                    status,
                    headers,
                    body_file: Some(file),
                    body: None,
                },
            });
        }
        let cassette = Cassette {
            source: source.to_owned(),
            interactions,
        };
        let text = serde_json::to_string_pretty(&cassette).unwrap();
        std::fs::write(dir.join(format!("{name}.json")), text + "\n").unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "records cassettes from the real llama.cpp server; run by hand after cargo xtask setup"]
async fn record_llama_cassettes() {
    let source = |model: &str, endpoint: &str| {
        format!(
            "recorded from llama.cpp's server (xllamacpp 2026.10.11549), model {model}, {endpoint}, \
             by provider_record::record_llama_cassettes"
        )
    };
    let opts = GenerateOptions {
        temperature: Some(0.0),
        max_output_tokens: Some(48),
        timeout: Some(std::time::Duration::from_secs(300)),
        ..Default::default()
    };

    let smol = LocalModelServer::start(LocalServerConfig::new(LocalModel::Smol))
        .await
        .unwrap();
    let upstream = smol.base_url().trim_end_matches("/v1").to_owned();
    let rec = Recorder::start(upstream).await;
    let hello = context(
        "You are a helpful assistant.",
        vec![],
        vec![msg(
            2,
            Role::User,
            vec![ContentBlock::text("Say hello in five words.")],
        )],
    );
    for (provider, name, endpoint) in [
        (
            Provider::OpenAi,
            "llama_openai_chat",
            "/v1/chat/completions",
        ),
        (Provider::Anthropic, "llama_anthropic_chat", "/v1/messages"),
    ] {
        let mut model = smol.model_info();
        model.provider = provider;
        let p = ProviderConfig::new(model)
            .with_base_url(format!("{}/v1", rec.base))
            .build()
            .unwrap();
        complete(p.as_ref(), &hello, &opts).await.unwrap();
        rec.save(name, &source("SmolLM2-135M-Instruct Q4_1", endpoint));
    }
    smol.shutdown().await.unwrap();

    let qwen = LocalModelServer::start(LocalServerConfig::new(LocalModel::Qwen))
        .await
        .unwrap();
    let upstream = qwen.base_url().trim_end_matches("/v1").to_owned();
    let rec = Recorder::start(upstream).await;
    for (provider, name, endpoint) in [
        (
            Provider::OpenAi,
            "llama_openai_tool_call",
            "/v1/chat/completions",
        ),
        (
            Provider::Anthropic,
            "llama_anthropic_tool_call",
            "/v1/messages",
        ),
    ] {
        let mut model = qwen.model_info();
        model.provider = provider;
        let p = ProviderConfig::new(model)
            .with_base_url(format!("{}/v1", rec.base))
            .build()
            .unwrap();
        let r = complete(p.as_ref(), &weather_question(), &opts)
            .await
            .unwrap();
        assert_eq!(r.tool_calls().count(), 1, "{r:?}");
        rec.save(
            name,
            &source(
                "Qwen2.5-Coder-0.5B-Instruct with qwen-tools.jinja",
                endpoint,
            ),
        );
    }
    qwen.shutdown().await.unwrap();
}
