//! Where a command's data lives and how it is opened: the data directory (flag, env, or the XDG
//! default), `config.toml` in it, the database URL (flag, env, config, or the data directory's
//! SQLite file), and the agent a command acts on (`--agent` or `agent.default`).
//!
//! This module must never create anything except through `pattern init`: opening a data
//! directory that was never initialised is an error, so a typo in `--data-dir` does not leave a
//! stray empty database behind.

use std::path::{Path, PathBuf};

use pattern::db::{Database, DbConfig, MachineId};
use pattern::{Agent, DATABASE_FILE, Durability, Pattern, PatternConfig};
use serde::Deserialize;

use crate::cli::{AgentArg, Global};
use crate::error::{CliError, Result, io};

/// File name of the configuration inside the data directory.
pub(crate) const CONFIG_FILE: &str = "config.toml";

/// The parts of `config.toml` the CLI reads today; other sections are for later layers (model
/// providers, embedding) and are accepted as they are.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Config {
    #[serde(default)]
    pub(crate) agent: AgentSection,
    #[serde(default)]
    pub(crate) database: DatabaseSection,
    #[serde(default)]
    pub(crate) embedding: EmbeddingSection,
    #[serde(default)]
    pub(crate) runs: RunsSection,
    #[serde(default)]
    pub(crate) server: ServerSection,
    #[serde(default)]
    pub(crate) mcp: McpSection,
}

/// `[mcp]`: MCP servers of agents, besides those stored with `pattern mcp add` (decision 0015).
/// One `[[mcp.servers]]` table per server: `agent`, `name`, and `command` (with `args`, `env`)
/// or `url`. One of these replaces a stored server of the same agent and name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpSection {
    #[serde(default)]
    pub(crate) servers: Vec<McpServerEntry>,
}

/// One `[[mcp.servers]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerEntry {
    /// The agent (its name as `pattern agent list` shows it).
    pub(crate) agent: String,
    /// The server's name.
    pub(crate) name: String,
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) url: Option<String>,
}

impl Config {
    /// The MCP servers config.toml gives `agent` (checked; a bad one is a usage error naming
    /// the file).
    pub(crate) fn mcp_servers(
        &self,
        agent: &str,
        path: &Path,
    ) -> Result<Vec<pattern::core::mcp::McpServerConfig>> {
        self.mcp
            .servers
            .iter()
            .filter(|s| s.agent == agent)
            .map(|s| {
                let mut json = serde_json::Map::new();
                if let Some(command) = &s.command {
                    json.insert("command".into(), command.clone().into());
                }
                if !s.args.is_empty() {
                    json.insert("args".into(), serde_json::json!(s.args));
                }
                if !s.env.is_empty() {
                    json.insert("env".into(), serde_json::json!(s.env));
                }
                if let Some(url) = &s.url {
                    json.insert("url".into(), url.clone().into());
                }
                pattern::core::mcp::McpServerConfig::from_json(&s.name, &json.into()).map_err(|e| {
                    CliError::usage(format!("{}: [[mcp.servers]]: {e}", path.display()))
                })
            })
            .collect()
    }
}

/// `[runs]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunsSection {
    /// How long a process's registration lasts without a heartbeat, in seconds (default 20):
    /// the longest a dead process's runs keep their agents before their batches are abandoned.
    pub(crate) lease_secs: Option<f64>,
}

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSection {
    /// On SIGTERM, how long turns in flight may go on before they are cancelled, in seconds
    /// (default 10).
    pub(crate) drain_secs: Option<f64>,
    /// Browser origins allowed to call the API (`["https://app.example.com"]`, or `["*"]`).
    pub(crate) cors_origins: Option<Vec<String>>,
}

/// `[embedding]`
#[derive(Debug, Default, Deserialize)]
pub(crate) struct EmbeddingSection {
    /// Compute embeddings (vector and hybrid search); `pattern init` writes `true`.
    #[serde(default)]
    pub(crate) enabled: bool,
}

/// `[agent]`
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AgentSection {
    /// The agent commands act on when `--agent` is not given.
    pub(crate) default: Option<String>,
}

/// `[database]`
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DatabaseSection {
    /// A database URL instead of the data directory's SQLite file.
    pub(crate) url: Option<String>,
    /// `full` (default) or `normal`.
    pub(crate) durability: Option<String>,
}

