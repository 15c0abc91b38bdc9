-- Purpose: an abandoned batch is retried at most once. `retried_at` is set in the same
-- transaction that stores the retry's trigger (its new batch, or its queue entry), so a retry
-- repeated by a client or a second process finds it set and is refused: the user message is never
-- stored twice and the turn never runs twice. Unix milliseconds; NULL: not retried.
ALTER TABLE batches ADD COLUMN retried_at INTEGER;
