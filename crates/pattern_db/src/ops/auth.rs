//! The SQL of API key and organization-agent writes: the domain's writes ([`CreateKey`],
//! [`RevokeKey`], [`DeleteOrgAgent`]) and the owner check they share.
//!
//! Writes run inside the writer's transaction; they must never commit, and never write a
//! secret (only its hash arrives here).

use crate::sql::Conn;
use crate::{AgentError, AuthError, ProtocolError};

use super::{Ctx, now_ms};
use crate::auth::{ApiKey, ApiKeyId, NewKeyRow, key_from_plain};
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
    let exists = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::auth::organization_exists(c, &row.key.organization.to_string())
                .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::auth::organization_exists(c, row.key.organization.0).await?
        }
    };
    if !exists {
        return Err(ProtocolError::NotFound {
            kind: "organization",
            id: row.key.organization.0,
        }
        .into());
    }
    let created_at = row.key.created_at.timestamp_millis();
    match conn {
        Conn::Sqlite(c) => {
            let (id, org) = (row.key.id.to_string(), row.key.organization.to_string());
            pattern_db_sqlite::auth::insert_key(
                c,
                &pattern_db_sqlite::auth::NewKey {
                    id: &id,
                    organization_id: &org,
                    name: &row.key.name,
                    prefix: &row.key.prefix,
                    key_hash: &row.hash,
                    created_at,
                },
            )
            .await?;
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::auth::insert_key(
                c,
                &pattern_db_postgres::auth::NewKey {
                    id: row.key.id.0,
                    organization_id: row.key.organization.0,
                    name: &row.key.name,
                    prefix: &row.key.prefix,
                    key_hash: &row.hash,
                    created_at: crate::sql::instant(created_at)?,
                },
            )
            .await?;
        }
    }
    Ok(row.key.clone())
}

async fn revoke_key(conn: &mut Conn<'_>, org: OrganizationId, id: ApiKeyId) -> Result<ApiKey> {
    let now = now_ms();
    let key = match conn {
        Conn::Sqlite(c) => {
            let (key, org) = (id.to_string(), org.to_string());
            pattern_db_sqlite::auth::revoke_key(c, &key, &org, now).await?;
            pattern_db_sqlite::auth::key_of(c, &key, &org)
                .await?
                .map(key_from_plain)
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::auth::revoke_key(c, id.0, org.0, crate::sql::instant(now)?)
                .await?;
            pattern_db_postgres::auth::key_of(c, id.0, org.0)
                .await?
                .map(key_from_plain)
        }
    };
    key.ok_or(AuthError::ApiKeyNotFound(id))?
}

/// [`AgentError::NotFound`] unless `agent` belongs to `org`.
async fn check_owner(conn: &mut Conn<'_>, org: OrganizationId, agent: AgentId) -> Result<()> {
    let owned = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::agents::organization_of(c, &agent.to_string())
                .await?
                .ok_or(AgentError::NotFound(agent))?
                .as_deref()
                == Some(org.to_string().as_str())
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::agents::organization_of(c, agent.0)
                .await?
                .ok_or(AgentError::NotFound(agent))?
                == Some(org.0)
        }
    };
    if !owned {
        return Err(AgentError::NotFound(agent).into());
    }
    Ok(())
}
