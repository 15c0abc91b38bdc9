//! What the web console reads beyond the API's agents: organization-scoped lists of sessions and
//! meetings (walls, liveness, paging), and console sessions (open only with a live key, expire,
//! end at logout, end when their key is revoked, tokens stored hashed).

use std::time::Duration;

use pattern_db::{ListPage, Liveness, MeetingId, NewAgent, SessionId, SessionType};

use crate::{Kind, fresh};

fn page<Id>(liveness: Liveness, before: Option<Id>, limit: u32) -> ListPage<Id> {
    ListPage {
        liveness,
        before,
        limit,
    }
}

/// Two organizations' sessions and meetings: each lists its own only, live or ended on request,
/// newest first, paged by the last id.
async fn lists_are_walled_filtered_and_paged(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let globex = db.create_organization("globex", "Globex").await.unwrap();
    let mut agents = Vec::new();
    for name in ["a1", "a2", "a3"] {
        agents.push(
            db.create_org_agent(acme.id, NewAgent::named(name))
                .await
                .unwrap(),
        );
    }
    let g1 = db
        .create_org_agent(globex.id, NewAgent::named("g1"))
        .await
        .unwrap();
    let g2 = db
        .create_org_agent(globex.id, NewAgent::named("g2"))
        .await
        .unwrap();

    // Acme: three sessions (one ended), two meetings (one ended); Globex: one of each.
    let s1 = db
        .open_session(agents[0].id, agents[1].id, SessionType::Sync)
        .await
        .unwrap();
    let s2 = db
        .open_session(agents[1].id, agents[2].id, SessionType::Async)
        .await
        .unwrap();
    let s3 = db
        .open_session(agents[0].id, agents[2].id, SessionType::Sync)
        .await
        .unwrap();
    db.end_session(s2.id, agents[1].id).await.unwrap();
    let gs = db
        .open_session(g1.id, g2.id, SessionType::Sync)
        .await
        .unwrap();
    let m1 = db.create_meeting(agents[0].id, None).await.unwrap().meeting;
    let m2 = db.create_meeting(agents[1].id, None).await.unwrap().meeting;
    db.end_meeting(m1.id, agents[0].id).await.unwrap();
    let gm = db.create_meeting(g1.id, None).await.unwrap().meeting;

    let ids = |list: Vec<pattern_db::Session>| list.into_iter().map(|s| s.id).collect::<Vec<_>>();
    let all = ids(db
        .org_sessions(acme.id, page(Liveness::All, None, 10))
        .await
        .unwrap());
    assert_eq!(all, vec![s3.id, s2.id, s1.id], "newest first, Acme's only");
    let live = ids(db
        .org_sessions(acme.id, page(Liveness::Live, None, 10))
        .await
        .unwrap());
    assert_eq!(live, vec![s3.id, s1.id]);
    let ended = ids(db
        .org_sessions(acme.id, page(Liveness::Ended, None, 10))
        .await
        .unwrap());
    assert_eq!(ended, vec![s2.id]);
    let first = ids(db
        .org_sessions(acme.id, page(Liveness::All, None, 2))
        .await
        .unwrap());
    assert_eq!(first, vec![s3.id, s2.id]);
    let next = ids(db
        .org_sessions(acme.id, page(Liveness::All, Some(s2.id), 2))
        .await
        .unwrap());
    assert_eq!(next, vec![s1.id], "the page after the last id");
    let theirs = ids(db
        .org_sessions(globex.id, page(Liveness::All, None, 10))
        .await
        .unwrap());
    assert_eq!(theirs, vec![gs.id]);
    // Another organization's cursor never shows its rows.
    let unknown: Option<SessionId> = Some(SessionId::new());
    assert!(
        db.org_sessions(globex.id, page(Liveness::All, unknown, 10))
            .await
            .unwrap()
            .iter()
            .all(|s| s.id == gs.id)
    );

    let mids = |list: Vec<pattern_db::Meeting>| list.into_iter().map(|m| m.id).collect::<Vec<_>>();
    let all = mids(
        db.org_meetings(acme.id, page(Liveness::All, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(all, vec![m2.id, m1.id]);
    let live = mids(
        db.org_meetings(acme.id, page(Liveness::Live, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(live, vec![m2.id]);
    let ended = mids(
        db.org_meetings(acme.id, page(Liveness::Ended, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(ended, vec![m1.id]);
    let next = mids(
        db.org_meetings(acme.id, page(Liveness::All, Some(m2.id), 10))
            .await
            .unwrap(),
    );
    assert_eq!(next, vec![m1.id]);
    let none: Option<MeetingId> = Some(m1.id);
    assert!(
        db.org_meetings(acme.id, page(Liveness::All, none, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let theirs = mids(
        db.org_meetings(globex.id, page(Liveness::All, None, 10))
            .await
            .unwrap(),
    );
    assert_eq!(theirs, vec![gm.id]);
}

/// A console session opens only with a live key, authenticates as that key's organization,
/// stops at logout, at its expiry and when its key is revoked; its token is not stored.
async fn console_sessions_live_only_with_their_key(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let acme = db.create_organization("acme", "Acme").await.unwrap();
    let issued = db.create_api_key(acme.id, "console").await.unwrap();
    let hour = Duration::from_secs(3600);

    // Wrong, malformed and absurd inputs.
    assert!(
        db.open_console_session("pat_nope", hour)
            .await
            .unwrap()
            .is_none()
    );
    let wrong = format!("pat_{}", "0".repeat(64));
    assert!(
        db.open_console_session(&wrong, hour)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        db.open_console_session(&issued.secret, Duration::ZERO)
            .await
            .is_err()
    );
    assert!(db.console_session("pcs_nope").await.unwrap().is_none());
    assert!(
        db.console_session(&issued.secret).await.unwrap().is_none(),
        "a key is no token"
    );

    let opened = db
        .open_console_session(&issued.secret, hour)
        .await
        .unwrap()
        .unwrap();
    assert!(opened.token.starts_with("pcs_"));
    assert!(
        !format!("{opened:?}").contains(&opened.token),
        "Debug hides the token"
    );
    let found = db.console_session(&opened.token).await.unwrap().unwrap();
    assert_eq!(found.key.organization, acme.id);
    assert_eq!(found.key.id, issued.key.id);
    let mut wrong_token = opened.token.clone();
    wrong_token.pop();
    wrong_token.push(if opened.token.ends_with('0') {
        '1'
    } else {
        '0'
    });
    assert!(db.console_session(&wrong_token).await.unwrap().is_none());

    // Logout ends it, once.
    assert!(db.end_console_session(&opened.token).await.unwrap());
    assert!(db.console_session(&opened.token).await.unwrap().is_none());
    assert!(!db.end_console_session(&opened.token).await.unwrap());

    // Expiry.
    let short = db
        .open_console_session(&issued.secret, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert!(db.console_session(&short.token).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        db.console_session(&short.token).await.unwrap().is_none(),
        "expired"
    );

    // Revoking the key ends its sessions, and no new one opens.
    let other = db
        .open_console_session(&issued.secret, hour)
        .await
        .unwrap()
        .unwrap();
    db.revoke_api_key(acme.id, issued.key.id).await.unwrap();
    assert!(db.console_session(&other.token).await.unwrap().is_none());
    assert!(
        db.open_console_session(&issued.secret, hour)
            .await
            .unwrap()
            .is_none()
    );
}

conformance!(
    lists_are_walled_filtered_and_paged,
    console_sessions_live_only_with_their_key,
);
