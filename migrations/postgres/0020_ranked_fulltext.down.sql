DROP INDEX IF EXISTS memory_blocks_rum;
DROP INDEX IF EXISTS archival_rum;
