//! Search requests and answers: [`SearchOptions`] (mode, content kinds, limit, agent, time range,
//! dates read from the query)
//! and [`SearchHit`]. Plain data; it must never do I/O.

use chrono::{DateTime, Utc};
use pattern_db::{AgentId, ContentRef, ContentType};

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// Full-text only (tantivy's BM25 on both backends): exact words, names, codes.
    Fts,
    /// Vectors only: meaning, different wording. Needs an embedder.
    Vector,
    /// Both, fused by reciprocal rank fusion. Needs an embedder.
    Hybrid,
    /// Hybrid when an embedder is configured, else full-text.
    #[default]
    Auto,
}

/// What to search and how.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOptions {
    /// The method.
    pub mode: SearchMode,
    /// Kinds of content to search; empty means all.
    pub content_types: Vec<ContentType>,
    /// Most hits to return (1..=`pattern_db::search::MAX_SEARCH_LIMIT`).
    pub limit: usize,
    /// Only content this agent can see (its messages and passages, blocks shared with it).
    pub agent: Option<AgentId>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before (exclusive).
    pub to: Option<DateTime<Utc>>,
    /// Read a date the query names ("on 14 January 2023", "before March 2023") as a time range
    /// within `from`/`to`, searching the query's other words; when nothing falls in that range
    /// the whole query is searched without it. Default true.
    pub read_dates: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            mode: SearchMode::Auto,
            content_types: Vec::new(),
            limit: 10,
            agent: None,
            from: None,
            to: None,
            read_dates: true,
        }
    }
}

impl SearchOptions {
    /// Default options with this mode.
    pub fn mode(mode: SearchMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Same options with this limit.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Same options restricted to what `agent` can see.
    pub fn for_agent(mut self, agent: AgentId) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Same options restricted to content created in `[from, to)` (either end open).
    pub fn between(mut self, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        self.from = from;
        self.to = to;
        self
    }

    /// Same options with dates in the query read (true) or searched as words (false).
    pub fn reading_dates(mut self, read: bool) -> Self {
        self.read_dates = read;
        self
    }

    /// Same options restricted to these content kinds.
    pub fn only(mut self, types: &[ContentType]) -> Self {
        self.content_types = types.to_vec();
        self
    }
}

/// One search result, best first in an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The content.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// Relevance: Fts how many of the query's content words the hit holds plus the backend's
    /// score `s` as `s / (1 + s)`, Vector the cosine similarity, Hybrid the fused rank score with
    /// the best hit at 1.0. Comparable only within one answer; hits come best first.
    pub score: f32,
    /// The content's current text.
    pub text: String,
    /// When the content was created.
    pub created_at: DateTime<Utc>,
}
