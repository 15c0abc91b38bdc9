//! Retention of what grows per agent (issue 18): old batches that left the context, block
//! versions beyond what a policy keeps, and old activity events; and the per-agent policies
//! stored for it (migration `0018_retention_policies`, decision 0024). One pass is one writer
//! op, so everything it deletes for an agent goes in one transaction, under the agent's row lock.
//!
//! With a batch age, summaries older than it that a newer summary contains go too (recursive
//! summarisation folds each into the next; the context reads only the newest).
//!
//! What is never touched: an open batch; a complete batch that no summary covers (it is still
//! in the context, or its summary is still to be written: the context builder needs it); a batch
//! newer than the age; the current version of a block and the last `keep` versions of each
//! block; the newest summary, or one no newer summary contains; anything of another agent. A
//! deleted batch's messages leave search in the same
//! transaction (vectors, jobs, a `delete` change). A dry run reports the same ids and counts and
//! changes nothing. With [`BatchDisposal::Archive`] a pass deletes only batches an archive plan
//! ([`Database::plan_archive`]) recorded, so nothing goes that its caller has not written to the
//! agent's archive file first. This module must never accept a zero age or a zero `keep` (a
//! typed [`ProtocolError::InvalidRetention`]), whether given for one run or read back from a stored
//! policy, and never delete outside the named agent.

use crate::ProtocolError;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::Result;
use crate::model::{AgentId, BatchId};
use crate::ops::retention::{ClearPolicy, PlanArchive, RetainAgent, SetPolicy};

/// The longest age a policy may state, in days (100 years).
pub const MAX_RETENTION_DAYS: u32 = 36_500;
/// The most block versions a policy may keep beyond the daily ones.
pub const MAX_KEEP_BLOCK_VERSIONS: u32 = 100_000;

/// What happens to old batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchDisposal {
    /// They are deleted with their messages.
    #[default]
    Delete,
    /// They are written to the agent's archive file (by the caller, between
    /// [`Database::plan_archive`] and the pass), then deleted.
    Archive,
}

impl BatchDisposal {
    /// Its stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchDisposal::Delete => "delete",
            BatchDisposal::Archive => "archive",
        }
    }

    /// The disposal of a stored name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "delete" => Ok(BatchDisposal::Delete),
            "archive" => Ok(BatchDisposal::Archive),
            other => Err(ProtocolError::InvalidRetention(format!(
                "`{}` is not a batch disposal: `delete` or `archive`",
                other.chars().take(32).collect::<String>()
            ))
            .into()),
        }
    }
}

/// What to delete for one agent. `None` keeps that kind of data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentRetention {
    /// Delete batches older than this (by completion, else start) that are abandoned, or
    /// complete, archived and covered by a summary.
    pub batches_older_than: Option<Duration>,
    /// Whether old batches are deleted outright or only those an archive plan recorded.
    pub batch_disposal: BatchDisposal,
    /// Keep each block's last `n` versions and, beyond them, the last version of each day.
    pub keep_block_versions: Option<u32>,
    /// Delete activity events older than this.
    pub activity_older_than: Option<Duration>,
    /// Report only.
    pub dry_run: bool,
}

impl AgentRetention {
    /// Refuses zero ages and a zero `keep`.
    pub fn check(&self) -> Result<()> {
        if self.batches_older_than.is_some_and(|d| d.is_zero()) {
            return Err(ProtocolError::InvalidRetention(
                "a batch retention age of zero would delete batches as they close".to_owned(),
            )
            .into());
        }
        if self.activity_older_than.is_some_and(|d| d.is_zero()) {
            return Err(ProtocolError::InvalidRetention(
                "an activity retention age of zero would delete events as they happen".to_owned(),
            )
            .into());
        }
        if self.keep_block_versions == Some(0) {
            return Err(ProtocolError::InvalidRetention(
                "keeping zero block versions would delete the current one: keep at least 1"
                    .to_owned(),
            )
            .into());
        }
        Ok(())
    }
}

/// One agent's stored policy, in whole days. `None` keeps that kind of data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionSettings {
    /// Old complete (summarised) and abandoned batches go after this many days.
    pub batches_older_than_days: Option<u32>,
    /// Whether they are deleted or archived to a file first.
    #[serde(default)]
    pub batch_disposal: BatchDisposal,
    /// Each block keeps its last N versions and, beyond them, the last of each day.
    pub keep_block_versions: Option<u32>,
    /// Activity events go after this many days.
    pub activity_older_than_days: Option<u32>,
}

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 24 * 60 * 60)
}

