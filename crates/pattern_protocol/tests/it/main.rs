//! Integration tests of `pattern_protocol` on SQLite and PostgreSQL: waking waiters on sends
//! (`waiting`), strict alternation of sync sessions under any sequence of attempts (`props`),
//! meetings (`meetings`, `fairness`, `races`) and the protocol's storage case by case on both
//! backends (`storage`, with pattern_db's `conformance!`).
//! These tests must never skip a backend silently: a missing PostgreSQL fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

// `conformance!(case, ...)`: each case once per backend (pattern_db testkit).
#[macro_use]
extern crate pattern_db;

mod converse;
mod fairness;
mod meetings;
mod props;
mod races;
mod storage;
mod waiting;

use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Database, DbConfig, NewProtocolMessage, OrganizationId};
use pattern_protocol::{Agent, NewAgent, Protocol};

/// Which backend a case runs on.
pub use pattern_db::Backend as Kind;

/// A fresh database of the given kind.
pub async fn fresh(kind: Kind) -> TestDb {
    TestDb::fresh(kind).await.unwrap()
}

/// Opens `tdb` with `tweak` applied to its default configuration.
pub async fn open_with(tdb: &TestDb, tweak: impl FnOnce(&mut DbConfig)) -> Database {
    let mut config = tdb.config();
    tweak(&mut config);
    Database::open(config).await.unwrap()
}

/// A protocol over a fresh database, with its organization.
pub async fn protocol(tdb: &TestDb) -> Protocol {
    let protocol = Protocol::new(tdb.open().await.unwrap()).await.unwrap();
    protocol.create_organization("acme", "Acme").await.unwrap();
    protocol
}

/// A new agent of the `acme` organization.
pub async fn agent(protocol: &Protocol, external_id: &str) -> Agent {
    let org = protocol.organization("acme").await.unwrap();
    protocol
        .create_agent(NewAgent::named(external_id).in_organization(org.id))
        .await
        .unwrap()
}

/// A `text` protocol message (the storage cases' and the conversations' one shape).
pub fn text(t: &str) -> NewProtocolMessage {
    NewProtocolMessage::new("text", serde_json::json!({ "text": t }))
}

/// Agents named `names` in a new `acme` organization, straight on the database.
pub async fn agents(db: &Database, names: &[&str]) -> (OrganizationId, Vec<AgentId>) {
    let org = db.create_organization("acme", "Acme").await.unwrap();
    let mut ids = Vec::new();
    for name in names {
        let a = db
            .create_agent(pattern_db::NewAgent::named(*name).in_organization(org.id))
            .await
            .unwrap();
        ids.push(a.id);
    }
    (org.id, ids)
}
