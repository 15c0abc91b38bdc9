//! [`VectorIndex`]: the in-process vector index, the same for SQLite and PostgreSQL (the vectors
//! live in the database; this is a derived copy rebuilt on open). Vectors are normalised at insert
//! so cosine similarity is a dot product. A search narrows in three stages, each over fewer
//! vectors and more bytes per vector, and returns exact cosines:
//!
//! 1. when more than [`SIGN_SCAN_MIN`] entries pass the filter, a scan of every entry's sign code
//!    (one bit per component: 48 bytes at 384 dimensions, a thirty-second of the f32 traffic)
//!    keeps the `max(32 x candidates, 1/32 of them)` entries with the fewest differing signs;
//! 2. an int8 copy of each survivor (per-vector scale) ranks them and keeps the candidates;
//! 3. the exact f32 dot product re-ranks the candidates.
//!
//! Below the threshold stage 1 is skipped (the int8 scan of 20k vectors is under a millisecond).
//! Stage 1 is an approximation of the angle (random-hyperplane hashing): on embeddings of real
//! text, whose neighbours share most signs, it keeps the exact top hits (measured in
//! `docs/performance.md`); on structureless random vectors it loses some, which is why it only
//! runs where the int8 scan would cost several milliseconds. Filters (agent, content kind, time
//! range) are checked before any arithmetic.
//!
//! It must never hold two entries for one key, never return a removed key, and never accept a
//! vector of the wrong dimension or without a direction (zero, NaN, infinite): those are typed
//! errors.

use std::collections::HashMap;
use std::hash::Hash;

use pattern_db::AgentId;

use crate::error::{Error, Result};

/// Candidates kept from the int8 scan per requested hit (then re-ranked exactly).
const CANDIDATES_PER_HIT: usize = 4;
/// Fewest candidates re-ranked, whatever the limit.
const MIN_CANDIDATES: usize = 64;
/// Entries above which the sign-code scan narrows the int8 scan (by default).
pub const SIGN_SCAN_MIN: usize = 20_000;

/// When the sign-code scan runs and how many entries survive it: `max(survivors_per_candidate x
/// candidates, entries / survivor_fraction)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignScan {
    /// Entries passing the filter above which the scan runs.
    pub min_entries: usize,
    /// Survivors per int8 candidate.
    pub survivors_per_candidate: usize,
    /// At least `1 / survivor_fraction` of the entries scanned survive.
    pub survivor_fraction: usize,
}

impl Default for SignScan {
    fn default() -> Self {
        Self {
            min_entries: SIGN_SCAN_MIN,
            survivors_per_candidate: 32,
            survivor_fraction: 32,
        }
    }
}

/// What an entry is filtered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryMeta {
    /// The agent the content belongs to; `None` for content whose visibility is decided
    /// elsewhere (shared blocks: every filter with an agent lets it through for a later check).
    pub agent: Option<AgentId>,
    /// Content kind as a small number (0..8), matched against [`IndexFilter::kinds`].
    pub kind: u8,
    /// Creation time, milliseconds since the epoch.
    pub created_at_ms: i64,
}

/// Which entries a search may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexFilter {
    /// Only this agent's entries (and entries without an agent).
    pub agent: Option<AgentId>,
    /// Bit `1 << kind` set for every allowed kind; 0 allows all.
    pub kinds: u8,
    /// Created at or after (ms).
    pub from_ms: Option<i64>,
    /// Created before (ms, exclusive, as `pattern_db`'s `TextSearch`).
    pub to_ms: Option<i64>,
}

impl IndexFilter {
    fn allows(&self, meta: &EntryMeta) -> bool {
        if self.kinds != 0 && (self.kinds & (1u8 << (meta.kind & 7))) == 0 {
            return false;
        }
        if let (Some(want), Some(have)) = (self.agent, meta.agent)
            && want != have
        {
            return false;
        }
        if self.from_ms.is_some_and(|from| meta.created_at_ms < from) {
            return false;
        }
        if self.to_ms.is_some_and(|to| meta.created_at_ms >= to) {
            return false;
        }
        true
    }
}

