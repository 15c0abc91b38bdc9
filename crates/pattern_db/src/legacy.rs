//! Splitting a legacy history (messages without batch ids) into batches.
//!
//! [`plan`] is a pure function: it decides which batch every message joins and what state each
//! batch ends in; [`crate::MessageStore::import_legacy`] then writes the plan in one transaction.
//! The rules are written out in `docs/batching.md`; in short:
//!
//! 1. A user or system message that answers no tool call is a trigger: it opens a new batch.
//! 2. A message holding tool results joins the batch of the call it answers, wherever it stands
//!    in the input (interleaved and out-of-order results end up with their calls).
//! 3. Any other message (assistant text, tool calls) joins the batch of the message just before
//!    it: a model answers what it has just seen. With no batch yet, it opens a system batch.
//! 4. An assistant message without tool calls, in a batch with no call waiting for a result,
//!    completes that batch.
//! 5. A batch still waiting for a result at the end, or never answered, is `abandoned`; so is a
//!    batch that holds a result for an unknown call or a repeated call id (nothing is dropped:
//!    such batches are kept for inspection and never sent to a provider).
//!
//! This module must never drop or reorder a message's content: every input message appears in
//! exactly one planned batch.

use crate::BatchError;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::model::{BatchState, BatchType, ContentBlock, Role};

/// One message of a history written before batches existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyMessage {
    /// Who speaks.
    pub role: Role,
    /// Content blocks.
    pub content: Vec<ContentBlock>,
    /// When it was written, if known (kept as the stored `created_at`).
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
    /// What kind of trigger this is, when the legacy data says (e.g. another agent spoke).
    #[serde(default)]
    pub origin: Option<BatchType>,
}

/// One batch of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedBatch {
    /// What started it.
    pub batch_type: BatchType,
    /// The state it is stored in.
    pub state: BatchState,
    /// Indices into the input, in sequence order (ascending; the first is the opener).
    pub messages: Vec<usize>,
}

/// Something irregular the planner met, and how it handled it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Anomaly {
    /// A tool result for a call that appears nowhere before it; its batch is abandoned.
    OrphanToolResult {
        /// Input index.
        index: usize,
        /// The unknown call id.
        tool_use_id: String,
    },
    /// A call id used twice in one batch; the batch is abandoned.
    DuplicateToolUse {
        /// Input index.
        index: usize,
        /// The repeated id.
        tool_use_id: String,
    },
    /// A batch ended without a final answer or with calls waiting; it is abandoned.
    Unfinished {
        /// Input index of the batch's first message.
        opener: usize,
        /// Calls still waiting for results.
        pending: Vec<String>,
    },
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportPlan {
    /// Batches ordered by their first message.
    pub batches: Vec<PlannedBatch>,
    /// What was irregular.
    pub anomalies: Vec<Anomaly>,
}

#[derive(Debug)]
struct Building {
    batch_type: BatchType,
    messages: Vec<usize>,
    pending: Vec<String>,
    answered: bool,
    broken: bool,
}

