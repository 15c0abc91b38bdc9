-- Purpose: reverts 0029: the stored `tsvector` columns and their GIN indexes come back (the
-- optional RUM indexes of 0020 are not recreated: run 0020's block again where wanted); the
-- messages lose their writing transaction and its trigger.
ALTER TABLE messages ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, pattern_message_text(content))) STORED;
CREATE INDEX messages_fts ON messages USING GIN (search_tsv);
ALTER TABLE archival_memories ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED;
CREATE INDEX archival_fts ON archival_memories USING GIN (search_tsv);
ALTER TABLE memory_blocks ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, value)) STORED;
CREATE INDEX memory_blocks_fts ON memory_blocks USING GIN (search_tsv);

DROP TRIGGER messages_touched ON messages;
DROP FUNCTION pattern_message_touched();
DROP INDEX messages_by_txid;
ALTER TABLE messages DROP COLUMN txid;
