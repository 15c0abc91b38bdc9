//! `pattern archival insert|list|delete|search|import`: an agent's archival memory through
//! `pattern::search::ConstellationDb` (passages are embedded when embeddings are available). Import takes
//! documents (Markdown, text, HTML, PDF: `memory_v2::ingest`, each stored whole in one
//! transaction or reported not imported) and JSON Lines (each bad line reported with its number
//! on stderr, the good ones imported). It is idempotent (every passage gets a dedupe key: a
//! document's sha256 and the passage's position; a line's given `key`, else the sha256 of its
//! text and, for a repeated text, its occurrence), reports what it skipped and what repeated, and
//! waits for the embeddings with a progress bar (or, with `--no-wait`, says how many are pending
//! and how to finish). This module must never drop a good line because of a bad one, never store
//! part of a document, and never report a passage imported that was not stored.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use pattern::db::{ArchivalId, ContentType, ListArchival, NewArchival};
use pattern::memory::ingest::IngestConfig;
use pattern::search::{SearchMode, SearchOptions};
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

use pattern_api::views::ArchivalView;

/// `archival_hit` shape.
#[derive(Serialize)]
struct HitView {
    id: String,
    score: f32,
    text: String,
    created_at: DateTime<Utc>,
}

/// `archival_import` shape.
#[derive(Serialize, Default)]
struct ImportReport {
    /// Passages stored by this run.
    imported: usize,
    /// Passages already stored (same dedupe key): a re-run skips everything it stored before.
    skipped: usize,
    /// JSON Lines whose text an earlier line of the same file had: stored as passages of their
    /// own (keyed by text and occurrence), counted here so nothing repeated goes unsaid.
    repeated: usize,
    /// JSON Lines refused, with their numbers.
    bad: Vec<BadLine>,
    /// Documents imported (each stored whole in one transaction).
    documents: Vec<DocumentReport>,
    /// Files not imported at all, with why.
    failed: Vec<FailedFile>,
    /// What happened to the embeddings of what was stored.
    embeddings: EmbeddingsView,
}

#[derive(Serialize)]
struct BadLine {
    file: String,
    line: usize,
    error: String,
}

#[derive(Serialize)]
struct DocumentReport {
    path: String,
    format: &'static str,
    title: String,
    passages: usize,
    imported: usize,
    skipped: usize,
}

#[derive(Serialize)]
struct FailedFile {
    path: String,
    error: String,
    #[serde(skip)]
    kind: Kind,
}

#[derive(Serialize, Default)]
struct EmbeddingsView {
    /// Whether embeddings are on in this run.
    enabled: bool,
    /// Whether the import waited for them.
    waited: bool,
    /// Vectors this command stored (while importing and while waiting).
    embedded: u64,
    /// Embedding jobs still waiting in the database (all agents) when the import ended.
    pending: u64,
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
    let wait = !matches!(command, ArchivalCommand::Import { no_wait: true, .. });
    let db = SearchDb::open(env, vectors).await?;
    let result = act(env, &db, command).await;
    if wait {
        db.close().await;
    } else {
        // Said how many are pending and how to finish: do not embed on the way out.
        db.close_within(std::time::Duration::ZERO).await;
    }
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
        ArchivalCommand::Search {
            query,
            limit,
            since,
            until,
            no_dates,
            ..
        } => {
            if let (Some(from), Some(to)) = (since, until)
                && from >= to
            {
                return Err(CliError::usage(format!(
                    "--since {from} is not before --until {to}"
                )));
            }
            let opts = SearchOptions::mode(SearchMode::Auto)
                .with_limit(limit)
                .for_agent(agent.id)
                .only(&[ContentType::Archival])
                .between(since, until)
                .reading_dates(!no_dates);
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
        ArchivalCommand::Import {
            paths,
            jsonl,
            tags,
            no_wait,
            ..
        } => {
            let mut inputs = paths;
            inputs.extend(jsonl);
            import(env, db, agent.id, &inputs, &tags, no_wait).await
        }
    }
}

