//! [`ContextBuilder`]: reads memory blocks, summaries and recent batches and builds a
//! [`MemoryContext`] that fits the model's window.
//!
//! Order of the request: instructions, memory blocks, tool rules (the stable system prefix), the
//! newest summary, then the history (whole batches, validated). Sections are counted with the
//! given [`TokenCounter`]. Instructions, blocks, tools and the newest summary are never cut: if
//! they do not fit, the build fails with [`Error::OverBudget`]. History that does not fit is
//! compressed by the configured strategy (see [`crate::compress`]), which commits its work to the
//! database (archive, or summary + archive in one transaction) before the build returns, so the
//! next builds start from the smaller history.
//!
//! [`ContextBuilder::preview_for_model`] is the same build without the compression commit: it
//! reports the request as it would be built now and whether history is over its budget (the
//! next real build would compress it first). It writes nothing.
//!
//! The builder reads stores and never writes them, except through an explicit compression
//! commit (never in a preview); it must never emit a request that did not pass
//! [`crate::validate()`].

use std::collections::BTreeMap;

use memory_v2::{MemoryBlock, MemoryStore};
use pattern_db::{BatchId, MessageStore, Summary};
use tracing::debug;

use crate::assemble::{ContextMessage, assemble};
use crate::compress::{self, Summarizer};
use crate::error::{Error, Result};
use crate::tokens::{MESSAGE_OVERHEAD, TokenCounter};
use crate::types::{
    AssemblySummary, CachePoint, CachePolicy, CompressionReport, ContextConfig, MemoryContext,
    ModelInfo, SectionTokens, SystemPart, SystemPartKind, ToolDefinition,
};
use crate::validate::validate;

/// What [`ContextBuilder::preview_for_model`] reports: the request as it would be built now,
/// without compressing anything.
#[derive(Debug, Clone)]
pub struct ContextPreview {
    /// The context; when `history_over_budget`, its history is the uncompressed one.
    pub context: MemoryContext,
    /// The window the build used (the smaller of the configured one and the model's).
    pub window: usize,
    /// Tokens kept free for the response.
    pub reserve: usize,
    /// The budget the history must fit in beside the other sections.
    pub history_budget: usize,
    /// History is over its budget: the next build compresses it first.
    pub history_over_budget: bool,
}

/// Builds the context of one agent. Cheap to create per request.
pub struct ContextBuilder<'a> {
    memory: &'a dyn MemoryStore,
    messages: &'a MessageStore,
    config: &'a ContextConfig,
    counter: &'a dyn TokenCounter,
    tools: &'a [ToolDefinition],
    tool_rules: &'a [String],
    recalled: &'a [String],
    summarizer: Option<&'a dyn Summarizer>,
    active: Option<BatchId>,
}

impl std::fmt::Debug for ContextBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextBuilder")
            .field("agent", &self.messages.agent_id())
            .field("tools", &self.tools.len())
            .field("active", &self.active)
            .finish_non_exhaustive()
    }
}

/// Renders one memory block for the system prompt, with what the model needs to manage it.
pub fn render_block(block: &MemoryBlock) -> String {
    let mut out = format!(
        "<memory_block label=\"{}\" type=\"{}\" permission=\"{}\" chars=\"{}/{}\">\n",
        block.label,
        match block.block_type {
            memory_v2::BlockType::Core => "core",
            memory_v2::BlockType::Working => "working",
            memory_v2::BlockType::Archival => "archival",
            memory_v2::BlockType::Log => "log",
        },
        block.permission.as_str(),
        block.char_count(),
        block.char_limit
    );
    if !block.description.is_empty() {
        out.push_str("<description>");
        out.push_str(&block.description);
        out.push_str("</description>\n");
    }
    out.push_str(&block.value);
    out.push_str("\n</memory_block>");
    out
}

/// Renders a summary for the system prompt.
pub fn render_summary(summary: &Summary) -> String {
    format!(
        "<conversation_summary messages=\"{}\" through_batch=\"{}\">\n{}\n</conversation_summary>",
        summary.message_count, summary.through_batch, summary.content
    )
}

