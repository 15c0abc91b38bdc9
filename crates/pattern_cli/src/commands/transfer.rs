//! `pattern export AGENT FILE` and `pattern import FILE [--rename NEW]`: whole agents (the agent
//! row, owned memory blocks with their history, batches with messages, summaries) in the format
//! of `crate::transfer`.
//!
//! Export refuses an agent with an open batch (a run in progress, or a crash not yet recovered):
//! its state is not final. The file is written to a temporary name and renamed, so FILE is
//! either the old file or a complete new one.
//!
//! Import verifies the whole file before it writes anything, refuses an existing agent name
//! (unless `--rename`), then writes the agent through `pattern_db`'s public API: the history in
//! one transaction (`import_legacy`, whose plan is checked to reproduce every exported batch),
//! blocks version by version, archive flags and summaries. `pattern_db` has no single-transaction
//! import of a whole agent yet, so a failure part-way deletes the new agent again (one
//! transaction, cascading): import never leaves a partial agent behind unless the process itself
//! dies in between, and then the agent is visible under its name and can be deleted. This module
//! must never import a file `transfer::parse` has not accepted.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use pattern::db::legacy::LegacyMessage;
use pattern::db::{NewBlock, Summary};
use pattern::{Agent, BatchState, NewAgent, Pattern, SnowflakeId};
use serde::Serialize;

use crate::cli::{ExportArgs, ImportArgs};
use crate::env::{Env, agent_named};
use crate::error::{CliError, Result, io};
use crate::output;
use crate::transfer::{
    self, AgentRecord, BatchRecord, BlockRecord, MessageRecord, Section, SummaryRecord,
    VersionRecord,
};

/// Batch rows read per page.
const PAGE: usize = 200;
/// Messages read per page while exporting.
const MESSAGE_PAGE: usize = 5000;

fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// `export` answer.
#[derive(Serialize)]
struct ExportReport {
    agent: String,
    file: String,
    blocks: usize,
    batches: usize,
    messages: usize,
    summaries: usize,
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

