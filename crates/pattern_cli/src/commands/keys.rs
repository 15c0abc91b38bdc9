//! `pattern org create|list` and `pattern key create|list|revoke`: the organizations the HTTP API
//! serves and their API keys. A key's secret is printed once, by `key create`, and is stored only
//! hashed; this module must never print a secret anywhere else.

use chrono::{DateTime, Utc};
use pattern::Pattern;
use pattern::db::ApiKey;
use pattern::db::protocol::Organization;
use serde::Serialize;

use crate::cli::{KeyCommand, OrgCommand};
use crate::env::Env;
use crate::error::{CliError, Result};
use crate::output;

/// `organization` shape.
#[derive(Serialize)]
struct OrgView {
    id: String,
    external_id: String,
    name: String,
    created_at: DateTime<Utc>,
}

impl From<&Organization> for OrgView {
    fn from(o: &Organization) -> Self {
        Self {
            id: o.id.to_string(),
            external_id: o.external_id.clone(),
            name: o.name.clone(),
            created_at: o.created_at,
        }
    }
}

/// `api_key` shape (no secret).
#[derive(Serialize)]
struct KeyView {
    id: String,
    org: String,
    name: String,
    prefix: String,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl KeyView {
    fn new(key: &ApiKey, org: &str) -> Self {
        Self {
            id: key.id.to_string(),
            org: org.to_owned(),
            name: key.name.clone(),
            prefix: key.prefix.clone(),
            created_at: key.created_at,
            revoked_at: key.revoked_at,
        }
    }
}

/// `key create` shape: the key and, once, its secret.
#[derive(Serialize)]
struct IssuedView {
    #[serde(flatten)]
    key: KeyView,
    secret: String,
}

pub(crate) async fn org(env: &Env, command: OrgCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = async {
        match command {
            OrgCommand::Create { external_id, name } => {
                let name = name.unwrap_or_else(|| external_id.clone());
                let org = pattern
                    .protocol()
                    .create_organization(&external_id, &name)
                    .await?;
                if env.json {
                    output::json(&OrgView::from(&org))
                } else {
                    output::line(&format!(
                        "created organization {} ({})",
                        org.external_id, org.id
                    ))
                }
            }
            OrgCommand::List => {
                let orgs = pattern.protocol().organizations().await?;
                if env.json {
                    let views: Vec<OrgView> = orgs.iter().map(OrgView::from).collect();
                    return output::json(&views);
                }
                if orgs.is_empty() {
                    return output::line("no organizations");
                }
                for o in &orgs {
                    output::line(&format!("{:<24} {}  {}", o.external_id, o.id, o.name))?;
                }
                Ok(())
            }
        }
    }
    .await;
    pattern.close().await;
    result
}

async fn organization(pattern: &Pattern, external_id: &str) -> Result<Organization> {
    Ok(pattern.protocol().organization(external_id).await?)
}

pub(crate) async fn key(env: &Env, command: KeyCommand) -> Result<()> {
    let (pattern, _config) = env.open().await?;
    let result = async {
        match command {
            KeyCommand::Create { org, name } => {
                let o = organization(&pattern, &org).await?;
                let issued = pattern.db().create_api_key(o.id, &name).await?;
                eprintln!("the secret is shown only this once: store it now");
                if env.json {
                    return output::json(&IssuedView {
                        key: KeyView::new(&issued.key, &org),
                        secret: issued.secret,
                    });
                }
                output::line(&issued.secret)
            }
            KeyCommand::List { org } => {
                let o = organization(&pattern, &org).await?;
                let keys = pattern.db().api_keys(o.id).await?;
                if env.json {
                    let views: Vec<KeyView> = keys.iter().map(|k| KeyView::new(k, &org)).collect();
                    return output::json(&views);
                }
                if keys.is_empty() {
                    return output::line(&format!("organization {org} has no keys"));
                }
                for k in &keys {
                    output::line(&format!(
                        "{}  {}...  {:<20} {}",
                        k.id,
                        k.prefix,
                        k.name,
                        k.revoked_at
                            .map_or_else(|| "live".to_owned(), |t| format!("revoked {t}"))
                    ))?;
                }
                Ok(())
            }
            KeyCommand::Revoke { org, key } => {
                let o = organization(&pattern, &org).await?;
                let id = key
                    .parse()
                    .map_err(|_| CliError::usage(format!("`{key}` is not a key id (a UUID)")))?;
                let revoked = pattern.db().revoke_api_key(o.id, id).await?;
                if env.json {
                    return output::json(&KeyView::new(&revoked, &org));
                }
                output::line(&format!(
                    "revoked key {} ({}...)",
                    revoked.id, revoked.prefix
                ))
            }
        }
    }
    .await;
    pattern.close().await;
    result
}
