-- Purpose: PostgreSQL's own column types (decision 0026). Ids become UUID (16 bytes, compared
-- as bytes), times TIMESTAMPTZ (the same instants: every value was Unix milliseconds), and JSON
-- documents JSON or JSONB:
--   * JSON (the text kept exactly as written, checked to be JSON) for what the store must give
--     back byte for byte: message contents, metadata, tool inputs, event data. JSONB refuses the
--     escape \u0000 and rewrites the text (key order, spacing), so a message holding a NUL
--     character could not be stored, and what was acknowledged would not come back unchanged.
--   * JSONB for documents the store itself builds from typed values: MCP server configurations,
--     the batch ids of retention exports.
-- SQLite keeps its file format (TEXT ids and JSON, INTEGER milliseconds): its 0023 is empty.
-- Existing databases are converted in place, in this migration's one transaction: a value that
-- is not a UUID or not JSON fails the migration and leaves the database as it was.

-- Foreign keys join columns whose types change together: they go, and come back unchanged.
CREATE TEMP TABLE native_foreign_keys ON COMMIT DROP AS
SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid) AS def
FROM pg_constraint
WHERE contype = 'f' AND connamespace = current_schema()::regnamespace;

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT tbl, conname FROM native_foreign_keys LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    END LOOP;
END
$$;

-- Collations do not apply to UUIDs; their order is the byte order, which is the order of their
-- lowercase text under "C" that this check used.
ALTER TABLE protocol_sessions DROP CONSTRAINT protocol_sessions_check;

-- The full-text column of messages is computed from the content: it is rebuilt below.
ALTER TABLE messages DROP COLUMN search_tsv;

-- Text defaults cannot be cast with their column.
ALTER TABLE agents ALTER COLUMN metadata DROP DEFAULT;
ALTER TABLE archival_memories ALTER COLUMN metadata DROP DEFAULT, ALTER COLUMN tags DROP DEFAULT;

CREATE TEMP TABLE native_columns (tbl TEXT NOT NULL, col TEXT NOT NULL, ty TEXT NOT NULL)
    ON COMMIT DROP;
