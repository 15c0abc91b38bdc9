//! The numeric bounds of the API's inputs (page sizes, counts, durations): one table, stated in
//! the OpenAPI document as `minimum`/`maximum` and enforced here, so what the document promises
//! is exactly what is served (issue 17). A bound may be stricter than the layer below (search
//! hits: 100 here, the storage layer allows 1,000), never looser.
//!
//! This module must never clamp a value: an out-of-range input is a 400 naming the field and
//! its range, never silently served as something else.

use crate::error::ApiError;

/// The accepted range of one numeric input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The field or query parameter, as the client writes it.
    pub field: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
}

impl Bound {
    /// `field` accepts `min..=max`.
    const fn new(field: &'static str, min: u64, max: u64) -> Self {
        Self { field, min, max }
    }

    /// `value` (or `default` when absent) if it is in range, else a 400 naming the range.
    pub(crate) fn check<T>(&self, value: Option<T>, default: T) -> Result<T, ApiError>
    where
        T: Copy + TryInto<u64>,
    {
        let Some(value) = value else {
            return Ok(default);
        };
        match value.try_into() {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(value),
            _ => Err(ApiError::invalid(format!(
                "`{}` must be {} to {}",
                self.field, self.min, self.max
            ))),
        }
    }
}

/// `GET /v1/approvals?limit=`.
pub const APPROVALS_PAGE: Bound = Bound::new("limit", 1, 100);
/// `GET /v1/agents/{agent_id}/batches?limit=`.
pub const BATCHES_PAGE: Bound = Bound::new("limit", 1, 500);
/// `GET /v1/agents/{agent_id}/archival?limit=`.
pub const ARCHIVAL_PAGE: Bound = Bound::new("limit", 1, 1000);
/// `GET /v1/sessions?limit=` and `GET /v1/meetings?limit=`.
pub const PROTOCOL_PAGE: Bound = Bound::new("limit", 1, 100);
/// `POST /v1/agents/{agent_id}/search` `limit`.
pub const SEARCH_HITS: Bound = Bound::new("limit", 1, 100);
/// `POST /v1/agents/{agent_id}/blocks` `char_limit`.
pub const BLOCK_CHARS: Bound = Bound::new("char_limit", 1, 1_000_000);
/// `POST /v1/sessions` `message_limit`.
pub const SESSION_MESSAGES: Bound = Bound::new("message_limit", 1, 10_000);
/// `POST /v1/meetings/run` `rounds`.
pub const MEETING_ROUNDS: Bound = Bound::new("rounds", 1, 100);
/// `turn_duration_ms` of `POST /v1/meetings` and `POST /v1/meetings/run`: up to a week.
pub const TURN_DURATION_MS: Bound = Bound::new("turn_duration_ms", 1, 604_800_000);

/// `PUT /v1/agents/{agent_id}/retention` `batches_older_than_days`.
pub const RETENTION_DAYS_BATCHES: Bound = Bound::new("batches_older_than_days", 1, 36_500);
/// `PUT /v1/agents/{agent_id}/retention` `activity_older_than_days`.
pub const RETENTION_DAYS_ACTIVITY: Bound = Bound::new("activity_older_than_days", 1, 36_500);
/// `PUT /v1/agents/{agent_id}/retention` `keep_block_versions`.
pub const KEEP_BLOCK_VERSIONS: Bound = Bound::new("keep_block_versions", 1, 100_000);

/// Every bounded input: `(method, path, bound)`. The OpenAPI document states exactly these
/// (`tests/it/limits.rs` walks it), and each route checks its own.
pub const BOUNDS: &[(&str, &str, Bound)] = &[
    ("get", "/v1/approvals", APPROVALS_PAGE),
    ("get", "/v1/agents/{agent_id}/batches", BATCHES_PAGE),
    ("get", "/v1/agents/{agent_id}/archival", ARCHIVAL_PAGE),
    ("get", "/v1/sessions", PROTOCOL_PAGE),
    ("get", "/v1/meetings", PROTOCOL_PAGE),
    ("post", "/v1/agents/{agent_id}/search", SEARCH_HITS),
    ("post", "/v1/agents/{agent_id}/blocks", BLOCK_CHARS),
    ("post", "/v1/sessions", SESSION_MESSAGES),
    ("post", "/v1/meetings/run", MEETING_ROUNDS),
    ("post", "/v1/meetings/run", TURN_DURATION_MS),
    ("post", "/v1/meetings", TURN_DURATION_MS),
    (
        "put",
        "/v1/agents/{agent_id}/retention",
        RETENTION_DAYS_BATCHES,
    ),
    (
        "put",
        "/v1/agents/{agent_id}/retention",
        RETENTION_DAYS_ACTIVITY,
    ),
    (
        "put",
        "/v1/agents/{agent_id}/retention",
        KEEP_BLOCK_VERSIONS,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_range_passes_out_of_range_is_refused_absent_is_the_default() {
        assert_eq!(SEARCH_HITS.check(Some(100usize), 10).ok(), Some(100));
        assert_eq!(SEARCH_HITS.check(None, 10usize).ok(), Some(10));
        assert!(SEARCH_HITS.check(Some(101usize), 10).is_err());
        assert!(SEARCH_HITS.check(Some(0usize), 10).is_err());
        assert!(TURN_DURATION_MS.check(Some(u64::MAX), 1).is_err());
    }

    #[test]
    fn the_layers_accept_what_the_api_admits() {
        let layer = |b: Bound, max: u64| assert!(b.max <= max, "{b:?} over the layer's {max}");
        layer(SEARCH_HITS, pattern::db::search::MAX_SEARCH_LIMIT as u64);
        layer(ARCHIVAL_PAGE, pattern::db::archival::MAX_LIST as u64);
        layer(BLOCK_CHARS, pattern::db::blocks::MAX_CHAR_LIMIT as u64);
        layer(
            SESSION_MESSAGES,
            pattern::db::protocol::MAX_SESSION_MESSAGES,
        );
        layer(
            MEETING_ROUNDS,
            u64::from(pattern::core::meeting::MAX_ROUNDS),
        );
        layer(
            TURN_DURATION_MS,
            pattern::protocol::MAX_TURN_DURATION.as_millis() as u64,
        );
        for b in [RETENTION_DAYS_BATCHES, RETENTION_DAYS_ACTIVITY] {
            layer(b, u64::from(pattern::db::retention::MAX_RETENTION_DAYS));
        }
        layer(
            KEEP_BLOCK_VERSIONS,
            u64::from(pattern::db::retention::MAX_KEEP_BLOCK_VERSIONS),
        );
    }
}
