//! Providers from configuration: the model an application's agents run on, chosen the same way
//! by every front door (the CLI's `chat`, `send` and `serve`, and applications).
//!
//! **Per agent** ([`AgentModel`]): an agent may name its own model in its metadata under
//! `"model"`: `{"provider": "openai|anthropic|gemini|local|openai_compatible", "model": "...",
//! "base_url"?}`. Keys are never stored: they stay in the environment. [`Models`] hands each
//! agent its provider: its own model's (built once per provider, model and base URL, then
//! shared), else the process's default. A model that cannot be reached here (no key, no local
//! server, no default) gets an [`UnavailableProvider`]: the agent still loads and every turn
//! fails with a typed error naming what is missing, nothing lost.
//!
//! [`ModelChoice::resolve`] picks, in order: an API key in the environment
//! (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY`), then an OpenAI-compatible server
//! the caller configured (e.g. llama.cpp), then a local llama.cpp server it starts (installed by
//! `pattern setup`) and keeps for as long as the returned [`Model`] lives. This module only
//! constructs providers; it must never log or print an API key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use context_v2::{ModelInfo, Provider};
use pattern_core::local_server::{LocalModel, LocalModelServer, LocalServerConfig};
use pattern_core::provider::{ApiKey, ModelProvider, ProviderConfig, UnavailableProvider};
use pattern_db::Agent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The metadata key under which an agent's model is stored.
pub const MODEL_METADATA_KEY: &str = "model";

/// Who serves an agent's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModelSource {
    /// OpenAI (`OPENAI_API_KEY`).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic (`ANTHROPIC_API_KEY`).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Google Gemini (`GEMINI_API_KEY`).
    #[serde(rename = "gemini")]
    Gemini,
    /// The local llama.cpp server this process runs (`pattern serve --local-model`).
    #[serde(rename = "local")]
    Local,
    /// Any OpenAI-compatible server at `base_url` (llama.cpp, vLLM, Ollama); no key.
    #[serde(rename = "openai_compatible")]
    OpenAiCompatible,
}

impl ModelSource {
    /// Its name in `PROVIDER/MODEL` and in the stored JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelSource::OpenAi => "openai",
            ModelSource::Anthropic => "anthropic",
            ModelSource::Gemini => "gemini",
            ModelSource::Local => "local",
            ModelSource::OpenAiCompatible => "openai_compatible",
        }
    }

    fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "openai" => ModelSource::OpenAi,
            "anthropic" => ModelSource::Anthropic,
            "gemini" => ModelSource::Gemini,
            "local" => ModelSource::Local,
            "openai_compatible" => ModelSource::OpenAiCompatible,
            other => {
                return Err(Error::InvalidModel(format!(
                    "unknown provider `{other}` (one of openai, anthropic, gemini, local,                      openai_compatible)"
                )));
            }
        })
    }

    /// The environment variable holding this provider's key, if it takes one.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            ModelSource::OpenAi => Some("OPENAI_API_KEY"),
            ModelSource::Anthropic => Some("ANTHROPIC_API_KEY"),
            ModelSource::Gemini => Some("GEMINI_API_KEY"),
            ModelSource::Local | ModelSource::OpenAiCompatible => None,
        }
    }
}

/// An agent's own model, stored in its metadata under [`MODEL_METADATA_KEY`] (module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentModel {
    /// Who serves it.
    pub provider: ModelSource,
    /// The model's name at that provider.
    pub model: String,
    /// Another base URL than the provider's own (required for `openai_compatible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
}

impl AgentModel {
    /// `PROVIDER/MODEL` (the model may itself contain `/`), with an optional base URL; checked.
    pub fn parse(spec: &str, base_url: Option<String>) -> Result<Self> {
        let Some((provider, model)) = spec.split_once('/') else {
            return Err(Error::InvalidModel(format!(
                "`{spec}` is not PROVIDER/MODEL (e.g. openai/gpt-4.1-mini)"
            )));
        };
        let model = Self {
            provider: ModelSource::parse(provider)?,
            model: model.to_owned(),
            base_url,
        };
        model.check()?;
        Ok(model)
    }

