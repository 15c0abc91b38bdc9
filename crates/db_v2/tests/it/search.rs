//! The real model end to end on both backends: meaning found by Vector/Hybrid that full-text
//! misses, exact codes found by full-text that vectors rank low, filters, deletion, and the
//! behaviour without an embedder.

use std::sync::Arc;
use std::time::Duration;

use db_v2::{ConstellationDb, Embedder, Error, SearchMode, SearchOptions};
use pattern_db::{AgentId, Backend, ContentRef, ContentType, NewArchival};

use crate::common::{agent, fresh, model, open};

const PASSAGES: &[&str] = &[
    "The cat curled up on the warm windowsill and purred in the afternoon sun.",
    "Quarterly revenue grew twelve percent after the new pricing took effect.",
    "Ticket ZX-4471: the deploy script aborts when the build disk is full.",
    "Ticket ZX-4417: login page shows a blank screen on old browsers.",
    "Ticket QR-4471: nightly backup job skipped two tables.",
    "Water the tomato plants every morning before it gets hot.",
    "Ada prefers green tea to coffee when she works late.",
    "The train to the coast leaves at seven from platform four.",
    "Our dentist moved her practice to the other side of town.",
    "The guitar needs new strings before Saturday's concert.",
];

async fn seed(db: &ConstellationDb, who: AgentId) -> Vec<ContentRef> {
    let entries = db
        .insert_archival_many(
            who,
            PASSAGES.iter().map(|p| NewArchival::text(*p)).collect(),
        )
        .await
        .unwrap();
    assert!(db.wait_idle(Duration::from_secs(120)).await.unwrap());
    entries.iter().map(|e| ContentRef::archival(e.id)).collect()
}

fn rank(hits: &[db_v2::SearchHit], want: &ContentRef) -> Option<usize> {
    hits.iter().position(|h| &h.content == want)
}

async fn meaning_and_exact_terms(backend: Backend) {
    let tdb = fresh(backend).await;
    let m: Arc<dyn Embedder> = model().await;
    let db = open(&tdb, Some(m)).await;
    let ada = agent(&db, "ada").await;
    let refs = seed(&db, ada).await;
    let opts = |mode| SearchOptions::mode(mode).with_limit(10).for_agent(ada);

    // Meaning without shared words: full-text finds nothing, vectors find the cat.
    let q = "feline napping";
    let fts = db.search(q, &opts(SearchMode::Fts)).await.unwrap();
    assert_eq!(rank(&fts, &refs[0]), None, "{fts:?}");
    let vector = db.search(q, &opts(SearchMode::Vector)).await.unwrap();
    assert_eq!(rank(&vector, &refs[0]), Some(0), "{vector:?}");
    assert!(vector[0].score > 0.2 && vector[0].score <= 1.0001);
    let hybrid = db.search(q, &opts(SearchMode::Hybrid)).await.unwrap();
    assert_eq!(rank(&hybrid, &refs[0]), Some(0));
    assert_eq!(hybrid[0].score, 1.0);
    assert_eq!(hybrid[0].text, PASSAGES[0]);

    // An exact code: full-text puts it first; vectors cannot tell near-identical codes apart.
    let q = "ZX-4471";
    let fts = db.search(q, &opts(SearchMode::Fts)).await.unwrap();
    assert_eq!(rank(&fts, &refs[2]), Some(0), "{fts:?}");
    let vector = db.search(q, &opts(SearchMode::Vector)).await.unwrap();
    let vector_rank = rank(&vector, &refs[2]);
    assert_ne!(
        vector_rank,
        Some(0),
        "vectors unexpectedly exact: {vector:?}"
    );
    let hybrid = db.search(q, &opts(SearchMode::Hybrid)).await.unwrap();
    assert_eq!(rank(&hybrid, &refs[2]), Some(0), "{hybrid:?}");

    // Auto is hybrid with an embedder.
    let auto = db.search(q, &opts(SearchMode::Auto)).await.unwrap();
    assert_eq!(auto, hybrid);
    db.shutdown(Duration::from_secs(5)).await;
    tdb.cleanup().await.unwrap();
}

