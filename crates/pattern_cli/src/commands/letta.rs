//! `pattern import --letta FILE.af [--rename NEW]`: a Letta agent file (the schema Letta 0.9 and
//! later export: top-level `agents`, `blocks`, `files`, `sources`, `tools`, `groups`,
//! `mcp_servers`, `metadata`) becomes a new Pattern agent: its system prompt as instructions, its
//! blocks as memory blocks, its messages as batches (by `pattern_db::legacy::plan`: tool calls
//! paired with their returns, or reported and kept as abandoned batches), its files' text as
//! archival passages; everything else (tools, tool rules, model settings, groups, MCP servers,
//! reasoning and image parts, approval messages) is listed as not carried over.
//!
//! This module must never guess at an unknown format (the single-agent format of older Letta
//! versions, or anything without `agents`, is a typed refusal naming what was found), and never
//! leave a half-imported agent: the agent row, its blocks, batches and passages are one
//! transaction (`Database::import_history_agent`), so a failure or a crash leaves nothing.

use std::collections::HashMap;

use pattern::Pattern;
use pattern::db::{
    BatchState, ContentBlock, HistoryImport, ImportBlock, ImportPassage, ImportVersion,
    LegacyMessage, NewAgent, Role,
};
use pattern::memory::ingest::{ChunkConfig, DocumentFormat, parse_document};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cli::ImportArgs;
use crate::env::Env;
use crate::error::{CliError, Kind, Result, io};
use crate::output;

/// The parts of Letta's `AgentFileSchema` this import reads (unknown fields are ignored).
#[derive(Deserialize)]
struct AgentFile {
    agents: Vec<LettaAgent>,
    #[serde(default)]
    blocks: Vec<LettaBlock>,
    #[serde(default)]
    files: Vec<LettaFile>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    groups: Vec<Value>,
    #[serde(default)]
    mcp_servers: Vec<Value>,
    #[serde(default)]
    metadata: HashMap<String, Value>,
}

#[derive(Deserialize)]
struct LettaAgent {
    name: String,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    block_ids: Vec<String>,
    #[serde(default)]
    messages: Vec<LettaMessage>,
    #[serde(default)]
    tool_ids: Vec<String>,
    #[serde(default)]
    tool_rules: Option<Vec<Value>>,
    #[serde(default)]
    llm_config: Option<Value>,
}

#[derive(Deserialize)]
struct LettaBlock {
    id: String,
    label: String,
    value: String,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
struct LettaFile {
    #[serde(default)]
    file_name: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct LettaMessage {
    #[serde(default)]
    id: Option<String>,
    role: String,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_calls: Option<Vec<LettaToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    created_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Deserialize)]
struct LettaToolCall {
    id: String,
    function: LettaFunction,
}

#[derive(Deserialize)]
struct LettaFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// `letta_import` shape.
#[derive(Serialize, Default)]
struct LettaReport {
    agent: String,
    agent_id: String,
    blocks: usize,
    messages: usize,
    batches: usize,
    complete: usize,
    abandoned: usize,
    archival: usize,
    /// Tool calls and returns that could not be paired (stored abandoned, never sent).
    anomalies: Vec<pattern::db::Anomaly>,
    /// What the file held that Pattern did not take, one line each.
    not_carried: Vec<String>,
}

pub(crate) async fn import(env: &Env, args: ImportArgs) -> Result<()> {
    let bytes = std::fs::read(&args.file).map_err(|e| io(&args.file, &e))?;
    let file = parse(&bytes, &args.file.display().to_string())?;
    let (pattern, _config) = env.open().await?;
    let result = store(&pattern, file, args.rename.clone()).await;
    pattern.close().await;
    let report = result?;
    for a in &report.anomalies {
        eprintln!(
            "not paired: {}",
            serde_json::to_string(a).unwrap_or_default()
        );
    }
    for n in &report.not_carried {
        eprintln!("not carried over: {n}");
    }
    if env.json {
        output::json(&report)
    } else {
        output::line(&format!(
            "imported Letta agent {} ({}): {} block(s), {} message(s) in {} batch(es) ({} \
             abandoned), {} archival passage(s); {} thing(s) not carried over",
            report.agent,
            report.agent_id,
            report.blocks,
            report.messages,
            report.batches,
            report.abandoned,
            report.archival,
            report.not_carried.len()
        ))
    }
}

/// Checks the file's shape before anything is written.
fn parse(bytes: &[u8], shown: &str) -> Result<AgentFile> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        CliError::new(
            Kind::Refused,
            format!("{shown} is not a Letta agent file (not JSON: {e})"),
        )
    })?;
    let Some(obj) = value.as_object() else {
        return Err(CliError::new(
            Kind::Refused,
            format!("{shown} is not a Letta agent file (not a JSON object)"),
        ));
    };
    if !obj.contains_key("agents") {
        let found = if obj.contains_key("core_memory") || obj.contains_key("agent_type") {
            format!(
                "the single-agent format of Letta before 0.9 (version {})",
                obj.get("version")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
            )
        } else {
            "no `agents` list".to_owned()
        };
        return Err(CliError::new(
            Kind::Refused,
            format!(
                "{shown}: unknown Letta agent file version: {found}; this import reads the \
                 format Letta 0.9 and later export (export the agent again from a current Letta)"
            ),
        ));
    }
    let file: AgentFile = serde_json::from_value(value).map_err(|e| {
        CliError::new(
            Kind::Refused,
            format!("{shown} does not match the Letta agent file schema: {e}"),
        )
    })?;
    if file.agents.len() != 1 {
        return Err(CliError::new(
            Kind::Refused,
            format!(
                "{shown} holds {} agents; this import takes a file of exactly one",
                file.agents.len()
            ),
        ));
    }
    Ok(file)
}

