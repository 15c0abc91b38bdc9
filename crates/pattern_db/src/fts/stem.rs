//! The full-text index's English analyzer: what tantivy's `en_stem` does (its simple
//! tokenizer, tokens of 40 bytes or more dropped, lower case, the Snowball English stemmer),
//! with English stop words dropped after lower-casing as Lucene's English analyzer drops them
//! (its 33 words, tantivy's `StopWordFilter` for English), in one pass over the text, with each
//! word's stem remembered, so a word seen before is neither lower-cased nor stemmed again.
//! Tokenizing was a quarter of indexing through `en_stem`'s chain of four streams (each token
//! copied, scanned and rewritten by each); conversation text repeats its words.
//!
//! Stop words are about a quarter of English text's words, each in nearly every document: their
//! postings were the index's longest lists, cost every import a hash lookup and a posting per
//! word, and a query naming one read a list as long as the index while its weight (BM25's idf)
//! is nearly nothing (decision 0025, "Stop 52").
//!
//! It must produce exactly the tokens of that chain, offsets and positions included (a removed
//! word keeps its position, as the filter leaves it); tests compare them. Queries go through
//! the same analyzer, so a query of stop words only has no term (no full-text hit).

use rustc_hash::FxHashMap;

use tantivy::tokenizer::{TextAnalyzer, Token, TokenStream, Tokenizer};

/// Words remembered per analyzer (each indexing thread has its own); the memory is forgotten
/// when full, so a stream of distinct words cannot grow it without bound.
const REMEMBERED: usize = 50_000;

/// `en_stem` drops tokens of this many bytes or more (as written, before lower-casing).
const TOO_LONG: usize = 40;

/// The words dropped once lower-cased: Lucene's English stop words (tantivy's list for
/// `Language::English`, which tests compare with), sorted for a binary search.
const STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// Whether the lower-cased `word` is a stop word.
fn is_stop_word(word: &str) -> bool {
    // Every stop word is 1 to 5 ASCII letters.
    word.len() <= 5 && STOP_WORDS.binary_search(&word).is_ok()
}

/// The analyzer registered under the index's tokenizer name (`fts::TOKENIZER`).
pub(super) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::from(English {
        token: Token::default(),
        stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
        stems: FxHashMap::default(),
        lower: String::new(),
    })
}

/// `en_stem` and the stop words as one tokenizer that remembers stems.
#[derive(Clone)]
struct English {
    token: Token,
    stemmer: frostem::Stemmer,
    /// A word as written -> its stem, `None` for a stop word.
    stems: FxHashMap<String, Option<String>>,
    /// The word being stemmed, lower-cased.
    lower: String,
}

impl Tokenizer for English {
    type TokenStream<'a> = EnglishStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> EnglishStream<'a> {
        self.token.reset();
        EnglishStream {
            text,
            at: 0,
            english: self,
        }
    }
}

struct EnglishStream<'a> {
    text: &'a str,
    /// Where the next word is looked for (a char boundary).
    at: usize,
    english: &'a mut English,
}

impl EnglishStream<'_> {
    /// The next word: a longest run of alphanumeric characters (the simple tokenizer's), as
    /// byte offsets; ASCII is read byte by byte, anything else a char at a time.
    fn next_word(&mut self) -> Option<(usize, usize)> {
        let (text, bytes) = (self.text, self.text.as_bytes());
        let word_char_at = |i: usize| -> (bool, usize) {
            match bytes[i] {
                b if b.is_ascii() => (b.is_ascii_alphanumeric(), 1),
                _ => text[i..]
                    .chars()
                    .next()
                    .map_or((false, 1), |c| (c.is_alphanumeric(), c.len_utf8())),
            }
        };
        let mut i = self.at;
        let from = loop {
            if i >= bytes.len() {
                self.at = i;
                return None;
            }
            match word_char_at(i) {
                (true, _) => break i,
                (false, len) => i += len,
            }
        };
        let mut to = from;
        while to < bytes.len() {
            match word_char_at(to) {
                (true, len) => to += len,
                (false, _) => break,
            }
        }
        self.at = to;
        Some((from, to))
    }
}

