-- Purpose: runs fenced in the database (decision 0010), so that every guarantee about an agent's
-- runs holds across processes and not only inside one.
--
-- `processes`: every open database handle (a process) registers here and renews its row while it
-- lives; on PostgreSQL it also holds a session-level advisory lock (namespace 0x5054, `lock_key`)
-- for as long as its session lives, so another process can tell at once that it died.
-- `agent_runs`: one row per agent that ever ran: the claim. `holder` names the process whose run
-- owns the agent now (NULL: free); `token` grows by one at every claim and every takeover, and
-- every write of a run carries it, so a run whose claim was taken over can write nothing.
-- `batches.claim_token`: the claim a batch was begun under (NULL: begun without one, by tools and
-- tests); at most one open batch per agent belongs to a run.
-- `turns` and `turn_events`: each run's request and the events it streamed, with dense sequence
-- numbers, so any process answers and resumes a turn; an idempotency key is unique per agent.
-- `agent_queue.turn_id`: the turn a queued trigger belongs to, whoever delivers it.
-- Times are Unix milliseconds.

CREATE TABLE processes (
    holder      TEXT PRIMARY KEY NOT NULL,
    lock_key    BIGINT NOT NULL UNIQUE,
    pid         BIGINT NOT NULL,
    host        TEXT NOT NULL,
    started_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);

CREATE TABLE agent_runs (
    agent_id    TEXT PRIMARY KEY NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    token       BIGINT NOT NULL CHECK (token >= 0),
    holder      TEXT,
    claimed_at  BIGINT,
    batch_id    BIGINT
);
-- The claims one process holds (heartbeat, shutdown, recovery of a dead process).
CREATE INDEX agent_runs_held ON agent_runs (holder) WHERE holder IS NOT NULL;

ALTER TABLE batches ADD COLUMN claim_token BIGINT;
-- Open batches of one agent left by crashes of older builds: all but the newest are dead.
UPDATE batches SET state = 'abandoned', completed_at = started_at
 WHERE state = 'open'
   AND id < (SELECT MAX(b2.id) FROM batches b2 WHERE b2.agent_id = batches.agent_id AND b2.state = 'open');
-- One run's batch per agent at a time.
CREATE UNIQUE INDEX batches_one_run ON batches (agent_id) WHERE state = 'open' AND claim_token IS NOT NULL;

CREATE TABLE turns (
    id                  TEXT PRIMARY KEY NOT NULL,
    agent_id            TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    source              TEXT NOT NULL DEFAULT '',
    idempotency_key     TEXT,
    fingerprint         TEXT,
    queue_id            BIGINT,
    batch_id            BIGINT,
    state               TEXT NOT NULL CHECK (state IN ('queued', 'running', 'finished')),
    outcome             TEXT CHECK (outcome IN ('done', 'failed', 'interrupted')),
    last_seq            BIGINT NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    cancel_requested_at BIGINT,
    created_at          BIGINT NOT NULL,
    finished_at         BIGINT
);
CREATE UNIQUE INDEX turns_by_key ON turns (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX turns_by_batch ON turns (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX turns_by_agent ON turns (agent_id, id);
CREATE INDEX turns_finished ON turns (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE turn_events (
    turn_id     TEXT NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL CHECK (seq > 0),
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (turn_id, seq)
);

ALTER TABLE agent_queue ADD COLUMN turn_id TEXT;
