//! The hand-written [`Deserialize`] of [`ContentBlock`]: what serde's derive with
//! `#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]` accepts, refused where
//! the derive refuses, without the derive's buffering of every field into serde's private
//! `Content` before it picks the variant (a fifth of decoding a stored message).
//!
//! An object whose first key is `type` (the order the derived `Serialize` writes) is decoded
//! straight into the variant's fields. `type` anywhere else, and the derive's sequence form
//! (`["text", "hello"]`), are buffered into `serde_json::Value`s first and then decoded by the same
//! field rules: correctness over speed there. Unknown, duplicate and missing fields are refused,
//! `signature` and `is_error` default when absent, `input` takes any value, an unknown `type`
//! names the variants.
//!
//! The equivalence holds for self-describing formats whose map keys are strings (JSON, as text
//! and as `serde_json::Value`); the derive's field *indices* as keys (integer keys, which JSON
//! cannot express) are not accepted. Errors of the buffered paths keep their message, not their
//! kind. The tests compare this with a derived mirror of the old type on generated objects; this
//! module must never accept or refuse anything the derive would not, and does no I/O.

use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

use super::ContentBlock;

/// The tag's key.
const TAG: &str = "type";

/// The tag's values, in declaration order (the derive's variant indices).
const VARIANTS: &[&str] = &["text", "tool_use", "tool_result", "thinking", "image"];

/// What the derive says it expected when the value is neither a map nor a sequence.
const EXPECTING: &str = "internally tagged enum ContentBlock";

/// The variant named by `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    ToolUse,
    ToolResult,
    Thinking,
    Image,
}

impl Kind {
    /// The variant's field names, in declaration order (the derive's error lists them).
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Text => &["text"],
            Kind::ToolUse => &["id", "name", "input", "signature"],
            Kind::ToolResult => &["tool_use_id", "content", "is_error"],
            Kind::Thinking => &["text", "signature"],
            Kind::Image => &["media_type", "reference"],
        }
    }

    /// What the derive expects of the sequence form, by number of fields.
    fn expecting_seq(self) -> &'static str {
        match self {
            Kind::Text => "struct variant ContentBlock::Text with 1 element",
            Kind::ToolUse => "struct variant ContentBlock::ToolUse with 4 elements",
            Kind::ToolResult => "struct variant ContentBlock::ToolResult with 3 elements",
            Kind::Thinking => "struct variant ContentBlock::Thinking with 2 elements",
            Kind::Image => "struct variant ContentBlock::Image with 2 elements",
        }
    }

    fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"text" => Kind::Text,
            b"tool_use" => Kind::ToolUse,
            b"tool_result" => Kind::ToolResult,
            b"thinking" => Kind::Thinking,
            b"image" => Kind::Image,
            _ => return None,
        })
    }
}

/// The tag's value: a variant's name (or, as the derive allows, its index).
impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KindVisitor;
        impl Visitor<'_> for KindVisitor {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("variant identifier")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
                Ok(match v {
                    0 => Kind::Text,
                    1 => Kind::ToolUse,
                    2 => Kind::ToolResult,
                    3 => Kind::Thinking,
                    4 => Kind::Image,
                    _ => {
                        return Err(E::invalid_value(
                            Unexpected::Unsigned(v),
                            &"variant index 0 <= i < 5",
                        ));
                    }
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
                Kind::from_name(v.as_bytes()).ok_or_else(|| E::unknown_variant(v, VARIANTS))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Kind, E> {
                Kind::from_name(v)
                    .ok_or_else(|| E::unknown_variant(&String::from_utf8_lossy(v), VARIANTS))
            }
        }
        deserializer.deserialize_identifier(KindVisitor)
    }
}

/// A key of a block's object: the tag, one of the variants' field names, or anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Type,
    Text,
    Id,
    Name,
    Input,
    Signature,
    ToolUseId,
    Content,
    IsError,
    MediaType,
    Reference,
    Other(String),
}

