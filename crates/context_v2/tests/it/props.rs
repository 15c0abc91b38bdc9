//! Property tests: `assemble` on generated histories.
//!
//! A history is several batches in random states (complete, crashed while open, abandoned), each
//! made of steps with up to three parallel tool calls whose results are stored shuffled, spread
//! over one or several messages, sometimes beside user text or after an assistant remark; crashes
//! cut batches at any message; heartbeat continuations interleave positions with the next batch;
//! deleted junk (that would be damage if it were live) is sprinkled in; batches and messages are
//! handed over in random order. Duplicate deliveries are refused by the store, so none are made.
//! Some histories are damaged on purpose, the way imported or edited data can be.
//!
//! For every input, `assemble` either returns a history that passes `validate`, holds every
//! included batch whole (the active batch cut only before an assistant message with an
//! unanswered call), never an abandoned or orphaned batch, batches in id order; or, only for a
//! damaged input, a typed error. These tests must never weaken a check to make a case pass.

use std::collections::{BTreeMap, HashMap, HashSet};

use context_v2::{AssembledHistory, ContextMessage, Error, ExclusionReason, assemble, validate};
use pattern_db::{
    AgentId, BatchId, BatchInfo, BatchState, BatchType, ContentBlock, Message, MessageId, Role,
    SnowflakeId, StoredBatch, pending_calls,
};
use proptest::prelude::*;
use proptest::sample::Index;

// -- generation ------------------------------------------------------------------------------

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Complete,
    /// The run died: left open (recovery has not run yet).
    Crashed,
    /// The run died and recovery abandoned it.
    Abandoned,
}

#[derive(Debug, Clone)]
struct StepSpec {
    /// 0: a plain assistant answer.
    calls: usize,
    /// Text beside the calls in the assistant message.
    preamble: bool,
    /// An assistant remark stored between the calls and their results.
    remark: bool,
    /// How many messages the results are spread over (at most one per call).
    result_messages: usize,
    /// A user text block stored beside one of the results.
    mixed_text: bool,
    /// One result message is stored late: after the next step's assistant message.
    late: bool,
}

#[derive(Debug, Clone)]
struct BatchSpec {
    fate: Fate,
    steps: Vec<StepSpec>,
    /// For crashed and abandoned batches: how many messages survived.
    crash_at: Index,
    /// Continued by a heartbeat after the next batch began: where its later messages start.
    continued: Option<Index>,
    /// A deleted junk message, and where.
    junk: Option<(Index, bool)>,
}

#[derive(Debug, Clone, Copy)]
enum DamageKind {
    /// An open batch with a call waiting is marked complete.
    CompleteWithPending,
    /// A stored result is deleted.
    DeleteResult,
    /// A result for a call that does not exist.
    OrphanResult,
}

#[derive(Debug, Clone)]
struct HistorySpec {
    batches: Vec<BatchSpec>,
    /// The active batch: among the open batches (when `true` and there is one) or among all.
    active: Option<(bool, Index)>,
    damage: Option<(DamageKind, Index, Index)>,
    seed: u64,
}

fn step_spec() -> impl Strategy<Value = StepSpec> {
    (
        prop_oneof![1 => Just(0usize), 3 => 1usize..=3],
        any::<bool>(),
        prop::bool::weighted(0.2),
        1usize..=3,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(calls, preamble, remark, result_messages, mixed_text, late)| StepSpec {
                calls,
                preamble,
                remark,
                result_messages,
                mixed_text,
                late,
            },
        )
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    (
        prop_oneof![
            3 => Just(Fate::Complete),
            2 => Just(Fate::Crashed),
            1 => Just(Fate::Abandoned),
        ],
        prop::collection::vec(step_spec(), 0..4),
        any::<Index>(),
        prop::option::weighted(0.2, any::<Index>()),
        prop::option::weighted(0.2, (any::<Index>(), any::<bool>())),
    )
        .prop_map(|(fate, steps, crash_at, continued, junk)| BatchSpec {
            fate,
            steps,
            crash_at,
            continued,
            junk,
        })
}