async fn filters_and_deletes(backend: Backend) {
    let tdb = fresh(backend).await;
    let m: Arc<dyn Embedder> = model().await;
    let db = open(&tdb, Some(m)).await;
    let ada = agent(&db, "ada").await;
    let bob = agent(&db, "bob").await;
    let refs = seed(&db, ada).await;
    let q = "a cat in the sun";
    for mode in [SearchMode::Vector, SearchMode::Hybrid, SearchMode::Fts] {
        // Another agent sees none of ada's passages.
        let hits = db
            .search(q, &SearchOptions::mode(mode).for_agent(bob))
            .await
            .unwrap();
        assert!(hits.is_empty(), "{mode:?}: {hits:?}");
        // Messages only: no archival passage.
        let hits = db
            .search(
                q,
                &SearchOptions::mode(mode)
                    .for_agent(ada)
                    .only(&[ContentType::Message]),
            )
            .await
            .unwrap();
        assert!(hits.is_empty(), "{mode:?}: {hits:?}");
        // A time range in the future: nothing.
        let mut o = SearchOptions::mode(mode).for_agent(ada);
        o.from = Some(chrono::Utc::now() + chrono::Duration::hours(1));
        assert!(db.search(q, &o).await.unwrap().is_empty());
    }
    // Deleted content never returns, in any mode.
    let pattern_db::search::ContentType::Archival = refs[0].content_type else {
        unreachable!()
    };
    let id = pattern_db::ArchivalId(refs[0].id.parse().unwrap());
    assert!(db.delete_archival(ada, id).await.unwrap());
    for mode in [SearchMode::Vector, SearchMode::Hybrid, SearchMode::Fts] {
        let hits = db
            .search(q, &SearchOptions::mode(mode).for_agent(ada))
            .await
            .unwrap();
        assert_eq!(rank(&hits, &refs[0]), None, "{mode:?}");
    }
    db.shutdown(Duration::from_secs(5)).await;
    tdb.cleanup().await.unwrap();
}

async fn without_embedder(backend: Backend) {
    let tdb = fresh(backend).await;
    let db = open(&tdb, None).await;
    let ada = agent(&db, "ada").await;
    db.insert_archival(ada, NewArchival::text("the deploy script aborts"))
        .await
        .unwrap();
    let q = "deploy";
    assert!(matches!(
        db.search(q, &SearchOptions::mode(SearchMode::Vector)).await,
        Err(Error::VectorSearchNotConfigured)
    ));
    assert!(matches!(
        db.search(q, &SearchOptions::mode(SearchMode::Hybrid)).await,
        Err(Error::VectorSearchNotConfigured)
    ));
    // Auto falls back to full-text.
    let hits = db.search(q, &SearchOptions::default()).await.unwrap();
    assert_eq!(hits.len(), 1);
    // Bad queries are typed errors, syntax characters are plain text.
    assert!(matches!(
        db.search("   ", &SearchOptions::default()).await,
        Err(Error::EmptyQuery)
    ));
    assert!(matches!(
        db.search(&"x".repeat(20_000), &SearchOptions::default())
            .await,
        Err(Error::QueryTooLong { .. })
    ));
    for q in ["multi-agent", "\"unbalanced", "AND (", "*", "🙂"] {
        db.search(q, &SearchOptions::default()).await.unwrap();
    }
    tdb.cleanup().await.unwrap();
}

