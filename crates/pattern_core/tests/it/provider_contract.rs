//! The provider contract's shared helper: `complete` returns the `Done` answer and refuses a
//! stream that ends without one.

use async_trait::async_trait;
use context_v2::{MemoryContext, ModelInfo, Provider};
use futures::stream;
use pattern_core::provider::{
    GenerateOptions, ModelProvider, ModelResponse, ProviderError, ProviderEvent, ProviderStream,
    StopReason, Usage, complete,
};
use pattern_db::ContentBlock;

#[derive(Debug)]
struct Canned {
    model: ModelInfo,
    events: Vec<ProviderEvent>,
}

#[async_trait]
impl ModelProvider for Canned {
    fn name(&self) -> &str {
        "canned"
    }
    fn model(&self) -> &ModelInfo {
        &self.model
    }
    async fn stream(
        &self,
        _ctx: &MemoryContext,
        _opts: &GenerateOptions,
    ) -> Result<ProviderStream, ProviderError> {
        Ok(Box::pin(stream::iter(
            self.events.clone().into_iter().map(Ok),
        )))
    }
}

fn model() -> ModelInfo {
    ModelInfo {
        provider: Provider::OpenAi,
        model: "m".into(),
        context_window: 4096,
        max_output_tokens: 256,
    }
}

fn empty_context() -> MemoryContext {
    MemoryContext {
        system: vec![],
        tools: vec![],
        messages: vec![],
        cache_points: vec![],
        tokens: Default::default(),
        assembly: context_v2::AssemblySummary {
            included_batches: vec![],
            excluded: vec![],
            trimmed_active: None,
        },
        compression: None,
    }
}

#[tokio::test]
async fn complete_returns_the_done_answer() {
    let response = ModelResponse {
        content: vec![ContentBlock::text("hi")],
        stop_reason: StopReason::EndTurn,
        usage: Usage::default(),
        malformed_tool_calls: vec![],
    };
    let p = Canned {
        model: model(),
        events: vec![
            ProviderEvent::TextDelta { text: "hi".into() },
            ProviderEvent::Done {
                response: response.clone(),
            },
        ],
    };
    let got = complete(&p, &empty_context(), &GenerateOptions::default())
        .await
        .unwrap();
    assert_eq!(got, response);
}

#[tokio::test]
async fn a_stream_without_done_is_truncated() {
    let p = Canned {
        model: model(),
        events: vec![ProviderEvent::TextDelta { text: "hi".into() }],
    };
    let err = complete(&p, &empty_context(), &GenerateOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Truncated { .. }), "{err}");
}
