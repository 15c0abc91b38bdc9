//! The command line grammar (clap derive): global options and every subcommand with its
//! arguments. This module must never do work: `main` and `commands` act on what it parses.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Pattern: stateful LLM agents whose memory and history survive crashes.
#[derive(Debug, Parser)]
#[command(name = "pattern", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Global options.
    #[command(flatten)]
    pub(crate) global: Global,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command accepts.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Data directory (database, config.toml). Default: the XDG data directory
    /// (`$XDG_DATA_HOME/pattern`, usually `~/.local/share/pattern`).
    #[arg(long, global = true, env = "PATTERN_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Database URL (`postgres://USER@HOST:PORT/DB` or `sqlite://PATH`) instead of the data
    /// directory's SQLite file.
    #[arg(long, global = true, env = "PATTERN_DATABASE_URL", value_name = "URL")]
    pub(crate) database_url: Option<String>,
    /// Print data as JSON (shapes documented in docs/cli.md).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More logging to stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the data directory, the database (migrated) and a commented config.toml.
    Init,
    /// Create, list, show and delete agents.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Memory of an agent.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Inspect an agent's message batches.
    #[command(subcommand)]
    Batches(BatchesCommand),
    /// Abandon open batches whose run is gone, and list what was abandoned.
    Recover(RecoverArgs),
    /// Apply, revert or list database migrations.
    #[command(subcommand)]
    Migrate(MigrateCommand),
    /// Write a whole agent to a file.
    Export(ExportArgs),
    /// Read a whole agent from a file written by `export`.
    Import(ImportArgs),
    /// Agent-to-agent sessions (the protocol).
    #[command(subcommand)]
    Session(SessionCommand),
    /// Talk with an agent: streamed answers, tool calls shown as they happen, Ctrl-C cancels
    /// the turn.
    Chat(ChatArgs),
    /// One turn with an agent, for scripts.
    Send(SendArgs),
    /// The main job: a real agent conversation on the embedded defaults (a local model server,
    /// the offline embedding model), then its stored batches and a search.
    Demo(DemoArgs),
}

/// `pattern agent ...`
#[derive(Debug, Subcommand)]
pub(crate) enum AgentCommand {
    /// Create an agent.
    Create {
        /// Unique name.
        name: String,
        /// The agent's instructions (system prompt), stored in its metadata.
        #[arg(long)]
        instructions: Option<String>,
    },
    /// List agents.
    List,
    /// Show one agent.
    Show {
        /// The agent's name.
        name: String,
    },
    /// Delete an agent and everything stored for it.
    Delete {
        /// The agent's name.
        name: String,
        /// Confirm: deleting cannot be undone.
        #[arg(long)]
        yes: bool,
    },
}

/// `pattern memory ...`
#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// Memory blocks: always in context, size-limited, versioned.
    #[command(subcommand)]
    Block(BlockCommand),
}

/// Selects the agent a command acts on.
#[derive(Debug, Args, Clone)]
pub(crate) struct AgentArg {
    /// The agent (default: `agent.default` in config.toml).
    #[arg(long, value_name = "NAME")]
    pub(crate) agent: Option<String>,
}

/// Optimistic concurrency for block writes.
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct ExpectArg {
    /// Refuse the change (exit 4) unless the block is at this version.
    #[arg(long, value_name = "VERSION")]
    pub(crate) expect_version: Option<i64>,
}

