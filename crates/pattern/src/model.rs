//! Providers from configuration: the model an application's agents run on, chosen the same way
//! by every front door (the CLI's `chat`, `send` and `serve`, and applications).
//!
//! [`ModelChoice::resolve`] picks, in order: an API key in the environment
//! (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY`), then an OpenAI-compatible server
//! the caller configured (e.g. llama.cpp), then a local llama.cpp server it starts (installed by
//! `cargo xtask setup`) and keeps for as long as the returned [`Model`] lives. This module only
//! constructs providers; it must never log or print an API key.

use std::sync::Arc;
use std::time::Duration;

use context_v2::{ModelInfo, Provider};
use pattern_core::local_server::{LocalModel, LocalModelServer, LocalServerConfig};
use pattern_core::provider::{ApiKey, ModelProvider, ProviderConfig};

use crate::error::Result;

/// Where the model comes from when no API key is in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// An OpenAI-compatible server already running (`base_url`, model name).
    pub openai_compatible: Option<(String, String)>,
    /// The local model to start otherwise.
    pub local: LocalModel,
    /// Largest answer asked of a local server (small keeps a small model responsive).
    pub local_max_output_tokens: usize,
}

impl Default for ModelChoice {
    fn default() -> Self {
        Self {
            openai_compatible: None,
            local: LocalModel::Qwen,
            local_max_output_tokens: 256,
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

impl ModelChoice {
    /// The model (module doc), starting a local server when nothing else is configured.
    pub async fn resolve(&self) -> Result<Model> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(key) = var("ANTHROPIC_API_KEY") {
            return hosted(
                Provider::Anthropic,
                "claude-sonnet-4-5",
                200_000,
                key,
                "anthropic",
            );
        }
        if let Some(key) = var("OPENAI_API_KEY") {
            return hosted(Provider::OpenAi, "gpt-4.1-mini", 128_000, key, "openai");
        }
        if let Some(key) = var("GEMINI_API_KEY") {
            return hosted(
                Provider::Gemini,
                "gemini-2.5-flash",
                1_000_000,
                key,
                "gemini",
            );
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
            return Ok(Model {
                provider: Arc::from(config.build().map_err(pattern_core::Error::from)?),
                source: "configured",
                server: None,
            });
        }
        let server = LocalModelServer::start(LocalServerConfig {
            max_output_tokens: self.local_max_output_tokens,
            ..LocalServerConfig::new(self.local.clone())
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
