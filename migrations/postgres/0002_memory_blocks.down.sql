-- Purpose: undo 0002: drop memory blocks, their access rows and their history.
DROP TABLE IF EXISTS memory_block_versions;
DROP TABLE IF EXISTS memory_block_access;
DROP TABLE IF EXISTS memory_blocks;
