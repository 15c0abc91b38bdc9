//! `GET /v1/agents/{agent_id}/context`: the request context_v2 would build for the agent's next
//! turn, now: its sections with their token counts against the model's window, the system
//! prompt's parts, the tools, which batches the history holds or leaves out, and the request
//! body in the model's provider format.
//!
//! Read-only: it uses the builder's preview, which never compresses; when history is over its
//! budget it says so (the next turn compresses first). This module must never write anything,
//! nor show an agent outside the caller's organization.

use axum::extract::State;
use pattern::context::format::RequestOptions;
use pattern::context::{SystemPartKind, TokenCounter};
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath};
use crate::state::AppState;

/// One section of the request and its tokens.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextSection {
    /// `system` (instructions, memory blocks, tool rules), `tools`, `summaries` or `history`.
    pub name: String,
    /// Tokens it takes.
    pub tokens: usize,
}

/// One part of the system prompt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextPart {
    /// `instructions`, `memory_block`, `tool_rules`, `summary` or `recalled`.
    pub kind: String,
    /// The block's label, for a memory block.
    pub label: Option<String>,
    /// The rendered text, exactly as sent.
    pub text: String,
    /// Its tokens (text only).
    pub tokens: usize,
}

/// A batch left out of the history, and why.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextExclusion {
    /// The batch (decimal).
    pub batch: String,
    /// Why (`abandoned`, `archived`, `open_not_active`, ...).
    pub reason: String,
}

/// `context` shape: the request the agent's next turn would send, now.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextView {
    /// The model's name.
    pub model: String,
    /// The window the build uses, in tokens.
    pub window: usize,
    /// Tokens kept free for the answer.
    pub response_reserve: usize,
    /// The sections in request order with their tokens; their sum is what the request takes.
    pub sections: Vec<ContextSection>,
    /// The budget history must fit in beside the other sections.
    pub history_budget: usize,
    /// History is over its budget: the next turn compresses it first.
    pub would_compress: bool,
    /// The system prompt's parts, in order.
    pub system: Vec<ContextPart>,
    /// The tools offered, by name.
    pub tools: Vec<String>,
    /// Messages in the history.
    pub messages: usize,
    /// Batches in the history, oldest first (decimal).
    pub batches: Vec<String>,
    /// Batches left out.
    pub excluded: Vec<ContextExclusion>,
    /// The request body in the model's provider format (Anthropic, OpenAI or Gemini), as a turn
    /// would send it with the default options (streamed, the provider's temperature, the model
    /// choosing whether to call a tool).
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
}

/// The request context_v2 would build for the agent's next turn, without changing anything.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/context", tag = "agents",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id (UUID)")),
    responses((status = 200, body = ContextView), (status = 404, body = crate::error::ErrorBody),
        (status = 422, description = "`refused`: a section that is never cut does not fit the \
            window", body = crate::error::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<ContextView>, ApiError> {
    let row = caller.agent(&state, &agent_id).await?;
    let agent = state.agent(row).await?;
    let runtime = agent.runtime_arc();
    let preview = runtime.preview_context().await?;
    let counter: &dyn TokenCounter = &**runtime.counter();
    let options = RequestOptions {
        stream: true,
        ..RequestOptions::default()
    };
    let request =
        pattern::context::format::request(&preview.context, runtime.model().model(), &options)
            .map_err(pattern::core::Error::from)?;
    let context = &preview.context;
    let tokens = &context.tokens;
    let sections = [
        ("system", tokens.system),
        ("tools", tokens.tools),
        ("summaries", tokens.summaries),
        ("history", tokens.history),
    ]
    .into_iter()
    .map(|(name, tokens)| ContextSection {
        name: name.to_owned(),
        tokens,
    })
    .collect();
    let system = context
        .system
        .iter()
        .map(|part| {
            let (kind, label) = match &part.kind {
                SystemPartKind::Instructions => ("instructions", None),
                SystemPartKind::MemoryBlock { label } => ("memory_block", Some(label.clone())),
                SystemPartKind::ToolRules => ("tool_rules", None),
                SystemPartKind::Summary => ("summary", None),
                SystemPartKind::Recalled => ("recalled", None),
            };
            ContextPart {
                kind: kind.to_owned(),
                label,
                text: part.text.clone(),
                tokens: counter.count_text(&part.text),
            }
        })
        .collect();
    let excluded = context
        .assembly
        .excluded
        .iter()
        .map(|(batch, reason)| ContextExclusion {
            batch: batch.to_string(),
            reason: serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{reason:?}")),
        })
        .collect();
    Ok(ApiJson(ContextView {
        model: runtime.model().model().model.clone(),
        window: preview.window,
        response_reserve: preview.reserve,
        sections,
        history_budget: preview.history_budget,
        would_compress: preview.history_over_budget,
        system,
        tools: context.tools.iter().map(|t| t.name.clone()).collect(),
        messages: context.messages.len(),
        batches: context
            .assembly
            .included_batches
            .iter()
            .map(ToString::to_string)
            .collect(),
        excluded,
        request,
    }))
}
