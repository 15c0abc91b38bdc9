//! Statements on `messages` rows: a batch's live messages in order, its trigger (the message at
//! sequence 0), a page of an agent's history, and the count of its live messages.
//!
//! It must never parse a message's content or judge its role: the content comes back as the
//! text its writer stored, the role and batch type as their names.
//!
//! A message's role and batch type are stored as codes, their index in [`ROLES`] and
//! [`BATCH_TYPES`] (migration 0030); the statements here turn them back into names
//! ([`ROLE_NAME`], [`BATCH_TYPE_NAME`]), and a writer stores [`code`]s.
//!
//! A message's content is stored as its text, or as that text compressed (a zstd frame, a
//! `BLOB`) when that makes it smaller by at least a sixteenth (migration 0031;
//! [`content_to_store`]). Frames are compressed with the built-in dictionary ([`ENGLISH_1_ID`],
//! migration 0032), which the frame names; frames of earlier builds name none. Reads give the
//! text back either way: [`StoredText`] decodes the column, [`text_from_hex`] the hex of a
//! compressed value inside a JSON document. A frame naming a dictionary this build does not have
//! is an error ([`ContentError::UnknownDictionary`]), never text decoded with another one.

use std::cell::RefCell;
use std::sync::OnceLock;

use sqlx::error::BoxDynError;
use sqlx::sqlite::{Sqlite, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, SqliteConnection, Type, TypeInfo, ValueRef};

/// Roles by stored code.
pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Batch types by stored code.
pub const BATCH_TYPES: [&str; 4] = [
    "user_request",
    "agent_to_agent",
    "system_trigger",
    "continuation",
];

/// The SQL that names the role of the message `m` (the statements of this module spell it out:
/// sqlx's checked statements are literals).
pub const ROLE_NAME: &str = "CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END";

/// The SQL that names the batch type of the message `m`.
pub const BATCH_TYPE_NAME: &str = "CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END";

/// The SQL that gives the id of the message `m` as a UUID's text (lower case, hyphenated):
/// SQLite stores it as its 16 bytes (migration 0030), which sort as the text does.
pub const ID_TEXT: &str = "lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21))";

/// The SQL that gives the id of the message `m` as its 32 hex digits (no hyphens), which
/// `uuid::Uuid::parse_str` reads: for rows whose id is parsed, not compared as text. One `hex`
/// call per row instead of [`ID_TEXT`]'s five, four `substr` and a `lower`.
pub const ID_HEX: &str = "hex(m.id)";

/// The stored code of `name` among `names` ([`ROLES`] or [`BATCH_TYPES`]); `None` for a name
/// that is not one of them.
pub fn code(names: &[&str], name: &str) -> Option<i64> {
    names
        .iter()
        .position(|n| *n == name)
        .and_then(|i| i64::try_from(i).ok())
}

/// The shortest text ever compressed: a zstd frame's own bytes (about ten) leave little to gain
/// below it. The writer chooses a threshold at or above it ([`content_to_store`]).
pub const COMPRESS_FROM: usize = 64;

/// The zstd level content is compressed at: on texts of a few hundred bytes the higher levels
/// gain a byte or two (measured on English prose: 269 bytes per 387 at level 1, 268 at 3, 264 at
/// 19) for several times the time.
const LEVEL: i32 = 1;

/// The built-in dictionary (zstd's format, 4 KiB): entropy tables and phrases of English prose,
/// trained by `cargo xtask dictionary` from this repository's own documentation (decision 0025,
/// "Stop 50"). A 387-byte message compressed alone spends most of its time building the entropy
/// tables of its one block and a good part of its bytes describing them; with the dictionary's
/// tables it does neither. Part of the storage format: frames name it by id and every later build
/// must read them, so it never changes (another dictionary would be a new file beside it).
const ENGLISH_1: &[u8] = include_bytes!("messages/english-1.zdict");

/// The id frames compressed with the built-in dictionary name.
pub const ENGLISH_1_ID: u32 = 1_617_573_300;

/// The built-in dictionary, prepared once per process for compressing (at [`LEVEL`]) and for
/// decompressing; `None` when zstd cannot prepare it (out of memory): content is then
/// compressed without it, and frames that name it cannot be read.
struct Prepared {
    encoder: zstd::dict::EncoderDictionary<'static>,
    decoder: zstd::dict::DecoderDictionary<'static>,
}