/// Letta labels may hold characters Pattern's labels do not: lower-cased, others become `_`.
fn label_of(label: &str) -> String {
    let mut out: String = label
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if out.is_empty() {
        out.push_str("block");
    }
    out
}

/// The text parts of a Letta message's content (a string, or a list of parts); other parts are
/// counted in `dropped`.
fn text_of(content: &Value, dropped: &mut HashMap<String, usize>) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for p in parts {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("text") | None, Some(t)) => texts.push(t.to_owned()),
                    (kind, _) => {
                        *dropped
                            .entry(format!("{} content part(s)", kind.unwrap_or("untyped")))
                            .or_insert(0) += 1;
                    }
                }
            }
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// Letta messages as Pattern's legacy messages, and what was not taken.
fn convert(messages: &[LettaMessage], not_carried: &mut Vec<String>) -> Vec<LegacyMessage> {
    let mut dropped: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for m in messages {
        let text = text_of(&m.content, &mut dropped);
        let (role, content) = match m.role.as_str() {
            "user" => (Role::User, vec![ContentBlock::text(text)]),
            "assistant" => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(ContentBlock::text(text));
                }
                for call in m.tool_calls.iter().flatten() {
                    let input = serde_json::from_str(&call.function.arguments)
                        .unwrap_or_else(|_| json!({ "arguments": call.function.arguments }));
                    blocks.push(ContentBlock::tool_use(
                        call.id.clone(),
                        call.function.name.clone(),
                        input,
                    ));
                }
                if blocks.is_empty() {
                    *dropped
                        .entry("empty assistant message(s)".to_owned())
                        .or_insert(0) += 1;
                    continue;
                }
                (Role::Assistant, blocks)
            }
            "tool" => match &m.tool_call_id {
                Some(id) => (
                    Role::Tool,
                    vec![ContentBlock::tool_result(id.clone(), text, false)],
                ),
                None => {
                    not_carried.push(format!(
                        "tool message {} without a tool_call_id",
                        m.id.as_deref().unwrap_or("?")
                    ));
                    continue;
                }
            },
            "system" => {
                *dropped
                    .entry(
                        "system message(s) (the system prompt is the agent's instructions)"
                            .to_owned(),
                    )
                    .or_insert(0) += 1;
                continue;
            }
            other => {
                *dropped.entry(format!("`{other}` message(s)")).or_insert(0) += 1;
                continue;
            }
        };
        out.push(LegacyMessage {
            role,
            content,
            created_at: m.created_at,
            origin: None,
        });
    }
    let mut dropped: Vec<String> = dropped
        .into_iter()
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
    dropped.sort();
    not_carried.extend(dropped);
    out
}

