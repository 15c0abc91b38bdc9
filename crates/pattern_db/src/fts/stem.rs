//! The full-text index's English analyzer: what tantivy's `en_stem` does (its simple
//! tokenizer, tokens over 40 bytes dropped, lower case, the Snowball English stemmer), with each
//! word's stem remembered, so a word seen before is not stemmed again. Stemming was a quarter of
//! indexing; conversation text repeats its words.
//!
//! It must produce exactly the tokens `en_stem` produces (an index written by one is searched
//! with the other); a test compares them.

use rustc_hash::FxHashMap;

use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer, Token, TokenFilter, TokenStream,
    Tokenizer,
};

/// Words remembered per analyzer (each indexing thread has its own); the memory is forgotten
/// when full, so a stream of distinct words cannot grow it without bound.
const REMEMBERED: usize = 50_000;

/// The analyzer registered as the index's `en_stem`.
pub(super) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(RememberingStemmer)
        .build()
}

/// The English stemmer as a token filter that remembers stems.
#[derive(Clone, Copy)]
struct RememberingStemmer;

impl TokenFilter for RememberingStemmer {
    type Tokenizer<T: Tokenizer> = StemFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> StemFilter<T> {
        StemFilter {
            inner,
            stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
            stems: FxHashMap::default(),
        }
    }
}

#[derive(Clone)]
pub(super) struct StemFilter<T> {
    inner: T,
    stemmer: frostem::Stemmer,
    /// Lower-cased word -> its stem.
    stems: FxHashMap<String, String>,
}

impl<T: Tokenizer> Tokenizer for StemFilter<T> {
    type TokenStream<'a> = StemStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        StemStream {
            tail: self.inner.token_stream(text),
            stemmer: self.stemmer,
            stems: &mut self.stems,
        }
    }
}

pub(super) struct StemStream<'a, T> {
    tail: T,
    stemmer: frostem::Stemmer,
    stems: &'a mut FxHashMap<String, String>,
}

impl<T: TokenStream> TokenStream for StemStream<'_, T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token_mut();
        if let Some(stem) = self.stems.get(token.text.as_str()) {
            token.text.clear();
            token.text.push_str(stem);
            return true;
        }
        let word = std::mem::take(&mut token.text);
        let stem = self.stemmer.stem(&word).into_owned();
        token.text.push_str(&stem);
        if self.stems.len() >= REMEMBERED {
            self.stems.clear();
        }
        self.stems.insert(word, stem);
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
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

    fn same_as_en_stem(texts: &[&str]) {
        let mut theirs = TokenizerManager::default()
            .get("en_stem")
            .expect("tantivy registers en_stem");
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
    fn the_tokens_are_en_stem_s() {
        same_as_en_stem(&[
            "Running runners RAN quickly; the Quickest runs generously",
            "caresses ponies ties caress cats Organization organizations",
            "Ünïcödé Straße façade naïve ÉCOLE écoles",
            "a word longer than forty bytes: pneumonoultramicroscopicsilicovolcanoconiosis and more",
            "",
            "   ...   ",
            "x1 2024-04-01 don't isn't user's O'Brien",
        ]);
    }

    proptest! {
        #[test]
        fn any_text_gives_en_stem_s_tokens(texts in proptest::collection::vec("\\PC{0,80}", 1..6)) {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            same_as_en_stem(&refs);
        }
    }
}
