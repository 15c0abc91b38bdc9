//! Retention of what grows per agent (issue 18): old batches that left the context, block
//! versions beyond what a policy keeps, and old activity events. One call is one writer op, so
//! everything it deletes for an agent goes in one transaction, under the agent's row lock.
//!
//! What is never touched: an open batch; a complete batch that no summary covers (it is still
//! in the context, or its summary is still to be written: the context builder needs it); a batch
//! newer than the age; the current version of a block and the last `keep` versions of each
//! block; anything of another agent. A deleted batch's messages leave search in the same
//! transaction (vectors, jobs, a `delete` change). A dry run reports the same ids and counts and
//! changes nothing. This module must never accept a zero age or a zero `keep` (a typed
//! [`Error::InvalidRetention`]), and never delete outside the named agent.

use std::time::Duration;

use serde::Serialize;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::retention::RetainAgent;

/// What to delete for one agent. `None` keeps that kind of data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentRetention {
    /// Delete batches older than this (by completion, else start) that are abandoned, or
    /// complete, archived and covered by a summary.
    pub batches_older_than: Option<Duration>,
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
            return Err(Error::InvalidRetention(
                "a batch retention age of zero would delete batches as they close".to_owned(),
            ));
        }
        if self.activity_older_than.is_some_and(|d| d.is_zero()) {
            return Err(Error::InvalidRetention(
                "an activity retention age of zero would delete events as they happen".to_owned(),
            ));
        }
        if self.keep_block_versions == Some(0) {
            return Err(Error::InvalidRetention(
                "keeping zero block versions would delete the current one: keep at least 1"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// What a retention pass did (or, on a dry run, would do) for one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AgentRetentionReport {
    /// The agent.
    pub agent: AgentId,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Batches deleted, by id.
    pub deleted_batches: Vec<i64>,
    /// Their messages.
    pub deleted_messages: u64,
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
}