fn english() -> Option<&'static Prepared> {
    static PREPARED: OnceLock<Option<Prepared>> = OnceLock::new();
    PREPARED
        .get_or_init(|| {
            Some(Prepared {
                encoder: zstd::dict::EncoderDictionary::try_copy(ENGLISH_1, LEVEL).ok()?,
                decoder: zstd::dict::DecoderDictionary::try_copy(ENGLISH_1).ok()?,
            })
        })
        .as_ref()
}

/// The most bytes a compressed content may expand to: SQLite's own limit on a value's length
/// (`SQLITE_MAX_LENGTH`, 10^9), so no text it stored is refused, and a corrupt frame header
/// cannot make a read allocate more.
const MAX_TEXT: usize = 1_000_000_000;

/// What to store in `messages.content` for a text.
#[derive(Debug, PartialEq, Eq)]
pub enum ContentToStore<'a> {
    /// The text itself (`TEXT`).
    Text(&'a str),
    /// The text compressed: one zstd frame recording its size (`BLOB`).
    Compressed(Vec<u8>),
}

thread_local! {
    /// One compression context per thread, reused: creating one costs more than compressing a
    /// message.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    /// One decompression context per thread, reused (creating one cost 20 µs, twenty times
    /// what decompressing a message takes), for frames that name no dictionary.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    /// And one for frames that name the built-in dictionary. (zstd applies a context's
    /// dictionary to every frame that names none: a frame is read only with the dictionary it
    /// names, or with none.)
    static ENGLISH_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// How `text` is stored: compressed when it is at least `from` bytes long (and at least
/// [`COMPRESS_FROM`]) and that saves at least a sixteenth of it, else as it is. Compression never
/// fails a write: a context that cannot be made stores the text as it is.
pub fn content_to_store(text: &str, from: usize) -> ContentToStore<'_> {
    if text.len() < from.max(COMPRESS_FROM) {
        return ContentToStore::Text(text);
    }
    let compressed = COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = match english() {
                Some(d) => zstd::bulk::Compressor::with_prepared_dictionary(&d.encoder).ok(),
                None => zstd::bulk::Compressor::new(LEVEL).ok(),
            };
        }
        slot.as_mut().and_then(|c| c.compress(text.as_bytes()).ok())
    });
    match compressed {
        Some(bytes) if bytes.len() + text.len() / 16 <= text.len() => {
            ContentToStore::Compressed(bytes)
        }
        _ => ContentToStore::Text(text),
    }
}

/// A stored content that does not read back as text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// A compressed value is not one zstd frame recording its size.
    #[error("compressed message content is not a zstd frame of known size")]
    NotAFrame,
    /// A compressed value does not decompress.
    #[error("compressed message content does not decompress: {0}")]
    Corrupt(std::io::Error),
    /// The text is not UTF-8.
    #[error("message content is not UTF-8 text: {0}")]
    NotText(std::string::FromUtf8Error),
    /// The hex of a compressed value is not hex.
    #[error("compressed message content in a JSON document is not hex: {0}")]
    NotHex(hex::FromHexError),
    /// A frame names a dictionary this build does not have (written by a later build, or
    /// corrupt), or the built-in one could not be prepared.
    #[error("compressed message content names dictionary {0}, which this build cannot use")]
    UnknownDictionary(u32),
}

/// The text of a compressed content (a zstd frame, as [`content_to_store`] makes it).
pub fn decompress(bytes: &[u8]) -> Result<String, ContentError> {
    let size = match zstd::zstd_safe::get_frame_content_size(bytes) {
        Ok(Some(size)) => usize::try_from(size).map_err(|_| ContentError::NotAFrame)?,
        _ => return Err(ContentError::NotAFrame),
    };
    if size > MAX_TEXT {
        return Err(ContentError::NotAFrame);
    }
    let named = zstd::zstd_safe::get_dict_id_from_frame(bytes).map(u32::from);
    let (contexts, dictionary) = match named {
        None => (&DECOMPRESSOR, None),
        Some(ENGLISH_1_ID) => match english() {
            Some(d) => (&ENGLISH_DECOMPRESSOR, Some(&d.decoder)),
            None => return Err(ContentError::UnknownDictionary(ENGLISH_1_ID)),
        },
        Some(other) => return Err(ContentError::UnknownDictionary(other)),
    };
    let text = contexts
        .with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(match dictionary {
                    Some(d) => zstd::bulk::Decompressor::with_prepared_dictionary(d)?,
                    None => zstd::bulk::Decompressor::new()?,
                });
            }
            match slot.as_mut() {
                Some(d) => d.decompress(bytes, size),
                None => Err(std::io::Error::other("no decompression context")),
            }
        })
        .map_err(ContentError::Corrupt)?;
    String::from_utf8(text).map_err(ContentError::NotText)
}

