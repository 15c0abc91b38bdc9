//! The vocabulary of context building: configuration, model facts, tool definitions, and the
//! provider-neutral [`MemoryContext`] a build produces.
//!
//! Plain values; this module must never read a store or count tokens itself.

use serde::{Deserialize, Serialize};

use crate::assemble::{AssembledHistory, ContextMessage};

/// Which wire format a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI Chat Completions (also Ollama, vLLM, llama.cpp's server).
    OpenAi,
    /// Google Gemini `generateContent`.
    Gemini,
}

/// What the builder needs to know about the model a request is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Wire format.
    pub provider: Provider,
    /// Model name as the provider knows it.
    pub model: String,
    /// Context window in tokens (prompt plus response).
    pub context_window: usize,
    /// Tokens kept free for the response.
    pub max_output_tokens: usize,
}

/// Token budgets per section. Each is a ceiling; a section over its ceiling triggers
/// compression (history, summaries) or a typed error (memory blocks are never cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionBudgets {
    /// Base instructions plus memory blocks.
    pub system: usize,
    /// Tool definitions and rules.
    pub tools: usize,
    /// Summaries of compressed history.
    pub summaries: usize,
    /// Recent batches. The history also never takes more than what the window leaves.
    pub history: usize,
}

/// How history that no longer fits is compressed. Always whole batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionStrategy {
    /// Archive the oldest batches (kept in the database, out of context).
    Truncate,
    /// Summarise the oldest batches with the [`crate::Summarizer`], fold the previous summary in,
    /// and archive them in the same transaction as the summary is written.
    RecursiveSummarization,
    /// Archive the least important of the older batches first (see [`crate::importance`]).
    ImportanceBased,
}

/// Where prompt-cache breakpoints go (providers that support them: Anthropic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachePolicy {
    /// No cache hints.
    None,
    /// Breakpoints after the stable prefix: tools, system and memory blocks, summaries.
    StablePrefix,
}

/// Everything a build is configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextConfig {
    /// Base instructions, first in the system prompt.
    pub instructions: String,
    /// Window of the model, in tokens.
    pub model_window: usize,
    /// Tokens kept free for the response.
    pub response_reserve: usize,
    /// Budgets per section.
    pub budgets: SectionBudgets,
    /// How to compress history that does not fit.
    pub compression: CompressionStrategy,
    /// Prompt-cache hints.
    pub cache: CachePolicy,
    /// Most batches read from the store per build (a bound on work, not on context).
    pub max_batches: usize,
    /// When compression runs, it frees room until history fits in this share of its budget, so
    /// that the next builds do not compress again at once (0.5 to 1.0).
    pub compress_to: f64,
}

impl ContextConfig {
    /// Defaults for a model window: 10 % of the window reserved for the response, a quarter for
    /// system and blocks and a quarter for tools, an eighth for summaries, the rest for history.
    /// Each is a ceiling, not a reservation: history takes whatever the others leave. (Tools had
    /// an eighth until stop 26: on the local model's 8,192-token window the built-in tool set,
    /// 1,055 tokens since agents talk through the protocol, no longer fit, and every turn of
    /// the main job failed after its first tool call.)
    pub fn for_window(instructions: impl Into<String>, model_window: usize) -> Self {
        let reserve = model_window / 10;
        Self {
            instructions: instructions.into(),
            model_window,
            response_reserve: reserve,
            budgets: SectionBudgets {
                system: model_window / 4,
                tools: model_window / 4,
                summaries: model_window / 8,
                history: model_window - reserve,
            },
            compression: CompressionStrategy::Truncate,
            cache: CachePolicy::StablePrefix,
            max_batches: 200,
            compress_to: 0.75,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input object.
    pub input_schema: serde_json::Value,
}

/// What a part of the system prompt is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SystemPartKind {
    /// The base instructions.
    Instructions,
    /// One memory block.
    MemoryBlock {
        /// The block's label.
        label: String,
    },
    /// Rules about tool use.
    ToolRules,
    /// A summary of compressed history.
    Summary,
    /// Passages of archival memory recalled for this turn (by searching with its trigger);
    /// they change every turn, so they come after the stable prefix.
    Recalled,
}

/// One part of the system prompt, rendered as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemPart {
    /// What it is.
    pub kind: SystemPartKind,
    /// The rendered text.
    pub text: String,
}

/// A prompt-cache breakpoint: everything before it is a stable prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachePoint {
    /// After the tool definitions.
    AfterTools,
    /// After the instructions and memory blocks.
    AfterSystem,
    /// After the summaries.
    AfterSummaries,
}

/// Tokens per section of a built context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionTokens {
    /// Instructions, memory blocks and tool rules.
    pub system: usize,
    /// Tool definitions.
    pub tools: usize,
    /// Summaries.
    pub summaries: usize,
    /// History messages.
    pub history: usize,
}

impl SectionTokens {
    /// Sum of all sections.
    pub fn total(&self) -> usize {
        self.system + self.tools + self.summaries + self.history
    }
}

/// A built, provider-neutral context: the stable prefix first, the variable suffix last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryContext {
    /// System prompt parts in order: instructions, memory blocks, tool rules, then summaries.
    pub system: Vec<SystemPart>,
    /// Tool definitions.
    pub tools: Vec<ToolDefinition>,
    /// The history, validated: every tool call followed by its result.
    pub messages: Vec<ContextMessage>,
    /// Prompt-cache breakpoints (empty when the policy is `None`).
    pub cache_points: Vec<CachePoint>,
    /// Tokens per section as counted for this build.
    pub tokens: SectionTokens,
    /// What assembly included, excluded and trimmed.
    pub assembly: AssemblySummary,
    /// Compression that this build committed, if any.
    pub compression: Option<CompressionReport>,
}

/// The bookkeeping of assembly, without the messages.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssemblySummary {
    /// Batches in the request, in order.
    pub included_batches: Vec<pattern_db::BatchId>,
    /// Batches left out and why.
    pub excluded: Vec<(pattern_db::BatchId, crate::ExclusionReason)>,
    /// The active batch's cut, if its tools are still running.
    pub trimmed_active: Option<crate::TrimmedActive>,
}

impl From<&AssembledHistory> for AssemblySummary {
    fn from(h: &AssembledHistory) -> Self {
        Self {
            included_batches: h.included_batches.clone(),
            excluded: h.excluded.clone(),
            trimmed_active: h.trimmed_active.clone(),
        }
    }
}

/// What a compression did, committed in the database before the build returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompressionReport {
    /// Strategy used.
    pub strategy: CompressionStrategy,
    /// Batches archived out of the live history.
    pub archived_batches: Vec<pattern_db::BatchId>,
    /// The summary written, if any.
    pub summary: Option<pattern_db::SnowflakeId>,
    /// History tokens before and after.
    pub history_tokens_before: usize,
    /// History tokens after.
    pub history_tokens_after: usize,
}
