//! `pattern archival insert|list|delete|search|import`: an agent's archival memory through
//! `db_v2::ConstellationDb` (passages are embedded when embeddings are available). Import reads
//! JSON Lines, reports each bad line with its number on stderr, imports the good ones and is
//! idempotent (every passage gets a dedupe key: the given `key`, else the sha256 of its text).
//! This module must never drop a good line because of a bad one, nor report a line imported
//! that was not stored.

use std::path::Path;

use chrono::{DateTime, Utc};
use db_v2::{SearchMode, SearchOptions};
use pattern::db::{ArchivalId, ContentType, ListArchival, NewArchival};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::cli::{AgentArg, ArchivalCommand};
use crate::env::Env;
use crate::error::{CliError, Kind, Result, io};
use crate::output;
use crate::search_db::{SearchDb, Vectors, from_db_v2};

/// Passages stored per transaction while importing.
const IMPORT_CHUNK: usize = 256;

use pattern_server::views::ArchivalView;

/// `archival_hit` shape.
#[derive(Serialize)]
struct HitView {
    id: String,
    score: f32,
    text: String,
    created_at: DateTime<Utc>,
}

/// `archival_import` shape.
#[derive(Serialize)]
struct ImportReport {
    imported: usize,
    skipped: usize,
    bad: Vec<BadLine>,
}

#[derive(Serialize)]
struct BadLine {
    line: usize,
    error: String,
}

/// One line of an import file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportLine {
    text: String,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    key: Option<String>,
}

pub(crate) async fn run(env: &Env, command: ArchivalCommand) -> Result<()> {
    let vectors = match &command {
        ArchivalCommand::List { .. } | ArchivalCommand::Delete { .. } => Vectors::Off,
        _ => Vectors::IfAvailable,
    };
    let db = SearchDb::open(env, vectors).await?;
    let result = act(env, &db, command).await;
    db.close().await;
    result
}

fn agent_of(command: &ArchivalCommand) -> &AgentArg {
    match command {
        ArchivalCommand::Insert { agent, .. }
        | ArchivalCommand::List { agent, .. }
        | ArchivalCommand::Delete { agent, .. }
        | ArchivalCommand::Search { agent, .. }
        | ArchivalCommand::Import { agent, .. } => agent,
    }
}

async fn act(env: &Env, db: &SearchDb, command: ArchivalCommand) -> Result<()> {
    let agent = db.agent(agent_of(&command)).await?;
    match command {
        ArchivalCommand::Insert {
            text, tags, key, ..
        } => {
            let entry = db
                .db
                .insert_archival(
                    agent.id,
                    NewArchival {
                        content: text,
                        metadata: Value::Null,
                        tags,
                        dedupe_key: key,
                    },
                )
                .await
                .map_err(from_db_v2)?;
            if env.json {
                output::json(&ArchivalView::from(&entry))
            } else {
                output::line(&format!("archival {}", entry.id))
            }
        }
        ArchivalCommand::List { tag, limit, .. } => {
            let entries = db
                .db
                .list_archival(
                    agent.id,
                    ListArchival {
                        limit,
                        before: None,
                        tag,
                    },
                )
                .await
                .map_err(from_db_v2)?;
            let views: Vec<ArchivalView> = entries.iter().map(ArchivalView::from).collect();
            if env.json {
                return output::json(&views);
            }
            if views.is_empty() {
                return output::line("no passages");
            }
            for v in &views {
                let tags = if v.tags.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", v.tags.join(", "))
                };
                output::line(&format!("{}{tags}: {}", v.id, one_line(&v.content)))?;
            }
            Ok(())
        }
        ArchivalCommand::Delete { id, .. } => {
            let parsed = id
                .parse::<uuid::Uuid>()
                .map(ArchivalId)
                .map_err(|_| CliError::usage(format!("`{id}` is not a passage id (a UUID)")))?;
            if !db
                .db
                .delete_archival(agent.id, parsed)
                .await
                .map_err(from_db_v2)?
            {
                return Err(CliError::not_found(format!(
                    "no archival passage {id} for agent `{}`",
                    agent.name
                )));
            }
            if env.json {
                output::json(&serde_json::json!({ "deleted": id }))
            } else {
                output::line(&format!("deleted {id}"))
            }
        }
        ArchivalCommand::Search { query, limit, .. } => {
            let opts = SearchOptions::mode(SearchMode::Auto)
                .with_limit(limit)
                .for_agent(agent.id)
                .only(&[ContentType::Archival]);
            if !db.has_vectors() {
                eprintln!("note: searching full-text only (no embeddings)");
            }
            let hits = db.db.search(&query, &opts).await.map_err(from_db_v2)?;
            let views: Vec<HitView> = hits
                .iter()
                .map(|h| HitView {
                    id: h.content.id.clone(),
                    score: h.score,
                    text: h.text.clone(),
                    created_at: h.created_at,
                })
                .collect();
            if env.json {
                return output::json(&views);
            }
            if views.is_empty() {
                return output::line("no hits");
            }
            for v in &views {
                output::line(&format!("{:.3} {}: {}", v.score, v.id, one_line(&v.text)))?;
            }
            Ok(())
        }
        ArchivalCommand::Import { jsonl, .. } => import(env, db, agent.id, &jsonl).await,
    }
}

