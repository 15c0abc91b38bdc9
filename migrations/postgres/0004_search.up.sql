-- Purpose: search storage: archival memory (agent-owned passages with tags and an optional
-- per-agent dedupe key), embedding bookkeeping (the one registered model, durable embedding jobs
-- keyed by content, stored vectors as little-endian f32 BYTEA), `search_changes` (the ordered log
-- of vector and delete changes that the in-process vector index of db_v2 follows from a cursor;
-- seq is assigned under a transaction-level advisory lock so seq order is commit order), and
-- full-text search: stored tsvector columns ('english' configuration) with GIN indexes on
-- archival memories, memory blocks and messages (text blocks and tool results only). Times are
-- Unix milliseconds (BIGINT).

CREATE TABLE archival_memories (
    id          TEXT PRIMARY KEY NOT NULL,
    agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    content     TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT 'null',
    tags        TEXT NOT NULL DEFAULT '[]',
    dedupe_key  TEXT,
    created_at  BIGINT NOT NULL,
    search_tsv  tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED
);
CREATE INDEX archival_by_agent ON archival_memories (agent_id, id);
CREATE UNIQUE INDEX archival_dedupe ON archival_memories (agent_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX archival_fts ON archival_memories USING GIN (search_tsv);

CREATE TABLE archival_tags (
    archival_id TEXT NOT NULL REFERENCES archival_memories(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL,
    tag         TEXT NOT NULL,
    PRIMARY KEY (archival_id, tag)
);
CREATE INDEX archival_tags_by_tag ON archival_tags (agent_id, tag, archival_id);

CREATE TABLE embedding_model (
    singleton     BIGINT PRIMARY KEY NOT NULL CHECK (singleton = 1),
    name          TEXT NOT NULL,
    dimension     BIGINT NOT NULL CHECK (dimension > 0),
    file_hash     TEXT NOT NULL,
    registered_at BIGINT NOT NULL
);

CREATE TABLE embedding_jobs (
    content_type    TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id      TEXT NOT NULL,
    agent_id        TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    text_hash       TEXT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    claimed_until   BIGINT,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (content_type, content_id)
);
CREATE INDEX embedding_jobs_due ON embedding_jobs (next_attempt_at, created_at);

CREATE TABLE embeddings (
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    text_hash    TEXT NOT NULL,
    dimension    BIGINT NOT NULL,
    vector       BYTEA NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (content_type, content_id)
);

CREATE TABLE search_changes (
    seq          BIGSERIAL PRIMARY KEY,
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete'))
);

-- Where each durable follower of `search_changes` has got to (e.g. the tantivy index), so
-- pruning the log never removes a change a follower has not applied yet.
CREATE TABLE search_consumers (
    name        TEXT PRIMARY KEY NOT NULL,
    seq         BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- The searchable text of a stored message: its text blocks and tool results, in order, one per
-- line (the same text pattern_db's Rust code extracts for embeddings). Immutable, so it can feed
-- a stored generated column.
CREATE FUNCTION pattern_message_text(content TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT coalesce(string_agg(
        CASE WHEN e.value->>'type' = 'text' THEN e.value->>'text' ELSE e.value->>'content' END,
        E'\n' ORDER BY e.ord), '')
    FROM jsonb_array_elements(content::jsonb) WITH ORDINALITY AS e(value, ord)
    WHERE e.value->>'type' IN ('text', 'tool_result')
$fn$;

ALTER TABLE messages ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, pattern_message_text(content))) STORED;
CREATE INDEX messages_fts ON messages USING GIN (search_tsv);

ALTER TABLE memory_blocks ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, value)) STORED;
CREATE INDEX memory_blocks_fts ON memory_blocks USING GIN (search_tsv);