    // Batch rows newest first, page by page; then each batch with its messages, oldest first.
    let mut infos = Vec::new();
    let mut before = None;
    loop {
        let page = store.list_batches(before, PAGE).await?;
        let done = page.len() < PAGE;
        before = page.last().map(|b| b.id);
        infos.extend(page);
        if done {
            break;
        }
    }
    infos.reverse();

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
        bytes: file.len(),
        sha256: header.body_sha256,
    };
    if env.json {
        return output::json(&report);
    }
    output::line(&format!(
        "exported agent {} to {}: {} blocks, {} batches ({} messages), {} summaries, {} bytes",
        report.agent,
        report.file,
        report.blocks,
        report.batches,
        report.messages,
        report.summaries,
        report.bytes
    ))
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
    for s in sections {
        match s {
            Section::Agent(a) => agent_record = Some(a),
            Section::Block(b) => blocks.push(b),
            Section::Batch(b) => batches.push(b),
            Section::Summary(s) => summaries.push(s),
        }
    }
    let Some(agent_record) = agent_record else {
        return Err(CliError::refused("damaged export file: no agent section"));
    };
    check_consistent(&blocks, &batches, &summaries)?;
    let name = args.rename.clone().unwrap_or(agent_record.name.clone());
    match pattern.db().agent_by_name(&name).await {
        Ok(_) => {
            return Err(CliError::conflict(format!(
                "an agent named `{name}` exists already: import it under another name with \
                 --rename NEW"
            )));
        }
        Err(pattern::db::Error::AgentNameNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let agent = pattern
        .db()
        .create_agent(NewAgent {
            name: name.clone(),
            metadata: agent_record.metadata.clone(),
        })
        .await?;
    match fill(pattern, &agent, &blocks, &batches, &summaries).await {
        Ok(()) => {}
        Err(e) => {
            // Take the partial agent away again; the cause is what the user must see.
            if let Err(undo) = pattern.db().delete_agent(agent.id).await {
                return Err(CliError::new(
                    e.kind,
                    format!(
                        "{e}; removing the partly imported agent `{name}` failed too ({undo}): \
                         delete it with `pattern agent delete {name} --yes`"
                    ),
                ));
            }
            return Err(CliError::new(
                e.kind,
                format!("import failed, nothing was kept: {e}"),
            ));
        }
    }
    let report = ImportReport {
        agent: name,
        agent_id: agent.id.to_string(),
        file: args.file.display().to_string(),
        blocks: blocks.len(),
        batches: batches.len(),
        messages: batches.iter().map(|b| b.messages.len()).sum(),
        summaries: summaries.len(),
    };
    if env.json {
        return output::json(&report);
    }
    output::line(&format!(
        "imported agent {} from {}: {} blocks, {} batches ({} messages), {} summaries",
        report.agent, report.file, report.blocks, report.batches, report.messages, report.summaries
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

/// Writes everything of the new agent; any error leaves the caller to remove it.
async fn fill(
    pattern: &Pattern,
    agent: &Agent,
    blocks: &[BlockRecord],
    batches: &[BatchRecord],
    summaries: &[SummaryRecord],
) -> Result<()> {
    let total = blocks.iter().map(|b| b.history.len()).sum::<usize>() + batches.len() + 1;
    let bar = progress(total as u64, "importing");
    let db = pattern.db();

    // Blocks, replaying every version so the history comes along.
    for b in blocks {
        let Some((first, rest)) = b.history.split_first() else {
            continue;
        };
        db.create_block(
            agent.id,
            NewBlock {
                label: b.label.clone(),
                description: first.description.clone(),
                value: first.value.clone(),
                char_limit: b.char_limit,
                block_type: b.block_type.clone(),
            },
        )
        .await?;
        bar.inc(1);
        for v in rest {
            db.write_block(
                agent.id,
                &b.label,
                v.version - 1,
                v.value.clone(),
                &v.change,
                &["admin"],
            )
            .await?;
            bar.inc(1);
        }
    }

    // The history in one transaction; the plan must reproduce every batch as exported.
    let mut legacy = Vec::new();
    for b in batches {
        for (i, m) in b.messages.iter().enumerate() {
            legacy.push(LegacyMessage {
                role: m.role,
                content: m.content.clone(),
                created_at: Some(m.created_at),
                origin: (i == 0).then_some(b.batch_type),
            });
        }
    }
    let store = pattern.messages(agent.id);
    let plan = store.import_legacy(legacy).await?;
    bar.inc(1);
    let mismatch = |why: String| {
        CliError::refused(format!(
            "the stored history cannot reproduce the exported batches ({why}); this export needs \
             a batch-preserving import in pattern_db"
        ))
    };
    if plan.batches.len() != batches.len() {
        return Err(mismatch(format!(
            "{} batches exported, {} rebuilt",
            batches.len(),
            plan.batches.len()
        )));
    }
    let mut start = 0;
    for (planned, exported) in plan.batches.iter().zip(batches) {
        let expected: Vec<usize> = (start..start + exported.messages.len()).collect();
        start += exported.messages.len();
        if planned.messages != expected
            || planned.state != exported.state
            || planned.batch_type != exported.batch_type
        {
            return Err(mismatch(format!(
                "batch {} ({}, {}, {} messages) rebuilt as {}, {} with {} messages",
                exported.id,
                exported.state.as_str(),
                exported.batch_type.as_str(),
                exported.messages.len(),
                planned.state.as_str(),
                planned.batch_type.as_str(),
                planned.messages.len()
            )));
        }
    }

    // New batch ids, oldest first, matched with the exported ones.
    let mut new_ids = Vec::with_capacity(batches.len());
    let mut before = None;
    loop {
        let page = store.list_batches(before, PAGE).await?;
        let done = page.len() < PAGE;
        before = page.last().map(|b| b.id);
        new_ids.extend(page.iter().map(|b| b.id));
        if done {
            break;
        }
    }
    new_ids.reverse();
    if new_ids.len() != batches.len() {
        return Err(mismatch(format!(
            "{} batches stored, {} exported",
            new_ids.len(),
            batches.len()
        )));
    }
    let ids: HashMap<i64, SnowflakeId> = batches.iter().map(|b| b.id).zip(new_ids).collect();
    let archived: Vec<SnowflakeId> = batches
        .iter()
        .filter(|b| b.archived)
        .filter_map(|b| ids.get(&b.id).copied())
        .collect();
    if !archived.is_empty() {
        store.archive_batches(archived).await?;
    }
    for s in summaries {
        let (Some(&from), Some(&through)) = (ids.get(&s.from_batch), ids.get(&s.through_batch))
        else {
            return Err(mismatch("a summary's batches are missing".to_owned()));
        };
        store
            .upsert_summary(Summary {
                id: store.new_summary_id()?,
                agent_id: agent.id,
                content: s.content.clone(),
                from_batch: from,
                through_batch: through,
                message_count: s.message_count,
                depth: s.depth,
                created_at: s.created_at,
            })
            .await?;
    }
    bar.finish_and_clear();
    Ok(())
}
