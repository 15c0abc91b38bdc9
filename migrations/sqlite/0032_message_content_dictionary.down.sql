-- Reverting is refused while any message's content is a zstd frame that names a dictionary
-- (its header's Dictionary_ID_flag, the low two bits of its fifth byte, not zero): a build
-- before 0032 cannot read it. (Read such rows with a build that has 0032 and write them back
-- elsewhere first.) Frames that name none are 0031's, which reverts on its own terms.
CREATE TEMP TABLE dictionary_frames (
    n INTEGER CONSTRAINT "messages hold content compressed with a dictionary (migration 0032): they cannot be reverted" CHECK (n = 0)
);
INSERT INTO dictionary_frames (n)
    SELECT COUNT(*) FROM messages
    WHERE typeof(content) = 'blob'
      AND substr(hex(substr(content, 5, 1)), 2, 1) NOT IN ('0', '4', '8', 'C');
DROP TABLE dictionary_frames;
