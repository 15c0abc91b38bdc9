//! End to end against a REAL model: llama.cpp's server on loopback (installed by
//! `cargo xtask setup`), SmolLM2-135M for plain chat and streaming, Qwen2.5-Coder-0.5B for tool
//! calls through both the OpenAI-compatible `/v1/chat/completions` and the Anthropic-style
//! `/v1/messages`. A missing install fails with "run `cargo xtask setup`"; nothing is skipped.
//!
//! One server per model per test binary run: started by the first test that needs it, on a
//! thread of its own (so it outlives each test's runtime), and stopped when the binary exits
//! (the launcher exits when its stdin closes; `local_server_lifecycle` checks explicit shutdown
//! and drop). Prompts are short and timeouts generous: the machine is shared and slow.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use context_v2::{ModelInfo, Provider};
use pattern_core::local_server::{
    LocalModel, LocalModelServer, LocalServerConfig, LocalServerError,
};
use pattern_core::provider::{
    GenerateOptions, ModelProvider, ModelResponse, ProviderConfig, ProviderEvent, StopReason,
    complete,
};
use pattern_db::{ContentBlock, Role};

use crate::provider_support::{collect, context, msg, streamed_text, weather_question};

/// A running shared server: its base URL and model.
struct Shared {
    base_url: String,
    model: ModelInfo,
}

static SMOL: OnceLock<Shared> = OnceLock::new();
static QWEN: OnceLock<Shared> = OnceLock::new();

fn start_shared(model: LocalModel) -> Shared {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            // One thread each: the two servers run side by side on a 2-core machine, and
            // llama.cpp slows down badly when its threads outnumber the free cores.
            let config = LocalServerConfig {
                threads: Some(1),
                ..LocalServerConfig::new(model)
            };
            match LocalModelServer::start(config).await {
                Ok(server) => {
                    eprintln!(
                        "e2e: {} ready at {} in {:?}",
                        server.model_info().model,
                        server.base_url(),
                        server.started_in()
                    );
                    tx.send(Ok((server.base_url().to_owned(), server.model_info())))
                        .unwrap();
                    // Keep the server (and this runtime, which owns its process) for the rest
                    // of the run.
                    std::future::pending::<()>().await;
                    drop(server);
                }
                Err(e) => tx.send(Err(e.to_string())).unwrap(),
            }
        });
    });
    match rx.recv().unwrap() {
        Ok((base_url, model)) => Shared { base_url, model },
        Err(e) => panic!("the local model server is not available: {e}"),
    }
}

fn smol() -> &'static Shared {
    SMOL.get_or_init(|| start_shared(LocalModel::Smol))
}

fn qwen() -> &'static Shared {
    QWEN.get_or_init(|| start_shared(LocalModel::Qwen))
}

fn provider(shared: &Shared, wire: Provider) -> Box<dyn ModelProvider> {
    let mut model = shared.model.clone();
    model.provider = wire;
    ProviderConfig::new(model)
        .with_base_url(shared.base_url.clone())
        .with_name("llama.cpp")
        .build()
        .unwrap()
}

fn opts(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.0),
        max_output_tokens: Some(max_tokens),
        timeout: Some(Duration::from_secs(600)),
        ..Default::default()
    }
}

