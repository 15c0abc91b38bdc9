//! `pattern export AGENT FILE` and `pattern import FILE [--rename NEW]`: whole agents (the agent
//! row, owned memory blocks with their history, batches with messages, summaries, archival
//! passages) in the format of `crate::transfer`.
//!
//! Export refuses an agent with an open batch (a run in progress, or a crash not yet recovered):
//! its state is not final. The file is written to a temporary name and renamed, so FILE is
//! either the old file or a complete new one.
//!
//! Import verifies the whole file before it writes anything, refuses an existing agent name
//! (unless `--rename`), then writes the whole agent — row, blocks with their history, batches
//! with their messages and archive flags, summaries, archival passages — in one transaction
//! (`Database::import_agent`, which also checks that the stored batches reproduce the exported
//! ones): a failure anywhere leaves nothing behind. This module must never import a file
//! `transfer::parse` has not accepted.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use pattern::db::{
    AgentImport, ImportBatch, ImportBlock, ImportMessage, ImportPassage, ImportSummary,
    ImportVersion, ListArchival, NewArchival,
};
use pattern::{BatchState, NewAgent, Pattern, SnowflakeId};
use serde::Serialize;

use super::progress;
use crate::cli::{ExportArgs, ImportArgs};
use crate::env::{Env, agent_named};
use crate::error::{CliError, Result, io};
use crate::output;
use crate::transfer::{
    self, AgentRecord, ArchivalRecord, BatchRecord, BlockRecord, MessageRecord, Section,
    SummaryRecord, VersionRecord,
};

/// Batch rows read per page.
const PAGE: usize = 200;
/// Archival passages read per page while exporting.
const ARCHIVAL_PAGE: usize = 1000;
/// Messages read per page while exporting.
const MESSAGE_PAGE: usize = 5000;

/// `export` answer.
#[derive(Serialize)]
struct ExportReport {
    agent: String,
    file: String,
    blocks: usize,
    batches: usize,
    messages: usize,
    summaries: usize,
    archival: usize,
    bytes: usize,
    sha256: String,
}

pub(crate) async fn export(env: &Env, args: ExportArgs) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = export_agent(env, &pattern, &args).await;
    pattern.close().await;
    result
}

async fn export_agent(env: &Env, pattern: &Pattern, args: &ExportArgs) -> Result<()> {
    let agent = agent_named(pattern, &args.agent).await?;
    let store = pattern.messages(agent.id);
    if let Some(open) = store.current_batch().await? {
        return Err(CliError::conflict(format!(
            "agent `{}` has an open batch ({}): wait for its run to finish, or run `pattern \
             recover` if it crashed, then export",
            agent.name, open.id
        )));
    }
    let mut sections = vec![Section::Agent(AgentRecord {
        name: agent.name.clone(),
        metadata: agent.metadata.clone(),
        created_at: agent.created_at,
    })];

    // Blocks the agent owns, with their history (blocks shared with it belong to their owner's
    // export).
    let blocks: Vec<_> = pattern
        .db()
        .blocks_for(agent.id)
        .await?
        .into_iter()
        .filter(|b| b.owner == agent.id)
        .collect();
    let n_blocks = blocks.len();
    for b in blocks {
        let mut history: Vec<VersionRecord> = pattern
            .db()
            .block_history(agent.id, &b.label)
            .await?
            .into_iter()
            .map(|v| VersionRecord {
                version: v.version,
                value: v.value,
                description: v.description,
                change: v.change,
                created_at: v.created_at,
            })
            .collect();
        history.reverse();
        sections.push(Section::Block(BlockRecord {
            label: b.label,
            description: b.description,
            value: b.value,
            char_limit: b.char_limit,
            block_type: b.block_type,
            version: b.version,
            history,
        }));
    }

    // Batch rows (listed newest first, page by page); then each batch with its messages.
    let infos = oldest_first(
        PAGE,
        |b: &pattern::BatchInfo| b.id,
        async |before| Ok(store.list_batches(before, PAGE).await?),
    )
    .await?;

    // Messages in position order, page by page (archived included), grouped into their batches:
    // one query per page instead of one per batch.
    let total: i64 = infos.iter().map(|b| b.message_count).sum();
    let bar = progress(u64::try_from(total).unwrap_or(0), "messages");
    let mut by_batch: HashMap<SnowflakeId, Vec<MessageRecord>> = HashMap::new();
    let mut after = None;
    loop {
        let page = store.get_all(after, MESSAGE_PAGE, true).await?;
        let done = page.len() < MESSAGE_PAGE;
        after = page.last().map(|m| m.position);
        bar.inc(page.len() as u64);
        for m in page {
            by_batch.entry(m.batch_id).or_default().push(MessageRecord {
                role: m.role,
                content: m.content,
                created_at: m.created_at,
            });
        }
        if done {
            break;
        }
    }
    bar.finish_and_clear();
    let mut n_messages = 0;
    for info in &infos {
        // Position order is sequence order within a batch (positions increase with each append).
        let messages = by_batch.remove(&info.id).unwrap_or_default();
        if messages.len() as i64 != info.message_count {
            return Err(CliError::conflict(format!(
                "batch {} changed while it was exported ({} messages, {} read): export again",
                info.id,
                info.message_count,
                messages.len()
            )));
        }
        n_messages += messages.len();
        sections.push(Section::Batch(BatchRecord {
            id: info.id.get(),
            batch_type: info.batch_type,
            state: info.state,
            archived: info.archived,
            started_at: info.started_at,
            completed_at: info.completed_at,
            retried_at: info.retried_at,
            messages,
        }));
    }
    if let Some(batch) = by_batch.keys().next() {
        return Err(CliError::conflict(format!(
            "batch {batch} appeared while the agent was exported: export again"
        )));
    }

    let summaries = store.get_summaries().await?;
    let n_summaries = summaries.len();
    for s in summaries {
        sections.push(Section::Summary(SummaryRecord {
            content: s.content,
            from_batch: s.from_batch.get(),
            through_batch: s.through_batch.get(),
            message_count: s.message_count,
            depth: s.depth,
            created_at: s.created_at,
        }));
    }

    // Archival passages (listed newest first, page by page), written oldest first.
    let passages = oldest_first(
        ARCHIVAL_PAGE,
        |p: &pattern::db::ArchivalEntry| p.id,
        async |before| {
            let list = ListArchival {
                limit: ARCHIVAL_PAGE,
                before,
                tag: None,
            };
            Ok(pattern.db().list_archival(agent.id, list).await?)
        },
    )
    .await?;
    let n_archival = passages.len();
    for p in passages {
        sections.push(Section::Archival(ArchivalRecord {
            content: p.content,
            metadata: p.metadata,
            tags: p.tags,
            key: p.dedupe_key,
            created_at: p.created_at,
        }));
    }

    let file = transfer::write(&agent.name, &sections)?;
    write_atomically(&args.file, &file)?;
    let (header, _) = transfer::parse(&file)?;
    let report = ExportReport {
        agent: agent.name.clone(),
        file: args.file.display().to_string(),
        blocks: n_blocks,
        batches: infos.len(),
        messages: n_messages,
        summaries: n_summaries,
        archival: n_archival,
        bytes: file.len(),
        sha256: header.body_sha256,
    };
    if env.json {
        return output::json(&report);
    }
    output::line(&format!(
        "exported agent {} to {}: {} blocks, {} batches ({} messages), {} summaries, {} archival \
         passages, {} bytes",
        report.agent,
        report.file,
        report.blocks,
        report.batches,
        report.messages,
        report.summaries,
        report.archival,
        report.bytes
    ))
}

