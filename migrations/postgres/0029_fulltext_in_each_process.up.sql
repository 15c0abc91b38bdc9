-- Purpose: full-text search on PostgreSQL moves out of the tables into a tantivy index in each
-- process (decision 0028), as on SQLite. The stored `tsvector` columns and their GIN and RUM
-- indexes go: they cost every acknowledgement a tenth of a millisecond and every archival
-- passage half a millisecond (RUM), and ranking with them reads every matching row, which left
-- a search of common words at 100k messages over 20 ms.
--
-- Each process's index follows two streams. Archival passages and blocks are logged in
-- `search_changes` like SQLite's, under the log's advisory lock (never on the acknowledgement
-- path). Messages are not logged: each row carries the transaction that last wrote it
-- (`txid`, set on insert by default and on every update by a trigger), and a follower reads the
-- rows whose transaction is at or after its mark. Transactions below a snapshot's `xmin` have
-- all ended, so the rows below it are final and the mark moves to it; rows above it that are
-- already visible are applied too, without moving the mark. Deleted messages are logged as
-- `delete` changes, as before.
ALTER TABLE messages ADD COLUMN txid xid8 NOT NULL DEFAULT '0';
ALTER TABLE messages ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
CREATE INDEX messages_by_txid ON messages (txid);

CREATE FUNCTION pattern_message_touched() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END
$fn$;
CREATE TRIGGER messages_touched BEFORE UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION pattern_message_touched();

DROP INDEX IF EXISTS archival_rum;
DROP INDEX IF EXISTS memory_blocks_rum;
DROP INDEX IF EXISTS messages_fts;
DROP INDEX IF EXISTS archival_fts;
DROP INDEX IF EXISTS memory_blocks_fts;
ALTER TABLE messages DROP COLUMN search_tsv;
ALTER TABLE archival_memories DROP COLUMN search_tsv;
ALTER TABLE memory_blocks DROP COLUMN search_tsv;
