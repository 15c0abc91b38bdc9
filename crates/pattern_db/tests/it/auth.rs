//! Organization API keys and organization-owned agents: secrets stored only hashed, revocation,
//! and organization walls on every scoped read and delete.

use pattern_db::testkit::{fetch_texts, refuse_inserts};
use pattern_db::{AgentError, AuthError, ProtocolError};
use pattern_db::{ApiKeyId, Error, NewAgent};
use sha2::{Digest, Sha256};

use crate::{Kind, fresh};

async fn keys_authenticate_until_revoked_and_only_their_hash_is_stored(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let other = db.create_organization("other", "Other").await.unwrap();
    let issued = db.create_api_key(acme.id, "ci").await.unwrap();
    assert!(!format!("{issued:?}").contains(&issued.secret));
    let found = db
        .authenticate_api_key(&issued.secret)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, issued.key.id);
    assert_eq!(found.organization, acme.id);
    // Wrong, malformed and near-miss secrets authenticate nothing.
    let mut near = issued.secret.clone();
    near.pop();
    near.push(if issued.secret.ends_with('0') {
        '1'
    } else {
        '0'
    });
    for bad in [
        "",
        "pat_",
        "Bearer x",
        near.as_str(),
        &issued.secret.to_uppercase(),
    ] {
        assert!(
            db.authenticate_api_key(bad).await.unwrap().is_none(),
            "{bad}"
        );
    }
    // Stored: the hash and a prefix, never the secret.
    let hashes = fetch_texts(&db, "SELECT key_hash FROM api_keys")
        .await
        .unwrap();
    let digest: String = Sha256::digest(issued.secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hashes, [digest]);
    let everything = fetch_texts(
        &db,
        "SELECT id || name || prefix || key_hash || organization_id FROM api_keys",
    )
    .await
    .unwrap();
    assert!(!everything[0].contains(&issued.secret));
    // Another organization cannot revoke it, and it stays live.
    assert!(matches!(
        db.revoke_api_key(other.id, issued.key.id).await,
        Err(Error::Auth(AuthError::ApiKeyNotFound(_)))
    ));
    assert!(
        db.authenticate_api_key(&issued.secret)
            .await
            .unwrap()
            .is_some()
    );
    let revoked = db.revoke_api_key(acme.id, issued.key.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(
        db.authenticate_api_key(&issued.secret)
            .await
            .unwrap()
            .is_none()
    );
    // Revoking again changes nothing.
    let again = db.revoke_api_key(acme.id, issued.key.id).await.unwrap();
    assert_eq!(again.revoked_at, revoked.revoked_at);
    assert!(matches!(
        db.revoke_api_key(acme.id, ApiKeyId(uuid::Uuid::now_v7()))
            .await,
        Err(Error::Auth(AuthError::ApiKeyNotFound(_)))
    ));
    assert_eq!(db.api_keys(acme.id).await.unwrap().len(), 1);
    assert!(db.api_keys(other.id).await.unwrap().is_empty());
    assert!(db.create_api_key(acme.id, "").await.is_err());
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn organization_agents_are_walled_off(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let other = db.create_organization("other", "Other").await.unwrap();
    let local = db.create_agent(NewAgent::named("local")).await.unwrap();
    let mine = db
        .create_org_agent(acme.id, NewAgent::named("helper"))
        .await
        .unwrap();
    assert_eq!(db.agent_organization(mine.id).await.unwrap(), acme.id);
    assert_eq!(mine.name, "helper", "no organization prefix in the name");
    let local_org = db
        .organization_by_external_id(pattern_db::LOCAL_ORGANIZATION)
        .await
        .unwrap();
    assert_eq!(db.agent_organization(local.id).await.unwrap(), local_org.id);
    // A name is unique within its organization, not across them.
    let theirs = db
        .create_org_agent(other.id, NewAgent::named("helper"))
        .await
        .unwrap();
    assert_ne!(theirs.id, mine.id);
    assert!(matches!(
        db.create_org_agent(acme.id, NewAgent::named("helper"))
            .await,
        Err(Error::Agent(AgentError::NameTaken(_)))
    ));
    let mut by_external = NewAgent::named("helper2");
    by_external.external_id = Some("helper".into());
    assert!(matches!(
        db.create_org_agent(acme.id, by_external).await,
        Err(Error::Protocol(ProtocolError::ExternalIdTaken { .. }))
    ));
    assert!(matches!(
        db.create_org_agent(acme.id, NewAgent::named("acme/helper"))
            .await,
        Err(Error::Agent(AgentError::InvalidName { field: "name", .. }))
    ));
    assert_eq!(
        db.agent_in_scope(Some(other.id), "helper")
            .await
            .unwrap()
            .id,
        theirs.id
    );
    assert_eq!(db.agent_by_name("local").await.unwrap().id, local.id);
    assert!(matches!(
        db.agent_in_scope(Some(acme.id), "local").await,
        Err(Error::Agent(AgentError::NameNotFound(_)))
    ));
    db.delete_org_agent(other.id, theirs.id).await.unwrap();
    assert_eq!(
        db.org_agents(acme.id).await.unwrap(),
        std::slice::from_ref(&mine)
    );
    assert!(
        db.org_agents(other.id).await.unwrap().is_empty(),
        "local agents belong to none"
    );
    assert_eq!(db.org_agent(acme.id, mine.id).await.unwrap(), mine);
    for id in [mine.id, local.id] {
        assert!(matches!(
            db.org_agent(other.id, id).await,
            Err(Error::Agent(AgentError::NotFound(_)))
        ));
        assert!(matches!(
            db.delete_org_agent(other.id, id).await,
            Err(Error::Agent(AgentError::NotFound(_)))
        ));
    }
    assert!(db.agent(mine.id).await.is_ok(), "nothing deleted");
    assert!(db.agent(local.id).await.is_ok());
    db.delete_org_agent(acme.id, mine.id).await.unwrap();
    assert!(matches!(
        db.agent(mine.id).await,
        Err(Error::Agent(AgentError::NotFound(_)))
    ));
    // A refused write leaves no agent behind.
    refuse_inserts(&db, "agents", "name", "fails")
        .await
        .unwrap();
    assert!(
        db.create_org_agent(other.id, NewAgent::named("fails"))
            .await
            .is_err()
    );
    assert!(db.org_agents(other.id).await.unwrap().is_empty());
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    keys_authenticate_until_revoked_and_only_their_hash_is_stored,
    organization_agents_are_walled_off,
);
