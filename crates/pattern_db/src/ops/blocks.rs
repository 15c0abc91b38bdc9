//! The memory-block domain's writes ([`CreateBlock`], [`SetValue`], [`Share`], [`DeleteBlock`])
//! and their SQL, run by the writer inside a transaction.
//!
//! Each write locks the block owner's agent ([`Locks::agent`]); each function first locks the block
//! owner's agent row (on PostgreSQL; on SQLite the single writer serialises anyway), then checks
//! access, permission, limit and version, and only then changes anything, so a refused write leaves
//! no trace. Like the rest of `ops`, these functions must never commit, roll back or open a
//! transaction of their own.

use crate::sql::Conn;
use crate::{AgentError, BlockError};
use uuid::Uuid;

use super::{Ctx, is_unique_violation, lock_agent, now_ms, search};
use crate::blocks::{NewBlock, StoredBlock, block_from_plain, check_limit};
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::{from_ms, parse_uuid};
use crate::runs::RunClaim;
use crate::search::ContentType;
use crate::sql::instant;
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
    let row = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::blocks::seen_as(c, &agent.to_string(), label)
            .await?
            .map(block_from_plain),
        Conn::Postgres(c) => pattern_db_postgres::blocks::seen_as(c, agent.0, label)
            .await?
            .map(block_from_plain),
    };
    match row {
        Some(block) => block,
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
    Ok(block_of_label(conn, agent, label).await?.is_some())
}

/// The id of the block `agent` sees as `label`, if any.
async fn block_of_label(conn: &mut Conn<'_>, agent: AgentId, label: &str) -> Result<Option<Uuid>> {
    Ok(match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::blocks::block_of_label(c, &agent.to_string(), label)
            .await?
            .map(|id| parse_uuid(&id))
            .transpose()?,
        Conn::Postgres(c) => pattern_db_postgres::blocks::block_of_label(c, agent.0, label).await?,
    })
}

/// Gives `agent` access to `block` as `label` with `permission`; sqlx's error unchanged (the
/// caller maps a unique violation).
async fn insert_access(
    conn: &mut Conn<'_>,
    block: Uuid,
    agent: AgentId,
    label: &str,
    permission: &str,
) -> std::result::Result<u64, sqlx::Error> {
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::blocks::insert_access(
                c,
                &block.to_string(),
                &agent.to_string(),
                label,
                permission,
            )
            .await
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::blocks::insert_access(c, block, agent.0, label, permission).await
        }
    }
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
    let by = by.to_string();
    match conn {
        Conn::Sqlite(c) => {
            let block = block.to_string();
            pattern_db_sqlite::blocks::insert_version(
                c,
                &pattern_db_sqlite::blocks::NewVersion {
                    block_id: &block,
                    version,
                    value,
                    description,
                    changed_by: &by,
                    change,
                    created_at: at,
                },
            )
            .await?;
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::blocks::insert_version(
                c,
                &pattern_db_postgres::blocks::NewVersion {
                    block_id: block,
                    version,
                    value,
                    description,
                    changed_by: &by,
                    change,
                    created_at: instant(at)?,
                },
            )
            .await?;
        }
    }
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
    let inserted = match conn {
        Conn::Sqlite(c) => {
            let (id, owner) = (id.to_string(), owner.to_string());
            pattern_db_sqlite::blocks::insert(
                c,
                &pattern_db_sqlite::blocks::NewBlock {
                    id: &id,
                    owner_agent_id: &owner,
                    label: &new.label,
                    description: &new.description,
                    value: &new.value,
                    char_limit: new.char_limit,
                    block_type: &new.block_type,
                    created_at: now,
                },
            )
            .await
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::blocks::insert(
                c,
                &pattern_db_postgres::blocks::NewBlock {
                    id,
                    owner_agent_id: owner.0,
                    label: &new.label,
                    description: &new.description,
                    value: &new.value,
                    char_limit: new.char_limit,
                    block_type: &new.block_type,
                    created_at: instant(now)?,
                },
            )
            .await
        }
    };
    match inserted {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => return Err(taken()),
        Err(e) => return Err(e.into()),
    }
    insert_access(conn, id, owner, &new.label, "admin").await?;
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
    let updated = match conn {
        Conn::Sqlite(c) => {
            let id = block.id.to_string();
            pattern_db_sqlite::blocks::set_value(c, &id, &value, now, w.expected).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::blocks::set_value(c, block.id, &value, instant(now)?, w.expected)
                .await?
        }
    };
    if updated == 0 {
        let current = match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::blocks::version(c, &block.id.to_string()).await?,
            Conn::Postgres(c) => pattern_db_postgres::blocks::version(c, block.id).await?,
        };
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
    let previous = block.version - 1;
    let value = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::blocks::value_at(c, &block.id.to_string(), previous).await?
        }
        Conn::Postgres(c) => pattern_db_postgres::blocks::value_at(c, block.id, previous).await?,
    };
    match value {
        Some(value) => Ok(value),
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
        let removed = match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::blocks::delete_access(
                    c,
                    &block.id.to_string(),
                    &with.to_string(),
                )
                .await?
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::blocks::delete_access(c, block.id, with.0).await?
            }
        };
        if removed == 0 {
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
    let exists = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::agents::exists(c, &with.to_string()).await?,
        Conn::Postgres(c) => pattern_db_postgres::agents::exists(c, with.0).await?,
    };
    if !exists {
        return Err(AgentError::NotFound(with).into());
    }
    let current = block_of_label(conn, with, &block.label).await?;
    match current {
        Some(id) if id == block.id => match conn {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::blocks::set_permission(
                    c,
                    &block.id.to_string(),
                    &with.to_string(),
                    permission,
                )
                .await?;
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::blocks::set_permission(c, block.id, with.0, permission)
                    .await?;
            }
        },
        Some(_) => {
            return Err(BlockError::LabelTaken {
                agent: with,
                label: block.label,
            }
            .into());
        }
        None => {
            let inserted = insert_access(conn, block.id, with, &block.label, permission).await;
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
    match conn {
        Conn::Sqlite(c) => {
            use pattern_db_sqlite::blocks as b;
            b::delete_versions(c, &id).await?;
            b::delete_all_access(c, &id).await?;
            b::delete(c, &id).await?;
        }
        Conn::Postgres(c) => {
            use pattern_db_postgres::blocks as b;
            b::delete_versions(c, block.id).await?;
            b::delete_all_access(c, block.id).await?;
            b::delete(c, block.id).await?;
        }
    }
    Ok(())
}
