//! [`ModelSummarizer`]: `context_v2`'s recursive summarization, written by a model.
//!
//! The batches to fold away are rendered as a plain transcript (tool calls and results in
//! words, so the request carries no tool pairs of its own), with the previous summary first,
//! and the model is asked for one summary within the token budget. This module must never
//! store anything (context_v2 commits the summary with the archiving it covers) and never
//! return a summary it has not checked against the budget.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use context_v2::{
    AssemblySummary, ContextMessage, MemoryContext, SectionTokens, Summarizer, SystemPart,
    SystemPartKind, TokenCounter,
};
use pattern_db::{ContentBlock, Role, StoredBatch, Summary};

use crate::provider::{GenerateOptions, ModelProvider, complete};

const INSTRUCTIONS: &str = "You write the running summary of a conversation between an AI agent \
and its users. Keep every fact, decision, commitment, name and open question the agent will need \
later; drop pleasantries. Write plain prose or short bullet points. Reply with the summary only.";

/// Most characters of one message quoted into the transcript.
const QUOTE_LIMIT: usize = 4_000;

/// Summarises with a model.
#[derive(Debug, Clone)]
pub struct ModelSummarizer {
    model: Arc<dyn ModelProvider>,
    counter: Arc<dyn TokenCounter>,
}

impl ModelSummarizer {
    /// A summarizer calling `model`, checking lengths with `counter`.
    pub fn new(model: Arc<dyn ModelProvider>, counter: Arc<dyn TokenCounter>) -> Self {
        Self { model, counter }
    }
}

fn quote(out: &mut String, text: &str) {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(QUOTE_LIMIT).collect();
    out.push_str(&head);
    if chars.next().is_some() {
        out.push_str(" [...]");
    }
}

/// The transcript the model summarises.
pub fn transcript(previous: Option<&Summary>, batches: &[StoredBatch]) -> String {
    let mut out = String::new();
    if let Some(p) = previous {
        out.push_str("Summary so far:\n");
        out.push_str(&p.content);
        out.push_str("\n\nWhat happened next:\n");
    }
    for batch in batches {
        for m in &batch.messages {
            let who = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "agent",
                Role::Tool => "tool",
            };
            for block in &m.content {
                let _ = write!(out, "{who}: ");
                match block {
                    ContentBlock::Text { text } => quote(&mut out, text),
                    ContentBlock::ToolUse { name, input, .. } => {
                        let _ = write!(out, "(calls {name} with ");
                        quote(&mut out, &input.to_string());
                        out.push(')');
                    }
                    ContentBlock::ToolResult {
                        content, is_error, ..
                    } => {
                        out.push_str(if *is_error {
                            "(tool error) "
                        } else {
                            "(tool result) "
                        });
                        quote(&mut out, content);
                    }
                    ContentBlock::Thinking { .. } => out.push_str("(thinking)"),
                    ContentBlock::Image { reference, .. } => {
                        let _ = write!(out, "[image: {reference}]");
                    }
                }
                out.push('\n');
            }
        }
    }
    out
}

#[async_trait]
impl Summarizer for ModelSummarizer {
    async fn summarize(
        &self,
        previous: Option<&Summary>,
        batches: &[StoredBatch],
        max_tokens: usize,
    ) -> std::result::Result<String, Box<dyn std::error::Error + Send + Sync>> {
        let Some(last) = batches.last() else {
            return Ok(previous.map(|p| p.content.clone()).unwrap_or_default());
        };
        let text = format!(
            "{}\n\nWrite the new summary in at most {max_tokens} tokens.",
            transcript(previous, batches)
        );
        let ctx = MemoryContext {
            system: vec![SystemPart {
                kind: SystemPartKind::Instructions,
                text: INSTRUCTIONS.into(),
            }],
            tools: vec![],
            messages: vec![ContextMessage {
                batch_id: last.info.id,
                position: last.info.id,
                role: Role::User,
                content: vec![ContentBlock::text(text)],
            }],
            cache_points: vec![],
            tokens: SectionTokens::default(),
            assembly: AssemblySummary {
                included_batches: vec![],
                excluded: vec![],
                trimmed_active: None,
            },
            compression: None,
        };
        let opts = GenerateOptions {
            temperature: Some(0.2),
            max_output_tokens: Some(max_tokens),
            timeout: None,
            ..Default::default()
        };
        let response = complete(&*self.model, &ctx, &opts).await?;
        let summary: String = response
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
            .trim()
            .to_owned();
        if summary.is_empty() {
            return Err("the model returned an empty summary".into());
        }
        let tokens = self.counter.count_text(&summary);
        if tokens > max_tokens {
            return Err(
                format!("the summary has {tokens} tokens; the budget is {max_tokens}").into(),
            );
        }
        Ok(summary)
    }
}
