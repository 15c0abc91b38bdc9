//! [`Pattern::open`]: one database, and every layer wired over it.
//!
//! A [`PatternConfig`] says where the data lives (a data directory, a SQLite file, or a database
//! URL such as PostgreSQL's) and how durable commits are; opening creates the data directory when
//! asked to, opens and migrates the database, and builds the memory store and the protocol handle
//! on it: the search layer (`db_v2`, with the embedder the configuration asks for), memory over
//! it, the protocol, and agents (`pattern_core`) over all of them. This module must never hold
//! behaviour of a layer: it only constructs and hands out.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use db_v2::{ConstellationDb, EmbedConfig, Embedder, FastEmbedder, ModelPaths};
use memory_v2::{DbMemoryStore, SearchHit, SearchOptions};
use pattern_core::provider::ModelProvider;
use pattern_core::{AgentRuntime, DatabaseAgent, ModelSummarizer, QueueProcessor, RuntimeConfig};
use pattern_db::{AgentId, Database, DbConfig, Durability, MessageStore};
use pattern_protocol::Protocol;
use tokio::sync::Notify;

use crate::error::{Error, Result};

/// File name of the SQLite database inside a data directory.
pub const DATABASE_FILE: &str = "pattern.db";

/// Where the database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseLocation {
    /// A data directory (created when missing); the database is [`DATABASE_FILE`] inside it.
    DataDir(PathBuf),
    /// A SQLite database file (created when missing; its directory must exist).
    SqliteFile(PathBuf),
    /// A database URL: `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`.
    Url(String),
}

/// Which embedder semantic search uses.
#[derive(Clone, Default)]
pub enum Embedding {
    /// None: full-text search only (Vector is a typed error, Auto and Hybrid use full text).
    Off,
    /// The offline model `pattern setup` installs, found through
    /// [`crate::install::embedding_paths`]; full-text only (with a warning) when it is not
    /// installed.
    #[default]
    Auto,
    /// The offline model at these paths; opening fails when it cannot be loaded.
    Model(ModelPaths),
    /// Any embedder.
    Custom(Arc<dyn Embedder>),
}

impl fmt::Debug for Embedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Embedding::Off => f.write_str("Off"),
            Embedding::Auto => f.write_str("Auto"),
            Embedding::Model(paths) => f.debug_tuple("Model").field(paths).finish(),
            Embedding::Custom(e) => f.debug_tuple("Custom").field(&e.name()).finish(),
        }
    }
}

/// Longest one embedding call may take.
const EMBED_TIMEOUT: Duration = Duration::from_secs(60);

/// How to open Pattern.
#[derive(Debug, Clone)]
pub struct PatternConfig {
    /// Where the database lives.
    pub location: DatabaseLocation,
    /// SQLite durability (PostgreSQL follows its own settings); default
    /// [`Durability::Full`].
    pub durability: Durability,
    /// The embedder (default [`Embedding::Auto`]).
    pub embedding: Embedding,
    /// How long this process's registration lasts without a heartbeat (default
    /// [`DbConfig::run_lease`], 20 s): a process that stops is seen dead within it at most (on
    /// PostgreSQL, and to a restarted process on SQLite, at once), and its runs' batches are
    /// abandoned.
    pub run_lease: Option<Duration>,
}

impl PatternConfig {
    /// The embedded default: SQLite in `dir/pattern.db`, the directory created when missing.
    pub fn data_dir(dir: impl Into<PathBuf>) -> Self {
        Self::at(DatabaseLocation::DataDir(dir.into()))
    }

    /// SQLite in this file.
    pub fn sqlite_file(path: impl Into<PathBuf>) -> Self {
        Self::at(DatabaseLocation::SqliteFile(path.into()))
    }

    /// The database at this URL (`sqlite://...` or `postgres://...`).
    pub fn url(url: impl Into<String>) -> Self {
        Self::at(DatabaseLocation::Url(url.into()))
    }

    fn at(location: DatabaseLocation) -> Self {
        Self {
            location,
            durability: Durability::Full,
            embedding: Embedding::Auto,
            run_lease: None,
        }
    }

