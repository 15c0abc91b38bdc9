//! The memory-block domain's writes ([`CreateBlock`], [`SetValue`], [`Share`], [`DeleteBlock`])
//! and their SQL, run by the writer inside a transaction.
//!
//! Each write locks the block owner's agent ([`Locks::agent`]); each function first locks the block
//! owner's agent row (on PostgreSQL; on SQLite the single writer serialises anyway), then checks
//! access, permission, limit and version, and only then changes anything, so a refused write leaves
//! no trace. Like the rest of `ops`, these functions must never commit, roll back or open a
//! transaction of their own.

use crate::sql::Conn;
use crate::sql::Row;
use crate::{AgentError, BlockError};
use uuid::Uuid;

use super::{Ctx, is_unique_violation, lock_agent, now_ms, search};
use crate::blocks::{BLOCK_COLUMNS, NewBlock, StoredBlock, block_from_row, check_limit};
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::from_ms;
use crate::runs::RunClaim;
use crate::search::ContentType;
use crate::writer::{Locks, Write};

/// Creates a block owned by `owner`.
#[derive(Debug)]
pub(crate) struct CreateBlock {
    pub(crate) owner: AgentId,
    pub(crate) new: NewBlock,
}

impl Write for CreateBlock {
    type Output = StoredBlock;

    fn locks(&self) -> Locks {
        Locks::agent(self.owner)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<StoredBlock> {
        // Checked here, so a write composed into another (an import) is checked the same.
        crate::blocks::validate_new(&self.new)?;
        create_block(conn, ctx, self.owner, &self.new).await
    }
}

/// A new version of a block `agent` sees as `label`; `value: None` is an undo.
#[derive(Debug)]
pub(crate) struct SetValue {
    pub(crate) agent: AgentId,
    pub(crate) owner: AgentId,
    pub(crate) label: String,
    pub(crate) expected: i64,
    pub(crate) value: Option<String>,
    pub(crate) change: String,
    pub(crate) allowed: Vec<String>,
}

impl Write for SetValue {
    type Output = i64;

    fn locks(&self) -> Locks {
        Locks::agent(self.owner)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<i64> {
        let change = ValueChange {
            agent: self.agent,
            owner: self.owner,
            label: &self.label,
            expected: self.expected,
            value: self.value.as_deref(),
            change: &self.change,
            allowed: &self.allowed,
        };
        write_block(conn, ctx, change).await
    }
}

/// Shares the block `agent` sees as `label` with `with` (`permission`), or unshares (`None`).
#[derive(Debug)]
pub(crate) struct Share {
    pub(crate) agent: AgentId,
    pub(crate) owner: AgentId,
    pub(crate) label: String,
    pub(crate) with: AgentId,
    pub(crate) permission: Option<String>,
}

impl Write for Share {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::agent(self.owner)
    }

    async fn apply(&self, conn: &mut Conn<'_>, ctx: &Ctx, _fence: Option<&RunClaim>) -> Result<()> {
        share_block(
            conn,
            ctx,
            self.agent,
            self.owner,
            &self.label,
            self.with,
            self.permission.as_deref(),
        )
        .await
    }
}

/// Deletes the block `agent` (an `admin`) sees as `label`.
#[derive(Debug)]
pub(crate) struct DeleteBlock {
    pub(crate) agent: AgentId,
    pub(crate) owner: AgentId,
    pub(crate) label: String,
}

impl Write for DeleteBlock {
    type Output = ();

    fn locks(&self) -> Locks {
        // Its content leaves the search indexes.
        Locks::agent(self.owner).logging_changes()
    }

    async fn apply(&self, conn: &mut Conn<'_>, ctx: &Ctx, _fence: Option<&RunClaim>) -> Result<()> {
        delete_block(conn, ctx, self.agent, self.owner, &self.label).await
    }
}

/// Locks `owner` (the block's owner as read before the write was queued). An owner that is gone
/// took its blocks with it: the block is not found.
async fn lock_owner(
    conn: &mut Conn<'_>,
    owner: AgentId,
    agent: AgentId,
    label: &str,
) -> Result<()> {
    match lock_agent(conn, owner).await {
        Err(Error::Agent(AgentError::NotFound(_))) => Err(BlockError::NotFound {
            agent,
            label: label.to_owned(),
        }
        .into()),
        other => other,
    }
}

/// The block `agent` sees as `label`, read inside the transaction.
async fn access(conn: &mut Conn<'_>, agent: AgentId, label: &str) -> Result<StoredBlock> {
    let row: Option<Row> = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "SELECT {BLOCK_COLUMNS} FROM memory_block_access a \
         JOIN memory_blocks b ON b.id = a.block_id WHERE a.agent_id = $1 AND a.label = $2"
    )))
    .bind(agent.to_string())
    .bind(label)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => block_from_row(&row),
        None => Err(BlockError::NotFound {
            agent,
            label: label.to_owned(),
        }
        .into()),
    }
}