/// The text of a compressed content given as hex (SQL's `hex()`: JSON holds no bytes).
pub fn text_from_hex(hex_text: &str) -> Result<String, ContentError> {
    let bytes = hex::decode(hex_text).map_err(ContentError::NotHex)?;
    decompress(&bytes)
}

/// A message's content read back: the stored text, or the text of a compressed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredText(pub String);

impl StoredText {
    /// The text.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl AsRef<str> for StoredText {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Type<Sqlite> for StoredText {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty) || <Vec<u8> as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for StoredText {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        if value.type_info().name() == "BLOB" {
            let bytes = <&[u8] as Decode<'r, Sqlite>>::decode(value)?;
            Ok(Self(decompress(bytes)?))
        } else {
            Ok(Self(<String as Decode<'r, Sqlite>>::decode(value)?))
        }
    }
}

/// A `messages` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRow {
    /// `id`: a UUID's text, its 32 hex digits ([`ID_HEX`]).
    pub id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `position`.
    pub position: i64,
    /// `batch_id`.
    pub batch_id: i64,
    /// `sequence_num`.
    pub sequence_num: i64,
    /// `batch_type`.
    pub batch_type: String,
    /// `role`.
    pub role: String,
    /// `content`: the text its writer stored (JSON, or the text of a one-text message).
    pub content: StoredText,
    /// `token_estimate`.
    pub token_estimate: i64,
    /// `archived`.
    pub archived: bool,
    /// `deleted`.
    pub deleted: bool,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// The live (not deleted) messages of batch `batch`, in sequence order.
pub async fn live_of_batch(
    conn: &mut SqliteConnection,
    batch: i64,
) -> sqlx::Result<Vec<MessageRow>> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT hex(m.id) AS "id!: String", b.agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content AS "content!: StoredText", m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM messages m JOIN batches b ON b.id = m.batch_id WHERE m.batch_id = $1 AND NOT m.deleted ORDER BY m.sequence_num"#,
        batch
    )
    .fetch_all(conn)
    .await
}

/// The message that opened batch `batch` (sequence 0); [`sqlx::Error::RowNotFound`] when there
/// is none.
pub async fn trigger_of_batch(conn: &mut SqliteConnection, batch: i64) -> sqlx::Result<MessageRow> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT hex(m.id) AS "id!: String", b.agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content AS "content!: StoredText", m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM messages m JOIN batches b ON b.id = m.batch_id WHERE m.batch_id = $1 AND m.sequence_num = 0"#,
        batch
    )
    .fetch_one(conn)
    .await
}

/// `agent`'s live messages after position `after`, in position order, at most `limit`; archived
/// ones only when `include_archived`.
pub async fn page_after(
    conn: &mut SqliteConnection,
    agent: &str,
    after: i64,
    limit: i64,
    include_archived: bool,
) -> sqlx::Result<Vec<MessageRow>> {
    if include_archived {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT hex(m.id) AS "id!: String", a.id AS agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content AS "content!: StoredText", m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position > $2 AND NOT m.deleted ORDER BY m.position LIMIT $3 + 0"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    } else {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT hex(m.id) AS "id!: String", a.id AS agent_id, m.position, m.batch_id, m.sequence_num, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END AS "batch_type!: String", CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END AS "role!: String", m.content AS "content!: StoredText", m.token_estimate, m.archived AS "archived: bool", m.deleted AS "deleted: bool", m.created_at FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position > $2 AND NOT m.deleted AND NOT m.archived ORDER BY m.position LIMIT $3 + 0"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    }
}

