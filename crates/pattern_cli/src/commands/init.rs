//! `pattern init`: the data directory, the database (migrated) and a commented `config.toml`.
//! Idempotent: a second run changes nothing it already made and says "already initialised". It
//! must never overwrite an existing config file.

use std::io::Write;

use pattern::Pattern;
use serde::Serialize;

use crate::env::{Env, exists};
use crate::error::{Result, io};
use crate::output;

/// The commented configuration `init` writes.
pub(crate) const CONFIG_TEMPLATE: &str = r#"# Pattern configuration. Every value here can be left out; the defaults are shown commented.
# Command-line flags and PATTERN_* environment variables take precedence over this file.

[agent]
# The agent that commands act on when --agent is not given.
# default = "ada"

[database]
# By default the database is pattern.db in this directory (SQLite).
# A PostgreSQL server instead (also: --database-url, PATTERN_DATABASE_URL):
# url = "postgres://pattern@127.0.0.1:5432/pattern"
# SQLite commit durability: "full" survives power loss (default); "normal" survives a process
# crash and is faster.
# durability = "full"

[embedding]
# Embeddings for archival memory and search, computed locally with the bundled offline model.
enabled = true

# The model provider agents talk to. Pick one section and uncomment it. API keys are read from
# the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY), never from this file.
[model]
# provider = "llamacpp"

# A local llama.cpp server (OpenAI-compatible API), e.g. started by `cargo xtask` tooling.
# [model.llamacpp]
# base_url = "http://127.0.0.1:8080/v1"
# model = "qwen2.5-0.5b-instruct"

# Anthropic (key from ANTHROPIC_API_KEY).
# [model.anthropic]
# model = "claude-sonnet-4-5"
# max_tokens = 4096

# OpenAI (key from OPENAI_API_KEY).
# [model.openai]
# model = "gpt-4.1-mini"
# base_url = "https://api.openai.com/v1"

# Google Gemini (key from GEMINI_API_KEY).
# [model.gemini]
# model = "gemini-2.5-flash"
"#;

#[derive(Serialize)]
struct InitReport {
    data_dir: String,
    config_file: String,
    database: String,
    backend: &'static str,
    already_initialised: bool,
}

pub(crate) async fn run(env: &Env) -> Result<()> {
    std::fs::create_dir_all(&env.data_dir).map_err(|e| io(&env.data_dir, &e))?;
    let config_path = env.config_path();
    let had_config = exists(&config_path)?;
    if !had_config {
        write_new(&config_path, CONFIG_TEMPLATE)?;
    }
    // The config file may name the database; read it after writing the template.
    let config = env.config()?;
    let explicit = env.explicit_url(&config).is_some();
    let had_database = explicit || exists(&env.sqlite_path())?;
    let pattern = Pattern::open(env.pattern_config(&config)?).await?;
    let report = InitReport {
        data_dir: env.data_dir.display().to_string(),
        config_file: config_path.display().to_string(),
        database: pattern.db().url().to_owned(),
        backend: pattern.db().backend().name(),
        already_initialised: had_config && had_database,
    };
    pattern.close().await;
    if env.json {
        return output::json(&report);
    }
    if report.already_initialised {
        output::line(&format!("already initialised: {}", report.data_dir))
    } else {
        output::line(&format!(
            "initialised {}\n  config:   {}\n  database: {}",
            report.data_dir, report.config_file, report.database
        ))
    }
}

/// Writes a file that must not exist yet (another `init` racing us keeps its file).
fn write_new(path: &std::path::Path, text: &str) -> Result<()> {
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io(path, &e)),
    };
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io(path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses_and_says_what_the_cli_reads() {
        let config: crate::env::Config = toml::from_str(CONFIG_TEMPLATE).unwrap();
        assert!(config.agent.default.is_none());
        assert!(config.database.url.is_none());
        let all: toml::Table = toml::from_str(CONFIG_TEMPLATE).unwrap();
        assert_eq!(all["embedding"]["enabled"].as_bool(), Some(true));
        for provider in ["llamacpp", "anthropic", "openai", "gemini"] {
            assert!(CONFIG_TEMPLATE.contains(&format!("[model.{provider}]")));
        }
    }
}
