//! Batch assembly: stored batches in, a provider-neutral message sequence out, in which every
//! tool call is immediately followed by its results.
//!
//! [`assemble`] applies these rules, in this order:
//!
//! 1. **Order.** Batches are ordered by batch id, messages inside a batch by `sequence_num` (ties,
//!    which the store never writes, by `position`). The input order is not trusted. A batch id
//!    given twice is [`Error::DuplicateBatch`]; a message whose `batch_id` is not its batch's id
//!    is [`Error::ForeignMessage`].
//! 2. **Selection.** An `abandoned` batch is excluded ([`ExclusionReason::Abandoned`]), even when
//!    named active. An archived batch is excluded ([`ExclusionReason::Archived`]): a summary
//!    stands for it. The `active` batch (the one a run is working on) is included in any other
//!    state. Any other `open` batch is excluded ([`ExclusionReason::Orphaned`]): its run crashed
//!    and recovery has not yet marked it abandoned. `complete` batches are included. Excluded
//!    batches are not inspected at all. An `active` id that names no given batch changes nothing.
//! 3. **Deleted messages** are skipped. The per-message `archived` flag is not consulted:
//!    archiving works on whole batches, so the batch's flag decides.
//! 4. **Pairing check.** Inside an included batch, every tool call must sit in an `assistant`
//!    message, every result in a `user` or `tool` message after the message holding its call,
//!    each call id once and each call answered at most once. Otherwise the batch is damaged
//!    (imported or edited data) and assembly fails with [`Error::DamagedBatch`] naming the batch,
//!    the call and the [`Damage`].
//! 5. **Unanswered calls.** If the active batch is `open` and has calls without results (its tools
//!    are still running), it is cut just before the first message (in sequence order) that holds
//!    an unanswered call: that message and everything after it are left out of this request, and
//!    [`AssembledHistory::trimmed_active`] records the cut. Results that answer calls made before
//!    the cut are kept (rule 6 moves them up), wherever they were stored. Unanswered calls in any
//!    other included batch (a `complete` one: the store refuses to complete such a batch, so the
//!    data is damaged) fail with [`Damage::UnansweredCall`].
//!
//!    Why cut rather than repair: providers reject a request holding a call without its result,
//!    so the call cannot be sent; and a synthesised result ("tool still running", "cancelled")
//!    would tell the model something that did not happen, and would be remembered as if it had.
//!    The cut part is still stored; the next request, built once the results are in, sends it.
//! 6. **Result placement.** Result blocks are taken out of the messages that hold them. Then the
//!    batch's messages are emitted in sequence order, each with the blocks it has left (a message
//!    left with none, i.e. one that held only results, is not emitted), and right after an
//!    `assistant` message with calls come the results of those calls, in call order. Adjacent
//!    results (in call order) that were stored in the same message form one [`ContextMessage`]
//!    with that message's role and position; results from different stored messages form
//!    separate ones. So results stored in any order, in one message or several, come out in call
//!    order right after their call; messages that followed the call (assistant remarks, a user's
//!    text stored beside a result) keep their relative order after the results; and a message
//!    mixing results with other blocks has its results moved and its other blocks kept in its
//!    own place, under the same position.
//! 7. **Reused call ids.** A call id that an earlier batch of the request already used (some
//!    OpenAI-compatible servers answer `call_0` every turn) is renamed in this batch's call and
//!    results alike, to `{id}_{batch id}`: providers reject repeated ids, and an agent must not be
//!    bricked by its server's id scheme.
//! 8. **Validation.** The whole sequence goes through [`validate`]; its error is returned instead
//!    of the output.
//!
//! A [`ContextMessage`]'s `position` is the identity of the stored message its blocks come from,
//! not an order key: moved results carry their own message's position, and a continued batch's
//! later messages carry positions after those of later batches.
//!
//! This module must never invent content (no synthesised tool results, no placeholder text),
//! never send a call without its result, and never change the store.

use std::collections::{HashMap, HashSet};

use pattern_db::{BatchId, BatchState, ContentBlock, Message, Role, SnowflakeId, StoredBatch};
use serde::Serialize;

use crate::error::{Damage, Error, Result};
use crate::validate::validate;