/// How many of `agent`'s messages are live (neither archived nor deleted), counted from the
/// agent's `live_from` (every message below it is in an archived batch, migration 0027).
pub async fn count_live(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND m.position >= a.live_from AND NOT m.archived AND NOT m.deleted"#,
        agent
    )
    .fetch_one(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the SQL gives back are the codes' names, in order.
    #[test]
    fn codes_and_names_agree() {
        for (names, sql, column) in [
            (&ROLES, ROLE_NAME, "m.role"),
            (&BATCH_TYPES, BATCH_TYPE_NAME, "m.batch_type"),
        ] {
            let cases: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("WHEN {i} THEN '{n}'"))
                .collect();
            assert_eq!(sql, format!("CASE {column} {} END", cases.join(" ")));
            for (i, n) in names.iter().enumerate() {
                assert_eq!(code(names.as_slice(), n), Some(i as i64));
            }
        }
        assert_eq!(code(&ROLES, "robot"), None);
    }

    /// Prose is stored compressed and reads back; short or incompressible text is stored as it
    /// is; a value that is not a whole frame of UTF-8 text is an error. (Frames carry no
    /// checksum: like a TEXT value, a flipped bit inside one is SQLite's page integrity to guard.)
    #[test]
    fn content_compresses_when_it_pays() {
        let prose = "The heron stood in the shallows of the river all morning, waiting for \
                     the fish to come back; the otters on the far bank watched it, and the \
                     kestrel above them watched everything. By noon the river had risen and \
                     the heron moved to the reeds, where the water was still and clear.";
        let ContentToStore::Compressed(bytes) = content_to_store(prose, COMPRESS_FROM) else {
            panic!("prose was not compressed");
        };
        assert!(
            bytes.len() + prose.len() / 16 <= prose.len(),
            "{}",
            bytes.len()
        );
        assert_eq!(decompress(&bytes).unwrap(), prose);
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_frame(&bytes).map(u32::from),
            Some(ENGLISH_1_ID),
            "compressed with the built-in dictionary"
        );
        let hex_text: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(text_from_hex(&hex_text).unwrap(), prose);

        let short = "a heron flew by";
        assert_eq!(content_to_store(short, 0), ContentToStore::Text(short));
        // A writer's threshold above the text's length keeps it text.
        assert_eq!(content_to_store(prose, 1024), ContentToStore::Text(prose));
        // Text of no repetition at all (every byte distinct) does not shrink.
        let distinct: String = (0x20u8..0x7f).map(char::from).collect();
        assert_eq!(
            content_to_store(&distinct, COMPRESS_FROM),
            ContentToStore::Text(&distinct)
        );
        // Exactly at the threshold it is tried.
        let at = "ab".repeat(COMPRESS_FROM / 2);
        assert!(matches!(
            content_to_store(&at, COMPRESS_FROM),
            ContentToStore::Compressed(_)
        ));

        assert!(matches!(
            decompress(b"not zstd"),
            Err(ContentError::NotAFrame)
        ));
        assert!(matches!(
            decompress(&bytes[..4]),
            Err(ContentError::NotAFrame)
        ));
        assert!(matches!(
            decompress(&bytes[..bytes.len() - 3]),
            Err(ContentError::Corrupt(_))
        ));
        assert!(matches!(text_from_hex("zz"), Err(ContentError::NotHex(_))));
        let not_utf8 = zstd::bulk::compress(&[0xff, 0xfe, 0xfd], 1).unwrap();
        assert!(matches!(
            decompress(&not_utf8),
            Err(ContentError::NotText(_))
        ));
    }

    /// The built-in dictionary is the file shipped with the first build that wrote frames with
    /// it, byte for byte: changing it would make every such frame unreadable.
    #[test]
    fn built_in_dictionary_never_changes() {
        let fnv1a = ENGLISH_1.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!((ENGLISH_1.len(), fnv1a), (4_096, 0x2010_243f_8226_90ca));
        assert_eq!(
            zstd::zstd_safe::get_dict_id_from_dict(ENGLISH_1).map(u32::from),
            Some(ENGLISH_1_ID)
        );
        // It pays on English: smaller than the same prose compressed alone.
        let prose = "We stopped at the old mill on the way back, because the children wanted to \
                     see the water wheel turning, and the miller showed them how the grain was \
                     ground between the stones before it went to the baker in the village.";
        let ContentToStore::Compressed(with) = content_to_store(prose, COMPRESS_FROM) else {
            panic!("prose was not compressed");
        };
        let alone = zstd::bulk::compress(prose.as_bytes(), LEVEL).unwrap();
        assert!(
            with.len() < alone.len(),
            "{} vs {}",
            with.len(),
            alone.len()
        );
    }

    /// Frames that name no dictionary (every compressed row written before migration 0032)
    /// read back, before and after frames that name the built-in one on the same thread.
    #[test]
    fn frames_without_a_dictionary_read_back() {
        let texts = [
            "The heron stood in the shallows of the river all morning, waiting for the fish to \
             come back; the otters on the far bank watched it all morning, waiting too."
                .to_owned(),
            "abcdabcdabcdabcd-efgh-efgh-efgh-efgh aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".repeat(4),
            (0..200)
                .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
                .collect(),
        ];
        for text in &texts {
            let plain = zstd::bulk::compress(text.as_bytes(), LEVEL).unwrap();
            assert_eq!(zstd::zstd_safe::get_dict_id_from_frame(&plain), None);
            assert_eq!(&decompress(&plain).unwrap(), text);
            // Read after and before a frame with the dictionary on the same thread.
            let ContentToStore::Compressed(with) = content_to_store(text, COMPRESS_FROM) else {
                panic!("not compressed: {text}");
            };
            assert_eq!(&decompress(&with).unwrap(), text);
            assert_eq!(&decompress(&plain).unwrap(), text);
        }
    }

    /// A frame naming a dictionary this build does not have is refused by its id, never read
    /// with another dictionary.
    #[test]
    fn frames_naming_another_dictionary_are_refused() {
        let samples: Vec<Vec<u8>> = (0..400)
            .map(|i| {
                format!(
                    "order {i} of crate {} shipped to dock {} on day {} with {} boxes of tea",
                    i * 7 % 13,
                    i % 5,
                    i % 31,
                    i * 3 % 17
                )
                .into_bytes()
            })
            .collect();
        let other = zstd::dict::from_samples(&samples, 4096).unwrap();
        let id = zstd::zstd_safe::get_dict_id_from_dict(&other)
            .map(u32::from)
            .unwrap();
        assert_ne!(id, ENGLISH_1_ID);
        let text = "order 12 of crate 6 shipped to dock 2 on day 12 with 2 boxes of tea, and \
                    order 13 of crate 0 shipped to dock 3 on day 13 with 5 boxes of tea";
        let frame = zstd::bulk::Compressor::with_dictionary(LEVEL, &other)
            .unwrap()
            .compress(text.as_bytes())
            .unwrap();
        assert!(matches!(
            decompress(&frame),
            Err(ContentError::UnknownDictionary(named)) if named == id
        ));
    }

    proptest::proptest! {
        /// Whatever the text (any characters, repeated or not, any length around the
        /// thresholds), what is stored for it reads back as it, from the bytes and from their
        /// hex; compressed only when long enough and at least a sixteenth smaller.
        #[test]
        fn stored_content_reads_back(
            part in "\\PC{0,80}",
            times in 1usize..40,
            from in proptest::prop_oneof![proptest::strategy::Just(COMPRESS_FROM), 0usize..2048],
        ) {
            let text = part.repeat(times);
            match content_to_store(&text, from) {
                ContentToStore::Text(t) => proptest::prop_assert_eq!(t, text.as_str()),
                ContentToStore::Compressed(bytes) => {
                    proptest::prop_assert!(text.len() >= from.max(COMPRESS_FROM));
                    proptest::prop_assert!(bytes.len() + text.len() / 16 <= text.len());
                    proptest::prop_assert_eq!(decompress(&bytes).unwrap(), text.clone());
                    let hex_text: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
                    proptest::prop_assert_eq!(text_from_hex(&hex_text).unwrap(), text.clone());
                }
            }
        }
    }

    /// The checked statements of this module spell the names as the constants do.
    #[test]
    fn statements_use_the_names() {
        let source = include_str!("messages.rs");
        // Every row-returning statement here reads a whole message; the constants appear once
        // more, where they are defined.
        let statements = source.matches(concat!("query_as", "!(")).count();
        assert_eq!(statements, 4);
        assert_eq!(source.matches(ROLE_NAME).count(), statements + 1);
        let id_hex = format!("SELECT {ID_HEX} AS");
        assert_eq!(source.matches(&id_hex).count(), statements);
        assert_eq!(source.matches(BATCH_TYPE_NAME).count(), statements + 1);
    }
}
