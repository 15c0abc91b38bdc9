-- pattern: foreign-keys-off
-- Purpose: bytes per message (issue 17's storage goals, decision 0025 "Stop 39"). Every
-- message row and every entry of `messages_by_position` carried its agent's UUID as 36
-- characters of text; they now carry a small integer, the agent's `num` (a new key of
-- `agents`, assigned when the agent is created and never reused: AUTOINCREMENT). A message's
-- `role` and `batch_type` are stored as codes (0-3, in the order of their CHECK lists below;
-- `pattern_db_sqlite::messages` reads and writes them). A message of one text block whose text
-- does not start with `[` stores that text instead of its JSON (27 bytes of envelope); any
-- other content stays JSON, an array, which starts with `[` (so a reader tells them apart).
-- About 115 bytes per message fewer at 387-byte messages (nine rows to a 4 KiB page instead of
-- seven, and an entry of `messages_by_position` of 20 bytes instead of 55). Readers find an
-- agent's messages with its number; a message's agent id is its batch's.
--
-- SQLite cannot change a column or a foreign key in place: `agents` and `messages` are rebuilt.
-- The migrator runs this file with foreign keys off, inside one transaction that also records
-- the migration, and checks `foreign_key_check` before it commits (see `pattern_db::migrate`).
-- Every table that references `agents(id)` keeps doing so: `id` stays unique.

CREATE TABLE agents_new (
    id               TEXT NOT NULL UNIQUE,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    external_id      TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT 'null',
    -- Bumped by every write of the agent's history (in the same transaction): readers keep
    -- caches valid with one lookup by id.
    revision         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    live_from        INTEGER NOT NULL DEFAULT 0,
    -- The agent's number: what its messages carry instead of its id.
    num              INTEGER PRIMARY KEY AUTOINCREMENT
);
INSERT INTO agents_new (id, organization_id, name, external_id, metadata, revision, created_at,
                        live_from)
    SELECT id, organization_id, name, external_id, metadata, revision, created_at, live_from
    FROM agents ORDER BY created_at, id;
DROP TABLE agents;
ALTER TABLE agents_new RENAME TO agents;
CREATE UNIQUE INDEX agents_name_in_organization ON agents (organization_id, name);
CREATE UNIQUE INDEX agents_external_id_in_organization ON agents (organization_id, external_id);

CREATE TABLE messages_new (
    id              TEXT PRIMARY KEY NOT NULL,
    agent           INTEGER NOT NULL REFERENCES agents(num) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    batch_id        INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    sequence_num    INTEGER NOT NULL CHECK (sequence_num >= 0),
    -- 0 user_request, 1 agent_to_agent, 2 system_trigger, 3 continuation
    batch_type      INTEGER NOT NULL CHECK (batch_type BETWEEN 0 AND 3),
    -- 0 system, 1 user, 2 assistant, 3 tool
    role            INTEGER NOT NULL CHECK (role BETWEEN 0 AND 3),
    content         TEXT NOT NULL,
    token_estimate  INTEGER NOT NULL,
    archived        INTEGER NOT NULL DEFAULT 0,
    deleted         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL
);
INSERT INTO messages_new (id, agent, position, batch_id, sequence_num, batch_type, role, content,
                          token_estimate, archived, deleted, created_at)
    SELECT m.id, a.num, m.position, m.batch_id, m.sequence_num,
           CASE m.batch_type WHEN 'user_request' THEN 0 WHEN 'agent_to_agent' THEN 1
                             WHEN 'system_trigger' THEN 2 WHEN 'continuation' THEN 3 END,
           CASE m.role WHEN 'system' THEN 0 WHEN 'user' THEN 1 WHEN 'assistant' THEN 2
                       WHEN 'tool' THEN 3 END,
           CASE WHEN json_valid(m.content) AND json_type(m.content) = 'array'
                     AND json_array_length(m.content) = 1
                     AND json_type(m.content, '$[0]') = 'object'
                     AND json_extract(m.content, '$[0].type') = 'text'
                     AND json_type(m.content, '$[0].text') = 'text'
                     AND (SELECT COUNT(*) FROM json_each(m.content, '$[0]')) = 2
                     AND substr(json_extract(m.content, '$[0].text'), 1, 1) <> '['
                THEN json_extract(m.content, '$[0].text') ELSE m.content END,
           m.token_estimate, m.archived, m.deleted, m.created_at
    FROM messages m JOIN agents a ON a.id = m.agent_id
    ORDER BY m.rowid;
DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;
CREATE UNIQUE INDEX messages_by_position ON messages (agent, position);
CREATE UNIQUE INDEX messages_by_batch ON messages (batch_id, sequence_num);
