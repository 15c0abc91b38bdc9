//! Who is calling: the organization behind the request's API key (`Authorization: Bearer
//! pat_...`), and the organization-scoped lookups every route goes through.
//!
//! Keys are stored hashed by `pattern_db`; this module only hands the presented secret to
//! [`pattern::Database::authenticate_api_key`]. An agent of another organization answers exactly
//! like an agent that does not exist (404 `not_found`), so ids never reveal what other
//! organizations hold. Agents an organization creates are stored under the name
//! `{organization id}/{name}` (agent names are unique database-wide; the prefix keeps
//! organizations from colliding or guessing each other's names) and shown without the prefix.
//! This module must never log or echo a presented secret.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use pattern::db::ApiKeyId;
use pattern::db::protocol::OrganizationId;
use pattern::{Agent, AgentId};

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// The authenticated caller of a request.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The organization every query of the request is scoped to.
    pub org: OrganizationId,
    /// The key used.
    pub key: ApiKeyId,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(header) = parts.headers.get(AUTHORIZATION) else {
            return Err(ApiError::new(
                ErrorCode::MissingApiKey,
                "send the API key as `Authorization: Bearer <key>`",
            ));
        };
        let secret = header.to_str().ok().and_then(bearer_token).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidApiKey,
                "the Authorization header must be `Bearer <key>`",
            )
        })?;
        match state.pattern().db().authenticate_api_key(secret).await? {
            Some(key) => Ok(Caller {
                org: key.organization,
                key: key.id,
            }),
            None => Err(ApiError::new(
                ErrorCode::InvalidApiKey,
                "the API key is unknown or revoked",
            )),
        }
    }
}

/// The token of an `Authorization` value `Bearer <token>`. The scheme is matched without regard
/// to case (RFC 9110, section 11.1); spaces or tabs separate it from a token that is not empty.
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Caller {
    /// The organization's agent with this id; anything else is 404.
    pub(crate) async fn agent(&self, state: &AppState, id: &str) -> Result<Agent, ApiError> {
        let not_found = || ApiError::not_found(format!("no agent `{id}`"));
        let uuid = uuid::Uuid::parse_str(id).map_err(|_| not_found())?;
        match state
            .pattern()
            .db()
            .org_agent(self.org, AgentId(uuid))
            .await
        {
            Ok(agent) => Ok(agent),
            Err(pattern::db::Error::Agent(pattern::db::AgentError::NotFound(_))) => {
                Err(not_found())
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_matched_without_regard_to_case() {
        for value in [
            "Bearer pat_1",
            "bearer pat_1",
            "BEARER pat_1",
            "bEaReR \t pat_1 ",
        ] {
            assert_eq!(bearer_token(value), Some("pat_1"), "{value:?}");
        }
        for value in [
            "Basic pat_1",
            "Bearer",
            "Bearer   ",
            "Bearerpat_1",
            "Bearers pat_1",
            "",
        ] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }
}
