//! Importing a whole agent in one transaction: the agent row, its memory blocks with their
//! version history, its batches with their messages (states, types, archive flags kept), its
//! summaries and its archival passages.
//!
//! [`Database::import_agent`] plans the history with the legacy planner (which rebuilds batches
//! from messages and checks tool-call pairing) and refuses the import unless the plan reproduces
//! every given batch exactly; then one writer op writes everything, with the same bookkeeping as
//! the single writes (embedding jobs and search changes, the revision bump, the snowflake
//! generator moved past the new positions). Any failure rolls the whole import back: there is
//! never a partial agent. [`Database::import_history_agent`] does the same for an agent whose
//! history has no batches yet (another framework's agent file): the planner's own batches are
//! stored, with its report. This module must never write outside that one write.

use crate::AgentError;
use chrono::{DateTime, Utc};

use crate::archival::NewArchival;
use crate::db::Database;
use crate::error::{Error, Result};
use crate::legacy::{self, ImportPlan, LegacyMessage};
use crate::model::{Agent, BatchState, BatchType, ContentBlock, NewAgent, Role};

/// A whole agent to import.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentImport {
    /// The agent row (the name must be free).
    pub agent: NewAgent,
    /// Blocks the agent owns.
    pub blocks: Vec<ImportBlock>,
    /// Batches, oldest first.
    pub batches: Vec<ImportBatch>,
    /// Summaries, naming batches by their index in `batches`.
    pub summaries: Vec<ImportSummary>,
    /// Archival passages, oldest first.
    pub archival: Vec<ImportPassage>,
}

/// A memory block and its history.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportBlock {
    /// Its label.
    pub label: String,
    /// Most characters its value may hold.
    pub char_limit: i64,
    /// Its type (`core`, `working`, `archival`, `log`).
    pub block_type: String,
    /// Every version, oldest first (at least one).
    pub versions: Vec<ImportVersion>,
}

/// One version of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportVersion {
    /// The value.
    pub value: String,
    /// The description at this version.
    pub description: String,
    /// The kind of change that made it (`create` for the first).
    pub change: String,
}

/// A batch and its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportBatch {
    /// What started it.
    pub batch_type: BatchType,
    /// `complete` or `abandoned` (an open batch is refused).
    pub state: BatchState,
    /// Whether it was archived (summarised out of context).
    pub archived: bool,
    /// When an abandoned batch was retried (kept, so it is not retried twice).
    pub retried_at: Option<DateTime<Utc>>,
    /// Its messages in sequence order.
    pub messages: Vec<ImportMessage>,
}

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportMessage {
    /// Who speaks.
    pub role: Role,
    /// Its content.
    pub content: Vec<ContentBlock>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// A summary of a range of batches.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSummary {
    /// The summary.
    pub content: String,
    /// Index of its first batch in [`AgentImport::batches`].
    pub from_batch: usize,
    /// Index of its last batch.
    pub through_batch: usize,
    /// Messages it summarises.
    pub message_count: i64,
    /// How many summarisations deep it is.
    pub depth: i32,
    /// When it was made.
    pub created_at: DateTime<Utc>,
}

/// An archival passage and when it was stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportPassage {
    /// The passage.
    pub passage: NewArchival,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

/// What an import wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedAgent {
    /// The new agent.
    pub agent: Agent,
    /// The new ids of the imported batches, in order.
    pub batches: Vec<crate::model::BatchId>,
    /// Passages stored.
    pub archival: usize,
}

/// The checked plan of an import, handed to the writer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedImport {
    pub(crate) import: AgentImport,
    pub(crate) messages: std::sync::Arc<Vec<LegacyMessage>>,
    pub(crate) plan: legacy::ImportPlan,
    /// The messages encoded and compressed before the write ([`crate::ops::prepare_legacy`]).
    pub(crate) prepared: crate::ops::PreparedLegacy,
    /// Ids for the summaries, in order.
    pub(crate) summary_ids: Vec<crate::id::SnowflakeId>,
}

/// An agent whose history has no batches (another framework's agent file): its row, blocks,
/// flat message history and archival passages.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryImport {
    /// The agent row.
    pub agent: NewAgent,
    /// Its memory blocks, each with at least one version.
    pub blocks: Vec<ImportBlock>,
    /// Its messages in order; the legacy planner cuts them into batches.
    pub messages: Vec<LegacyMessage>,
    /// Its archival passages.
    pub archival: Vec<ImportPassage>,
}

fn refuse(why: String) -> Error {
    Error::Agent(AgentError::InvalidImport(format!(
        "the import does not reproduce its batches: {why}"
    )))
}