/// Every row of a listing that pages newest first (`fetch(before)` returns at most `page` rows
/// older than `before`), oldest first.
async fn oldest_first<T, K: Copy>(
    page: usize,
    key: impl Fn(&T) -> K,
    mut fetch: impl AsyncFnMut(Option<K>) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let mut all = Vec::new();
    let mut before = None;
    loop {
        let rows = fetch(before).await?;
        let done = rows.len() < page;
        before = rows.last().map(&key);
        all.extend(rows);
        if done {
            break;
        }
    }
    all.reverse();
    Ok(all)
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| CliError::usage(format!("{} is not a file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path, &e));
    }
    Ok(())
}

/// `import` answer.
#[derive(Serialize)]
struct ImportReport {
    agent: String,
    agent_id: String,
    file: String,
    blocks: usize,
    batches: usize,
    messages: usize,
    summaries: usize,
    archival: usize,
}

pub(crate) async fn import(env: &Env, args: ImportArgs) -> Result<()> {
    let bytes = std::fs::read(&args.file).map_err(|e| io(&args.file, &e))?;
    let (_header, sections) = transfer::parse(&bytes)?;
    let (pattern, _config) = env.open().await?;
    let result = import_sections(env, &pattern, &args, sections).await;
    pattern.close().await;
    result
}

async fn import_sections(
    env: &Env,
    pattern: &Pattern,
    args: &ImportArgs,
    sections: Vec<Section>,
) -> Result<()> {
    let mut agent_record = None;
    let mut blocks = Vec::new();
    let mut batches = Vec::new();
    let mut summaries = Vec::new();
    let mut archival = Vec::new();
    for s in sections {
        match s {
            Section::Agent(a) => agent_record = Some(a),
            Section::Block(b) => blocks.push(b),
            Section::Batch(b) => batches.push(b),
            Section::Summary(s) => summaries.push(s),
            Section::Archival(a) => archival.push(a),
        }
    }
    let Some(agent_record) = agent_record else {
        return Err(CliError::refused("damaged export file: no agent section"));
    };
    check_consistent(&blocks, &batches, &summaries)?;
    let name = args.rename.clone().unwrap_or(agent_record.name.clone());
    let org = crate::env::organization(pattern).await?;
    match pattern.db().agent_in_scope(Some(org), &name).await {
        Ok(_) => {
            return Err(CliError::conflict(format!(
                "an agent named `{name}` exists already: import it under another name with \
                 --rename NEW"
            )));
        }
        Err(pattern::db::Error::Agent(pattern::db::AgentError::NameNotFound(_))) => {}
        Err(e) => return Err(e.into()),
    }
    let n_messages = batches.iter().map(|b| b.messages.len()).sum();
    let (n_blocks, n_batches, n_summaries) = (blocks.len(), batches.len(), summaries.len());
    let bar = progress(1, "importing");
    let import = AgentImport {
        agent: NewAgent {
            metadata: agent_record.metadata.clone(),
            ..NewAgent::named(name.clone()).in_organization(org)
        },
        blocks: blocks
            .into_iter()
            .map(|b| ImportBlock {
                label: b.label,
                char_limit: b.char_limit,
                block_type: b.block_type,
                versions: b
                    .history
                    .into_iter()
                    .map(|v| ImportVersion {
                        value: v.value,
                        description: v.description,
                        change: v.change,
                    })
                    .collect(),
            })
            .collect(),
        summaries: summaries
            .iter()
            .map(|s| {
                let index = |id: i64| {
                    batches
                        .iter()
                        .position(|b| b.id == id)
                        .unwrap_or(usize::MAX)
                };
                ImportSummary {
                    content: s.content.clone(),
                    from_batch: index(s.from_batch),
                    through_batch: index(s.through_batch),
                    message_count: s.message_count,
                    depth: s.depth,
                    created_at: s.created_at,
                }
            })
            .collect(),
        batches: batches
            .into_iter()
            .map(|b| ImportBatch {
                batch_type: b.batch_type,
                state: b.state,
                archived: b.archived,
                retried_at: b.retried_at,
                messages: b
                    .messages
                    .into_iter()
                    .map(|m| ImportMessage {
                        role: m.role,
                        content: m.content,
                        created_at: m.created_at,
                    })
                    .collect(),
            })
            .collect(),
        archival: archival
            .into_iter()
            .map(|a| ImportPassage {
                passage: NewArchival {
                    content: a.content,
                    metadata: a.metadata,
                    tags: a.tags,
                    dedupe_key: a.key,
                },
                created_at: a.created_at,
            })
            .collect(),
    };
    let imported = pattern
        .db()
        .import_agent(import)
        .await
        .map_err(|e| match e {
            pattern::db::Error::Agent(pattern::db::AgentError::NameTaken(_)) => {
                CliError::conflict(format!(
                    "an agent named `{name}` exists already: import it under another name with \
                 --rename NEW"
                ))
            }
            other => {
                let e = CliError::from(other);
                CliError::new(e.kind, format!("import failed, nothing was written: {e}"))
            }
        })?;
    bar.finish_and_clear();
    let report = ImportReport {
        agent: name,
        agent_id: imported.agent.id.to_string(),
        file: args.file.display().to_string(),
        blocks: n_blocks,
        batches: n_batches,
        messages: n_messages,
        summaries: n_summaries,
        archival: imported.archival,
    };
    if env.json {
        return output::json(&report);
    }
    output::line(&format!(
        "imported agent {} from {}: {} blocks, {} batches ({} messages), {} summaries, {} \
         archival passages",
        report.agent,
        report.file,
        report.blocks,
        report.batches,
        report.messages,
        report.summaries,
        report.archival
    ))
}

/// Checks what the importer relies on before anything is written.
fn check_consistent(
    blocks: &[BlockRecord],
    batches: &[BatchRecord],
    summaries: &[SummaryRecord],
) -> Result<()> {
    let refuse = |why: String| CliError::refused(format!("inconsistent export file: {why}"));
    for b in blocks {
        let dense = b.history.len() as i64 == b.version
            && b.history
                .iter()
                .enumerate()
                .all(|(i, v)| v.version == i as i64 + 1);
        if !dense {
            return Err(refuse(format!(
                "block `{}` is at version {} but its history is not versions 1..={}",
                b.label, b.version, b.version
            )));
        }
        if b.history.last().map(|v| &v.value) != Some(&b.value) {
            return Err(refuse(format!(
                "block `{}`: its value differs from its latest version",
                b.label
            )));
        }
    }
    let mut last = i64::MIN;
    for b in batches {
        if b.id <= last {
            return Err(refuse(format!("batch {} is out of order", b.id)));
        }
        last = b.id;
        if b.messages.is_empty() {
            return Err(refuse(format!("batch {} has no messages", b.id)));
        }
        if b.state == BatchState::Open {
            return Err(refuse(format!("batch {} is open", b.id)));
        }
    }
    for s in summaries {
        for id in [s.from_batch, s.through_batch] {
            if !batches.iter().any(|b| b.id == id) {
                return Err(refuse(format!(
                    "a summary refers to batch {id}, which is not in the file"
                )));
            }
        }
    }
    Ok(())
}