fn history_spec() -> impl Strategy<Value = HistorySpec> {
    let damage = prop_oneof![
        Just(DamageKind::CompleteWithPending),
        Just(DamageKind::DeleteResult),
        Just(DamageKind::OrphanResult),
    ];
    (
        prop::collection::vec(batch_spec(), 1..6),
        prop::option::weighted(0.7, (any::<bool>(), any::<Index>())),
        prop::option::weighted(0.25, (damage, any::<Index>(), any::<Index>())),
        any::<u64>(),
    )
        .prop_map(|(batches, active, damage, seed)| HistorySpec {
            batches,
            active,
            damage,
            seed,
        })
}

/// A small deterministic generator for shuffles (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// A message before it has a position.
struct Draft {
    role: Role,
    content: Vec<ContentBlock>,
    deleted: bool,
}

fn draft(role: Role, content: Vec<ContentBlock>) -> Draft {
    Draft {
        role,
        content,
        deleted: false,
    }
}

/// The messages of batch `b` as the store would hold them (before a crash cut).
fn batch_drafts(b: usize, spec: &BatchSpec, rng: &mut Rng) -> Vec<Draft> {
    let mut out = vec![draft(
        Role::User,
        vec![ContentBlock::text(format!("request {b}"))],
    )];
    let mut late: Option<Draft> = None;
    for (s, step) in spec.steps.iter().enumerate() {
        if step.calls == 0 {
            out.push(draft(
                Role::Assistant,
                vec![ContentBlock::text(format!("answer {b}.{s}"))],
            ));
            out.extend(late.take());
            continue;
        }
        let ids: Vec<String> = (0..step.calls).map(|c| format!("b{b}s{s}c{c}")).collect();
        let mut call_blocks = Vec::new();
        if step.preamble {
            call_blocks.push(ContentBlock::text(format!("calling {}", ids.len())));
        }
        call_blocks.extend(
            ids.iter()
                .map(|id| ContentBlock::tool_use(id, "tool", serde_json::json!({ "id": id }))),
        );
        out.push(draft(Role::Assistant, call_blocks));
        out.extend(late.take());
        if step.remark {
            out.push(draft(
                Role::Assistant,
                vec![ContentBlock::text(format!("waiting {b}.{s}"))],
            ));
        }
        let mut order = ids.clone();
        rng.shuffle(&mut order);
        let chunks = step.result_messages.min(order.len());
        // `chunks` non-empty runs: cut points are distinct indexes in 1..len.
        let mut cuts: Vec<usize> = (1..order.len()).collect();
        rng.shuffle(&mut cuts);
        cuts.truncate(chunks - 1);
        cuts.sort_unstable();
        cuts.push(order.len());
        let mixed_chunk = step.mixed_text.then(|| rng.below(chunks));
        let mut start = 0;
        for (k, end) in cuts.into_iter().enumerate() {
            let mut blocks: Vec<ContentBlock> = order[start..end]
                .iter()
                .map(|id| ContentBlock::tool_result(id, format!("{id} done"), rng.below(5) == 0))
                .collect();
            start = end;
            let role = if mixed_chunk == Some(k) {
                let at = rng.below(blocks.len() + 1);
                blocks.insert(at, ContentBlock::text(format!("note {b}.{s}")));
                Role::User
            } else if rng.below(2) == 0 {
                Role::Tool
            } else {
                Role::User
            };
            out.push(draft(role, blocks));
        }
        if step.late {
            late = out.pop();
        }
    }
    out.extend(late);
    match spec.fate {
        Fate::Complete => out.push(draft(
            Role::Assistant,
            vec![ContentBlock::text(format!("done {b}"))],
        )),
        Fate::Crashed | Fate::Abandoned => {
            let keep = 1 + spec.crash_at.index(out.len());
            out.truncate(keep);
        }
    }
    if let Some((at, as_result)) = spec.junk {
        let junk = if as_result {
            draft(
                Role::Tool,
                vec![ContentBlock::tool_result("ghost", "never called", false)],
            )
        } else {
            draft(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "ghost",
                    "tool",
                    serde_json::json!({}),
                )],
            )
        };
        let at = 1 + at.index(out.len());
        out.insert(
            at,
            Draft {
                deleted: true,
                ..junk
            },
        );
    }
    out
}

