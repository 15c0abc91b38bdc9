//! English-like text for benches and tests (feature `testkit`): the workload issue 17 measures
//! (387-byte messages over a fixed vocabulary of 207 words, skewed so common words are common,
//! function words first) and the two-word queries searched over it, deterministic from a seed,
//! so every bench that measures "messages like these" reads the same text. It must never be
//! used to produce anything stored outside a test.

/// The vocabulary: about 140 English function and common words, then middling content words.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on", "be",
    "at", "by", "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which",
    "one", "you", "were", "all", "we", "her", "she", "there", "would", "their", "will", "when",
    "who", "him", "been", "has", "more", "if", "no", "out", "so", "said", "what", "up", "its",
    "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time",
    "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our",
    "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must",
    "through", "back", "years", "where", "much", "your", "way", "well", "down", "should",
    "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very",
    "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between",
    "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last",
    "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came",
    "right", "used", "take", "three", "build", "server", "memory", "garden", "letter", "river",
    "engine", "window", "market", "doctor", "history", "question", "answer", "morning", "evening",
    "project", "schedule", "meeting", "budget", "report", "picture", "kitchen", "station",
    "village", "problem", "message", "weather", "holiday", "library", "teacher", "student",
    "account", "pattern", "database", "network", "program", "journey", "mountain", "island",
    "forest", "winter", "summer", "autumn", "spring", "coffee", "bread", "music", "family",
    "friend", "office", "company", "machine", "language", "science", "harbour", "bridge", "castle",
    "painting", "recipe", "medicine", "contract", "invoice",
];

/// Where the content words (the queries' words) start in [`WORDS`].
const CONTENT_WORDS: usize = 140;

/// A small deterministic generator (splitmix64).
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One word, skewed towards the front of the list (common words are common).
fn word(state: &mut u64) -> &'static str {
    let len = WORDS.len() as u64;
    let a = (next(state) % len) as usize;
    let b = (next(state) % len) as usize;
    WORDS[a.min(b)]
}

/// Exactly `bytes` bytes (at least 2) of sentences of [`WORDS`], the same for the same `seed`.
pub fn english(seed: u64, bytes: usize) -> String {
    let bytes = bytes.max(2);
    let mut state = seed;
    let mut out = String::with_capacity(bytes + 16);
    let mut sentence = 0;
    while out.len() < bytes {
        let w = word(&mut state);
        if sentence == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                out.extend(f.to_uppercase());
                out.push_str(c.as_str());
            }
        } else {
            out.push(' ');
            out.push_str(w);
        }
        sentence += 1;
        if sentence > 8 && next(&mut state).is_multiple_of(4) {
            out.push_str(". ");
            sentence = 0;
        }
    }
    out.truncate(bytes - 1);
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    while out.len() < bytes - 1 {
        out.push('s');
    }
    out.push('.');
    out
}

/// The `i`th two-word query over the content words (cycled).
pub fn english_query(i: usize) -> String {
    let mid = &WORDS[CONTENT_WORDS..];
    format!("{} {}", mid[i % mid.len()], mid[(i * 7 + 3) % mid.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_has_the_length_asked_and_repeats_by_seed() {
        for bytes in [2, 50, 387, 1000] {
            assert_eq!(english(3, bytes).len(), bytes);
        }
        assert_eq!(english(9, 387), english(9, 387));
        assert_ne!(english(9, 387), english(10, 387));
        // The goals bench's queries since stop 27 (its figures stay comparable).
        assert_eq!(english_query(0), "came take");
        assert_eq!(english_query(1), "right river");
    }
}
