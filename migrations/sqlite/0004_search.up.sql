-- Purpose: search storage: archival memory (agent-owned passages with tags and an optional
-- per-agent dedupe key), embedding bookkeeping (the one registered model, durable embedding jobs
-- keyed by content, stored vectors as little-endian f32 blobs) and `search_changes`, the ordered
-- log of content changes that derived indexes (the tantivy index beside this file, the in-process
-- vector index of db_v2) follow from a cursor. Times are Unix milliseconds (INTEGER).

CREATE TABLE archival_memories (
    id          TEXT PRIMARY KEY NOT NULL,
    agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    content     TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT 'null',
    -- JSON array of strings; also one row per tag in `archival_tags` for filtering.
    tags        TEXT NOT NULL DEFAULT '[]',
    dedupe_key  TEXT,
    created_at  INTEGER NOT NULL
);
-- Newest first per agent (ids are UUID v7: text order is time order).
CREATE INDEX archival_by_agent ON archival_memories (agent_id, id);
-- Re-imports are idempotent: one entry per agent and dedupe key.
CREATE UNIQUE INDEX archival_dedupe ON archival_memories (agent_id, dedupe_key) WHERE dedupe_key IS NOT NULL;

CREATE TABLE archival_tags (
    archival_id TEXT NOT NULL REFERENCES archival_memories(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL,
    tag         TEXT NOT NULL,
    PRIMARY KEY (archival_id, tag)
);
CREATE INDEX archival_tags_by_tag ON archival_tags (agent_id, tag, archival_id);

-- The embedding model whose vectors `embeddings` holds; at most one row.
CREATE TABLE embedding_model (
    singleton     INTEGER PRIMARY KEY NOT NULL CHECK (singleton = 1),
    name          TEXT NOT NULL,
    dimension     INTEGER NOT NULL CHECK (dimension > 0),
    file_hash     TEXT NOT NULL,
    registered_at INTEGER NOT NULL
);

-- Content waiting for a vector, written in the same transaction as the content.
CREATE TABLE embedding_jobs (
    content_type    TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id      TEXT NOT NULL,
    agent_id        TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    text_hash       TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    claimed_until   INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (content_type, content_id)
);
CREATE INDEX embedding_jobs_due ON embedding_jobs (next_attempt_at, created_at);

CREATE TABLE embeddings (
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    text_hash    TEXT NOT NULL,
    dimension    INTEGER NOT NULL,
    -- little-endian f32 x dimension
    vector       BLOB NOT NULL,
    -- when the content was created (for time filters), not when the vector was
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (content_type, content_id)
);

-- Ordered change log: `seq` order is commit order (one writer). No foreign key: the log outlives
-- what it reports deleted.
CREATE TABLE search_changes (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete'))
);

-- Where each durable follower of `search_changes` has got to (e.g. the tantivy index), so
-- pruning the log never removes a change a follower has not applied yet.
CREATE TABLE search_consumers (
    name        TEXT PRIMARY KEY NOT NULL,
    seq         INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
