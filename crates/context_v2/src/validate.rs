//! The last check on every request built from history: tool calls and tool results pair up.
//!
//! Providers reject a request that holds a `tool_use` without its `tool_result` (Anthropic:
//! "tool_use ids were found without tool_result blocks immediately after"), and an agent whose
//! history produces such a request is bricked: every later request fails the same way. So
//! [`validate`] runs on every message sequence before it leaves this crate, and
//! [`crate::assemble()`] returns its error instead of its output.
//!
//! The rules, walking the messages in order with a queue of results still due:
//!
//! 1. Every `tool_use` id is unique in the request ([`Error::DuplicateToolUse`]).
//! 2. The calls of a message become due when the message ends. While results are due, the
//!    following messages must be `user` or `tool` messages whose blocks are those results, in call
//!    order, one or several per message. The first block that is not the next due result is an
//!    error: a result of a later call of the same group is [`Error::ResultOutOfOrder`]; any other
//!    result is [`Error::OrphanToolResult`]; any other block, an `assistant` or `system` message,
//!    or the end of the sequence is [`Error::UnpairedToolCall`] for the first call still due.
//! 3. Once every due result has come, the rest of that message may hold other blocks.
//! 4. A result when nothing is due (unknown id, answered already, or in the same message as its
//!    call) is [`Error::OrphanToolResult`].
//!
//! Role alternation (user/assistant turns, consecutive messages of one role) is not checked here:
//! it differs between providers and belongs to provider formatting. This module must never change
//! or repair the messages it checks: it only accepts or refuses them.

use std::collections::{HashSet, VecDeque};

use pattern_db::{ContentBlock, Role};

use crate::assemble::ContextMessage;
use crate::error::{Error, Result};

/// Checks that `messages` pair every tool call with its result, as described in the module doc.
pub fn validate(messages: &[ContextMessage]) -> Result<()> {
    let mut calls: HashSet<&str> = HashSet::new();
    let mut due: VecDeque<&str> = VecDeque::new();
    for message in messages {
        let mut blocks = message.content.iter();
        if let Some(&first_due) = due.front() {
            if !matches!(message.role, Role::User | Role::Tool) {
                return Err(unpaired(first_due));
            }
            for block in blocks.by_ref() {
                let Some(&expected) = due.front() else {
                    break;
                };
                match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        if tool_use_id == expected {
                            due.pop_front();
                        } else if due.contains(&tool_use_id.as_str()) {
                            return Err(Error::ResultOutOfOrder {
                                expected: expected.to_owned(),
                                found: tool_use_id.clone(),
                            });
                        } else {
                            return Err(orphan(tool_use_id));
                        }
                    }
                    _ => return Err(unpaired(expected)),
                }
                if due.is_empty() {
                    break;
                }
            }
            if !due.is_empty() {
                // Only results so far, more due: the next message may continue them.
                continue;
            }
        }
        let mut new_calls: Vec<&str> = Vec::new();
        for block in blocks {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    if !calls.insert(id) {
                        return Err(Error::DuplicateToolUse {
                            tool_use_id: id.clone(),
                        });
                    }
                    new_calls.push(id);
                }
                ContentBlock::ToolResult { tool_use_id, .. } => return Err(orphan(tool_use_id)),
                _ => {}
            }
        }
        due.extend(new_calls);
    }
    match due.front() {
        Some(id) => Err(unpaired(id)),
        None => Ok(()),
    }
}

fn unpaired(id: &str) -> Error {
    Error::UnpairedToolCall {
        tool_use_id: id.to_owned(),
    }
}

