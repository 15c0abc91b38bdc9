-- Purpose: each agent's durable queue: triggers that wait while a batch is in flight, and
-- scheduled wakeups (one-off or recurring). Delivering an entry begins its batch in the same
-- transaction that marks the entry delivered (or moves a recurring entry to its next time), so
-- every entry is delivered exactly once, across restarts and processes. Times are Unix
-- milliseconds.

CREATE TABLE agent_queue (
    -- A snowflake: arrival order.
    id               BIGINT PRIMARY KEY NOT NULL,
    agent_id         TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    batch_type       TEXT NOT NULL CHECK (batch_type IN ('user_request', 'agent_to_agent', 'system_trigger')),
    role             TEXT NOT NULL CHECK (role IN ('system', 'user')),
    -- The trigger's content blocks as JSON.
    content          TEXT NOT NULL,
    -- Who sent it (an endpoint, another agent, the scheduler); free text for inspection.
    source           TEXT NOT NULL DEFAULT '',
    -- Not delivered before this time.
    deliver_at       BIGINT NOT NULL,
    -- Recurring entries come back every this many milliseconds.
    every_ms         BIGINT CHECK (every_ms IS NULL OR every_ms > 0),
    -- Set when a one-off entry is delivered; recurring entries stay pending.
    delivered_at     BIGINT,
    -- The batch the latest delivery began.
    delivered_batch  BIGINT,
    deliveries       BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL
);
-- Pending entries of one agent in arrival order, and the next due entry overall.
CREATE INDEX agent_queue_pending ON agent_queue (agent_id, id) WHERE delivered_at IS NULL;
CREATE INDEX agent_queue_due ON agent_queue (deliver_at) WHERE delivered_at IS NULL;
