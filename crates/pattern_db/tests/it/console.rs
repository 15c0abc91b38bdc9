//! What the web console reads beyond the API's agents: console sessions (open only with a live
//! key, expire, end at logout, end when their key is revoked, tokens stored hashed). The
//! organization-scoped lists of sessions and meetings are pattern_protocol's (`storage` tests).

use std::time::Duration;

use crate::{Kind, fresh};

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

conformance!(console_sessions_live_only_with_their_key,);