async fn store(pattern: &Pattern, file: AgentFile, rename: Option<String>) -> Result<LettaReport> {
    let AgentFile {
        mut agents,
        blocks,
        files,
        tools,
        groups,
        mcp_servers,
        metadata,
    } = file;
    let Some(letta) = agents.pop() else {
        return Err(CliError::other("no agent in the file"));
    };
    let mut report = LettaReport {
        agent: rename.unwrap_or_else(|| letta.name.clone()),
        ..LettaReport::default()
    };
    for (what, n) in [
        ("tool(s)", tools.len().max(letta.tool_ids.len())),
        ("group(s)", groups.len()),
        ("MCP server(s)", mcp_servers.len()),
        (
            "tool rule(s)",
            letta.tool_rules.as_ref().map_or(0, Vec::len),
        ),
    ] {
        if n > 0 {
            report.not_carried.push(format!("{n} {what}"));
        }
    }
    if letta.llm_config.is_some() {
        report
            .not_carried
            .push("the model settings (llm_config): set one with `pattern agent set-model`".into());
    }
    if let Some(revision) = metadata.get("revision_id") {
        tracing::info!(%revision, "Letta agent file revision");
    }
    let messages = convert(&letta.messages, &mut report.not_carried);
    report.messages = messages.len();
    let by_id: HashMap<&str, &LettaBlock> = blocks.iter().map(|b| (b.id.as_str(), b)).collect();
    let mut new = NewAgent::named(report.agent.clone());
    if let Some(system) = &letta.system {
        new.metadata = json!({ "instructions": system });
    }
    let org = crate::env::organization(pattern).await?;
    let blocks = import_blocks(&letta, &by_id, &mut report);
    let archival = passages(&files, &mut report)?;
    // One transaction: a failure or a crash leaves no part of the agent.
    let (imported, plan) = pattern
        .db()
        .import_history_agent(HistoryImport {
            agent: new.in_organization(org),
            blocks,
            messages,
            archival,
        })
        .await?;
    report.agent_id = imported.agent.id.to_string();
    report.batches = plan.batches.len();
    report.complete = plan
        .batches
        .iter()
        .filter(|b| b.state == BatchState::Complete)
        .count();
    report.abandoned = plan
        .batches
        .iter()
        .filter(|b| b.state == BatchState::Abandoned)
        .count();
    report.anomalies = plan.anomalies;
    Ok(report)
}

/// The agent's blocks (those it names and the file holds), labels made unique.
fn import_blocks(
    letta: &LettaAgent,
    blocks: &HashMap<&str, &LettaBlock>,
    report: &mut LettaReport,
) -> Vec<ImportBlock> {
    let mut labels = std::collections::HashSet::new();
    let mut out = Vec::new();
    for id in &letta.block_ids {
        let Some(b) = blocks.get(id.as_str()) else {
            report.not_carried.push(format!(
                "block {id}: named by the agent but not in the file"
            ));
            continue;
        };
        let mut label = label_of(&b.label);
        while !labels.insert(label.clone()) {
            label.push('_');
        }
        let chars = b.value.chars().count();
        let limit = usize::try_from(b.limit.unwrap_or(5000).max(1))
            .unwrap_or(5000)
            .max(chars)
            .min(1_000_000);
        out.push(ImportBlock {
            label,
            char_limit: i64::try_from(limit).unwrap_or(1_000_000),
            block_type: "core".into(),
            versions: vec![ImportVersion {
                value: b.value.clone(),
                description: b.description.clone().unwrap_or_default(),
                change: "create".into(),
            }],
        });
    }
    report.blocks = out.len();
    out
}

/// The text of the agent's files as archival passages.
fn passages(files: &[LettaFile], report: &mut LettaReport) -> Result<Vec<ImportPassage>> {
    let now = chrono::Utc::now();
    let mut out = Vec::new();
    for f in files {
        let name = f.file_name.clone().unwrap_or_else(|| "file".to_owned());
        let Some(content) = f.content.as_deref().filter(|c| !c.trim().is_empty()) else {
            report
                .not_carried
                .push(format!("file {name}: no text content in the agent file"));
            continue;
        };
        let doc = parse_document(
            content.as_bytes(),
            DocumentFormat::Text,
            &name,
            &name,
            &ChunkConfig::default(),
        )?;
        out.extend(
            doc.to_archival(&["letta".to_owned()])
                .into_iter()
                .map(|passage| ImportPassage {
                    passage,
                    created_at: now,
                }),
        );
    }
    report.archival = out.len();
    Ok(out)
}