/// An exact-cosine vector index over keys `K` (a content reference).
#[derive(Debug, Clone)]
pub struct VectorIndex<K> {
    dimension: usize,
    keys: Vec<K>,
    metas: Vec<EntryMeta>,
    positions: HashMap<K, usize>,
    /// Normalised vectors, `dimension` floats each, in key order.
    vectors: Vec<f32>,
    /// int8 copies (`round(v / max|v| * 127)`), in key order.
    quantized: Vec<i8>,
    /// Per-vector scale: `max|v| / 127`.
    scales: Vec<f32>,
    /// Sign codes: `words` u64 per vector (bit `j` set when component `j` is negative).
    signs: Vec<u64>,
    /// u64 words per sign code.
    words: usize,
    /// When the sign scan runs.
    sign_scan: SignScan,
}

/// Normalise `v` in place; error when it has no direction or non-finite components.
pub fn normalize(v: &mut [f32]) -> Result<()> {
    if v.iter().any(|x| !x.is_finite()) {
        return Err(Error::InvalidVector);
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm <= f32::MIN_POSITIVE || !norm.is_finite() {
        return Err(Error::InvalidVector);
    }
    for x in v.iter_mut() {
        *x /= norm;
    }
    Ok(())
}

fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max <= 0.0 {
        out.fill(0);
        return 0.0;
    }
    let k = 127.0 / max;
    for (o, x) in out.iter_mut().zip(v) {
        // In range by construction: |x * k| <= 127.
        *o = (x * k).round().clamp(-127.0, 127.0) as i8;
    }
    max / 127.0
}

fn sign_code(v: &[f32], out: &mut [u64]) {
    out.fill(0);
    for (j, x) in v.iter().enumerate() {
        if x.is_sign_negative() {
            out[j / 64] |= 1u64 << (j % 64);
        }
    }
}

fn hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// The positions of the `keep` smallest distances (ties at the cut resolved by position), in
/// O(n): a histogram of the distances gives the cut.
fn fewest_differing(dists: &[(u32, u32)], keep: usize, max_dist: usize) -> Vec<u32> {
    let mut counts = vec![0usize; max_dist + 1];
    for &(d, _) in dists {
        counts[(d as usize).min(max_dist)] += 1;
    }
    let mut cut = max_dist;
    let mut below = 0usize;
    for (d, c) in counts.iter().enumerate() {
        if below + c >= keep {
            cut = d;
            break;
        }
        below += c;
    }
    let mut at_cut = keep - below.min(keep);
    let mut out = Vec::with_capacity(keep);
    for &(d, i) in dists {
        let d = (d as usize).min(max_dist);
        if d < cut {
            out.push(i);
        } else if d == cut && at_cut > 0 {
            out.push(i);
            at_cut -= 1;
        }
    }
    out
}

fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    // Chunks of 16 so the compiler vectorises with widening multiply-adds.
    let mut acc = [0i32; 16];
    let (ac, ar) = a.as_chunks::<16>();
    let (bc, br) = b.as_chunks::<16>();
    for (x, y) in ac.iter().zip(bc) {
        for i in 0..16 {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    let mut sum: i32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ac, ar) = a.as_chunks::<16>();
    let (bc, br) = b.as_chunks::<16>();
    for (x, y) in ac.iter().zip(bc) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        sum += x * y;
    }
    sum
}

impl<K: Clone + Eq + Hash> VectorIndex<K> {
    /// An empty index for vectors of `dimension` components.
    pub fn new(dimension: usize) -> Self {
        Self {
            dimension,
            keys: Vec::new(),
            metas: Vec::new(),
            positions: HashMap::new(),
            vectors: Vec::new(),
            quantized: Vec::new(),
            scales: Vec::new(),
            signs: Vec::new(),
            words: dimension.div_ceil(64),
            sign_scan: SignScan::default(),
        }
    }

    /// The same index with another sign-code scan setting (the default suits every size; this
    /// is for measuring the scan's effect on small sets).
    pub fn with_sign_scan(mut self, scan: SignScan) -> Self {
        self.sign_scan = SignScan {
            survivors_per_candidate: scan.survivors_per_candidate.max(1),
            survivor_fraction: scan.survivor_fraction.max(1),
            ..scan
        };
        self
    }

