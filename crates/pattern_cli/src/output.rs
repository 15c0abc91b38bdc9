//! What commands print: the stable JSON shapes (documented in `docs/cli.md`; defined in
//! `pattern_api::views`, shared with the HTTP API), and the helpers that print them as JSON
//! or as text.
//!
//! The shapes here are a public contract: a field may be added, never renamed or removed
//! without a documented change. This module must never read or write the database.

use std::io::Write;

use serde::Serialize;

use crate::error::{CliError, Result};

/// Prints `value` as one pretty JSON document on stdout.
pub(crate) fn json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    line(&text)
}

/// Prints one line on stdout; a closed pipe is not an error worth more than exit 1.
pub(crate) fn line(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| CliError::other(format!("stdout: {e}")))
}

/// The JSON shapes, shared with the HTTP API (one definition for both front doors).
pub(crate) use pattern_api::views::{
    AgentView, ApprovalView, BatchDetail, BatchView, BlockView, MessageView, VersionView,
};

/// Shortens `text` to one line of at most `max` characters for tables (display only).
pub(crate) fn preview(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