fn check_blocks(blocks: &[ImportBlock]) -> Result<()> {
    match blocks.iter().find(|b| b.versions.is_empty()) {
        Some(b) => {
            Err(AgentError::InvalidImport(format!("block `{}` has no versions", b.label)).into())
        }
        None => Ok(()),
    }
}

impl Database {
    /// Imports a whole agent in one transaction (module doc). A taken name is
    /// [`AgentError::NameTaken`]; batches the planner would rebuild differently, summaries
    /// naming missing batches, or any refused write fail the import with nothing written.
    pub async fn import_agent(&self, import: AgentImport) -> Result<ImportedAgent> {
        let mut messages = Vec::new();
        for (i, b) in import.batches.iter().enumerate() {
            if b.state == BatchState::Open {
                return Err(refuse(format!("batch {i} is open")));
            }
            if b.messages.is_empty() {
                return Err(refuse(format!("batch {i} has no messages")));
            }
            for (j, m) in b.messages.iter().enumerate() {
                messages.push(LegacyMessage {
                    role: m.role,
                    content: m.content.clone(),
                    created_at: Some(m.created_at),
                    origin: (j == 0).then_some(b.batch_type),
                });
            }
        }
        let plan = legacy::plan(&messages)?;
        if plan.batches.len() != import.batches.len() {
            return Err(refuse(format!(
                "{} batches given, {} rebuilt",
                import.batches.len(),
                plan.batches.len()
            )));
        }
        let mut start = 0;
        for (i, (planned, given)) in plan.batches.iter().zip(&import.batches).enumerate() {
            let expected: Vec<usize> = (start..start + given.messages.len()).collect();
            start += given.messages.len();
            if planned.messages != expected
                || planned.state != given.state
                || planned.batch_type != given.batch_type
            {
                return Err(refuse(format!(
                    "batch {i} ({}, {}, {} messages) rebuilds as {}, {} with {} messages",
                    given.state.as_str(),
                    given.batch_type.as_str(),
                    given.messages.len(),
                    planned.state.as_str(),
                    planned.batch_type.as_str(),
                    planned.messages.len()
                )));
            }
        }
        for s in &import.summaries {
            if s.from_batch > s.through_batch || s.through_batch >= import.batches.len() {
                return Err(refuse(format!(
                    "a summary covers batches {}..={} of {}",
                    s.from_batch,
                    s.through_batch,
                    import.batches.len()
                )));
            }
        }
        check_blocks(&import.blocks)?;
        let summary_ids = import
            .summaries
            .iter()
            .map(|_| self.next_id())
            .collect::<Result<Vec<_>>>()?;
        let messages = std::sync::Arc::new(messages);
        let prepared = crate::ops::prepare_legacy(self.ctx(), messages.clone(), &plan).await?;
        let planned = PlannedImport {
            import,
            messages,
            plan,
            prepared,
            summary_ids,
        };
        self.write(crate::ops::agents::ImportAgent(planned)).await
    }

    /// Imports an agent whose history has no batches in one transaction: the legacy planner
    /// cuts the messages into batches (`docs/batching.md`; unpaired calls stored abandoned and
    /// reported in the plan), then the agent row, its blocks, its batches and its passages are
    /// written by one write, so a failure or a crash leaves no part of the agent. Returns what
    /// was written and the plan (with its anomalies). A taken name is
    /// [`AgentError::NameTaken`].
    pub async fn import_history_agent(
        &self,
        import: HistoryImport,
    ) -> Result<(ImportedAgent, ImportPlan)> {
        check_blocks(&import.blocks)?;
        let plan = legacy::plan(&import.messages)?;
        let now = Utc::now();
        let batches = plan
            .batches
            .iter()
            .map(|planned| ImportBatch {
                batch_type: planned.batch_type,
                state: planned.state,
                archived: false,
                retried_at: None,
                messages: planned
                    .messages
                    .iter()
                    .map(|&i| {
                        let m = &import.messages[i];
                        ImportMessage {
                            role: m.role,
                            content: m.content.clone(),
                            created_at: m.created_at.unwrap_or(now),
                        }
                    })
                    .collect(),
            })
            .collect();
        let messages = std::sync::Arc::new(import.messages);
        let prepared = crate::ops::prepare_legacy(self.ctx(), messages.clone(), &plan).await?;
        let planned = PlannedImport {
            import: AgentImport {
                agent: import.agent,
                blocks: import.blocks,
                batches,
                summaries: Vec::new(),
                archival: import.archival,
            },
            messages,
            plan: plan.clone(),
            prepared,
            summary_ids: Vec::new(),
        };
        let imported = self.write(crate::ops::agents::ImportAgent(planned)).await?;
        Ok((imported, plan))
    }
}