/// A date in the question keeps search to that time (passages carry theirs in `occurred_at`),
/// in every mode; a date with nothing in it falls back to the whole question; `read_dates =
/// false` searches the date as words.
async fn dates_in_questions(backend: Backend) {
    let tdb = fresh(backend).await;
    let m: Arc<dyn Embedder> = model().await;
    let db = open(&tdb, Some(m)).await;
    let ada = agent(&db, "ada").await;
    let turn = |text: &str, at: &str| NewArchival {
        content: text.into(),
        metadata: serde_json::json!({ pattern_db::OCCURRED_AT_KEY: at }),
        tags: Vec::new(),
        dedupe_key: None,
    };
    let entries = db
        .insert_archival_many(
            ada,
            vec![
                turn(
                    "The ferry to the island was cancelled by the storm.",
                    "2023-01-14T09:00:00Z",
                ),
                turn(
                    "The ferry to the island left on time this morning.",
                    "2023-02-20T09:00:00Z",
                ),
                turn(
                    "We took the ferry again, calm sea all the way.",
                    "2023-03-05T09:00:00Z",
                ),
            ],
        )
        .await
        .unwrap();
    assert!(db.wait_idle(Duration::from_secs(120)).await.unwrap());
    let refs: Vec<ContentRef> = entries.iter().map(|e| ContentRef::archival(e.id)).collect();
    for mode in [SearchMode::Fts, SearchMode::Vector, SearchMode::Hybrid] {
        let opts = SearchOptions::mode(mode).with_limit(10).for_agent(ada);
        let got = |hits: Vec<db_v2::SearchHit>| -> Vec<ContentRef> {
            hits.into_iter().map(|h| h.content).collect()
        };
        let on_day = db
            .search("the ferry on 14 January 2023", &opts)
            .await
            .unwrap();
        assert_eq!(got(on_day), [refs[0].clone()], "{mode:?}");
        let before = db.search("ferry before March 2023", &opts).await.unwrap();
        let mut before = got(before);
        before.sort_by_key(|r| refs.iter().position(|x| x == r));
        assert_eq!(before, refs[..2], "{mode:?}");
        let after = db.search("ferry after 1 March 2023", &opts).await.unwrap();
        assert_eq!(got(after), [refs[2].clone()], "{mode:?}");
        // Nothing on that day: the whole question is searched.
        let none = db.search("ferry on 1 June 2024", &opts).await.unwrap();
        assert_eq!(none.len(), 3, "{mode:?}");
        // A caller's own range narrows further; an empty intersection searches without it.
        let narrowed = opts.clone().between(
            Some(chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2023, 2, 1, 0, 0, 0).unwrap()),
            None,
        );
        let both = db
            .search("ferry before March 2023", &narrowed)
            .await
            .unwrap();
        assert_eq!(got(both), [refs[1].clone()], "{mode:?}");
        // Dates not read: only passages by their words (none holds "January").
        if mode == SearchMode::Fts {
            let plain = db
                .search(
                    "ferry on 14 January 2023",
                    &opts.clone().reading_dates(false),
                )
                .await
                .unwrap();
            assert_eq!(plain.len(), 3);
        }
    }
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// Full text puts hits holding more of the question's words first (decision 0021, section 8):
/// the index ranks a passage repeating one rare word above one saying the whole question in
/// common words; search turns that round, keeps the index's order among hits holding as many
/// words, and scores fall as the order does.
async fn hits_holding_more_words_come_first(backend: Backend) {
    let tdb = fresh(backend).await;
    let db = open(&tdb, None).await;
    let ada = agent(&db, "ada").await;
    let mut passages = vec![
        "Lantern, lantern, lantern: the lantern again.".to_owned(),
        "On the long walk home from the harbour we stopped at the festival stalls and later \
         somebody there lit a lantern by the water."
            .to_owned(),
        "The harbour festival was busy this year.".to_owned(),
    ];
    // The festival and the harbour are common here, the lantern is not.
    for i in 0..40 {
        passages.push(format!("The harbour festival, day {i}: stalls and music."));
    }
    let entries = db
        .insert_archival_many(
            ada,
            passages
                .iter()
                .map(|p| NewArchival::text(p.as_str()))
                .collect(),
        )
        .await
        .unwrap();
    let [repeats, whole] = [0, 1].map(|i| ContentRef::archival(entries[i].id));
    let q = "the lantern at the harbour festival";
    let index = db
        .db()
        .search_text(
            &db_v2::content_words(q),
            &pattern_db::TextSearch {
                agent: Some(ada),
                limit: 10,
                ..pattern_db::TextSearch::default()
            },
        )
        .await
        .unwrap();
    let by_index: Vec<&ContentRef> = index.iter().map(|h| &h.content).collect();
    let at = |r: &ContentRef| by_index.iter().position(|x| *x == r);
    assert!(
        at(&repeats) < at(&whole),
        "the index alone ranks the repeated rare word first: {by_index:?}"
    );
    let hits = db
        .search(
            q,
            &SearchOptions::mode(SearchMode::Fts)
                .with_limit(5)
                .for_agent(ada),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 5);
    assert_eq!(rank(&hits, &whole), Some(0), "{hits:?}");
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "{hits:?}"
    );
    // Below it, every hit holds the harbour and the festival but not the lantern, then the
    // lantern alone: the passage repeating it is not among the first five.
    assert_eq!(rank(&hits, &repeats), None, "{hits:?}");
    assert!(hits[1..].iter().all(|h| h.score.floor() == 2.0), "{hits:?}");
    tdb.cleanup().await.unwrap();
}