/// Locks the owner and reads the block `agent` sees as `label`. Should the block have changed
/// hands since `owner` was read, its real owner is locked too.
async fn locked_access(
    conn: &mut Conn<'_>,
    agent: AgentId,
    owner: AgentId,
    label: &str,
) -> Result<StoredBlock> {
    lock_owner(conn, owner, agent, label).await?;
    let block = access(conn, agent, label).await?;
    if block.owner != owner {
        lock_owner(conn, block.owner, agent, label).await?;
    }
    Ok(block)
}

fn require_admin(block: &StoredBlock) -> Result<()> {
    if block.permission == "admin" {
        Ok(())
    } else {
        Err(BlockError::PermissionDenied {
            label: block.label.clone(),
            permission: block.permission.clone(),
        }
        .into())
    }
}

async fn label_used_by(conn: &mut Conn<'_>, agent: AgentId, label: &str) -> Result<bool> {
    Ok(crate::sql::query(
        "SELECT block_id FROM memory_block_access WHERE agent_id = $1 AND label = $2",
    )
    .bind(agent.to_string())
    .bind(label)
    .fetch_optional(&mut *conn)
    .await?
    .is_some())
}

#[allow(clippy::too_many_arguments)]
async fn insert_version(
    conn: &mut Conn<'_>,
    block: Uuid,
    version: i64,
    value: &str,
    description: &str,
    by: AgentId,
    change: &str,
    at: i64,
) -> Result<()> {
    crate::sql::query(
        "INSERT INTO memory_block_versions \
         (block_id, version, value, description, changed_by, change, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(block.to_string())
    .bind(version)
    .bind(value)
    .bind(description)
    .bind(by.to_string())
    .bind(change)
    .bind(at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Creates a block, the owner's `admin` access row and version 1.
async fn create_block(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    owner: AgentId,
    new: &NewBlock,
) -> Result<StoredBlock> {
    lock_agent(conn, owner).await?;
    let taken = || {
        Error::Block(BlockError::LabelTaken {
            agent: owner,
            label: new.label.clone(),
        })
    };
    if label_used_by(conn, owner, &new.label).await? {
        return Err(taken());
    }
    let id = Uuid::now_v7();
    let now = now_ms();
    let inserted = crate::sql::query(
        "INSERT INTO memory_blocks (id, owner_agent_id, label, description, value, char_limit, \
         block_type, version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8)",
    )
    .bind(id.to_string())
    .bind(owner.to_string())
    .bind(&new.label)
    .bind(&new.description)
    .bind(&new.value)
    .bind(new.char_limit)
    .bind(&new.block_type)
    .bind(now)
    .execute(&mut *conn)
    .await;
    match inserted {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => return Err(taken()),
        Err(e) => return Err(e.into()),
    }
    crate::sql::query(
        "INSERT INTO memory_block_access (block_id, agent_id, label, permission) \
         VALUES ($1, $2, $3, 'admin')",
    )
    .bind(id.to_string())
    .bind(owner.to_string())
    .bind(&new.label)
    .execute(&mut *conn)
    .await?;
    insert_version(
        conn,
        id,
        1,
        &new.value,
        &new.description,
        owner,
        "create",
        now,
    )
    .await?;
    search::content_written(
        conn,
        ctx,
        &[(
            ContentType::Block,
            id.to_string(),
            owner,
            new.value.as_str(),
        )],
    )
    .await?;
    Ok(StoredBlock {
        id,
        owner,
        label: new.label.clone(),
        description: new.description.clone(),
        value: new.value.clone(),
        char_limit: new.char_limit,
        block_type: new.block_type.clone(),
        permission: "admin".to_owned(),
        version: 1,
        updated_at: from_ms(now),
    })
}

/// What a block write carries.
struct ValueChange<'a> {
    agent: AgentId,
    owner: AgentId,
    label: &'a str,
    expected: i64,
    /// The new value; `None` restores the previous version's value (undo).
    value: Option<&'a str>,
    change: &'a str,
    allowed: &'a [String],
}

/// Writes a new version of a block; returns its number.
async fn write_block(conn: &mut Conn<'_>, ctx: &Ctx, w: ValueChange<'_>) -> Result<i64> {
    let block = locked_access(conn, w.agent, w.owner, w.label).await?;
    if !w.allowed.contains(&block.permission) {
        return Err(BlockError::PermissionDenied {
            label: block.label,
            permission: block.permission,
        }
        .into());
    }
    let conflict = |current| {
        Error::Block(BlockError::VersionConflict {
            label: w.label.to_owned(),
            expected: w.expected,
            current,
        })
    };
    if block.version != w.expected {
        return Err(conflict(block.version));
    }
    let value = match w.value {
        Some(value) => value.to_owned(),
        None => previous_value(conn, &block).await?,
    };
    check_limit(&block.label, &value, block.char_limit)?;
    let now = now_ms();
    let updated = crate::sql::query(
        "UPDATE memory_blocks SET value = $1, version = version + 1, updated_at = $2 \
         WHERE id = $3 AND version = $4",
    )
    .bind(&value)
    .bind(now)
    .bind(block.id.to_string())
    .bind(w.expected)
    .execute(&mut *conn)
    .await?;
    if updated.rows_affected() == 0 {
        let current: i64 = crate::sql::query("SELECT version FROM memory_blocks WHERE id = $1")
            .bind(block.id.to_string())
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        return Err(conflict(current));
    }
    let version = w.expected + 1;
    insert_version(
        conn,
        block.id,
        version,
        &value,
        &block.description,
        w.agent,
        w.change,
        now,
    )
    .await?;
    search::content_written(
        conn,
        ctx,
        &[(
            ContentType::Block,
            block.id.to_string(),
            block.owner,
            value.as_str(),
        )],
    )
    .await?;
    Ok(version)
}

async fn previous_value(conn: &mut Conn<'_>, block: &StoredBlock) -> Result<String> {
    let row = crate::sql::query(
        "SELECT value FROM memory_block_versions WHERE block_id = $1 AND version = $2",
    )
    .bind(block.id.to_string())
    .bind(block.version - 1)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => Ok(row.try_get(0)?),
        None => Err(BlockError::NothingToUndo {
            label: block.label.clone(),
            version: block.version,
        }
        .into()),
    }
}

/// Gives `with` access with `permission`, or takes it away (`None`).
async fn share_block(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    owner: AgentId,
    label: &str,
    with: AgentId,
    permission: Option<&str>,
) -> Result<()> {
    let block = locked_access(conn, agent, owner, label).await?;
    require_admin(&block)?;
    let Some(permission) = permission else {
        if with == block.owner {
            return Err(BlockError::Invalid(format!(
                "the owner's access to block `{label}` cannot be taken away; delete the block instead"
            )).into());
        }
        let removed = crate::sql::query(
            "DELETE FROM memory_block_access WHERE block_id = $1 AND agent_id = $2",
        )
        .bind(block.id.to_string())
        .bind(with.to_string())
        .execute(&mut *conn)
        .await?;
        if removed.rows_affected() == 0 {
            return Err(BlockError::NotFound {
                agent: with,
                label: label.to_owned(),
            }
            .into());
        }
        return search::block_access_changed(conn, ctx, block.id, block.owner).await;
    };
    if with == block.owner && permission != "admin" {
        return Err(
            BlockError::Invalid(format!("the owner of block `{label}` keeps `admin`")).into(),
        );
    }
    let exists = crate::sql::query("SELECT id FROM agents WHERE id = $1")
        .bind(with.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        return Err(AgentError::NotFound(with).into());
    }
    let current = crate::sql::query(
        "SELECT block_id FROM memory_block_access WHERE agent_id = $1 AND label = $2",
    )
    .bind(with.to_string())
    .bind(&block.label)
    .fetch_optional(&mut *conn)
    .await?;
    match current {
        Some(row) if row.try_get::<String, _>(0)? == block.id.to_string() => {
            crate::sql::query(
                "UPDATE memory_block_access SET permission = $1 WHERE block_id = $2 AND agent_id = $3",
            )
            .bind(permission)
            .bind(block.id.to_string())
            .bind(with.to_string())
            .execute(&mut *conn)
            .await?;
        }
        Some(_) => {
            return Err(BlockError::LabelTaken {
                agent: with,
                label: block.label,
            }
            .into());
        }
        None => {
            let inserted = crate::sql::query(
                "INSERT INTO memory_block_access (block_id, agent_id, label, permission) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(block.id.to_string())
            .bind(with.to_string())
            .bind(&block.label)
            .bind(permission)
            .execute(&mut *conn)
            .await;
            match inserted {
                Ok(_) => {}
                Err(e) if is_unique_violation(&e) => {
                    return Err(BlockError::LabelTaken {
                        agent: with,
                        label: block.label,
                    }
                    .into());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    search::block_access_changed(conn, ctx, block.id, block.owner).await
}

/// Deletes a block with its access rows and history.
async fn delete_block(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    owner: AgentId,
    label: &str,
) -> Result<()> {
    let block = locked_access(conn, agent, owner, label).await?;
    require_admin(&block)?;
    let id = block.id.to_string();
    search::content_removed(conn, ctx, &[(ContentType::Block, id.clone(), block.owner)]).await?;
    // Explicit deletes rather than relying on cascades, which SQLite applies only with
    // `foreign_keys` on.
    for sql in [
        "DELETE FROM memory_block_versions WHERE block_id = $1",
        "DELETE FROM memory_block_access WHERE block_id = $1",
        "DELETE FROM memory_blocks WHERE id = $1",
    ] {
        crate::sql::query(sql).bind(&id).execute(&mut *conn).await?;
    }
    Ok(())
}
