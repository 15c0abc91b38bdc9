//! Exact token counts for OpenAI models: [`TiktokenCounter`] runs the model's tiktoken BPE
//! encoding (`o200k_base` for gpt-4o and later, `cl100k_base` for gpt-4 and gpt-3.5, ...).
//!
//! The encodings are compiled into the `tiktoken-rs` crate (`include_str!` of its bundled
//! `.tiktoken` files); loading one parses it once per process and keeps it in a static. This
//! module must never fetch anything from the network, never panic (not even when the
//! tokenizer's regex gives up on a pathological input), and never undercount: when the encoding
//! cannot count a text it answers with one token per byte, an upper bound for a byte-level BPE.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::{Tokenizer as Encoding, get_tokenizer};

use super::TokenCounter;
use crate::{Error, Result};

/// A loaded encoding, or why it failed to load (the data is compiled in, so a failure would
/// repeat: it is cached too).
type Cache = OnceLock<std::result::Result<CoreBPE, String>>;

/// Counts tokens with an OpenAI tiktoken encoding.
///
/// Text is encoded as ordinary text ([`CoreBPE::encode_ordinary`]): a special-token string such
/// as `<|endoftext|>` inside a message counts as the several tokens of its characters. Message
/// text is not supposed to become control tokens, and this count is never fewer than the single
/// special token would be, so it errs, if at all, on the high side.
///
/// Cheap to copy: the encoding itself is loaded once per process and shared.
#[derive(Clone, Copy)]
pub struct TiktokenCounter {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl TiktokenCounter {
    /// The encoding an OpenAI model uses, looked up by model name (exact names such as `gpt-4o`,
    /// `gpt-4`, `o3`, dated and fine-tuned variants such as `gpt-4o-2024-05-13` or
    /// `ft:gpt-4o:org::id`).
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] when tiktoken knows no encoding for the model (then use an estimate).
    pub fn for_model(model: &str) -> Result<Self> {
        let encoding = get_tokenizer(model).ok_or_else(|| Error::Tokenizer {
            what: format!("for model `{model}`"),
            reason: "tiktoken knows no encoding for this model name".to_owned(),
        })?;
        Self::for_encoding(encoding)
    }

    /// The `o200k_base` encoding (gpt-4o, gpt-4.1, gpt-5, o1, o3, o4-mini).
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] if the bundled encoding data cannot be parsed (a broken build).
    pub fn o200k() -> Result<Self> {
        Self::for_encoding(Encoding::O200kBase)
    }

    /// The `cl100k_base` encoding (gpt-4, gpt-3.5-turbo, text-embedding-3).
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] if the bundled encoding data cannot be parsed (a broken build).
    pub fn cl100k() -> Result<Self> {
        Self::for_encoding(Encoding::Cl100kBase)
    }

    /// The name of the encoding, e.g. `o200k_base`.
    pub fn encoding_name(&self) -> &'static str {
        encoding_name(self.encoding)
    }

    fn for_encoding(encoding: Encoding) -> Result<Self> {
        Ok(Self {
            encoding,
            bpe: load(encoding)?,
        })
    }
}

impl fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The encoding holds a vocabulary of 100k-200k entries: show its name only.
        f.debug_struct("TiktokenCounter")
            .field("encoding", &self.encoding_name())
            .finish()
    }
}

impl TokenCounter for TiktokenCounter {
    fn count_text(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        // tiktoken-rs unwraps the result of its regex, which can fail (backtracking or stack
        // limits) on pathological input; a count must not take the process down with it.
        match catch_unwind(AssertUnwindSafe(|| self.bpe.encode_ordinary(text).len())) {
            Ok(count) => count,
            Err(_) => {
                tracing::warn!(
                    encoding = self.encoding_name(),
                    bytes = text.len(),
                    "tiktoken failed to encode a text; counting one token per byte instead"
                );
                text.len()
            }
        }
    }
}

fn encoding_name(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::O200kHarmony => "o200k_harmony",
        Encoding::O200kBase => "o200k_base",
        Encoding::Cl100kBase => "cl100k_base",
        Encoding::P50kBase => "p50k_base",
        Encoding::R50kBase => "r50k_base",
        Encoding::P50kEdit => "p50k_edit",
        Encoding::Gpt2 => "gpt2",
    }
}

