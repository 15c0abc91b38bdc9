-- Purpose: the search change log with AUTOINCREMENT again (as 0004 made it); `sqlite_sequence`
-- takes the largest `seq` copied back.
CREATE TABLE search_changes_old (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete'))
);
INSERT INTO search_changes_old (seq, content_type, content_id, agent_id, kind)
    SELECT seq, content_type, content_id, agent_id, kind FROM search_changes;
DROP TABLE search_changes;
ALTER TABLE search_changes_old RENAME TO search_changes;