    /// A JSON value (as stored, or as an API client sent it), checked.
    pub fn from_json(value: &Value) -> Result<Self> {
        let model = match value {
            Value::String(spec) => return Self::parse(spec, None),
            other => Self::deserialize(other).map_err(|e| {
                Error::InvalidModel(format!("a model is {{provider, model, base_url?}}: {e}"))
            })?,
        };
        model.check()?;
        Ok(model)
    }

    /// The rules: a name of 1 to 200 characters without control characters; a base URL that is
    /// `http://` or `https://`, required for `openai_compatible` and refused for `local`.
    pub fn check(&self) -> Result<()> {
        let name = &self.model;
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(Error::InvalidModel(format!(
                "model name `{name}`: 1 to 200 characters, no control characters"
            )));
        }
        match (&self.base_url, self.provider) {
            (Some(url), ModelSource::Local) => Err(Error::InvalidModel(format!(
                "a local model takes no base URL (got `{url}`)"
            ))),
            (Some(url), _) if !(url.starts_with("http://") || url.starts_with("https://")) => Err(
                Error::InvalidModel(format!("base URL `{url}` is not http:// or https://")),
            ),
            (None, ModelSource::OpenAiCompatible) => Err(Error::InvalidModel(
                "an openai_compatible model needs its server's base URL".to_owned(),
            )),
            _ => Ok(()),
        }
    }

    /// `PROVIDER/MODEL`, for people.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.provider.as_str(), self.model)
    }

    /// The agent's own model, if its metadata names one; a stored value that is not a model is
    /// [`Error::InvalidModel`].
    pub fn of(agent: &Agent) -> Result<Option<Self>> {
        match agent.metadata.get(MODEL_METADATA_KEY) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => Self::from_json(value).map(Some),
        }
    }

    /// `metadata` with this model stored in it (`None` removes it); other keys are kept.
    pub fn store(model: Option<&Self>, metadata: &Value) -> Value {
        let mut map = match metadata {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        match model {
            Some(model) => {
                map.insert(
                    MODEL_METADATA_KEY.to_owned(),
                    serde_json::to_value(model).unwrap_or(Value::Null),
                );
            }
            None => {
                map.remove(MODEL_METADATA_KEY);
            }
        }
        Value::Object(map)
    }

    /// The window this model is given (the provider's documented one for hosted models; 8192
    /// tokens for a server we know nothing about).
    fn window(&self) -> usize {
        match self.provider {
            ModelSource::Anthropic => 200_000,
            ModelSource::OpenAi => 128_000,
            ModelSource::Gemini => 1_000_000,
            ModelSource::Local | ModelSource::OpenAiCompatible => 8_192,
        }
    }

    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: match self.provider {
                ModelSource::Anthropic => Provider::Anthropic,
                ModelSource::Gemini => Provider::Gemini,
                _ => Provider::OpenAi,
            },
            model: self.model.clone(),
            context_window: self.window(),
            max_output_tokens: match self.provider {
                ModelSource::Local | ModelSource::OpenAiCompatible => 512,
                _ => 4_096,
            },
        }
    }
}

/// Every agent's provider in one process: the default, the local server's, and those built for
/// agents' own models (one per model, shared by its agents). Cheap to share behind an `Arc`.
pub struct Models {
    default: Option<Arc<dyn ModelProvider>>,
    local: Option<Arc<dyn ModelProvider>>,
    built: Mutex<HashMap<AgentModel, Arc<dyn ModelProvider>>>,
}

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models")
            .field(
                "default",
                &self.default.as_ref().map(|p| p.model().model.clone()),
            )
            .field(
                "local",
                &self.local.as_ref().map(|p| p.model().model.clone()),
            )
            .finish_non_exhaustive()
    }
}

/// What an agent without a model of its own gets when the process has no default.
const NO_DEFAULT: &str = "no model is configured for this agent or this server: give the agent      one (`pattern agent set-model NAME PROVIDER/MODEL`, or `PUT /v1/agents/{id}/model`), set      ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY, configure [model] in config.toml, or      start `pattern serve --local-model`";