conformance!(
    meaning_and_exact_terms,
    dates_in_questions,
    filters_and_deletes,
    without_embedder,
    hits_holding_more_words_come_first
);

/// Which of its query methods a search called.
struct Counting {
    inner: crate::common::HashEmbedder,
    queries: std::sync::atomic::AtomicUsize,
    alongside: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Embedder for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
    fn model_hash(&self) -> &str {
        self.inner.model_hash()
    }
    async fn embed(&self, texts: &[String]) -> db_v2::Result<Vec<Vec<f32>>> {
        self.inner.embed(texts).await
    }
    async fn embed_query(&self, query: &str) -> db_v2::Result<Vec<f32>> {
        self.queries
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.inner.embed(&[query.to_owned()]).await?.remove(0))
    }
    async fn embed_query_alongside(&self, query: &str) -> db_v2::Result<Vec<f32>> {
        self.alongside
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.inner.embed(&[query.to_owned()]).await?.remove(0))
    }
}

/// Hybrid search embeds its query with `embed_query_alongside` (its full-text half runs at the
/// same time), vector search with `embed_query`.
#[tokio::test]
async fn hybrid_embeds_its_query_alongside_the_full_text() {
    use std::sync::atomic::Ordering::SeqCst;
    let tdb = fresh(Backend::Sqlite).await;
    let counting = Arc::new(Counting {
        inner: crate::common::HashEmbedder::new(16),
        queries: Default::default(),
        alongside: Default::default(),
    });
    let db = open(&tdb, Some(counting.clone() as Arc<dyn Embedder>)).await;
    let who = agent(&db, "ada").await;
    seed(&db, who).await;
    assert!(db.wait_idle(Duration::from_secs(30)).await.unwrap());
    let hybrid = db
        .search("green tea", &SearchOptions::mode(SearchMode::Hybrid))
        .await
        .unwrap();
    assert!(!hybrid.is_empty());
    assert_eq!(
        (
            counting.queries.load(SeqCst),
            counting.alongside.load(SeqCst)
        ),
        (0, 1)
    );
    db.search("green tea", &SearchOptions::mode(SearchMode::Vector))
        .await
        .unwrap();
    assert_eq!(
        (
            counting.queries.load(SeqCst),
            counting.alongside.load(SeqCst)
        ),
        (1, 1)
    );
    db.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// The real model's query embedded on one core (the query session, loaded from the second such
/// query on) is the vector the bulk session gives, up to float rounding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_on_one_core_is_the_same_vector() {
    let m = model().await;
    let text = "when does the train to the coast leave";
    let bulk = m.embed_query(text).await.unwrap();
    // The second call starts loading the query session (the model is shared by the tests of
    // this process, so it may have started already); wait until a call is served by it.
    for _ in 0..2 {
        let early = m.embed_query_alongside(text).await.unwrap();
        assert_eq!(early.len(), bulk.len());
    }
    for _ in 0..100 {
        if m.query_session_loaded() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(m.query_session_loaded(), "the query session never loaded");
    let one_core = m.embed_query_alongside(text).await.unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let cosine = dot(&bulk, &one_core) / (dot(&bulk, &bulk) * dot(&one_core, &one_core)).sqrt();
    assert!(cosine > 0.9999, "cosine {cosine}");
}