/// Splits `messages` into batches by the rules above. Fails only on a message that no rule can
/// place (empty content, or blocks in the wrong role).
pub fn plan(messages: &[LegacyMessage]) -> Result<ImportPlan> {
    let mut batches: Vec<Building> = Vec::new();
    let mut call_owner: HashMap<&str, usize> = HashMap::new();
    let mut anomalies = Vec::new();
    let mut current: Option<usize> = None;

    for (index, message) in messages.iter().enumerate() {
        crate::model::NewMessage::new(message.role, message.content.clone())
            .validate_shape()
            .map_err(|e| BatchError::LegacyImport {
                index,
                reason: e.to_string(),
            })?;
        let results: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        let calls: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();

        let target = if !results.is_empty() {
            // Rule 2: results join their call's batch.
            let owner = results.iter().find_map(|id| call_owner.get(id).copied());
            let target = match owner.or(current) {
                Some(t) => t,
                None => open(&mut batches, BatchType::SystemTrigger),
            };
            for id in &results {
                if call_owner.get(id) != Some(&target) {
                    anomalies.push(Anomaly::OrphanToolResult {
                        index,
                        tool_use_id: (*id).to_owned(),
                    });
                    batches[target].broken = true;
                } else {
                    batches[target].pending.retain(|p| p != id);
                }
            }
            target
        } else if matches!(message.role, Role::User | Role::System) {
            // Rule 1: a trigger opens a batch.
            let batch_type = message
                .origin
                .filter(|o| *o != BatchType::Continuation)
                .unwrap_or(if message.role == Role::System {
                    BatchType::SystemTrigger
                } else {
                    BatchType::UserRequest
                });
            open(&mut batches, batch_type)
        } else {
            // Rule 3: everything else continues the batch just before it.
            match current {
                Some(t) => t,
                None => open(&mut batches, BatchType::SystemTrigger),
            }
        };

        let batch = &mut batches[target];
        batch.messages.push(index);
        for id in calls {
            if call_owner.get(id) == Some(&target) {
                anomalies.push(Anomaly::DuplicateToolUse {
                    index,
                    tool_use_id: id.to_owned(),
                });
                batch.broken = true;
            } else {
                call_owner.insert(id, target);
                batch.pending.push(id.to_owned());
            }
        }
        // Rule 4: a final answer completes the batch.
        if message.role == Role::Assistant
            && !message
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
            && batch.pending.is_empty()
        {
            batch.answered = true;
        }
        current = Some(target);
    }

    let batches = batches
        .into_iter()
        .map(|b| {
            let finished = b.answered && b.pending.is_empty();
            if !finished && !b.broken {
                anomalies.push(Anomaly::Unfinished {
                    opener: b.messages[0],
                    pending: b.pending.clone(),
                });
            }
            PlannedBatch {
                batch_type: b.batch_type,
                // Rule 5.
                state: if finished && !b.broken {
                    BatchState::Complete
                } else {
                    BatchState::Abandoned
                },
                messages: b.messages,
            }
        })
        .collect();
    Ok(ImportPlan { batches, anomalies })
}

