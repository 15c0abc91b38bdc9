//! `DbMemoryStore` on SQLite and PostgreSQL: edit semantics, permissions, limits, sharing and
//! concurrent writers. Each case is written once and instantiated for both backends by the macro
//! at the bottom.

use std::sync::Arc;

use memory_v2::{
    BlockType, DbMemoryStore, Error, MemoryEditor, MemoryStore, NewMemoryBlock, Permission,
    WriteAuth,
};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Database, NewAgent};

use WriteAuth::{Agent, Approved};

use pattern_db::Backend as Kind;

async fn fresh(kind: Kind) -> TestDb {
    TestDb::fresh(kind).await.unwrap()
}

fn new(label: &str, value: &str, limit: usize, block_type: BlockType) -> NewMemoryBlock {
    NewMemoryBlock {
        label: label.into(),
        description: format!("about {label}"),
        value: value.into(),
        char_limit: limit,
        block_type,
    }
}

async fn agent(db: &Database, name: &str) -> AgentId {
    db.create_agent(NewAgent::named(name)).await.unwrap().id
}

async fn edits(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = agent(&db, "ada").await;
    let store: Arc<dyn MemoryEditor> = Arc::new(DbMemoryStore::new(db.clone()));
    let b = store
        .create_block(ada, new("notes", "one\ntwo two", 100, BlockType::Working))
        .await
        .unwrap();
    assert_eq!((b.version, b.permission), (1, Permission::Admin));

    // replace: the first occurrence only.
    let v = store
        .replace(ada, "notes", "two", "2", 1, Agent)
        .await
        .unwrap();
    assert_eq!(v, 2);
    assert_eq!(store.block(ada, "notes").await.unwrap().value, "one\n2 two");
    assert!(matches!(
        store.replace(ada, "notes", "three", "3", 2, Agent).await,
        Err(Error::TextNotFound { ref text, .. }) if text == "three"
    ));
    // append: on a new line.
    assert_eq!(
        store.append(ada, "notes", "three", 2, Agent).await.unwrap(),
        3
    );
    assert_eq!(
        store.block(ada, "notes").await.unwrap().value,
        "one\n2 two\nthree"
    );
    // insert: as line n (0-based); the line count appends; past it is an error.
    assert_eq!(
        store
            .insert(ada, "notes", 0, "zero", 3, Agent)
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        store
            .insert(ada, "notes", 4, "four", 4, Agent)
            .await
            .unwrap(),
        5
    );
    assert_eq!(
        store.block(ada, "notes").await.unwrap().value,
        "zero\none\n2 two\nthree\nfour"
    );
    assert!(matches!(
        store.insert(ada, "notes", 6, "x", 5, Agent).await,
        Err(Error::LineOutOfRange {
            line: 6,
            lines: 5,
            ..
        })
    ));
    // set, then undo restores the value from before it.
    assert_eq!(store.set(ada, "notes", "fresh", 5, Agent).await.unwrap(), 6);
    assert_eq!(store.undo(ada, "notes", 6, Agent).await.unwrap(), 7);
    assert_eq!(
        store.block(ada, "notes").await.unwrap().value,
        "zero\none\n2 two\nthree\nfour"
    );
    let history = store.history(ada, "notes").await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|h| h.change.as_str())
            .collect::<Vec<_>>(),
        [
            "undo", "replace", "insert", "insert", "append", "replace", "create"
        ]
    );
    assert_eq!(
        history.iter().map(|h| h.version).collect::<Vec<_>>(),
        [7, 6, 5, 4, 3, 2, 1]
    );
    // A stale version is a conflict with the facts to retry.
    assert!(matches!(
        store.append(ada, "notes", "late", 3, Agent).await,
        Err(Error::Conflict {
            expected: 3,
            current: 7,
            ..
        })
    ));
    // Unknown blocks and nothing to undo.
    assert!(matches!(
        store.append(ada, "nope", "x", 1, Agent).await,
        Err(Error::UnknownBlock { .. })
    ));
    store
        .create_block(ada, new("fresh", "", 10, BlockType::Core))
        .await
        .unwrap();
    assert!(matches!(
        store.undo(ada, "fresh", 1, Agent).await,
        Err(Error::NothingToUndo { .. })
    ));
    // Context blocks leave archival ones out, by label.
    store
        .create_block(ada, new("archive", "old", 10, BlockType::Archival))
        .await
        .unwrap();
    let labels: Vec<String> = store
        .context_blocks(ada)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.label)
        .collect();
    assert_eq!(labels, ["fresh", "notes"]);
    assert!(matches!(
        store
            .create_block(ada, new("Bad Label", "", 10, BlockType::Core))
            .await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        store
            .create_block(ada, new("notes", "", 10, BlockType::Core))
            .await,
        Err(Error::LabelTaken { .. })
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn over_limit_is_refused_and_nothing_changes(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = agent(&db, "ada").await;
    let store = DbMemoryStore::new(db.clone());
    store
        .create_block(ada, new("human", "ab", 5, BlockType::Core))
        .await
        .unwrap();
    let err = store
        .append(ada, "human", "çdé", 1, Agent)
        .await
        .unwrap_err();
    // "ab\nçdé" is 6 characters: the agent is told the numbers, nothing is cut.
    assert!(
        matches!(err, Error::OverLimit { ref label, chars: 6, limit: 5 } if label == "human"),
        "{err}"
    );
    assert!(err.to_string().contains("at most 5 characters"), "{err}");
    let b = store.block(ada, "human").await.unwrap();
    assert_eq!((b.value.as_str(), b.version), ("ab", 1));
    assert_eq!(store.history(ada, "human").await.unwrap().len(), 1);
    // Exactly at the limit is fine.
    assert_eq!(store.append(ada, "human", "çd", 1, Agent).await.unwrap(), 2);
    assert_eq!(store.block(ada, "human").await.unwrap().char_count(), 5);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn permissions_matrix(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let owner = agent(&db, "owner").await;
    let store = DbMemoryStore::new(db.clone());
    let all = [
        Permission::ReadOnly,
        Permission::Partner,
        Permission::Human,
        Permission::Append,
        Permission::ReadWrite,
        Permission::Admin,
    ];
    for (i, permission) in all.into_iter().enumerate() {
        let label = format!("b{i}");
        store
            .create_block(owner, new(&label, "x", 1000, BlockType::Core))
            .await
            .unwrap();
        let other = agent(&db, &format!("agent{i}")).await;
        store.share(owner, &label, other, permission).await.unwrap();
        assert_eq!(
            store.block(other, &label).await.unwrap().permission,
            permission
        );

        // (operation, auth) -> outcome; every op is tried against the current version.
        for auth in [Agent, Approved] {
            let v = store.block(other, &label).await.unwrap().version;
            let append = store.append(other, &label, "a", v, auth).await;
            let v = store.block(other, &label).await.unwrap().version;
            let replace = store.replace(other, &label, "x", "y", v, auth).await;
            let v = store.block(other, &label).await.unwrap().version;
            let set = store.set(other, &label, "x", v, auth).await;
            let v = store.block(other, &label).await.unwrap().version;
            let insert = store.insert(other, &label, 0, "i", v, auth).await;
            let approved = auth == Approved;
            let (may_append, may_rewrite) = match permission {
                Permission::ReadOnly => (false, false),
                Permission::Append => (true, false),
                Permission::ReadWrite | Permission::Admin => (true, true),
                Permission::Partner | Permission::Human => (approved, approved),
            };
            let expect = |ok: bool, r: &Result<i64, Error>, op: &str| {
                if ok {
                    assert!(r.is_ok(), "{permission:?} {auth:?} {op}: {r:?}");
                } else if matches!(permission, Permission::Partner | Permission::Human) {
                    assert!(
                        matches!(r, Err(Error::NeedsApproval { permission: p, .. }) if *p == permission),
                        "{permission:?} {auth:?} {op}: {r:?}"
                    );
                } else {
                    assert!(
                        matches!(r, Err(Error::PermissionDenied { permission: p, .. }) if *p == permission),
                        "{permission:?} {auth:?} {op}: {r:?}"
                    );
                }
            };
            expect(may_append, &append, "append");
            expect(may_rewrite, &replace, "replace");
            expect(may_rewrite, &set, "set");
            expect(may_rewrite, &insert, "insert");
        }
        // Only admins share.
        let third = agent(&db, &format!("third{i}")).await;
        let shared = store
            .share(other, &label, third, Permission::ReadOnly)
            .await;
        if permission == Permission::Admin {
            shared.unwrap();
        } else {
            assert!(
                matches!(
                    shared,
                    Err(Error::PermissionDenied {
                        operation: "share",
                        ..
                    })
                ),
                "{shared:?}"
            );
        }
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn shared_block_seen_by_two_agents(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let (ada, bob, eve) = (
        agent(&db, "ada").await,
        agent(&db, "bob").await,
        agent(&db, "eve").await,
    );
    let store = DbMemoryStore::new(db.clone());
    store
        .create_block(ada, new("team", "plan", 100, BlockType::Core))
        .await
        .unwrap();
    store
        .share(ada, "team", bob, Permission::Append)
        .await
        .unwrap();
    let (a, b) = (
        store.block(ada, "team").await.unwrap(),
        store.block(bob, "team").await.unwrap(),
    );
    assert_eq!(
        (a.permission, b.permission),
        (Permission::Admin, Permission::Append)
    );
    store
        .append(bob, "team", "bob: done", 1, Agent)
        .await
        .unwrap();
    assert_eq!(
        store.block(ada, "team").await.unwrap().value,
        "plan\nbob: done"
    );
    assert_eq!(store.history(ada, "team").await.unwrap()[0].changed_by, bob);
    // Eve has no access: she sees nothing, not even by label.
    assert!(store.context_blocks(eve).await.unwrap().is_empty());
    assert!(matches!(
        store.block(eve, "team").await,
        Err(Error::UnknownBlock { .. })
    ));
    assert!(matches!(
        store.append(eve, "team", "x", 2, Agent).await,
        Err(Error::UnknownBlock { .. })
    ));
    db.close().await;
    tdb.cleanup().await.unwrap();
}

async fn concurrent_appends_lose_nothing(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let ada = agent(&db, "ada").await;
    let bob = agent(&db, "bob").await;
    let store: Arc<dyn MemoryEditor> = Arc::new(DbMemoryStore::new(db.clone()));
    store
        .create_block(ada, new("log", "", 100_000, BlockType::Log))
        .await
        .unwrap();
    store
        .share(ada, "log", bob, Permission::Append)
        .await
        .unwrap();
    let tasks = 16;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let who = if t % 2 == 0 { ada } else { bob };
        handles.push(tokio::spawn(async move {
            let mut conflicts = 0;
            loop {
                let v = store.block(who, "log").await.unwrap().version;
                match store
                    .append(who, "log", &format!("entry {t}"), v, Agent)
                    .await
                {
                    Ok(_) => return conflicts,
                    Err(Error::Conflict { .. }) => conflicts += 1,
                    Err(e) => panic!("task {t}: {e}"),
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let block = store.block(ada, "log").await.unwrap();
    for t in 0..tasks {
        let line = format!("entry {t}");
        assert_eq!(
            block.value.lines().filter(|l| *l == line).count(),
            1,
            "{line} in {:?}",
            block.value
        );
    }
    assert_eq!(block.value.lines().count(), tasks);
    assert_eq!(block.version, 1 + tasks as i64);
    assert_eq!(store.history(ada, "log").await.unwrap().len(), 1 + tasks);
    db.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    edits,
    over_limit_is_refused_and_nothing_changes,
    permissions_matrix,
    shared_block_seen_by_two_agents,
    concurrent_appends_lose_nothing,
);