/// One message of a request, before any provider's format is applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextMessage {
    /// The batch the message belongs to.
    pub batch_id: BatchId,
    /// Position of the stored message the blocks come from (identity, not order: see the module
    /// doc).
    pub position: SnowflakeId,
    /// Who speaks.
    pub role: Role,
    /// The blocks, never empty when produced by [`assemble`].
    pub content: Vec<ContentBlock>,
}

impl ContextMessage {
    /// Ids of the tool calls this message makes, in order.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        pattern_db::tool_use_ids(&self.content)
    }

    /// Ids of the tool calls this message answers, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        pattern_db::tool_result_ids(&self.content)
    }
}

/// Why a batch was left out of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExclusionReason {
    /// Recovery abandoned it: its run died, and it is never sent to a model again.
    Abandoned,
    /// It is open but not the active batch: a crashed run that recovery has not yet abandoned.
    Orphaned,
    /// It was archived: a summary stands for it.
    Archived,
}

/// The active batch was cut because some of its tool calls are still waiting for results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrimmedActive {
    /// The active batch.
    pub batch: BatchId,
    /// How many of its stored (not deleted) messages had at least one block left out.
    pub dropped_messages: usize,
    /// Its calls without results, in call order.
    pub pending_calls: Vec<String>,
}

/// The result of [`assemble`]: the messages to send and what was left out.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AssembledHistory {
    /// The messages, batch by batch in batch id order; they pass [`validate`].
    pub messages: Vec<ContextMessage>,
    /// The batches the messages come from, in id order (a batch whose messages were all deleted
    /// or cut is listed with no messages).
    pub included_batches: Vec<BatchId>,
    /// The batches left out, in id order, with the reason.
    pub excluded: Vec<(BatchId, ExclusionReason)>,
    /// Set when the active batch was cut before an unanswered tool call.
    pub trimmed_active: Option<TrimmedActive>,
}

/// Turns stored batches into a validated message sequence, following the rules of the module
/// doc. `active` names the batch a run is working on, if any.
pub fn assemble(batches: &[StoredBatch], active: Option<BatchId>) -> Result<AssembledHistory> {
    let mut ordered: Vec<&StoredBatch> = batches.iter().collect();
    ordered.sort_by_key(|b| b.info.id);
    let mut out = AssembledHistory::default();
    let mut previous: Option<BatchId> = None;
    let mut used_ids: HashSet<String> = HashSet::new();
    for batch in ordered {
        let id = batch.info.id;
        if previous == Some(id) {
            return Err(Error::DuplicateBatch { batch: id });
        }
        previous = Some(id);
        if let Some(reason) = exclusion(batch, active) {
            out.excluded.push((id, reason));
            continue;
        }
        let may_wait = Some(id) == active && batch.info.state == BatchState::Open;
        let start = out.messages.len();
        if let Some(trimmed) = assemble_batch(batch, may_wait, &mut out.messages)? {
            out.trimmed_active = Some(trimmed);
        }
        rename_reused_ids(id, &mut out.messages[start..], &mut used_ids);
        out.included_batches.push(id);
    }
    validate(&out.messages)?;
    Ok(out)
}

/// Call ids are unique per batch (the store enforces it) but some OpenAI-compatible servers reuse
/// them from turn to turn (`call_0` in every batch), and providers reject a request that repeats
/// one. A call id already used by an earlier batch of this request is therefore renamed, in its
/// call and its results alike, to `{id}_{batch}` (then `_2`, `_3` ... if needed). Only the request
/// changes; the store keeps what the provider sent.
fn rename_reused_ids(batch: BatchId, segment: &mut [ContextMessage], used: &mut HashSet<String>) {
    let mut renames: HashMap<String, String> = HashMap::new();
    for message in segment.iter() {
        for block in &message.content {
            if let ContentBlock::ToolUse { id, .. } = block
                && used.contains(id)
                && !renames.contains_key(id)
            {
                let mut fresh = format!("{id}_{batch}");
                let mut n = 2;
                while used.contains(&fresh) {
                    fresh = format!("{id}_{batch}_{n}");
                    n += 1;
                }
                renames.insert(id.clone(), fresh);
            }
        }
    }
    for message in segment.iter_mut() {
        for block in &mut message.content {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    if let Some(fresh) = renames.get(id) {
                        *id = fresh.clone();
                    }
                    used.insert(id.clone());
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    if let Some(fresh) = renames.get(tool_use_id) {
                        *tool_use_id = fresh.clone();
                    }
                }
                _ => {}
            }
        }
    }
}