impl Models {
    /// Agents without a model of their own use `default`; `None`: their turns fail with a typed
    /// error naming what to configure.
    pub fn new(default: Option<Arc<dyn ModelProvider>>) -> Self {
        Self {
            default,
            local: None,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// The provider of the local server this process runs: agents whose model is `local/NAME`
    /// (NAME the served model) use it.
    pub fn with_local(mut self, local: Arc<dyn ModelProvider>) -> Self {
        self.local = Some(local);
        self
    }

    /// The default provider, or an unavailable one saying what to configure.
    pub fn default_provider(&self) -> Arc<dyn ModelProvider> {
        self.default.clone().unwrap_or_else(|| {
            Arc::new(UnavailableProvider::new(
                ModelInfo {
                    provider: Provider::OpenAi,
                    model: "none".into(),
                    context_window: 8_192,
                    max_output_tokens: 512,
                },
                NO_DEFAULT,
            ))
        })
    }

    /// The provider `agent` runs on (module doc). Never fails: what cannot be reached is an
    /// [`UnavailableProvider`] with the reason.
    pub fn for_agent(&self, agent: &Agent) -> Arc<dyn ModelProvider> {
        match AgentModel::of(agent) {
            Ok(None) => self.default_provider(),
            Ok(Some(model)) => self.provider(&model).unwrap_or_else(|e| {
                Arc::new(UnavailableProvider::new(model.info(), e.to_string()))
            }),
            Err(e) => Arc::new(UnavailableProvider::new(
                self.default_provider().model().clone(),
                format!("agent {}: {e}", agent.name),
            )),
        }
    }

    /// The provider of `model`, built on first use and shared afterwards. No key for a hosted
    /// provider, or `local` without the local server, is [`Error::ModelUnavailable`].
    pub fn provider(&self, model: &AgentModel) -> Result<Arc<dyn ModelProvider>> {
        if let Ok(built) = self.built.lock()
            && let Some(found) = built.get(model)
        {
            return Ok(found.clone());
        }
        let provider = self.build(model)?;
        if let Ok(mut built) = self.built.lock() {
            return Ok(built.entry(model.clone()).or_insert(provider).clone());
        }
        Ok(provider)
    }

    fn build(&self, model: &AgentModel) -> Result<Arc<dyn ModelProvider>> {
        if model.provider == ModelSource::Local {
            let Some(local) = &self.local else {
                return Err(Error::ModelUnavailable(format!(
                    "{}: no local model server runs in this process (start `pattern serve                      --local-model`)",
                    model.spec()
                )));
            };
            if local.model().model != model.model {
                return Err(Error::ModelUnavailable(format!(
                    "{}: the local server serves `{}`",
                    model.spec(),
                    local.model().model
                )));
            }
            return Ok(local.clone());
        }
        let mut config = ProviderConfig::new(model.info());
        if let Some(variable) = model.provider.key_variable() {
            let key = std::env::var(variable).ok().filter(|v| !v.is_empty());
            let Some(key) = key else {
                return Err(Error::ModelUnavailable(format!(
                    "{}: {variable} is not set in this process's environment",
                    model.spec()
                )));
            };
            config.api_key = Some(ApiKey::new(key));
        } else {
            config.name = Some(model.provider.as_str().to_owned());
        }
        config.base_url = model.base_url.clone();
        Ok(Arc::from(
            config.build().map_err(pattern_core::Error::from)?,
        ))
    }
}

/// Where the model comes from when no API key is in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// An OpenAI-compatible server already running (`base_url`, model name).
    pub openai_compatible: Option<(String, String)>,
    /// The local model to start otherwise.
    pub local: LocalModel,
    /// Largest answer asked of a local server (small keeps a small model responsive).
    pub local_max_output_tokens: usize,
    /// The llama.cpp folder; `None` finds it through [`crate::install::llama_dir`].
    pub llama_dir: Option<std::path::PathBuf>,
}

impl Default for ModelChoice {
    fn default() -> Self {
        Self {
            openai_compatible: None,
            local: LocalModel::Qwen,
            local_max_output_tokens: 256,
            llama_dir: None,
        }
    }
}

/// A model provider, and the local server behind it when one was started (stopped when this is
/// dropped).
pub struct Model {
    /// The provider agents use.
    pub provider: Arc<dyn ModelProvider>,
    /// Where it came from, for people: `anthropic`, `openai`, `gemini`, `configured`, `local`.
    pub source: &'static str,
    server: Option<LocalModelServer>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("model", &self.provider.model().model)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// The local server started for this model, if any.
    pub fn local_server(&self) -> Option<&LocalModelServer> {
        self.server.as_ref()
    }
}

fn hosted(
    provider: Provider,
    model: &str,
    window: usize,
    key: String,
    source: &'static str,
) -> Result<Model> {
    let mut config = ProviderConfig::new(ModelInfo {
        provider,
        model: model.to_owned(),
        context_window: window,
        max_output_tokens: 4_096,
    });
    config.api_key = Some(ApiKey::new(key));
    Ok(Model {
        provider: Arc::from(config.build().map_err(pattern_core::Error::from)?),
        source,
        server: None,
    })
}

impl Model {
    /// A model over `provider` with no server of its own (`source` says where it came from).
    pub fn new(provider: Arc<dyn ModelProvider>, source: &'static str) -> Self {
        Self {
            provider,
            source,
            server: None,
        }
    }
}

/// The local model served under `name`: `qwen2.5-coder-0.5b` (tool calls) or `smollm2-135m`.
pub fn local_model_named(name: &str) -> Result<LocalModel> {
    match name {
        "qwen2.5-coder-0.5b" => Ok(LocalModel::Qwen),
        "smollm2-135m" => Ok(LocalModel::Smol),
        other => Err(Error::InvalidModel(format!(
            "no local model `{other}` (local/qwen2.5-coder-0.5b or local/smollm2-135m)"
        ))),
    }
}

impl ModelChoice {
    /// The model (module doc), starting a local server when nothing else is configured.
    pub async fn resolve(&self) -> Result<Model> {
        match self.configured()? {
            Some(model) => Ok(model),
            None => self.start_local(self.local.clone()).await,
        }
    }