impl<'a> ContextBuilder<'a> {
    /// A builder over the agent's memory and message store.
    pub fn new(
        memory: &'a dyn MemoryStore,
        messages: &'a MessageStore,
        config: &'a ContextConfig,
        counter: &'a dyn TokenCounter,
    ) -> Self {
        Self {
            memory,
            messages,
            config,
            counter,
            tools: &[],
            tool_rules: &[],
            recalled: &[],
            summarizer: None,
            active: None,
        }
    }

    /// Passages recalled for this turn, best first. They go after the tool rules, and as many
    /// as fit in what the system budget leaves are kept (best first): recall never makes a
    /// context over budget.
    pub fn recalled(mut self, passages: &'a [String]) -> Self {
        self.recalled = passages;
        self
    }

    /// The tools offered to the model.
    pub fn tools(mut self, tools: &'a [ToolDefinition]) -> Self {
        self.tools = tools;
        self
    }

    /// Rules about tool use, rendered into the system prompt.
    pub fn tool_rules(mut self, rules: &'a [String]) -> Self {
        self.tool_rules = rules;
        self
    }

    /// The summarizer used by recursive summarization.
    pub fn summarizer(mut self, summarizer: &'a dyn Summarizer) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The batch the calling run is working on (included even though it is open).
    pub fn active_batch(mut self, batch: Option<BatchId>) -> Self {
        self.active = batch;
        self
    }

    /// Builds with the configured window.
    pub async fn build(&self) -> Result<MemoryContext> {
        let (window, reserve) = (self.config.model_window, self.config.response_reserve);
        Ok(self.build_within(window, reserve, false).await?.context)
    }

    /// Builds for a model: the window is the smaller of the configured one and the model's; the
    /// reserve is the model's output limit, or the configured reserve scaled to that window if
    /// larger.
    pub async fn build_for_model(&self, model: &ModelInfo) -> Result<MemoryContext> {
        let (window, reserve) = self.window_for(model);
        Ok(self.build_within(window, reserve, false).await?.context)
    }

    /// What [`Self::build_for_model`] would build now, without compressing (writes nothing).
    /// Sections that can never be cut still fail with [`Error::OverBudget`].
    pub async fn preview_for_model(&self, model: &ModelInfo) -> Result<ContextPreview> {
        let (window, reserve) = self.window_for(model);
        self.build_within(window, reserve, true).await
    }

    fn window_for(&self, model: &ModelInfo) -> (usize, usize) {
        let window = self.config.model_window.min(model.context_window);
        let scaled = if self.config.model_window == 0 {
            0
        } else {
            ((self.config.response_reserve as u128 * window as u128)
                / self.config.model_window as u128) as usize
        };
        let reserve = scaled.max(model.max_output_tokens);
        (window, reserve)
    }

    fn count_parts(&self, parts: &[SystemPart]) -> usize {
        parts
            .iter()
            .map(|p| self.counter.count_text(&p.text) + MESSAGE_OVERHEAD)
            .sum()
    }

    /// The recalled passages that fit in `budget` beside `system`, best first, as one part.
    fn recalled_part(&self, budget: usize, system: &[SystemPart]) -> Option<SystemPart> {
        const HEADER: &str = "Memories recalled for this message (your archival memory):";
        let mut room = budget
            .checked_sub(self.count_parts(system))?
            .checked_sub(self.counter.count_text(HEADER) + MESSAGE_OVERHEAD)?;
        let mut text = String::from(HEADER);
        let mut kept = 0;
        for passage in self.recalled {
            let line = format!("\n- {passage}");
            let cost = self.counter.count_text(&line);
            if cost > room {
                break;
            }
            room -= cost;
            text.push_str(&line);
            kept += 1;
        }
        (kept > 0).then_some(SystemPart {
            kind: SystemPartKind::Recalled,
            text,
        })
    }

    async fn build_within(
        &self,
        window: usize,
        reserve: usize,
        preview: bool,
    ) -> Result<ContextPreview> {
        let budgets = &self.config.budgets;
        if reserve >= window {
            return Err(Error::Config(format!(
                "response reserve {reserve} leaves nothing of the window {window}"
            )));
        }
        let available = window - reserve;
        let agent = self.messages.agent_id();

        // Stable prefix: instructions, memory blocks, tool rules. Never cut.
        let mut system = Vec::new();
        if !self.config.instructions.is_empty() {
            system.push(SystemPart {
                kind: SystemPartKind::Instructions,
                text: self.config.instructions.clone(),
            });
        }
        for block in self.memory.context_blocks(agent).await? {
            system.push(SystemPart {
                kind: SystemPartKind::MemoryBlock {
                    label: block.label.clone(),
                },
                text: render_block(&block),
            });
        }
        if !self.tool_rules.is_empty() {
            system.push(SystemPart {
                kind: SystemPartKind::ToolRules,
                text: self.tool_rules.join("\n"),
            });
        }
        if let Some(part) = self.recalled_part(budgets.system.min(available), &system) {
            system.push(part);
        }
        let system_tokens = self.count_parts(&system);
        check(
            "instructions and memory blocks",
            system_tokens,
            budgets.system.min(available),
        )?;

        let tools_tokens: usize = self
            .tools
            .iter()
            .map(|t| {
                self.counter.count_text(&t.name)
                    + self.counter.count_text(&t.description)
                    + self.counter.count_text(&t.input_schema.to_string())
                    + MESSAGE_OVERHEAD
            })
            .sum();
        check(
            "tool definitions",
            tools_tokens,
            budgets.tools.min(available - system_tokens),
        )?;

        // The newest summary folds in every earlier one (recursive summarization), so it alone
        // stands for the compressed history.
        let mut summary = self.messages.get_summary().await?;
        let summary_tokens = |s: &Option<Summary>| {
            s.as_ref().map_or(0, |s| {
                self.counter.count_text(&render_summary(s)) + MESSAGE_OVERHEAD
            })
        };
        let mut summaries_tokens = summary_tokens(&summary);
        check(
            "the newest summary",
            summaries_tokens,
            budgets
                .summaries
                .min(available - system_tokens - tools_tokens),
        )?;

        // History: whole batches, validated.
        let batches = self.messages.get_recent(self.config.max_batches).await?;
        // Live batches older than the window never leave the request silently: summarised (or,
        // under the other strategies, archived) and reported before this request is built.
        let mut beyond = None;
        if !preview
            && self.config.max_batches > 0
            && batches.len() >= self.config.max_batches
            && let Some(oldest) = batches.first().map(|b| b.info.id)
        {
            let room_for_summary = budgets
                .summaries
                .min(available - system_tokens - tools_tokens);
            let done = compress::beyond_window(
                self.config.compression,
                self.messages,
                self.summarizer,
                summary.as_ref(),
                oldest,
                room_for_summary,
                self.counter,
            )
            .await?;
            if done.summary.is_some() {
                summary = done.summary.clone();
                summaries_tokens = summary_tokens(&summary);
                check("the new summary", summaries_tokens, room_for_summary)?;
            }
            if !done.archived.is_empty() {
                debug!(agent = %agent, archived = done.archived.len(), "history beyond the window folded");
                beyond = Some(done);
            }
        }
        let mut assembled = assemble(&batches, self.active)?;
        let history_budget = budgets
            .history
            .min(available - system_tokens - tools_tokens - summaries_tokens);
        let mut per_batch = self.tokens_per_batch(&assembled.messages);
        let history_tokens: usize = per_batch.values().sum();
        let mut compression = None;
        let over_budget = history_tokens > history_budget;
        if over_budget && !preview {
            let room_for_summary = budgets
                .summaries
                .min(available - system_tokens - tools_tokens);
            // A new summary may grow to its whole room: the history that stays must fit beside
            // it, decided before anything is committed.
            let budget = if self.config.compression
                == crate::types::CompressionStrategy::RecursiveSummarization
            {
                budgets.history.min(
                    (available - system_tokens - tools_tokens).saturating_sub(room_for_summary),
                )
            } else {
                history_budget
            };
            let plan = compress::Plan {
                batches: &batches,
                per_batch: &per_batch,
                active: self.active,
                budget,
                target: ((budget as f64) * self.config.compress_to.clamp(0.5, 1.0)) as usize,
                summary_room: room_for_summary,
                counter: self.counter,
            };
            let report = compress::run(
                self.config.compression,
                &plan,
                self.messages,
                self.summarizer,
                summary.as_ref(),
            )
            .await?;
            debug!(agent = %agent, archived = report.archived_batches.len(), "history compressed");
            // Keep what was not archived; the messages stay valid since whole batches go.
            assembled
                .messages
                .retain(|m| !report.archived_batches.contains(&m.batch_id));
            assembled
                .included_batches
                .retain(|b| !report.archived_batches.contains(b));
            per_batch.retain(|b, _| !report.archived_batches.contains(b));
            if report.summary.is_some() {
                summary = self.messages.get_summary().await?;
                summaries_tokens = summary_tokens(&summary);
                check("the new summary", summaries_tokens, room_for_summary)?;
            }
            compression = Some(report);
        }
        if let Some(done) = beyond {
            // Reported with whatever compression ran: the batches beyond the window first.
            let tokens: usize = per_batch.values().sum();
            let report = compression.get_or_insert_with(|| CompressionReport {
                strategy: self.config.compression,
                archived_batches: Vec::new(),
                summary: None,
                history_tokens_before: tokens,
                history_tokens_after: tokens,
            });
            let mut archived = done.archived;
            archived.append(&mut report.archived_batches);
            report.archived_batches = archived;
            if report.summary.is_none() {
                report.summary = done.summary.map(|s| s.id);
            }
        }
        let history_tokens: usize = per_batch.values().sum();
        let history_room = budgets
            .history
            .min(available - system_tokens - tools_tokens - summaries_tokens);
        if !preview {
            check(
                "the kept history (at least the active batch)",
                history_tokens,
                history_room,
            )?;
        }
        validate(&assembled.messages)?;

        if let Some(s) = &summary {
            system.push(SystemPart {
                kind: SystemPartKind::Summary,
                text: render_summary(s),
            });
        }
        let cache_points = match self.config.cache {
            CachePolicy::None => Vec::new(),
            CachePolicy::StablePrefix => {
                let mut points = Vec::new();
                if !self.tools.is_empty() {
                    points.push(CachePoint::AfterTools);
                }
                points.push(CachePoint::AfterSystem);
                if summary.is_some() {
                    points.push(CachePoint::AfterSummaries);
                }
                points
            }
        };
        let tokens = SectionTokens {
            system: system_tokens,
            tools: tools_tokens,
            summaries: summaries_tokens,
            history: history_tokens,
        };
        debug_assert!(preview || tokens.total() <= available);
        let context = MemoryContext {
            system,
            tools: self.tools.to_vec(),
            assembly: AssemblySummary::from(&assembled),
            messages: assembled.messages,
            cache_points,
            tokens,
            compression,
        };
        Ok(ContextPreview {
            context,
            window,
            reserve,
            history_budget: history_room,
            history_over_budget: preview && over_budget,
        })
    }

    fn tokens_per_batch(&self, messages: &[ContextMessage]) -> BTreeMap<BatchId, usize> {
        let mut out = BTreeMap::new();
        for m in messages {
            *out.entry(m.batch_id).or_insert(0) += self.counter.count_message(m);
        }
        out
    }
}

fn check(section: &'static str, tokens: usize, budget: usize) -> Result<()> {
    if tokens > budget {
        Err(Error::OverBudget {
            section,
            tokens,
            budget,
        })
    } else {
        Ok(())
    }
}