/// A command's surroundings, resolved from flags, environment and config file.
#[derive(Debug)]
pub(crate) struct Env {
    /// The data directory.
    pub(crate) data_dir: PathBuf,
    /// `--database-url` / `PATTERN_DATABASE_URL`.
    url_override: Option<String>,
    /// Print JSON.
    pub(crate) json: bool,
}

impl Env {
    /// Resolves the data directory; reads nothing yet.
    pub(crate) fn resolve(global: &Global) -> Result<Self> {
        let data_dir = match &global.data_dir {
            Some(dir) => dir.clone(),
            None => default_data_dir()?,
        };
        Ok(Self {
            data_dir,
            url_override: global.database_url.clone(),
            json: global.json,
        })
    }

    /// `DIR/config.toml`.
    pub(crate) fn config_path(&self) -> PathBuf {
        self.data_dir.join(CONFIG_FILE)
    }

    /// `DIR/pattern.db`.
    pub(crate) fn sqlite_path(&self) -> PathBuf {
        self.data_dir.join(DATABASE_FILE)
    }

    /// The configuration file, or defaults when there is none.
    pub(crate) fn config(&self) -> Result<Config> {
        let path = self.config_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| {
                CliError::usage(format!(
                    "{}: {}",
                    path.display(),
                    e.message().replace('\n', " ")
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(io(&path, &e)),
        }
    }

    /// The database URL given explicitly (flag, env, config), if any.
    pub(crate) fn explicit_url(&self, config: &Config) -> Option<String> {
        self.url_override
            .clone()
            .or_else(|| config.database.url.clone())
    }

    /// How Pattern is opened. Without the embedder: commands that search open the search layer
    /// themselves (`crate::search_db`), and agent turns ask for it (`commands::chat`), so plain
    /// commands do not pay for loading the model.
    pub(crate) fn pattern_config(&self, config: &Config) -> Result<PatternConfig> {
        let base = match self.explicit_url(config) {
            Some(url) => PatternConfig::url(url),
            None => PatternConfig::sqlite_file(self.sqlite_path()),
        };
        let durability = match config.database.durability.as_deref() {
            None | Some("full") => Durability::Full,
            Some("normal") => Durability::Normal,
            Some(other) => {
                return Err(CliError::usage(format!(
                    "{}: database.durability must be `full` or `normal`, not `{other}`",
                    self.config_path().display()
                )));
            }
        };
        let mut base = base
            .with_durability(durability)
            .with_embedding(pattern::Embedding::Off);
        if let Some(secs) = config.runs.lease_secs {
            base = base.with_run_lease(seconds("runs.lease_secs", secs, 0.5, &self.config_path())?);
        }
        Ok(base)
    }

    /// Refuses a data directory that `pattern init` never set up (when it holds the database).
    pub(crate) fn check_initialised(&self, config: &Config) -> Result<()> {
        if self.explicit_url(config).is_none() && !self.sqlite_path().exists() {
            return Err(CliError::not_found(format!(
                "no Pattern database in {}: run `pattern init` first (or pass --data-dir / \
                 --database-url)",
                self.data_dir.display()
            )));
        }
        Ok(())
    }

    /// Opens Pattern (migrating pending migrations).
    pub(crate) async fn open(&self) -> Result<(Pattern, Config)> {
        let config = self.config()?;
        self.check_initialised(&config)?;
        let pattern = Pattern::open(self.pattern_config(&config)?).await?;
        Ok((pattern, config))
    }

    /// Opens the layers with the embedder when `[embedding] enabled` (for commands that run
    /// agents: their archival writes and searches use it), else full-text only.
    pub(crate) async fn open_for_agents(&self) -> Result<(Pattern, Config)> {
        self.open_for_agents_with(None).await
    }

    /// [`Env::open_for_agents`] with a run lease that overrides `[runs] lease_secs`.
    pub(crate) async fn open_for_agents_with(
        &self,
        run_lease: Option<std::time::Duration>,
    ) -> Result<(Pattern, Config)> {
        let config = self.config()?;
        self.check_initialised(&config)?;
        let embedding = if config.embedding.enabled {
            pattern::Embedding::Auto
        } else {
            pattern::Embedding::Off
        };
        let mut pattern_config = self.pattern_config(&config)?.with_embedding(embedding);
        if let Some(lease) = run_lease {
            pattern_config = pattern_config.with_run_lease(lease);
        }
        let pattern = Pattern::open(pattern_config).await?;
        Ok((pattern, config))
    }

    /// Opens the database for operator work on migrations: no automatic migration, and a fixed
    /// machine id (the lease table may not exist).
    pub(crate) async fn open_for_migrations(&self) -> Result<Database> {
        let config = self.config()?;
        self.check_initialised(&config)?;
        let mut db: DbConfig = self.pattern_config(&config)?.db_config()?;
        db.migrate_on_open = false;
        db.machine_id = MachineId::Fixed(pattern::db::id::MAX_MACHINE_ID);
        Ok(Database::open(db).await?)
    }
}

/// A duration in seconds from the configuration, at least `min`.
pub(crate) fn seconds(what: &str, secs: f64, min: f64, path: &Path) -> Result<std::time::Duration> {
    if !secs.is_finite() || secs < min || secs > 86_400.0 {
        return Err(CliError::usage(format!(
            "{}: {what} must be between {min} and 86400 seconds, not {secs}",
            path.display()
        )));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The agent a command acts on: `--agent NAME`, else `agent.default` from config.toml.
pub(crate) async fn agent(pattern: &Pattern, config: &Config, arg: &AgentArg) -> Result<Agent> {
    let name = arg
        .agent
        .clone()
        .or_else(|| config.agent.default.clone())
        .ok_or_else(|| {
            CliError::usage(
                "no agent given: pass --agent NAME or set `default` under [agent] in config.toml",
            )
        })?;
    agent_named(pattern, &name).await
}

/// The organization this process acts in (`--org`), set once by `main`.
static ORGANIZATION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the organization of this process's commands (`--org`; `None`: the local one). Only the
/// first call counts.
pub(crate) fn set_organization(external_id: Option<String>) {
    let _ = ORGANIZATION.set(external_id.unwrap_or_else(|| pattern::db::LOCAL_ORGANIZATION.into()));
}

/// The external id of the organization this process acts in.
pub(crate) fn organization_external_id() -> &'static str {
    ORGANIZATION
        .get()
        .map_or(pattern::db::LOCAL_ORGANIZATION, String::as_str)
}

/// The organization this process acts in; the local one is created on first use, any other
/// must exist (`pattern org create`).
pub(crate) async fn organization(pattern: &Pattern) -> Result<pattern::db::OrganizationId> {
    organization_id(pattern.db()).await
}

/// [`organization`] on a bare database.
pub(crate) async fn organization_id(db: &pattern::Database) -> Result<pattern::db::OrganizationId> {
    let external_id = organization_external_id();
    match db.organization_by_external_id(external_id).await {
        Ok(org) => Ok(org.id),
        Err(pattern::db::Error::Protocol(pattern::db::ProtocolError::ExternalIdNotFound {
            ..
        })) if external_id == pattern::db::LOCAL_ORGANIZATION => {
            match db.create_organization(external_id, external_id).await {
                Ok(org) => Ok(org.id),
                // Created by another process in between.
                Err(pattern::db::Error::Protocol(
                    pattern::db::ProtocolError::ExternalIdTaken { .. },
                )) => Ok(db.organization_by_external_id(external_id).await?.id),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The agent with this name in this process's organization (`--org`).
pub(crate) async fn agent_named(pattern: &Pattern, name: &str) -> Result<Agent> {
    let org = organization(pattern).await?;
    Ok(pattern.db().agent_in_scope(Some(org), name).await?)
}

/// `$XDG_DATA_HOME/pattern` (or the platform's equivalent).
fn default_data_dir() -> Result<PathBuf> {
    use etcetera::BaseStrategy;
    let strategy = etcetera::choose_base_strategy().map_err(|e| {
        CliError::usage(format!(
            "cannot find a home directory for the default data directory ({e}): pass --data-dir"
        ))
    })?;
    Ok(strategy.data_dir().join("pattern"))
}

/// Whether `path` exists, as a CLI error on failure to check.
pub(crate) fn exists(path: &Path) -> Result<bool> {
    path.try_exists().map_err(|e| io(path, &e))
}