INSERT INTO native_columns (tbl, col, ty) VALUES
    ('activity_events', 'agent_id', 'uuid'),
    ('agent_queue', 'agent_id', 'uuid'),
    ('agent_queue', 'protocol_message_id', 'uuid'),
    ('agent_queue', 'turn_id', 'uuid'),
    ('agent_runs', 'agent_id', 'uuid'),
    ('agents', 'id', 'uuid'),
    ('agents', 'organization_id', 'uuid'),
    ('api_keys', 'id', 'uuid'),
    ('api_keys', 'organization_id', 'uuid'),
    ('approvals', 'agent_id', 'uuid'),
    ('approvals', 'organization_id', 'uuid'),
    ('approvals', 'turn_id', 'uuid'),
    ('archival_memories', 'agent_id', 'uuid'),
    ('archival_memories', 'id', 'uuid'),
    ('archival_tags', 'agent_id', 'uuid'),
    ('archival_tags', 'archival_id', 'uuid'),
    ('batches', 'agent_id', 'uuid'),
    ('console_sessions', 'api_key_id', 'uuid'),
    ('embedding_jobs', 'agent_id', 'uuid'),
    ('embedding_jobs', 'content_id', 'uuid'),
    ('embeddings', 'agent_id', 'uuid'),
    ('embeddings', 'content_id', 'uuid'),
    ('mcp_servers', 'agent_id', 'uuid'),
    ('memory_block_access', 'agent_id', 'uuid'),
    ('memory_block_access', 'block_id', 'uuid'),
    ('memory_block_versions', 'block_id', 'uuid'),
    ('memory_blocks', 'id', 'uuid'),
    ('memory_blocks', 'owner_agent_id', 'uuid'),
    ('messages', 'agent_id', 'uuid'),
    ('messages', 'id', 'uuid'),
    ('protocol_meeting_events', 'agent_id', 'uuid'),
    ('protocol_meeting_events', 'meeting_id', 'uuid'),
    ('protocol_meeting_participants', 'agent_id', 'uuid'),
    ('protocol_meeting_participants', 'meeting_id', 'uuid'),
    ('protocol_meetings', 'chosen_speaker_id', 'uuid'),
    ('protocol_meetings', 'current_speaker_id', 'uuid'),
    ('protocol_meetings', 'host_id', 'uuid'),
    ('protocol_meetings', 'id', 'uuid'),
    ('protocol_messages', 'id', 'uuid'),
    ('protocol_messages', 'meeting_id', 'uuid'),
    ('protocol_messages', 'recipient_id', 'uuid'),
    ('protocol_messages', 'sender_id', 'uuid'),
    ('protocol_messages', 'session_id', 'uuid'),
    ('protocol_messages_archive', 'id', 'uuid'),
    ('protocol_messages_archive', 'meeting_id', 'uuid'),
    ('protocol_messages_archive', 'recipient_id', 'uuid'),
    ('protocol_messages_archive', 'sender_id', 'uuid'),
    ('protocol_messages_archive', 'session_id', 'uuid'),
    ('protocol_organizations', 'id', 'uuid'),
    ('protocol_sessions', 'agent_a_id', 'uuid'),
    ('protocol_sessions', 'agent_b_id', 'uuid'),
    ('protocol_sessions', 'id', 'uuid'),
    ('protocol_sessions', 'locked_agent_id', 'uuid'),
    ('retention_exports', 'agent_id', 'uuid'),
    ('retention_policies', 'agent_id', 'uuid'),
    ('search_changes', 'agent_id', 'uuid'),
    ('search_changes', 'content_id', 'uuid'),
    ('summaries', 'agent_id', 'uuid'),
    ('turn_events', 'turn_id', 'uuid'),
    ('turns', 'agent_id', 'uuid'),
    ('turns', 'id', 'uuid'),
    ('activity_events', 'created_at', 'timestamptz'),
    ('agent_queue', 'created_at', 'timestamptz'),
    ('agent_queue', 'deliver_at', 'timestamptz'),
    ('agent_queue', 'delivered_at', 'timestamptz'),
    ('agent_runs', 'claimed_at', 'timestamptz'),
    ('agents', 'created_at', 'timestamptz'),
    ('api_keys', 'created_at', 'timestamptz'),
    ('api_keys', 'revoked_at', 'timestamptz'),
    ('approvals', 'deadline', 'timestamptz'),
    ('approvals', 'decided_at', 'timestamptz'),
    ('approvals', 'requested_at', 'timestamptz'),
    ('archival_memories', 'created_at', 'timestamptz'),
    ('batches', 'completed_at', 'timestamptz'),
    ('batches', 'lease_expires_at', 'timestamptz'),
    ('batches', 'retried_at', 'timestamptz'),
    ('batches', 'started_at', 'timestamptz'),
    ('console_sessions', 'created_at', 'timestamptz'),
    ('console_sessions', 'expires_at', 'timestamptz'),
    ('embedding_jobs', 'claimed_until', 'timestamptz'),
    ('embedding_jobs', 'created_at', 'timestamptz'),
    ('embedding_jobs', 'next_attempt_at', 'timestamptz'),
    ('embedding_model', 'registered_at', 'timestamptz'),
    ('embeddings', 'created_at', 'timestamptz'),
    ('machine_leases', 'expires_at', 'timestamptz'),
    ('mcp_servers', 'updated_at', 'timestamptz'),
    ('memory_block_versions', 'created_at', 'timestamptz'),
    ('memory_blocks', 'created_at', 'timestamptz'),
    ('memory_blocks', 'updated_at', 'timestamptz'),
    ('messages', 'created_at', 'timestamptz'),
    ('processes', 'expires_at', 'timestamptz'),
    ('processes', 'started_at', 'timestamptz'),
    ('protocol_meeting_events', 'created_at', 'timestamptz'),
    ('protocol_meeting_participants', 'invited_at', 'timestamptz'),
    ('protocol_meeting_participants', 'joined_at', 'timestamptz'),
    ('protocol_meeting_participants', 'left_at', 'timestamptz'),
    ('protocol_meetings', 'created_at', 'timestamptz'),
    ('protocol_meetings', 'ended_at', 'timestamptz'),
    ('protocol_meetings', 'started_at', 'timestamptz'),
    ('protocol_meetings', 'turn_deadline', 'timestamptz'),
    ('protocol_meetings', 'turn_started_at', 'timestamptz'),
    ('protocol_messages', 'created_at', 'timestamptz'),
    ('protocol_messages', 'read_at', 'timestamptz'),
    ('protocol_messages_archive', 'archived_at', 'timestamptz'),
    ('protocol_messages_archive', 'created_at', 'timestamptz'),
    ('protocol_messages_archive', 'read_at', 'timestamptz'),
    ('protocol_organizations', 'created_at', 'timestamptz'),
    ('protocol_sessions', 'created_at', 'timestamptz'),
    ('protocol_sessions', 'ended_at', 'timestamptz'),
    ('protocol_sessions', 'updated_at', 'timestamptz'),
    ('retention_exports', 'created_at', 'timestamptz'),
    ('retention_policies', 'updated_at', 'timestamptz'),
    ('search_consumers', 'updated_at', 'timestamptz'),
    ('summaries', 'created_at', 'timestamptz'),
    ('turn_events', 'created_at', 'timestamptz'),
    ('turns', 'cancel_requested_at', 'timestamptz'),
    ('turns', 'created_at', 'timestamptz'),
    ('turns', 'finished_at', 'timestamptz'),
    ('messages', 'content', 'json'),
    ('agents', 'metadata', 'json'),
    ('archival_memories', 'metadata', 'json'),
    ('archival_memories', 'tags', 'json'),
    ('protocol_messages', 'content', 'json'),
    ('protocol_messages', 'metadata', 'json'),
    ('protocol_messages_archive', 'content', 'json'),
    ('protocol_messages_archive', 'metadata', 'json'),
    ('agent_queue', 'content', 'json'),
    ('approvals', 'input', 'json'),
    ('turn_events', 'data', 'json'),
    ('activity_events', 'payload', 'json'),
    ('protocol_meeting_events', 'data', 'json'),
    ('mcp_servers', 'config', 'jsonb'),
    ('retention_exports', 'batch_ids', 'jsonb');

