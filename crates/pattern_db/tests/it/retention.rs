//! Per-agent retention (`Database::retain_agent`) on both backends, as properties over random
//! histories (several seeds): no open batch is deleted, no batch a summary still needs (complete
//! and not archived under a summary), nothing recent, nothing of another agent; every old
//! abandoned or summarised batch goes with its messages; block versions keep the last `keep` and
//! the last of each day, the current one always; old activity goes; a dry run reports exactly what
//! the apply then does and changes nothing; a zero age or zero `keep` is a typed error.

use pattern_db::{ProtocolError, StorageError};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::Utc;
use pattern_db::retention::{AgentRetention, BatchDisposal, RetentionSettings};
use pattern_db::testkit::{backdate, execute_raw, fetch_texts, minus_ms};
use pattern_db::{
    AgentId, BatchId, BeginBatch, Database, Error, NewAgent, NewBlock, NewMessage, Summary,
};

use crate::{Kind, fresh};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A tiny deterministic generator (no dependency, same sequence on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Writes a random history for `agent`: batches complete, abandoned or left open, a summary over
/// a prefix, a block with ten versions, five activity events.
async fn history(db: &Database, agent: AgentId, rng: &mut Lcg) {
    let store = db.messages(agent);
    let mut complete = Vec::new();
    for i in 0..12 {
        let r = store
            .begin_batch(NewMessage::user(format!("q{i}")), BeginBatch::default())
            .await
            .unwrap();
        store
            .append_step(r.batch_id, vec![NewMessage::assistant(format!("a{i}"))])
            .await
            .unwrap();
        match rng.next(5) {
            0 => {
                store.abandon_batch(r.batch_id, "test").await.unwrap();
            }
            1 => {}
            _ => {
                store.complete_batch(r.batch_id).await.unwrap();
                complete.push(r.batch_id);
            }
        }
    }
    if complete.len() >= 2 {
        let through = complete[usize::try_from(rng.next(complete.len() as u64)).unwrap()];
        let summary = Summary {
            id: store.new_summary_id().unwrap(),
            agent_id: agent,
            content: "what happened".into(),
            from_batch: complete[0],
            through_batch: through,
            message_count: 2,
            depth: 0,
            created_at: Utc::now(),
        };
        store.summarize_and_archive(summary).await.unwrap();
    }
    let block = db
        .create_block(
            agent,
            NewBlock {
                label: "notes".into(),
                description: "notes".into(),
                value: "v1".into(),
                char_limit: 1000,
                block_type: "working".into(),
            },
        )
        .await
        .unwrap();
    let mut version = block.version;
    for i in 2..=10 {
        version = db
            .write_block(
                agent,
                "notes",
                version,
                format!("v{i}"),
                "replace",
                &["admin"],
            )
            .await
            .unwrap();
    }
    for i in 0..5 {
        store
            .log_activity("test", serde_json::json!({ "i": i }))
            .await
            .unwrap();
    }
}

/// Moves everything of `agent` ten days back; block version `v` goes `12 - v/2` days back, so
/// pairs of versions share a day.
async fn age(db: &Database, agent: AgentId) {
    let a = agent.to_string();
    let ten = (10 * DAY_MS).to_string();
    let b = db.backend();
    for sql in [
        format!(
            "UPDATE batches SET started_at = {}, completed_at = {} WHERE agent_id = '{a}'",
            minus_ms(b, "started_at", &ten),
            minus_ms(b, "completed_at", &ten)
        ),
        format!(
            "UPDATE activity_events SET created_at = {} WHERE agent_id = '{a}'",
            minus_ms(b, "created_at", &ten)
        ),
        format!(
            "UPDATE memory_block_versions SET created_at = {} \
             WHERE block_id IN (SELECT id FROM memory_blocks WHERE owner_agent_id = '{a}')",
            minus_ms(b, "created_at", &format!("(12 - version / 2) * {DAY_MS}"))
        ),
    ] {
        execute_raw(db, &sql).await.unwrap();
    }
}

/// `id -> (state, archived, covered by a summary)` of the agent's batches.
async fn batches(db: &Database, agent: AgentId) -> BTreeMap<i64, (String, bool, bool)> {
    let rows = fetch_texts(
        db,
        &format!(
            "SELECT CAST(b.id AS TEXT) || ':' || b.state || ':' || \
             CASE WHEN b.archived THEN 'a' ELSE 'l' END || ':' || \
             CASE WHEN EXISTS (SELECT 1 FROM summaries s WHERE s.agent_id = b.agent_id \
                  AND s.from_batch <= b.id AND b.id <= s.through_batch) THEN 's' ELSE 'n' END \
             FROM batches b WHERE b.agent_id = '{agent}'"
        ),
    )
    .await
    .unwrap();
    rows.iter()
        .map(|r| {
            let parts: Vec<&str> = r.split(':').collect();
            (
                parts[0].parse().unwrap(),
                (parts[1].to_owned(), parts[2] == "a", parts[3] == "s"),
            )
        })
        .collect()
}

/// Rows of `agent` in every table retention may touch.
async fn counts(db: &Database, agent: AgentId) -> Vec<String> {
    let a = agent.to_string();
    let mut out = Vec::new();
    for sql in [
        format!("SELECT CAST(COUNT(*) AS TEXT) FROM batches WHERE agent_id = '{a}'"),
        format!(
            "SELECT CAST(COUNT(*) AS TEXT) FROM messages m JOIN batches b ON b.id = m.batch_id \
             WHERE b.agent_id = '{a}'"
        ),
        format!("SELECT CAST(COUNT(*) AS TEXT) FROM activity_events WHERE agent_id = '{a}'"),
        format!("SELECT CAST(COUNT(*) AS TEXT) FROM summaries WHERE agent_id = '{a}'"),
        format!(
            "SELECT CAST(COUNT(*) AS TEXT) FROM memory_block_versions WHERE block_id IN \
             (SELECT id FROM memory_blocks WHERE owner_agent_id = '{a}')"
        ),
    ] {
        out.extend(fetch_texts(db, &sql).await.unwrap());
    }
    out
}

async fn versions(db: &Database, agent: AgentId) -> BTreeSet<i64> {
    fetch_texts(
        db,
        &format!(
            "SELECT CAST(version AS TEXT) FROM memory_block_versions WHERE block_id IN \
             (SELECT id FROM memory_blocks WHERE owner_agent_id = '{agent}')"
        ),
    )
    .await
    .unwrap()
    .iter()
    .map(|v| v.parse().unwrap())
    .collect()
}

async fn retention_keeps_what_is_needed(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    for seed in 1..=4u64 {
        let mut rng = Lcg(seed);
        let a = db
            .create_agent(NewAgent::named(format!("a{seed}")))
            .await
            .unwrap()
            .id;
        let b = db
            .create_agent(NewAgent::named(format!("b{seed}")))
            .await
            .unwrap()
            .id;
        history(&db, a, &mut rng).await;
        history(&db, b, &mut rng).await;
        age(&db, a).await;
        age(&db, b).await;
        // One recent batch, abandoned: too young to go.
        let store = db.messages(a);
        let recent: BatchId = store
            .begin_batch(NewMessage::user("new"), BeginBatch::default())
            .await
            .unwrap()
            .batch_id;
        store.abandon_batch(recent, "test").await.unwrap();

        let before = batches(&db, a).await;
        let b_before = counts(&db, b).await;
        let policy = AgentRetention {
            batches_older_than: Some(Duration::from_secs(86_400)),
            keep_block_versions: Some(3),
            activity_older_than: Some(Duration::from_secs(86_400)),
            dry_run: true,
            ..AgentRetention::default()
        };
        let a_before = counts(&db, a).await;
        let dry = db.retain_agent(a, policy.clone()).await.unwrap();
        assert_eq!(counts(&db, a).await, a_before, "a dry run changes nothing");
        let applied = db
            .retain_agent(
                a,
                AgentRetention {
                    dry_run: false,
                    ..policy
                },
            )
            .await
            .unwrap();
        assert_eq!(
            (
                &dry.deleted_batches,
                dry.deleted_messages,
                dry.deleted_block_versions,
                dry.deleted_activity_events
            ),
            (
                &applied.deleted_batches,
                applied.deleted_messages,
                applied.deleted_block_versions,
                applied.deleted_activity_events
            ),
            "seed {seed}: the dry run reports what the apply does"
        );

        // Exactly the old abandoned batches and the old summarised ones went.
        let after = batches(&db, a).await;
        let expected: Vec<i64> = before
            .iter()
            .filter(|(id, (state, archived, covered))| {
                **id != recent.0
                    && (state == "abandoned" || (state == "complete" && *archived && *covered))
            })
            .map(|(id, _)| *id)
            .collect();
        assert!(
            !expected.is_empty(),
            "seed {seed} deletes nothing: a weak case"
        );
        assert_eq!(applied.deleted_batches, expected, "seed {seed}");
        for (id, (state, archived, covered)) in &before {
            let kept = after.contains_key(id);
            if state == "open"
                || *id == recent.0
                || (state == "complete" && !(*archived && *covered))
            {
                assert!(kept, "seed {seed}: batch {id} ({state}) must stay");
            }
        }
        assert_eq!(after.len(), before.len() - expected.len());
        let left: Vec<String> = fetch_texts(
            &db,
            &format!(
                "SELECT CAST(m.batch_id AS TEXT) FROM messages m JOIN batches b ON b.id = m.batch_id \
                 WHERE b.agent_id = '{a}' AND m.batch_id IN ({})",
                expected
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .await
        .unwrap();
        assert!(left.is_empty(), "messages of deleted batches remain");
        assert!(applied.deleted_messages >= 2 * expected.len() as u64);

        // Versions 8..=10 (the last three) stay; of older days only each day's last: 7, 5, 3, 1.
        assert_eq!(
            versions(&db, a).await,
            BTreeSet::from([1, 3, 5, 7, 8, 9, 10])
        );
        assert_eq!(applied.deleted_block_versions, 3);
        assert_eq!(db.block(a, "notes").await.unwrap().value, "v10");
        // The five logged and any the store logged itself (abandonments), as old as they.
        assert!(applied.deleted_activity_events >= 5);
        let old_left = fetch_texts(
            &db,
            &format!(
                "SELECT CAST(COUNT(*) AS TEXT) FROM activity_events WHERE agent_id = '{a}' \
                 AND created_at < {}",
                pattern_db::sql::time_of_millis(
                    db.backend(),
                    &(Utc::now().timestamp_millis() - DAY_MS).to_string()
                )
            ),
        )
        .await
        .unwrap();
        assert_eq!(old_left, ["0"]);

        // The other agent is untouched.
        assert_eq!(
            counts(&db, b).await,
            b_before,
            "seed {seed}: agent b changed"
        );
    }

    // Zero ages and zero versions are refused, nothing changed.
    let a = db.create_agent(NewAgent::named("z")).await.unwrap().id;
    for policy in [
        AgentRetention {
            batches_older_than: Some(Duration::ZERO),
            ..AgentRetention::default()
        },
        AgentRetention {
            activity_older_than: Some(Duration::ZERO),
            ..AgentRetention::default()
        },
        AgentRetention {
            keep_block_versions: Some(0),
            ..AgentRetention::default()
        },
    ] {
        let e = db.retain_agent(a, policy).await.unwrap_err();
        assert!(
            matches!(e, Error::Protocol(ProtocolError::InvalidRetention(_))),
            "{e:?}"
        );
        assert_eq!(e.class(), pattern_db::ErrorClass::Invalid);
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Stored policies: set, read back, replaced, cleared; bad input (zero, over the bound, a policy
/// that keeps everything, archiving without an age, an unknown agent) refused with nothing
/// stored; a row written around the API that keeps everything reads as corrupt, never as a
/// policy.
async fn stored_policies_round_trip_and_refuse_bad_input(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("a")).await.unwrap().id;
    let b = db.create_agent(NewAgent::named("b")).await.unwrap().id;
    assert!(db.retention_policy(a).await.unwrap().is_none());
    let settings = RetentionSettings {
        batches_older_than_days: Some(30),
        batch_disposal: BatchDisposal::Archive,
        keep_block_versions: Some(5),
        activity_older_than_days: None,
    };
    let stored = db.set_retention_policy(a, settings).await.unwrap();
    assert_eq!(stored.settings, settings);
    assert_eq!(db.retention_policy(a).await.unwrap().unwrap(), stored);
    let replaced = RetentionSettings {
        activity_older_than_days: Some(7),
        batches_older_than_days: None,
        batch_disposal: BatchDisposal::Delete,
        keep_block_versions: None,
    };
    db.set_retention_policy(b, replaced).await.unwrap();
    let all = db.retention_policies().await.unwrap();
    assert_eq!(all.len(), 2);
    for bad in [
        RetentionSettings {
            batches_older_than_days: Some(0),
            ..settings
        },
        RetentionSettings {
            activity_older_than_days: Some(0),
            ..settings
        },
        RetentionSettings {
            keep_block_versions: Some(0),
            ..settings
        },
        RetentionSettings {
            batches_older_than_days: Some(pattern_db::retention::MAX_RETENTION_DAYS + 1),
            ..settings
        },
        RetentionSettings::default(),
        RetentionSettings {
            batch_disposal: BatchDisposal::Archive,
            batches_older_than_days: None,
            ..replaced
        },
    ] {
        let e = db.set_retention_policy(a, bad).await.unwrap_err();
        assert!(
            matches!(e, Error::Protocol(ProtocolError::InvalidRetention(_))),
            "{e:?}"
        );
        assert_eq!(e.class(), pattern_db::ErrorClass::Invalid);
    }
    assert_eq!(db.retention_policy(a).await.unwrap().unwrap(), stored);
    let ghost = AgentId(uuid::Uuid::from_u128(42));
    let e = db.set_retention_policy(ghost, settings).await.unwrap_err();
    assert_eq!(e.class(), pattern_db::ErrorClass::NotFound, "{e:?}");
    assert!(db.clear_retention_policy(a).await.unwrap());
    assert!(!db.clear_retention_policy(a).await.unwrap());
    assert!(db.retention_policy(a).await.unwrap().is_none());
    // A row that keeps everything, written around the API, is refused when read.
    execute_raw(
        &db,
        &format!(
            "INSERT INTO retention_policies (agent_id, batch_disposal, updated_at) \
             VALUES ('{a}', 'delete', {})",
            pattern_db::sql::time_of_millis(db.backend(), "0")
        ),
    )
    .await
    .unwrap();
    let e = db.retention_policy(a).await.unwrap_err();
    assert!(
        matches!(e, Error::Storage(StorageError::Corrupt(_))),
        "{e:?}"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// An archive plan records the old batches once: planning again before the pass (a pass that
/// crashed after writing its file) returns the same ids, the pass deletes exactly those, and
/// then nothing is planned. A pass with `Archive` and no plan deletes no batch.
async fn archive_plans_are_finished_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let a = db.create_agent(NewAgent::named("a")).await.unwrap().id;
    let b = db.create_agent(NewAgent::named("b")).await.unwrap().id;
    let mut rng = Lcg(7);
    history(&db, a, &mut rng).await;
    history(&db, b, &mut rng).await;
    age(&db, a).await;
    age(&db, b).await;
    let day = Duration::from_secs(86_400);
    let pass = |dry_run| AgentRetention {
        batches_older_than: Some(day),
        batch_disposal: BatchDisposal::Archive,
        dry_run,
        ..AgentRetention::default()
    };
    let before = batches(&db, a).await;
    let b_before = counts(&db, b).await;
    let unplanned = db.retain_agent(a, pass(false)).await.unwrap();
    assert!(
        unplanned.deleted_batches.is_empty(),
        "no plan, nothing goes"
    );
    assert_eq!(batches(&db, a).await, before);
    let dry = db.retain_agent(a, pass(true)).await.unwrap();
    let plan = db.plan_archive(a, day).await.unwrap();
    assert!(!plan.is_empty());
    let ids: Vec<i64> = plan.iter().map(|b| b.get()).collect();
    assert_eq!(
        dry.deleted_batches, ids,
        "the dry run reports what a plan takes"
    );
    // A crash here: the plan stands, the same batches are planned again.
    let again = db.plan_archive(a, day).await.unwrap();
    assert_eq!(again, plan);
    let done = db.retain_agent(a, pass(false)).await.unwrap();
    assert_eq!(done.deleted_batches, ids);
    assert!(db.plan_archive(a, day).await.unwrap().is_empty());
    assert!(matches!(
        db.plan_archive(a, Duration::ZERO).await.unwrap_err(),
        Error::Protocol(ProtocolError::InvalidRetention(_))
    ));
    assert_eq!(counts(&db, b).await, b_before, "agent b changed");
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// One case of the property: two agents with random histories made old, one recent abandoned
/// batch; `a` gets `settings` stored; the pass a stored policy asks for (planning first when it
/// archives) runs. No open batch, no complete batch a summary still needs, nothing recent and
/// nothing of `b` goes; every old abandoned or summarised batch of `a` does.
async fn stored_policy_case(db: &Database, n: u64, seed: u64, settings: RetentionSettings) {
    let mut rng = Lcg(seed);
    let a = db
        .create_agent(NewAgent::named(format!("pa{n}")))
        .await
        .unwrap()
        .id;
    let b = db
        .create_agent(NewAgent::named(format!("pb{n}")))
        .await
        .unwrap()
        .id;
    history(db, a, &mut rng).await;
    history(db, b, &mut rng).await;
    age(db, a).await;
    age(db, b).await;
    let store = db.messages(a);
    let recent = store
        .begin_batch(NewMessage::user("new"), BeginBatch::default())
        .await
        .unwrap()
        .batch_id;
    store.abandon_batch(recent, "test").await.unwrap();
    db.set_retention_policy(a, settings).await.unwrap();
    db.set_retention_policy(b, settings).await.unwrap();
    let before = batches(db, a).await;
    let b_before = counts(db, b).await;
    let stored = db.retention_policy(a).await.unwrap().unwrap().settings;
    let pass = stored.to_pass(false);
    if stored.batch_disposal == BatchDisposal::Archive
        && let Some(age) = pass.batches_older_than
    {
        db.plan_archive(a, age).await.unwrap();
    }
    let report = db.retain_agent(a, pass).await.unwrap();
    let after = batches(db, a).await;
    for (id, (state, archived, covered)) in &before {
        let needed = state == "open"
            || *id == recent.get()
            || (state == "complete" && !(*archived && *covered));
        if needed || stored.batches_older_than_days.is_none() {
            assert!(after.contains_key(id), "batch {id} ({state}) must stay");
        } else {
            assert!(!after.contains_key(id), "old batch {id} ({state}) must go");
        }
    }
    assert_eq!(after.len(), before.len() - report.deleted_batches.len());
    assert_eq!(counts(db, b).await, b_before, "agent b changed");
}

async fn stored_policies_keep_what_is_needed(kind: Kind) {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let settings = (
        proptest::option::of(1u32..5),
        prop_oneof![Just(BatchDisposal::Delete), Just(BatchDisposal::Archive)],
        proptest::option::of(1u32..4),
        proptest::option::of(1u32..5),
    )
        .prop_filter_map("a valid policy", |(b, d, k, a)| {
            let s = RetentionSettings {
                batches_older_than_days: b,
                batch_disposal: d,
                keep_block_versions: k,
                activity_older_than_days: a,
            };
            s.check().ok().map(|()| s)
        });
    // Drawn by proptest's runner (its seed in the failure output), run here: the cases are
    // async and share one database per backend.
    let mut runner = TestRunner::new(Config::default());
    let strategy = (any::<u64>(), settings);
    let cases: Vec<_> = (0..6)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    for (n, (seed, s)) in cases.into_iter().enumerate() {
        stored_policy_case(&db, n as u64, seed, s).await;
    }
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Bytes the database holds in use: SQLite's pages in use (`page_count - freelist_count`, so
/// freed pages that later writes reuse do not count), PostgreSQL's `pg_total_relation_size` of
/// every table (after `VACUUM`, which autovacuum does in a deployment).
async fn stored_bytes(db: &Database, kind: Kind) -> u64 {
    let sql = match kind {
        Kind::Sqlite => {
            "SELECT CAST(((SELECT page_count FROM pragma_page_count()) - \
             (SELECT freelist_count FROM pragma_freelist_count())) * \
             (SELECT page_size FROM pragma_page_size()) AS TEXT)"
        }
        _ => "SELECT CAST(SUM(pg_total_relation_size(relid)) AS TEXT) FROM pg_stat_user_tables",
    };
    fetch_texts(db, sql).await.unwrap()[0].parse().unwrap()
}

/// Storage stays flat under a long life (issue 18): an agent writes turns (a user message and an
/// answer of a few hundred characters, an activity event, a block change every fifth turn), and
/// every 50 turns the history is summarised as the context does (a summary folding the previous
/// one, over all but the newest 20 batches, archiving what it covers), time moves on (6 hours:
/// 200 turns a day), a stored policy is applied (batches after a day, 3 block versions and one a
/// day, activity after a day), the full-text index catches up (a search) and the search log is
/// pruned to it. After a warm-up the bytes in use at the end are at most 1.1x those at the
/// midpoint. `PATTERN_RETENTION_TURNS` sets the turns (default 1,000; the long form is 100,000,
/// docs/performance.md).
async fn storage_stays_flat(kind: Kind) {
    let turns: usize = std::env::var("PATTERN_RETENTION_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    const ROUND: usize = 50;
    const LIVE: usize = 20;
    let tdb = fresh(kind).await;
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("long")).await.unwrap().id;
    db.set_retention_policy(
        agent,
        RetentionSettings {
            batches_older_than_days: Some(1),
            batch_disposal: BatchDisposal::Delete,
            keep_block_versions: Some(3),
            activity_older_than_days: Some(1),
        },
    )
    .await
    .unwrap();
    let block = db
        .create_block(
            agent,
            NewBlock {
                label: "notes".into(),
                description: "notes".into(),
                value: "v0".into(),
                char_limit: 10_000,
                block_type: "working".into(),
            },
        )
        .await
        .unwrap();
    let mut version = block.version;
    let store = db.messages(agent);
    let mut complete: Vec<BatchId> = Vec::new();
    let mut previous: Option<Summary> = None;
    let mut summarised = 0usize;
    let mut mid = 0u64;
    let mut end = 0u64;
    let start = std::time::Instant::now();
    let words = [
        "river", "lamp", "orbit", "cedar", "velvet", "harbor", "quartz", "meadow",
    ];
    for t in 0..turns {
        let text = |n: usize| {
            (0..n)
                .map(|i| words[(t * 7 + i * 3) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let r = store
            .begin_batch(
                NewMessage::user(format!("turn {t}: {}", text(40))),
                BeginBatch::default(),
            )
            .await
            .unwrap();
        store
            .append_step(r.batch_id, vec![NewMessage::assistant(text(90))])
            .await
            .unwrap();
        store.complete_batch(r.batch_id).await.unwrap();
        complete.push(r.batch_id);
        store
            .log_activity("turn", serde_json::json!({ "t": t }))
            .await
            .unwrap();
        if t % 5 == 0 {
            version = db
                .write_block(
                    agent,
                    "notes",
                    version,
                    format!("after turn {t}: {}", text(30)),
                    "replace",
                    &["admin"],
                )
                .await
                .unwrap();
        }
        if (t + 1) % ROUND == 0 {
            let through = complete[complete.len() - LIVE - 1];
            let first = complete[summarised];
            let summary = Summary {
                id: store.new_summary_id().unwrap(),
                agent_id: agent,
                content: format!("up to turn {t}: {}", text(60)),
                from_batch: previous.as_ref().map_or(first, |p| p.from_batch),
                through_batch: through,
                message_count: 2 * (complete.len() - LIVE) as i64,
                depth: previous.as_ref().map_or(0, |p| p.depth + 1),
                created_at: Utc::now(),
            };
            store.summarize_and_archive(summary.clone()).await.unwrap();
            summarised = complete.len() - LIVE;
            previous = Some(summary);
            backdate(&db, Duration::from_secs(6 * 3600)).await.unwrap();
            let policy = db.retention_policy(agent).await.unwrap().unwrap();
            db.retain_agent(agent, policy.settings.to_pass(false))
                .await
                .unwrap();
            db.search_text("river", &pattern_db::search::TextSearch::default())
                .await
                .unwrap();
            db.prune_applied_search_changes().await.unwrap();
            if kind == Kind::Postgres {
                execute_raw(&db, "VACUUM").await.unwrap();
            }
            if t + 1 == turns / 2 / ROUND * ROUND {
                mid = stored_bytes(&db, kind).await;
            }
            end = stored_bytes(&db, kind).await;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let live = batches(&db, agent).await.len();
    eprintln!(
        "storage_stays_flat {kind:?}: {turns} turns in {secs:.1} s ({:.0} turns/s); bytes in use \
         at the midpoint {mid}, at the end {end} ({:.3}x); {live} batches stored",
        turns as f64 / secs,
        end as f64 / mid as f64
    );
    assert!(mid > 0 && end > 0);
    assert!(
        end as f64 <= 1.1 * mid as f64,
        "storage grew from {mid} to {end} bytes between the midpoint and the end"
    );
    // Nothing needed went: the newest batches are all there.
    assert!(live >= LIVE, "{live} batches left");
    // Summaries a newer one contains went once a day old (the newest stays); the search log
    // holds only what its follower has not applied.
    let count = |sql: &str| {
        let sql = sql.to_owned();
        let db = db.clone();
        async move {
            fetch_texts(&db, &sql).await.unwrap()[0]
                .parse::<u64>()
                .unwrap()
        }
    };
    let summaries = count("SELECT CAST(COUNT(*) AS TEXT) FROM summaries").await;
    assert!((1..=6).contains(&summaries), "{summaries} summaries kept");
    let changes = count("SELECT CAST(COUNT(*) AS TEXT) FROM search_changes").await;
    assert!(changes < 4 * ROUND as u64, "{changes} search changes kept");
    let versions = count("SELECT CAST(COUNT(*) AS TEXT) FROM memory_block_versions").await;
    assert!(
        versions <= 3 + (turns / ROUND / 4 + 2) as u64,
        "{versions} block versions kept"
    );
    db.close().await;
    tdb.cleanup().await.unwrap();
}

/// Two handles (two pools and writers, as two `pattern serve` processes) apply the same stored
/// policy at once, archiving: each batch is deleted by exactly one of them, neither fails, and
/// what is left is what one pass leaves.
async fn concurrent_passes_delete_once(kind: Kind) {
    let tdb = fresh(kind).await;
    let one = tdb.open().await.unwrap();
    let two = tdb.open().await.unwrap();
    let a = one.create_agent(NewAgent::named("a")).await.unwrap().id;
    let mut rng = Lcg(11);
    history(&one, a, &mut rng).await;
    age(&one, a).await;
    let settings = RetentionSettings {
        batches_older_than_days: Some(1),
        batch_disposal: BatchDisposal::Archive,
        keep_block_versions: Some(3),
        activity_older_than_days: Some(1),
    };
    one.set_retention_policy(a, settings).await.unwrap();
    let expected = one
        .retain_agent(a, settings.to_pass(true))
        .await
        .unwrap()
        .deleted_batches;
    assert!(!expected.is_empty());
    let pass = |db: Database| async move {
        let policy = db.retention_policy(a).await.unwrap().unwrap().settings;
        let day = Duration::from_secs(86_400);
        db.plan_archive(a, day).await.unwrap();
        db.retain_agent(a, policy.to_pass(false)).await.unwrap()
    };
    let (r1, r2) = tokio::join!(
        tokio::spawn(pass(one.clone())),
        tokio::spawn(pass(two.clone()))
    );
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    let mut all: Vec<i64> = r1
        .deleted_batches
        .iter()
        .chain(&r2.deleted_batches)
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(all, expected, "each batch deleted once: {r1:?} {r2:?}");
    assert_eq!(
        r1.deleted_block_versions + r2.deleted_block_versions,
        3,
        "versions deleted once"
    );
    let again = one.retain_agent(a, settings.to_pass(true)).await.unwrap();
    assert!(again.deleted_batches.is_empty());
    two.close().await;
    one.close().await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    storage_stays_flat,
    concurrent_passes_delete_once,
    stored_policies_keep_what_is_needed,
    retention_keeps_what_is_needed,
    stored_policies_round_trip_and_refuse_bad_input,
    archive_plans_are_finished_once
);
