//! The three providers against replayed wire traffic (cassettes under `tests/cassettes`, served
//! by a loopback `wiremock` server; no test reaches the internet). The `llama_*` cassettes were
//! recorded from the real llama.cpp server; the others are written from the providers'
//! documented formats. Each test checks the request the provider sent (path, headers, body
//! subset: the cassette's matchers), the events, the final answer, and how many requests were
//! made (retries).

use std::time::{Duration, Instant};

use context_v2::{ModelInfo, Provider};
use pattern_core::provider::{
    GenerateOptions, ModelProvider, ProviderConfig, ProviderError, ProviderEvent, StopReason,
    Usage, complete,
};
use pattern_db::{ContentBlock, Role};
use serde_json::json;
use wiremock::MockServer;

use crate::provider_support::{
    collect, context, msg, quick_retry, replay, request_count, streamed_text, weather_question,
};

fn model(provider: Provider, name: &str) -> ModelInfo {
    ModelInfo {
        provider,
        model: name.into(),
        context_window: 128_000,
        max_output_tokens: 1024,
    }
}

fn provider(server: &MockServer, provider: Provider) -> Box<dyn ModelProvider> {
    let (name, base) = match provider {
        Provider::OpenAi => ("gpt-4o", "/v1"),
        Provider::Anthropic => ("claude-sonnet-4-5", "/v1"),
        Provider::Gemini => ("gemini-2.5-flash", "/v1beta"),
    };
    let mut config = ProviderConfig::new(model(provider, name))
        .with_base_url(format!("{}{base}", server.uri()))
        .with_api_key("test-key");
    config.retry = quick_retry(3);
    config.build().unwrap()
}

/// A provider for a recorded llama.cpp cassette: the model and options it was recorded with.
fn llama_provider(server: &MockServer, provider: Provider, name: &str) -> Box<dyn ModelProvider> {
    ProviderConfig::new(ModelInfo {
        provider,
        model: name.into(),
        context_window: 8192,
        max_output_tokens: 512,
    })
    .with_base_url(format!("{}/v1", server.uri()))
    .build()
    .unwrap()
}

fn llama_opts() -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.0),
        max_output_tokens: Some(48),
        timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    }
}

fn hello() -> context_v2::MemoryContext {
    context(
        "You are a helpful assistant.",
        vec![],
        vec![msg(
            2,
            Role::User,
            vec![ContentBlock::text("Say hello in five words.")],
        )],
    )
}

fn done(events: &[ProviderEvent]) -> &pattern_core::provider::ModelResponse {
    match events.last() {
        Some(ProviderEvent::Done { response }) => response,
        other => panic!("the stream did not end with Done: {other:?}"),
    }
}

// ---- recorded from llama.cpp --------------------------------------------------------------