/// Rule 2: why `batch` is left out, if it is.
fn exclusion(batch: &StoredBatch, active: Option<BatchId>) -> Option<ExclusionReason> {
    let info = &batch.info;
    if info.state == BatchState::Abandoned {
        Some(ExclusionReason::Abandoned)
    } else if info.archived {
        Some(ExclusionReason::Archived)
    } else if Some(info.id) == active {
        None
    } else if info.state == BatchState::Open {
        Some(ExclusionReason::Orphaned)
    } else {
        None
    }
}

/// Where each call and result of a batch sits: indexes into the batch's live messages.
struct Pairing<'a> {
    /// Call id -> index of the message holding the call.
    call_at: HashMap<&'a str, usize>,
    /// Call id -> the message holding the result (index and message), and the result block.
    result_of: HashMap<&'a str, (usize, &'a Message, &'a ContentBlock)>,
    /// Calls without a result, in call order, with the index of their message.
    pending: Vec<(&'a str, usize)>,
}

/// Rule 4: maps calls to results, refusing the shapes the store never writes.
fn pair<'a>(batch: BatchId, live: &[&'a Message]) -> Result<Pairing<'a>> {
    let damaged = |id: &str, damage| Error::DamagedBatch {
        batch,
        tool_use_id: id.to_owned(),
        damage,
    };
    let mut call_at: HashMap<&str, usize> = HashMap::new();
    let mut calls: Vec<(&str, usize)> = Vec::new();
    let mut result_of: HashMap<&str, (usize, &Message, &ContentBlock)> = HashMap::new();
    for (i, message) in live.iter().enumerate() {
        for block in &message.content {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    if message.role != Role::Assistant {
                        return Err(damaged(id, Damage::CallInWrongRole(message.role)));
                    }
                    if call_at.insert(id, i).is_some() {
                        return Err(damaged(id, Damage::DuplicateCall));
                    }
                    calls.push((id, i));
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    if !matches!(message.role, Role::User | Role::Tool) {
                        return Err(damaged(
                            tool_use_id,
                            Damage::ResultInWrongRole(message.role),
                        ));
                    }
                    if call_at.get(tool_use_id.as_str()).is_none_or(|&c| c >= i) {
                        return Err(damaged(tool_use_id, Damage::ResultWithoutCall));
                    }
                    if result_of.insert(tool_use_id, (i, message, block)).is_some() {
                        return Err(damaged(tool_use_id, Damage::DuplicateResult));
                    }
                }
                _ => {}
            }
        }
    }
    calls.retain(|(id, _)| !result_of.contains_key(id));
    Ok(Pairing {
        call_at,
        result_of,
        pending: calls,
    })
}

/// Rules 3 to 6 for one included batch: appends its messages to `out`; returns the cut, if the
/// batch was cut. `may_wait` is true for the active batch while it is open.
fn assemble_batch(
    batch: &StoredBatch,
    may_wait: bool,
    out: &mut Vec<ContextMessage>,
) -> Result<Option<TrimmedActive>> {
    let id = batch.info.id;
    if let Some(m) = batch.messages.iter().find(|m| m.batch_id != id) {
        return Err(Error::ForeignMessage {
            batch: id,
            message: m.id,
            message_batch: m.batch_id,
        });
    }
    let mut live: Vec<&Message> = batch.messages.iter().filter(|m| !m.deleted).collect();
    live.sort_by_key(|m| (m.sequence_num, m.position));
    let pairing = pair(id, &live)?;

    let (end, trimmed) = match pairing.pending.first() {
        None => (live.len(), None),
        Some(&(call, _)) if !may_wait => {
            return Err(Error::DamagedBatch {
                batch: id,
                tool_use_id: call.to_owned(),
                damage: Damage::UnansweredCall,
            });
        }
        Some(&(_, cut)) => {
            let kept = |block: &ContentBlock| match block {
                ContentBlock::ToolResult { tool_use_id, .. } => pairing
                    .call_at
                    .get(tool_use_id.as_str())
                    .is_some_and(|&c| c < cut),
                _ => false,
            };
            let dropped_messages = live
                .iter()
                .skip(cut)
                .filter(|m| !m.content.iter().all(kept))
                .count();
            let trimmed = TrimmedActive {
                batch: id,
                dropped_messages,
                pending_calls: pairing
                    .pending
                    .iter()
                    .map(|(call, _)| (*call).to_owned())
                    .collect(),
            };
            (cut, Some(trimmed))
        }
    };

    for message in live.iter().take(end) {
        let rest: Vec<ContentBlock> = message
            .content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::ToolResult { .. }))
            .cloned()
            .collect();
        if !rest.is_empty() {
            out.push(ContextMessage {
                batch_id: id,
                position: message.position,
                role: message.role,
                content: rest,
            });
        }
        emit_results(id, message, &pairing, out)?;
    }
    Ok(trimmed)
}

