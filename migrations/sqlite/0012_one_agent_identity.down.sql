-- pattern: foreign-keys-off
-- Purpose: undo 0012_one_agent_identity. `protocol_agents` comes back with one protocol agent per
-- agent (same id, linked to it; external ids made unique across organizations by a suffix), the
-- protocol's tables point at it again, agents of the `local` organization lose their
-- organization and agents of any other keep it with the `{organization id}/` name prefix. Data
-- is kept; the identities the up migration merged stay merged. Run with foreign keys off, like
-- the up migration.

CREATE TABLE protocol_agents (
    id               TEXT PRIMARY KEY NOT NULL,
    external_id      TEXT UNIQUE NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    -- The Pattern agent behind this protocol identity, if any.
    agent_id         TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL
);
INSERT INTO protocol_agents (id, external_id, organization_id, name, agent_id, created_at)
SELECT a.id,
       CASE WHEN (SELECT COUNT(*) FROM agents b
                   WHERE b.external_id = a.external_id
                     AND (b.created_at < a.created_at OR (b.created_at = a.created_at AND b.id < a.id))) > 0
            THEN a.external_id || '-' || substr(a.id, length(a.id) - 11)
            ELSE a.external_id END,
       a.organization_id, a.name, a.id, a.created_at
FROM agents a;
CREATE INDEX protocol_agents_by_org ON protocol_agents (organization_id);

CREATE TABLE agents_old (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL UNIQUE,
    metadata    TEXT NOT NULL DEFAULT 'null',
    revision    INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    organization_id TEXT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE
);
INSERT INTO agents_old (id, name, metadata, revision, created_at, organization_id)
SELECT a.id,
       CASE WHEN o.external_id = 'local' THEN a.name ELSE a.organization_id || '/' || a.name END,
       a.metadata, a.revision, a.created_at,
       CASE WHEN o.external_id = 'local' THEN NULL ELSE a.organization_id END
FROM agents a JOIN protocol_organizations o ON o.id = a.organization_id;
DROP INDEX agents_name_in_organization;
DROP INDEX agents_external_id_in_organization;
DROP TABLE agents;
ALTER TABLE agents_old RENAME TO agents;
CREATE INDEX agents_by_organization ON agents (organization_id, name);

CREATE TABLE protocol_sessions_old (
    id               TEXT PRIMARY KEY NOT NULL,
    agent_a_id       TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    agent_b_id       TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    session_type     TEXT NOT NULL CHECK (session_type IN ('sync', 'async')),
    status           TEXT NOT NULL CHECK (status IN ('active', 'waiting', 'ended')),
    locked_agent_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    ended_at         BIGINT NULL,
    CHECK (agent_a_id < agent_b_id)
);
INSERT INTO protocol_sessions_old SELECT * FROM protocol_sessions;

CREATE TABLE protocol_messages_old (
    id            TEXT PRIMARY KEY NOT NULL,
    sender_id     TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    recipient_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    session_id    TEXT NULL REFERENCES protocol_sessions(id) ON DELETE CASCADE,
    meeting_id    TEXT NULL,
    message_type  TEXT NOT NULL,
    content       TEXT NOT NULL,
    metadata      TEXT NULL,
    read_at       BIGINT NULL,
    seq           BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    CHECK ((recipient_id IS NOT NULL AND meeting_id IS NULL)
        OR (recipient_id IS NULL AND meeting_id IS NOT NULL))
);
INSERT INTO protocol_messages_old SELECT * FROM protocol_messages;

CREATE TABLE protocol_meetings_old (
    id                  TEXT PRIMARY KEY NOT NULL,
    host_id             TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    status              TEXT NOT NULL CHECK (status IN ('created', 'ready', 'active', 'ended')),
    current_speaker_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    turn_duration_ms    BIGINT NULL CHECK (turn_duration_ms IS NULL OR turn_duration_ms > 0),
    turn_started_at     BIGINT NULL,
    turn_deadline       BIGINT NULL,
    last_event_seq      BIGINT NOT NULL CHECK (last_event_seq >= 0),
    last_join_order     BIGINT NOT NULL CHECK (last_join_order >= 0),
    created_at          BIGINT NOT NULL,
    started_at          BIGINT NULL,
    ended_at            BIGINT NULL,
    CHECK (status = 'active' OR (current_speaker_id IS NULL AND turn_deadline IS NULL)),
    CHECK ((status = 'ended') = (ended_at IS NOT NULL)),
    CHECK (turn_deadline IS NULL OR turn_duration_ms IS NOT NULL)
);
INSERT INTO protocol_meetings_old SELECT * FROM protocol_meetings;

CREATE TABLE protocol_meeting_participants_old (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
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
INSERT INTO protocol_meeting_participants_old SELECT * FROM protocol_meeting_participants;

CREATE TABLE protocol_meeting_events_old (
    meeting_id  TEXT NOT NULL REFERENCES protocol_meetings(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL CHECK (seq > 0),
    event_type  TEXT NOT NULL CHECK (event_type IN ('meeting_created', 'agent_invited',
        'agent_joined', 'meeting_ready', 'meeting_started', 'agent_spoke', 'turn_passed',
        'agent_left', 'agent_timed_out', 'meeting_ended')),
    agent_id    TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    data        TEXT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (meeting_id, seq)
);
INSERT INTO protocol_meeting_events_old SELECT * FROM protocol_meeting_events;

DROP TABLE protocol_meeting_events;
DROP TABLE protocol_meeting_participants;
DROP TABLE protocol_messages;
DROP TABLE protocol_meetings;
DROP TABLE protocol_sessions;
ALTER TABLE protocol_sessions_old RENAME TO protocol_sessions;
ALTER TABLE protocol_messages_old RENAME TO protocol_messages;
ALTER TABLE protocol_meetings_old RENAME TO protocol_meetings;
ALTER TABLE protocol_meeting_participants_old RENAME TO protocol_meeting_participants;
ALTER TABLE protocol_meeting_events_old RENAME TO protocol_meeting_events;

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
