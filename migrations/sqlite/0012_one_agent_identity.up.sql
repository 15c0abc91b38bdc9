-- pattern: foreign-keys-off
-- Purpose: one agent identity. `protocol_agents` goes: the protocol's participants are the rows
-- of `agents`. Every agent belongs to exactly one organization (local agents of the CLI to the
-- organization with external id `local`, created here when missing), with a name and an
-- external id unique within it; organization scoping is the `organization_id` column, never a
-- name prefix (the `{organization id}/` prefix of server-made agents is removed). A protocol
-- agent linked to a Pattern agent of its organization (or of none) becomes that agent; any other
-- protocol agent becomes an agent of its own (same id). Names or external ids that would clash
-- inside an organization get `-` and the last 12 characters of the agent's id appended.
--
-- SQLite cannot change a column's constraints or a table's foreign keys in place: the tables
-- are rebuilt. The migrator runs this file with foreign keys off, inside one transaction that
-- also records the migration, and checks `foreign_key_check` before it commits (see
-- `pattern_db::migrate`).

INSERT INTO protocol_organizations (id, external_id, name, created_at)
SELECT '00000000-0000-7000-8000-000000000001', 'local', 'local',
       CAST(strftime('%s', 'now') AS INTEGER) * 1000
WHERE NOT EXISTS (SELECT 1 FROM protocol_organizations WHERE external_id = 'local');

-- Every future agent row, before uniqueness is settled.
CREATE TEMP TABLE identity_staging (
    id               TEXT PRIMARY KEY NOT NULL,
    organization_id  TEXT NOT NULL,
    name             TEXT NOT NULL,
    external_id      TEXT NULL,
    metadata         TEXT NOT NULL,
    revision         INTEGER NOT NULL,
    created_at       INTEGER NOT NULL
);

-- Existing agents: their organization, else the organization of the first protocol agent linked
-- to them, else `local`; the server's `{organization id}/` name prefix removed.
INSERT INTO identity_staging (id, organization_id, name, external_id, metadata, revision, created_at)
SELECT a.id,
       COALESCE(a.organization_id,
                (SELECT p.organization_id FROM protocol_agents p WHERE p.agent_id = a.id
                  ORDER BY p.created_at, p.id LIMIT 1),
                (SELECT o.id FROM protocol_organizations o WHERE o.external_id = 'local')),
       CASE WHEN a.organization_id IS NOT NULL
                 AND substr(a.name, 1, length(a.organization_id) + 1) = a.organization_id || '/'
                 AND length(a.name) > length(a.organization_id) + 1
            THEN substr(a.name, length(a.organization_id) + 2)
            ELSE a.name END,
       NULL, a.metadata, a.revision, a.created_at
FROM agents a;

-- Each protocol agent's agent: the linked agent when it is in the same organization and this is
-- the first protocol agent linked to it there; the protocol agent's own id otherwise.
CREATE TEMP TABLE identity_map (
    protocol_id  TEXT PRIMARY KEY NOT NULL,
    agent_id     TEXT NOT NULL,
    -- 1 when the protocol agent becomes its linked agent, 0 when it stands alone.
    merged       INTEGER NOT NULL
);
INSERT INTO identity_map (protocol_id, agent_id, merged)
SELECT p.id, CASE WHEN p.agent_id IS NOT NULL
                 AND EXISTS (SELECT 1 FROM identity_staging s
                              WHERE s.id = p.agent_id AND s.organization_id = p.organization_id)
                 AND NOT EXISTS (SELECT 1 FROM protocol_agents q
                                  WHERE q.agent_id = p.agent_id
                                    AND q.organization_id = p.organization_id
                                    AND (q.created_at < p.created_at
                                         OR (q.created_at = p.created_at AND q.id < p.id)))
            THEN p.agent_id ELSE p.id END,
       CASE WHEN p.agent_id IS NOT NULL
                 AND EXISTS (SELECT 1 FROM identity_staging s
                              WHERE s.id = p.agent_id AND s.organization_id = p.organization_id)
                 AND NOT EXISTS (SELECT 1 FROM protocol_agents q
                                  WHERE q.agent_id = p.agent_id
                                    AND q.organization_id = p.organization_id
                                    AND (q.created_at < p.created_at
                                         OR (q.created_at = p.created_at AND q.id < p.id)))
            THEN 1 ELSE 0 END
FROM protocol_agents p;

-- A merged agent takes its protocol agent's external id.
UPDATE identity_staging
SET external_id = (SELECT p.external_id FROM protocol_agents p
                    JOIN identity_map m ON m.protocol_id = p.id
                   WHERE m.agent_id = identity_staging.id AND m.merged = 1)
WHERE id IN (SELECT m.agent_id FROM identity_map m WHERE m.merged = 1);

-- Protocol agents that stand alone become agents.
INSERT INTO identity_staging (id, organization_id, name, external_id, metadata, revision, created_at)
SELECT p.id, p.organization_id, p.name, p.external_id, 'null', 0, p.created_at
FROM protocol_agents p JOIN identity_map m ON m.protocol_id = p.id
WHERE m.merged = 0;

