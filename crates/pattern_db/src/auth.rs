//! Organization API keys and organization-owned agents, for front doors that serve several
//! organizations (the HTTP server).
//!
//! A key's secret is `pat_` followed by 64 hex characters from the operating system's random
//! source (256 bits); only its SHA-256 is stored, with the first 12 characters for display.
//! Authenticating is one indexed read of the hash on the read pool; `last_used_at` is not kept
//! (it would turn every request into a write). An agent with an organization belongs to it alone:
//! the organization-scoped reads answer [`AgentError::NotFound`] for another organization's
//! agent exactly as for an unknown one. This module must never store, log or print a secret, and
//! never answer an organization-scoped read with a row of another organization.

use crate::{AgentError, StorageError};
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::sql::Conn;
use uuid::Uuid;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::{Agent, AgentId, NewAgent};
use crate::ops::auth::{CreateKey, DeleteOrgAgent, RevokeKey};
use crate::ops::{self, FromStored, StoredId, StoredTime, from_ms};
use crate::protocol::OrganizationId;

/// What every secret starts with.
pub const KEY_PREFIX: &str = "pat_";
/// Characters of a secret kept for display.
const SHOWN_CHARS: usize = 12;
/// Most characters of a key's name.
pub const MAX_KEY_NAME_CHARS: usize = 200;

/// The id of an API key (UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiKeyId(pub Uuid);

impl fmt::Display for ApiKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for ApiKeyId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(ApiKeyId).map_err(|e| {
            Error::Storage(StorageError::InvalidId {
                what: "api key id",
                value: s.to_owned(),
                reason: e.to_string(),
            })
        })
    }
}

/// A stored key (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Its id.
    pub id: ApiKeyId,
    /// The organization it acts for.
    pub organization: OrganizationId,
    /// What it is for.
    pub name: String,
    /// The secret's first characters, to recognise it.
    pub prefix: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked; a revoked key authenticates nothing.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new key and its secret, which exists only here: show it once.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedKey {
    /// The stored key.
    pub key: ApiKey,
    /// The secret to hand to the client.
    pub secret: String,
}

impl fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedKey")
            .field("key", &self.key)
            .field("secret", &"***")
            .finish()
    }
}

/// The stored form of a secret.
pub(crate) fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// A fresh secret from the operating system's random source.
pub(crate) fn new_secret() -> Result<String> {
    random_token(KEY_PREFIX)
}

/// `prefix` followed by 64 hex characters (256 bits) from the operating system's random source.
pub(crate) fn random_token(prefix: &str) -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| StorageError::Config(format!("no random source: {e}")))?;
    let mut secret = String::from(prefix);
    for byte in bytes {
        secret.push_str(&format!("{byte:02x}"));
    }
    Ok(secret)
}

/// What the writer stores for a new key.
#[derive(Debug, Clone)]
pub(crate) struct NewKeyRow {
    pub(crate) key: ApiKey,
    pub(crate) hash: String,
}

/// A key from either engine's checked row ([`FromStored`]).
pub(crate) fn key_from_plain(row: impl FromStored<ApiKey>) -> Result<ApiKey> {
    row.into_domain()
}

/// [`FromStored`] for the key rows of one engine's crate of checked statements: one conversion,
/// written once, for both engines.
macro_rules! key_from_stored {
    ($engine:ident) => {
        impl FromStored<ApiKey> for $engine::auth::KeyRow {
            fn into_domain(self) -> Result<ApiKey> {
                Ok(ApiKey {
                    id: ApiKeyId(self.id.uuid()?),
                    organization: OrganizationId(self.organization_id.uuid()?),
                    name: self.name,
                    prefix: self.prefix,
                    created_at: self.created_at.time(),
                    revoked_at: self.revoked_at.map(StoredTime::time),
                })
            }
        }
    };
}

key_from_stored!(pattern_db_sqlite);
key_from_stored!(pattern_db_postgres);

fn well_formed(secret: &str) -> bool {
    well_formed_token(secret, KEY_PREFIX)
}

