//! Tests of [`ContentBlock`]'s hand-written `Deserialize`: a derived mirror of the old type (the
//! same serde attributes) must accept and refuse the same inputs with the same values, on
//! generated blocks and on generated objects (shuffled keys, missing, duplicate, unknown and
//! wrongly typed fields, the tag anywhere), and each refusal says what is wrong.

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ContentBlock;

/// The derived `Deserialize` of `ContentBlock` as it was before the hand-written one.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Mirror {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
    Thinking {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    Image {
        media_type: String,
        reference: String,
    },
}

impl From<Mirror> for ContentBlock {
    fn from(m: Mirror) -> Self {
        match m {
            Mirror::Text { text } => ContentBlock::Text { text },
            Mirror::ToolUse {
                id,
                name,
                input,
                signature,
            } => ContentBlock::ToolUse {
                id,
                name,
                input,
                signature,
            },
            Mirror::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            },
            Mirror::Thinking { text, signature } => ContentBlock::Thinking { text, signature },
            Mirror::Image {
                media_type,
                reference,
            } => ContentBlock::Image {
                media_type,
                reference,
            },
        }
    }
}

/// Both decoders on `json` (as text, in an array, and as a `Value` when it is one): the same
/// acceptance and the same value. Returns the new decoder's answer.
fn agree(json: &str) -> Result<Result<ContentBlock, String>, TestCaseError> {
    let new = serde_json::from_str::<ContentBlock>(json);
    let old = serde_json::from_str::<Mirror>(json).map(ContentBlock::from);
    match (&new, &old) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", json),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(false, "{json}: new {new:?}, old {old:?}"),
    }
    let listed = format!("[{json}, {json}]");
    let new_list = serde_json::from_str::<Vec<ContentBlock>>(&listed);
    let old_list = serde_json::from_str::<Vec<Mirror>>(&listed)
        .map(|v| v.into_iter().map(ContentBlock::from).collect::<Vec<_>>());
    match (&new_list, &old_list) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", listed),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(false, "{listed}: new {new_list:?}, old {old_list:?}"),
    }
    if let Ok(value) = serde_json::from_str::<Value>(json) {
        let new_v = serde_json::from_value::<ContentBlock>(value.clone());
        let old_v = serde_json::from_value::<Mirror>(value).map(ContentBlock::from);
        match (&new_v, &old_v) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{} as a Value", json),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "{json} as a Value: new {new_v:?}, old {old_v:?}"),
        }
    }
    Ok(new.map_err(|e| e.to_string()))
}

/// The keys the generated objects are made of: the tag, every variant's fields, and strangers.
const KEYS: &[&str] = &[
    "type",
    "text",
    "id",
    "name",
    "input",
    "signature",
    "tool_use_id",
    "content",
    "is_error",
    "media_type",
    "reference",
    "extra",
    "Type",
    "TEXT",
    "",
    "types",
];

const TAGS: &[&str] = &[
    "text",
    "tool_use",
    "tool_result",
    "thinking",
    "image",
    "Text",
    "toolUse",
    "",
];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(str::to_owned)
}

/// Any JSON value, with the tag names and plain strings common among the strings.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Eighths print and parse back exactly (serde_json's default float parsing may be one
        // unit in the last place off, in both decoders alike).
        (-8_000_000i32..8_000_000).prop_map(|n| Value::from(f64::from(n) / 8.0)),
        prop::sample::select(TAGS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        "[a-z\"\\\\\u{7f}-\u{3b1}]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

fn block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        text().prop_map(|text| ContentBlock::Text { text }),
        (text(), text(), value(), prop::option::of(text())).prop_map(
            |(id, name, input, signature)| ContentBlock::ToolUse {
                id,
                name,
                input,
                signature,
            }
        ),
        (text(), text(), any::<bool>()).prop_map(|(tool_use_id, content, is_error)| {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            }
        }),
        (text(), prop::option::of(text()))
            .prop_map(|(text, signature)| ContentBlock::Thinking { text, signature }),
        (text(), text()).prop_map(|(media_type, reference)| ContentBlock::Image {
            media_type,
            reference
        }),
    ]
}

