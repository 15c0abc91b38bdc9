-- Purpose: one index fewer on `messages` (issue 17's storage goals: bytes per message and the
-- pages an acknowledgement writes). `messages_by_agent_batch (agent_id, batch_id, sequence_num)`
-- served one read, a range of an agent's batch ids; batch ids are unique across agents, so the
-- readers now look each batch up in `messages_by_batch (batch_id, sequence_num)` instead (one
-- statement: the batches, then each one's messages by that index). Every message insert
-- updated this index for that read alone.
DROP INDEX IF EXISTS messages_by_agent_batch;
