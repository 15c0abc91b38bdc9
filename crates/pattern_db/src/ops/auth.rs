//! The SQL of API key and organization-agent writes: the domain's writes ([`CreateKey`],
//! [`RevokeKey`], [`DeleteOrgAgent`]) and the owner check they share.
//!
//! Writes run inside the writer's transaction; they must never commit, and never write a
//! secret (only its hash arrives here).

use crate::sql::Conn;
use crate::{AgentError, AuthError, ProtocolError};

use super::{Ctx, now_ms};
use crate::auth::{ApiKey, ApiKeyId, KEY_COLUMNS, NewKeyRow, key_from_row};
use crate::error::Result;
use crate::model::AgentId;
use crate::protocol::OrganizationId;
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// Stores a new key (its hash, never the secret).
#[derive(Debug)]
pub(crate) struct CreateKey(pub(crate) NewKeyRow);

impl Write for CreateKey {
    type Output = ApiKey;

    fn locks(&self) -> Locks {
        // One insert of a row nobody else knows yet: no agent lock.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<ApiKey> {
        create_key(conn, &self.0).await
    }
}

/// Revokes a key of an organization (again: no change).
#[derive(Debug)]
pub(crate) struct RevokeKey {
    pub(crate) org: OrganizationId,
    pub(crate) id: ApiKeyId,
}

impl Write for RevokeKey {
    type Output = ApiKey;

    fn locks(&self) -> Locks {
        // One conditional update of one row: no agent lock.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<ApiKey> {
        revoke_key(conn, self.org, self.id).await
    }
}

/// Deletes an organization's agent and everything stored for it, after checking the owner.
#[derive(Debug)]
pub(crate) struct DeleteOrgAgent {
    pub(crate) org: OrganizationId,
    pub(crate) agent: AgentId,
}

impl Write for DeleteOrgAgent {
    type Output = ();

    fn locks(&self) -> Locks {
        // Its content leaves the search indexes.
        Locks::agent(self.agent).logging_changes()
    }

    async fn apply(&self, conn: &mut Conn<'_>, ctx: &Ctx, _fence: Option<&RunClaim>) -> Result<()> {
        check_owner(conn, self.org, self.agent).await?;
        super::delete_agent(conn, ctx, self.agent).await
    }
}

async fn create_key(conn: &mut Conn<'_>, row: &NewKeyRow) -> Result<ApiKey> {
    let org = crate::sql::query("SELECT id FROM protocol_organizations WHERE id = $1")
        .bind(row.key.organization.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    if org.is_none() {
        return Err(ProtocolError::NotFound {
            kind: "organization",
            id: row.key.organization.0,
        }
        .into());
    }
    crate::sql::query(
        "INSERT INTO api_keys (id, organization_id, name, prefix, key_hash, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(row.key.id.to_string())
    .bind(row.key.organization.to_string())
    .bind(&row.key.name)
    .bind(&row.key.prefix)
    .bind(&row.hash)
    .bind(row.key.created_at.timestamp_millis())
    .execute(&mut *conn)
    .await?;
    Ok(row.key.clone())
}

async fn revoke_key(conn: &mut Conn<'_>, org: OrganizationId, id: ApiKeyId) -> Result<ApiKey> {
    crate::sql::query(
        "UPDATE api_keys SET revoked_at = $1 \
         WHERE id = $2 AND organization_id = $3 AND revoked_at IS NULL",
    )
    .bind(now_ms())
    .bind(id.to_string())
    .bind(org.to_string())
    .execute(&mut *conn)
    .await?;
    let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1 AND organization_id = $2");
    let row = crate::sql::query(sqlx::AssertSqlSafe(sql))
        .bind(id.to_string())
        .bind(org.to_string())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(AuthError::ApiKeyNotFound(id))?;
    key_from_row(&row)
}

/// [`AgentError::NotFound`] unless `agent` belongs to `org`.
async fn check_owner(conn: &mut Conn<'_>, org: OrganizationId, agent: AgentId) -> Result<()> {
    let row = crate::sql::query("SELECT organization_id FROM agents WHERE id = $1")
        .bind(agent.to_string())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(AgentError::NotFound(agent))?;
    let owner: Option<String> = row.try_get(0)?;
    if owner.as_deref() != Some(org.to_string().as_str()) {
        return Err(AgentError::NotFound(agent).into());
    }
    Ok(())
}
