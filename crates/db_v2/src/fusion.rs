//! Rank fusion: merge ranked lists (full-text and vector hits) into one ranking by
//! `sum w / (k + rank)`, scores normalised so the best hit is 1.0. Hybrid search weights the lists
//! per query ([`hybrid_weights`]): full text by how much of the question its best hits say in
//! the question's own words ([`fts_weight`]: little for a paraphrase, vector leading; much for a
//! question worded like its answer, full text leading), [`IDENTIFIER_WEIGHTS`] for queries
//! holding a code; [`HYBRID_K`]. The rule was chosen on a generated tuning set and a public
//! conversational set together, never on the scored evaluation
//! (`docs/decisions/0021-ranking.md`). It must never use the lists' own scores
//! (they are not comparable across methods), never return a key twice, and never reorder ties
//! unpredictably (ties go to the key that appeared first).

use std::collections::HashMap;
use std::hash::Hash;

/// The usual RRF constant.
pub const RRF_K: f32 = 60.0;

/// Hybrid search's fusion constant `k`.
pub const HYBRID_K: f32 = 5.0;

/// Hybrid search's vector weight; full text's is [`fts_weight`] of the question's coverage.
pub const VECTOR_WEIGHT: f32 = 1.0;

/// Full text's weight when its best hits say none of the question in its words.
pub const FTS_WEIGHT_FLOOR: f32 = 0.1;

/// How much full text's weight grows with the square of the coverage.
pub const FTS_WEIGHT_SPAN: f32 = 3.0;

/// How many of full text's first hits the coverage looks at (the best of them counts).
pub const COVERAGE_HITS: usize = 5;

/// Hybrid search's weights for a query holding an identifier (`crate::has_identifier`): full
/// text leads, as vectors cannot tell "ZX-4471" from "ZX-4417".
pub const IDENTIFIER_WEIGHTS: [f32; 2] = [1.0, 0.3];

/// Full text's weight for a question whose best full-text hit says `coverage` (0..=1) of its
/// content words ([`crate::term_coverage`]): `FLOOR + SPAN * coverage^2`. A paraphrase (a name
/// and little else: 0.25) weighs about 0.3, vector leading; a question asked in the words of its
/// answer (real conversations mostly are: 0.75 and up) weighs 1.8 and more, full text leading.
pub fn fts_weight(coverage: f32) -> f32 {
    let c = if coverage.is_finite() {
        coverage.clamp(0.0, 1.0)
    } else {
        0.0
    };
    FTS_WEIGHT_FLOOR + FTS_WEIGHT_SPAN * c * c
}

/// Hybrid search's weights (full text, vector) for `query`, given the texts of full text's hits
/// best first: [`IDENTIFIER_WEIGHTS`] when the query holds a code, else [`fts_weight`] of the
/// best coverage among the first [`COVERAGE_HITS`] texts and [`VECTOR_WEIGHT`].
pub fn hybrid_weights<'a>(query: &str, fts_texts: impl IntoIterator<Item = &'a str>) -> [f32; 2] {
    if crate::has_identifier(query) {
        return IDENTIFIER_WEIGHTS;
    }
    let coverage = fts_texts
        .into_iter()
        .take(COVERAGE_HITS)
        .map(|t| crate::term_coverage(query, t))
        .fold(0.0, f32::max);
    [fts_weight(coverage), VECTOR_WEIGHT]
}

/// Fuse ranked lists (each best first, keys unique within a list) into one list, best first,
/// with scores in `(0, 1]`, the best exactly 1.0. Every list weighs 1.
pub fn reciprocal_rank_fusion<K: Clone + Eq + Hash>(lists: &[Vec<K>], k: f32) -> Vec<(K, f32)> {
    let weighted: Vec<(&[K], f32)> = lists.iter().map(|l| (l.as_slice(), 1.0)).collect();
    weighted_rank_fusion(&weighted, k)
}