/// A generated input and whether it was damaged on purpose.
#[derive(Debug)]
struct Generated {
    batches: Vec<StoredBatch>,
    active: Option<BatchId>,
    damaged: bool,
}

fn generate(spec: &HistorySpec) -> Generated {
    let mut rng = Rng(spec.seed);
    let agent = AgentId(Default::default());
    let drafts: Vec<Vec<Draft>> = spec
        .batches
        .iter()
        .enumerate()
        .map(|(b, s)| batch_drafts(b, s, &mut rng))
        .collect();

    // Positions: each batch's head, then the tail of the previous batch if a heartbeat continued
    // it after this batch began.
    let n = drafts.len();
    let mut schedule: Vec<(usize, usize)> = Vec::new();
    let mut tail: Vec<(usize, usize)> = Vec::new();
    let mut split_at = vec![0usize; n];
    for (b, msgs) in drafts.iter().enumerate() {
        let len = msgs.len();
        let split = match spec.batches[b].continued {
            Some(at) if b + 1 < n && len > 1 => 1 + at.index(len - 1),
            _ => len,
        };
        split_at[b] = split;
        schedule.extend((0..split).map(|j| (b, j)));
        schedule.append(&mut tail);
        tail = (split..len).map(|j| (b, j)).collect();
    }
    schedule.append(&mut tail);
    let mut position: HashMap<(usize, usize), i64> = HashMap::new();
    let mut next = 1_000i64;
    for key in schedule {
        next += 1 + rng.below(3) as i64;
        position.insert(key, next);
    }

    let mut batches: Vec<StoredBatch> = drafts
        .into_iter()
        .enumerate()
        .map(|(b, msgs)| {
            let id = SnowflakeId(position[&(b, 0)]);
            let continued = split_at[b] < msgs.len();
            let messages: Vec<Message> = msgs
                .into_iter()
                .enumerate()
                .map(|(j, d)| Message {
                    id: MessageId::new(),
                    agent_id: agent,
                    position: SnowflakeId(position[&(b, j)]),
                    batch_id: id,
                    sequence_num: j as i64,
                    batch_type: if j >= split_at[b] {
                        BatchType::Continuation
                    } else {
                        BatchType::UserRequest
                    },
                    role: d.role,
                    content: d.content,
                    token_estimate: 1,
                    archived: false,
                    deleted: d.deleted,
                    created_at: Default::default(),
                })
                .collect();
            StoredBatch {
                info: BatchInfo {
                    id,
                    agent_id: agent,
                    batch_type: BatchType::UserRequest,
                    state: match spec.batches[b].fate {
                        Fate::Complete => BatchState::Complete,
                        Fate::Crashed => BatchState::Open,
                        Fate::Abandoned => BatchState::Abandoned,
                    },
                    parent_batch: None,
                    run_owner: None,
                    lease_expires_at: None,
                    message_count: messages.len() as i64,
                    archived: false,
                    started_at: Default::default(),
                    completed_at: None,
                    continuations: i64::from(continued),
                    retried_at: None,
                    claim_token: None,
                },
                messages,
            }
        })
        .collect();

    let open: Vec<BatchId> = batches
        .iter()
        .filter(|b| b.info.state == BatchState::Open)
        .map(|b| b.info.id)
        .collect();
    let active = spec.active.map(|(prefer_open, i)| {
        if prefer_open && !open.is_empty() {
            open[i.index(open.len())]
        } else {
            batches[i.index(n)].info.id
        }
    });
    let damaged = match spec.damage {
        Some((kind, a, b)) => damage(&mut batches, kind, a, b),
        None => false,
    };

    for batch in &mut batches {
        rng.shuffle(&mut batch.messages);
    }
    rng.shuffle(&mut batches);
    Generated {
        batches,
        active,
        damaged,
    }
}

fn live(batch: &StoredBatch) -> Vec<&Message> {
    let mut live: Vec<&Message> = batch.messages.iter().filter(|m| !m.deleted).collect();
    live.sort_by_key(|m| m.sequence_num);
    live
}

fn pending_of(batch: &StoredBatch) -> Vec<String> {
    pending_calls(live(batch).iter().map(|m| &m.content[..]))
}

