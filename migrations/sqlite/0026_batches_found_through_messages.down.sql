-- Purpose: undoes 0026: the agent-keyed batch index and the open batches' lease index again.
DROP INDEX IF EXISTS batches_by_parent;
DROP INDEX IF EXISTS batches_open;
CREATE INDEX batches_by_agent ON batches (agent_id, id);
CREATE INDEX batches_open_by_lease ON batches (lease_expires_at) WHERE state = 'open';