/// Fuse ranked lists, each with a weight (non-positive and non-finite weights count as 0: the
/// list only adds keys, after every key of a weighted list), into one list, best first, with
/// scores in `[0, 1]`, the best 1.0 unless every weight is 0.
pub fn weighted_rank_fusion<K: Clone + Eq + Hash>(lists: &[(&[K], f32)], k: f32) -> Vec<(K, f32)> {
    let mut scores: HashMap<K, (f32, usize)> = HashMap::new();
    let mut order = 0usize;
    for (list, weight) in lists {
        let weight = if weight.is_finite() && *weight > 0.0 {
            *weight
        } else {
            0.0
        };
        for (rank, key) in list.iter().enumerate() {
            let add = weight / (k + rank as f32 + 1.0);
            let entry = scores.entry(key.clone()).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            entry.0 += add;
        }
    }
    let mut out: Vec<(K, f32, usize)> = scores.into_iter().map(|(k, (s, o))| (k, s, o)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    let best = out.first().map_or(1.0, |x| x.1);
    let best = if best > 0.0 { best } else { 1.0 };
    out.into_iter().map(|(k, s, _)| (k, s / best)).collect()
}

#[cfg(test)]
mod tests {
    //! Unit and property tests of the fusion.

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn agreement_wins_and_best_is_one() {
        let fts = vec!["a", "b", "c"];
        let vec = vec!["c", "d", "a"];
        let fused = reciprocal_rank_fusion(&[fts, vec], RRF_K);
        assert_eq!(fused[0].0, "a");
        assert_eq!(fused[0].1, 1.0);
        assert_eq!(fused[1].0, "c");
        assert_eq!(fused.len(), 4);
    }

    #[test]
    fn weights_follow_how_the_question_is_worded() {
        let q = "When did Caroline go to the LGBTQ support group?";
        // caroline, lgbtq, support, group of five words: 0.8.
        let worded = [
            "Melanie: hi",
            "Caroline: I went to a LGBTQ support group yesterday",
        ];
        let [f, v] = hybrid_weights(q, worded);
        assert!((f - fts_weight(0.8)).abs() < 1e-6 && f > 1.5, "{f}");
        assert_eq!(v, VECTOR_WEIGHT);
        // Beyond the first COVERAGE_HITS hits nothing counts.
        let mut late = vec!["a"; COVERAGE_HITS];
        late.push("Caroline: I went to a LGBTQ support group yesterday");
        assert_eq!(hybrid_weights(q, late)[0], FTS_WEIGHT_FLOOR);
        // A paraphrase: vector leads.
        let paraphrase = ["Ana: I start as a pilot at Northwind"];
        let [f, v] = hybrid_weights("Who pays Ana's salary these days?", paraphrase);
        assert!(f < 0.5 * v, "{f}");
        assert_eq!(
            hybrid_weights("what is ZX-4471?", worded),
            IDENTIFIER_WEIGHTS
        );
        assert_eq!(hybrid_weights(q, std::iter::empty())[0], FTS_WEIGHT_FLOOR);
    }

    proptest! {
        /// Full text's weight is finite, at least the floor, grows with coverage and stays
        /// bounded, whatever the input (NaN and infinities included).
        #[test]
        fn fts_weight_is_monotone_and_bounded(a in proptest::num::f32::ANY, b in 0.0f32..=1.0) {
            let wa = fts_weight(a);
            prop_assert!(wa.is_finite() && wa >= FTS_WEIGHT_FLOOR);
            prop_assert!(wa <= FTS_WEIGHT_FLOOR + FTS_WEIGHT_SPAN);
            prop_assert!(fts_weight(b) <= fts_weight((b + 0.1).min(1.0)));
        }
    }

    #[test]
    fn a_heavier_list_wins_a_disagreement() {
        let fts = ["a", "b"];
        let vec = ["b", "a"];
        let fused = weighted_rank_fusion(&[(&fts[..], 0.5), (&vec[..], 1.0)], RRF_K);
        assert_eq!(fused[0].0, "b");
        let fused = weighted_rank_fusion(&[(&fts[..], 1.0), (&vec[..], 0.5)], RRF_K);
        assert_eq!(fused[0].0, "a");
    }

    #[test]
    fn a_zero_weight_list_only_adds_keys_at_the_end() {
        let fts = ["x", "a"];
        let vec = ["a", "b"];
        let fused = weighted_rank_fusion(&[(&fts[..], 0.0), (&vec[..], 1.0)], RRF_K);
        let keys: Vec<&str> = fused.iter().map(|x| x.0).collect();
        assert_eq!(keys, ["a", "b", "x"]);
        assert_eq!(fused[2].1, 0.0);
        let fused = weighted_rank_fusion(&[(&fts[..], f32::NAN)], RRF_K);
        assert!(fused.iter().all(|x| x.1 == 0.0));
    }

    #[test]
    fn empty_lists_fuse_to_nothing() {
        let fused: Vec<(u8, f32)> = reciprocal_rank_fusion(&[vec![], vec![]], RRF_K);
        assert!(fused.is_empty());
    }

    proptest! {
        /// Every key of every list appears exactly once, scores are in (0, 1] and sorted, the
        /// first is 1.0, and a key ranked first in every list is the winner.
        #[test]
        fn fused_lists_are_well_formed(
            a in prop::collection::hash_set(0u16..200, 0..40),
            b in prop::collection::hash_set(0u16..200, 0..40),
        ) {
            let a: Vec<u16> = a.into_iter().collect();
            let b: Vec<u16> = b.into_iter().collect();
            let fused = reciprocal_rank_fusion(&[a.clone(), b.clone()], RRF_K);
            let mut want: Vec<u16> = a.iter().chain(&b).copied().collect();
            want.sort_unstable();
            want.dedup();
            let mut got: Vec<u16> = fused.iter().map(|x| x.0).collect();
            got.sort_unstable();
            prop_assert_eq!(got, want);
            if let Some(first) = fused.first() {
                prop_assert_eq!(first.1, 1.0);
            }
            for w in fused.windows(2) {
                prop_assert!(w[0].1 >= w[1].1);
            }
            prop_assert!(fused.iter().all(|x| x.1 > 0.0 && x.1 <= 1.0));
            if let (Some(x), Some(y)) = (a.first(), b.first()) && x == y {
                prop_assert_eq!(fused[0].0, *x);
            }
        }
    }
}
