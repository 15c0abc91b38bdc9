//! Property tests of batch invariants over random sequences of store operations: positions
//! strictly increase, sequence numbers are dense within a batch, every tool result follows its
//! call in the same batch, and a refused operation changes nothing. Steps go to any batch begun
//! (several may be open at once, so batches' messages interleave), and every way of reading an
//! agent's batches (newest, pages, the current one, those before an id) agrees with what was
//! begun: on SQLite they are found through the messages' positions (migration 0026).

use std::collections::HashSet;

use pattern_db::testkit::TestDb;
use pattern_db::{BatchState, BeginBatch, ContentBlock, Database, NewAgent, NewMessage, Role};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Action {
    Begin,
    Say,
    Call(u8),
    /// Answer the n-th pending call (or an unknown one when none is pending).
    Answer(u8),
    Complete,
    Continue,
    Recover,
    /// Make the n-th batch begun (modulo) the one the next steps go to.
    Switch(u8),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => Just(Action::Begin),
        3 => Just(Action::Say),
        3 => (1u8..4).prop_map(Action::Call),
        4 => any::<u8>().prop_map(Action::Answer),
        2 => Just(Action::Complete),
        1 => Just(Action::Continue),
        1 => Just(Action::Recover),
        2 => any::<u8>().prop_map(Action::Switch),
    ]
}

async fn run(db: &Database, actions: Vec<Action>) {
    let agent = db
        .create_agent(NewAgent::named(format!("p-{}", uuid::Uuid::new_v4())))
        .await
        .unwrap();
    let store = db.messages(agent.id);
    let mut current = None;
    let mut begun = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let mut next_call = 0u32;
    for action in actions {
        let before = store.get_all(None, 10_000, true).await.unwrap().len();
        let outcome = match (&action, current) {
            (Action::Begin, _) => store
                .begin_batch(NewMessage::user("go"), BeginBatch::default())
                .await
                .map(|r| {
                    current = Some(r.batch_id);
                    begun.push(r.batch_id);
                    pending.clear();
                }),
            (Action::Switch(k), _) => {
                if !begun.is_empty() {
                    current = Some(begun[usize::from(*k) % begun.len()]);
                    pending.clear();
                }
                continue;
            }
            (_, None) => continue,
            (Action::Say, Some(b)) => store
                .append_step(b, vec![NewMessage::assistant("hm")])
                .await
                .map(|_| ()),
            (Action::Call(n), Some(b)) => {
                let ids: Vec<String> = (0..*n)
                    .map(|_| {
                        next_call += 1;
                        format!("c{next_call}")
                    })
                    .collect();
                let msg = NewMessage::new(
                    Role::Assistant,
                    ids.iter()
                        .map(|i| ContentBlock::tool_use(i, "t", serde_json::json!({})))
                        .collect(),
                );
                store
                    .append_step(b, vec![msg])
                    .await
                    .map(|_| pending.extend(ids))
            }
            (Action::Answer(k), Some(b)) => {
                let id = if pending.is_empty() {
                    "unknown".to_owned()
                } else {
                    pending[usize::from(*k) % pending.len()].clone()
                };
                let msg =
                    NewMessage::new(Role::Tool, vec![ContentBlock::tool_result(&id, "r", false)]);
                store
                    .append_step(b, vec![msg])
                    .await
                    .map(|_| pending.retain(|p| *p != id))
            }
            (Action::Complete, Some(b)) => store.complete_batch(b).await.map(|_| ()),
            (Action::Continue, Some(b)) => store.continue_batch(b).await.map(|_| ()),
            (Action::Recover, Some(_)) => store
                .recover_scope(pattern_db::RecoveryScope::AllOpen)
                .await
                .map(|_| ()),
        };
        if outcome.is_err() {
            assert_eq!(
                store.get_all(None, 10_000, true).await.unwrap().len(),
                before,
                "a refused {action:?} changed the history"
            );
        }
    }
    // Invariants over the whole stored history.
    let all = store.get_all(None, 10_000, true).await.unwrap();
    check_batch_reads(&store, &begun).await;
    assert!(
        all.windows(2).all(|w| w[0].position < w[1].position),
        "positions not strictly increasing"
    );
    for batch in store.get_recent(10_000).await.unwrap() {
        let seqs: Vec<i64> = batch.messages.iter().map(|m| m.sequence_num).collect();
        assert_eq!(
            seqs,
            (0..seqs.len() as i64).collect::<Vec<_>>(),
            "sequence numbers not dense"
        );
        assert_eq!(batch.messages[0].position, batch.info.id);
        let mut calls = HashSet::new();
        for m in &batch.messages {
            for id in m.tool_use_ids() {
                assert!(calls.insert(id.to_owned()), "duplicate call {id}");
            }
            for id in m.tool_result_ids() {
                assert!(calls.contains(id), "result {id} before or without its call");
            }
        }
        if batch.info.state == BatchState::Complete {
            assert!(
                batch.pending_tool_calls().is_empty(),
                "complete batch with pending calls"
            );
        }
    }
}

/// The ids of `batches`, in the order given.
fn ids(batches: pattern_db::Result<Vec<pattern_db::StoredBatch>>) -> Vec<pattern_db::BatchId> {
    batches.unwrap().iter().map(|b| b.info.id).collect()
}

/// Every read of the agent's batches returns exactly the batches `begun` (ids ascending) it
/// should.
async fn check_batch_reads(store: &pattern_db::MessageStore, begun: &[pattern_db::BatchId]) {
    let recent = ids(store.get_recent(10_000).await);
    assert_eq!(recent, begun, "get_recent missed or invented a batch");
    let newest = ids(store.get_recent(2).await);
    assert_eq!(newest, begun[begun.len().saturating_sub(2)..]);
    let infos = store.list_batches(None, 10_000).await.unwrap();
    let listed: Vec<_> = infos.iter().rev().map(|b| b.id).collect();
    assert_eq!(listed, begun, "list_batches");
    let open = infos
        .iter()
        .find(|b| b.state == pattern_db::BatchState::Open)
        .map(|b| b.id);
    assert_eq!(
        store.current_batch().await.unwrap().map(|b| b.id),
        open,
        "current_batch is not the newest open batch"
    );
    for (i, id) in begun.iter().enumerate() {
        let page: Vec<_> = store
            .list_batches(Some(*id), 2)
            .await
            .unwrap()
            .iter()
            .map(|b| b.id)
            .collect();
        let want: Vec<_> = begun[i.saturating_sub(2)..i]
            .iter()
            .rev()
            .copied()
            .collect();
        assert_eq!(page, want, "list_batches before {id:?}");
        let before = ids(store.live_batches_before(*id, 3).await);
        assert_eq!(before, begun[..i.min(3)], "live_batches_before {id:?}");
    }
}

#[test]
fn batch_invariants_hold_for_any_operation_sequence() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tdb = TestDb::sqlite().unwrap();
    let db = rt.block_on(tdb.open()).unwrap();
    let config = ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    };
    proptest!(config, |(actions in proptest::collection::vec(action(), 1..40))| {
        rt.block_on(run(&db, actions));
    });
}