/// Rule 6: the results of `message`'s calls, in call order, grouped by the stored message they
/// come from when adjacent.
fn emit_results(
    batch: BatchId,
    message: &Message,
    pairing: &Pairing<'_>,
    out: &mut Vec<ContextMessage>,
) -> Result<()> {
    let mut group: Option<(usize, ContextMessage)> = None;
    for call in message.tool_use_ids() {
        // Every call before the cut has its result (the cut is at the first unanswered call);
        // the error keeps this total rather than trusting that.
        let Some(&(source, stored, block)) = pairing.result_of.get(call) else {
            return Err(Error::DamagedBatch {
                batch,
                tool_use_id: call.to_owned(),
                damage: Damage::UnansweredCall,
            });
        };
        match &mut group {
            Some((current, m)) if *current == source => m.content.push(block.clone()),
            _ => {
                let next = ContextMessage {
                    batch_id: batch,
                    position: stored.position,
                    role: stored.role,
                    content: vec![block.clone()],
                };
                if let Some((_, done)) = group.replace((source, next)) {
                    out.push(done);
                }
            }
        }
    }
    if let Some((_, done)) = group {
        out.push(done);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Hand-made histories: one regression test per known failure, and one per rule.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use pattern_db::{AgentId, BatchInfo, BatchType, MessageId};

    use super::*;

    /// A message: position, role, blocks.
    type M = (i64, Role, Vec<ContentBlock>);

    /// A batch whose id is the position of its first message; sequence numbers follow `messages`.
    fn batch(state: BatchState, messages: Vec<M>) -> StoredBatch {
        let agent = AgentId(Default::default());
        let id = SnowflakeId(messages.first().map_or(1, |m| m.0));
        let messages: Vec<Message> = messages
            .into_iter()
            .enumerate()
            .map(|(seq, (pos, role, content))| Message {
                id: MessageId::new(),
                agent_id: agent,
                position: SnowflakeId(pos),
                batch_id: id,
                sequence_num: seq as i64,
                batch_type: BatchType::UserRequest,
                role,
                content,
                token_estimate: 1,
                archived: false,
                deleted: false,
                created_at: Default::default(),
            })
            .collect();
        StoredBatch {
            info: BatchInfo {
                id,
                agent_id: agent,
                batch_type: BatchType::UserRequest,
                state,
                parent_batch: None,
                run_owner: None,
                lease_expires_at: None,
                message_count: messages.len() as i64,
                archived: false,
                started_at: Default::default(),
                completed_at: None,
                continuations: 0,
                retried_at: None,
                claim_token: None,
            },
            messages,
        }
    }

    fn user(pos: i64, t: &str) -> M {
        (pos, Role::User, vec![ContentBlock::text(t)])
    }

    fn said(pos: i64, t: &str) -> M {
        (pos, Role::Assistant, vec![ContentBlock::text(t)])
    }

    fn calls(pos: i64, ids: &[&str]) -> M {
        (
            pos,
            Role::Assistant,
            ids.iter()
                .map(|id| ContentBlock::tool_use(*id, "search", serde_json::json!({ "q": id })))
                .collect(),
        )
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::tool_result(id, format!("result of {id}"), false)
    }

    fn results(pos: i64, ids: &[&str]) -> M {
        (pos, Role::Tool, ids.iter().map(|id| result(id)).collect())
    }

    /// `(position, role, short form of each block)` of every message, to compare layouts.
    fn layout(h: &AssembledHistory) -> Vec<(i64, Role, Vec<String>)> {
        h.messages
            .iter()
            .map(|m| {
                let blocks = m
                    .content
                    .iter()
                    .map(|b| match b {
                        ContentBlock::Text { text } => format!("text:{text}"),
                        ContentBlock::ToolUse { id, .. } => format!("use:{id}"),
                        ContentBlock::ToolResult { tool_use_id, .. } => {
                            format!("result:{tool_use_id}")
                        }
                        other => format!("{other:?}"),
                    })
                    .collect();
                (m.position.get(), m.role, blocks)
            })
            .collect()
    }

    fn l(pos: i64, role: Role, blocks: &[&str]) -> (i64, Role, Vec<String>) {
        (pos, role, blocks.iter().map(|b| (*b).to_owned()).collect())
    }

    fn ids(v: &[i64]) -> Vec<BatchId> {
        v.iter().map(|&i| SnowflakeId(i)).collect()
    }

    fn done(first: i64) -> StoredBatch {
        batch(
            BatchState::Complete,
            vec![user(first, "hello"), said(first + 1, "hi")],
        )
    }

    /// A run crashed while its tool ran: the call is stored, the result never came.
    fn crashed_mid_call(first: i64) -> StoredBatch {
        batch(
            BatchState::Open,
            vec![user(first, "look it up"), calls(first + 1, &["x"])],
        )
    }

    // -- regression tests ----------------------------------------------------------------------

    #[test]
    fn a_crash_mid_tool_call_is_orphaned_when_not_active() {
        let h = assemble(&[done(10), crashed_mid_call(20)], None).unwrap();
        assert_eq!(h.included_batches, ids(&[10]));
        assert_eq!(
            h.excluded,
            vec![(SnowflakeId(20), ExclusionReason::Orphaned)]
        );
        assert_eq!(h.trimmed_active, None);
        assert_eq!(
            layout(&h),
            vec![
                l(10, Role::User, &["text:hello"]),
                l(11, Role::Assistant, &["text:hi"]),
            ]
        );
        // Naming another batch active changes nothing for it.
        let h2 = assemble(&[done(10), crashed_mid_call(20)], Some(SnowflakeId(10))).unwrap();
        assert_eq!(h2, h);
    }

    #[test]
    fn b_a_crash_mid_tool_call_is_trimmed_when_active() {
        let h = assemble(&[done(10), crashed_mid_call(20)], Some(SnowflakeId(20))).unwrap();
        assert_eq!(h.included_batches, ids(&[10, 20]));
        assert!(h.excluded.is_empty());
        assert_eq!(
            h.trimmed_active,
            Some(TrimmedActive {
                batch: SnowflakeId(20),
                dropped_messages: 1,
                pending_calls: vec!["x".into()],
            })
        );
        assert_eq!(
            layout(&h),
            vec![
                l(10, Role::User, &["text:hello"]),
                l(11, Role::Assistant, &["text:hi"]),
                l(20, Role::User, &["text:look it up"]),
            ]
        );
    }

    #[test]
    fn b_the_active_batch_keeps_its_finished_steps_and_loses_the_partial_one() {
        // Step 1 done; step 2 made two parallel calls and only `c` has its result.
        let active = batch(
            BatchState::Open,
            vec![
                user(20, "go"),
                calls(21, &["a"]),
                results(22, &["a"]),
                calls(23, &["b", "c"]),
                results(24, &["c"]),
            ],
        );
        let h = assemble(&[active], Some(SnowflakeId(20))).unwrap();
        assert_eq!(
            layout(&h),
            vec![
                l(20, Role::User, &["text:go"]),
                l(21, Role::Assistant, &["use:a"]),
                l(22, Role::Tool, &["result:a"]),
            ]
        );
        assert_eq!(
            h.trimmed_active,
            Some(TrimmedActive {
                batch: SnowflakeId(20),
                dropped_messages: 2,
                pending_calls: vec!["b".into()],
            })
        );
    }

    #[test]
    fn b_results_of_calls_before_the_cut_are_kept_wherever_stored() {
        // `a` answered only after the model went on to call `b` (still running).
        let mut mixed = results(24, &["a"]);
        mixed.1 = Role::User;
        mixed.2.push(ContentBlock::text("by the way"));
        let active = batch(
            BatchState::Open,
            vec![
                user(20, "go"),
                calls(21, &["a"]),
                calls(22, &["b"]),
                results(23, &["a"]),
                mixed,
            ],
        );
        // Two results for `a`: damaged, refused.
        let err = assemble(std::slice::from_ref(&active), Some(SnowflakeId(20))).unwrap_err();
        assert!(matches!(
            err,
            Error::DamagedBatch { damage: Damage::DuplicateResult, ref tool_use_id, .. }
                if tool_use_id == "a"
        ));
        let mut active = active;
        active.messages.remove(3);
        let h = assemble(&[active], Some(SnowflakeId(20))).unwrap();
        assert_eq!(
            layout(&h),
            vec![
                l(20, Role::User, &["text:go"]),
                l(21, Role::Assistant, &["use:a"]),
                l(24, Role::User, &["result:a"]),
            ]
        );
        // The call message and the text beside the moved result are left out.
        assert_eq!(h.trimmed_active.unwrap().dropped_messages, 2);
    }

    #[test]
    fn c_parallel_results_stored_in_reverse_order_are_reordered() {
        let b = batch(
            BatchState::Complete,
            vec![
                user(10, "compare"),
                (
                    11,
                    Role::Assistant,
                    vec![
                        ContentBlock::text("checking three sources"),
                        ContentBlock::tool_use("a", "search", serde_json::json!({})),
                        ContentBlock::tool_use("b", "search", serde_json::json!({})),
                        ContentBlock::tool_use("c", "search", serde_json::json!({})),
                    ],
                ),
                results(12, &["c"]),
                results(13, &["b"]),
                results(14, &["a"]),
                said(15, "all agree"),
            ],
        );
        let h = assemble(&[b], None).unwrap();
        assert_eq!(
            layout(&h),
            vec![
                l(10, Role::User, &["text:compare"]),
                l(
                    11,
                    Role::Assistant,
                    &["text:checking three sources", "use:a", "use:b", "use:c"]
                ),
                l(14, Role::Tool, &["result:a"]),
                l(13, Role::Tool, &["result:b"]),
                l(12, Role::Tool, &["result:c"]),
                l(15, Role::Assistant, &["text:all agree"]),
            ]
        );
    }

    #[test]
    fn c_results_in_one_message_are_reordered_inside_it() {
        let b = batch(
            BatchState::Complete,
            vec![
                user(10, "compare"),
                calls(11, &["a", "b", "c"]),
                results(12, &["b", "c", "a"]),
            ],
        );
        let h = assemble(&[b], None).unwrap();
        assert_eq!(
            layout(&h)[2..],
            [l(12, Role::Tool, &["result:a", "result:b", "result:c"])]
        );
    }

    #[test]
    fn c_mixed_messages_lose_their_results_and_keep_their_place() {
        let b = batch(
            BatchState::Complete,
            vec![
                user(10, "compare"),
                calls(11, &["a", "b", "c"]),
                said(12, "still waiting"),
                (
                    13,
                    Role::User,
                    vec![result("c"), ContentBlock::text("hurry up"), result("a")],
                ),
                results(14, &["b"]),
                said(15, "done"),
            ],
        );
        let h = assemble(&[b], None).unwrap();
        assert_eq!(
            layout(&h),
            vec![
                l(10, Role::User, &["text:compare"]),
                l(11, Role::Assistant, &["use:a", "use:b", "use:c"]),
                l(13, Role::User, &["result:a"]),
                l(14, Role::Tool, &["result:b"]),
                l(13, Role::User, &["result:c"]),
                l(12, Role::Assistant, &["text:still waiting"]),
                l(13, Role::User, &["text:hurry up"]),
                l(15, Role::Assistant, &["text:done"]),
            ]
        );
    }

    #[test]
    fn d_abandoned_batches_are_excluded_even_when_active() {
        let mut crashed = crashed_mid_call(20);
        crashed.info.state = BatchState::Abandoned;
        for active in [None, Some(SnowflakeId(20))] {
            let h = assemble(&[crashed.clone(), done(30)], active).unwrap();
            assert_eq!(h.included_batches, ids(&[30]));
            assert_eq!(
                h.excluded,
                vec![(SnowflakeId(20), ExclusionReason::Abandoned)]
            );
            assert_eq!(h.trimmed_active, None);
            assert!(h.messages.iter().all(|m| m.batch_id == SnowflakeId(30)));
        }
    }

    #[test]
    fn e_a_heartbeat_continuation_stays_in_its_batch_in_sequence_order() {
        // Batch 10 ran, batch 20 ran, then a heartbeat continued batch 10 (positions 30, 31, 32).
        let mut first = batch(
            BatchState::Complete,
            vec![
                user(10, "remind me"),
                calls(11, &["h"]),
                results(12, &["h"]),
                said(13, "will do"),
                calls(30, &["h2"]),
                results(31, &["h2"]),
                said(32, "reminder sent"),
            ],
        );
        for m in &mut first.messages[4..] {
            m.batch_type = BatchType::Continuation;
        }
        first.info.continuations = 1;
        // Hand the messages over in an order that is neither sequence nor position order.
        first.messages.reverse();
        first.messages.swap(0, 3);
        let second = done(20);
        let h = assemble(&[second, first], None).unwrap();
        assert_eq!(h.included_batches, ids(&[10, 20]));
        let positions: Vec<i64> = h.messages.iter().map(|m| m.position.get()).collect();
        assert_eq!(positions, vec![10, 11, 12, 13, 30, 31, 32, 20, 21]);
        assert!(
            h.messages[..7]
                .iter()
                .all(|m| m.batch_id == SnowflakeId(10))
        );
    }

    #[test]
    fn f_a_complete_batch_with_an_unpaired_call_is_a_typed_error() {
        let mut damaged = crashed_mid_call(20);
        damaged.info.state = BatchState::Complete;
        for active in [None, Some(SnowflakeId(20))] {
            let err = assemble(&[done(10), damaged.clone()], active).unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::DamagedBatch { batch, tool_use_id, damage: Damage::UnansweredCall }
                        if *batch == SnowflakeId(20) && tool_use_id == "x"
                ),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                "batch 20 is damaged: tool call `x`: the call has no result, but the batch is \
                 complete"
            );
        }
    }

    #[test]
    fn f_a_deleted_result_unpairs_a_complete_batch() {
        let mut b = batch(
            BatchState::Complete,
            vec![user(10, "go"), calls(11, &["a"]), results(12, &["a"])],
        );
        b.messages[2].deleted = true;
        let err = assemble(&[b], None).unwrap_err();
        assert!(matches!(
            err,
            Error::DamagedBatch { damage: Damage::UnansweredCall, ref tool_use_id, .. }
                if tool_use_id == "a"
        ));
    }

    #[test]
    fn g_duplicate_tool_use_ids_across_batches_are_a_typed_error() {
        let one = batch(
            BatchState::Complete,
            vec![
                user(10, "go"),
                calls(11, &["call_0"]),
                results(12, &["call_0"]),
            ],
        );
        let two = batch(
            BatchState::Complete,
            vec![
                user(20, "again"),
                calls(21, &["call_0"]),
                results(22, &["call_0"]),
            ],
        );
        // Servers that reuse `call_0` every turn must not brick the agent: the later batch's
        // call and result are renamed together in the request.
        let out = assemble(&[one.clone(), two.clone()], None).unwrap();
        let ids: Vec<&str> = out.messages.iter().flat_map(|m| m.tool_use_ids()).collect();
        let answered: Vec<&str> = out
            .messages
            .iter()
            .flat_map(|m| m.tool_result_ids())
            .collect();
        let renamed = format!("call_0_{}", two.info.id);
        assert_eq!(ids, ["call_0", renamed.as_str()]);
        assert_eq!(answered, ids);
        // Not a problem when one of them is not sent.
        let mut two = two;
        two.info.state = BatchState::Abandoned;
        assemble(&[one, two], None).unwrap();
    }

    // -- the other rules -----------------------------------------------------------------------

    #[test]
    fn empty_input_gives_empty_history() {
        assert_eq!(
            assemble(&[], Some(SnowflakeId(5))).unwrap(),
            AssembledHistory::default()
        );
    }

    #[test]
    fn batches_come_out_in_id_order_whatever_the_input_order() {
        let h = assemble(&[done(30), done(10), done(20)], None).unwrap();
        assert_eq!(h.included_batches, ids(&[10, 20, 30]));
        let batches: Vec<i64> = h.messages.iter().map(|m| m.batch_id.get()).collect();
        assert_eq!(batches, vec![10, 10, 20, 20, 30, 30]);
    }

    #[test]
    fn an_active_batch_without_pending_calls_is_whole_and_not_trimmed() {
        let open = batch(
            BatchState::Open,
            vec![user(20, "go"), calls(21, &["a"]), results(22, &["a"])],
        );
        let h = assemble(&[open], Some(SnowflakeId(20))).unwrap();
        assert_eq!(h.messages.len(), 3);
        assert_eq!(h.trimmed_active, None);
        assert_eq!(h.included_batches, ids(&[20]));
    }

    #[test]
    fn deleted_messages_are_skipped() {
        let mut b = batch(
            BatchState::Complete,
            vec![user(10, "go"), said(11, "oops"), said(12, "fine")],
        );
        b.messages[1].deleted = true;
        let h = assemble(&[b], None).unwrap();
        assert_eq!(
            layout(&h),
            vec![
                l(10, Role::User, &["text:go"]),
                l(12, Role::Assistant, &["text:fine"]),
            ]
        );
    }

    #[test]
    fn archived_batches_are_excluded() {
        let mut old = done(10);
        old.info.archived = true;
        let h = assemble(&[old, done(20)], None).unwrap();
        assert_eq!(
            h.excluded,
            vec![(SnowflakeId(10), ExclusionReason::Archived)]
        );
        assert_eq!(h.included_batches, ids(&[20]));
    }

    #[test]
    fn damaged_pairing_is_refused_with_the_batch_and_call() {
        let cases: Vec<(Vec<M>, &str, Damage)> = vec![
            (
                vec![user(10, "go"), results(11, &["z"])],
                "z",
                Damage::ResultWithoutCall,
            ),
            (
                vec![user(10, "go"), results(11, &["a"]), calls(12, &["a"])],
                "a",
                Damage::ResultWithoutCall,
            ),
            (
                vec![user(10, "go"), calls(11, &["a"]), calls(12, &["a"])],
                "a",
                Damage::DuplicateCall,
            ),
            (
                vec![
                    user(10, "go"),
                    (
                        11,
                        Role::User,
                        vec![ContentBlock::tool_use("a", "t", serde_json::json!({}))],
                    ),
                ],
                "a",
                Damage::CallInWrongRole(Role::User),
            ),
            (
                vec![
                    user(10, "go"),
                    calls(11, &["a"]),
                    (12, Role::Assistant, vec![result("a")]),
                ],
                "a",
                Damage::ResultInWrongRole(Role::Assistant),
            ),
        ];
        for (messages, call, damage) in cases {
            let err = assemble(&[batch(BatchState::Complete, messages)], None).unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::DamagedBatch { batch, tool_use_id, damage: d }
                        if *batch == SnowflakeId(10) && tool_use_id == call && *d == damage
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn inconsistent_input_is_refused() {
        let err = assemble(&[done(10), done(10)], None).unwrap_err();
        assert!(matches!(err, Error::DuplicateBatch { batch } if batch == SnowflakeId(10)));
        let mut b = done(10);
        b.messages[1].batch_id = SnowflakeId(99);
        let err = assemble(&[b], None).unwrap_err();
        assert!(matches!(
            err,
            Error::ForeignMessage { batch, message_batch, .. }
                if batch == SnowflakeId(10) && message_batch == SnowflakeId(99)
        ));
    }

    #[test]
    fn history_serializes_for_inspection() {
        let h = assemble(&[done(10), crashed_mid_call(20)], None).unwrap();
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["excluded"], serde_json::json!([[20, "orphaned"]]));
        assert_eq!(json["messages"][0]["role"], "user");
    }
}
