-- Purpose: full-text search of archival passages and blocks ranked by the index (decision 0004,
-- "PostgreSQL: RUM when present"). A GIN index finds the rows holding any query word but cannot
-- rank them: ranking every match reads each matching row from the heap. The RUM access method
-- (extension `rum`, Debian `postgresql-NN-rum`) stores word positions in the index and returns
-- matches in rank order, so a search reads only its best candidates (then ranked as before). Its price is on writes
-- (about 0.5 ms per passage, twelve times GIN's), so messages, written on every acknowledgement,
-- keep GIN only. The extension is optional: when it is not installed, or this role may not
-- create it, this migration only leaves a notice and searches keep the GIN path (`pattern_db`
-- checks which indexes exist). The GIN indexes stay: they serve the `@@` filters and a database
-- whose RUM indexes are dropped.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'rum') THEN
        RAISE NOTICE 'extension rum not installed: full-text search ranks every match (GIN)';
        RETURN;
    END IF;
    BEGIN
        CREATE EXTENSION IF NOT EXISTS rum;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'this role cannot create extension rum: full-text search ranks every match (GIN)';
        RETURN;
    END;
    CREATE INDEX IF NOT EXISTS archival_rum ON archival_memories
        USING rum (search_tsv rum_tsvector_ops);
    CREATE INDEX IF NOT EXISTS memory_blocks_rum ON memory_blocks
        USING rum (search_tsv rum_tsvector_ops);
END
$$;