#[tokio::test]
async fn llama_openai_chat_streams_text_and_usage() {
    let server = replay("llama_openai_chat").await;
    let p = llama_provider(&server, Provider::OpenAi, "smollm2-135m");
    let (events, error) = collect(p.stream(&hello(), &llama_opts()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    let text = streamed_text(&events);
    assert!(events.len() > 3, "streamed in pieces: {events:?}");
    let r = done(&events);
    assert_eq!(r.content, vec![ContentBlock::text(text)]);
    assert!(
        r.usage.input_tokens > 0 && r.usage.output_tokens > 0,
        "{:?}",
        r.usage
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ProviderEvent::Usage { .. }))
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn llama_anthropic_chat_streams_text_and_usage() {
    let server = replay("llama_anthropic_chat").await;
    let p = llama_provider(&server, Provider::Anthropic, "smollm2-135m");
    let (events, error) = collect(p.stream(&hello(), &llama_opts()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    let r = done(&events);
    assert_eq!(r.content, vec![ContentBlock::text(streamed_text(&events))]);
    assert!(r.usage.output_tokens > 0);
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn llama_openai_tool_call_is_assembled_from_fragments() {
    let server = replay("llama_openai_tool_call").await;
    let p = llama_provider(&server, Provider::OpenAi, "qwen2.5-coder-0.5b");
    let (events, error) =
        collect(p.stream(&weather_question(), &llama_opts()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    let started = events
        .iter()
        .filter(|e| matches!(e, ProviderEvent::ToolCallStarted { index: 0, name, .. } if name == "get_weather"))
        .count();
    assert_eq!(started, 1);
    let fragments: String = events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ToolCallDelta { index: 0, fragment } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    let r = done(&events);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = r.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(
        calls[0].2,
        &serde_json::from_str::<serde_json::Value>(&fragments).unwrap()
    );
    assert_eq!(calls[0].2["city"], "Paris");
    assert!(r.malformed_tool_calls.is_empty());
}

#[tokio::test]
async fn llama_anthropic_tool_call_is_assembled_from_fragments() {
    let server = replay("llama_anthropic_tool_call").await;
    let p = llama_provider(&server, Provider::Anthropic, "qwen2.5-coder-0.5b");
    let r = complete(p.as_ref(), &weather_question(), &llama_opts())
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = r.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].0.is_empty());
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2["city"], "Paris");
}

// ---- OpenAI production shapes --------------------------------------------------------------

#[tokio::test]
async fn openai_parallel_tool_calls_keep_their_ids_order_and_usage() {
    let server = replay("openai_parallel_tool_calls").await;
    let p = provider(&server, Provider::OpenAi);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(error.is_none());
    let starts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ToolCallStarted { index, id, .. } => Some((*index, id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (0, "call_DdmO9pD3xa9XTPNJ32zg2hcA".to_owned()),
            (1, "call_ABqnwnJ7oD2zqKbrFVcAfWvF".to_owned())
        ]
    );
    let r = done(&events);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let cities: Vec<_> = r.tool_calls().map(|(_, _, i)| i["city"].clone()).collect();
    assert_eq!(cities, vec![json!("Paris"), json!("Tokyo")]);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 82,
            output_tokens: 41,
            cache_read_tokens: 64,
            cache_write_tokens: 0
        }
    );
}

#[tokio::test]
async fn openai_invalid_arguments_are_kept_raw_and_listed() {
    let server = replay("openai_invalid_arguments").await;
    let p = provider(&server, Provider::OpenAi);
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    let calls: Vec<_> = r.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].2,
        &json!({"_unparsed_arguments": "{\"city\": \"Par"})
    );
    assert_eq!(r.malformed_tool_calls.len(), 1);
    assert_eq!(r.malformed_tool_calls[0].id, "call_bad1");
    assert_eq!(r.malformed_tool_calls[0].raw_arguments, "{\"city\": \"Par");
}

#[tokio::test]
async fn openai_stream_cut_mid_answer_is_truncated_after_its_deltas() {
    let server = replay("openai_stream_cut").await;
    let p = provider(&server, Provider::OpenAi);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(streamed_text(&events), "The weather in Paris is");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ProviderEvent::Done { .. }))
    );
    assert!(
        matches!(error, Some(ProviderError::Truncated { .. })),
        "{error:?}"
    );
    // Rule 1: events went out, so no retry.
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn openai_429_waits_for_retry_after_then_succeeds() {
    let server = replay("openai_429_retry_after").await;
    let p = provider(&server, Provider::OpenAi);
    let began = Instant::now();
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "retry-after: 1 honoured"
    );
    assert_eq!(r.content, vec![ContentBlock::text("It is sunny in Paris.")]);
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn openai_429_until_attempts_run_out_is_rate_limited() {
    let server = replay("openai_429_exhausted").await;
    let p = provider(&server, Provider::OpenAi);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    match err {
        ProviderError::RateLimited {
            attempts,
            retry_after,
            ..
        } => {
            assert_eq!(attempts, 3);
            assert_eq!(retry_after, Some(Duration::from_millis(10)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn openai_500_then_success_is_retried() {
    let server = replay("openai_500_then_ok").await;
    let p = provider(&server, Provider::OpenAi);
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("It is sunny in Paris.")]);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn openai_401_is_unauthorized_and_not_retried() {
    let server = replay("openai_401").await;
    let p = provider(&server, Provider::OpenAi);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Unauthorized { status: 401, message, provider } if message.starts_with("Incorrect API key") && provider == "openai"),
        "{err:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn openai_400_is_bad_request_with_the_providers_message() {
    let server = replay("openai_400").await;
    let p = provider(&server, Provider::OpenAi);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::BadRequest { status: 400, message, .. } if message.contains("maximum context length")),
        "{err:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn a_call_past_its_deadline_times_out() {
    use wiremock::matchers::method;
    use wiremock::{Mock, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let p = provider(&server, Provider::OpenAi);
    let opts = GenerateOptions {
        timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let began = Instant::now();
    let err = complete(p.as_ref(), &weather_question(), &opts)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Timeout { after, .. } if after == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(began.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config = ProviderConfig::new(model(Provider::OpenAi, "m"))
        .with_base_url(format!("http://127.0.0.1:{port}/v1"));
    config.retry = quick_retry(2);
    let p = config.build().unwrap();
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transport { message, .. } if message.contains("after 2 attempts")),
        "{err:?}"
    );
}

// ---- Anthropic production shapes -----------------------------------------------------------

#[tokio::test]
async fn anthropic_thinking_with_signature_text_and_parallel_tool_calls() {
    let server = replay("anthropic_thinking_tool_use").await;
    let p = provider(&server, Provider::Anthropic);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(error.is_none(), "{error:?}");
    let thinking: String = events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ThinkingDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        thinking,
        "The user wants the weather in Paris and Tokyo. I will call the tool for both."
    );
    let r = done(&events);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    match &r.content[0] {
        ContentBlock::Thinking { text, signature } => {
            assert_eq!(text, &thinking);
            assert!(signature.as_deref().unwrap().starts_with("EqQBCgIYAhIM"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.content[1], ContentBlock::text("I'll check both cities."));
    let calls: Vec<_> = r
        .tool_calls()
        .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6".to_owned(),
                "get_weather".to_owned(),
                json!({"city": "Paris"})
            ),
            (
                "toolu_01A09q90qw90lq917835lq9".to_owned(),
                "get_weather".to_owned(),
                json!({"city": "Tokyo"})
            ),
        ]
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ProviderEvent::ToolCallStarted { index: 1, .. }))
    );
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 472 + 1024,
            output_tokens: 89,
            cache_read_tokens: 1024,
            cache_write_tokens: 0
        }
    );
}