    /// The same configuration with another embedder choice.
    pub fn with_embedding(mut self, embedding: Embedding) -> Self {
        self.embedding = embedding;
        self
    }

    /// The same configuration with another run lease (see [`PatternConfig::run_lease`]).
    pub fn with_run_lease(mut self, lease: Duration) -> Self {
        self.run_lease = Some(lease);
        self
    }

    /// The same configuration with another durability.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The database URL this configuration names (no file system access).
    pub fn database_url(&self) -> Result<String> {
        match &self.location {
            DatabaseLocation::DataDir(dir) => sqlite_url(&dir.join(DATABASE_FILE)),
            DatabaseLocation::SqliteFile(path) => sqlite_url(path),
            DatabaseLocation::Url(url) => Ok(url.clone()),
        }
    }

    /// The storage configuration: defaults of [`DbConfig::new`] for the URL, with this
    /// durability. Callers that need other storage settings change it and use
    /// [`Pattern::open_with`].
    pub fn db_config(&self) -> Result<DbConfig> {
        let mut config = DbConfig::new(self.database_url()?);
        config.durability = self.durability;
        if let Some(lease) = self.run_lease {
            config.run_lease = lease;
        }
        Ok(config)
    }
}

/// `sqlite://PATH` for a file path, with the characters the URL parser would misread
/// (`%`, `?`, `#`, spaces, non-ASCII) percent-encoded.
pub fn sqlite_url(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .ok_or_else(|| Error::NonUtf8Path(path.to_owned()))?;
    let mut url = String::from("sqlite://");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-_.~:+,=@".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(url)
}

/// Pattern, open: the database and the layers over it. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct Pattern {
    db: Database,
    search: ConstellationDb,
    memory: Arc<DbMemoryStore>,
    protocol: Protocol,
    queue_signal: Arc<Notify>,
}

async fn embedder(choice: &Embedding) -> Result<Option<Arc<dyn Embedder>>> {
    Ok(match choice {
        Embedding::Off => None,
        Embedding::Custom(e) => Some(e.clone()),
        Embedding::Model(paths) => Some(Arc::new(FastEmbedder::load(paths, EMBED_TIMEOUT).await?)),
        Embedding::Auto => {
            match FastEmbedder::load(&crate::install::embedding_paths(None), EMBED_TIMEOUT).await {
                Ok(e) => Some(Arc::new(e)),
                Err(e) => {
                    tracing::warn!(error = %e, "no embedding model: full-text search only");
                    None
                }
            }
        }
    })
}

impl Pattern {
    /// Opens Pattern: creates the data directory when the configuration names one, loads the
    /// embedder, opens (and migrates) the database, and wires search, memory and protocol over
    /// it.
    pub async fn open(config: PatternConfig) -> Result<Self> {
        if let DatabaseLocation::DataDir(dir) = &config.location {
            std::fs::create_dir_all(dir).map_err(|source| Error::DataDir {
                path: dir.clone(),
                source,
            })?;
        }
        let embedder = embedder(&config.embedding).await?;
        let mut db_config = config.db_config()?;
        db_config.record_embedding_jobs = embedder.is_some();
        let db = Database::open(db_config).await?;
        let search = ConstellationDb::open(db, embedder, EmbedConfig::default()).await?;
        Self::wire(search).await
    }

    /// Opens Pattern over a database described by a full storage configuration, without an
    /// embedder (full-text search only).
    pub async fn open_with(config: DbConfig) -> Result<Self> {
        Self::wire(ConstellationDb::fts_only(Database::open(config).await?)).await
    }

    /// Wires the layers over an open search layer (on PostgreSQL the protocol starts listening
    /// for wake-ups before this returns).
    pub async fn wire(search: ConstellationDb) -> Result<Self> {
        let db = search.db().clone();
        Ok(Self {
            memory: Arc::new(DbMemoryStore::with_search(search.clone())),
            protocol: Protocol::new(db.clone()).await?,
            search,
            db,
            queue_signal: Arc::new(Notify::new()),
        })
    }

    /// The search layer: archival passages, full-text, vector and hybrid search, embeddings.
    pub fn search_db(&self) -> &ConstellationDb {
        &self.search
    }

