-- Purpose: undoes 0023: ids back to TEXT, times back to Unix milliseconds (BIGINT), JSON back to
-- TEXT, the message search function back to its TEXT form.

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

ALTER TABLE protocol_sessions DROP CONSTRAINT protocol_sessions_check;
ALTER TABLE messages DROP COLUMN search_tsv;
ALTER TABLE agents ALTER COLUMN metadata DROP DEFAULT;
ALTER TABLE archival_memories ALTER COLUMN metadata DROP DEFAULT, ALTER COLUMN tags DROP DEFAULT;

-- Every column 0023 gave a native type: every such column of the schema but sqlx's own record
-- (none had one before 0023, and later migrations are undone before this one).
CREATE TEMP TABLE native_columns ON COMMIT DROP AS
SELECT table_name::text AS tbl, column_name::text AS col,
       CASE data_type WHEN 'timestamp with time zone' THEN 'timestamptz' ELSE data_type END AS ty
FROM information_schema.columns
WHERE table_schema = current_schema()
  AND table_name <> '_sqlx_migrations'
  AND data_type IN ('uuid', 'timestamp with time zone', 'json', 'jsonb');

DO $$
DECLARE r record;
BEGIN
    FOR r IN
        SELECT tbl, string_agg(format('ALTER COLUMN %I TYPE %s USING %s', col,
                   CASE ty WHEN 'timestamptz' THEN 'BIGINT' ELSE 'TEXT' END,
                   CASE ty
                       WHEN 'timestamptz' THEN format('(EXTRACT(EPOCH FROM %I) * 1000)::BIGINT', col)
                       ELSE format('%I::TEXT', col)
                   END), ', ') AS clauses
        FROM native_columns GROUP BY tbl ORDER BY tbl
    LOOP
        EXECUTE format('ALTER TABLE %I %s', r.tbl, r.clauses);
    END LOOP;
END
$$;

ALTER TABLE agents ALTER COLUMN metadata SET DEFAULT 'null';
ALTER TABLE archival_memories ALTER COLUMN metadata SET DEFAULT 'null', ALTER COLUMN tags SET DEFAULT '[]';
ALTER TABLE protocol_sessions ADD CONSTRAINT protocol_sessions_check
    CHECK ((agent_a_id COLLATE "C") < (agent_b_id COLLATE "C"));

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT tbl, conname, def FROM native_foreign_keys LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', r.tbl, r.conname, r.def);
    END LOOP;
END
$$;

DROP FUNCTION pattern_message_text(JSON);
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
