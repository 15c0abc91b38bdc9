-- Purpose: the agent-to-agent protocol: organizations, protocol agents (optionally linked to a
-- Pattern agent), one-to-one sessions (sync: strict turns; async: inbox) and their messages.
-- Meetings come in a later migration; `protocol_messages.meeting_id` is kept for them (no FK
-- yet). Ids are TEXT UUIDs, content and metadata TEXT JSON, times Unix milliseconds (BIGINT).

CREATE TABLE protocol_organizations (
    id           TEXT PRIMARY KEY NOT NULL,
    external_id  TEXT UNIQUE NOT NULL,
    name         TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

CREATE TABLE protocol_agents (
    id               TEXT PRIMARY KEY NOT NULL,
    external_id      TEXT UNIQUE NOT NULL,
    organization_id  TEXT NOT NULL REFERENCES protocol_organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    -- The Pattern agent behind this protocol identity, if any.
    agent_id         TEXT NULL REFERENCES agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL
);
CREATE INDEX protocol_agents_by_org ON protocol_agents (organization_id);

-- A one-to-one conversation. The pair is stored in order (byte order: the ids are compared as Rust compares them), so A-B and B-A
-- are the same session. In a sync session `locked_agent_id` is the agent whose turn it is.
CREATE TABLE protocol_sessions (
    id               TEXT PRIMARY KEY NOT NULL,
    agent_a_id       TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    agent_b_id       TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    session_type     TEXT NOT NULL CHECK (session_type IN ('sync', 'async')),
    status           TEXT NOT NULL CHECK (status IN ('active', 'waiting', 'ended')),
    locked_agent_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE SET NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    ended_at         BIGINT NULL,
    CHECK (agent_a_id COLLATE "C" < agent_b_id COLLATE "C")
);
-- At most one live session per pair and type; ended ones are history.
CREATE UNIQUE INDEX protocol_sessions_one_live
    ON protocol_sessions (agent_a_id, agent_b_id, session_type) WHERE status <> 'ended';
CREATE INDEX protocol_sessions_by_b ON protocol_sessions (agent_b_id);

-- A message goes to one recipient (possibly within a session) or to a meeting, never both.
CREATE TABLE protocol_messages (
    id            TEXT PRIMARY KEY NOT NULL,
    sender_id     TEXT NOT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
    recipient_id  TEXT NULL REFERENCES protocol_agents(id) ON DELETE CASCADE,
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
CREATE INDEX protocol_messages_unread ON protocol_messages (recipient_id, seq) WHERE read_at IS NULL;
CREATE INDEX protocol_messages_by_session ON protocol_messages (session_id, seq);
