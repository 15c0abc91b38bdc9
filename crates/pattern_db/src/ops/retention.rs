//! The SQL of per-agent retention (`crate::retention`): a pass as one write ([`RetainAgent`]):
//! candidates chosen by one statement per kind, counted on a dry run, deleted otherwise, all
//! inside the writer's transaction; an archive plan ([`PlanArchive`]); the stored policies
//! ([`SetPolicy`], [`ClearPolicy`], [`policy`]). It must never delete a row of another agent, an
//! open batch, or a batch no summary covers unless it was abandoned, and never return a stored
//! policy that does not pass `RetentionSettings::check`.

use crate::StorageError;
use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::instant;

use crate::error::{Error, Result};
use crate::model::{AgentId, BatchId};
use crate::ops::{Ctx, FromStored, StoredId, StoredTime, lock_agent, now_ms, placeholders, search};
use crate::retention::{
    AgentRetention, AgentRetentionReport, BatchDisposal, RetentionSettings, StoredRetention,
};
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// Applies (or, on a dry run, counts) an agent's retention policy.
#[derive(Debug)]
pub(crate) struct RetainAgent {
    pub(crate) agent: AgentId,
    pub(crate) policy: AgentRetention,
}

impl Write for RetainAgent {
    type Output = AgentRetentionReport;

    fn locks(&self) -> Locks {
        // Deleted content leaves the search indexes.
        Locks::agent(self.agent).logging_changes()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<AgentRetentionReport> {
        retain(conn, ctx, self.agent, &self.policy).await
    }
}

/// Records (or finds, when one is unfinished) the batches an archive pass is to write.
#[derive(Debug)]
pub(crate) struct PlanArchive {
    pub(crate) agent: AgentId,
    pub(crate) older_than: std::time::Duration,
}

impl Write for PlanArchive {
    type Output = Vec<BatchId>;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<BatchId>> {
        lock_agent(conn, self.agent).await?;
        if let Some(planned) = planned(conn, self.agent).await? {
            return Ok(planned.into_iter().map(crate::id::SnowflakeId).collect());
        }
        let cutoff = now_ms().saturating_sub(age_ms(self.older_than));
        let ids = eligible(conn, self.agent, cutoff).await?;
        if !ids.is_empty() {
            let text = serde_json::to_string(&ids).map_err(|e| {
                StorageError::Corrupt(format!("an archive plan does not encode: {e}"))
            })?;
            let now = now_ms();
            match conn {
                Conn::Sqlite(c) => {
                    let a = self.agent.to_string();
                    pattern_db_sqlite::retention::put_plan(c, &a, &text, now).await?
                }
                Conn::Postgres(c) => {
                    let a = self.agent.0;
                    pattern_db_postgres::retention::put_plan(c, a, &text, instant(now)?).await?
                }
            };
        }
        Ok(ids.into_iter().map(crate::id::SnowflakeId).collect())
    }
}

/// Stores an agent's policy, replacing any.
#[derive(Debug)]
pub(crate) struct SetPolicy {
    pub(crate) agent: AgentId,
    pub(crate) settings: RetentionSettings,
}

impl Write for SetPolicy {
    type Output = StoredRetention;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<StoredRetention> {
        lock_agent(conn, self.agent).await?;
        let s = &self.settings;
        let now = now_ms();
        match conn {
            Conn::Sqlite(c) => {
                use pattern_db_sqlite::retention as q;
                let a = self.agent.to_string();
                let new = q::NewPolicy {
                    batches_older_than_days: s.batches_older_than_days.map(i64::from),
                    batch_disposal: s.batch_disposal.as_str(),
                    keep_block_versions: s.keep_block_versions.map(i64::from),
                    activity_older_than_days: s.activity_older_than_days.map(i64::from),
                };
                q::put_policy(c, &a, new, now).await?;
                let row = q::policy_of(c, &a).await?;
                policy_from_plain(row.ok_or(sqlx::Error::RowNotFound)?)
            }
            Conn::Postgres(c) => {
                use pattern_db_postgres::retention as q;
                let a = self.agent.0;
                let new = q::NewPolicy {
                    batches_older_than_days: s.batches_older_than_days.map(i64::from),
                    batch_disposal: s.batch_disposal.as_str(),
                    keep_block_versions: s.keep_block_versions.map(i64::from),
                    activity_older_than_days: s.activity_older_than_days.map(i64::from),
                };
                q::put_policy(c, a, new, instant(now)?).await?;
                let row = q::policy_of(c, a).await?;
                policy_from_plain(row.ok_or(sqlx::Error::RowNotFound)?)
            }
        }
    }
}

/// Forgets an agent's policy.
#[derive(Debug)]
pub(crate) struct ClearPolicy {
    pub(crate) agent: AgentId,
}

impl Write for ClearPolicy {
    type Output = bool;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<bool> {
        lock_agent(conn, self.agent).await?;
        let done = match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::retention::delete_policy(c, &self.agent.to_string()).await?
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::retention::delete_policy(c, self.agent.0).await?
            }
        };
        Ok(done > 0)
    }
}