/// The encoding, parsed on first use and kept for the life of the process.
fn load(encoding: Encoding) -> Result<&'static CoreBPE> {
    static O200K_HARMONY: Cache = OnceLock::new();
    static O200K_BASE: Cache = OnceLock::new();
    static CL100K_BASE: Cache = OnceLock::new();
    static P50K_BASE: Cache = OnceLock::new();
    static P50K_EDIT: Cache = OnceLock::new();
    static R50K_BASE: Cache = OnceLock::new();

    type Loader = fn() -> std::result::Result<CoreBPE, String>;
    let (cache, loader): (&'static Cache, Loader) = match encoding {
        Encoding::O200kHarmony => (&O200K_HARMONY, || {
            tiktoken_rs::o200k_harmony().map_err(|e| e.to_string())
        }),
        Encoding::O200kBase => (&O200K_BASE, || {
            tiktoken_rs::o200k_base().map_err(|e| e.to_string())
        }),
        Encoding::Cl100kBase => (&CL100K_BASE, || {
            tiktoken_rs::cl100k_base().map_err(|e| e.to_string())
        }),
        Encoding::P50kBase => (&P50K_BASE, || {
            tiktoken_rs::p50k_base().map_err(|e| e.to_string())
        }),
        Encoding::P50kEdit => (&P50K_EDIT, || {
            tiktoken_rs::p50k_edit().map_err(|e| e.to_string())
        }),
        // gpt2 is r50k_base under another name.
        Encoding::R50kBase | Encoding::Gpt2 => (&R50K_BASE, || {
            tiktoken_rs::r50k_base().map_err(|e| e.to_string())
        }),
    };
    cache
        .get_or_init(loader)
        .as_ref()
        .map_err(|reason| Error::Tokenizer {
            what: format!("tiktoken encoding {}", encoding_name(encoding)),
            reason: reason.clone(),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use pattern_db::{ContentBlock, Role, SnowflakeId};

    use super::*;
    use crate::ContextMessage;
    use crate::tokens::MESSAGE_OVERHEAD;

    fn both() -> Result<[TiktokenCounter; 2]> {
        Ok([TiktokenCounter::cl100k()?, TiktokenCounter::o200k()?])
    }

    /// `(text, cl100k_base count, o200k_base count)`, as tiktoken counts them.
    const KNOWN: &[(&str, usize, usize)] = &[
        ("hello world", 2, 2),
        ("Hello, world!", 4, 4),
        ("tiktoken is great!", 6, 6),
        ("fn main() { println!(\"hi\"); }", 9, 9),
        // Unicode: o200k's larger vocabulary covers more non-English text.
        ("héllo wörld", 6, 5),
        ("Привет, мир", 6, 4),
        ("日本語のテキスト", 8, 6),
        ("🦀🦀🦀", 9, 9),
        // A special token's text inside a message is ordinary text, not one control token.
        ("<|endoftext|>", 7, 7),
    ];

    #[test]
    fn counts_known_strings_in_both_encodings() -> Result<()> {
        let [cl, o2] = both()?;
        assert_eq!(cl.encoding_name(), "cl100k_base");
        assert_eq!(o2.encoding_name(), "o200k_base");
        for &(text, in_cl, in_o2) in KNOWN {
            assert_eq!(cl.count_text(text), in_cl, "cl100k_base: {text:?}");
            assert_eq!(o2.count_text(text), in_o2, "o200k_base: {text:?}");
        }
        assert_eq!(cl.count_text(""), 0);
        assert_eq!(o2.count_text(""), 0);
        Ok(())
    }

    #[test]
    fn counts_a_long_text() -> Result<()> {
        // Ten tokens a sentence (the space before "The" joins it), and the final space.
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(1_000);
        for c in both()? {
            assert_eq!(c.count_text(&long), 10_001, "{c:?}");
        }
        Ok(())
    }

    #[test]
    fn model_names_map_to_their_encodings() -> Result<()> {
        for (model, encoding) in [
            ("gpt-4o", "o200k_base"),
            ("gpt-4o-2024-05-13", "o200k_base"),
            ("gpt-4.1-mini", "o200k_base"),
            ("o3", "o200k_base"),
            ("gpt-4", "cl100k_base"),
            ("gpt-3.5-turbo", "cl100k_base"),
        ] {
            assert_eq!(TiktokenCounter::for_model(model)?.encoding_name(), encoding);
        }
        assert_eq!(
            TiktokenCounter::for_model("gpt-4o")?.count_text("hello world"),
            2
        );
        Ok(())
    }

    #[test]
    fn an_unknown_model_is_a_typed_error() {
        match TiktokenCounter::for_model("no-such-model") {
            Err(Error::Tokenizer { what, reason }) => {
                assert!(what.contains("no-such-model"), "{what}");
                assert!(!reason.is_empty());
            }
            other => panic!("expected Error::Tokenizer, got {other:?}"),
        }
    }

    #[test]
    fn an_encoding_is_loaded_once_and_shared() -> Result<()> {
        let a = TiktokenCounter::for_model("gpt-4o")?;
        let b = TiktokenCounter::o200k()?;
        assert!(std::ptr::eq(a.bpe, b.bpe));
        fn shareable<T: Send + Sync + fmt::Debug + 'static>(_: &T) {}
        shareable(&a);
        // Debug names the encoding and does not dump a 200k-entry vocabulary.
        assert_eq!(
            format!("{a:?}"),
            "TiktokenCounter { encoding: \"o200k_base\" }"
        );
        Ok(())
    }

    #[test]
    fn a_text_the_regex_gives_up_on_is_overcounted_not_a_panic() -> Result<()> {
        // About a million spaces make tiktoken-rs's regex overflow its stack, and it unwraps that
        // error; the counter catches it and counts one token per byte. (Should a later version
        // cope, the real count, about 7,800, is within the same bounds.)
        let text = format!("{}x", " ".repeat(1_000_000));
        for c in both()? {
            let n = c.count_text(&text);
            assert!((7_800..=text.len()).contains(&n), "{c:?}: {n}");
        }
        Ok(())
    }

    #[test]
    fn messages_are_counted_through_the_trait() -> Result<()> {
        let c: &dyn TokenCounter = &TiktokenCounter::cl100k()?;
        let m = ContextMessage {
            batch_id: SnowflakeId(1),
            position: SnowflakeId(1),
            role: Role::User,
            content: vec![ContentBlock::text("hello world")],
        };
        assert_eq!(c.count_message(&m), MESSAGE_OVERHEAD + 2);
        Ok(())
    }
}