impl RetentionSettings {
    /// Refuses a zero or over-long age, a zero or huge `keep`, and a policy that keeps
    /// everything (clear it instead).
    pub fn check(&self) -> Result<()> {
        for (what, v) in [
            ("batches_older_than_days", self.batches_older_than_days),
            ("activity_older_than_days", self.activity_older_than_days),
        ] {
            if let Some(v) = v
                && !(1..=MAX_RETENTION_DAYS).contains(&v)
            {
                return Err(ProtocolError::InvalidRetention(format!(
                    "`{what}` must be 1 to {MAX_RETENTION_DAYS} days (zero would delete what \
                     just happened), not {v}"
                ))
                .into());
            }
        }
        if let Some(v) = self.keep_block_versions
            && !(1..=MAX_KEEP_BLOCK_VERSIONS).contains(&v)
        {
            return Err(ProtocolError::InvalidRetention(format!(
                "`keep_block_versions` must be 1 to {MAX_KEEP_BLOCK_VERSIONS} (zero would delete \
                 the current version), not {v}"
            ))
            .into());
        }
        if self.batches_older_than_days.is_none()
            && self.keep_block_versions.is_none()
            && self.activity_older_than_days.is_none()
        {
            return Err(ProtocolError::InvalidRetention(
                "a policy that keeps everything: set at least one kind, or clear the policy"
                    .to_owned(),
            )
            .into());
        }
        if self.batch_disposal == BatchDisposal::Archive && self.batches_older_than_days.is_none() {
            return Err(ProtocolError::InvalidRetention(
                "archiving batches needs `batches_older_than_days`".to_owned(),
            )
            .into());
        }
        Ok(())
    }

    /// The pass this policy asks for.
    pub fn to_pass(&self, dry_run: bool) -> AgentRetention {
        AgentRetention {
            batches_older_than: self.batches_older_than_days.map(days),
            batch_disposal: self.batch_disposal,
            keep_block_versions: self.keep_block_versions,
            activity_older_than: self.activity_older_than_days.map(days),
            dry_run,
        }
    }
}

/// A stored policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRetention {
    /// The agent it applies to.
    pub agent: AgentId,
    /// What it keeps.
    #[serde(flatten)]
    pub settings: RetentionSettings,
    /// When it was last set.
    pub updated_at: DateTime<Utc>,
}

/// What a retention pass did (or, on a dry run, would do) for one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AgentRetentionReport {
    /// The agent.
    pub agent: AgentId,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Whether old batches were archived before they were deleted.
    pub batch_disposal: BatchDisposal,
    /// Batches deleted, by id.
    pub deleted_batches: Vec<i64>,
    /// Their messages.
    pub deleted_messages: u64,
    /// Summaries a newer summary of the agent contains (with the batch age: the context reads
    /// only the newest, which covers everything they covered).
    pub deleted_summaries: u64,
    /// Block versions deleted.
    pub deleted_block_versions: u64,
    /// Activity events deleted.
    pub deleted_activity_events: u64,
}

impl Database {
    /// Applies `policy` to `agent`'s data in one transaction (see the module doc).
    pub async fn retain_agent(
        &self,
        agent: AgentId,
        policy: AgentRetention,
    ) -> Result<AgentRetentionReport> {
        policy.check()?;
        self.write(RetainAgent { agent, policy }).await
    }

    /// The batches an archive pass of `agent` is to write to its archive file, oldest first:
    /// those of an earlier plan not yet finished (a pass that crashed between writing the file
    /// and deleting the rows), else the batches older than `older_than` that a pass may delete,
    /// recorded in one transaction. The following [`Database::retain_agent`] with
    /// [`BatchDisposal::Archive`] deletes exactly these (those still eligible) and forgets the
    /// plan in its transaction. Empty when nothing is old enough.
    pub async fn plan_archive(&self, agent: AgentId, older_than: Duration) -> Result<Vec<BatchId>> {
        if older_than.is_zero() {
            return Err(ProtocolError::InvalidRetention(
                "a batch retention age of zero would archive batches as they close".to_owned(),
            )
            .into());
        }
        self.write(PlanArchive { agent, older_than }).await
    }

    /// Stores `agent`'s policy (replacing any), checked first; an unknown agent is
    /// [`AgentError::NotFound`](crate::AgentError::NotFound).
    pub async fn set_retention_policy(
        &self,
        agent: AgentId,
        settings: RetentionSettings,
    ) -> Result<StoredRetention> {
        settings.check()?;
        self.write(SetPolicy { agent, settings }).await
    }

    /// Forgets `agent`'s policy; whether there was one.
    pub async fn clear_retention_policy(&self, agent: AgentId) -> Result<bool> {
        self.write(ClearPolicy { agent }).await
    }

    /// `agent`'s stored policy, if any.
    pub async fn retention_policy(&self, agent: AgentId) -> Result<Option<StoredRetention>> {
        crate::ops::retention::policy(self.reader(), Some(agent))
            .await
            .map(|mut v| v.pop())
    }

    /// Every stored policy, by agent.
    pub async fn retention_policies(&self) -> Result<Vec<StoredRetention>> {
        crate::ops::retention::policy(self.reader(), None).await
    }
}
