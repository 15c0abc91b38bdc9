//! The SQL of per-agent retention (`crate::retention`): a pass as one write ([`RetainAgent`]):
//! candidates chosen by one statement per kind, counted on a dry run, deleted otherwise, all
//! inside the writer's transaction; an archive plan ([`PlanArchive`]); the stored policies
//! ([`SetPolicy`], [`ClearPolicy`], [`policy`]). It must never delete a row of another agent, an
//! open batch, or a batch no summary covers unless it was abandoned, and never return a stored
//! policy that does not pass `RetentionSettings::check`.

use crate::StorageError;
use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::Row;

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::model::{AgentId, BatchId};
use crate::ops::{Ctx, from_ms, lock_agent, now_ms, parse_uuid, placeholders, search};
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
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Vec<BatchId>> {
        lock_agent(conn, self.agent).await?;
        if let Some(planned) = planned(conn, self.agent).await? {
            return Ok(planned.into_iter().map(crate::id::SnowflakeId).collect());
        }
        let cutoff = now_ms().saturating_sub(age_ms(self.older_than));
        let ids = eligible(conn, ctx, self.agent, cutoff).await?;
        if !ids.is_empty() {
            let text = serde_json::to_string(&ids).map_err(|e| {
                StorageError::Corrupt(format!("an archive plan does not encode: {e}"))
            })?;
            crate::sql::query(
                "INSERT INTO retention_exports (agent_id, batch_ids, created_at) VALUES ($1, $2, $3)",
            )
            .bind(self.agent.to_string())
            .bind(text)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?;
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
        crate::sql::query(
            "INSERT INTO retention_policies (agent_id, batches_older_than_days, batch_disposal, \
             keep_block_versions, activity_older_than_days, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (agent_id) DO UPDATE SET \
             batches_older_than_days = excluded.batches_older_than_days, \
             batch_disposal = excluded.batch_disposal, \
             keep_block_versions = excluded.keep_block_versions, \
             activity_older_than_days = excluded.activity_older_than_days, \
             updated_at = excluded.updated_at",
        )
        .bind(self.agent.to_string())
        .bind(s.batches_older_than_days.map(i64::from))
        .bind(s.batch_disposal.as_str())
        .bind(s.keep_block_versions.map(i64::from))
        .bind(s.activity_older_than_days.map(i64::from))
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
        let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {POLICY_COLUMNS} FROM retention_policies WHERE agent_id = $1"
        )))
        .bind(self.agent.to_string())
        .fetch_one(&mut *conn)
        .await?;
        policy_from_row(&row)
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
        let done = crate::sql::query("DELETE FROM retention_policies WHERE agent_id = $1")
            .bind(self.agent.to_string())
            .execute(&mut *conn)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

const POLICY_COLUMNS: &str = "agent_id, batches_older_than_days, batch_disposal, \
     keep_block_versions, activity_older_than_days, updated_at";

fn stored_u32(row: &Row, i: usize) -> Result<Option<u32>> {
    let v: Option<i64> = row.try_get(i)?;
    v.map(|v| {
        u32::try_from(v).map_err(|_| {
            Error::Storage(StorageError::Corrupt(format!(
                "a stored retention value is out of range: {v}"
            )))
        })
    })
    .transpose()
}

fn policy_from_row(row: &Row) -> Result<StoredRetention> {
    let agent: String = row.try_get(0)?;
    let disposal: String = row.try_get(2)?;
    let settings = RetentionSettings {
        batches_older_than_days: stored_u32(row, 1)?,
        batch_disposal: BatchDisposal::parse(&disposal)
            .map_err(|e| StorageError::Corrupt(format!("a stored retention policy: {e}")))?,
        keep_block_versions: stored_u32(row, 3)?,
        activity_older_than_days: stored_u32(row, 4)?,
    };
    // What a stored row says is checked like what a caller gives: a row written around the API
    // never turns into a zero age.
    settings
        .check()
        .map_err(|e| StorageError::Corrupt(format!("a stored retention policy: {e}")))?;
    Ok(StoredRetention {
        agent: AgentId(parse_uuid(&agent)?),
        settings,
        updated_at: from_ms(row.try_get(5)?),
    })
}

/// The stored policy of `agent`, or every stored policy (by agent id).
pub(crate) async fn policy(pool: &Pool, agent: Option<AgentId>) -> Result<Vec<StoredRetention>> {
    let rows = match agent {
        Some(a) => {
            crate::sql::query(sqlx::AssertSqlSafe(format!(
                "SELECT {POLICY_COLUMNS} FROM retention_policies WHERE agent_id = $1"
            )))
            .bind(a.to_string())
            .fetch_all(pool)
            .await?
        }
        None => {
            crate::sql::query(sqlx::AssertSqlSafe(format!(
                "SELECT {POLICY_COLUMNS} FROM retention_policies ORDER BY agent_id"
            )))
            .fetch_all(pool)
            .await?
        }
    };
    rows.iter().map(policy_from_row).collect()
}