/// Parses one line into a passage with its dedupe key: the given `key`, else the text's sha256
/// and, from its second occurrence in the file on, the occurrence (`sha256:HEX#2`), so repeated
/// identical lines are all stored and a re-run of the same file stores nothing new. The second
/// value says whether the text repeats an earlier line's.
fn parse_line(
    text: &str,
    seen: &mut std::collections::HashMap<String, usize>,
) -> std::result::Result<(NewArchival, bool), String> {
    let line: ImportLine = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if line.text.is_empty() {
        return Err("`text` is empty".to_owned());
    }
    let digest = format!("sha256:{:x}", Sha256::digest(line.text.as_bytes()));
    let count = seen.entry(digest.clone()).or_insert(0);
    *count += 1;
    let repeated = *count > 1;
    let key = match line.key {
        Some(k) => k,
        None if repeated => format!("{digest}#{count}"),
        None => digest,
    };
    let new = NewArchival {
        content: line.text,
        metadata: line.metadata,
        tags: line.tags,
        dedupe_key: Some(key),
    };
    // A malformed `occurred_at` costs its line, not the file's batch.
    new.occurred_at().map_err(|e| e.to_string())?;
    Ok((new, repeated))
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

async fn import(
    env: &Env,
    db: &SearchDb,
    agent: pattern::db::AgentId,
    inputs: &[PathBuf],
    tags: &[String],
    no_wait: bool,
) -> Result<()> {
    let mut report = ImportReport::default();
    for input in inputs {
        let is_jsonl = input
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"));
        if is_jsonl {
            import_jsonl(db, agent, input, &mut report).await?;
        } else {
            import_document(db, agent, input, tags, &mut report).await?;
        }
    }
    if let [only] = report.failed.as_slice()
        && report.documents.is_empty()
        && report.bad.is_empty()
        && report.imported + report.skipped == 0
    {
        // Nothing but one file that failed: its error (with its class) is the whole answer.
        return Err(CliError::new(only.kind, only.error.clone()));
    }
    report.embeddings = embeddings(db, no_wait).await?;
    for b in &report.bad {
        eprintln!("{}:{}: {}", b.file, b.line, b.error);
    }
    for f in &report.failed {
        eprintln!("not imported: {}", f.error);
    }
    if env.json {
        output::json(&report)?;
    } else {
        for d in &report.documents {
            output::line(&format!(
                "{}: {} passage(s) ({} new, {} already stored) \"{}\"",
                d.path, d.passages, d.imported, d.skipped, d.title
            ))?;
        }
        let repeated = if report.repeated > 0 {
            format!(
                ", {} repeated line(s) stored as their own passages",
                report.repeated
            )
        } else {
            String::new()
        };
        output::line(&format!(
            "imported {}, skipped {} (already stored){repeated}, bad {}, failed files {}",
            report.imported,
            report.skipped,
            report.bad.len(),
            report.failed.len()
        ))?;
    }
    let e = &report.embeddings;
    if e.enabled && e.pending > 0 {
        eprintln!(
            "{} embedding job(s) still pending: run `pattern embed --backfill` to finish them \
             (search finds the passages by full text meanwhile)",
            e.pending
        );
    }
    if let [only] = report.failed.as_slice()
        && report.bad.is_empty()
    {
        return Err(CliError::new(only.kind, only.error.clone()));
    }
    if report.bad.is_empty() && report.failed.is_empty() {
        Ok(())
    } else {
        // The report is printed; the exit code says some input was refused.
        Err(CliError::new(
            Kind::Refused,
            format!(
                "{} bad line(s), {} file(s) not imported",
                report.bad.len(),
                report.failed.len()
            ),
        ))
    }
}

/// Waits for the embeddings of everything pending (with a progress bar), unless `no_wait`.
async fn embeddings(db: &SearchDb, no_wait: bool) -> Result<EmbeddingsView> {
    if !db.has_vectors() {
        return Ok(EmbeddingsView::default());
    }
    let mut view = EmbeddingsView {
        enabled: true,
        ..EmbeddingsView::default()
    };
    if no_wait {
        view.pending = db.raw().pending_embedding_jobs().await?;
        view.embedded = db.db.status().await.map_or(0, |s| s.embedded);
        return Ok(view);
    }
    let bar = crate::commands::progress(0, "embedding");
    let mut progress = |p: pattern::search::Progress| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    };
    let run = db.db.embed_pending(&mut progress).await;
    bar.finish_and_clear();
    match run {
        Ok(run) => {
            view.waited = true;
            // Everything this command's process embedded (its worker starts while the import
            // writes), not only what was left when the wait began.
            view.embedded = db
                .db
                .status()
                .await
                .map_or(run.embedded, |s| s.embedded.max(run.embedded));
            view.pending = run.pending;
            Ok(view)
        }
        Err(e) => {
            let pending = db.raw().pending_embedding_jobs().await.unwrap_or(0);
            Err(CliError::other(format!(
                "the passages are stored, but embedding failed ({e}); {pending} job(s) pending: \
                 run `pattern embed --backfill` to finish"
            )))
        }
    }
}

