-- Purpose: undo 0004: drop archival memory, embedding bookkeeping and the search change log.
DROP TABLE IF EXISTS search_consumers;
DROP TABLE IF EXISTS search_changes;
DROP TABLE IF EXISTS embeddings;
DROP TABLE IF EXISTS embedding_jobs;
DROP TABLE IF EXISTS embedding_model;
DROP TABLE IF EXISTS archival_tags;
DROP TABLE IF EXISTS archival_memories;