/// A JSON object of these entries in this order (duplicates kept); keys `\u`-escaped when asked.
fn render(pairs: &[(String, Value)], escape_keys: bool) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if escape_keys {
            out.push('"');
            for c in k.chars() {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            out.push('"');
        } else {
            out.push_str(&serde_json::to_string(k).unwrap_or_default());
        }
        out.push(':');
        out.push_str(&serde_json::to_string(v).unwrap_or_default());
    }
    out.push('}');
    out
}

/// The entries of `block` as the derived `Serialize` writes them (`type` first).
fn entries(block: &ContentBlock) -> Vec<(String, Value)> {
    match serde_json::to_value(block) {
        Ok(Value::Object(map)) => {
            let mut pairs: Vec<(String, Value)> = map.into_iter().collect();
            // `Value`'s map sorts its keys: put the tag first again, as the text has it.
            pairs.sort_by_key(|(k, _)| k != "type");
            pairs
        }
        other => panic!("a block serializes to an object, not {other:?}"),
    }
}

/// A permutation of `pairs` drawn from `seed` (Fisher-Yates over splitmix64).
fn shuffle(pairs: &mut [(String, Value)], mut seed: u64) {
    for i in (1..pairs.len()).rev() {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = usize::try_from(z % (i as u64 + 1)).unwrap_or(0);
        pairs.swap(i, j);
    }
}

/// How a valid block's entries are spoiled (or not).
#[derive(Debug, Clone)]
struct Spoil {
    drop: Option<usize>,
    duplicate: Option<usize>,
    retype: Option<(usize, Value)>,
    extra: Vec<(String, Value)>,
    shuffle: Option<u64>,
    escape_keys: bool,
}

fn spoil() -> impl Strategy<Value = Spoil> {
    (
        prop::option::weighted(0.3, any::<usize>()),
        prop::option::weighted(0.3, any::<usize>()),
        prop::option::weighted(0.3, (any::<usize>(), value())),
        prop::collection::vec((key(), value()), 0..2),
        prop::option::weighted(0.6, any::<u64>()),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(drop, duplicate, retype, extra, shuffle, escape_keys)| Spoil {
                drop,
                duplicate,
                retype,
                extra,
                shuffle,
                escape_keys,
            },
        )
}

fn spoiled(block: &ContentBlock, s: &Spoil) -> String {
    let mut pairs = entries(block);
    if let Some(i) = s.drop {
        pairs.remove(i % pairs.len());
    }
    if let Some(i) = s.duplicate
        && !pairs.is_empty()
    {
        let again = pairs[i % pairs.len()].clone();
        pairs.push(again);
    }
    if let Some((i, v)) = &s.retype
        && !pairs.is_empty()
    {
        let n = pairs.len();
        pairs[i % n].1 = v.clone();
    }
    pairs.extend(s.extra.iter().cloned());
    if let Some(seed) = s.shuffle {
        shuffle(&mut pairs, seed);
    }
    render(&pairs, s.escape_keys)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every block reads back as itself, in both decoders, with its keys in any order.
    #[test]
    fn blocks_read_back(b in block(), seed in any::<u64>()) {
        let written = serde_json::to_string(&b).unwrap_or_default();
        prop_assert_eq!(agree(&written)?, Ok(b.clone()));
        let mut pairs = entries(&b);
        shuffle(&mut pairs, seed);
        prop_assert_eq!(agree(&render(&pairs, false))?, Ok(b));
    }

    /// Spoiled blocks: both decoders accept and refuse the same ones, with the same values.
    #[test]
    fn spoiled_blocks_agree(b in block(), s in spoil()) {
        let _ = agree(&spoiled(&b, &s))?;
    }

    /// Objects of the variants' keys with arbitrary values, and the sequence form.
    #[test]
    fn arbitrary_objects_agree(
        pairs in prop::collection::vec((key(), value()), 0..7),
        tag in prop::option::of((prop::sample::select(TAGS), any::<usize>())),
        escape_keys in prop::bool::weighted(0.1),
    ) {
        let mut pairs = pairs;
        if let Some((tag, at)) = tag {
            let at = at % (pairs.len() + 1);
            pairs.insert(at, ("type".to_owned(), Value::from(tag)));
        }
        let _ = agree(&render(&pairs, escape_keys))?;
    }

    #[test]
    fn sequences_and_other_values_agree(
        head in prop_oneof![prop::sample::select(TAGS).prop_map(Value::from), value()],
        rest in prop::collection::vec(value(), 0..6),
        whole in value(),
    ) {
        let mut items = vec![head];
        items.extend(rest);
        let _ = agree(&Value::Array(items).to_string())?;
        let _ = agree(&whole.to_string())?;
    }
}

