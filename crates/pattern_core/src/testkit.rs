//! Test support (feature `testkit`): [`ScriptedProvider`], a model that answers from a script.
//!
//! It stands in for a paid model API in runtime tests and benchmarks (the framework's own
//! overhead is measured with a model that answers instantly); provider wire formats are tested
//! with recorded cassettes and a real local model server instead. It records every context it
//! was sent, so tests can check what the model saw. It must never be used outside tests,
//! benches and examples.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use context_v2::{MemoryContext, ModelInfo, Provider};
use futures::stream;
use pattern_db::ContentBlock;
use serde_json::Value;

use crate::provider::{
    GenerateOptions, MalformedToolCall, ModelProvider, ModelResponse, ProviderError, ProviderEvent,
    ProviderStream, StopReason, Usage,
};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Turn {
    /// Answer with these blocks (text is also streamed as two deltas).
    Answer(Vec<ContentBlock>),
    /// Answer with a tool call whose arguments are not JSON.
    Malformed {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// The raw argument text.
        raw: String,
    },
    /// Fail before any event.
    Fail(ProviderError),
    /// Stream some text, then end without `Done`.
    Truncate(String),
    /// Wait this long, then answer with the blocks.
    Slow(Duration, Vec<ContentBlock>),
}

impl Turn {
    /// A text answer.
    pub fn text(t: &str) -> Self {
        Turn::Answer(vec![ContentBlock::text(t)])
    }

    /// One tool call (with a short text before it).
    pub fn call(id: &str, name: &str, input: Value) -> Self {
        Turn::Answer(vec![ContentBlock::tool_use(id, name, input)])
    }
}

#[derive(Debug)]
struct Script {
    turns: VecDeque<Turn>,
    /// Answer used when the script is empty (`None`: a text "done").
    fallback: Option<Turn>,
    seen: Vec<MemoryContext>,
}

/// A provider that answers from a script. Clones share the script.
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    info: ModelInfo,
    script: Arc<Mutex<Script>>,
}

impl ScriptedProvider {
    /// A provider that answers `turns` in order, then `"done"`.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self {
            info: ModelInfo {
                provider: Provider::Anthropic,
                model: "scripted".into(),
                context_window: 200_000,
                max_output_tokens: 4_096,
            },
            script: Arc::new(Mutex::new(Script {
                turns: turns.into_iter().collect(),
                fallback: None,
                seen: Vec::new(),
            })),
        }
    }

    /// Answers `turn` whenever the script is empty (e.g. a model that always calls a tool).
    pub fn with_fallback(self, turn: Turn) -> Self {
        self.lock().fallback = Some(turn);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every context sent so far.
    pub fn seen(&self) -> Vec<MemoryContext> {
        self.lock().seen.clone()
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.lock().seen.len()
    }

    /// Adds answers at the end of the script.
    pub fn push(&self, turn: Turn) {
        self.lock().turns.push_back(turn);
    }
}

fn usage() -> Usage {
    Usage {
        input_tokens: 100,
        output_tokens: 10,
        ..Usage::default()
    }
}

fn answer_events(
    content: Vec<ContentBlock>,
    malformed: Vec<MalformedToolCall>,
) -> Vec<ProviderEvent> {
    let mut events = Vec::new();
    let mut index = 0;
    for block in &content {
        match block {
            ContentBlock::Text { text } => {
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map_or(0, |(i, _)| i);
                let (a, b) = text.split_at(mid);
                for part in [a, b] {
                    if !part.is_empty() {
                        events.push(ProviderEvent::TextDelta { text: part.into() });
                    }
                }
            }
            ContentBlock::ToolUse {
                id, name, input, ..
            } => {
                events.push(ProviderEvent::ToolCallStarted {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                events.push(ProviderEvent::ToolCallDelta {
                    index,
                    fragment: input.to_string(),
                });
                index += 1;
            }
            _ => {}
        }
    }
    let stop_reason = if content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    events.push(ProviderEvent::Done {
        response: ModelResponse {
            content,
            stop_reason,
            usage: usage(),
            malformed_tool_calls: malformed,
        },
    });
    events
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &ModelInfo {
        &self.info
    }

    async fn stream(
        &self,
        ctx: &MemoryContext,
        _opts: &GenerateOptions,
    ) -> Result<ProviderStream, ProviderError> {
        let turn = {
            let mut script = self.lock();
            script.seen.push(ctx.clone());
            script
                .turns
                .pop_front()
                .or_else(|| script.fallback.clone())
                .unwrap_or_else(|| Turn::text("done"))
        };
        let events: Vec<Result<ProviderEvent, ProviderError>> = match turn {
            Turn::Answer(content) => answer_events(content, vec![]).into_iter().map(Ok).collect(),
            Turn::Malformed { id, name, raw } => {
                let input = serde_json::json!({ "_unparsed_arguments": raw });
                let malformed = vec![MalformedToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    raw_arguments: raw,
                    error: "expected value at line 1 column 1".into(),
                }];
                answer_events(vec![ContentBlock::tool_use(id, name, input)], malformed)
                    .into_iter()
                    .map(Ok)
                    .collect()
            }
            Turn::Fail(e) => return Err(e),
            Turn::Truncate(text) => vec![
                Ok(ProviderEvent::TextDelta { text }),
                Err(ProviderError::Truncated {
                    provider: "scripted".into(),
                }),
            ],
            Turn::Slow(delay, content) => {
                tokio::time::sleep(delay).await;
                answer_events(content, vec![]).into_iter().map(Ok).collect()
            }
        };
        Ok(Box::pin(stream::iter(events)))
    }
}
