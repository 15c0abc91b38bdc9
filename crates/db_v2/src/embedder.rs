//! The [`Embedder`] contract: text in, one vector per text out, with a name, a dimension and a
//! hash of the model's weights that are recorded in the database so vectors of two models are
//! never mixed. It must never truncate input silently in a way the caller cannot see (the model's
//! own maximum sequence length is part of the model), and never return a vector count different
//! from the input count (callers check, see [`check_output`]).

use async_trait::async_trait;

use crate::error::{Error, Result};

/// Turns text into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Model name, e.g. `all-MiniLM-L6-v2-int8`.
    fn name(&self) -> &str;
    /// Length of every vector.
    fn dimension(&self) -> usize;
    /// A hash identifying the weights (sha256 hex of the model file).
    fn model_hash(&self) -> &str;
    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;

    /// The vector of one search query. Search calls this, never [`Embedder::embed`], so an
    /// embedder can keep queries off the path its bulk work takes (the default embeds the one
    /// text with `embed`). Callers check the result like `embed`'s.
    async fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let mut vectors = self.embed(&[query.to_owned()]).await?;
        match (vectors.pop(), vectors.is_empty()) {
            (Some(v), true) => Ok(v),
            (v, _) => Err(Error::EmbedderContract {
                model: self.name().to_owned(),
                expected: "1 vector".to_owned(),
                got: format!("{} vectors", vectors.len() + usize::from(v.is_some())),
            }),
        }
    }

    /// The vector of a search query embedded while other work of the same search runs (hybrid
    /// search's full-text half): an embedder that can should leave the machine's other cores
    /// to that work rather than spread the query over all of them. The default is
    /// [`Embedder::embed_query`].
    async fn embed_query_alongside(&self, query: &str) -> Result<Vec<f32>> {
        self.embed_query(query).await
    }
}

/// Check an embedder's output against its contract: one vector per text, each of
/// `dimension` finite components.
pub(crate) fn check_output(
    embedder: &dyn Embedder,
    inputs: usize,
    output: &[Vec<f32>],
) -> Result<()> {
    if output.len() != inputs {
        return Err(Error::EmbedderContract {
            model: embedder.name().to_owned(),
            expected: format!("{inputs} vectors"),
            got: format!("{} vectors", output.len()),
        });
    }
    for v in output {
        if v.len() != embedder.dimension() {
            return Err(Error::EmbedderContract {
                model: embedder.name().to_owned(),
                expected: format!("{} dimensions", embedder.dimension()),
                got: format!("{} dimensions", v.len()),
            });
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::EmbedderContract {
                model: embedder.name().to_owned(),
                expected: "finite components".to_owned(),
                got: "NaN or infinity".to_owned(),
            });
        }
    }
    Ok(())
}