    /// The vector length.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// True when `key` has an entry.
    pub fn contains(&self, key: &K) -> bool {
        self.positions.contains_key(key)
    }

    /// Reserve room for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.keys.reserve(additional);
        self.metas.reserve(additional);
        self.scales.reserve(additional);
        self.vectors.reserve(additional * self.dimension);
        self.quantized.reserve(additional * self.dimension);
        self.signs.reserve(additional * self.words);
    }

    /// Insert or replace the entry for `key` (the vector is normalised here).
    pub fn upsert(&mut self, key: K, meta: EntryMeta, mut vector: Vec<f32>) -> Result<()> {
        if vector.len() != self.dimension {
            return Err(Error::DimensionMismatch {
                expected: self.dimension,
                got: vector.len(),
            });
        }
        normalize(&mut vector)?;
        let d = self.dimension;
        let mut q = vec![0i8; d];
        let scale = quantize(&vector, &mut q);
        let w = self.words;
        let mut code = vec![0u64; w];
        sign_code(&vector, &mut code);
        match self.positions.get(&key) {
            Some(&i) => {
                self.metas[i] = meta;
                self.vectors[i * d..(i + 1) * d].copy_from_slice(&vector);
                self.quantized[i * d..(i + 1) * d].copy_from_slice(&q);
                self.scales[i] = scale;
                self.signs[i * w..(i + 1) * w].copy_from_slice(&code);
            }
            None => {
                self.positions.insert(key.clone(), self.keys.len());
                self.keys.push(key);
                self.metas.push(meta);
                self.vectors.extend_from_slice(&vector);
                self.quantized.extend_from_slice(&q);
                self.scales.push(scale);
                self.signs.extend_from_slice(&code);
            }
        }
        Ok(())
    }

    /// Remove `key`'s entry; true if there was one.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(i) = self.positions.remove(key) else {
            return false;
        };
        let d = self.dimension;
        let last = self.keys.len() - 1;
        if i != last {
            self.keys.swap(i, last);
            self.metas.swap(i, last);
            self.scales.swap(i, last);
            self.vectors.copy_within(last * d..(last + 1) * d, i * d);
            self.quantized.copy_within(last * d..(last + 1) * d, i * d);
            let w = self.words;
            self.signs.copy_within(last * w..(last + 1) * w, i * w);
            self.positions.insert(self.keys[i].clone(), i);
        }
        self.keys.truncate(last);
        self.metas.truncate(last);
        self.scales.truncate(last);
        self.vectors.truncate(last * d);
        self.quantized.truncate(last * d);
        self.signs.truncate(last * self.words);
        true
    }

    /// The `limit` entries most similar to `query` that pass `filter`, best first, with their
    /// exact cosine similarity.
    pub fn search(
        &self,
        query: &[f32],
        limit: usize,
        filter: &IndexFilter,
    ) -> Result<Vec<(K, f32)>> {
        if query.len() != self.dimension {
            return Err(Error::DimensionMismatch {
                expected: self.dimension,
                got: query.len(),
            });
        }
        if limit == 0 || self.keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = query.to_vec();
        normalize(&mut q)?;
        let d = self.dimension;
        let mut qq = vec![0i8; d];
        quantize(&q, &mut qq);
        let keep = (limit * CANDIDATES_PER_HIT).max(MIN_CANDIDATES);
        // Stage 1: sign codes of every entry the filter allows (skipped for small sets).
        let w = self.words;
        let mut qs = vec![0u64; w];
        sign_code(&q, &mut qs);
        let scan = self.sign_scan;
        let threshold = scan.min_entries.max(keep);
        let allowed = self
            .metas
            .iter()
            .enumerate()
            .filter(|(_, meta)| filter.allows(meta))
            // Index fits in u32: a process holds far fewer than 4 billion vectors.
            .map(|(i, _)| i as u32);
        let survivors: Vec<u32> = if self.keys.len() > threshold {
            let dists: Vec<(u32, u32)> = allowed
                .map(|i| {
                    let i_us = i as usize;
                    (hamming(&self.signs[i_us * w..(i_us + 1) * w], &qs), i)
                })
                .collect();
            let n = dists.len();
            let survive = (keep * scan.survivors_per_candidate).max(n / scan.survivor_fraction);
            if n > threshold && n > survive {
                fewest_differing(&dists, survive, w * 64)
            } else {
                dists.into_iter().map(|(_, i)| i).collect()
            }
        } else {
            allowed.collect()
        };
        // Stage 2: approximate scores (scaled by the entry's scale; the query's scale is common
        // to all).
        let mut approx: Vec<(f32, u32)> = survivors
            .into_iter()
            .map(|i| {
                let i_us = i as usize;
                let row = &self.quantized[i_us * d..(i_us + 1) * d];
                (dot_i8(row, &qq) as f32 * self.scales[i_us], i)
            })
            .collect();
        if approx.len() > keep {
            approx.select_nth_unstable_by(keep - 1, |a, b| b.0.total_cmp(&a.0));
            approx.truncate(keep);
        }
        // Stage 3: exact.
        let mut exact: Vec<(f32, u32)> = approx
            .into_iter()
            .map(|(_, i)| {
                let i_us = i as usize;
                (dot_f32(&self.vectors[i_us * d..(i_us + 1) * d], &q), i)
            })
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        exact.truncate(limit);
        Ok(exact
            .into_iter()
            .map(|(s, i)| (self.keys[i as usize].clone(), s))
            .collect())
    }

    /// Exact scan over every f32 vector (no int8 pre-selection): the reference the fast path is
    /// tested against, and the baseline of the bench.
    pub fn search_exact(
        &self,
        query: &[f32],
        limit: usize,
        filter: &IndexFilter,
    ) -> Result<Vec<(K, f32)>> {
        if query.len() != self.dimension {
            return Err(Error::DimensionMismatch {
                expected: self.dimension,
                got: query.len(),
            });
        }
        let mut q = query.to_vec();
        normalize(&mut q)?;
        let d = self.dimension;
        let mut all: Vec<(f32, usize)> = (0..self.keys.len())
            .filter(|&i| filter.allows(&self.metas[i]))
            .map(|i| (dot_f32(&self.vectors[i * d..(i + 1) * d], &q), i))
            .collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        all.truncate(limit);
        Ok(all
            .into_iter()
            .map(|(s, i)| (self.keys[i].clone(), s))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    //! Unit tests and property tests of the index.

    use super::*;
    use proptest::prelude::*;

    fn meta(kind: u8, t: i64) -> EntryMeta {
        EntryMeta {
            agent: None,
            kind,
            created_at_ms: t,
        }
    }

    #[test]
    fn rejects_bad_vectors() {
        let mut ix = VectorIndex::<u32>::new(3);
        assert!(matches!(
            ix.upsert(1, meta(0, 0), vec![1.0, 0.0]),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!(matches!(
            ix.upsert(1, meta(0, 0), vec![0.0; 3]),
            Err(Error::InvalidVector)
        ));
        assert!(matches!(
            ix.upsert(1, meta(0, 0), vec![f32::NAN, 1.0, 0.0]),
            Err(Error::InvalidVector)
        ));
        assert!(ix.is_empty());
    }

    #[test]
    fn cosine_and_filters() {
        let a = AgentId::new();
        let b = AgentId::new();
        let mut ix = VectorIndex::<u32>::new(2);
        ix.upsert(
            1,
            EntryMeta {
                agent: Some(a),
                kind: 0,
                created_at_ms: 10,
            },
            vec![2.0, 0.0],
        )
        .unwrap();
        ix.upsert(
            2,
            EntryMeta {
                agent: Some(b),
                kind: 1,
                created_at_ms: 20,
            },
            vec![1.0, 1.0],
        )
        .unwrap();
        ix.upsert(
            3,
            EntryMeta {
                agent: None,
                kind: 2,
                created_at_ms: 30,
            },
            vec![0.0, 5.0],
        )
        .unwrap();
        let all = ix.search(&[1.0, 0.0], 10, &IndexFilter::default()).unwrap();
        assert_eq!(all.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!((all[0].1 - 1.0).abs() < 1e-6);
        assert!((all[1].1 - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        let only_a = IndexFilter {
            agent: Some(a),
            ..Default::default()
        };
        // Entry 3 has no agent: visibility is decided later, so it passes.
        let got = ix.search(&[1.0, 0.0], 10, &only_a).unwrap();
        assert_eq!(got.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 3]);
        let kinds = IndexFilter {
            kinds: 1 << 1,
            ..Default::default()
        };
        assert_eq!(ix.search(&[1.0, 0.0], 10, &kinds).unwrap()[0].0, 2);
        let window = IndexFilter {
            from_ms: Some(15),
            to_ms: Some(30),
            ..Default::default()
        };
        let got = ix.search(&[1.0, 0.0], 10, &window).unwrap();
        assert_eq!(got.iter().map(|h| h.0).collect::<Vec<_>>(), [2]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u8, Vec<f32>),
        Remove(u8),
    }

    fn vec4() -> impl Strategy<Value = Vec<f32>> {
        prop::collection::vec(-1.0f32..1.0, 4)
            .prop_filter("needs a direction", |v| v.iter().any(|x| x.abs() > 1e-3))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..16, vec4()).prop_map(|(k, v)| Op::Upsert(k, v)),
            (0u8..16).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// After any sequence of upserts and removes the index holds exactly the live keys, one
        /// entry each, and its search returns the same set as a brute-force model.
        #[test]
        fn matches_a_model(ops in prop::collection::vec(op(), 0..80), q in vec4()) {
            let mut ix = VectorIndex::<u8>::new(4);
            let mut model: HashMap<u8, Vec<f32>> = HashMap::new();
            for op in ops {
                match op {
                    Op::Upsert(k, v) => {
                        ix.upsert(k, meta(0, 0), v.clone()).unwrap();
                        model.insert(k, v);
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(ix.remove(&k), model.remove(&k).is_some());
                    }
                }
            }
            prop_assert_eq!(ix.len(), model.len());
            let got = ix.search(&q, 100, &IndexFilter::default()).unwrap();
            let exact = ix.search_exact(&q, 100, &IndexFilter::default()).unwrap();
            prop_assert_eq!(got.len(), model.len());
            // Same keys, same exact scores, best first.
            let mut a: Vec<u8> = got.iter().map(|h| h.0).collect();
            let mut b: Vec<u8> = model.keys().copied().collect();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
            for (g, e) in got.iter().zip(&exact) {
                prop_assert!((g.1 - e.1).abs() < 1e-5);
            }
            for w in got.windows(2) {
                prop_assert!(w[0].1 >= w[1].1);
            }
            for (k, s) in &got {
                let mut v = model[k].clone();
                normalize(&mut v).unwrap();
                let mut qn = q.clone();
                normalize(&mut qn).unwrap();
                let want: f32 = v.iter().zip(&qn).map(|(x, y)| x * y).sum();
                prop_assert!((s - want).abs() < 1e-5);
            }
        }
    }

    /// Vectors shaped like text embeddings: a shared direction every vector leans towards (real
    /// models are anisotropic, which makes many sign bits agree), topics, and noise; queries are
    /// other draws from a topic.
    fn clustered(n: usize, dim: usize, topics: usize, seed: u64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let unit = |rng: &mut rand::rngs::StdRng| {
            let mut v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            normalize(&mut v).unwrap();
            v
        };
        let shared = unit(&mut rng);
        let centres: Vec<Vec<f32>> = (0..topics).map(|_| unit(&mut rng)).collect();
        let draw = |rng: &mut rand::rngs::StdRng| {
            let c = &centres[rng.random_range(0..topics)];
            let noise = unit(rng);
            (0..dim)
                .map(|j| 0.35 * shared[j] + 0.55 * c[j] + 0.75 * noise[j])
                .collect::<Vec<f32>>()
        };
        let vectors = (0..n).map(|_| draw(&mut rng)).collect();
        let queries = (0..40).map(|_| draw(&mut rng)).collect();
        (vectors, queries)
    }

    #[test]
    fn sign_scan_keeps_the_exact_top_hits_of_clustered_vectors() {
        // 30,000 vectors of 384 dimensions (above the default threshold, so the sign scan runs
        // with its production setting): the same top 10 as the exact scan.
        let (vectors, queries) = clustered(30_000, 384, 300, 11);
        let mut ix = VectorIndex::<u32>::new(384);
        for (k, v) in vectors.into_iter().enumerate() {
            ix.upsert(k as u32, meta(0, 0), v).unwrap();
        }
        assert!(ix.len() > SIGN_SCAN_MIN);
        let mut agree = 0;
        for q in &queries {
            let fast = ix.search(q, 10, &IndexFilter::default()).unwrap();
            let exact = ix.search_exact(q, 10, &IndexFilter::default()).unwrap();
            assert_eq!(fast.len(), 10);
            agree += fast
                .iter()
                .filter(|h| exact.iter().any(|e| e.0 == h.0))
                .count();
        }
        assert!(
            agree >= 396,
            "only {agree}/400 of the exact top-10 hits found"
        );
    }

    #[test]
    fn sign_scan_respects_filters_and_limits() {
        // Forced on a small set: every hit passes the filter, none twice, exact scores.
        let (vectors, queries) = clustered(2_000, 64, 20, 3);
        let (a, b) = (AgentId::new(), AgentId::new());
        let mut ix = VectorIndex::<u32>::new(64).with_sign_scan(SignScan {
            min_entries: 0,
            survivors_per_candidate: 1,
            survivor_fraction: 64,
        });
        for (k, v) in vectors.into_iter().enumerate() {
            let m = EntryMeta {
                agent: Some(if k % 2 == 0 { a } else { b }),
                kind: (k % 3) as u8,
                created_at_ms: k as i64,
            };
            ix.upsert(k as u32, m, v).unwrap();
        }
        let filter = IndexFilter {
            agent: Some(a),
            kinds: 1 << 1,
            from_ms: Some(100),
            to_ms: Some(1_900),
        };
        for q in &queries {
            let got = ix.search(q, 25, &filter).unwrap();
            assert_eq!(got.len(), 25);
            let mut keys: Vec<u32> = got.iter().map(|h| h.0).collect();
            for k in &keys {
                assert!(k % 2 == 0 && k % 3 == 1 && (100..1_900).contains(k), "{k}");
            }
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), 25);
            for w in got.windows(2) {
                assert!(w[0].1 >= w[1].1);
            }
        }
    }

    #[test]
    fn fewest_differing_cuts_ties_by_position() {
        let d = [(3, 0), (1, 1), (3, 2), (0, 3), (3, 4), (2, 5)];
        assert_eq!(fewest_differing(&d, 3, 8), [1, 3, 5]);
        assert_eq!(fewest_differing(&d, 5, 8), [0, 1, 2, 3, 5]);
        assert_eq!(fewest_differing(&d, 6, 8), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn int8_preselection_keeps_the_exact_top_hits() {
        // 5,000 random 64-dimension vectors: the fast path must return the same top 10 as the
        // exact scan (re-ranking 64 candidates absorbs the quantisation error).
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut ix = VectorIndex::<u32>::new(64);
        for k in 0..5000u32 {
            let v: Vec<f32> = (0..64).map(|_| rng.random_range(-1.0..1.0)).collect();
            ix.upsert(k, meta(0, 0), v).unwrap();
        }
        let mut agree = 0;
        for _ in 0..20 {
            let q: Vec<f32> = (0..64).map(|_| rng.random_range(-1.0..1.0)).collect();
            let fast = ix.search(&q, 10, &IndexFilter::default()).unwrap();
            let exact = ix.search_exact(&q, 10, &IndexFilter::default()).unwrap();
            agree += fast
                .iter()
                .filter(|h| exact.iter().any(|e| e.0 == h.0))
                .count();
        }
        assert!(
            agree >= 198,
            "only {agree}/200 of the exact top-10 hits found"
        );
    }
}
