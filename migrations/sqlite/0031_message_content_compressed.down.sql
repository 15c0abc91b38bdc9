-- Reverting is refused while any message's content is compressed: SQL cannot decompress it,
-- and a build before 0031 cannot read it. (Read such rows with a build that has 0031 and
-- write them back elsewhere first.) With none, there is nothing to undo.
CREATE TEMP TABLE compressed_messages (
    n INTEGER CONSTRAINT "messages hold compressed content (migration 0031): they cannot be reverted" CHECK (n = 0)
);
INSERT INTO compressed_messages (n)
    SELECT COUNT(*) FROM messages WHERE typeof(content) = 'blob';
DROP TABLE compressed_messages;
