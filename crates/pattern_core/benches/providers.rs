//! Benchmarks of the providers' own cost: one streamed call against a loopback server that
//! answers instantly with a long answer (1,000 text chunks and a tool call in 200 argument
//! fragments), through the OpenAI and Anthropic decoders. What is measured is HTTP on loopback,
//! SSE parsing, decoding and assembling the response: the time a real model adds is not here.
//! Timings are reported, never asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// The allocator the `pattern` binary runs with, so the figures are those of what ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use context_v2::{AssemblySummary, MemoryContext, ModelInfo, Provider, ToolDefinition};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use pattern_core::provider::{GenerateOptions, ModelProvider, ProviderConfig};
use pattern_db::{ContentBlock, Role, SnowflakeId};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const TEXT_CHUNKS: usize = 1000;
const ARG_FRAGMENTS: usize = 200;

fn openai_body() -> String {
    let mut out = String::new();
    let mut push = |v: serde_json::Value| out.push_str(&format!("data: {v}\n\n"));
    for i in 0..TEXT_CHUNKS {
        push(
            json!({"choices":[{"index":0,"delta":{"content":format!("word{i} ")},"finish_reason":null}]}),
        );
    }
    push(
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"note","arguments":"{\"text\": \""}}]},"finish_reason":null}]}),
    );
    for i in 0..ARG_FRAGMENTS {
        push(
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":format!("part{i} ")}}]},"finish_reason":null}]}),
        );
    }
    push(
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":null}]}),
    );
    push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}));
    push(json!({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":1400}}));
    out.push_str("data: [DONE]\n\n");
    out
}

fn anthropic_body() -> String {
    let mut out = String::new();
    let mut push =
        |name: &str, v: serde_json::Value| out.push_str(&format!("event: {name}\ndata: {v}\n\n"));
    push(
        "message_start",
        json!({"type":"message_start","message":{"usage":{"input_tokens":100,"output_tokens":1}}}),
    );
    push(
        "content_block_start",
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    );
    for i in 0..TEXT_CHUNKS {
        push(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("word{i} ")}}),
        );
    }
    push(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    );
    push(
        "content_block_start",
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"note","input":{}}}),
    );
    push(
        "content_block_delta",
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\": \""}}),
    );
    for i in 0..ARG_FRAGMENTS {
        push(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":format!("part{i} ")}}),
        );
    }
    push(
        "content_block_delta",
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"}"}}),
    );
    push(
        "content_block_stop",
        json!({"type":"content_block_stop","index":1}),
    );
    push(
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":1400}}),
    );
    push("message_stop", json!({"type":"message_stop"}));
    out
}

fn context() -> MemoryContext {
    MemoryContext {
        system: vec![],
        tools: vec![ToolDefinition {
            name: "note".into(),
            description: "Take a note".into(),
            input_schema: json!({"type":"object","properties":{"text":{"type":"string"}}}),
        }],
        messages: vec![context_v2::ContextMessage {
            batch_id: SnowflakeId(1),
            position: SnowflakeId(2),
            role: Role::User,
            content: vec![ContentBlock::text("Write a long note.")],
        }],
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

async fn provider(wire: Provider, body: String) -> (MockServer, Box<dyn ModelProvider>) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let p = ProviderConfig::new(ModelInfo {
        provider: wire,
        model: "bench".into(),
        context_window: 32_000,
        max_output_tokens: 2000,
    })
    .with_base_url(format!("{}/v1", server.uri()))
    .build()
    .unwrap();
    (server, p)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ctx = context();
    let opts = GenerateOptions::default();
    for (wire, label, body) in [
        (Provider::OpenAi, "openai", openai_body()),
        (Provider::Anthropic, "anthropic", anthropic_body()),
    ] {
        let (_server, p) = rt.block_on(provider(wire, body));
        c.bench_function(
            &format!("stream {label}: 1000 text chunks + 200 argument fragments"),
            |b| {
                b.to_async(&rt).iter(|| async {
                    let mut stream = p.stream(&ctx, &opts).await.unwrap();
                    let mut n = 0usize;
                    while let Some(e) = stream.next().await {
                        e.unwrap();
                        n += 1;
                    }
                    assert!(n > TEXT_CHUNKS);
                })
            },
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
