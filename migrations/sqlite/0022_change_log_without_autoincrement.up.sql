-- Purpose: the search change log without AUTOINCREMENT (issue 17's storage goals: pages written
-- per acknowledgement). AUTOINCREMENT kept `seq` from being reused after the log was pruned
-- empty, at the price of an update of `sqlite_sequence` (one more page in the WAL) on every
-- write that logs a change. Pruning now always keeps the newest change (`ops::search::
-- prune_changes`), so the largest `seq` stays in the table and SQLite's own rowid rule (one more
-- than the largest) never reuses a number. A log pruned empty before this migration gets one
-- marker row at the last number `sqlite_sequence` handed out: a delete of no content, which
-- every follower has read already or applies as nothing.
CREATE TABLE search_changes_new (
    seq          INTEGER PRIMARY KEY,
    content_type TEXT NOT NULL CHECK (content_type IN ('message', 'block', 'archival')),
    content_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('text', 'vector', 'delete'))
);
INSERT INTO search_changes_new (seq, content_type, content_id, agent_id, kind)
    SELECT seq, content_type, content_id, agent_id, kind FROM search_changes;
INSERT INTO search_changes_new (seq, content_type, content_id, agent_id, kind)
    SELECT s.seq, 'message', '', '', 'delete' FROM sqlite_sequence s
    WHERE s.name = 'search_changes' AND s.seq > 0
      AND NOT EXISTS (SELECT 1 FROM search_changes);
DROP TABLE search_changes;
ALTER TABLE search_changes_new RENAME TO search_changes;
