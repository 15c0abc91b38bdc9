-- Purpose: undo 0004: drop full-text columns, archival memory, embedding bookkeeping and the
-- search change log.
DROP INDEX IF EXISTS memory_blocks_fts;
ALTER TABLE memory_blocks DROP COLUMN IF EXISTS search_tsv;
DROP INDEX IF EXISTS messages_fts;
ALTER TABLE messages DROP COLUMN IF EXISTS search_tsv;
DROP FUNCTION IF EXISTS pattern_message_text(TEXT);
DROP TABLE IF EXISTS search_consumers;
DROP TABLE IF EXISTS search_changes;
DROP TABLE IF EXISTS embeddings;
DROP TABLE IF EXISTS embedding_jobs;
DROP TABLE IF EXISTS embedding_model;
DROP TABLE IF EXISTS archival_tags;
DROP TABLE IF EXISTS archival_memories;
