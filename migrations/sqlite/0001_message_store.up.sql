-- Purpose: the core schema of the message store: agents, batches (the unit of load, cut,
-- compress and recover), messages with their batch position, summaries of compressed history,
-- the activity log, and machine-id leases that keep snowflake ids unique across processes.
-- Times are Unix milliseconds (INTEGER) so that both backends compare them the same way.

CREATE TABLE agents (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL UNIQUE,
    metadata    TEXT NOT NULL DEFAULT 'null',
    -- Bumped by every write of the agent's history (in the same transaction): readers keep
    -- caches valid with one primary-key lookup.
    revision    INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

CREATE TABLE batches (
    id               INTEGER PRIMARY KEY NOT NULL,
    agent_id         TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    batch_type       TEXT NOT NULL CHECK (batch_type IN ('user_request', 'agent_to_agent', 'system_trigger', 'continuation')),
    state            TEXT NOT NULL CHECK (state IN ('open', 'complete', 'abandoned')),
    parent_batch     INTEGER REFERENCES batches(id) ON DELETE SET NULL,
    run_owner        TEXT,
    lease_expires_at INTEGER,
    next_sequence    INTEGER NOT NULL DEFAULT 0 CHECK (next_sequence >= 0),
    continuations    INTEGER NOT NULL DEFAULT 0,
    archived         INTEGER NOT NULL DEFAULT 0,
    started_at       INTEGER NOT NULL,
    completed_at     INTEGER
);
-- Latest batches of an agent (get_recent, current_batch) without scanning its history.
CREATE INDEX batches_by_agent ON batches (agent_id, id);
-- Recovery looks only at open batches.
CREATE INDEX batches_open_by_lease ON batches (lease_expires_at) WHERE state = 'open';

CREATE TABLE messages (
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
-- Total order per agent, and the highest position in O(log n).
CREATE UNIQUE INDEX messages_by_position ON messages (agent_id, position);
-- A batch's messages in order; also makes sequence numbers unique within a batch.
CREATE UNIQUE INDEX messages_by_batch ON messages (batch_id, sequence_num);
-- The messages of an agent's latest batches (get_recent) as one index range.
CREATE INDEX messages_by_agent_batch ON messages (agent_id, batch_id, sequence_num);

-- Tool calls of each batch and the message that answered each: pairing checks cost what the
-- step costs, not what the batch already holds, and batch inspection can list tool pairs.
CREATE TABLE tool_calls (
    batch_id        INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    tool_use_id     TEXT NOT NULL,
    call_position   INTEGER NOT NULL,
    ordinal         INTEGER NOT NULL,
    result_position INTEGER,
    PRIMARY KEY (batch_id, tool_use_id)
);

CREATE TABLE summaries (
    id             INTEGER PRIMARY KEY NOT NULL,
    agent_id       TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    content        TEXT NOT NULL,
    from_batch     INTEGER NOT NULL,
    through_batch  INTEGER NOT NULL,
    message_count  INTEGER NOT NULL,
    depth          INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    CHECK (from_batch <= through_batch)
);
CREATE INDEX summaries_by_agent ON summaries (agent_id, through_batch);

CREATE TABLE activity_events (
    id          INTEGER PRIMARY KEY NOT NULL,
    agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX activity_by_agent ON activity_events (agent_id, id);

CREATE TABLE machine_leases (
    machine_id  INTEGER PRIMARY KEY NOT NULL CHECK (machine_id BETWEEN 0 AND 1023),
    holder      TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