/// Applies one kind of damage; false if the history offers nothing to damage that way.
fn damage(batches: &mut [StoredBatch], kind: DamageKind, a: Index, _b: Index) -> bool {
    match kind {
        DamageKind::CompleteWithPending => {
            let candidates: Vec<usize> = (0..batches.len())
                .filter(|&i| {
                    batches[i].info.state != BatchState::Complete
                        && !pending_of(&batches[i]).is_empty()
                })
                .collect();
            if candidates.is_empty() {
                return false;
            }
            batches[candidates[a.index(candidates.len())]].info.state = BatchState::Complete;
            true
        }
        DamageKind::DeleteResult => {
            let candidates: Vec<(usize, usize)> = batches
                .iter()
                .enumerate()
                .flat_map(|(i, batch)| {
                    batch
                        .messages
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| !m.deleted && m.tool_result_ids().next().is_some())
                        .map(move |(j, _)| (i, j))
                })
                .collect();
            if candidates.is_empty() {
                return false;
            }
            let (i, j) = candidates[a.index(candidates.len())];
            batches[i].messages[j].deleted = true;
            true
        }
        DamageKind::OrphanResult => {
            let i = a.index(batches.len());
            let batch = &mut batches[i];
            let last = batch
                .messages
                .iter()
                .max_by_key(|m| m.sequence_num)
                .cloned()
                .expect("a batch has its trigger");
            batch.messages.push(Message {
                id: MessageId::new(),
                position: SnowflakeId(1_000_000 + last.position.get()),
                sequence_num: last.sequence_num + 1,
                role: Role::Tool,
                content: vec![ContentBlock::tool_result("nowhere", "lost", true)],
                deleted: false,
                ..last
            });
            batch.info.message_count += 1;
            true
        }
    }
}

// -- checks ----------------------------------------------------------------------------------

fn key(block: &ContentBlock) -> String {
    serde_json::to_string(block).unwrap()
}

fn is_result(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::ToolResult { .. })
}