fn stored_u32(v: Option<i64>) -> Result<Option<u32>> {
    v.map(|v| {
        u32::try_from(v).map_err(|_| {
            Error::Storage(StorageError::Corrupt(format!(
                "a stored retention value is out of range: {v}"
            )))
        })
    })
    .transpose()
}

/// A stored policy from either engine's checked row ([`FromStored`]).
fn policy_from_plain(row: impl FromStored<StoredRetention>) -> Result<StoredRetention> {
    row.into_domain()
}

/// [`FromStored`] for the policy rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! policy_from_stored {
    ($engine:ident) => {
        impl FromStored<StoredRetention> for $engine::retention::PolicyRow {
            fn into_domain(self) -> Result<StoredRetention> {
                let settings = RetentionSettings {
                    batches_older_than_days: stored_u32(self.batches_older_than_days)?,
                    batch_disposal: BatchDisposal::parse(&self.batch_disposal).map_err(|e| {
                        StorageError::Corrupt(format!("a stored retention policy: {e}"))
                    })?,
                    keep_block_versions: stored_u32(self.keep_block_versions)?,
                    activity_older_than_days: stored_u32(self.activity_older_than_days)?,
                };
                // What a stored row says is checked like what a caller gives: a row written
                // around the API never turns into a zero age.
                settings.check().map_err(|e| {
                    StorageError::Corrupt(format!("a stored retention policy: {e}"))
                })?;
                Ok(StoredRetention {
                    agent: AgentId(self.agent_id.uuid()?),
                    settings,
                    updated_at: self.updated_at.time(),
                })
            }
        }
    };
}

policy_from_stored!(pattern_db_sqlite);
policy_from_stored!(pattern_db_postgres);

/// The stored policy of `agent`, or every stored policy (by agent id).
pub(crate) async fn policy(pool: &Pool, agent: Option<AgentId>) -> Result<Vec<StoredRetention>> {
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::retention as q;
            let rows = match agent {
                Some(a) => q::policy_of(c, &a.to_string()).await?.into_iter().collect(),
                None => q::policies(c).await?,
            };
            rows.into_iter().map(policy_from_plain).collect()
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::retention as q;
            let rows = match agent {
                Some(a) => q::policy_of(c, a.0).await?.into_iter().collect(),
                None => q::policies(c).await?,
            };
            rows.into_iter().map(policy_from_plain).collect()
        }
    }
}

/// The batch ids of `agent`'s unfinished archive plan.
async fn planned(conn: &mut Conn<'_>, agent: AgentId) -> Result<Option<Vec<i64>>> {
    let text = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::retention::plan_of(c, &agent.to_string()).await?,
        Conn::Postgres(c) => pattern_db_postgres::retention::plan_of(c, agent.0).await?,
    };
    text.map(|text| {
        serde_json::from_str::<Vec<i64>>(&text).map_err(|e| {
            Error::Storage(StorageError::Corrupt(format!(
                "an archive plan does not decode: {e}"
            )))
        })
    })
    .transpose()
}

/// Batches of `agent` a pass may delete: not open, older than `cutoff` (by completion, else
/// start), and abandoned or archived under a summary; oldest first.
async fn eligible(conn: &mut Conn<'_>, agent: AgentId, cutoff: i64) -> Result<Vec<i64>> {
    Ok(match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::retention::eligible_batches(c, &agent.to_string(), cutoff).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::retention::eligible_batches(c, agent.0, instant(cutoff)?).await?
        }
    })
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

fn age_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