#[tokio::test]
async fn anthropic_overloaded_event_before_any_content_is_retried() {
    let server = replay("anthropic_overloaded_event_then_ok").await;
    let p = provider(&server, Provider::Anthropic);
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("Hello!")]);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn anthropic_529_until_attempts_run_out_is_a_server_error() {
    let server = replay("anthropic_529_exhausted").await;
    let p = provider(&server, Provider::Anthropic);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Server { status: 529, attempts: 3, message, .. } if message == "Overloaded"),
        "{err:?}"
    );
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn anthropic_429_then_success_is_retried() {
    let server = replay("anthropic_429_then_ok").await;
    let p = provider(&server, Provider::Anthropic);
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("Hello!")]);
    assert_eq!(r.usage.output_tokens, 15);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn anthropic_stream_cut_is_truncated() {
    let server = replay("anthropic_stream_cut").await;
    let p = provider(&server, Provider::Anthropic);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(streamed_text(&events), "The weather in Paris is");
    assert!(
        matches!(error, Some(ProviderError::Truncated { .. })),
        "{error:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn anthropic_error_after_content_ends_the_stream_without_retry() {
    let server = replay("anthropic_error_mid_stream").await;
    let p = provider(&server, Provider::Anthropic);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(streamed_text(&events), "The weather in");
    assert!(
        matches!(error, Some(ProviderError::Server { status: 529, .. })),
        "{error:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn anthropic_401_and_400_are_typed() {
    let server = replay("anthropic_401").await;
    let p = provider(&server, Provider::Anthropic);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Unauthorized { status: 401, message, .. } if message == "invalid x-api-key"),
        "{err:?}"
    );
    let server = replay("anthropic_400").await;
    let p = provider(&server, Provider::Anthropic);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::BadRequest { status: 400, message, .. } if message.contains("tool_use_id")),
        "{err:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

// ---- Gemini production shapes --------------------------------------------------------------

#[tokio::test]
async fn gemini_function_calls_get_generated_ids_and_thinking_is_kept() {
    let server = replay("gemini_function_calls").await;
    let p = provider(&server, Provider::Gemini);
    let (events, error) = collect(
        p.stream(&weather_question(), &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(error.is_none(), "{error:?}");
    let r = done(&events);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert!(
        matches!(&r.content[0], ContentBlock::Thinking { text, signature: None } if text.starts_with("**Checking"))
    );
    let calls: Vec<_> = r.tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].0.starts_with("call_") && calls[1].0.starts_with("call_"));
    assert_ne!(calls[0].0, calls[1].0);
    assert_eq!(calls[0].2, &json!({"city": "Paris"}));
    assert_eq!(calls[1].2, &json!({"city": "Tokyo"}));
    // The signature Gemini gave the first call is kept with it; the second had none.
    let signatures: Vec<Option<&str>> = r
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { signature, .. } => Some(signature.as_deref()),
            _ => None,
        })
        .collect();
    assert_eq!(signatures, [Some("CiwBVKhc7nEc"), None]);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 61,
            output_tokens: 54,
            cache_read_tokens: 32,
            cache_write_tokens: 0
        }
    );
    let request = &server.received_requests().await.unwrap()[0];
    assert_eq!(request.url.query(), Some("alt=sse"));
    assert!(
        !request.url.as_str().contains("test-key"),
        "the key stays out of the URL"
    );
}