fn open(batches: &mut Vec<Building>, batch_type: BatchType) -> usize {
    batches.push(Building {
        batch_type,
        messages: Vec::new(),
        pending: Vec::new(),
        answered: false,
        broken: false,
    });
    batches.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use serde_json::json;

    fn m(role: Role, content: Vec<ContentBlock>) -> LegacyMessage {
        LegacyMessage {
            role,
            content,
            created_at: None,
            origin: None,
        }
    }
    fn user(t: &str) -> LegacyMessage {
        m(Role::User, vec![ContentBlock::text(t)])
    }
    fn say(t: &str) -> LegacyMessage {
        m(Role::Assistant, vec![ContentBlock::text(t)])
    }
    fn call(ids: &[&str]) -> LegacyMessage {
        m(
            Role::Assistant,
            ids.iter()
                .map(|id| ContentBlock::tool_use(*id, "search", json!({})))
                .collect(),
        )
    }
    fn result(id: &str) -> LegacyMessage {
        m(Role::Tool, vec![ContentBlock::tool_result(id, "ok", false)])
    }
    fn shape(p: &ImportPlan) -> Vec<(Vec<usize>, BatchState)> {
        p.batches
            .iter()
            .map(|b| (b.messages.clone(), b.state))
            .collect()
    }

    #[test]
    fn simple_turns_become_complete_batches() {
        let p = plan(&[
            user("hi"),
            say("hello"),
            user("search"),
            call(&["t1"]),
            result("t1"),
            say("found"),
        ])
        .unwrap();
        assert_eq!(
            shape(&p),
            vec![
                (vec![0, 1], BatchState::Complete),
                (vec![2, 3, 4, 5], BatchState::Complete)
            ]
        );
        assert!(p.anomalies.is_empty());
        assert_eq!(p.batches[0].batch_type, BatchType::UserRequest);
    }

    #[test]
    fn interleaved_result_joins_its_call() {
        // u1 calls t1; before the result arrives, u2 is asked and answered; then t1's result and
        // the final answer of the first request.
        let p = plan(&[
            user("u1"),
            call(&["t1"]),
            user("u2"),
            say("a2"),
            result("t1"),
            say("a1"),
        ])
        .unwrap();
        assert_eq!(
            shape(&p),
            vec![
                (vec![0, 1, 4, 5], BatchState::Complete),
                (vec![2, 3], BatchState::Complete)
            ]
        );
    }

    #[test]
    fn out_of_order_results_stay_in_their_batch() {
        let p = plan(&[
            user("u"),
            call(&["a", "b"]),
            result("b"),
            result("a"),
            say("done"),
        ])
        .unwrap();
        assert_eq!(shape(&p), vec![(vec![0, 1, 2, 3, 4], BatchState::Complete)]);
    }

    #[test]
    fn unanswered_and_orphaned_batches_are_abandoned_not_dropped() {
        let p = plan(&[
            user("u1"),
            call(&["t1"]),
            user("u2"),
            result("zz"),
            say("x"),
            user("u3"),
        ])
        .unwrap();
        assert_eq!(
            shape(&p),
            vec![
                (vec![0, 1], BatchState::Abandoned),
                (vec![2, 3, 4], BatchState::Abandoned),
                (vec![5], BatchState::Abandoned),
            ]
        );
        assert!(p.anomalies.contains(&Anomaly::OrphanToolResult {
            index: 3,
            tool_use_id: "zz".into()
        }));
        assert!(p.anomalies.contains(&Anomaly::Unfinished {
            opener: 0,
            pending: vec!["t1".into()]
        }));
        let total: usize = p.batches.iter().map(|b| b.messages.len()).sum();
        assert_eq!(total, 6);
    }

    #[test]
    fn history_starting_with_assistant_opens_system_batch() {
        let p = plan(&[say("welcome"), user("hi"), say("hey")]).unwrap();
        assert_eq!(p.batches[0].batch_type, BatchType::SystemTrigger);
        assert_eq!(
            shape(&p),
            vec![
                (vec![0], BatchState::Complete),
                (vec![1, 2], BatchState::Complete)
            ]
        );
    }

    #[test]
    fn duplicate_call_ids_abandon_the_batch() {
        let p = plan(&[user("u"), call(&["t"]), result("t"), call(&["t"]), say("x")]).unwrap();
        assert_eq!(p.batches[0].state, BatchState::Abandoned);
        assert!(matches!(
            p.anomalies[0],
            Anomaly::DuplicateToolUse { index: 3, .. }
        ));
    }

    #[test]
    fn malformed_message_is_a_typed_error_with_its_index() {
        let bad = m(
            Role::User,
            vec![ContentBlock::tool_use("t", "x", json!({}))],
        );
        let err = plan(&[user("ok"), bad]).unwrap_err();
        assert!(
            matches!(err, Error::Batch(BatchError::LegacyImport { index: 1, .. })),
            "{err}"
        );
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A message of a random legacy history over a small set of call ids.
    fn message() -> impl Strategy<Value = LegacyMessage> {
        let id = (0u8..6).prop_map(|i| format!("t{i}"));
        prop_oneof![
            3 => Just((Role::User, vec![ContentBlock::text("q")])),
            1 => Just((Role::System, vec![ContentBlock::text("tick")])),
            3 => Just((Role::Assistant, vec![ContentBlock::text("a")])),
            2 => proptest::collection::vec(id.clone(), 1..3)
                .prop_map(|ids| (Role::Assistant, ids.into_iter().map(|i| ContentBlock::tool_use(i, "f", json!({}))).collect())),
            3 => id.prop_map(|i| (Role::Tool, vec![ContentBlock::tool_result(i, "r", false)])),
        ]
        .prop_map(|(role, content)| LegacyMessage { role, content, created_at: None, origin: None })
    }

    proptest! {
        #[test]
        fn every_message_lands_in_exactly_one_batch_and_complete_batches_are_paired(
            history in proptest::collection::vec(message(), 0..60)
        ) {
            let plan = plan(&history).unwrap();
            let mut seen: Vec<usize> = plan.batches.iter().flat_map(|b| b.messages.iter().copied()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..history.len()).collect::<Vec<_>>());
            for batch in &plan.batches {
                prop_assert!(batch.messages.windows(2).all(|w| w[0] < w[1]), "sequence follows input order");
                if batch.state == BatchState::Complete {
                    let blocks = batch.messages.iter().map(|&i| &history[i].content[..]);
                    prop_assert!(crate::model::pending_calls(blocks).is_empty());
                    // Every result in a complete batch follows its call in that batch.
                    let mut calls = std::collections::HashSet::new();
                    for &i in &batch.messages {
                        for block in &history[i].content {
                            match block {
                                ContentBlock::ToolUse { id, .. } => { calls.insert(id.clone()); }
                                ContentBlock::ToolResult { tool_use_id, .. } => prop_assert!(calls.contains(tool_use_id)),
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
    }
}