impl Key {
    fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"type" => Key::Type,
            b"text" => Key::Text,
            b"id" => Key::Id,
            b"name" => Key::Name,
            b"input" => Key::Input,
            b"signature" => Key::Signature,
            b"tool_use_id" => Key::ToolUseId,
            b"content" => Key::Content,
            b"is_error" => Key::IsError,
            b"media_type" => Key::MediaType,
            b"reference" => Key::Reference,
            _ => return None,
        })
    }

    fn name(&self) -> &str {
        match self {
            Key::Type => TAG,
            Key::Text => "text",
            Key::Id => "id",
            Key::Name => "name",
            Key::Input => "input",
            Key::Signature => "signature",
            Key::ToolUseId => "tool_use_id",
            Key::Content => "content",
            Key::IsError => "is_error",
            Key::MediaType => "media_type",
            Key::Reference => "reference",
            Key::Other(name) => name,
        }
    }

    fn into_name(self) -> String {
        match self {
            Key::Other(name) => name,
            known => known.name().to_owned(),
        }
    }
}

/// Reads one key (a string; no allocation unless it is unknown).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key::from_name(v.as_bytes()).unwrap_or_else(|| Key::Other(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
        Ok(Key::from_name(v.as_bytes()).unwrap_or(Key::Other(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
        Ok(
            Key::from_name(v)
                .unwrap_or_else(|| Key::Other(String::from_utf8_lossy(v).into_owned())),
        )
    }
}

/// The fields read so far, each at most once.
#[derive(Default)]
struct Slots {
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<serde_json::Value>,
    signature: Option<Option<String>>,
    tool_use_id: Option<String>,
    content: Option<String>,
    is_error: Option<bool>,
    media_type: Option<String>,
    reference: Option<String>,
}

/// Reads the value of `key` into `slot`, refusing a second one.
fn put<'de, A, T>(map: &mut A, slot: &mut Option<T>, key: &'static str) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(de::Error::duplicate_field(key));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

fn required<T, E: de::Error>(slot: Option<T>, key: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(key))
}

/// Reads the rest of a `kind` block's object (the tag already read, or taken out) and builds it.
fn from_fields<'de, A: MapAccess<'de>>(kind: Kind, mut map: A) -> Result<ContentBlock, A::Error> {
    let mut s = Slots::default();
    while let Some(key) = map.next_key_seed(KeySeed)? {
        match (kind, key) {
            (_, Key::Type) => return Err(de::Error::duplicate_field(TAG)),
            (Kind::Text | Kind::Thinking, Key::Text) => put(&mut map, &mut s.text, "text")?,
            (Kind::ToolUse, Key::Id) => put(&mut map, &mut s.id, "id")?,
            (Kind::ToolUse, Key::Name) => put(&mut map, &mut s.name, "name")?,
            (Kind::ToolUse, Key::Input) => put(&mut map, &mut s.input, "input")?,
            (Kind::ToolUse | Kind::Thinking, Key::Signature) => {
                put(&mut map, &mut s.signature, "signature")?;
            }
            (Kind::ToolResult, Key::ToolUseId) => {
                put(&mut map, &mut s.tool_use_id, "tool_use_id")?;
            }
            (Kind::ToolResult, Key::Content) => put(&mut map, &mut s.content, "content")?,
            (Kind::ToolResult, Key::IsError) => put(&mut map, &mut s.is_error, "is_error")?,
            (Kind::Image, Key::MediaType) => put(&mut map, &mut s.media_type, "media_type")?,
            (Kind::Image, Key::Reference) => put(&mut map, &mut s.reference, "reference")?,
            (_, other) => return Err(de::Error::unknown_field(other.name(), kind.fields())),
        }
    }
    // Missing fields in declaration order, as the derive reports the first.
    Ok(match kind {
        Kind::Text => ContentBlock::Text {
            text: required(s.text, "text")?,
        },
        Kind::ToolUse => ContentBlock::ToolUse {
            id: required(s.id, "id")?,
            name: required(s.name, "name")?,
            input: required(s.input, "input")?,
            signature: s.signature.flatten(),
        },
        Kind::ToolResult => ContentBlock::ToolResult {
            tool_use_id: required(s.tool_use_id, "tool_use_id")?,
            content: required(s.content, "content")?,
            is_error: s.is_error.unwrap_or_default(),
        },
        Kind::Thinking => ContentBlock::Thinking {
            text: required(s.text, "text")?,
            signature: s.signature.flatten(),
        },
        Kind::Image => ContentBlock::Image {
            media_type: required(s.media_type, "media_type")?,
            reference: required(s.reference, "reference")?,
        },
    })
}

