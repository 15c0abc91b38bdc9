-- Purpose: new messages logged as spans (issue 17's storage goals: bytes per message and import
-- speed). Every message with text used to log one `text` change naming it (about 96 bytes a
-- message, a tenth of a fresh import's database); a write now logs one `messages` change per
-- run of an agent's new messages: the agent and the first and last position of the run. A
-- follower reads the messages at those positions when it reads the change (`search_changes_after`
-- hands each out as a `text` change of the entry's `seq`). A span covers at most 512 messages,
-- so a page of the log stays bounded. Messages at those positions written later are covered
-- too, which is harmless: a text change re-reads the content's current state.
CREATE TABLE search_changes_new (
    seq            INTEGER PRIMARY KEY,
    content_type   TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id     TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete', 'messages')),
    first_position INTEGER,
    last_position  INTEGER,
    CHECK (kind <> 'messages' OR (content_type = 'message' AND content_id = ''
        AND first_position IS NOT NULL AND last_position >= first_position)),
    CHECK (kind = 'messages' OR (first_position IS NULL AND last_position IS NULL))
);
INSERT INTO search_changes_new (seq, content_type, content_id, agent_id, kind)
    SELECT seq, content_type, content_id, agent_id, kind FROM search_changes;
DROP TABLE search_changes;
ALTER TABLE search_changes_new RENAME TO search_changes;
