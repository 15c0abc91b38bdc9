//! [`UnavailableProvider`]: the provider of an agent whose model cannot be reached from this
//! process (no key in the environment, no model configured, a local server that is not running).
//! Every call fails at once with [`ProviderError::Config`] naming the reason, so a turn sent to
//! such an agent is stored, fails with that typed error and abandons its batch like any other
//! provider failure, and the agent keeps running for the next turn. It must never reach the
//! network and never hold a key.

use async_trait::async_trait;
use context_v2::{MemoryContext, ModelInfo};

use super::{GenerateOptions, ModelProvider, ProviderError, ProviderStream};

/// A model that cannot be called here, and why.
#[derive(Debug, Clone)]
pub struct UnavailableProvider {
    model: ModelInfo,
    reason: String,
}

impl UnavailableProvider {
    /// A provider for `model` whose every call fails with `reason`.
    pub fn new(model: ModelInfo, reason: impl Into<String>) -> Self {
        Self {
            model,
            reason: reason.into(),
        }
    }

    /// Why calls fail.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

#[async_trait]
impl ModelProvider for UnavailableProvider {
    fn name(&self) -> &str {
        "unavailable"
    }

    fn model(&self) -> &ModelInfo {
        &self.model
    }

    async fn stream(
        &self,
        _ctx: &MemoryContext,
        _opts: &GenerateOptions,
    ) -> Result<ProviderStream, ProviderError> {
        Err(ProviderError::Config(self.reason.clone()))
    }
}
