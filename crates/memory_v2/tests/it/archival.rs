//! Archival memory and search through `DbMemoryStore` on SQLite and PostgreSQL: insert with
//! metadata and tags, dedupe, list, delete, full-text search without an embedder, vector search
//! with one (a deterministic test embedder; the real model is tested in `db_v2`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use db_v2::{ConstellationDb, EmbedConfig, Embedder};
use memory_v2::{
    ArchivalMemory, BlockType, ContentRef, DbMemoryStore, Error, ListArchival, MemoryEditor,
    NewArchival, NewMemoryBlock, SearchMode, SearchOptions, WriteAuth,
};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Backend, NewAgent};

/// Words hashed into 32 buckets: same text, same vector.
struct Words;

#[async_trait]
impl Embedder for Words {
    fn name(&self) -> &str {
        "words"
    }
    fn dimension(&self) -> usize {
        32
    }
    fn model_hash(&self) -> &str {
        "words-v1"
    }
    async fn embed(&self, texts: &[String]) -> db_v2::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 32];
                v[0] = 0.01;
                for w in t.split_whitespace() {
                    let h = w
                        .to_lowercase()
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                    v[(h % 32) as usize] += 1.0;
                }
                v
            })
            .collect())
    }
}

async fn agent(store: &DbMemoryStore, name: &str) -> AgentId {
    store
        .database()
        .create_agent(NewAgent::named(name))
        .await
        .unwrap()
        .id
}

/// A fresh database with the `Words` embedder (worker polling every `poll`), a store over it and
/// the agent `ada`.
async fn with_words(
    kind: Backend,
    poll: Duration,
) -> (TestDb, ConstellationDb, DbMemoryStore, AgentId) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let config = EmbedConfig {
        poll_interval: poll,
        ..EmbedConfig::default()
    };
    let cdb = ConstellationDb::connect(
        tdb.config(),
        Some(Arc::new(Words) as Arc<dyn Embedder>),
        config,
    )
    .await
    .unwrap();
    let store = DbMemoryStore::with_search(cdb.clone());
    let ada = agent(&store, "ada").await;
    (tdb, cdb, store, ada)
}

async fn archival_crud_and_fts(kind: Backend) {
    let tdb = TestDb::fresh(kind).await.unwrap();
    let store = DbMemoryStore::new(tdb.open().await.unwrap());
    let ada = agent(&store, "ada").await;
    let mem: &dyn ArchivalMemory = &store;
    let mut new = NewArchival::text("Ada met Grace at the compiler workshop in 1952.");
    new.tags = vec!["people".into()];
    new.metadata = serde_json::json!({"source": "diary"});
    new.dedupe_key = Some("diary-1".into());
    let first = mem.insert_archival(ada, new.clone()).await.unwrap();
    // Same key again: the stored entry, nothing new.
    let again = mem.insert_archival(ada, new).await.unwrap();
    assert_eq!(first.id, again.id);
    mem.insert_archival(ada, NewArchival::text("Buy oat milk."))
        .await
        .unwrap();
    let listed = mem
        .list_archival(ada, ListArchival::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    let tagged = mem
        .list_archival(
            ada,
            ListArchival {
                tag: Some("people".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tagged.len(), 1);
    assert_eq!(tagged[0].metadata["source"], "diary");

    let opts = SearchOptions::default().for_agent(ada);
    let hits = mem.search("compiler workshop", &opts).await.unwrap();
    assert_eq!(hits[0].content, ContentRef::archival(first.id));
    assert!(matches!(
        mem.search("anything", &SearchOptions::mode(SearchMode::Vector))
            .await,
        Err(Error::Search(db_v2::Error::VectorSearchNotConfigured))
    ));
    assert!(matches!(
        mem.search(" ", &opts).await,
        Err(Error::Search(db_v2::Error::EmptyQuery))
    ));

    assert!(mem.delete_archival(ada, first.id).await.unwrap());
    assert!(!mem.delete_archival(ada, first.id).await.unwrap());
    assert!(matches!(
        mem.archival(ada, first.id).await,
        Err(Error::UnknownPassage { .. })
    ));
    assert!(
        mem.search("compiler workshop", &opts)
            .await
            .unwrap()
            .is_empty()
    );
    tdb.cleanup().await.unwrap();
}

async fn vector_search_with_embedder(kind: Backend) {
    let (tdb, cdb, store, ada) = with_words(kind, Duration::from_millis(50)).await;
    let e = store
        .insert_archival(ada, NewArchival::text("red kite over the hills"))
        .await
        .unwrap();
    store
        .insert_archival(ada, NewArchival::text("blue whale in the ocean"))
        .await
        .unwrap();
    assert!(cdb.wait_idle(Duration::from_secs(30)).await.unwrap());
    for mode in [SearchMode::Vector, SearchMode::Hybrid] {
        let hits = store
            .search("kite hills", &SearchOptions::mode(mode).for_agent(ada))
            .await
            .unwrap();
        assert_eq!(hits[0].content, ContentRef::archival(e.id), "{mode:?}");
    }
    cdb.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

/// A block write records an embedding job and wakes the worker: the new value is searchable by
/// vector long before the worker's next poll.
async fn block_writes_are_embedded_without_waiting_for_a_poll(kind: Backend) {
    let (tdb, cdb, store, ada) = with_words(kind, Duration::from_secs(300)).await;
    let embedded = async || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while cdb.status().await.unwrap().pending_jobs > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the block's embedding waited for the worker's poll"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    store
        .create_block(
            ada,
            NewMemoryBlock {
                label: "garden".into(),
                description: "the garden".into(),
                value: "tomatoes and basil".into(),
                char_limit: 500,
                block_type: BlockType::Core,
            },
        )
        .await
        .unwrap();
    embedded().await;
    store
        .append(
            ada,
            "garden",
            "red kite over the hills",
            1,
            WriteAuth::Agent,
        )
        .await
        .unwrap();
    embedded().await;
    let hits = store
        .search(
            "kite hills",
            &SearchOptions::mode(SearchMode::Vector).for_agent(ada),
        )
        .await
        .unwrap();
    assert!(hits[0].text.contains("red kite"), "{hits:?}");
    cdb.shutdown(Duration::from_secs(2)).await;
    tdb.cleanup().await.unwrap();
}

conformance!(
    archival_crud_and_fts,
    vector_search_with_embedder,
    block_writes_are_embedded_without_waiting_for_a_poll,
);
