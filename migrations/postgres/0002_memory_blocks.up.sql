-- Purpose: memory blocks: size-limited, versioned text that agents keep in context. A block has
-- one owner; `memory_block_access` says which agents see it (under which label and permission),
-- and `memory_block_versions` keeps every version, so no change is ever lost and any can be
-- undone. Times are Unix milliseconds (BIGINT).

CREATE TABLE memory_blocks (
    id              TEXT PRIMARY KEY NOT NULL,
    owner_agent_id  TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    label           TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    value           TEXT NOT NULL,
    char_limit      BIGINT NOT NULL CHECK (char_limit > 0),
    block_type      TEXT NOT NULL CHECK (block_type IN ('core', 'working', 'archival', 'log')),
    -- Increased by every change; a write names the version it read (optimistic concurrency).
    version         BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    UNIQUE (owner_agent_id, label)
);

-- An agent sees exactly the blocks it has a row for here; the owner gets 'admin' on create.
CREATE TABLE memory_block_access (
    block_id    TEXT NOT NULL REFERENCES memory_blocks(id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    -- The label as this agent sees it (the block's label).
    label       TEXT NOT NULL,
    permission  TEXT NOT NULL CHECK (permission IN ('read_only', 'partner', 'human', 'append', 'read_write', 'admin')),
    PRIMARY KEY (block_id, agent_id),
    UNIQUE (agent_id, label)
);

-- Full history: one row per version, the first written with the block.
CREATE TABLE memory_block_versions (
    block_id     TEXT NOT NULL REFERENCES memory_blocks(id) ON DELETE CASCADE,
    version      BIGINT NOT NULL,
    value        TEXT NOT NULL,
    description  TEXT NOT NULL,
    changed_by   TEXT NOT NULL,
    change       TEXT NOT NULL CHECK (change IN ('create', 'replace', 'append', 'insert', 'undo', 'settings')),
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (block_id, version)
);