fn orphan(id: &str) -> Error {
    Error::OrphanToolResult {
        tool_use_id: id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! Hand-made sequences, one per rule and per error.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use pattern_db::SnowflakeId;

    use super::*;

    fn msg(role: Role, content: Vec<ContentBlock>) -> ContextMessage {
        ContextMessage {
            batch_id: SnowflakeId(1),
            position: SnowflakeId(1),
            role,
            content,
        }
    }

    fn text(role: Role, t: &str) -> ContextMessage {
        msg(role, vec![ContentBlock::text(t)])
    }

    fn call(ids: &[&str]) -> ContextMessage {
        msg(
            Role::Assistant,
            ids.iter()
                .map(|id| ContentBlock::tool_use(*id, "tool", serde_json::json!({})))
                .collect(),
        )
    }

    fn results(role: Role, ids: &[&str]) -> ContextMessage {
        msg(
            role,
            ids.iter()
                .map(|id| ContentBlock::tool_result(*id, "ok", false))
                .collect(),
        )
    }

    #[test]
    fn accepts_empty_and_plain_histories() {
        validate(&[]).unwrap();
        validate(&[
            text(Role::System, "be nice"),
            text(Role::User, "hi"),
            text(Role::User, "again"),
            text(Role::Assistant, "hello"),
        ])
        .unwrap();
    }

    #[test]
    fn accepts_results_in_one_or_several_messages() {
        validate(&[
            text(Role::User, "go"),
            call(&["a", "b", "c"]),
            results(Role::Tool, &["a"]),
            results(Role::User, &["b", "c"]),
            text(Role::Assistant, "done"),
            call(&["d"]),
            results(Role::Tool, &["d"]),
        ])
        .unwrap();
    }

    #[test]
    fn accepts_other_blocks_after_the_last_due_result() {
        let mut m = results(Role::User, &["a"]);
        m.content.push(ContentBlock::text("and also"));
        validate(&[call(&["a"]), m, text(Role::User, "more")]).unwrap();
    }

    #[test]
    fn refuses_a_call_at_the_end() {
        let err = validate(&[text(Role::User, "go"), call(&["a", "b"])]).unwrap_err();
        assert!(matches!(err, Error::UnpairedToolCall { tool_use_id } if tool_use_id == "a"));
        let err = validate(&[call(&["a", "b"]), results(Role::Tool, &["a"])]).unwrap_err();
        assert!(matches!(err, Error::UnpairedToolCall { tool_use_id } if tool_use_id == "b"));
    }

    #[test]
    fn refuses_anything_else_before_the_results() {
        for between in [
            text(Role::Assistant, "thinking aloud"),
            text(Role::System, "note"),
            text(Role::User, "hurry"),
            call(&["x"]),
        ] {
            let err = validate(&[call(&["a"]), between, results(Role::Tool, &["a"])]).unwrap_err();
            assert!(
                matches!(&err, Error::UnpairedToolCall { tool_use_id } if tool_use_id == "a"),
                "{err}"
            );
        }
        let mut m = msg(Role::User, vec![ContentBlock::text("first")]);
        m.content.push(ContentBlock::tool_result("a", "ok", false));
        let err = validate(&[call(&["a"]), m]).unwrap_err();
        assert!(matches!(err, Error::UnpairedToolCall { tool_use_id } if tool_use_id == "a"));
    }

    #[test]
    fn refuses_results_out_of_call_order() {
        let err = validate(&[call(&["a", "b"]), results(Role::Tool, &["b", "a"])]).unwrap_err();
        assert!(matches!(
            &err,
            Error::ResultOutOfOrder { expected, found } if expected == "a" && found == "b"
        ));
        assert_eq!(
            err.to_string(),
            "tool results out of call order: expected the result for `a`, found `b`"
        );
    }

    #[test]
    fn refuses_orphan_results() {
        // Unknown id while nothing is due.
        let err = validate(&[text(Role::User, "hi"), results(Role::Tool, &["z"])]).unwrap_err();
        assert!(matches!(err, Error::OrphanToolResult { tool_use_id } if tool_use_id == "z"));
        // Unknown id while a result is due.
        let err = validate(&[call(&["a"]), results(Role::Tool, &["z"])]).unwrap_err();
        assert!(matches!(err, Error::OrphanToolResult { tool_use_id } if tool_use_id == "z"));
        // Answered twice.
        let err = validate(&[
            call(&["a"]),
            results(Role::Tool, &["a"]),
            results(Role::Tool, &["a"]),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::OrphanToolResult { tool_use_id } if tool_use_id == "a"));
        // A result of an earlier group while a later group is due.
        let err = validate(&[
            call(&["a"]),
            results(Role::Tool, &["a"]),
            call(&["b"]),
            results(Role::Tool, &["a"]),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::OrphanToolResult { tool_use_id } if tool_use_id == "a"));
        // A result in the same message as its call.
        let mut m = call(&["a"]);
        m.content.push(ContentBlock::tool_result("a", "ok", false));
        let err = validate(&[m]).unwrap_err();
        assert!(matches!(err, Error::OrphanToolResult { tool_use_id } if tool_use_id == "a"));
    }

    #[test]
    fn refuses_duplicate_call_ids() {
        let err = validate(&[
            call(&["a"]),
            results(Role::Tool, &["a"]),
            call(&["a"]),
            results(Role::Tool, &["a"]),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::DuplicateToolUse { tool_use_id } if tool_use_id == "a"));
        let err = validate(&[call(&["a", "a"])]).unwrap_err();
        assert!(matches!(err, Error::DuplicateToolUse { tool_use_id } if tool_use_id == "a"));
    }

    #[test]
    fn messages_name_the_call() {
        assert_eq!(
            unpaired("toolu_1").to_string(),
            "tool_use `toolu_1` is not followed by its tool_result: providers reject a request \
             holding a call without its result"
        );
        assert_eq!(
            orphan("toolu_2").to_string(),
            "tool_result for `toolu_2` answers no preceding tool_use that waits for it"
        );
    }
}
