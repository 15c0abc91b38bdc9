//! [`Pattern::open`]: one database, and every layer wired over it.
//!
//! A [`PatternConfig`] says where the data lives (a data directory, a SQLite file, or a database
//! URL such as PostgreSQL's) and how durable commits are; opening creates the data directory when
//! asked to, opens and migrates the database, and builds the memory store and the protocol handle
//! on it. This module must never hold behaviour of a layer: it only constructs and hands out.

use std::path::{Path, PathBuf};

use memory_v2::DbMemoryStore;
use pattern_db::{AgentId, Database, DbConfig, Durability, MessageStore};
use pattern_protocol::Protocol;

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

/// How to open Pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternConfig {
    /// Where the database lives.
    pub location: DatabaseLocation,
    /// SQLite durability (PostgreSQL follows its own settings); default
    /// [`Durability::Full`].
    pub durability: Durability,
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
        }
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
    memory: DbMemoryStore,
    protocol: Protocol,
}

impl Pattern {
    /// Opens Pattern: creates the data directory when the configuration names one, opens (and
    /// migrates) the database, and wires memory and protocol over it.
    pub async fn open(config: PatternConfig) -> Result<Self> {
        if let DatabaseLocation::DataDir(dir) = &config.location {
            std::fs::create_dir_all(dir).map_err(|source| Error::DataDir {
                path: dir.clone(),
                source,
            })?;
        }
        Self::open_with(config.db_config()?).await
    }

    /// Opens Pattern over a database described by a full storage configuration.
    pub async fn open_with(config: DbConfig) -> Result<Self> {
        Self::wire(Database::open(config).await?).await
    }

    /// Wires the layers over an open database (on PostgreSQL the protocol starts listening for
    /// wake-ups before this returns).
    pub async fn wire(db: Database) -> Result<Self> {
        Ok(Self {
            memory: DbMemoryStore::new(db.clone()),
            protocol: Protocol::new(db.clone()).await?,
            db,
        })
    }

    /// The database: agents, batches, recovery, migrations.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// One agent's message store.
    pub fn messages(&self, agent: AgentId) -> MessageStore {
        self.db.messages(agent)
    }

    /// Memory blocks, for every agent (the agent is a parameter of each call).
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
            memory,
            protocol,
        } = self;
        drop(memory);
        drop(protocol);
        db.close().await;
    }
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
