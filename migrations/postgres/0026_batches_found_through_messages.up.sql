-- Purpose: continuation batches point at their parent, and nothing indexed that column: the
-- retention pass (which clears the pointers of a batch it deletes) and the foreign key's
-- `ON DELETE SET NULL` scanned `batches` for each deleted batch. A partial index finds them.
-- SQLite's 0026 also drops its agent-keyed batch index (its single writer wrote every agent's
-- leaf in each group commit); PostgreSQL keeps `batches_by_agent`.
CREATE INDEX batches_by_parent ON batches (parent_batch) WHERE parent_batch IS NOT NULL;
