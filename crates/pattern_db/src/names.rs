//! The one rule for the names and external ids of organizations and agents, used by every front
//! door (the CLI, the HTTP API, the protocol and the agents' own tools) through the storage
//! layer that enforces it.
//!
//! A name is 1 to [`MAX_NAME_CHARS`] characters, has no leading or trailing white space, and
//! holds no control character, no bidirectional override or isolate (they make text display in
//! another order than it is stored: U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C)
//! and no `/` (names appear in paths and in `org/agent` addresses). The error names the field it
//! refuses. This module must never change a name to make it fit: it refuses it.

use crate::AgentError;
use crate::error::{Error, Result};

/// Most characters a name or an external id may hold.
pub const MAX_NAME_CHARS: usize = 200;

/// Whether `c` changes the display order of text around it.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

/// Checks `value` against the naming rule; `field` names it in the error
/// ([`AgentError::InvalidName`]).
pub fn check_name(field: &'static str, value: &str) -> Result<()> {
    let refuse = |reason: String| Err(Error::Agent(AgentError::InvalidName { field, reason }));
    let len = value.chars().count();
    if len == 0 {
        return refuse("must not be empty".into());
    }
    if len > MAX_NAME_CHARS {
        return refuse(format!(
            "must be at most {MAX_NAME_CHARS} characters, got {len}"
        ));
    }
    if value.trim() != value {
        return refuse("must not start or end with white space".into());
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return refuse(format!(
            "must not contain control characters (found U+{:04X})",
            c as u32
        ));
    }
    if let Some(c) = value.chars().find(|&c| is_bidi_control(c)) {
        return refuse(format!(
            "must not contain bidirectional control characters (found U+{:04X})",
            c as u32
        ));
    }
    if value.contains('/') {
        return refuse("must not contain `/`".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        for ok in [
            "ada",
            "Ada Lovelace",
            "agent-7",
            "日本語",
            "a.b_c",
            &"x".repeat(200),
        ] {
            assert!(check_name("name", ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn each_refusal_names_the_field() {
        let bad = [
            "",
            " ada",
            "ada ",
            "a\nb",
            "a\u{0}b",
            "a\u{202E}b",
            "a\u{2066}b",
            "org/ada",
            &"x".repeat(201),
        ];
        for value in bad {
            match check_name("external_id", value) {
                Err(Error::Agent(AgentError::InvalidName { field, .. })) => {
                    assert_eq!(field, "external_id")
                }
                other => panic!("{value:?}: {other:?}"),
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn accepted_names_have_no_slash_or_controls(value in "\\PC{0,40}") {
            if check_name("name", &value).is_ok() {
                proptest::prop_assert!(!value.contains('/'));
                proptest::prop_assert!(!value.chars().any(|c| c.is_control() || is_bidi_control(c)));
                proptest::prop_assert!(!value.is_empty());
            }
        }
    }
}
