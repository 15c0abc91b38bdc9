//! Compression of history that no longer fits: always whole batches, always committed.
//!
//! - **Truncate**: keep the newest batches that fit, archive everything older (one statement,
//!   `archive_before`).
//! - **Recursive summarization**: the [`Summarizer`] writes a summary of the batches that go,
//!   folding in the previous summary; the summary and the archiving of what it covers are one
//!   transaction (`summarize_and_archive`), so a summary is never lost and its batches are never
//!   counted twice. The newest summary therefore stands for all compressed history.
//! - **Importance-based**: archive the least important older batches first (see [`importance`]),
//!   keeping the newest two and the active batch.
//!
//! Compression frees room down to a target below the budget (`ContextConfig::compress_to`), so
//! the builds after it do not compress again at once. Batches older than the window the builder
//! reads (`max_batches`) never leave the request silently (`beyond_window`): under recursive
//! summarization they are summarised first, oldest first, in chunks each folded into the
//! previous summary, so every summary's range (`from_batch..=through_batch`) holds only batches
//! some summary saw; under the other strategies they are archived and reported. Archived
//! batches stay in the database and in search. This module must never cut a batch, never archive
//! an open batch, and never drop a batch from a request without committing that choice to the
//! database.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use pattern_db::{
    BatchId, BatchState, BatchType, MessageStore, Role, SnowflakeId, StoredBatch, Summary,
};

use crate::error::{Error, Result};
use crate::types::{CompressionReport, CompressionStrategy};

/// Writes summaries of history; `pattern_core` implements it with the agent's model.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// A summary of `batches` (oldest first) that also carries forward what `previous` said, in
    /// at most `max_tokens` tokens. A longer summary is refused (and nothing is archived).
    async fn summarize(
        &self,
        previous: Option<&Summary>,
        batches: &[StoredBatch],
        max_tokens: usize,
    ) -> std::result::Result<String, Box<dyn std::error::Error + Send + Sync>>;
}

/// What the builder knows when history is over budget.
#[derive(Debug)]
pub(crate) struct Plan<'p> {
    /// The batches read from the store.
    pub(crate) batches: &'p [StoredBatch],
    /// Tokens of each batch in the request (included batches only).
    pub(crate) per_batch: &'p BTreeMap<BatchId, usize>,
    /// The active batch, always kept.
    pub(crate) active: Option<BatchId>,
    /// The history budget.
    pub(crate) budget: usize,
    /// Where compression aims, below the budget.
    pub(crate) target: usize,
    /// Most tokens a new summary may take (its section's room).
    pub(crate) summary_room: usize,
    /// How tokens are counted.
    pub(crate) counter: &'p dyn crate::tokens::TokenCounter,
}

/// How important a batch is to keep, for importance-based compression. Higher is kept longer.
///
/// A heuristic, documented so users can predict it: a user's request weighs 5, another agent's 2,
/// a system trigger 0; every tool call adds 3 (the agent acted); a trigger with a question or more
/// than 200 characters adds 2; and recency adds up to 5 (the newest candidate gets 5, the oldest
/// 0). Ties go to age: the older batch goes first.
pub fn importance(batch: &StoredBatch, recency: f64) -> f64 {
    let base = match batch.info.batch_type {
        BatchType::UserRequest => 5.0,
        BatchType::AgentToAgent => 2.0,
        BatchType::SystemTrigger | BatchType::Continuation => 0.0,
    };
    let calls = batch
        .messages
        .iter()
        .map(|m| m.tool_use_ids().count())
        .sum::<usize>() as f64;
    let trigger = batch
        .messages
        .first()
        .filter(|m| matches!(m.role, Role::User | Role::System))
        .map(|m| m.text());
    let substantial = trigger.is_some_and(|t| t.contains('?') || t.chars().count() > 200);
    base + 3.0 * calls + if substantial { 2.0 } else { 0.0 } + 5.0 * recency.clamp(0.0, 1.0)
}

