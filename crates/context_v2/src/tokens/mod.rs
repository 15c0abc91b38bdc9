//! Token counting: the [`TokenCounter`] trait, and a calibrated estimate for models whose
//! tokenizer is not available here.
//!
//! Real tokenizers live in submodules (tiktoken for OpenAI models, Hugging Face `tokenizers` for
//! local models). The estimate learns from the usage figures providers report
//! ([`TokenCounter::observe_usage`]). A counter must never undercount on purpose: budgets rely on
//! counts being honest, and the estimate errs high until calibrated.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};

use pattern_db::ContentBlock;

use crate::assemble::ContextMessage;

mod hf;
mod tiktoken;

pub use hf::HfTokenizerCounter;
pub use tiktoken::TiktokenCounter;

/// Tokens of framing a provider adds per message (role markers, separators).
pub const MESSAGE_OVERHEAD: usize = 4;

/// Counts tokens the way a model's tokenizer would.
pub trait TokenCounter: Send + Sync + Debug {
    /// Tokens of a piece of text.
    fn count_text(&self, text: &str) -> usize;

    /// Tokens of one message: its blocks plus framing.
    fn count_message(&self, message: &ContextMessage) -> usize {
        MESSAGE_OVERHEAD
            + message
                .content
                .iter()
                .map(|b| self.count_block(b))
                .sum::<usize>()
    }

    /// Tokens of one content block.
    fn count_block(&self, block: &ContentBlock) -> usize {
        match block {
            ContentBlock::Text { text } => self.count_text(text),
            ContentBlock::Thinking { text, .. } => self.count_text(text),
            ContentBlock::ToolUse {
                id, name, input, ..
            } => {
                self.count_text(id)
                    + self.count_text(name)
                    + self.count_text(&input.to_string())
                    + 4
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => self.count_text(tool_use_id) + self.count_text(content) + 4,
            // Providers bill images by size, which a reference does not tell; count a typical
            // small image so that budgets stay honest.
            ContentBlock::Image { .. } => 1_000,
        }
    }

    /// Learns from a provider's reported prompt tokens for a request this counter estimated at
    /// `estimated`. Exact tokenizers ignore it.
    fn observe_usage(&self, estimated: usize, reported: usize) {
        let _ = (estimated, reported);
    }
}

/// An estimate from text length, corrected by the usage providers report.
///
/// Starts at 3.5 bytes per token (conservative for English and code with BPE vocabularies: it
/// overcounts rather than under). Each observation moves the ratio a fifth of the way to what the
/// provider reported, so a few requests calibrate it and one odd request cannot swing it.
#[derive(Debug)]
pub struct EstimateCounter {
    /// Bytes per token, stored as f64 bits.
    bytes_per_token: AtomicU64,
}

impl Default for EstimateCounter {
    fn default() -> Self {
        Self::with_ratio(3.5)
    }
}

impl EstimateCounter {
    /// An estimate with the given bytes-per-token ratio (clamped to 1.0..=8.0).
    pub fn with_ratio(bytes_per_token: f64) -> Self {
        Self {
            bytes_per_token: AtomicU64::new(bytes_per_token.clamp(1.0, 8.0).to_bits()),
        }
    }

    /// The current bytes-per-token ratio.
    pub fn ratio(&self) -> f64 {
        f64::from_bits(self.bytes_per_token.load(Ordering::Relaxed))
    }
}

impl TokenCounter for EstimateCounter {
    fn count_text(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        ((text.len() as f64) / self.ratio()).ceil() as usize
    }

    fn observe_usage(&self, estimated: usize, reported: usize) {
        if estimated == 0 || reported == 0 {
            return;
        }
        // The ratio that would have produced `reported` for this request.
        let implied = self.ratio() * (estimated as f64) / (reported as f64);
        let next = (self.ratio() + (implied - self.ratio()) * 0.2).clamp(1.0, 8.0);
        self.bytes_per_token
            .store(next.to_bits(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_and_calibrates_toward_reported_usage() {
        let c = EstimateCounter::default();
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text(&"a".repeat(35)), 10);
        // The provider keeps reporting half of what we estimate: the ratio moves toward 7.0.
        for _ in 0..30 {
            let estimated = c.count_text(&"a".repeat(7000));
            c.observe_usage(estimated, 1000);
        }
        assert!((c.ratio() - 7.0).abs() < 0.1, "{}", c.ratio());
        // Absurd reports are clamped.
        c.observe_usage(10, 1_000_000);
        assert!(c.ratio() >= 1.0);
        c.observe_usage(0, 5);
    }

    #[test]
    fn message_count_includes_framing_and_tool_blocks() {
        let c = EstimateCounter::with_ratio(1.0);
        let m = ContextMessage {
            batch_id: pattern_db::SnowflakeId(1),
            position: pattern_db::SnowflakeId(1),
            role: pattern_db::Role::Assistant,
            content: vec![
                ContentBlock::text("abcd"),
                ContentBlock::tool_use("i", "n", serde_json::json!({})),
            ],
        };
        assert_eq!(c.count_message(&m), MESSAGE_OVERHEAD + 4 + (1 + 1 + 2 + 4));
    }
}