/// The `index`th element of the sequence form, required.
fn element<'de, A, T>(seq: &mut A, index: usize, kind: Kind) -> Result<T, A::Error>
where
    A: SeqAccess<'de>,
    T: Deserialize<'de>,
{
    seq.next_element()?
        .ok_or_else(|| de::Error::invalid_length(index, &kind.expecting_seq()))
}

/// A `kind` block from the elements after the tag of the sequence form, in declaration order,
/// the defaulted last ones optional.
fn from_elements<'de, A: SeqAccess<'de>>(
    kind: Kind,
    seq: &mut A,
) -> Result<ContentBlock, A::Error> {
    Ok(match kind {
        Kind::Text => ContentBlock::Text {
            text: element(seq, 0, kind)?,
        },
        Kind::ToolUse => ContentBlock::ToolUse {
            id: element(seq, 0, kind)?,
            name: element(seq, 1, kind)?,
            input: element(seq, 2, kind)?,
            signature: seq.next_element::<Option<String>>()?.flatten(),
        },
        Kind::ToolResult => ContentBlock::ToolResult {
            tool_use_id: element(seq, 0, kind)?,
            content: element(seq, 1, kind)?,
            is_error: seq.next_element()?.unwrap_or_default(),
        },
        Kind::Thinking => ContentBlock::Thinking {
            text: element(seq, 0, kind)?,
            signature: seq.next_element::<Option<String>>()?.flatten(),
        },
        Kind::Image => ContentBlock::Image {
            media_type: element(seq, 0, kind)?,
            reference: element(seq, 1, kind)?,
        },
    })
}

struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = ContentBlock;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
        let Some(first) = map.next_key_seed(KeySeed)? else {
            return Err(de::Error::missing_field(TAG));
        };
        if first == Key::Type {
            let kind: Kind = map.next_value()?;
            return from_fields(kind, map);
        }
        // `type` later: every other entry buffered, in order, duplicates kept.
        let mut kind = None;
        let mut pairs = Vec::new();
        let mut key = Some(first);
        while let Some(k) = key {
            if k == Key::Type {
                if kind.is_some() {
                    return Err(de::Error::duplicate_field(TAG));
                }
                kind = Some(map.next_value::<Kind>()?);
            } else {
                pairs.push((k.into_name(), map.next_value::<serde_json::Value>()?));
            }
            key = map.next_key_seed(KeySeed)?;
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field(TAG))?;
        let buffered = MapDeserializer::<_, serde_json::Error>::new(pairs.into_iter());
        from_fields(kind, buffered).map_err(de::Error::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ContentBlock, A::Error> {
        let Some(kind) = seq.next_element::<Kind>()? else {
            return Err(de::Error::missing_field(TAG));
        };
        let mut rest = Vec::new();
        while let Some(v) = seq.next_element::<serde_json::Value>()? {
            rest.push(v);
        }
        let mut buffered = SeqDeserializer::<_, serde_json::Error>::new(rest.into_iter());
        from_elements(kind, &mut buffered)
            .and_then(|block| buffered.end().map(|()| block))
            .map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BlockVisitor)
    }
}

#[cfg(test)]
mod tests;
