//! `pattern batches list|show`: batch inspection (state, type, messages, tool pairs, timings).
//! Read-only: this module must never change a batch.

use pattern::SnowflakeId;

use crate::cli::BatchesCommand;
use crate::env::{Env, agent};
use crate::error::{CliError, Result};
use crate::output::{self, BatchDetail, BatchView};

pub(crate) async fn run(env: &Env, command: BatchesCommand) -> Result<()> {
    let (pattern, config) = env.open().await?;
    let result = async {
        match command {
            BatchesCommand::List { agent: arg, limit } => {
                let a = agent(&pattern, &config, &arg).await?;
                let batches = pattern.messages(a.id).list_batches(None, limit).await?;
                if env.json {
                    let views: Vec<BatchView> = batches.iter().map(BatchView::from).collect();
                    return output::json(&views);
                }
                if batches.is_empty() {
                    return output::line(&format!("agent {} has no batches", a.name));
                }
                for b in batches.iter().map(BatchView::from) {
                    output::line(&format!(
                        "{:<20} {:<10} {:<15} {:>4} msgs  {}  {}",
                        b.id,
                        b.state,
                        b.batch_type,
                        b.message_count,
                        b.started_at.format("%Y-%m-%d %H:%M:%S"),
                        b.duration_ms
                            .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"))
                    ))?;
                }
                Ok(())
            }
            BatchesCommand::Show { id, agent: arg } => {
                let a = agent(&pattern, &config, &arg).await?;
                let batch_id: SnowflakeId = id.parse().map_err(|_| {
                    CliError::usage(format!("`{id}` is not a batch id (a decimal number)"))
                })?;
                let batch = pattern.messages(a.id).get_batch(batch_id).await?;
                let detail = BatchDetail::from(&batch);
                if env.json {
                    return output::json(&detail);
                }
                let b = &detail.batch;
                let mut text = format!(
                    "batch {} ({}, {})\n  messages: {}\n  started:  {}\n  finished: {}",
                    b.id,
                    b.state,
                    b.batch_type,
                    b.message_count,
                    b.started_at,
                    b.completed_at
                        .map_or_else(|| "-".to_owned(), |t| t.to_string())
                );
                if let Some(ms) = b.duration_ms {
                    text.push_str(&format!(" ({ms} ms)"));
                }
                for m in &detail.messages {
                    text.push_str(&format!(
                        "\n  #{:<3} {:<9} {}",
                        m.sequence_num,
                        m.role,
                        output::preview(&m.text, 90)
                    ));
                }
                for p in &detail.tool_pairs {
                    text.push_str(&format!(
                        "\n  tool {} `{}`: call #{} -> {}",
                        p.tool_use_id,
                        p.name,
                        p.call_sequence,
                        p.result_sequence.map_or_else(
                            || "no result".to_owned(),
                            |s| format!(
                                "result #{s}{}",
                                if p.is_error == Some(true) {
                                    " (error)"
                                } else {
                                    ""
                                }
                            )
                        )
                    ));
                }
                output::line(&text)
            }
        }
    }
    .await;
    pattern.close().await;
    result
}
