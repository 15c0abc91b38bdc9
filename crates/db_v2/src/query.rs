//! Query handling for full-text search: a natural-language question loses its function words
//! ("what did the ... do") before it reaches the full-text index, so it is ranked by the words
//! that carry its meaning instead of drowning in words every passage shares.
//!
//! [`has_identifier`] tells hybrid search that a query holds a code ("ZX-4471", "v1.2"), which
//! full text matches exactly and vectors cannot tell from its near twins. [`term_coverage`] tells
//! it how much of a question a full-text hit says in the question's own words: a question asked
//! in the words of what it looks for is one full text answers well, a paraphrase is not.
//!
//! It must never return an empty query for a non-empty one: a question made only of function
//! words is searched as given (the user may mean them; the index itself drops its 33
//! commonest, "the", "of", "and" and the like, as Lucene's English analyzer does, so those
//! alone find nothing in full text and the vector half answers).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// English function words and question words dropped from full-text queries (lower case).
/// Sorted, so membership is a binary search.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "during", "each", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "my",
    "now", "of", "on", "or", "our", "ours", "she", "should", "so", "some", "such", "than", "that",
    "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to",
    "too", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "whose", "why", "will", "with", "would", "you", "your", "yours",
];

/// Whether `word` (any case) is a function word.
pub fn is_stop_word(word: &str) -> bool {
    let lower = word.to_lowercase();
    STOP_WORDS.binary_search(&lower.as_str()).is_ok()
}

/// The content words of `query`, space-separated, in their order, each as written (inner
/// punctuation kept, so "ZX-4471" stays one term for analyzers that keep compounds) without
/// surrounding punctuation; a possessive `'s` is dropped (`Ana's` is `Ana`). When nothing but
/// function words remain, the query is returned unchanged.
pub fn content_words(query: &str) -> String {
    let words: Vec<&str> = query
        .split_whitespace()
        .map(|w| {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric());
            w.strip_suffix("'s")
                .or_else(|| w.strip_suffix("\u{2019}s"))
                .unwrap_or(w)
        })
        .filter(|w| !w.is_empty() && !is_stop_word(w))
        .collect();
    if words.is_empty() {
        query.to_owned()
    } else {
        words.join(" ")
    }
}

/// Whether `query` holds an identifier: a word with a digit and a letter ("ZX-4471", "v2",
/// "3b"), or digits joined by `-`, `_`, `/` or `.` ("4471-2", "1.2.3"). Plain numbers ("2023",
/// "12") are not identifiers.
pub fn has_identifier(query: &str) -> bool {
    query.split_whitespace().any(|word| {
        let w = word.trim_matches(|c: char| !c.is_alphanumeric());
        let digit = w.chars().any(|c| c.is_ascii_digit());
        let letter = w.chars().any(char::is_alphabetic);
        let joined = w.chars().any(|c| matches!(c, '-' | '_' | '/' | '.'));
        digit && (letter || joined)
    })
}

/// The share (0..=1) of `query`'s content words ([`content_words`], lower case) that `text`
/// contains, a word counting as contained when `text` has it or a word of the same stem by a
/// light rule (a shared prefix of all but the last two letters of the shorter, at least four
/// letters: "painted"/"painting", "group"/"groups"). 0 when the query has no content words.
pub fn term_coverage(query: &str, text: &str) -> f32 {
    let (found, wanted) = words_found(query, text);
    if wanted == 0 {
        return 0.0;
    }
    found as f32 / wanted as f32
}

/// How many of `query`'s distinct content words `text` contains, and how many there are: the
/// counts behind [`term_coverage`], by its rule.
pub fn words_found(query: &str, text: &str) -> (usize, usize) {
    let content = content_words(query);
    let mut wanted: Vec<Cow<'_, str>> = words(&content).filter(|w| !is_stop_word(w)).collect();
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return (0, 0);
    }
    // Each distinct word of the text once (a long passage repeats most of its words), and the
    // words of four letters or more by their first four: a shared stem needs those, so a word is
    // compared only with the few that have them.
    let have: HashSet<Cow<'_, str>> = words(text).collect();
    let mut by_start: HashMap<&str, Vec<&str>> = HashMap::new();
    for h in &have {
        if let Some((i, _)) = h.char_indices().nth(4) {
            by_start.entry(&h[..i]).or_default().push(h);
        } else if h.chars().count() == 4 {
            by_start.entry(h).or_default().push(h);
        }
    }
    let start = |w: &str| -> Option<usize> {
        match w.char_indices().nth(4) {
            Some((i, _)) => Some(i),
            None => (w.chars().count() == 4).then_some(w.len()),
        }
    };
    let found = wanted
        .iter()
        .filter(|w| {
            have.contains(*w)
                || start(w).is_some_and(|i| {
                    by_start
                        .get(&w[..i])
                        .is_some_and(|hs| hs.iter().any(|h| same_stem(w, h)))
                })
        })
        .count();
    (found, wanted.len())
}