/// Every property of a successful assembly of `input`.
fn check_history(input: &Generated, h: &AssembledHistory) {
    validate(&h.messages).unwrap();

    let mut sorted: Vec<&StoredBatch> = input.batches.iter().collect();
    sorted.sort_by_key(|b| b.info.id);
    let mut included = Vec::new();
    let mut excluded = Vec::new();
    for batch in &sorted {
        let id = batch.info.id;
        match batch.info.state {
            BatchState::Abandoned => excluded.push((id, ExclusionReason::Abandoned)),
            BatchState::Open if Some(id) != input.active => {
                excluded.push((id, ExclusionReason::Orphaned));
            }
            _ => included.push(id),
        }
    }
    assert_eq!(
        h.included_batches, included,
        "included batches, in id order"
    );
    assert_eq!(h.excluded, excluded, "excluded batches, in id order");

    // Messages come batch by batch in the included order.
    let mut order = h.messages.iter().map(|m| m.batch_id).collect::<Vec<_>>();
    order.dedup();
    let mut expected_order = included.clone();
    expected_order.retain(|id| order.contains(id));
    assert_eq!(
        order, expected_order,
        "messages grouped by batch, in id order"
    );

    let mut emitted: BTreeMap<BatchId, Vec<&ContextMessage>> = BTreeMap::new();
    for m in &h.messages {
        assert!(!m.content.is_empty(), "no empty message");
        emitted.entry(m.batch_id).or_default().push(m);
    }

    let mut trimmed_seen = false;
    for batch in sorted.iter().filter(|b| included.contains(&b.info.id)) {
        let id = batch.info.id;
        let live = live(batch);
        let out = emitted.remove(&id).unwrap_or_default();
        let pending = pending_of(batch);
        let pending_set: HashSet<&str> = pending.iter().map(String::as_str).collect();

        // Where each live block was stored.
        let mut result_source: HashMap<&str, SnowflakeId> = HashMap::new();
        let mut call_index: HashMap<&str, usize> = HashMap::new();
        for (i, m) in live.iter().enumerate() {
            for id in m.tool_result_ids() {
                result_source.insert(id, m.position);
            }
            for id in m.tool_use_ids() {
                call_index.insert(id, i);
            }
        }

        // What must be sent: everything, or everything before the cut plus the results of the
        // calls made before it.
        let cut = if pending.is_empty() {
            if h.trimmed_active.as_ref().is_some_and(|t| t.batch == id) {
                panic!("batch {id} has no pending call but is reported trimmed");
            }
            live.len()
        } else {
            assert_eq!(Some(id), input.active, "only the active batch may wait");
            assert_eq!(
                batch.info.state,
                BatchState::Open,
                "only an open batch may wait"
            );
            let cut = live
                .iter()
                .position(|m| m.tool_use_ids().any(|c| pending_set.contains(c)))
                .unwrap();
            assert_eq!(live[cut].role, Role::Assistant, "cut at a step boundary");
            let before_cut = |block: &ContentBlock| match block {
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    call_index[tool_use_id.as_str()] < cut
                }
                _ => false,
            };
            let dropped = live[cut..]
                .iter()
                .filter(|m| !m.content.iter().all(before_cut))
                .count();
            let t = h.trimmed_active.as_ref().expect("the cut is reported");
            assert_eq!(t.batch, id);
            assert_eq!(t.pending_calls, pending);
            assert_eq!(t.dropped_messages, dropped);
            trimmed_seen = true;
            cut
        };
        let kept_calls: HashSet<&str> = live[..cut].iter().flat_map(|m| m.tool_use_ids()).collect();
        let mut want: Vec<String> = live[..cut]
            .iter()
            .flat_map(|m| m.content.iter().filter(|b| !is_result(b)).map(key))
            .collect();
        want.extend(live.iter().flat_map(|m| {
            m.content
                .iter()
                .filter(|b| match b {
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        kept_calls.contains(tool_use_id.as_str())
                    }
                    _ => false,
                })
                .map(key)
        }));
        let mut got: Vec<String> = out.iter().flat_map(|m| m.content.iter().map(key)).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "batch {id}: exactly its blocks (before the cut)");

        // No call still waiting is sent.
        for m in &out {
            assert!(m.tool_use_ids().all(|c| !pending_set.contains(c)));
        }

        // Other blocks keep their stored order and their message's position.
        let want_rest: Vec<(SnowflakeId, Role, String)> = live[..cut]
            .iter()
            .flat_map(|m| {
                m.content
                    .iter()
                    .filter(|b| !is_result(b))
                    .map(|b| (m.position, m.role, key(b)))
            })
            .collect();
        let got_rest: Vec<(SnowflakeId, Role, String)> = out
            .iter()
            .flat_map(|m| {
                m.content
                    .iter()
                    .filter(|b| !is_result(b))
                    .map(|b| (m.position, m.role, key(b)))
            })
            .collect();
        assert_eq!(
            got_rest, want_rest,
            "batch {id}: non-result blocks in place"
        );

        // Moved results carry the position of the message they were stored in.
        for m in &out {
            for b in &m.content {
                if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                    assert_eq!(m.position, result_source[tool_use_id.as_str()]);
                }
            }
        }
    }
    assert!(emitted.is_empty(), "messages only from included batches");
    assert_eq!(
        h.trimmed_active.is_some(),
        trimmed_seen,
        "trimmed_active set exactly when the active batch was cut"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn assembly_is_valid_whole_and_ordered_or_a_typed_error(spec in history_spec()) {
        let input = generate(&spec);
        match assemble(&input.batches, input.active) {
            Ok(h) => check_history(&input, &h),
            Err(e) => {
                prop_assert!(input.damaged, "undamaged input refused: {e}");
                prop_assert!(
                    matches!(
                        e,
                        Error::DamagedBatch { .. }
                            | Error::DuplicateToolUse { .. }
                            | Error::UnpairedToolCall { .. }
                            | Error::OrphanToolResult { .. }
                            | Error::ResultOutOfOrder { .. }
                    ),
                    "unexpected error kind: {e:?}"
                );
            }
        }
    }

    #[test]
    fn assembly_ignores_input_order(spec in history_spec(), seed in any::<u64>()) {
        let input = generate(&spec);
        let mut shuffled = input.batches.clone();
        let mut rng = Rng(seed);
        for batch in &mut shuffled {
            rng.shuffle(&mut batch.messages);
        }
        rng.shuffle(&mut shuffled);
        let a = assemble(&input.batches, input.active).map_err(|e| e.to_string());
        let b = assemble(&shuffled, input.active).map_err(|e| e.to_string());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn validate_refuses_a_sent_history_missing_any_result(
        spec in history_spec(),
        pick in any::<Index>(),
    ) {
        let input = generate(&spec);
        let Ok(h) = assemble(&input.batches, input.active) else {
            return Ok(());
        };
        let spots: Vec<(usize, usize)> = h
            .messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m.content
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| is_result(b))
                    .map(move |(j, _)| (i, j))
            })
            .collect();
        if spots.is_empty() {
            return Ok(());
        }
        let (i, j) = spots[pick.index(spots.len())];
        let mut broken = h.messages.clone();
        broken[i].content.remove(j);
        if broken[i].content.is_empty() {
            broken.remove(i);
        }
        prop_assert!(validate(&broken).is_err());
    }
}

