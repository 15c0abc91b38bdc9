//! `pattern import --legacy FILE --agent NAME`: a batch-less message history (one JSON message a
//! line, as `pattern_db::LegacyMessage`) split into batches by `pattern_db::legacy::plan` (the
//! rules of docs/batching.md) and appended to an agent's history in one transaction, with a
//! report of what could not be paired (orphan results, repeated call ids, unfinished batches,
//! all stored as abandoned batches).
//!
//! This module must never store part of a file: a line that does not parse refuses the whole
//! import (a missing line would move tool results to the wrong batch), with every bad line named.

use pattern::db::{BatchState, LegacyMessage};
use serde::Serialize;

use crate::cli::ImportArgs;
use crate::env::{Env, agent_named};
use crate::error::{CliError, Kind, Result, io};
use crate::output;

/// `legacy_import` shape.
#[derive(Serialize)]
struct LegacyReport {
    agent: String,
    messages: usize,
    batches: usize,
    complete: usize,
    abandoned: usize,
    /// What could not be paired or finished, as the planner found it.
    anomalies: Vec<pattern::db::Anomaly>,
}

pub(crate) async fn import(env: &Env, args: ImportArgs) -> Result<()> {
    let name = args
        .agent
        .clone()
        .ok_or_else(|| CliError::usage("--legacy needs --agent NAME"))?;
    let bytes = std::fs::read(&args.file).map_err(|e| io(&args.file, &e))?;
    let mut messages = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<LegacyMessage>(line) {
            Ok(m) => messages.push(m),
            Err(e) => bad.push(format!("{}:{}: {e}", args.file.display(), i + 1)),
        }
    }
    if !bad.is_empty() {
        // One line of error, naming the first bad lines.
        let shown: Vec<&str> = bad.iter().take(5).map(String::as_str).collect();
        return Err(CliError::new(
            Kind::Refused,
            format!(
                "{} bad line(s), nothing imported (a history is imported whole): {}{}",
                bad.len(),
                shown.join("; "),
                if bad.len() > shown.len() { "; ..." } else { "" }
            ),
        ));
    }
    let (pattern, _config) = env.open().await?;
    let result = async {
        let agent = agent_named(&pattern, &name).await?;
        let count = messages.len();
        let plan = pattern
            .db()
            .messages(agent.id)
            .import_legacy(messages)
            .await?;
        Ok::<_, CliError>(LegacyReport {
            agent: agent.name,
            messages: count,
            batches: plan.batches.len(),
            complete: plan
                .batches
                .iter()
                .filter(|b| b.state == BatchState::Complete)
                .count(),
            abandoned: plan
                .batches
                .iter()
                .filter(|b| b.state == BatchState::Abandoned)
                .count(),
            anomalies: plan.anomalies,
        })
    }
    .await;
    pattern.close().await;
    let report = result?;
    for a in &report.anomalies {
        eprintln!(
            "not paired: {}",
            serde_json::to_string(a).unwrap_or_default()
        );
    }
    if env.json {
        output::json(&report)
    } else {
        output::line(&format!(
            "{}: {} message(s) in {} batch(es): {} complete, {} abandoned ({} anomal{} reported)",
            report.agent,
            report.messages,
            report.batches,
            report.complete,
            report.abandoned,
            report.anomalies.len(),
            if report.anomalies.len() == 1 {
                "y"
            } else {
                "ies"
            }
        ))
    }
}
