-- Purpose: approval requests a human can answer (decision 0011). A run that needs approval for
-- a tool call stores a row here (with the `approval_requested` event of its turn, in one
-- transaction) and waits until the row is decided or its deadline passes. Any process can
-- decide it: one conditional UPDATE (`WHERE state = 'pending'`) so exactly one decision wins.
-- A pending request whose batch ends (abandoned by a failure, a cancellation or recovery of a
-- dead run) is marked `abandoned`: it can never be approved later.
-- `organization_id`: the agent's organization at request time (NULL: a local agent of the CLI).
-- Times are Unix milliseconds.

CREATE TABLE approvals (
    id              BIGINT PRIMARY KEY NOT NULL,
    organization_id TEXT,
    agent_id        TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    batch_id        BIGINT,
    turn_id         TEXT,
    tool            TEXT NOT NULL,
    call_id         TEXT,
    input           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    requested_at    BIGINT NOT NULL,
    deadline        BIGINT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'timed_out', 'abandoned')),
    decided_at      BIGINT,
    decided_by      TEXT,
    denial_reason   TEXT
);
CREATE INDEX approvals_by_organization ON approvals (organization_id, id);
CREATE INDEX approvals_pending_by_batch ON approvals (batch_id) WHERE state = 'pending';