fn say_hello() -> context_v2::MemoryContext {
    context(
        "You are a helpful assistant. Answer briefly.",
        vec![],
        vec![msg(2, Role::User, vec![ContentBlock::text("Say hello.")])],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smol_answers_plain_chat_over_openai() {
    let p = provider(smol(), Provider::OpenAi);
    let began = Instant::now();
    let r = complete(p.as_ref(), &say_hello(), &opts(24)).await.unwrap();
    eprintln!("e2e: smol chat (openai) took {:?}", began.elapsed());
    let text: String = r
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!text.trim().is_empty(), "{r:?}");
    assert!(
        matches!(r.stop_reason, StopReason::EndTurn | StopReason::MaxTokens),
        "{r:?}"
    );
    assert!(
        r.usage.input_tokens > 0 && r.usage.output_tokens > 0,
        "{:?}",
        r.usage
    );
    assert!(r.usage.output_tokens <= 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smol_streams_deltas_over_both_endpoints() {
    for wire in [Provider::OpenAi, Provider::Anthropic] {
        let p = provider(smol(), wire);
        let began = Instant::now();
        let stream = p.stream(&say_hello(), &opts(24)).await.unwrap();
        let (events, error) = collect(stream).await;
        eprintln!("e2e: smol stream ({wire:?}) took {:?}", began.elapsed());
        assert!(error.is_none(), "{wire:?}: {error:?}");
        let deltas = events
            .iter()
            .filter(|e| matches!(e, ProviderEvent::TextDelta { .. }))
            .count();
        assert!(deltas >= 2, "{wire:?}: answer came in pieces: {events:?}");
        let Some(ProviderEvent::Done { response }) = events.last() else {
            panic!("{wire:?}: no Done: {events:?}");
        };
        assert_eq!(
            response.content,
            vec![ContentBlock::text(streamed_text(&events))],
            "{wire:?}"
        );
    }
}

/// The tool result round: the model's call, then a result; the model answers or calls again.
async fn tool_round(p: &dyn ModelProvider) -> (ModelResponse, ModelResponse) {
    let began = Instant::now();
    let first = complete(p, &weather_question(), &opts(64)).await.unwrap();
    eprintln!(
        "e2e: qwen tool call ({}) took {:?}",
        p.model().model,
        began.elapsed()
    );
    assert_eq!(first.stop_reason, StopReason::ToolUse, "{first:?}");
    assert!(first.malformed_tool_calls.is_empty(), "{first:?}");
    let calls: Vec<_> = first.tool_calls().collect();
    assert_eq!(calls.len(), 1, "{first:?}");
    let (id, name, input) = calls[0];
    assert_eq!(name, "get_weather");
    assert!(
        input["city"].as_str().is_some_and(|c| c.contains("Paris")),
        "{input}"
    );

    let mut ctx = weather_question();
    ctx.messages
        .push(msg(3, Role::Assistant, first.content.clone()));
    ctx.messages.push(msg(
        4,
        Role::Tool,
        vec![ContentBlock::tool_result(
            id,
            "Sunny, 21 degrees Celsius.",
            false,
        )],
    ));
    let began = Instant::now();
    let second = complete(p, &ctx, &opts(40)).await.unwrap();
    eprintln!("e2e: qwen after tool result took {:?}", began.elapsed());
    (first, second)
}

fn answered_or_called_again(r: &ModelResponse) {
    let text = r
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Text { text } if !text.trim().is_empty()));
    let called = r.tool_calls().next().is_some();
    assert!(text || called, "neither an answer nor a call: {r:?}");
    if called {
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_calls_a_tool_over_openai_and_takes_the_result() {
    let p = provider(qwen(), Provider::OpenAi);
    let (_, second) = tool_round(p.as_ref()).await;
    answered_or_called_again(&second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_calls_a_tool_over_anthropic_messages_and_takes_the_result() {
    let p = provider(qwen(), Provider::Anthropic);
    let (_, second) = tool_round(p.as_ref()).await;
    answered_or_called_again(&second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_server_lifecycle() {
    let server = LocalModelServer::start(LocalServerConfig {
        threads: Some(1),
        ctx: 1024,
        ..LocalServerConfig::new(LocalModel::Smol)
    })
    .await
    .unwrap();
    eprintln!("e2e: smol server started in {:?}", server.started_in());
    let base = server.base_url().to_owned();
    assert!(
        base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"),
        "{base}"
    );
    assert_eq!(server.model_info().context_window, 1024);
    let health = base.replace("/v1", "/health");
    let client = reqwest::Client::new();
    assert!(
        client
            .get(&health)
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    server.shutdown().await.unwrap();
    assert!(
        client.get(&health).send().await.is_err(),
        "still answering after shutdown"
    );

    // Dropping the handle stops the server too.
    let server = LocalModelServer::start(LocalServerConfig {
        threads: Some(1),
        ctx: 1024,
        ..LocalServerConfig::new(LocalModel::Smol)
    })
    .await
    .unwrap();
    let health = server.base_url().replace("/v1", "/health");
    drop(server);
    let gone = async {
        while client.get(&health).send().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), gone)
        .await
        .expect("the server outlived its dropped handle");
}

#[tokio::test]
async fn a_missing_install_says_to_run_setup() {
    let dir = tempfile::tempdir().unwrap();
    let err = LocalModelServer::start(LocalServerConfig {
        dir: Some(dir.path().to_path_buf()),
        ..LocalServerConfig::new(LocalModel::Qwen)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(err, LocalServerError::NotInstalled { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("pattern setup"), "{err}");
}

#[tokio::test]
async fn a_server_that_cannot_start_reports_its_log() {
    // A "model" that is not a GGUF file: the launcher's server refuses it.
    let dir = tempfile::tempdir().unwrap();
    let llama = pattern_core::local_server::default_llama_dir();
    let bogus = dir.path().join("bogus.gguf");
    std::fs::write(&bogus, b"not a model").unwrap();
    let err = LocalModelServer::start(LocalServerConfig {
        dir: Some(llama),
        startup_timeout: Duration::from_secs(120),
        ..LocalServerConfig::new(LocalModel::Path {
            path: bogus,
            alias: "bogus".into(),
            chat_template: None,
        })
    })
    .await
    .unwrap_err();
    match err {
        LocalServerError::StartFailed { log_tail, .. } => {
            assert!(!log_tail.is_empty(), "the log tail is reported");
        }
        other => panic!("{other:?}"),
    }
}

/// A question the model answers in text when left to itself, with two tools offered.
fn beehive_question() -> context_v2::MemoryContext {
    let tool = |name: &str, description: &str, field: &str| context_v2::ToolDefinition {
        name: name.into(),
        description: description.into(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": { field: { "type": "string" } },
            "required": [field],
        }),
    };
    context(
        "You are a helpful assistant with long-term memory.",
        vec![
            tool("archival_search", "Search your archival memory.", "query"),
            tool(
                "memory_append",
                "Append text to your memory about the user.",
                "text",
            ),
        ],
        vec![msg(
            2,
            Role::User,
            vec![ContentBlock::text("When did I start my first beehive?")],
        )],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_makes_a_forced_call_by_response_schema() {
    use pattern_core::provider::{ForcedCall, ToolChoice};
    let shared = qwen();
    let mut config = ProviderConfig::new(shared.model.clone())
        .with_base_url(shared.base_url.clone())
        .with_name("llama.cpp");
    config.forced_call = ForcedCall::ResponseSchema;
    let p = config.build().unwrap();
    let ctx = beehive_question();
    let forced = GenerateOptions {
        tool_choice: ToolChoice::Required,
        ..opts(64)
    };
    let began = Instant::now();
    let r = complete(p.as_ref(), &ctx, &forced).await.unwrap();
    eprintln!("e2e: qwen forced call took {:?}", began.elapsed());
    assert_eq!(r.stop_reason, StopReason::ToolUse, "{r:?}");
    let calls: Vec<(&str, &serde_json::Value)> = r
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { name, input, .. } => Some((name.as_str(), input)),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{r:?}");
    let (name, input) = calls[0];
    let field = match name {
        "archival_search" => "query",
        "memory_append" => "text",
        other => panic!("a tool that was not offered: {other}"),
    };
    // The schema held: the one argument the tool declares, a string.
    assert!(input[field].is_string(), "{input}");
    assert_eq!(input.as_object().map(|o| o.len()), Some(1), "{input}");

    // One tool named: that tool.
    let named = GenerateOptions {
        tool_choice: ToolChoice::Tool("memory_append".into()),
        ..opts(64)
    };
    let r = complete(p.as_ref(), &ctx, &named).await.unwrap();
    assert!(
        matches!(r.content.as_slice(), [ContentBlock::ToolUse { name, .. }] if name == "memory_append"),
        "{r:?}"
    );

    // Text only, after a call and its result: the tools are withheld and the model answers.
    let mut after = beehive_question();
    after.messages.push(msg(
        3,
        Role::Assistant,
        vec![ContentBlock::tool_use(
            "c1",
            "archival_search",
            serde_json::json!({"query": "first beehive"}),
        )],
    ));
    after.messages.push(msg(
        4,
        Role::Tool,
        vec![ContentBlock::tool_result(
            "c1",
            "1. my first hive was started in April 2024",
            false,
        )],
    ));
    let text_only = GenerateOptions {
        tool_choice: ToolChoice::None,
        ..opts(48)
    };
    let r = complete(p.as_ref(), &after, &text_only).await.unwrap();
    assert!(
        r.content
            .iter()
            .all(|b| !matches!(b, ContentBlock::ToolUse { .. })),
        "{r:?}"
    );
    let answer: String = r
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!answer.trim().is_empty(), "{r:?}");
    eprintln!("e2e: qwen's text-only answer: {answer:?}");
}