impl TokenStream for EnglishStream<'_> {
    fn advance(&mut self) -> bool {
        loop {
            // A position per word found, kept or not (as the simple tokenizer counts them
            // before the long ones are dropped), and one for the call that finds none.
            let token = &mut self.english.token;
            token.position = token.position.wrapping_add(1);
            let Some((from, to)) = self.next_word() else {
                self.english.token.text.clear();
                return false;
            };
            if to - from >= TOO_LONG {
                continue;
            }
            let word = &self.text[from..to];
            let English {
                token,
                stemmer,
                stems,
                lower,
            } = &mut *self.english;
            token.offset_from = from;
            token.offset_to = to;
            token.text.clear();
            match stems.get(word) {
                Some(Some(stem)) => {
                    token.text.push_str(stem);
                    return true;
                }
                Some(None) => continue,
                None => {}
            }
            lower.clear();
            if word.is_ascii() {
                lower.push_str(word);
                lower.make_ascii_lowercase();
            } else {
                lower.extend(word.chars().flat_map(char::to_lowercase));
            }
            if stems.len() >= REMEMBERED {
                stems.clear();
            }
            if is_stop_word(lower) {
                stems.insert(word.to_owned(), None);
                continue;
            }
            let stem = stemmer.stem(lower).into_owned();
            token.text.push_str(&stem);
            stems.insert(word.to_owned(), Some(stem));
            return true;
        }
    }

    fn token(&self) -> &Token {
        &self.english.token
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.english.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tantivy::tokenizer::TokenizerManager;

    fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut out = Vec::new();
        let mut stream = analyzer.token_stream(text);
        while stream.advance() {
            let t = stream.token();
            out.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        out
    }

    /// tantivy's `en_stem` with its English stop word filter after lower-casing.
    fn same_as_tantivy_chain(texts: &[&str]) {
        use tantivy::tokenizer::{
            Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
        };
        let mut theirs = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(TOO_LONG))
            .filter(LowerCaser)
            .filter(StopWordFilter::new(Language::English).expect("tantivy has English stop words"))
            .filter(Stemmer::new(Language::English))
            .build();
        let mut ours = analyzer();
        // Twice through the same analyzer: the second pass reads remembered stems.
        for _ in 0..2 {
            for text in texts {
                assert_eq!(
                    tokens(&mut ours, text),
                    tokens(&mut theirs, text),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn the_tokens_are_the_chain_s() {
        // tantivy's `en_stem` is the chain without the stop words.
        let mut en_stem = TokenizerManager::default()
            .get("en_stem")
            .expect("tantivy registers en_stem");
        assert_eq!(
            tokens(&mut en_stem, "The cats RAN"),
            vec![
                ("the".into(), 0, 3, 0),
                ("cat".into(), 4, 8, 1),
                ("ran".into(), 9, 12, 2)
            ]
        );
        same_as_tantivy_chain(&[
            "The cat and THE dog; it is, as they say, a thing of theirs. There: then, these were",
            "A an AND are As at be but by for if in into is it no not of on or such that the their \
             then there these they this to was will with",
            "Running runners RAN quickly; the Quickest runs generously",
            "caresses ponies ties caress cats Organization organizations",
            "Ünïcödé Straße façade naïve ÉCOLE écoles",
            "a word longer than forty bytes: pneumonoultramicroscopicsilicovolcanoconiosis and more",
            "",
            "   ...   ",
            "x1 2024-04-01 don't isn't user's O'Brien",
            // 39 and 40 bytes as written; lower-casing İ makes a 39-byte word 40 bytes long.
            "abcdefghijabcdefghijabcdefghijabcdefghi abcdefghijabcdefghijabcdefghijabcdefghij",
            "İbcdefghijabcdefghijabcdefghijabcdefgh İSTANBUL İstanbul istanbul",
            "Σίσυφος ΣΊΣΥΦΟΣ ﬁnal ǅemal 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ٣٤٥ 東京 x²",
        ]);
    }

    #[test]
    fn stop_words_are_sorted_and_short() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(STOP_WORDS.iter().all(|w| w.len() <= 5 && w.is_ascii()));
        let mut ours = analyzer();
        assert_eq!(
            tokens(&mut ours, "the"),
            Vec::<(String, usize, usize, usize)>::new()
        );
        assert_eq!(
            tokens(&mut ours, "The Theory"),
            vec![("theori".into(), 4, 10, 1)]
        );
    }

    proptest! {
        #[test]
        fn any_text_gives_the_chain_s_tokens(texts in proptest::collection::vec("\\PC{0,80}", 1..6)) {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            same_as_tantivy_chain(&refs);
        }

        #[test]
        fn stop_words_among_words_give_the_chain_s_tokens(
            texts in proptest::collection::vec(
                "((the|The|THE|a|A|an|And|is|it|IT'S|theirs|thereby|theory|cats|İs|Tо|,|\\.| ){0,24})",
                1..6,
            )
        ) {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            same_as_tantivy_chain(&refs);
        }
    }
}
