-- pattern: foreign-keys-off
-- Purpose: messages carry their agent's id again, their own id, role and batch type as text
-- and every content as JSON, and `agents` loses its number (the tables of 0012 and 0027 as they
-- were).

CREATE TABLE messages_old (
    id              TEXT PRIMARY KEY NOT NULL,
    agent_id        TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    batch_id        INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    sequence_num    INTEGER NOT NULL CHECK (sequence_num >= 0),
    batch_type      TEXT NOT NULL CHECK (batch_type IN ('user_request', 'agent_to_agent', 'system_trigger', 'continuation')),
    role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content         TEXT NOT NULL,
    token_estimate  INTEGER NOT NULL,
    archived        INTEGER NOT NULL DEFAULT 0,
    deleted         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL
);
INSERT INTO messages_old (id, agent_id, position, batch_id, sequence_num, batch_type, role,
                          content, token_estimate, archived, deleted, created_at)
    SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-'
                 || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-'
                 || substr(hex(m.id), 21)),
           a.id, m.position, m.batch_id, m.sequence_num,
           CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent'
                             WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END,
           CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant'
                       WHEN 3 THEN 'tool' END,
           CASE WHEN substr(m.content, 1, 1) = '[' THEN m.content
                ELSE json_array(json_object('type', 'text', 'text', m.content)) END,
           m.token_estimate, m.archived, m.deleted, m.created_at
    FROM messages m JOIN agents a ON a.num = m.agent
    ORDER BY m.rowid;
DROP TABLE messages;

CREATE TABLE agents_old (
    id               TEXT PRIMARY KEY NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    external_id      TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT 'null',
    -- Bumped by every write of the agent's history (in the same transaction): readers keep
    -- caches valid with one primary-key lookup.
    revision         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    live_from        INTEGER NOT NULL DEFAULT 0
);
INSERT INTO agents_old (id, organization_id, name, external_id, metadata, revision, created_at,
                        live_from)
    SELECT id, organization_id, name, external_id, metadata, revision, created_at, live_from
    FROM agents ORDER BY num;
DROP TABLE agents;
ALTER TABLE agents_old RENAME TO agents;
CREATE UNIQUE INDEX agents_name_in_organization ON agents (organization_id, name);
CREATE UNIQUE INDEX agents_external_id_in_organization ON agents (organization_id, external_id);

ALTER TABLE messages_old RENAME TO messages;
CREATE UNIQUE INDEX messages_by_position ON messages (agent_id, position);
CREATE UNIQUE INDEX messages_by_batch ON messages (batch_id, sequence_num);
