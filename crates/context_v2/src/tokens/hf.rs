//! Exact token counts for local models: [`HfTokenizerCounter`] runs a Hugging Face
//! `tokenizer.json` (the format llama.cpp, SmolLM, Qwen and most open models ship) read from a
//! file on disk.
//!
//! The `tokenizers` crate is built without its hub and HTTP features and with the pure-Rust
//! `fancy-regex` backend: this module must never download a tokenizer (the file is installed by
//! the project's setup, or loading fails with a typed error naming the path), never panic on a
//! bad file or an odd text, and never undercount: when the tokenizer cannot encode a text it
//! answers with one token per byte (plus one for a word-start marker), above what common
//! tokenizers produce.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::TokenCounter;
use crate::{Error, Result};

/// Counts tokens with a Hugging Face tokenizer loaded from a `tokenizer.json` file.
///
/// A text is counted as the ids of `encode(text, false)`: without the special tokens (BOS, EOS,
/// CLS/SEP) the file's post-processor would add. A request carries those, and the chat
/// template's role markers, once per message or per request, not once per piece of text: the
/// framing overhead of [`TokenCounter::count_message`] stands for them.
pub struct HfTokenizerCounter {
    tokenizer: Tokenizer,
    path: PathBuf,
}

impl HfTokenizerCounter {
    /// Loads the tokenizer of a `tokenizer.json` file. Reads the file only; never downloads.
    ///
    /// # Errors
    ///
    /// [`Error::Tokenizer`] naming the path when the file is missing or unreadable, is not a
    /// valid tokenizer description, or uses a regex the pure-Rust backend cannot compile.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let tokenizer = Tokenizer::from_file(path).map_err(|e| Error::Tokenizer {
            what: format!("file {}", path.display()),
            reason: e.to_string(),
        })?;
        Ok(Self {
            tokenizer,
            path: path.to_path_buf(),
        })
    }

    /// The file the tokenizer was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The vocabulary size, including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    fn fallback(&self, text: &str, reason: &str) -> usize {
        tracing::warn!(
            path = %self.path.display(),
            bytes = text.len(),
            reason,
            "tokenizer failed to encode a text; counting one token per byte instead"
        );
        text.len() + 1
    }
}

