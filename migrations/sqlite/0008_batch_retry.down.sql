-- Purpose: undo 0008_batch_retry (forgets which abandoned batches were retried).
ALTER TABLE batches DROP COLUMN retried_at;
