//! The one place the CLI opens a `pattern::search::ConstellationDb` (search, archival memory,
//! embeddings) for a data directory: reads `[embedding] enabled` from config.toml, loads the
//! offline model from `pattern::install::embedding_paths` (`PATTERN_MODEL_DIR`,
//! `PATTERN_ORT_LIBRARY`, else the data directory, the XDG data directory or the repository's
//! `.cache`, wherever `pattern setup` installed it), and decides what happens when the model
//! is missing: commands that need vectors fail with one line naming `pattern setup`, the
//! others go on with full-text search only and say so on stderr.
//!
//! This module must never print to stdout, and never open the database without the
//! initialisation check of `Env`.

use std::sync::Arc;
use std::time::Duration;

use pattern::db::{Agent, Database};
use pattern::search::{ConstellationDb, EmbedConfig, Embedder, FastEmbedder};

use crate::cli::AgentArg;
use crate::env::{Config, Env};
use crate::error::{CliError, Kind, Result};

/// Longest a single embedding call may take.
const EMBED_TIMEOUT: Duration = Duration::from_secs(60);
/// How long closing waits for the worker to embed what was just written.
const CLOSE_DEADLINE: Duration = Duration::from_secs(30);

/// Whether a command needs vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vectors {
    /// Fail (exit 1) when embeddings are disabled or the model is missing.
    Required,
    /// Use them when enabled and the model loads; else go on full-text only (one stderr line).
    IfAvailable,
    /// Never load the model.
    Off,
}

/// An open ConstellationDb with the configuration it was opened with.
pub(crate) struct SearchDb {
    /// The database with search and embeddings.
    pub(crate) db: ConstellationDb,
    /// config.toml.
    pub(crate) config: Config,
}

impl SearchDb {
    /// Opens the data directory's database (migrating pending migrations).
    pub(crate) async fn open(env: &Env, vectors: Vectors) -> Result<Self> {
        let config = env.config()?;
        env.check_initialised(&config)?;
        let db_config = env.pattern_config(&config)?.db_config()?;
        let embedder = match vectors {
            Vectors::Off => None,
            _ if !config.embedding.enabled => {
                if vectors == Vectors::Required {
                    return Err(CliError::usage(format!(
                        "embeddings are disabled: set `enabled = true` under [embedding] in {}",
                        env.config_path().display()
                    )));
                }
                None
            }
            _ => match FastEmbedder::load(
                &pattern::install::embedding_paths(Some(&env.data_dir)),
                EMBED_TIMEOUT,
            )
            .await
            {
                Ok(e) => Some(Arc::new(e) as Arc<dyn Embedder>),
                Err(e) if vectors == Vectors::Required => {
                    return Err(CliError::new(Kind::Other, e.to_string()));
                }
                Err(e) => {
                    eprintln!("warning: full-text search only: {e}");
                    None
                }
            },
        };
        let db = ConstellationDb::connect(db_config, embedder, EmbedConfig::default())
            .await
            .map_err(from_db_v2)?;
        Ok(Self { db, config })
    }

    /// Whether vectors are available.
    pub(crate) fn has_vectors(&self) -> bool {
        self.db.embedder().is_some()
    }

    /// The storage layer.
    pub(crate) fn raw(&self) -> &Database {
        self.db.db()
    }

    /// The agent `--agent` names, else `agent.default`.
    pub(crate) async fn agent(&self, arg: &AgentArg) -> Result<Agent> {
        let name = arg
            .agent
            .clone()
            .or_else(|| self.config.agent.default.clone())
            .ok_or_else(|| {
                CliError::usage(
                    "no agent given: pass --agent NAME or set `default` under [agent] in \
                     config.toml",
                )
            })?;
        Ok(self
            .raw()
            .agent_in_scope(Some(crate::env::organization_id(self.raw()).await?), &name)
            .await?)
    }

    /// Lets the worker embed what was written (up to a deadline; the rest stays queued for the
    /// next run or `pattern embed --backfill`), then closes the database.
    pub(crate) async fn close(self) {
        self.close_within(CLOSE_DEADLINE).await;
    }

    /// Closes after letting the worker embed for at most `deadline`; its unfinished claims are
    /// released, so the next process takes them at once.
    pub(crate) async fn close_within(self, deadline: Duration) {
        self.db.shutdown(deadline).await;
        self.db.db().clone().close().await;
    }
}

/// A `db_v2` error as a CLI error (storage errors keep their kinds).
pub(crate) fn from_db_v2(e: pattern::search::Error) -> CliError {
    use pattern::search::Error as E;
    match e {
        E::Db(db) => db.into(),
        E::EmptyQuery | E::QueryTooLong { .. } | E::InvalidLimit { .. } => {
            CliError::usage(e.to_string())
        }
        E::VectorSearchNotConfigured => CliError::usage(
            "vector search needs embeddings: set `enabled = true` under [embedding] in config.toml \
             and run `pattern setup`",
        ),
        E::EmbeddingModelMismatch { .. } => CliError::conflict(e.to_string()),
        other => CliError::other(other.to_string()),
    }
}