UPDATE identity_staging SET external_id = name WHERE external_id IS NULL;

-- Uniqueness inside an organization: later clashing rows get a suffix from their id.
UPDATE identity_staging SET name = name || '-' || substr(id, length(id) - 11)
WHERE id IN (SELECT id FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY organization_id, name ORDER BY created_at, id) AS rn
    FROM identity_staging) WHERE rn > 1);
UPDATE identity_staging SET external_id = external_id || '-' || substr(id, length(id) - 11)
WHERE id IN (SELECT id FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY organization_id, external_id ORDER BY created_at, id) AS rn
    FROM identity_staging) WHERE rn > 1);

CREATE TABLE agents_new (
    id               TEXT PRIMARY KEY NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    external_id      TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT 'null',
    -- Bumped by every write of the agent's history (in the same transaction): readers keep
    -- caches valid with one primary-key lookup.
    revision         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL
);
INSERT INTO agents_new (id, organization_id, name, external_id, metadata, revision, created_at)
SELECT id, organization_id, name, external_id, metadata, revision, created_at FROM identity_staging;
DROP INDEX agents_by_organization;
DROP TABLE agents;
ALTER TABLE agents_new RENAME TO agents;
CREATE UNIQUE INDEX agents_name_in_organization ON agents (organization_id, name);
CREATE UNIQUE INDEX agents_external_id_in_organization ON agents (organization_id, external_id);

-- The protocol's tables, their agents now `agents` rows.
CREATE TABLE protocol_sessions_new (
    id               TEXT PRIMARY KEY NOT NULL,
    agent_a_id       TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    agent_b_id       TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    session_type     TEXT NOT NULL CHECK (session_type IN ('sync', 'async')),
    status           TEXT NOT NULL CHECK (status IN ('active', 'waiting', 'ended')),
    locked_agent_id  TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    ended_at         BIGINT NULL,
    CHECK (agent_a_id < agent_b_id)
);
INSERT INTO protocol_sessions_new
SELECT s.id,
       min(ma.agent_id, mb.agent_id), max(ma.agent_id, mb.agent_id),
       s.session_type, s.status,
       (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = s.locked_agent_id),
       s.created_at, s.updated_at, s.ended_at
FROM protocol_sessions s
JOIN identity_map ma ON ma.protocol_id = s.agent_a_id
JOIN identity_map mb ON mb.protocol_id = s.agent_b_id;

CREATE TABLE protocol_messages_new (
    id            TEXT PRIMARY KEY NOT NULL,
    sender_id     TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    recipient_id  TEXT NULL REFERENCES agents(id) ON DELETE CASCADE,
    session_id    TEXT NULL REFERENCES protocol_sessions(id) ON DELETE CASCADE,
    meeting_id    TEXT NULL,
    message_type  TEXT NOT NULL,
    content       TEXT NOT NULL,
    metadata      TEXT NULL,
    read_at       BIGINT NULL,
    -- Snowflake: arrival order.
    seq           BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    CHECK ((recipient_id IS NOT NULL AND meeting_id IS NULL)
        OR (recipient_id IS NULL AND meeting_id IS NOT NULL))
);
INSERT INTO protocol_messages_new
SELECT g.id, ms.agent_id, (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = g.recipient_id),
       g.session_id, g.meeting_id, g.message_type, g.content, g.metadata, g.read_at, g.seq,
       g.created_at
FROM protocol_messages g JOIN identity_map ms ON ms.protocol_id = g.sender_id;

CREATE TABLE protocol_meetings_new (
    id                  TEXT PRIMARY KEY NOT NULL,
    host_id             TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    status              TEXT NOT NULL CHECK (status IN ('created', 'ready', 'active', 'ended')),
    current_speaker_id  TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    turn_duration_ms    BIGINT NULL CHECK (turn_duration_ms IS NULL OR turn_duration_ms > 0),
    turn_started_at     BIGINT NULL,
    -- turn_started_at + turn_duration_ms while a timed turn runs: what the sweeper looks for.
    turn_deadline       BIGINT NULL,
    -- The sequence of the newest event and the newest join order handed out.
    last_event_seq      BIGINT NOT NULL CHECK (last_event_seq >= 0),
    last_join_order     BIGINT NOT NULL CHECK (last_join_order >= 0),
    created_at          BIGINT NOT NULL,
    started_at          BIGINT NULL,
    ended_at            BIGINT NULL,
    CHECK (status = 'active' OR (current_speaker_id IS NULL AND turn_deadline IS NULL)),
    CHECK ((status = 'ended') = (ended_at IS NOT NULL)),
    CHECK (turn_deadline IS NULL OR turn_duration_ms IS NOT NULL)
);
INSERT INTO protocol_meetings_new
SELECT t.id, mh.agent_id, t.status,
       (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = t.current_speaker_id),
       t.turn_duration_ms, t.turn_started_at, t.turn_deadline, t.last_event_seq,
       t.last_join_order, t.created_at, t.started_at, t.ended_at
