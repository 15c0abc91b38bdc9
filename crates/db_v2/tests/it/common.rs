//! Shared helpers: the real model (loaded once per test process from the project's `.cache`;
//! missing files fail the test with "run cargo xtask setup"), a deterministic bag-of-words
//! embedder for pipeline tests, and an embedder that fails or stalls on demand.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use db_v2::{ConstellationDb, EmbedConfig, Embedder, FastEmbedder, ModelPaths};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Backend, NewAgent};
use tokio::sync::OnceCell;

/// The project's `.cache` folder (tests only: library code takes explicit paths).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache")
}

static MODEL: OnceCell<Arc<FastEmbedder>> = OnceCell::const_new();

/// The real all-MiniLM-L6-v2 model. Panics (fails the test) when it is not installed.
pub async fn model() -> Arc<FastEmbedder> {
    MODEL
        .get_or_init(|| async {
            let paths = ModelPaths::in_cache(&cache_dir());
            match FastEmbedder::load(&paths, Duration::from_secs(120)).await {
                Ok(m) => Arc::new(m),
                Err(e) => panic!("the embedding model is required, run `cargo xtask setup`: {e}"),
            }
        })
        .await
        .clone()
}

/// Fast pipeline settings for tests.
pub fn quick() -> EmbedConfig {
    EmbedConfig {
        lease: Duration::from_secs(2),
        backoff_base: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        poll_interval: Duration::from_millis(50),
        embed_timeout: Duration::from_secs(60),
        ..EmbedConfig::default()
    }
}

pub async fn open(tdb: &TestDb, embedder: Option<Arc<dyn Embedder>>) -> ConstellationDb {
    open_with(tdb, embedder, quick()).await
}

pub async fn open_with(
    tdb: &TestDb,
    embedder: Option<Arc<dyn Embedder>>,
    config: EmbedConfig,
) -> ConstellationDb {
    ConstellationDb::connect(tdb.config(), embedder, config)
        .await
        .unwrap()
}

pub async fn fresh(backend: Backend) -> TestDb {
    TestDb::fresh(backend).await.unwrap()
}

pub async fn agent(db: &ConstellationDb, name: &str) -> AgentId {
    db.db()
        .create_agent(NewAgent::named(name))
        .await
        .unwrap()
        .id
}

/// Deterministic embedder: each lower-cased word hashed (FNV-1a) into one of `dim` buckets.
/// Same text, same vector; no model needed.
pub struct HashEmbedder {
    pub dim: usize,
    pub name: String,
    /// Sleep per call (to keep jobs pending in crash tests).
    pub delay: Duration,
}

impl HashEmbedder {
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            name: "hash-bow".into(),
            delay: Duration::ZERO,
        }
    }

    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dim];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let mut h: u64 = 0xcbf29ce484222325;
            for b in word.to_lowercase().bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100000001b3);
            }
            v[(h % self.dim as u64) as usize] += 1.0;
        }
        // Never a zero vector: one constant component.
        v[0] += 0.01;
        v
    }
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn name(&self) -> &str {
        &self.name
    }
    fn dimension(&self) -> usize {
        self.dim
    }
    fn model_hash(&self) -> &str {
        "fnv1a-bow-v1"
    }
    async fn embed(&self, texts: &[String]) -> db_v2::Result<Vec<Vec<f32>>> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

/// Fails its first `fail` calls (or stalls for `stall` in them), then embeds like
/// [`HashEmbedder`].
pub struct FlakyEmbedder {
    pub inner: HashEmbedder,
    pub fail: usize,
    pub stall: Option<Duration>,
    pub calls: AtomicUsize,
}

#[async_trait]
impl Embedder for FlakyEmbedder {
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
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.fail {
            if let Some(stall) = self.stall {
                tokio::time::sleep(stall).await;
            }
            return Err(db_v2::Error::Embed(format!("injected failure {n}")));
        }
        self.inner.embed(texts).await
    }
}