    /// The model configured without starting anything: an API key in the environment, else the
    /// configured OpenAI-compatible server; `None` when there is neither.
    pub fn configured(&self) -> Result<Option<Model>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(key) = var("ANTHROPIC_API_KEY") {
            return hosted(
                Provider::Anthropic,
                "claude-sonnet-4-5",
                200_000,
                key,
                "anthropic",
            )
            .map(Some);
        }
        if let Some(key) = var("OPENAI_API_KEY") {
            return hosted(Provider::OpenAi, "gpt-4.1-mini", 128_000, key, "openai").map(Some);
        }
        if let Some(key) = var("GEMINI_API_KEY") {
            return hosted(
                Provider::Gemini,
                "gemini-2.5-flash",
                1_000_000,
                key,
                "gemini",
            )
            .map(Some);
        }
        if let Some((base_url, name)) = &self.openai_compatible {
            let mut config = ProviderConfig::new(ModelInfo {
                provider: Provider::OpenAi,
                model: name.clone(),
                context_window: 8_192,
                max_output_tokens: 512,
            });
            config.name = Some("llama.cpp".into());
            config.base_url = Some(base_url.clone());
            return Ok(Some(Model {
                provider: Arc::from(config.build().map_err(pattern_core::Error::from)?),
                source: "configured",
                server: None,
            }));
        }
        Ok(None)
    }

