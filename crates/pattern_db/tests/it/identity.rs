//! Migration `0012_one_agent_identity` on data written in the shape before it: protocol agents
//! linked or not, server-made agents with the `{organization id}/` name prefix, sessions,
//! messages and meetings between them; then down and up again. Both backends.

use pattern_db::testkit::fetch_texts;
use pattern_db::{AgentId, Database, LOCAL_ORGANIZATION};

use crate::{Kind, fresh};

const ACME: &str = "00000000-0000-7000-8000-00000000a001";
const BETA: &str = "00000000-0000-7000-8000-00000000b001";
const ADA: &str = "10000000-0000-7000-8000-000000000001";
const HELPER: &str = "10000000-0000-7000-8000-000000000002";
const BOB: &str = "10000000-0000-7000-8000-000000000003";
const P_BOB: &str = "20000000-0000-7000-8000-000000000001";
const P_CAROL: &str = "20000000-0000-7000-8000-000000000002";
const P_HELPER_X: &str = "20000000-0000-7000-8000-000000000003";
const P_HELPER: &str = "20000000-0000-7000-8000-000000000004";
const SESSION: &str = "30000000-0000-7000-8000-000000000001";
const MEETING: &str = "40000000-0000-7000-8000-000000000001";

fn id(text: &str) -> AgentId {
    AgentId(text.parse().unwrap())
}

/// Rows as a 0011 database held them.
fn before() -> Vec<String> {
    vec![
        format!("INSERT INTO protocol_organizations VALUES ('{ACME}', 'acme', 'Acme', 1)"),
        format!("INSERT INTO protocol_organizations VALUES ('{BETA}', 'beta', 'Beta', 2)"),
        format!(
            "INSERT INTO agents (id, name, metadata, revision, created_at, organization_id) \
             VALUES ('{ADA}', 'ada', 'null', 0, 10, NULL)"
        ),
        format!(
            "INSERT INTO agents (id, name, metadata, revision, created_at, organization_id) \
             VALUES ('{HELPER}', '{ACME}/helper', '{{\"k\":1}}', 3, 11, '{ACME}')"
        ),
        format!(
            "INSERT INTO agents (id, name, metadata, revision, created_at, organization_id) \
             VALUES ('{BOB}', 'bob', 'null', 0, 12, NULL)"
        ),
        format!(
            "INSERT INTO protocol_agents VALUES ('{P_BOB}', 'bob@acme', '{ACME}', 'Bob', '{BOB}', 20)"
        ),
        format!(
            "INSERT INTO protocol_agents VALUES ('{P_CAROL}', 'carol', '{ACME}', 'Carol', NULL, 21)"
        ),
        format!(
            "INSERT INTO protocol_agents VALUES \
             ('{P_HELPER_X}', 'helper-x', '{BETA}', 'HelperX', '{HELPER}', 22)"
        ),
        format!(
            "INSERT INTO protocol_agents VALUES ('{P_HELPER}', 'helper', '{ACME}', 'helper', NULL, 23)"
        ),
        format!(
            "INSERT INTO protocol_sessions VALUES \
             ('{SESSION}', '{P_BOB}', '{P_CAROL}', 'sync', 'active', '{P_BOB}', 30, 30, NULL)"
        ),
        format!(
            "INSERT INTO protocol_messages VALUES ('50000000-0000-7000-8000-000000000001', \
             '{P_BOB}', '{P_CAROL}', '{SESSION}', NULL, 'chat', '\"hi\"', NULL, NULL, 1, 31)"
        ),
        format!(
            "INSERT INTO protocol_meetings VALUES ('{MEETING}', '{P_CAROL}', 'active', '{P_BOB}', \
             NULL, 40, NULL, 2, 2, 40, 41, NULL)"
        ),
        format!(
            "INSERT INTO protocol_meeting_participants VALUES \
             ('{MEETING}', '{P_CAROL}', 'waiting', 1, NULL, 40, NULL)"
        ),
        format!(
            "INSERT INTO protocol_meeting_participants VALUES \
             ('{MEETING}', '{P_BOB}', 'speaking', 2, NULL, 41, NULL)"
        ),
        format!(
            "INSERT INTO protocol_meeting_events VALUES \
             ('{MEETING}', 1, 'meeting_created', '{P_CAROL}', NULL, 40)"
        ),
        format!(
            "INSERT INTO protocol_meeting_events VALUES \
             ('{MEETING}', 2, 'agent_joined', '{P_BOB}', NULL, 41)"
        ),
    ]
}