/// Decides and commits one compression; returns what it archived.
pub(crate) async fn run(
    strategy: CompressionStrategy,
    plan: &Plan<'_>,
    store: &MessageStore,
    summarizer: Option<&dyn Summarizer>,
    previous: Option<&Summary>,
) -> Result<CompressionReport> {
    let before: usize = plan.per_batch.values().sum();
    let active_tokens = plan
        .active
        .and_then(|a| plan.per_batch.get(&a))
        .copied()
        .unwrap_or(0);
    if active_tokens > plan.budget {
        return Err(Error::OverBudget {
            section: "the active batch",
            tokens: active_tokens,
            budget: plan.budget,
        });
    }
    let (archived, summary) = match strategy {
        CompressionStrategy::Truncate | CompressionStrategy::RecursiveSummarization => {
            // Keep the newest batches that fit the target (the active one always), as one run.
            let mut kept = 0usize;
            let mut oldest_kept: Option<BatchId> = None;
            for (&id, &tokens) in plan.per_batch.iter().rev() {
                if Some(id) == plan.active || kept + tokens <= plan.target {
                    kept += tokens;
                    oldest_kept = Some(id);
                } else {
                    break;
                }
            }
            let cut = oldest_kept.unwrap_or(SnowflakeId(i64::MAX));
            let going: Vec<BatchId> = plan
                .per_batch
                .keys()
                .copied()
                .filter(|id| *id < cut)
                .collect();
            if strategy == CompressionStrategy::Truncate {
                store.archive_before(cut).await?;
                (going, None)
            } else {
                let summarizer = summarizer.ok_or(Error::NoSummarizer)?;
                let set: HashSet<BatchId> = going.iter().copied().collect();
                let batches: Vec<StoredBatch> = plan
                    .batches
                    .iter()
                    .filter(|b| set.contains(&b.info.id))
                    .cloned()
                    .collect();
                if batches.is_empty() {
                    return Ok(report(strategy, Vec::new(), None, before, before));
                }
                let summary = fold(
                    summarizer,
                    store,
                    previous,
                    &batches,
                    plan.summary_room,
                    plan.counter,
                )
                .await?;
                let id = summary.id;
                (going, Some(id))
            }
        }
        CompressionStrategy::ImportanceBased => {
            let ids: Vec<BatchId> = plan.per_batch.keys().copied().collect();
            // The newest two and the active batch always stay.
            let protected: HashSet<BatchId> = ids
                .iter()
                .rev()
                .take(2)
                .copied()
                .chain(plan.active)
                .collect::<HashSet<_>>();
            let candidates: Vec<&StoredBatch> = plan
                .batches
                .iter()
                .filter(|b| {
                    plan.per_batch.contains_key(&b.info.id) && !protected.contains(&b.info.id)
                })
                .collect();
            let n = candidates.len().max(2) as f64 - 1.0;
            let mut scored: Vec<(f64, BatchId)> = candidates
                .iter()
                .enumerate()
                .map(|(i, b)| (importance(b, i as f64 / n), b.info.id))
                .collect();
            scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut total = before;
            let mut going = Vec::new();
            for (_, id) in scored {
                if total <= plan.target {
                    break;
                }
                total -= plan.per_batch.get(&id).copied().unwrap_or(0);
                going.push(id);
            }
            if total > plan.budget {
                return Err(Error::OverBudget {
                    section: "the newest two batches and the active batch",
                    tokens: total,
                    budget: plan.budget,
                });
            }
            going.sort_unstable();
            store.archive_batches(going.clone()).await?;
            (going, None)
        }
    };
    let after = plan
        .per_batch
        .iter()
        .filter(|(id, _)| !archived.contains(id))
        .map(|(_, t)| t)
        .sum();
    Ok(report(strategy, archived, summary, before, after))
}