/// The lower-cased alphanumeric words of `s` (borrowed when already lower case).
fn words(s: &str) -> impl Iterator<Item = Cow<'_, str>> + '_ {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            if w.chars().any(char::is_uppercase) {
                Cow::Owned(w.to_lowercase())
            } else {
                Cow::Borrowed(w)
            }
        })
}

/// Whether two lower-case words share a stem by [`term_coverage`]'s rule: a common prefix of all
/// but the last two letters of the shorter, at least four letters. Allocates nothing.
fn same_stem(a: &str, b: &str) -> bool {
    let shorter = a.chars().count().min(b.chars().count());
    if shorter < 4 {
        return false;
    }
    let prefix = shorter.saturating_sub(2).max(4);
    a.chars().take(prefix).eq(b.chars().take(prefix))
}

#[cfg(test)]
mod tests {
    //! Unit and property tests of query handling.

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_list_is_sorted_and_lower_case() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(STOP_WORDS.iter().all(|w| w.to_lowercase() == *w));
    }

    #[test]
    fn questions_keep_their_content_words() {
        assert_eq!(
            content_words("What does Ana's sister bring when she visits?"),
            "Ana sister bring visits"
        );
        assert_eq!(content_words("Who is THE pilot?"), "pilot");
        assert_eq!(content_words("cello"), "cello");
        assert_eq!(content_words("what is ZX-4471?"), "ZX-4471");
    }

    #[test]
    fn coverage_counts_the_question_words_a_passage_says() {
        let q = "When did Caroline go to the LGBTQ support group?";
        // caroline, go, lgbtq, support, group: "go" is not said ("went" is another word).
        let answer = "Caroline: I went to a LGBTQ support group yesterday";
        assert!((term_coverage(q, answer) - 0.8).abs() < 1e-6);
        // Stems: "groups" and "supportive" count, a two-letter prefix does not.
        assert!((term_coverage("support groups", "a supportive group") - 1.0).abs() < 1e-6);
        assert_eq!(term_coverage("paint", "pa"), 0.0);
        // A paraphrase says little of the question in its words.
        let q = "Who pays Ana's salary these days, and for what role?";
        assert!(term_coverage(q, "Ana: I start as a pilot at Northwind") <= 0.25);
        // Only function words: nothing to cover.
        assert_eq!(term_coverage("what is it", "what is it"), 0.0);
        assert_eq!(term_coverage("", "anything"), 0.0);
        // The counts behind it: distinct content words, each once however often said.
        assert_eq!(
            words_found(q, "Ana: I start as a pilot at Northwind"),
            (1, 5)
        );
        assert_eq!(words_found("group group support", "groups, groups"), (1, 2));
        assert_eq!(words_found("what is it", "what is it"), (0, 0));
    }

    #[test]
    fn identifiers_are_told_from_words_and_numbers() {
        for q in [
            "ZX-4471",
            "ticket zx-4471?",
            "version v2",
            "release 1.2.3",
            "(3b)",
        ] {
            assert!(has_identifier(q), "{q}");
        }
        for q in [
            "what happened in 2023",
            "12 apples",
            "a cat in the sun",
            "-",
            "",
        ] {
            assert!(!has_identifier(q), "{q}");
        }
    }

    #[test]
    fn only_function_words_are_kept_as_given() {
        assert_eq!(content_words("what is it"), "what is it");
        assert_eq!(content_words("?!"), "?!");
    }

    proptest! {
        /// Never empty for a non-empty query, and never a function word left when a content
        /// word exists.
        #[test]
        fn never_empty_and_no_function_word_left(q in "[a-zA-Z' ?]{1,60}") {
            let out = content_words(&q);
            prop_assert!(!out.is_empty());
            if out != q {
                prop_assert!(out.split(' ').all(|w| !w.is_empty() && !is_stop_word(w)));
            }
        }

        /// Coverage is a share, and a text containing the query covers all of its content
        /// words.
        #[test]
        fn coverage_is_a_share_and_the_query_covers_itself(
            q in "[a-zA-Z' ?]{1,60}",
            t in "[a-zA-Z' ?]{0,60}",
        ) {
            let c = term_coverage(&q, &t);
            prop_assert!((0.0..=1.0).contains(&c));
            let own = term_coverage(&q, &q);
            prop_assert!(own == 0.0 || (own - 1.0).abs() < 1e-6);
        }
    }
}