async fn execute(url: &str, kind: Kind, statements: &[String]) {
    use sqlx::{Connection, Executor};
    match kind {
        Kind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            c.execute("PRAGMA foreign_keys = ON").await.unwrap();
            for sql in statements {
                c.execute(sqlx::AssertSqlSafe(sql.as_str())).await.unwrap();
            }
        }
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            for sql in statements {
                c.execute(sqlx::AssertSqlSafe(sql.as_str())).await.unwrap();
            }
        }
    }
}

async fn check_after(db: &Database) {
    let acme = db.organization_by_external_id("acme").await.unwrap();
    let beta = db.organization_by_external_id("beta").await.unwrap();
    let local = db
        .organization_by_external_id(LOCAL_ORGANIZATION)
        .await
        .unwrap();
    assert_eq!(
        db.agents().await.unwrap().len(),
        6,
        "3 agents + 3 lone protocol agents"
    );

    let ada = db.agent(id(ADA)).await.unwrap();
    assert_eq!((ada.organization, ada.name.as_str()), (local.id, "ada"));
    assert_eq!(ada.external_id, "ada");
    let helper = db.agent(id(HELPER)).await.unwrap();
    assert_eq!(
        (helper.organization, helper.name.as_str()),
        (acme.id, "helper")
    );
    assert_eq!(helper.metadata["k"], 1);
    // Bob was local and linked by a protocol agent of acme: he is that agent now, in acme.
    let bob = db.agent(id(BOB)).await.unwrap();
    assert_eq!(bob.organization, acme.id);
    assert_eq!(bob.external_id, "bob@acme");
    assert_eq!(
        db.agent_by_external_id(acme.id, "bob@acme")
            .await
            .unwrap()
            .id,
        bob.id
    );
    assert!(db.agent(id(P_BOB)).await.is_err(), "merged, not duplicated");
    // Carol was a protocol agent only: an agent now, same id.
    let carol = db.agent(id(P_CAROL)).await.unwrap();
    assert_eq!(
        (carol.organization, carol.name.as_str()),
        (acme.id, "Carol")
    );
    // A link across organizations is not followed: its own agent in beta.
    let helper_x = db.agent(id(P_HELPER_X)).await.unwrap();
    assert_eq!(
        (helper_x.organization, helper_x.external_id.as_str()),
        (beta.id, "helper-x")
    );
    // Clashing name and external id inside acme: the younger one gets a suffix.
    let second = db.agent(id(P_HELPER)).await.unwrap();
    assert_eq!(second.name, "helper-000000000004");
    assert_eq!(second.external_id, "helper-000000000004");

    // The session, its messages and the meeting as stored (their API is pattern_protocol's).
    let stored = |sql: String| async move { fetch_texts(db, &sql).await.unwrap() };
    assert_eq!(
        stored(format!(
            "SELECT agent_a_id || ' ' || agent_b_id || ' ' || locked_agent_id || ' ' || \
             session_type FROM protocol_sessions WHERE id = '{SESSION}'"
        ))
        .await,
        [format!("{} {} {} sync", bob.id, carol.id, bob.id)]
    );
    assert_eq!(
        stored(format!(
            "SELECT sender_id || ' ' || recipient_id FROM protocol_messages \
             WHERE session_id = '{SESSION}'"
        ))
        .await,
        [format!("{} {}", bob.id, carol.id)]
    );
    assert_eq!(
        stored(format!(
            "SELECT host_id FROM protocol_meetings WHERE id = '{MEETING}'"
        ))
        .await,
        [carol.id.to_string()]
    );
    assert_eq!(
        stored(format!(
            "SELECT current_speaker_id FROM protocol_meetings WHERE id = '{MEETING}'"
        ))
        .await,
        [bob.id.to_string()]
    );
    assert_eq!(
        stored(format!(
            "SELECT agent_id FROM protocol_meeting_events WHERE meeting_id = '{MEETING}' AND seq = 2"
        ))
        .await,
        [bob.id.to_string()]
    );
    // The wall holds for migrated agents too: they are in two organizations, and nothing
    // crosses one (pattern_protocol's `storage::nothing_crosses_an_organization_wall`).
    assert_ne!(bob.organization, helper_x.organization);
}

async fn identity_migration_moves_every_kind_of_agent(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    db.migrate_down(11).await.unwrap();
    db.close().await;
    execute(&tdb.url, kind, &before()).await;

    let db = tdb.open().await.unwrap();
    check_after(&db).await;
    // Down and up again: the same agents, names and links.
    db.migrate_down(11).await.unwrap();
    db.migrate_up().await.unwrap();
    check_after(&db).await;
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(identity_migration_moves_every_kind_of_agent);