#[tokio::test]
async fn a_gemini_call_keeps_its_thought_signature_and_sends_it_back() {
    let server = replay("gemini_signature_round_trip").await;
    let mut config = ProviderConfig::new(model(Provider::Gemini, "gemini-3-pro-preview"))
        .with_base_url(format!("{}/v1beta", server.uri()))
        .with_api_key("test-key");
    config.retry = quick_retry(1);
    let p = config.build().unwrap();
    let question = weather_question();
    let (events, error) = collect(
        p.stream(&question, &GenerateOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(error.is_none(), "{error:?}");
    let r = done(&events);
    let signature = "EjQKMgG+Pvb7Xk2sPzu0Q2pVv1uA3gq7mVYcW6yq9vR2cNhTb0aLJm1f8sPq";
    let [
        ContentBlock::ToolUse {
            id,
            signature: kept,
            ..
        },
    ] = r.content.as_slice()
    else {
        panic!("one call expected: {:?}", r.content);
    };
    assert_eq!(kept.as_deref(), Some(signature));
    // The answer as it is stored (the step), then the tool's result: the second request must
    // carry the signature beside the call (the cassette's matcher), else it gets a 404.
    let mut messages = question.messages.clone();
    messages.push(msg(3, Role::Assistant, r.content.clone()));
    messages.push(msg(
        4,
        Role::Tool,
        vec![ContentBlock::tool_result(id.clone(), "18°C, cloudy", false)],
    ));
    let next = context_v2::MemoryContext {
        messages,
        ..question
    };
    let (events, error) =
        collect(p.stream(&next, &GenerateOptions::default()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        done(&events).content,
        vec![ContentBlock::text("It is 18°C and cloudy in Paris.")]
    );
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn gemini_429_then_success_is_retried() {
    let server = replay("gemini_429_then_ok").await;
    let p = provider(&server, Provider::Gemini);
    let r = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap();
    assert_eq!(r.content, vec![ContentBlock::text("It is sunny in Paris.")]);
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn gemini_stream_without_finish_reason_is_truncated() {
    let server = replay("gemini_stream_cut").await;
    let p = provider(&server, Provider::Gemini);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Truncated { .. }), "{err:?}");
}

#[tokio::test]
async fn gemini_400_and_403_are_typed() {
    let server = replay("gemini_400").await;
    let p = provider(&server, Provider::Gemini);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::BadRequest { status: 400, message, .. } if message.starts_with("API key not valid")),
        "{err:?}"
    );
    let server = replay("gemini_403").await;
    let p = provider(&server, Provider::Gemini);
    let err = complete(p.as_ref(), &weather_question(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Unauthorized { status: 403, .. }),
        "{err:?}"
    );
}

// ---- configuration -------------------------------------------------------------------------

#[test]
fn configuration_mistakes_are_refused() {
    let no_key = ProviderConfig::new(model(Provider::Anthropic, "claude")).build();
    assert!(matches!(no_key, Err(ProviderError::Config(m)) if m.contains("API key")));
    let bad_url = ProviderConfig::new(model(Provider::OpenAi, "m"))
        .with_base_url("ftp://example.invalid")
        .build();
    assert!(matches!(bad_url, Err(ProviderError::Config(_))));
    let mismatch = pattern_core::provider::OpenAiProvider::new(
        ProviderConfig::new(model(Provider::Gemini, "g")).with_api_key("k"),
    );
    assert!(matches!(mismatch, Err(ProviderError::Config(_))));
    let local = ProviderConfig::new(model(Provider::OpenAi, "m"))
        .with_base_url("http://127.0.0.1:1/v1")
        .with_name("llama.cpp")
        .build()
        .unwrap();
    assert_eq!(local.name(), "llama.cpp");
    assert!(!format!("{local:?}").contains("test-key"));
}