FROM protocol_meetings t JOIN identity_map mh ON mh.protocol_id = t.host_id;

CREATE TABLE protocol_meeting_participants_new (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    status      TEXT NOT NULL
        CHECK (status IN ('invited', 'attending', 'waiting', 'speaking', 'left')),
    join_order  BIGINT NULL CHECK (join_order IS NULL OR join_order > 0),
    invited_at  BIGINT NULL,
    joined_at   BIGINT NULL,
    left_at     BIGINT NULL,
    PRIMARY KEY (meeting_id, agent_id),
    CHECK (status = 'invited' OR (join_order IS NOT NULL AND joined_at IS NOT NULL)),
    CHECK ((status = 'left') = (left_at IS NOT NULL))
);
INSERT INTO protocol_meeting_participants_new
SELECT p.meeting_id, m.agent_id, p.status, p.join_order, p.invited_at, p.joined_at, p.left_at
FROM protocol_meeting_participants p JOIN identity_map m ON m.protocol_id = p.agent_id;

CREATE TABLE protocol_meeting_events_new (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL CHECK (seq > 0),
    event_type  TEXT NOT NULL CHECK (event_type IN ('meeting_created', 'agent_invited',
        'agent_joined', 'meeting_ready', 'meeting_started', 'agent_spoke', 'turn_passed',
        'agent_left', 'agent_timed_out', 'meeting_ended')),
    agent_id    TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    data        TEXT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (meeting_id, seq)
);
INSERT INTO protocol_meeting_events_new
SELECT e.meeting_id, e.seq, e.event_type,
       (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = e.agent_id),
       e.data, e.created_at
FROM protocol_meeting_events e;

UPDATE protocol_messages_archive
SET sender_id = (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = sender_id)
WHERE sender_id IN (SELECT protocol_id FROM identity_map);
UPDATE protocol_messages_archive
SET recipient_id = (SELECT m.agent_id FROM identity_map m WHERE m.protocol_id = recipient_id)
WHERE recipient_id IN (SELECT protocol_id FROM identity_map);

DROP TABLE protocol_meeting_events;
DROP TABLE protocol_meeting_participants;
DROP TABLE protocol_messages;
DROP TABLE protocol_meetings;
DROP TABLE protocol_sessions;
DROP TABLE protocol_agents;
ALTER TABLE protocol_sessions_new RENAME TO protocol_sessions;
ALTER TABLE protocol_messages_new RENAME TO protocol_messages;
ALTER TABLE protocol_meetings_new RENAME TO protocol_meetings;
ALTER TABLE protocol_meeting_participants_new RENAME TO protocol_meeting_participants;
ALTER TABLE protocol_meeting_events_new RENAME TO protocol_meeting_events;

CREATE UNIQUE INDEX protocol_sessions_one_live
    ON protocol_sessions (agent_a_id, agent_b_id, session_type) WHERE status <> 'ended';
CREATE INDEX protocol_sessions_by_b ON protocol_sessions (agent_b_id);
CREATE INDEX protocol_messages_unread ON protocol_messages (recipient_id, seq) WHERE read_at IS NULL;
CREATE INDEX protocol_messages_by_session ON protocol_messages (session_id, seq);
CREATE INDEX protocol_messages_by_meeting ON protocol_messages (meeting_id, seq)
    WHERE meeting_id IS NOT NULL;
CREATE INDEX protocol_messages_by_created ON protocol_messages (created_at);
CREATE INDEX protocol_meetings_by_status ON protocol_meetings (status, ended_at);
CREATE INDEX protocol_meetings_deadline ON protocol_meetings (turn_deadline)
    WHERE turn_deadline IS NOT NULL;
CREATE UNIQUE INDEX protocol_meeting_participants_order
    ON protocol_meeting_participants (meeting_id, join_order);
CREATE UNIQUE INDEX protocol_meeting_participants_one_speaker
    ON protocol_meeting_participants (meeting_id) WHERE status = 'speaking';
CREATE INDEX protocol_meeting_participants_by_agent ON protocol_meeting_participants (agent_id);
CREATE INDEX protocol_meetings_by_host ON protocol_meetings (host_id);
CREATE INDEX protocol_messages_by_sender ON protocol_messages (sender_id);

CREATE TRIGGER protocol_messages_meeting_fk_insert
    BEFORE INSERT ON protocol_messages
    WHEN NEW.meeting_id IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM protocol_meetings WHERE id = NEW.meeting_id)
BEGIN
    SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed: unknown meeting');
END;
CREATE TRIGGER protocol_messages_meeting_fk_update
    BEFORE UPDATE OF meeting_id ON protocol_messages
    WHEN NEW.meeting_id IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM protocol_meetings WHERE id = NEW.meeting_id)
BEGIN
    SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed: unknown meeting');
END;
CREATE TRIGGER protocol_messages_meeting_fk_delete
    AFTER DELETE ON protocol_meetings
BEGIN
    DELETE FROM protocol_messages WHERE meeting_id = OLD.id;
END;

DROP TABLE identity_map;
DROP TABLE identity_staging;