/// The new decoder's error for `json` (which the mirror must refuse too).
fn refused(json: &str) -> String {
    match agree(json) {
        Ok(Err(e)) => e,
        Ok(Ok(block)) => panic!("{json} was accepted as {block:?}"),
        Err(e) => panic!("{e}"),
    }
}

fn accepted(json: &str) -> ContentBlock {
    match agree(json) {
        Ok(Ok(block)) => block,
        Ok(Err(e)) => panic!("{json} was refused: {e}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_tag_may_come_anywhere() {
    let first = accepted(r#"{"type":"tool_use","id":"a","name":"n","input":{"x":[1,2.5,null]}}"#);
    let later = accepted(r#"{"id":"a","input":{"x":[1,2.5,null]},"type":"tool_use","name":"n"}"#);
    let last = accepted(r#"{"id":"a","input":{"x":[1,2.5,null]},"name":"n","type":"tool_use"}"#);
    let expected = ContentBlock::tool_use("a", "n", json!({"x": [1, 2.5, null]}));
    assert_eq!(first, expected);
    assert_eq!(later, expected);
    assert_eq!(last, expected);
}

#[test]
fn defaults_hold_when_fields_are_absent() {
    assert_eq!(
        accepted(r#"{"type":"tool_result","tool_use_id":"a","content":"c"}"#),
        ContentBlock::tool_result("a", "c", false)
    );
    assert_eq!(
        accepted(r#"{"type":"thinking","text":"t"}"#),
        ContentBlock::Thinking {
            text: "t".into(),
            signature: None
        }
    );
    assert_eq!(
        accepted(r#"{"type":"thinking","text":"t","signature":null}"#),
        ContentBlock::Thinking {
            text: "t".into(),
            signature: None
        }
    );
    assert_eq!(
        accepted(r#"{"type":"tool_use","id":"a","name":"n","input":null,"signature":"s"}"#),
        ContentBlock::ToolUse {
            id: "a".into(),
            name: "n".into(),
            input: Value::Null,
            signature: Some("s".into())
        }
    );
}

#[test]
fn the_sequence_form_reads_as_the_derive_read_it() {
    assert_eq!(accepted(r#"["text","hello"]"#), ContentBlock::text("hello"));
    assert_eq!(
        accepted(r#"["tool_result","a","c"]"#),
        ContentBlock::tool_result("a", "c", false)
    );
    assert!(refused(r#"["text"]"#).contains("invalid length 0"));
    assert!(refused(r#"["text","a","b"]"#).contains("invalid length 2"));
    assert!(refused("[]").contains("missing field `type`"));
}

#[test]
fn an_unknown_field_is_refused() {
    let e = refused(r#"{"type":"text","text":"a","extra":1}"#);
    assert!(e.contains("unknown field `extra`, expected `text`"), "{e}");
    // Another variant's field is unknown here, with the tag first or later.
    let e = refused(r#"{"type":"text","text":"a","signature":"s"}"#);
    assert!(
        e.contains("unknown field `signature`, expected `text`"),
        "{e}"
    );
    let e = refused(r#"{"text":"a","signature":"s","type":"text"}"#);
    assert!(
        e.contains("unknown field `signature`, expected `text`"),
        "{e}"
    );
    let e = refused(r#"{"type":"image","media_type":"m","reference":"r","Type":"x"}"#);
    assert!(
        e.contains("unknown field `Type`, expected `media_type` or `reference`"),
        "{e}"
    );
}

#[test]
fn a_duplicate_field_is_refused() {
    let e = refused(r#"{"type":"text","text":"a","text":"b"}"#);
    assert!(e.contains("duplicate field `text`"), "{e}");
    let e = refused(r#"{"text":"a","type":"text","text":"b"}"#);
    assert!(e.contains("duplicate field `text`"), "{e}");
    let e = refused(r#"{"type":"text","text":"a","type":"text"}"#);
    assert!(e.contains("duplicate field `type`"), "{e}");
    let e = refused(r#"{"text":"a","type":"text","type":"text"}"#);
    assert!(e.contains("duplicate field `type`"), "{e}");
}

#[test]
fn a_missing_field_is_refused() {
    let e = refused(r#"{"type":"tool_use","name":"n","input":{}}"#);
    assert!(e.contains("missing field `id`"), "{e}");
    let e = refused(r#"{"type":"tool_use","id":"a","name":"n"}"#);
    assert!(e.contains("missing field `input`"), "{e}");
    let e = refused(r#"{"name":"n","type":"image"}"#);
    assert!(e.contains("unknown field `name`"), "{e}");
    let e = refused(r#"{"reference":"r","type":"image"}"#);
    assert!(e.contains("missing field `media_type`"), "{e}");
    let e = refused(r#"{"text":"a"}"#);
    assert!(e.contains("missing field `type`"), "{e}");
    let e = refused("{}");
    assert!(e.contains("missing field `type`"), "{e}");
}

#[test]
fn an_unknown_type_names_the_variants() {
    let e = refused(r#"{"type":"video","reference":"r"}"#);
    assert!(
        e.contains(
            "unknown variant `video`, expected one of `text`, `tool_use`, `tool_result`, `thinking`, `image`"
        ),
        "{e}"
    );
    let e = refused(r#"{"reference":"r","type":"video"}"#);
    assert!(e.contains("unknown variant `video`"), "{e}");
    let e = refused(r#"{"type":1,"text":"a"}"#);
    assert!(e.contains("expected variant identifier"), "{e}");
}

#[test]
fn a_wrong_type_is_refused() {
    let e = refused(r#"{"type":"text","text":5}"#);
    assert!(
        e.contains("invalid type: integer `5`, expected a string"),
        "{e}"
    );
    let e = refused(r#"{"text":5,"type":"text"}"#);
    assert!(
        e.contains("invalid type: integer `5`, expected a string"),
        "{e}"
    );
    let e = refused(r#"{"type":"tool_result","tool_use_id":"a","content":"c","is_error":"no"}"#);
    assert!(e.contains("expected a boolean"), "{e}");
    let e = refused(r#"{"type":"thinking","text":"t","signature":1}"#);
    assert!(e.contains("expected a string"), "{e}");
    let e = refused(r#""text""#);
    assert!(
        e.contains("expected internally tagged enum ContentBlock"),
        "{e}"
    );
    let e = refused("null");
    assert!(
        e.contains("expected internally tagged enum ContentBlock"),
        "{e}"
    );
}

#[test]
fn the_fast_path_reports_where() {
    // Read straight from the text, the error has its position.
    let e = refused(r#"{"type":"text","text":"a","extra":1}"#);
    assert!(e.contains("line 1 column"), "{e}");
}