/// Parses one line into a passage with its dedupe key.
fn parse_line(text: &str) -> std::result::Result<NewArchival, String> {
    let line: ImportLine = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if line.text.is_empty() {
        return Err("`text` is empty".to_owned());
    }
    let key = match line.key {
        Some(k) => k,
        None => format!("sha256:{:x}", Sha256::digest(line.text.as_bytes())),
    };
    Ok(NewArchival {
        content: line.text,
        metadata: line.metadata,
        tags: line.tags,
        dedupe_key: Some(key),
    })
}

/// The non-blank lines of `bytes`, numbered from 1, each as text or, when it is not UTF-8, the
/// cause (so one bad byte costs its line, not the file). `\n` ends a line, and a `\r` before it
/// is dropped.
fn numbered_lines(bytes: &[u8]) -> Vec<(usize, std::result::Result<&str, String>)> {
    bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let text = std::str::from_utf8(line)
                .map_err(|e| format!("not UTF-8: invalid byte at column {}", e.valid_up_to() + 1));
            (i + 1, text)
        })
        .filter(|(_, text)| text.as_ref().map_or(true, |t| !t.trim().is_empty()))
        .collect()
}

async fn import(env: &Env, db: &SearchDb, agent: pattern::db::AgentId, file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).map_err(|e| io(file, &e))?;
    let lines = numbered_lines(&bytes);
    let bar = crate::commands::progress(lines.len() as u64, "archival");
    let mut report = ImportReport {
        imported: 0,
        skipped: 0,
        bad: Vec::new(),
    };
    let mut chunk: Vec<(usize, NewArchival)> = Vec::with_capacity(IMPORT_CHUNK);
    for (number, line) in &lines {
        match line.clone().and_then(parse_line) {
            Ok(new) => chunk.push((*number, new)),
            Err(error) => report.bad.push(BadLine {
                line: *number,
                error,
            }),
        }
        if chunk.len() == IMPORT_CHUNK {
            store(db, agent, &mut chunk, &mut report).await?;
        }
        bar.inc(1);
    }
    store(db, agent, &mut chunk, &mut report).await?;
    bar.finish_and_clear();
    report.bad.sort_by_key(|b| b.line);
    for b in &report.bad {
        eprintln!("{}:{}: {}", file.display(), b.line, b.error);
    }
    if env.json {
        output::json(&report)?;
    } else {
        output::line(&format!(
            "imported {}, skipped {} (already stored), bad {}",
            report.imported,
            report.skipped,
            report.bad.len()
        ))?;
    }
    if report.bad.is_empty() {
        Ok(())
    } else {
        // The report is printed; the exit code says some lines were refused.
        Err(CliError::new(
            Kind::Refused,
            format!("{} bad line(s) in {}", report.bad.len(), file.display()),
        ))
    }
}

/// Stores a chunk in one transaction; a chunk the database refuses is stored line by line so
/// only the refused lines are reported bad.
async fn store(
    db: &SearchDb,
    agent: pattern::db::AgentId,
    chunk: &mut Vec<(usize, NewArchival)>,
    report: &mut ImportReport,
) -> Result<()> {
    if chunk.is_empty() {
        return Ok(());
    }
    let items = std::mem::take(chunk);
    let before = db.db.count_archival(agent).await.map_err(from_db_v2)?;
    let news: Vec<NewArchival> = items.iter().map(|(_, n)| n.clone()).collect();
    match db.db.insert_archival_many(agent, news).await {
        Ok(_) => {
            let after = db.db.count_archival(agent).await.map_err(from_db_v2)?;
            let added = usize::try_from(after.saturating_sub(before)).unwrap_or(usize::MAX);
            report.imported += added;
            report.skipped += items.len().saturating_sub(added);
            Ok(())
        }
        Err(db_v2::Error::Db(e)) if is_refusal(&e) => {
            for (number, new) in items {
                let before = db.db.count_archival(agent).await.map_err(from_db_v2)?;
                match db.db.insert_archival(agent, new).await {
                    Ok(_) => {
                        let after = db.db.count_archival(agent).await.map_err(from_db_v2)?;
                        if after > before {
                            report.imported += 1;
                        } else {
                            report.skipped += 1;
                        }
                    }
                    Err(db_v2::Error::Db(e)) if is_refusal(&e) => report.bad.push(BadLine {
                        line: number,
                        error: e.to_string(),
                    }),
                    Err(e) => return Err(from_db_v2(e)),
                }
            }
            Ok(())
        }
        Err(e) => Err(from_db_v2(e)),
    }
}

/// Whether the database refused the data itself (not a failure of the database).
fn is_refusal(e: &pattern::db::Error) -> bool {
    matches!(
        e.class(),
        pattern::ErrorClass::Invalid | pattern::ErrorClass::Refused | pattern::ErrorClass::Conflict
    )
}

/// The first line of `text`, marked when there was more.
fn one_line(text: &str) -> String {
    match text.split_once('\n') {
        Some((first, _)) => format!("{first} ..."),
        None => text.to_owned(),
    }
}