impl fmt::Debug for HfTokenizerCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tokenizer holds its whole vocabulary: show where it came from only.
        f.debug_struct("HfTokenizerCounter")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl TokenCounter for HfTokenizerCounter {
    fn count_text(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        // `tokenizers` returns errors for what it expects to go wrong (an unknown word without
        // an unknown token, ...); a panic inside it on an input nobody foresaw must not take the
        // process down either.
        match catch_unwind(AssertUnwindSafe(|| self.tokenizer.encode(text, false))) {
            Ok(Ok(encoding)) => encoding.get_ids().len(),
            Ok(Err(e)) => self.fallback(text, &e.to_string()),
            Err(_) => self.fallback(text, "the tokenizer panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every tokenizer here is built by the test with the `tokenizers` API, saved as a real
    //! `tokenizer.json` in a temporary directory and loaded back through
    //! [`HfTokenizerCounter::from_file`]: nothing is downloaded or shipped.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::HashSet;

    use tokenizers::models::TrainerWrapper;
    use tokenizers::models::bpe::{BPE, BpeTrainer};
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    use tokenizers::processors::template::TemplateProcessing;
    use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

    use super::*;

    /// The pre-tokenizer regex of Qwen2 and Llama 3's `tokenizer.json` (look-ahead and all), which
    /// the pure-Rust regex backend must compile.
    const QWEN_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

    const CORPUS: &[&str] = &[
        "The agent keeps its memory in blocks.",
        "The agent reads the memory blocks before it answers.",
        "Tool calls travel with their results.",
        "The context builder counts tokens before it sends a request.",
    ];

    /// Saves `tokenizer` as `tokenizer.json` in a fresh temporary directory.
    fn save(tokenizer: &Tokenizer) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        tokenizer.save(&path, false).unwrap();
        (dir, path)
    }

    /// A word-level tokenizer over a tiny vocabulary, `[UNK]` for every other word (if
    /// `unk_in_vocab`), whose post-processor puts a `[BOS]` token first.
    fn word_level(unk_in_vocab: bool) -> Tokenizer {
        let mut words = vec!["[BOS]", "the", "cat", "sat", "on", "mat", ",", "!"];
        if unk_in_vocab {
            words.push("[UNK]");
        }
        let vocab = words
            .into_iter()
            .enumerate()
            .map(|(id, w)| (w.to_owned(), u32::try_from(id).unwrap()))
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token("[UNK]".to_owned())
            .build()
            .unwrap();
        let bos = TemplateProcessing::builder()
            .try_single("[BOS] $A")
            .unwrap()
            .special_tokens(vec![("[BOS]", 0)])
            .build()
            .unwrap();
        let mut tokenizer = Tokenizer::new(model);
        tokenizer.with_pre_tokenizer(Some(Whitespace {}));
        tokenizer.with_post_processor(Some(bos));
        tokenizer
    }

    /// A byte-level BPE trained here on [`CORPUS`], pre-tokenized like Qwen2.
    fn trained_byte_level_bpe() -> Tokenizer {
        let mut tokenizer = Tokenizer::new(BPE::default());
        let split = Split::new(
            SplitPattern::Regex(QWEN_SPLIT.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .unwrap();
        let byte_level = ByteLevel::default()
            .add_prefix_space(false)
            .use_regex(false);
        tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
            PreTokenizerWrapper::Split(split),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ])));
        let mut trainer: TrainerWrapper = BpeTrainer::builder()
            .show_progress(false)
            .vocab_size(400)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect::<HashSet<_>>())
            .build()
            .into();
        tokenizer.train(&mut trainer, CORPUS.iter()).unwrap();
        tokenizer
    }

    fn load(tokenizer: &Tokenizer) -> (tempfile::TempDir, HfTokenizerCounter) {
        let (dir, path) = save(tokenizer);
        let counter = HfTokenizerCounter::from_file(&path).unwrap();
        assert_eq!(counter.path(), path);
        (dir, counter)
    }

    #[test]
    fn counts_words_of_a_word_level_tokenizer_from_its_file() {
        let (_dir, c) = load(&word_level(true));
        assert_eq!(c.vocab_size(), 9);
        assert_eq!(c.count_text(""), 0);
        assert_eq!(c.count_text("the cat sat on the mat"), 6);
        // An unknown word is one `[UNK]` token.
        assert_eq!(c.count_text("the dog sat"), 3);
        // The whitespace pre-tokenizer splits punctuation from words.
        assert_eq!(c.count_text("the cat, the mat!"), 6);
    }

    #[test]
    fn special_tokens_of_the_post_processor_are_not_counted() {
        let tokenizer = word_level(true);
        let (_dir, c) = load(&tokenizer);
        // With special tokens the file's template adds `[BOS]`; the count leaves it out.
        assert_eq!(
            tokenizer.encode("the cat", true).unwrap().get_ids().len(),
            3
        );
        assert_eq!(c.count_text("the cat"), 2);
    }

    #[test]
    fn counts_with_a_byte_level_bpe_trained_here() {
        let (_dir, c) = load(&trained_byte_level_bpe());
        // Sentences of the training corpus come out in few tokens ...
        let counts: Vec<usize> = CORPUS.iter().map(|s| c.count_text(s)).collect();
        assert_eq!(counts, [8, 10, 7, 11]);
        // ... unseen words in many, and text outside the corpus's alphabet one token per byte:
        // a byte-level vocabulary can encode anything.
        assert_eq!(c.count_text("zebra quagga"), 11);
        assert_eq!(c.count_text("héllo wörld"), 12);
        assert_eq!(c.count_text("日本語"), 9);
        assert_eq!(c.count_text("🦀"), 4);
        // The Qwen2 regex (with its look-ahead) splits whitespace runs and newlines.
        assert_eq!(c.count_text("x   y\n\nz"), 8);
        let long = CORPUS.join(" ").repeat(200);
        assert_eq!(c.count_text(&long), 7_800);
    }

    #[test]
    fn an_encoding_error_counts_one_token_per_byte_instead_of_failing() {
        // `[UNK]` is named but missing from the vocabulary: unknown words cannot be encoded.
        let (_dir, c) = load(&word_level(false));
        assert_eq!(c.count_text("the cat"), 2);
        assert_eq!(c.count_text("the zebra"), "the zebra".len() + 1);
    }

    #[test]
    fn a_missing_file_is_a_typed_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-tokenizer.json");
        match HfTokenizerCounter::from_file(&path) {
            Err(Error::Tokenizer { what, reason }) => {
                assert!(what.contains("no-such-tokenizer.json"), "{what}");
                assert!(!reason.is_empty());
            }
            other => panic!("expected Error::Tokenizer, got {other:?}"),
        }
    }

    #[test]
    fn a_file_that_is_not_a_tokenizer_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        for content in ["{ not json", "{\"model\": 1}", ""] {
            std::fs::write(&path, content).unwrap();
            match HfTokenizerCounter::from_file(&path) {
                Err(Error::Tokenizer { what, .. }) => {
                    assert!(what.contains("tokenizer.json"), "{what}");
                }
                other => panic!("expected Error::Tokenizer for {content:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_counter_is_shareable_and_its_debug_is_short() {
        fn shareable<T: Send + Sync + fmt::Debug + 'static>(_: &T) {}
        let (_dir, c) = load(&word_level(true));
        shareable(&c);
        let debug = format!("{c:?}");
        assert!(
            debug.contains("tokenizer.json") && debug.contains("vocab_size: 9"),
            "{debug}"
        );
    }
}
