//! Per-agent retention (`crate::retention`) as one write ([`RetainAgent`]): candidates chosen by
//! one statement per kind, counted on a dry run, deleted otherwise, all inside the writer's
//! transaction. It must
//! never delete a row of another agent, an open batch, or a batch no summary covers unless it
//! was abandoned.

use sqlx::{AnyConnection, Row};

use crate::config::Backend;
use crate::error::Result;
use crate::model::AgentId;
use crate::ops::{Ctx, now_ms, placeholders, search};
use crate::retention::{AgentRetention, AgentRetentionReport};
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
        conn: &mut AnyConnection,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<AgentRetentionReport> {
        retain(conn, ctx, self.agent, &self.policy).await
    }
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

fn age_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
}

async fn retain(
    conn: &mut AnyConnection,
    ctx: &Ctx,
    agent: AgentId,
    policy: &AgentRetention,
) -> Result<AgentRetentionReport> {
    let mut report = AgentRetentionReport {
        agent,
        dry_run: policy.dry_run,
        ..AgentRetentionReport::default()
    };
    let id = agent.to_string();
    let now = now_ms();
    if let Some(age) = policy.batches_older_than {
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
        let ids: Vec<i64> = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id.clone())
            .bind(now.saturating_sub(age_ms(age)))
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<i64, _>(0))
            .collect::<std::result::Result<_, _>>()?;
        for chunk in ids.chunks(500) {
            let list = placeholders(1, chunk.len(), 2);
            let count_sql =
                format!("SELECT COUNT(*) FROM messages WHERE agent_id = $1 AND batch_id IN {list}");
            let mut q = sqlx::query(sqlx::AssertSqlSafe(count_sql)).bind(id.clone());
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
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
                for b in chunk {
                    q = q.bind(*b);
                }
                q.execute(&mut *conn).await?;
            }
            let sql = format!(
                "UPDATE batches SET parent_batch = NULL WHERE agent_id = $1 AND parent_batch IN {list}"
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
            for b in chunk {
                q = q.bind(*b);
            }
            q.execute(&mut *conn).await?;
            let sql = format!("DELETE FROM batches WHERE agent_id = $1 AND id IN {list}");
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id.clone());
            for b in chunk {
                q = q.bind(*b);
            }
            q.execute(&mut *conn).await?;
        }
        report.deleted_batches = ids;
    }
    if let Some(keep) = policy.keep_block_versions {
        // Beyond the last `keep` versions, only the last version of each day stays.
        let filter = "FROM memory_block_versions WHERE block_id IN \
             (SELECT id FROM memory_blocks WHERE owner_agent_id = $1) \
             AND version <= (SELECT MAX(v2.version) FROM memory_block_versions v2 \
                 WHERE v2.block_id = memory_block_versions.block_id) - $2 \
             AND version <> (SELECT MAX(v3.version) FROM memory_block_versions v3 \
                 WHERE v3.block_id = memory_block_versions.block_id \
                 AND v3.created_at / $3 = memory_block_versions.created_at / $3)";
        let verb = if policy.dry_run {
            "SELECT COUNT(*) "
        } else {
            "DELETE "
        };
        let q = sqlx::query(sqlx::AssertSqlSafe(format!("{verb}{filter}")))
            .bind(id.clone())
            .bind(i64::from(keep))
            .bind(DAY_MS);
        report.deleted_block_versions = if policy.dry_run {
            u64::try_from(q.fetch_one(&mut *conn).await?.try_get::<i64, _>(0)?).unwrap_or(0)
        } else {
            q.execute(&mut *conn).await?.rows_affected()
        };
    }
    if let Some(age) = policy.activity_older_than {
        let filter = "FROM activity_events WHERE agent_id = $1 AND created_at < $2";
        let cutoff = now.saturating_sub(age_ms(age));
        report.deleted_activity_events = if policy.dry_run {
            let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) {filter}")))
                .bind(id.clone())
                .bind(cutoff)
                .fetch_one(&mut *conn)
                .await?
                .try_get(0)?;
            u64::try_from(n).unwrap_or(0)
        } else {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE {filter}")))
                .bind(id.clone())
                .bind(cutoff)
                .execute(&mut *conn)
                .await?
                .rows_affected()
        };
    }
    Ok(report)
}
