-- Purpose: the change log without spans: each span becomes a `text` change of every message it
-- covers, logged after the newest change (a text change re-reads the content's current state,
-- so applying it after later changes is harmless).
INSERT INTO search_changes (content_type, content_id, agent_id, kind)
    SELECT 'message', m.id, m.agent_id, 'text' FROM search_changes s
    JOIN messages m ON m.agent_id = s.agent_id
        AND m.position BETWEEN s.first_position AND s.last_position
    WHERE s.kind = 'messages'
    ORDER BY s.seq, m.position;
DELETE FROM search_changes WHERE kind = 'messages'
    AND seq < (SELECT MAX(seq) FROM search_changes);
CREATE TABLE search_changes_old (
    seq          INTEGER PRIMARY KEY,
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete'))
);
INSERT INTO search_changes_old (seq, content_type, content_id, agent_id, kind)
    SELECT seq, content_type, content_id, agent_id,
           CASE kind WHEN 'messages' THEN 'delete' ELSE kind END
    FROM search_changes;
DROP TABLE search_changes;
ALTER TABLE search_changes_old RENAME TO search_changes;
