//! Rank fusion: merge ranked lists (full-text and vector hits) into one ranking by
//! `sum w / (k + rank)`, scores normalised so the best hit is 1.0. Hybrid search weights the lists
//! ([`HYBRID_WEIGHTS`], [`HYBRID_K`]: chosen on a generated tuning set, never on the scored
//! evaluation; [`IDENTIFIER_WEIGHTS`] for queries holding a code; see
//! `docs/decisions/0021-ranking.md`). It must never use the lists' own scores
//! (they are not comparable across methods), never return a key twice, and never reorder ties
//! unpredictably (ties go to the key that appeared first).

use std::collections::HashMap;
use std::hash::Hash;

/// The usual RRF constant.
pub const RRF_K: f32 = 60.0;

/// Hybrid search's fusion constant `k`.
pub const HYBRID_K: f32 = 5.0;

/// Hybrid search's weights: full text, vector.
pub const HYBRID_WEIGHTS: [f32; 2] = [0.3, 1.0];

/// Hybrid search's weights for a query holding an identifier (`crate::has_identifier`): full
/// text leads, as vectors cannot tell "ZX-4471" from "ZX-4417".
pub const IDENTIFIER_WEIGHTS: [f32; 2] = [1.0, 0.3];

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