/// The generator reaches every case the properties are about (a fixed seed, so never flaky).
#[test]
fn generated_histories_cover_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = history_spec();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..500 {
        let spec = strategy.new_tree(&mut runner).unwrap().current();
        let input = generate(&spec);
        let mut hit = |what| *seen.entry(what).or_default() += 1;
        if input.damaged {
            hit("damaged");
        }
        if input
            .batches
            .iter()
            .any(|b| b.messages.iter().any(|m| m.deleted))
        {
            hit("deleted messages");
        }
        if input.batches.iter().any(|b| b.info.continuations > 0) {
            hit("continuation");
        }
        let shuffled_results = input.batches.iter().any(|b| {
            let live = live(b);
            let calls: Vec<&str> = live.iter().flat_map(|m| m.tool_use_ids()).collect();
            let results: Vec<&str> = live.iter().flat_map(|m| m.tool_result_ids()).collect();
            let mut in_call_order = results.clone();
            in_call_order.sort_by_key(|r| calls.iter().position(|c| c == r));
            results != in_call_order
        });
        if shuffled_results {
            hit("results stored out of call order");
        }
        if input.batches.iter().any(|b| {
            live(b).iter().any(|m| {
                m.tool_result_ids().next().is_some() && m.content.iter().any(|b| !is_result(b))
            })
        }) {
            hit("mixed message");
        }
        if input.batches.iter().any(|b| {
            let live = live(b);
            live.iter().enumerate().any(|(i, m)| {
                m.tool_result_ids().any(|r| {
                    live.iter()
                        .position(|c| c.tool_use_ids().any(|id| id == r))
                        .is_some_and(|c| {
                            live[c + 1..i]
                                .iter()
                                .any(|x| x.tool_use_ids().next().is_some())
                        })
                })
            })
        }) {
            hit("result stored after a later call");
        }
        match assemble(&input.batches, input.active) {
            Ok(h) => {
                if h.trimmed_active.as_ref().is_some_and(|t| {
                    input
                        .batches
                        .iter()
                        .any(|b| b.info.id == t.batch && live(b).len() > 1 + t.dropped_messages)
                }) {
                    hit("active batch trimmed after a finished step");
                }
                if h.trimmed_active.is_some() {
                    hit("active batch trimmed");
                }
                if h.excluded
                    .iter()
                    .any(|(_, r)| *r == ExclusionReason::Orphaned)
                {
                    hit("orphaned");
                }
                if h.excluded
                    .iter()
                    .any(|(_, r)| *r == ExclusionReason::Abandoned)
                {
                    hit("abandoned");
                }
                if input.damaged {
                    hit("damaged but only in excluded batches");
                }
            }
            Err(Error::DamagedBatch { .. }) => hit("damaged batch refused"),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    for case in [
        "damaged",
        "deleted messages",
        "continuation",
        "results stored out of call order",
        "mixed message",
        "result stored after a later call",
        "active batch trimmed",
        "active batch trimmed after a finished step",
        "orphaned",
        "abandoned",
        "damaged but only in excluded batches",
        "damaged batch refused",
    ] {
        assert!(
            seen.get(case).copied().unwrap_or(0) >= 5,
            "{case} too rare: {seen:?}"
        );
    }
    eprintln!("{seen:?}");
}
