-- Purpose: per-agent retention policies and the archive exports in flight (issue 18, decision
-- 0024). `retention_policies`: at most one row per agent; a NULL kind keeps that kind of data.
-- Ages are whole days (>= 1), `keep_block_versions` >= 1: a zero would delete what is current.
-- `batch_disposal` is `delete` (old batches go) or `archive` (they are written to the agent's
-- archive file first). `retention_exports`: an archive pass's planned batches, recorded before
-- the file is written and deleted with the batches in one transaction, so a pass that crashed
-- in between is finished by the next one with the same file. Times are Unix milliseconds.

CREATE TABLE retention_policies (
    agent_id                 TEXT NOT NULL PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    batches_older_than_days  BIGINT NULL CHECK (batches_older_than_days >= 1),
    batch_disposal           TEXT NOT NULL DEFAULT 'delete'
                             CHECK (batch_disposal IN ('delete', 'archive')),
    keep_block_versions      BIGINT NULL CHECK (keep_block_versions >= 1),
    activity_older_than_days BIGINT NULL CHECK (activity_older_than_days >= 1),
    updated_at               BIGINT NOT NULL
);

CREATE TABLE retention_exports (
    agent_id    TEXT NOT NULL PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    batch_ids   TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