async fn retain(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    policy: &AgentRetention,
) -> Result<AgentRetentionReport> {
    let mut report = AgentRetentionReport {
        agent,
        dry_run: policy.dry_run,
        batch_disposal: policy.batch_disposal,
        ..AgentRetentionReport::default()
    };
    let id = agent.to_string();
    let now = now_ms();
    if let Some(age) = policy.batches_older_than {
        let eligible = eligible(conn, agent, now.saturating_sub(age_ms(age))).await?;
        let ids: Vec<i64> = match policy.batch_disposal {
            BatchDisposal::Delete => eligible,
            BatchDisposal::Archive => {
                // Only what a plan recorded (and so its caller wrote to the archive) goes; a dry
                // run without a plan reports what a plan would take.
                let planned = planned(conn, agent).await?;
                if !policy.dry_run && planned.is_some() {
                    match conn {
                        Conn::Sqlite(c) => {
                            pattern_db_sqlite::retention::delete_plan(c, &id).await?
                        }
                        Conn::Postgres(c) => {
                            pattern_db_postgres::retention::delete_plan(c, agent.0).await?
                        }
                    };
                }
                match planned {
                    Some(p) => eligible.into_iter().filter(|b| p.contains(b)).collect(),
                    None if policy.dry_run => eligible,
                    None => Vec::new(),
                }
            }
        };
        for chunk in ids.chunks(500) {
            let list = placeholders(1, chunk.len(), 2);
            let count_sql = format!(
                "SELECT COUNT(*) FROM messages m JOIN batches b ON b.id = m.batch_id \
                 WHERE b.agent_id = $1 AND m.batch_id IN {list}"
            );
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(count_sql)).bind(id.clone());
            for b in chunk {
                q = q.bind(*b);
            }
            let n: i64 = q.fetch_one(&mut *conn).await?.try_get(0)?;
            report.deleted_messages += u64::try_from(n).unwrap_or(0);
            if policy.dry_run {
                continue;
            }
            // Live messages leave search (vector, job, a logged delete) first.
            search::batches_archived(conn, ctx, chunk).await?;
            // The batches are the agent's (`eligible` picked them by agent), so their rows are.
            for table in ["messages", "tool_calls"] {
                let sql = format!("DELETE FROM {table} WHERE $1 = $1 AND batch_id IN {list}");
                let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
                for b in chunk {
                    q = q.bind(*b);
                }
                q.execute(&mut *conn).await?;
            }
            let sql = format!(
                "UPDATE batches SET parent_batch = NULL WHERE agent_id = $1 AND parent_batch IN {list}"
            );
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
            for b in chunk {
                q = q.bind(*b);
            }
            q.execute(&mut *conn).await?;
            let sql = format!("DELETE FROM batches WHERE agent_id = $1 AND id IN {list}");
            let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
            for b in chunk {
                q = q.bind(*b);
            }
            q.execute(&mut *conn).await?;
        }
        report.deleted_batches = ids;
        // Summaries a newer one contains (recursive summarisation folds each into the next; the
        // context reads only the newest): they cover no batch the newer one does not, so no
        // batch's eligibility changes, and the newest always stays.
        let cutoff = now.saturating_sub(age_ms(age));
        report.deleted_summaries = counted(match (&mut *conn, policy.dry_run) {
            (Conn::Sqlite(c), true) => Counted::Rows(
                pattern_db_sqlite::retention::count_folded_summaries(c, &id, cutoff).await?,
            ),
            (Conn::Sqlite(c), false) => Counted::Done(
                pattern_db_sqlite::retention::delete_folded_summaries(c, &id, cutoff).await?,
            ),
            (Conn::Postgres(c), true) => Counted::Rows(
                pattern_db_postgres::retention::count_folded_summaries(
                    c,
                    agent.0,
                    instant(cutoff)?,
                )
                .await?,
            ),
            (Conn::Postgres(c), false) => Counted::Done(
                pattern_db_postgres::retention::delete_folded_summaries(
                    c,
                    agent.0,
                    instant(cutoff)?,
                )
                .await?,
            ),
        });
    }
    if let Some(keep) = policy.keep_block_versions {
        // Beyond the last `keep` versions, only the last version of each day stays.
        let keep = i64::from(keep);
        report.deleted_block_versions = counted(match (&mut *conn, policy.dry_run) {
            (Conn::Sqlite(c), true) => Counted::Rows(
                pattern_db_sqlite::retention::count_old_block_versions(c, &id, keep, DAY_MS)
                    .await?,
            ),
            (Conn::Sqlite(c), false) => Counted::Done(
                pattern_db_sqlite::retention::delete_old_block_versions(c, &id, keep, DAY_MS)
                    .await?,
            ),
            (Conn::Postgres(c), true) => Counted::Rows(
                pattern_db_postgres::retention::count_old_block_versions(c, agent.0, keep, DAY_MS)
                    .await?,
            ),
            (Conn::Postgres(c), false) => Counted::Done(
                pattern_db_postgres::retention::delete_old_block_versions(c, agent.0, keep, DAY_MS)
                    .await?,
            ),
        });
    }
    if let Some(age) = policy.activity_older_than {
        let cutoff = now.saturating_sub(age_ms(age));
        report.deleted_activity_events = counted(match (&mut *conn, policy.dry_run) {
            (Conn::Sqlite(c), true) => Counted::Rows(
                pattern_db_sqlite::retention::count_old_activity(c, &id, cutoff).await?,
            ),
            (Conn::Sqlite(c), false) => Counted::Done(
                pattern_db_sqlite::retention::delete_old_activity(c, &id, cutoff).await?,
            ),
            (Conn::Postgres(c), true) => Counted::Rows(
                pattern_db_postgres::retention::count_old_activity(c, agent.0, instant(cutoff)?)
                    .await?,
            ),
            (Conn::Postgres(c), false) => Counted::Done(
                pattern_db_postgres::retention::delete_old_activity(c, agent.0, instant(cutoff)?)
                    .await?,
            ),
        });
    }
    Ok(report)
}

/// What a dry run counted or a pass deleted.
enum Counted {
    /// A dry run's `COUNT(*)`.
    Rows(i64),
    /// A delete's rows affected.
    Done(u64),
}

/// How many rows a dry run counted or a pass deleted.
fn counted(n: Counted) -> u64 {
    match n {
        Counted::Rows(n) => u64::try_from(n).unwrap_or(0),
        Counted::Done(n) => n,
    }
}