/// `pattern memory block ...`
#[derive(Debug, Subcommand)]
pub(crate) enum BlockCommand {
    /// List the agent's blocks.
    List {
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Show one block.
    Show {
        /// The block's label.
        label: String,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Create a block.
    Create {
        /// Label: 1 to 100 characters of a-z, 0-9, `_`, `-`.
        label: String,
        /// Most characters the value may hold.
        #[arg(long)]
        limit: usize,
        /// What the block is for (shown to the model).
        #[arg(long, default_value = "")]
        description: String,
        /// First value.
        #[arg(long, default_value = "")]
        value: String,
        /// Block type: core, working, archival or log.
        #[arg(long = "type", default_value = "core")]
        block_type: String,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Replace a block's value.
    Set {
        /// The block's label.
        label: String,
        /// The new value (never cut: over the limit is refused).
        value: String,
        #[command(flatten)]
        expect: ExpectArg,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Append text on a new line.
    Append {
        /// The block's label.
        label: String,
        /// The text to append.
        text: String,
        #[command(flatten)]
        expect: ExpectArg,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Every version of a block, newest first.
    History {
        /// The block's label.
        label: String,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Restore the value from before the latest change (as a new version).
    Undo {
        /// The block's label.
        label: String,
        #[command(flatten)]
        expect: ExpectArg,
        #[command(flatten)]
        agent: AgentArg,
    },
}

/// `pattern batches ...`
#[derive(Debug, Subcommand)]
pub(crate) enum BatchesCommand {
    /// The agent's batches, newest first.
    List {
        #[command(flatten)]
        agent: AgentArg,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// One batch: state, type, messages, tool pairs, timings.
    Show {
        /// The batch id.
        id: String,
        #[command(flatten)]
        agent: AgentArg,
    },
}

/// `pattern recover`
#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// Abandon every open batch, not only those whose run lease expired (only when no Pattern
    /// process uses the database).
    #[arg(long)]
    pub(crate) all_open: bool,
}

/// `pattern migrate ...`
#[derive(Debug, Subcommand)]
pub(crate) enum MigrateCommand {
    /// Apply pending migrations.
    Up,
    /// Revert migrations down to VERSION (kept; default 0: all). Destroys data.
    Down {
        /// The version to keep.
        #[arg(long, default_value_t = 0)]
        to: i64,
        /// Confirm: reverting destroys stored data.
        #[arg(long)]
        yes: bool,
    },
    /// Every shipped migration and whether it is applied.
    Status,
}

/// `pattern export`
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The agent to export.
    pub(crate) agent: String,
    /// The file to write (replaced atomically).
    pub(crate) file: PathBuf,
}

/// `pattern import`
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// A file written by `pattern export`.
    pub(crate) file: PathBuf,
    /// Import under this name instead of the exported one.
    #[arg(long, value_name = "NEW")]
    pub(crate) rename: Option<String>,
}

/// `pattern session ...`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Open a session between two agents (or return the live one).
    Create {
        /// The opening agent (speaks first in a sync session).
        a: String,
        /// The other agent.
        b: String,
        /// Strict turns instead of an inbox.
        #[arg(long)]
        sync: bool,
    },
    /// Send a message in a session.
    Send {
        /// The session id.
        session: String,
        /// The sending agent.
        #[arg(long = "from", value_name = "AGENT")]
        from: String,
        /// The message text (or JSON with --raw).
        message: String,
        /// The message is JSON content, stored as given.
        #[arg(long)]
        raw: bool,
        /// The message type.
        #[arg(long = "type", default_value = "chat")]
        message_type: String,
    },
    /// Read a session's messages, or an agent's unread inbox.
    Read {
        /// The session id (omit with --agent to read the inbox).
        session: Option<String>,
        /// Read this agent's unread inbox.
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
        /// With --agent: mark what was read as read.
        #[arg(long)]
        mark_read: bool,
    },
    /// Show one session.
    Show {
        /// The session id.
        session: String,
    },
    /// End a session.
    End {
        /// The session id.
        session: String,
        /// The participant that ends it.
        #[arg(long = "by", value_name = "AGENT")]
        by: String,
    },
}

/// `pattern chat [AGENT]`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The agent (default: `[agent] default` in config.toml).
    pub(crate) agent: Option<String>,
}

/// `pattern send AGENT MESSAGE`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The agent.
    pub(crate) agent: String,
    /// The message.
    pub(crate) message: String,
}

/// `pattern demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Most model calls per turn.
    #[arg(long, default_value_t = 2)]
    pub(crate) max_iterations: usize,
}