-- One ALTER TABLE per table: each table is rewritten once.
DO $$
DECLARE r record;
BEGIN
    FOR r IN
        SELECT tbl, string_agg(format('ALTER COLUMN %I TYPE %s USING %s', col, ty,
                   CASE ty
                       WHEN 'timestamptz' THEN format('''epoch''::timestamptz + %I * interval ''1 millisecond''', col)
                       ELSE format('%I::%s', col, ty)
                   END), ', ') AS clauses
        FROM native_columns GROUP BY tbl ORDER BY tbl
    LOOP
        EXECUTE format('ALTER TABLE %I %s', r.tbl, r.clauses);
    END LOOP;
END
$$;

ALTER TABLE agents ALTER COLUMN metadata SET DEFAULT 'null'::json;
ALTER TABLE archival_memories ALTER COLUMN metadata SET DEFAULT 'null'::json,
    ALTER COLUMN tags SET DEFAULT '[]'::json;

ALTER TABLE protocol_sessions ADD CONSTRAINT protocol_sessions_check CHECK (agent_a_id < agent_b_id);

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT tbl, conname, def FROM native_foreign_keys LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', r.tbl, r.conname, r.def);
    END LOOP;
END
$$;

-- The searchable text of a stored message, now from JSON. A NUL character (the escape \u0000,
-- which PostgreSQL's text cannot hold) reads as a space here; the stored content keeps it.
DROP FUNCTION pattern_message_text(TEXT);
CREATE FUNCTION pattern_message_text(content JSON) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT coalesce(string_agg(
        CASE WHEN e.value->>'type' = 'text' THEN e.value->>'text' ELSE e.value->>'content' END,
        E'\n' ORDER BY e.ord), '')
    FROM jsonb_array_elements(
        regexp_replace(content::text, '(?<!\\)((?:\\\\)*)\\u0000', '\1\\u0020', 'g')::jsonb
    ) WITH ORDINALITY AS e(value, ord)
    WHERE e.value->>'type' IN ('text', 'tool_result')
$fn$;

ALTER TABLE messages ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, pattern_message_text(content))) STORED;
CREATE INDEX messages_fts ON messages USING GIN (search_tsv);
