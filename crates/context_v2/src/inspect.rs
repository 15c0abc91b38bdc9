//! Batch inspection for debugging: one batch, or an agent's last batches, as readable text and as
//! JSON (the CLI's `pattern batches show` prints these).
//!
//! Read-only rendering of stored data; it must never hide a message (abandoned and archived
//! batches are shown, marked), and the JSON shape is stable: fields are only ever added.

use pattern_db::{ContentBlock, StoredBatch};
use serde_json::{Value, json};

fn short(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn block_line(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text { text } => short(text, 120),
        ContentBlock::Thinking { text, .. } => format!("(thinking) {}", short(text, 100)),
        ContentBlock::ToolUse {
            id, name, input, ..
        } => {
            format!("call {name}({}) [{id}]", short(&input.to_string(), 80))
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            format!(
                "{} for [{tool_use_id}]: {}",
                if *is_error { "error" } else { "result" },
                short(content, 100)
            )
        }
        ContentBlock::Image {
            media_type,
            reference,
        } => format!("(image {media_type}) {reference}"),
    }
}

/// One batch as readable text: a header line, then one line per block.
pub fn batch_text(batch: &StoredBatch) -> String {
    let info = &batch.info;
    let mut out = format!(
        "batch {} {:?} {}{} — {} messages, started {}",
        info.id,
        info.batch_type,
        info.state,
        if info.archived { " (archived)" } else { "" },
        batch.messages.len(),
        info.started_at.format("%Y-%m-%d %H:%M:%S%.3f"),
    );
    if let Some(done) = info.completed_at {
        out.push_str(&format!(
            ", ended after {} ms",
            (done - info.started_at).num_milliseconds()
        ));
    }
    let pending = batch.pending_tool_calls();
    if !pending.is_empty() {
        out.push_str(&format!(", waiting for {}", pending.join(", ")));
    }
    out.push('\n');
    for m in &batch.messages {
        for (i, block) in m.content.iter().enumerate() {
            let who = if i == 0 { m.role.as_str() } else { "" };
            out.push_str(&format!(
                "  {:>3} {who:<9} {}\n",
                if i == 0 {
                    m.sequence_num.to_string()
                } else {
                    String::new()
                },
                block_line(block)
            ));
        }
    }
    out
}

/// Several batches as text, oldest first, separated by blank lines.
pub fn batches_text(batches: &[StoredBatch]) -> String {
    batches
        .iter()
        .map(batch_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One batch as JSON: its row, its messages, and its tool pairs (call, result position or null).
pub fn batch_json(batch: &StoredBatch) -> Value {
    let mut pairs = Vec::new();
    for m in &batch.messages {
        for id in m.tool_use_ids() {
            let result = batch
                .messages
                .iter()
                .find(|r| r.tool_result_ids().any(|rid| rid == id))
                .map(|r| r.sequence_num);
            pairs.push(
                json!({ "tool_use_id": id, "call_seq": m.sequence_num, "result_seq": result }),
            );
        }
    }
    json!({
        "batch": batch.info,
        "messages": batch.messages,
        "tool_pairs": pairs,
        "pending_tool_calls": batch.pending_tool_calls(),
    })
}

/// Several batches as a JSON array, oldest first.
pub fn batches_json(batches: &[StoredBatch]) -> Value {
    Value::Array(batches.iter().map(batch_json).collect())
}