/// Summarises `batches` (whole, closed, oldest first) folding `previous` in, and commits the
/// summary with the archive of what it covers (one transaction). The summary is checked
/// against its room (`summary_room` less a little framing) before anything is committed: an
/// oversized summary must not leave the agent with a context it can never build again.
async fn fold(
    summarizer: &dyn Summarizer,
    store: &MessageStore,
    previous: Option<&Summary>,
    batches: &[StoredBatch],
    summary_room: usize,
    counter: &dyn crate::tokens::TokenCounter,
) -> Result<Summary> {
    let (Some(first), Some(last)) = (
        batches.first().map(|b| b.info.id),
        batches.last().map(|b| b.info.id),
    ) else {
        return Err(Error::Summarizer("nothing to summarise".to_owned()));
    };
    let room = summary_room.saturating_sub(40);
    let text = summarizer
        .summarize(previous, batches, room)
        .await
        .map_err(|e| Error::Summarizer(e.to_string()))?;
    let tokens = counter.count_text(&text);
    if tokens > room {
        return Err(Error::OverBudget {
            section: "the new summary",
            tokens,
            budget: room,
        });
    }
    let summary = Summary {
        id: store.new_summary_id()?,
        agent_id: store.agent_id(),
        content: text,
        from_batch: previous.map_or(first, |p| p.from_batch.min(first)),
        through_batch: last,
        message_count: previous.map_or(0, |p| p.message_count)
            + batches.iter().map(|b| b.messages.len() as i64).sum::<i64>(),
        depth: previous.map_or(0, |p| p.depth + 1),
        created_at: chrono::Utc::now(),
    };
    store.summarize_and_archive(summary.clone()).await?;
    Ok(summary)
}

/// Batches read per summarizer call (and per archive write) beyond the window.
const BEYOND_CHUNK: usize = 50;

/// What [`beyond_window`] did.
#[derive(Debug, Default)]
pub(crate) struct Beyond {
    /// Batches archived (each under a summary, with recursive summarization).
    pub(crate) archived: Vec<BatchId>,
    /// The newest summary written, if any.
    pub(crate) summary: Option<Summary>,
}

/// Deals with the live batches older than `oldest_in_window` (the oldest batch the builder read)
/// so none is left out of a request without a committed choice: summarised oldest first, in
/// chunks of [`BEYOND_CHUNK`] each folded into the previous summary (recursive summarization), or
/// archived (the other strategies). Stops before an open batch (a run may still write it: it
/// stays live and is logged).
pub(crate) async fn beyond_window(
    strategy: CompressionStrategy,
    store: &MessageStore,
    summarizer: Option<&dyn Summarizer>,
    previous: Option<&Summary>,
    oldest_in_window: BatchId,
    summary_room: usize,
    counter: &dyn crate::tokens::TokenCounter,
) -> Result<Beyond> {
    let mut done = Beyond::default();
    let mut previous = previous.cloned();
    loop {
        let chunk = store
            .live_batches_before(oldest_in_window, BEYOND_CHUNK)
            .await?;
        let closed: Vec<StoredBatch> = chunk
            .iter()
            .take_while(|b| b.info.state != BatchState::Open)
            .cloned()
            .collect();
        if let Some(open) = chunk.get(closed.len()) {
            tracing::warn!(
                agent = %store.agent_id(),
                batch = %open.info.id,
                "an open batch older than the context window stays live and out of the request"
            );
        }
        if closed.is_empty() {
            return Ok(done);
        }
        let ids: Vec<BatchId> = closed.iter().map(|b| b.info.id).collect();
        if strategy == CompressionStrategy::RecursiveSummarization {
            let summarizer = summarizer.ok_or(Error::NoSummarizer)?;
            let summary = fold(
                summarizer,
                store,
                previous.as_ref(),
                &closed,
                summary_room,
                counter,
            )
            .await?;
            previous = Some(summary.clone());
            done.summary = Some(summary);
        } else {
            store.archive_batches(ids.clone()).await?;
        }
        done.archived.extend(ids);
        if closed.len() < chunk.len() || chunk.len() < BEYOND_CHUNK {
            return Ok(done);
        }
    }
}

fn report(
    strategy: CompressionStrategy,
    archived_batches: Vec<BatchId>,
    summary: Option<SnowflakeId>,
    history_tokens_before: usize,
    history_tokens_after: usize,
) -> CompressionReport {
    CompressionReport {
        strategy,
        archived_batches,
        summary,
        history_tokens_before,
        history_tokens_after,
    }
}