    /// Starts `local` on a local llama.cpp server (installed by `pattern setup`), kept for as
    /// long as the returned [`Model`] lives.
    pub async fn start_local(&self, local: LocalModel) -> Result<Model> {
        let server = LocalModelServer::start(LocalServerConfig {
            max_output_tokens: self.local_max_output_tokens,
            dir: Some(
                self.llama_dir
                    .clone()
                    .unwrap_or_else(|| crate::install::llama_dir(None)),
            ),
            ..LocalServerConfig::new(local)
        })
        .await
        .map_err(pattern_core::Error::from)?;
        let mut config = ProviderConfig::new(server.model_info());
        config.name = Some("llama.cpp".into());
        config.base_url = Some(server.base_url().to_owned());
        config.timeout = Duration::from_secs(600);
        // Its llama.cpp build ignores `tool_choice`; it constrains output by JSON schema.
        config.forced_call = pattern_core::provider::ForcedCall::ResponseSchema;
        Ok(Model {
            provider: Arc::from(config.build().map_err(pattern_core::Error::from)?),
            source: "local",
            server: Some(server),
        })
    }

    /// The model `agent` runs on in a one-agent command (`chat`, `send`): its own model (a
    /// `local/NAME` one started here), else [`ModelChoice::resolve`]. A model that cannot be
    /// reached is [`Error::ModelUnavailable`]; a malformed stored one [`Error::InvalidModel`].
    pub async fn for_agent(&self, agent: &Agent) -> Result<Model> {
        match AgentModel::of(agent)? {
            None => self.resolve().await,
            Some(own) if own.provider == ModelSource::Local => {
                self.start_local(local_model_named(&own.model)?).await
            }
            Some(own) => Ok(Model::new(Models::new(None).provider(&own)?, "agent")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_parsed_checked_and_stored_beside_other_metadata() {
        let m = AgentModel::parse(
            "openai_compatible/org/qwen-7b",
            Some("http://127.0.0.1:8080/v1".into()),
        )
        .unwrap();
        assert_eq!(m.provider, ModelSource::OpenAiCompatible);
        assert_eq!(m.model, "org/qwen-7b");
        let metadata = serde_json::json!({"instructions": "Be brief."});
        let stored = AgentModel::store(Some(&m), &metadata);
        assert_eq!(stored["instructions"], "Be brief.");
        assert_eq!(
            stored["model"],
            serde_json::json!({
                "provider": "openai_compatible",
                "model": "org/qwen-7b",
                "base_url": "http://127.0.0.1:8080/v1",
            })
        );
        assert_eq!(AgentModel::from_json(&stored["model"]).unwrap(), m);
        assert_eq!(AgentModel::store(None, &stored), metadata);
        for bad in ["gpt-4o", "nope/x", "openai/", "openai_compatible/x"] {
            assert!(
                matches!(AgentModel::parse(bad, None), Err(Error::InvalidModel(_))),
                "{bad}"
            );
        }
        assert!(AgentModel::parse("local/qwen2.5-coder-0.5b", Some("http://x".into())).is_err());
        assert!(AgentModel::parse("openai/gpt-4o", Some("file:///x".into())).is_err());
    }

    #[test]
    fn a_hosted_model_without_its_key_and_local_without_a_server_are_unavailable() {
        let models = Models::new(None);
        let local = AgentModel::parse("local/qwen2.5-coder-0.5b", None).unwrap();
        assert!(matches!(
            models.provider(&local),
            Err(Error::ModelUnavailable(_))
        ));
        // Built once per model, then shared.
        let m =
            AgentModel::parse("openai_compatible/a", Some("http://127.0.0.1:9/v1".into())).unwrap();
        let (first, second) = (models.provider(&m).unwrap(), models.provider(&m).unwrap());
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(first.model().model, "a");
    }

    #[tokio::test]
    async fn a_configured_server_is_used_when_no_key_is_in_the_environment() {
        let choice = ModelChoice {
            openai_compatible: Some(("http://127.0.0.1:9/v1".into(), "tiny".into())),
            ..ModelChoice::default()
        };
        let model = choice.resolve().await.unwrap();
        let keys = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"];
        if keys
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| !v.is_empty()))
        {
            // A key in the environment wins; nothing is started either way.
            assert_ne!(model.source, "configured");
        } else {
            assert_eq!(model.source, "configured");
            assert_eq!(model.provider.model().model, "tiny");
        }
        assert!(model.local_server().is_none());
    }
}
