-- Purpose: restores the index 0021 dropped (the messages of an agent's batch range).
CREATE INDEX IF NOT EXISTS messages_by_agent_batch ON messages (agent_id, batch_id, sequence_num);