/// Imports one document whole (one transaction) or records why not.
async fn import_document(
    db: &SearchDb,
    agent: pattern::db::AgentId,
    path: &Path,
    tags: &[String],
    report: &mut ImportReport,
) -> Result<()> {
    let owned = path.to_owned();
    let parsed = tokio::task::spawn_blocking(move || {
        pattern::memory::ingest::read_document(&owned, &IngestConfig::default())
    })
    .await
    .map_err(|e| CliError::other(format!("reading {}: {e}", path.display())))?;
    let doc = match parsed {
        Ok(doc) => doc,
        Err(e) => {
            report.failed.push(FailedFile {
                path: path.display().to_string(),
                kind: crate::error::class_kind(e.class()),
                error: e.to_string(),
            });
            return Ok(());
        }
    };
    let entries = doc.to_archival(tags);
    let before = db.db.count_archival(agent).await.map_err(from_db_v2)?;
    db.db
        .insert_archival_many(agent, entries)
        .await
        .map_err(from_db_v2)?;
    let after = db.db.count_archival(agent).await.map_err(from_db_v2)?;
    let imported = usize::try_from(after.saturating_sub(before)).unwrap_or(usize::MAX);
    let skipped = doc.passages.len().saturating_sub(imported);
    report.imported += imported;
    report.skipped += skipped;
    report.documents.push(DocumentReport {
        path: doc.path.clone(),
        format: doc.format.as_str(),
        title: doc.title.clone(),
        passages: doc.passages.len(),
        imported,
        skipped,
    });
    Ok(())
}

async fn import_jsonl(
    db: &SearchDb,
    agent: pattern::db::AgentId,
    file: &Path,
    report: &mut ImportReport,
) -> Result<()> {
    let bytes = std::fs::read(file).map_err(|e| io(file, &e))?;
    let lines = numbered_lines(&bytes);
    let bar = crate::commands::progress(lines.len() as u64, "archival");
    let shown = file.display().to_string();
    let mut seen = std::collections::HashMap::new();
    let mut chunk: Vec<(usize, NewArchival)> = Vec::with_capacity(IMPORT_CHUNK);
    for (number, line) in &lines {
        match line.clone().and_then(|l| parse_line(l, &mut seen)) {
            Ok((new, repeated)) => {
                report.repeated += usize::from(repeated);
                chunk.push((*number, new));
            }
            Err(error) => report.bad.push(BadLine {
                file: shown.clone(),
                line: *number,
                error,
            }),
        }
        if chunk.len() == IMPORT_CHUNK {
            store(db, agent, &shown, &mut chunk, report).await?;
        }
        bar.inc(1);
    }
    store(db, agent, &shown, &mut chunk, report).await?;
    bar.finish_and_clear();
    report
        .bad
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Ok(())
}

/// Stores a chunk in one transaction; a chunk the database refuses is stored line by line so
/// only the refused lines are reported bad.
async fn store(
    db: &SearchDb,
    agent: pattern::db::AgentId,
    file: &str,
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
        Err(pattern::search::Error::Db(e)) if is_refusal(&e) => {
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
                    Err(pattern::search::Error::Db(e)) if is_refusal(&e) => {
                        report.bad.push(BadLine {
                            file: file.to_owned(),
                            line: number,
                            error: e.to_string(),
                        })
                    }
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