/// Whether `token` is `prefix` and 64 lowercase hex characters.
pub(crate) fn well_formed_token(token: &str, prefix: &str) -> bool {
    token.len() == prefix.len() + 64
        && token.starts_with(prefix)
        && token[prefix.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Database {
    /// Issues a key for `org`. The secret is in the answer only.
    pub async fn create_api_key(&self, org: OrganizationId, name: &str) -> Result<IssuedKey> {
        let chars = name.chars().count();
        if chars == 0 || chars > MAX_KEY_NAME_CHARS || name.chars().any(char::is_control) {
            return Err(StorageError::Config(format!(
                "an API key name must be 1 to {MAX_KEY_NAME_CHARS} characters without control \
                 characters"
            ))
            .into());
        }
        let secret = new_secret()?;
        let row = NewKeyRow {
            key: ApiKey {
                id: ApiKeyId(Uuid::now_v7()),
                organization: org,
                name: name.to_owned(),
                prefix: secret.chars().take(SHOWN_CHARS).collect(),
                created_at: from_ms(ops::now_ms()),
                revoked_at: None,
            },
            hash: hash(&secret),
        };
        let key = self.write(CreateKey(row)).await?;
        Ok(IssuedKey { key, secret })
    }

    /// The live key with this secret; `None` for an unknown, malformed or revoked one.
    pub async fn authenticate_api_key(&self, secret: &str) -> Result<Option<ApiKey>> {
        if !well_formed(secret) {
            return Ok(None);
        }
        let hash = hash(secret);
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::auth::live_key_by_hash(c, &hash)
                .await?
                .map(key_from_plain)
                .transpose(),
            Conn::Postgres(c) => pattern_db_postgres::auth::live_key_by_hash(c, &hash)
                .await?
                .map(key_from_plain)
                .transpose(),
        }
    }

    /// The organization's keys, newest first (revoked ones included).
    pub async fn api_keys(&self, org: OrganizationId) -> Result<Vec<ApiKey>> {
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::auth::keys_of(c, &org.to_string())
                .await?
                .into_iter()
                .map(key_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::auth::keys_of(c, org.0)
                .await?
                .into_iter()
                .map(key_from_plain)
                .collect(),
        }
    }

    /// Revokes a key of `org` (again: no change). Another organization's key is
    /// [`AuthError::ApiKeyNotFound`], like an unknown one.
    pub async fn revoke_api_key(&self, org: OrganizationId, id: ApiKeyId) -> Result<ApiKey> {
        self.write(RevokeKey { org, id }).await
    }

    /// Creates an agent owned by `org` (the name rule, [`AgentError::NameTaken`] and
    /// [`ProtocolError::ExternalIdTaken`](crate::ProtocolError::ExternalIdTaken) as
    /// [`Database::create_agent`]).
    pub async fn create_org_agent(&self, org: OrganizationId, new: NewAgent) -> Result<Agent> {
        self.create_agent(new.in_organization(org)).await
    }

    /// The organization's agents, by name.
    pub async fn org_agents(&self, org: OrganizationId) -> Result<Vec<Agent>> {
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::agents::of_organization(c, &org.to_string())
                .await?
                .into_iter()
                .map(ops::agent_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::agents::of_organization(c, org.0)
                .await?
                .into_iter()
                .map(ops::agent_from_plain)
                .collect(),
        }
    }

    /// The organization's agent `id`; [`AgentError::NotFound`] when it does not exist or
    /// belongs to anyone else.
    pub async fn org_agent(&self, org: OrganizationId, id: AgentId) -> Result<Agent> {
        let mut pooled = self.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::agents::by_id_in(c, &id.to_string(), &org.to_string())
                    .await?
                    .map(ops::agent_from_plain)
            }
            Conn::Postgres(c) => pattern_db_postgres::agents::by_id_in(c, id.0, org.0)
                .await?
                .map(ops::agent_from_plain),
        };
        row.transpose()?
            .ok_or(Error::Agent(AgentError::NotFound(id)))
    }

    /// Deletes the organization's agent `id` and everything stored for it, checked and deleted
    /// in one transaction; [`AgentError::NotFound`] (nothing deleted) otherwise.
    pub async fn delete_org_agent(&self, org: OrganizationId, id: AgentId) -> Result<()> {
        self.write(DeleteOrgAgent { org, agent: id }).await
    }

    /// The agent named `name` in one organization: `Some(org)` that one, `None` the local
    /// organization ([`crate::LOCAL_ORGANIZATION`]). An agent of any other organization is
    /// [`AgentError::NameNotFound`], exactly like an unknown name, so a scoped lookup never
    /// reveals what exists elsewhere.
    pub async fn agent_in_scope(&self, org: Option<OrganizationId>, name: &str) -> Result<Agent> {
        let mut pooled = self.reader().acquire().await?;
        let row = match (&mut pooled.conn(), org) {
            (Conn::Sqlite(c), Some(org)) => {
                pattern_db_sqlite::agents::by_name_in(c, name, &org.to_string())
                    .await?
                    .map(ops::agent_from_plain)
            }
            (Conn::Sqlite(c), None) => {
                pattern_db_sqlite::agents::by_name_in_external(c, name, crate::LOCAL_ORGANIZATION)
                    .await?
                    .map(ops::agent_from_plain)
            }
            (Conn::Postgres(c), Some(org)) => {
                pattern_db_postgres::agents::by_name_in(c, name, org.0)
                    .await?
                    .map(ops::agent_from_plain)
            }
            (Conn::Postgres(c), None) => {
                pattern_db_postgres::agents::by_name_in_external(c, name, crate::LOCAL_ORGANIZATION)
                    .await?
                    .map(ops::agent_from_plain)
            }
        };
        row.transpose()?
            .ok_or_else(|| Error::Agent(AgentError::NameNotFound(name.to_owned())))
    }

    /// The organization owning agent `id`.
    pub async fn agent_organization(&self, id: AgentId) -> Result<OrganizationId> {
        Ok(self.agent(id).await?.organization)
    }
}

/// Refusals of API keys (module [`crate::auth`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No API key with this id in the organization.
    #[error("no API key {0} in this organization")]
    ApiKeyNotFound(crate::auth::ApiKeyId),
}

impl AuthError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            AuthError::ApiKeyNotFound(_) => C::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_random_and_only_their_hash_is_kept() {
        let a = new_secret().unwrap();
        let b = new_secret().unwrap();
        assert_ne!(a, b);
        assert!(well_formed(&a), "{a}");
        assert_eq!(hash(&a).len(), 64);
        assert_ne!(hash(&a), hash(&b));
        assert!(!well_formed("pat_short"));
        assert!(!well_formed(&a.to_uppercase()));
    }

    #[test]
    fn issued_keys_do_not_print_their_secret() {
        let issued = IssuedKey {
            key: ApiKey {
                id: ApiKeyId(Uuid::now_v7()),
                organization: OrganizationId::new(),
                name: "k".into(),
                prefix: "pat_0123".into(),
                created_at: Utc::now(),
                revoked_at: None,
            },
            secret: "pat_supersecret".into(),
        };
        assert!(!format!("{issued:?}").contains("supersecret"));
    }
}