/// The batch ids of `agent`'s unfinished archive plan.
async fn planned(conn: &mut Conn<'_>, agent: AgentId) -> Result<Option<Vec<i64>>> {
    let row = crate::sql::query("SELECT batch_ids FROM retention_exports WHERE agent_id = $1")
        .bind(agent.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|r| {
        let text: String = r.try_get(0)?;
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
async fn eligible(conn: &mut Conn<'_>, ctx: &Ctx, agent: AgentId, cutoff: i64) -> Result<Vec<i64>> {
    let archived = match ctx.backend {
        Backend::Sqlite => "b.archived = 1",
        Backend::Postgres => "b.archived",
    };
    let sql = format!(
        "SELECT b.id FROM batches b WHERE b.agent_id = $1 AND b.state <> 'open' \
         AND COALESCE(b.completed_at, b.started_at) < $2 \
         AND (b.state = 'abandoned' OR ({archived} AND EXISTS (SELECT 1 FROM summaries s \
              WHERE s.agent_id = b.agent_id AND s.from_batch <= b.id AND b.id <= s.through_batch))) \
         ORDER BY b.id"
    );
    Ok(crate::sql::query(sqlx::AssertSqlSafe(sql))
        .bind(agent.to_string())
        .bind(cutoff)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<std::result::Result<_, _>>()?)
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
        let eligible = eligible(conn, ctx, agent, now.saturating_sub(age_ms(age))).await?;
        let ids: Vec<i64> = match policy.batch_disposal {
            BatchDisposal::Delete => eligible,
            BatchDisposal::Archive => {
                // Only what a plan recorded (and so its caller wrote to the archive) goes; a dry
                // run without a plan reports what a plan would take.
                let planned = planned(conn, agent).await?;
                if !policy.dry_run && planned.is_some() {
                    crate::sql::query("DELETE FROM retention_exports WHERE agent_id = $1")
                        .bind(id.clone())
                        .execute(&mut *conn)
                        .await?;
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
            let count_sql =
                format!("SELECT COUNT(*) FROM messages WHERE agent_id = $1 AND batch_id IN {list}");
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
            for table in ["messages", "tool_calls"] {
                let agent_filter = if table == "messages" {
                    "agent_id = $1 AND "
                } else {
                    "$1 = $1 AND "
                };
                let sql = format!("DELETE FROM {table} WHERE {agent_filter}batch_id IN {list}");
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
        let filter = "FROM summaries WHERE agent_id = $1 AND created_at < $2 AND EXISTS \
             (SELECT 1 FROM summaries t WHERE t.agent_id = summaries.agent_id \
              AND t.from_batch <= summaries.from_batch AND t.through_batch >= summaries.through_batch \
              AND (t.through_batch > summaries.through_batch OR t.id > summaries.id))";
        let cutoff = now.saturating_sub(age_ms(age));
        report.deleted_summaries =
            count_or_delete(conn, policy.dry_run, filter, &id, &[cutoff]).await?;
    }
    if let Some(keep) = policy.keep_block_versions {
        // Beyond the last `keep` versions, only the last version of each day stays.
        let backend = conn.backend();
        let day = |column: &str| format!("{} / $3", crate::sql::millis_of(backend, column));
        let filter = format!(
            "FROM memory_block_versions WHERE block_id IN \
             (SELECT id FROM memory_blocks WHERE owner_agent_id = $1) \
             AND version <= (SELECT MAX(v2.version) FROM memory_block_versions v2 \
                 WHERE v2.block_id = memory_block_versions.block_id) - $2 \
             AND version <> (SELECT MAX(v3.version) FROM memory_block_versions v3 \
                 WHERE v3.block_id = memory_block_versions.block_id \
                 AND {} = {})",
            day("v3.created_at"),
            day("memory_block_versions.created_at")
        );
        report.deleted_block_versions = count_or_delete(
            conn,
            policy.dry_run,
            &filter,
            &id,
            &[i64::from(keep), DAY_MS],
        )
        .await?;
    }
    if let Some(age) = policy.activity_older_than {
        let filter = "FROM activity_events WHERE agent_id = $1 AND created_at < $2";
        let cutoff = now.saturating_sub(age_ms(age));
        report.deleted_activity_events =
            count_or_delete(conn, policy.dry_run, filter, &id, &[cutoff]).await?;
    }
    Ok(report)
}

/// Counts (on a dry run) or deletes the rows `filter` (`FROM ... WHERE ...`: `$1` the agent's
/// id, then `$2`, `$3`... the `numbers`) selects; returns how many.
async fn count_or_delete(
    conn: &mut Conn<'_>,
    dry_run: bool,
    filter: &str,
    agent: &str,
    numbers: &[i64],
) -> Result<u64> {
    let verb = if dry_run {
        "SELECT COUNT(*) "
    } else {
        "DELETE "
    };
    let mut q =
        crate::sql::query(sqlx::AssertSqlSafe(format!("{verb}{filter}"))).bind(agent.to_owned());
    for n in numbers {
        q = q.bind(*n);
    }
    Ok(if dry_run {
        u64::try_from(q.fetch_one(&mut *conn).await?.try_get::<i64, _>(0)?).unwrap_or(0)
    } else {
        q.execute(&mut *conn).await?.rows_affected()
    })
}