    /// Searches messages, archival passages and memory blocks.
    pub async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        Ok(self.search.search(query, options).await?)
    }

    /// An agent driven by `model`: its runtime gets the shared memory and search, the built-in
    /// tools, a summarizer using the same model, and this handle's queue signal (see
    /// [`queue_processor`](Self::queue_processor)).
    pub fn agent(
        &self,
        agent: pattern_db::Agent,
        model: Arc<dyn ModelProvider>,
        config: RuntimeConfig,
    ) -> Result<Arc<DatabaseAgent>> {
        self.agent_with_tools(agent, model, config, None)
    }

    /// [`Self::agent`] with these tools instead of the built-in set (e.g.
    /// `pattern_core::tool::meeting::registry()` for an agent in meetings).
    pub fn agent_with_tools(
        &self,
        agent: pattern_db::Agent,
        model: Arc<dyn ModelProvider>,
        config: RuntimeConfig,
        tools: Option<Arc<pattern_core::tool::ToolRegistry>>,
    ) -> Result<Arc<DatabaseAgent>> {
        let counter = counter_for(model.model());
        let mut builder = AgentRuntime::builder(
            self.db.clone(),
            agent,
            self.memory.clone(),
            model.clone(),
            config,
        );
        if let Some(tools) = tools {
            builder = builder.tools(tools);
        }
        let runtime = builder
            .archival(self.memory.clone())
            .counter(counter.clone())
            .summarizer(Arc::new(ModelSummarizer::new(model, counter)))
            .queue_signal(self.queue_signal.clone())
            .build()?;
        Ok(DatabaseAgent::new(runtime))
    }

    /// A queue processor over this database, woken by the agents this handle built.
    pub fn queue_processor(&self, idle_poll: Duration) -> Arc<QueueProcessor> {
        QueueProcessor::new(self.db.clone(), self.queue_signal.clone(), idle_poll)
    }

    /// The database: agents, batches, recovery, migrations.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// One agent's message store.
    pub fn messages(&self, agent: AgentId) -> MessageStore {
        self.db.messages(agent)
    }

    /// Memory blocks and archival memory, for every agent (the agent is a parameter of each
    /// call).
    pub fn memory(&self) -> &DbMemoryStore {
        &self.memory
    }

    /// The agent-to-agent protocol.
    pub fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    /// Closes the database for every clone (see [`Database::close`]).
    pub async fn close(self) {
        let Self {
            db,
            search,
            memory,
            protocol,
            queue_signal,
        } = self;
        // Let the embedding worker finish what it holds; what is left stays queued, durably.
        search.shutdown(Duration::from_secs(5)).await;
        drop((memory, protocol, queue_signal, search));
        db.close().await;
    }
}

/// The token counter for a model: tiktoken's encoding for an OpenAI model it knows, else the
/// calibrated estimate (Anthropic, Gemini and local models publish no offline tokenizer here).
fn counter_for(model: &context_v2::ModelInfo) -> Arc<dyn context_v2::TokenCounter> {
    if model.provider == context_v2::Provider::OpenAi
        && let Ok(counter) = context_v2::tokens::TiktokenCounter::for_model(&model.model)
    {
        return Arc::new(counter);
    }
    Arc::new(context_v2::EstimateCounter::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_escape_what_the_parser_would_misread() {
        assert_eq!(
            sqlite_url(Path::new("/tmp/a b/x?.db")).unwrap(),
            "sqlite:///tmp/a%20b/x%3F.db"
        );
        assert_eq!(
            sqlite_url(Path::new("/tmp/ü%.db")).unwrap(),
            "sqlite:///tmp/%C3%BC%25.db"
        );
    }

    #[test]
    fn data_dir_names_the_database_file() {
        let c = PatternConfig::data_dir("/var/lib/pattern");
        assert_eq!(
            c.database_url().unwrap(),
            "sqlite:///var/lib/pattern/pattern.db"
        );
        let c = PatternConfig::url("postgres://u@h/db").with_durability(Durability::Normal);
        let db = c.db_config().unwrap();
        assert_eq!(db.url, "postgres://u@h/db");
        assert_eq!(db.durability, Durability::Normal);
    }
}
