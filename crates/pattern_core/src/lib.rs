//! `pattern_core`: the agent runtime of Pattern.
//!
//! - [`provider`]: the [`ModelProvider`](provider::ModelProvider) trait and its implementations
//!   (Anthropic Messages, OpenAI Chat Completions and compatible servers, Gemini), streaming,
//!   tool calls, retries.
//! - [`local_server`]: a real model (llama.cpp's server) on loopback for tests and local use.
//!
//! This crate must never name a database driver (storage goes through `pattern_db`'s API),
//! never hold process-wide mutable state (each runtime owns its registry and permission broker),
//! and never send a request whose history failed `context_v2::validate`.

mod error;
pub mod local_server;
pub mod provider;

pub use error::{Error, Result};
